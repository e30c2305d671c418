"""The scaling decision: out, in or hold, from the replicas' recorded metric series.

A replica is one serving server; its :class:`Sample` sums its vLLM instances (zenops.metrics reads them:
``vllm:num_requests_waiting``, ``vllm:num_requests_running``, the KV cache usage ``vllm:kv_cache_usage_perc`` or
its older name ``vllm:gpu_cache_usage_perc``, the TTFT histogram's p95 over the scrape window).

How a target is read over its window (:func:`read`), so that one spike or one lull decides nothing:

* each replica's samples in the window give one figure: their median for scaling out (half the window over the
  target), their 90th percentile for scaling in (nine tenths of the longer window under the lower target);
* the fleet's figure is the mean of the replicas' figures (the gateway spreads the load: the mean per replica);
* a window counts only when more than half the replicas have ``min_samples`` fresh samples covering
  ``coverage`` of it; samples from before the last scaling action do not count (the fleet changed then: its figures
  per replica no longer hold), so after any action each target waits for a new window of samples.

Then (:func:`decide`): a count outside MIN..MAX is brought back first; in a cooldown after any action, hold; out when
the out-target is exceeded, in when under the in-target (hysteresis: the in-target is strictly below the out-target
and its window no shorter, :class:`Policy` refuses otherwise); never below MIN or above MAX (after the price cap);
scale-in never removes a protected replica (the host the gateway shares). Every Decision says why in one line, with
the figures.

The defaults (:func:`default_policy`) come from the plan's seats: a replica runs ``seats`` sequences at once (the sum
of its instances' max_num_seqs). Out when more than seats / 2 requests wait per replica for 60 s: the seats are all
taken and a new request waits for half of the running ones to finish, about half a request's time added to its TTFT.
In when running + waiting per replica stays under seats / 4 for 300 s: with one replica fewer the load per replica at
most doubles (from 2 replicas to 1), to under seats / 2, which still seats every request: nothing waits, so the
out-target (waiting) cannot fire right after and the fleet does not flap. Cooldown 120 s after any action.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from zenops.errors import UsageError
from zenops.scaling.replicas import Replicas

if TYPE_CHECKING:
    from zenops.planner import Plan

Metric = Literal["waiting", "load", "kv", "ttft_p95"]
METRICS: tuple[Metric, ...] = ("waiting", "load", "kv", "ttft_p95")
LABELS: Mapping[Metric, str] = {
    "waiting": "waiting/replica",
    "load": "running+waiting/replica",
    "kv": "KV cache usage",
    "ttft_p95": "TTFT p95",
}
Action = Literal["out", "in", "hold", "heal", "stop"]

# the defaults (see the module's text for why)
OUT_SHARE_OF_SEATS = 0.5
IN_SHARE_OF_SEATS = 0.25
OUT_WINDOW_S = 60.0
IN_WINDOW_S = 300.0
COOLDOWN_S = 120.0
OUT_QUANTILE = 0.5
IN_QUANTILE = 0.9


@dataclass(frozen=True)
class Sample:
    """One replica's figures at time ``t`` (seconds; any clock, the same for every sample and ``now``). None: not
    read. ``kv_usage`` is a fraction (0..1), ``ttft_p95_s`` seconds."""

    t: float
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    ttft_p95_s: float | None = None

    def value(self, metric: Metric) -> float | None:
        if metric == "waiting":
            return self.waiting
        if metric == "load":
            return None if self.running is None or self.waiting is None else self.running + self.waiting
        if metric == "kv":
            return self.kv_usage
        return self.ttft_p95_s


class InstanceRow(Protocol):
    """What :func:`sample_of` reads of one vLLM instance: zenops.metrics.top.Row's fields."""

    @property
    def running(self) -> float | None: ...
    @property
    def waiting(self) -> float | None: ...
    @property
    def kv_cache_pct(self) -> float | None: ...
    @property
    def ttft_p95_ms(self) -> float | None: ...
    @property
    def error(self) -> str | None: ...


def sample_of(t: float, rows: Sequence[InstanceRow]) -> Sample:
    """A replica's sample from its instances' rows (zenops.metrics.top.Row, direct or from Prometheus): requests
    waiting and running summed, the fullest KV cache, the slowest TTFT p95. A figure some instance did not give
    (an error row, not read) is None: a part of the replica is not a replica's figure."""

    def every(values: list[float | None]) -> list[float] | None:
        return None if not values or any(v is None for v in values) else [v for v in values if v is not None]

    ok = [r for r in rows if r.error is None]
    whole = len(ok) == len(rows)
    waiting = every([r.waiting for r in ok]) if whole else None
    running = every([r.running for r in ok]) if whole else None
    kv = every([r.kv_cache_pct for r in ok]) if whole else None
    ttft = [r.ttft_p95_ms for r in ok if r.ttft_p95_ms is not None]  # an instance that served nothing has none
    return Sample(
        t,
        waiting=sum(waiting) if waiting is not None else None,
        running=sum(running) if running is not None else None,
        kv_usage=max(kv) / 100 if kv is not None else None,
        ttft_p95_s=max(ttft) / 1000 if ttft and whole else None,
    )


@dataclass(frozen=True)
class Target:
    """Scale when the fleet's ``metric`` is over (out) or under (in) ``value`` over ``window_s`` seconds; each
    replica's figure is the ``quantile`` of its samples in the window (0.5: the median)."""

    metric: Metric
    value: float
    window_s: float
    quantile: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise UsageError(f"no scaling metric {self.metric!r}", hint=f"use one of {', '.join(METRICS)}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise UsageError(f"the {LABELS[self.metric]} target {self.value} is not a positive number")
        if self.metric == "kv" and self.value > 1:
            raise UsageError(
                f"the KV cache usage target {self.value} is over 1", hint="a fraction of the cache: 0.9 for 90%"
            )
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise UsageError(f"the scaling window {self.window_s} s is not a positive duration")
        if not 0 <= self.quantile <= 1:
            raise UsageError(f"the quantile {self.quantile} is not between 0 and 1")

    def figure(self, value: float) -> str:
        return fmt(self.metric, value)


def fmt(metric: Metric, value: float) -> str:
    """A figure as a reason shows it: 6.5, 92%, 2.40 s."""
    if metric == "kv":
        return f"{value * 100:.0f}%"
    if metric == "ttft_p95":
        return f"{value:.2f} s"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _secs(value: float) -> str:
    return f"{value:.0f} s"


@dataclass(frozen=True)
class Policy:
    """When to scale: ``scale_out`` over its target, ``scale_in`` under its (lower) target over a window no shorter;
    ``cooldown_s`` after any action; ``step_out``/``step_in`` replicas at a time. A window counts with at least
    ``min_samples`` samples per replica, the oldest at least ``coverage`` of the window back and the newest at most
    ``max_age_s`` old. Refused (UsageError) without hysteresis: scale-in must read the out metric (or, when out reads
    waiting requests, running + waiting, which is never less) with a strictly lower target."""

    scale_out: Target
    scale_in: Target
    cooldown_s: float = COOLDOWN_S
    step_out: int = 1
    step_in: int = 1
    min_samples: int = 3
    coverage: float = 0.8
    max_age_s: float = 30.0

    def __post_init__(self) -> None:
        out, in_ = self.scale_out, self.scale_in
        if in_.metric != out.metric and not (out.metric == "waiting" and in_.metric == "load"):
            raise UsageError(
                f"scale-in on {LABELS[in_.metric]} with scale-out on {LABELS[out.metric]} has no hysteresis "
                "(the one can hold while the other does: the fleet would flap)",
                hint=f"scale in on {LABELS[out.metric]} too"
                + (" (or on running+waiting/replica)" if out.metric == "waiting" else ""),
            )
        if not in_.value < out.value:
            raise UsageError(
                f"the scale-in target {in_.figure(in_.value)} is not below the scale-out target "
                f"{out.figure(out.value)}: without a gap between them the fleet flaps",
                hint="set the scale-in target lower (a half of the scale-out one is a safe start)",
            )
        if in_.window_s < out.window_s:
            raise UsageError(
                f"the scale-in window {_secs(in_.window_s)} is shorter than the scale-out window {_secs(out.window_s)}",
                hint="scale in over a longer window than out: removing a replica is the riskier step",
            )
        if not (math.isfinite(self.cooldown_s) and self.cooldown_s >= 0):
            raise UsageError(f"the scaling cooldown {self.cooldown_s} s is not a duration")
        if self.step_out < 1 or self.step_in < 1:
            raise UsageError(f"scaling steps of {self.step_out} out, {self.step_in} in: a step is at least 1 replica")
        if self.min_samples < 1 or not 0 < self.coverage <= 1 or self.max_age_s <= 0:
            raise UsageError("min_samples >= 1, 0 < coverage <= 1 and max_age_s > 0, each")

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale_out": vars(self.scale_out),
            "scale_in": vars(self.scale_in),
            "cooldown_s": self.cooldown_s,
            "step_out": self.step_out,
            "step_in": self.step_in,
        }


def seats(plan: Plan) -> int:
    """The sequences one replica runs at once: its instances' max_num_seqs summed (the plan's for an instance that
    does not say)."""
    return sum(i.max_num_seqs or plan.max_num_seqs for i in plan.instances)


def default_policy(replica_seats: int, **override: Any) -> Policy:
    """The policy from a replica's seats (:func:`seats`): out over seats x 0.5 waiting per replica for 60 s (median),
    in under seats x 0.25 running + waiting per replica for 300 s (90th percentile), cooldown 120 s. ``override``:
    any Policy field (scale_out, scale_in, cooldown_s, ...), e.g. from the loop's options."""
    if replica_seats < 1:
        raise UsageError(f"a replica of {replica_seats} seats cannot serve", hint="plan with --max-num-seqs >= 1")
    fields: dict[str, Any] = {
        "scale_out": Target("waiting", replica_seats * OUT_SHARE_OF_SEATS, OUT_WINDOW_S, OUT_QUANTILE),
        "scale_in": Target("load", replica_seats * IN_SHARE_OF_SEATS, IN_WINDOW_S, IN_QUANTILE),
        **override,
    }
    return Policy(**fields)


@dataclass(frozen=True)
class Decision:
    """What to do: ``out`` (add ``count`` replicas), ``in`` (drain and delete ``count``: ``replicas`` names them),
    ``heal`` (replace ``replicas``), ``hold``, or ``stop`` (the loop stops and reports). ``current``: the replicas it
    was decided for; ``reason``: one line with the figures."""

    action: Action
    reason: str
    current: int
    count: int = 0
    replicas: tuple[str, ...] = ()

    @property
    def target(self) -> int:
        """The replica count after the action."""
        return self.current + self.count if self.action == "out" else self.current - self.count * (self.action == "in")

    def line(self) -> str:
        """``out 2 -> 3: waiting/replica 6.5 > 4.5 ...``, ``hold 2: cooling down ...``: a status line."""
        who = f" ({', '.join(self.replicas)})" if self.replicas else ""
        if self.action in ("out", "in"):
            return f"{self.action} {self.current} -> {self.target}{who}: {self.reason}"
        return f"{self.action} {self.current}{who}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "count": self.count,
            "current": self.current,
            "target": self.target,
            "replicas": list(self.replicas),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Reading:
    """A target read over its window: the fleet's figure (None: too few samples, ``short`` says how), each
    reporting replica's figure, and how many samples it took."""

    target: Target
    value: float | None
    per_replica: Mapping[str, float] = field(default_factory=dict)
    samples: int = 0
    span_s: float = 0.0
    short: str = ""

    def said(self) -> str:
        """``waiting/replica 6.5``."""
        return f"{LABELS[self.target.metric]} {fmt(self.target.metric, self.value or 0.0)}"

    def over(self) -> str:
        """``over 60 s (median per replica, 3 replicas, 18 samples)``."""
        q = self.target.quantile
        stat = "median" if q == 0.5 else f"p{q * 100:.0f}"
        n = len(self.per_replica)
        return (
            f"over {_secs(self.span_s)} (window {_secs(self.target.window_s)}, {stat} per replica, "
            f"{n} replica{'s' * (n != 1)}, {self.samples} samples)"
        )


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between the two nearest ranks (the median of an even count: the mean
    of the middle two)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def read(
    series: Mapping[str, Sequence[Sample]],
    target: Target,
    *,
    now: float,
    current: int,
    policy: Policy,
    since: float | None = None,
) -> Reading:
    """``target``'s figure over its window ending ``now`` (and starting no earlier than ``since``, the last scaling
    action): see the module's text."""
    start = now - target.window_s
    if since is not None and since > start:
        start = since
    need_back = now - target.window_s * policy.coverage  # the oldest sample must be at least this old
    per: dict[str, float] = {}
    samples = 0
    spans: list[float] = []
    best_span, best_count = 0.0, 0
    for name, got in series.items():
        points = [(s.t, v) for s in got if start <= s.t <= now and (v := s.value(target.metric)) is not None]
        if not points:
            continue
        oldest, newest = min(t for t, _ in points), max(t for t, _ in points)
        best_span, best_count = max(best_span, now - oldest), max(best_count, len(points))
        if len(points) < policy.min_samples or oldest > need_back or now - newest > policy.max_age_s:
            continue
        per[name] = quantile([v for _, v in points], target.quantile)
        samples += len(points)
        spans.append(now - oldest)
    if len(per) * 2 <= current or not per:
        label = LABELS[target.metric]
        after = " since the last scaling action" if since is not None and since > now - target.window_s else ""
        short = (
            f"too few samples of {label}{after}: {len(per)} of {current} replica(s) have "
            f"{policy.min_samples}+ fresh samples over {_secs(target.window_s * policy.coverage)} "
            f"(the best: {best_count} over {_secs(best_span)})"
        )
        return Reading(target, None, per, samples, 0.0, short)
    return Reading(target, sum(per.values()) / len(per), per, samples, min(spans))


def _victims(reading: Reading, count: int, protected: Collection[str]) -> tuple[str, ...]:
    """The ``count`` least loaded replicas that are not protected (ties: by name)."""
    free = sorted((v, n) for n, v in reading.per_replica.items() if n not in protected)
    return tuple(n for _, n in free[:count])


def decide(
    series: Mapping[str, Sequence[Sample]],
    *,
    now: float,
    current: int,
    bounds: Replicas,
    last_action_t: float | None,
    policy: Policy,
    protected: Collection[str] = (),
) -> Decision:
    """Scale out, in or hold the ``current`` replicas within ``bounds`` (MAX after the price cap), from ``series``
    (replica name -> its samples, oldest first) at ``now``. ``last_action_t``: when the last scaling action finished
    (the fleet changed), None: none yet. ``protected``: replicas scale-in never removes (the gateway's host)."""
    if current < bounds.min:
        return Decision("out", f"{current} replica(s), below MIN {bounds.min}", current, bounds.min - current)
    if current > bounds.max:
        why = f"{current} replicas, over MAX {bounds.max}"
        free = tuple(sorted(n for n in series if n not in protected)[: current - bounds.max])
        if not free:
            return Decision("hold", f"{why}, but no replica reported is free to remove", current)
        return Decision("in", why, current, len(free), free)
    if last_action_t is not None and now - last_action_t < policy.cooldown_s:
        return Decision(
            "hold",
            f"cooling down: {_secs(now - last_action_t)} since the last scaling action "
            f"(cooldown {_secs(policy.cooldown_s)})",
            current,
        )
    out_t, in_t = policy.scale_out, policy.scale_in
    out = read(series, out_t, now=now, current=current, policy=policy, since=last_action_t)
    if out.value is not None and out.value > out_t.value:
        why = f"{out.said()} > {out_t.figure(out_t.value)} {out.over()}"
        if current >= bounds.max:
            return Decision("hold", f"at MAX {bounds.max}: {why}", current)
        return Decision("out", why, current, min(policy.step_out, bounds.max - current))
    in_ = read(series, in_t, now=now, current=current, policy=policy, since=last_action_t)
    if in_.value is not None and in_.value < in_t.value:
        why = f"{in_.said()} < {in_t.figure(in_t.value)} {in_.over()}"
        if current <= bounds.min:
            return Decision("hold", f"at MIN {bounds.min}: {why}", current)
        victims = _victims(in_, min(policy.step_in, current - bounds.min), protected)
        if not victims:
            return Decision("hold", f"{why}, but every replica left is protected (the gateway's host)", current)
        return Decision("in", why, current, len(victims), victims)
    if out.value is None and in_.value is None:
        return Decision("hold", out.short, current)
    parts = [
        f"{out.said()} <= {out_t.figure(out_t.value)} (out)" if out.value is not None else f"out: {out.short}",
        f"{in_.said()} >= {in_t.figure(in_t.value)} (in)" if in_.value is not None else f"in: {in_.short}",
    ]
    return Decision("hold", "; ".join(parts), current)
