"""Pure logic of `zenops rollout`: the batches, what changes on each host, and the performance gate's verdict.
No I/O here: zenops.rollout.run drives the hosts with it."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from zenops.errors import UsageError
from zenops.metrics.server import line as server_line

# --- batches ------------------------------------------------------------------------------------------------------

BATCH = re.compile(r"^(\d+)(%?)$")


def batch_size(spec: str, hosts: int) -> int:
    """``--batch N`` (hosts) or ``--batch P%`` (of the fleet, rounded down, at least 1)."""
    m = BATCH.match(spec.strip())
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(1)) > 100):
        raise UsageError(f"--batch {spec}: use a number of hosts (e.g. 1) or a percentage of the fleet (e.g. 25%)")
    n = int(m.group(1))
    return max(1, math.floor(hosts * n / 100)) if m.group(2) else n


def make_batches(
    hosts: Sequence[str],
    *,
    batch: str = "1",
    canary: int = 1,
    instances: Mapping[str, int] | None = None,
    max_unavailable: int | None = None,
    allow_downtime: bool = False,
) -> list[list[str]]:
    """The hosts in batches: the canary batch first (``canary`` hosts; 0: none), then ``batch`` hosts at a time.
    ``max_unavailable``: instances out of rotation at once, at most (a batch is cut to fit, never below one host).
    Hard rule: no batch takes every host of the fleet (the last serving instance is never drained), unless
    ``allow_downtime``."""
    hosts = list(hosts)
    if not hosts:
        return []
    per_host = {h: (instances or {}).get(h, 1) for h in hosts}
    size = batch_size(batch, len(hosts))
    if canary < 0:
        raise UsageError("--canary must be 0 or more")
    if max_unavailable is not None and max_unavailable < 1:
        raise UsageError("--max-unavailable must be at least 1 (an instance out at a time)")
    out: list[list[str]] = []
    rest = hosts
    if canary:
        out.append(rest[:canary])
        rest = rest[canary:]
    while rest:
        out.append(rest[:size])
        rest = rest[size:]
    if max_unavailable is not None:
        cut: list[list[str]] = []
        for b in out:
            cur: list[str] = []
            for h in b:
                if cur and sum(per_host[x] for x in cur) + per_host[h] > max_unavailable:
                    cut.append(cur)
                    cur = []
                cur.append(h)
            cut.append(cur)
        out = cut
    if not allow_downtime:
        for b in out:
            if len(b) == len(hosts):
                raise UsageError(
                    f"a batch of {len(b)} host(s) would take every instance of the deployment out of rotation "
                    f"({', '.join(b)}): the last serving instance is never drained",
                    hint="use a smaller --batch/--canary, add a host (a one-host deployment cannot roll without "
                    "downtime), or pass --allow-downtime to accept that clients are refused meanwhile",
                )
    return out


# --- what changes on a host ---------------------------------------------------------------------------------------

CHANGE_KINDS = ("model", "image", "args", "none")


def host_change(
    old_plan: Mapping[str, Any] | None,
    new_plan: Mapping[str, Any],
    old_request: Mapping[str, Any],
    new_request: Mapping[str, Any],
) -> tuple[str, list[str]]:
    """What a rollout does on one host: ``model`` (another model: new weights, a restart), ``image`` (another
    engine: vLLM/zentorch pair or image route: an image on the host, a restart), ``args`` (the same image and model,
    other serving settings: a container restart) or ``none``; with the differences in words."""
    diffs: list[str] = []
    for key in ("model", "served_model_name"):
        if old_request.get(key) != new_request.get(key):
            diffs.append(f"{key} {old_request.get(key)} -> {new_request.get(key)}")
    if diffs:
        return "model", diffs
    for key in ("image_source", "vllm", "zentorch", "prebuilt_ref", "base_image", "base_image_archive"):
        if old_request.get(key) != new_request.get(key):
            diffs.append(f"{key} {old_request.get(key)} -> {new_request.get(key)}")
    if diffs:
        return "image", diffs
    old_plan = old_plan or {}
    for key in ("platform", "dtype", "max_model_len", "max_num_seqs"):
        if old_plan.get(key) != new_plan.get(key):
            diffs.append(f"{key} {old_plan.get(key)} -> {new_plan.get(key)}")
    for key in ("shutdown_timeout", "engine_args"):  # reach the container's command, not the plan
        if old_request.get(key) != new_request.get(key):
            diffs.append(f"{key} {old_request.get(key)} -> {new_request.get(key)}")
    old_inst = [_instance_settings(i) for i in old_plan.get("instances") or []]
    new_inst = [_instance_settings(i) for i in new_plan.get("instances") or []]
    if len(old_inst) != len(new_inst):
        diffs.append(f"instances {len(old_inst)} -> {len(new_inst)}")
    elif old_inst != new_inst:
        diffs.append("per-instance settings (args, env, CPUs or ports)")
    return ("args", diffs) if diffs else ("none", [])


def _instance_settings(inst: Mapping[str, Any]) -> dict[str, Any]:
    return {k: inst.get(k) for k in ("port", "args", "env", "cpuset", "container")}


# --- the performance gate -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One bench run's figures for one server."""

    output_tok_s: float
    median_ttft_ms: float | None
    failed: int = 0
    # the server's own figures of the run (zenops.metrics.server: KV peak, preemptions, queue, batch), if read
    server: Mapping[str, Any] | None = None
    duration_s: float | None = None  # the run's wall time as the client measured it (None: not reported)


@dataclass(frozen=True)
class GateLimits:
    max_tps_drop: float = 0.10  # fail when output tok/s is lower by more than this (beyond the spread)
    max_ttft_rise: float = 0.25  # fail when median TTFT is higher by more than this (beyond the spread)
    max_spread: float = 0.25  # run-to-run spread above this: too noisy to tell


@dataclass(frozen=True)
class GateSizing:
    """How long the gate measures: by time, not by a fixed prompt count. A run of 32 prompts lasts 1.4 s on a tiny
    model, whose run-to-run spread is then 70-140% on a 2-core machine, while a release of a big model takes minutes
    for the same count. So a first run of ``first_prompts`` measures the servers' pace, and every measured run after
    it has as many prompts as last ``min_seconds`` at that pace (as MLPerf sizes its runs by a minimum duration).
    The baseline is then repeated until its last ``repeats`` runs agree within the limits' ``max_spread``, or until
    ``time_limit_s`` / ``max_repeats`` say stop (then the gate tells what it can, or pauses as too noisy)."""

    first_prompts: int = 32
    min_seconds: float = 10.0
    max_prompts: int = 4096
    repeats: int = 2  # the baseline is the last this many runs
    max_repeats: int = 5  # measured baseline runs at most (the sizing run not counted unless long enough)
    # the baseline's repeats stop once this much time went on them, per server measured one after another (hosts on
    # one kernel take turns: 3 such hosts had 2 runs each in 300 s, too few to settle a spread of 25%)
    time_limit_s: float = 300.0
    # a gate that fails on its figures alone measures again, up to this many runs in all, judged on their means: one
    # run of a no-change release measured 18% below its control on a 2-core machine (the --full run of 2026-11-27),
    # while a real regression stays below in every run
    gate_runs: int = 3


def sized_prompts(prompts: int, duration_s: float | None, sizing: GateSizing, *, concurrency: int = 1) -> int:
    """Prompts for a run of at least ``sizing.min_seconds``, from a run of ``prompts`` that lasted ``duration_s``:
    scaled by the pace, 10% over (the pace varies), a whole number of ``concurrency`` waves, never fewer than
    ``prompts`` nor more than ``max_prompts``. Unknown duration: ``prompts`` (nothing to scale by)."""
    if not duration_s or duration_s <= 0 or duration_s >= sizing.min_seconds:
        return min(prompts, sizing.max_prompts)
    n = math.ceil(prompts * sizing.min_seconds / duration_s * 1.1)
    n = math.ceil(n / max(1, concurrency)) * max(1, concurrency)
    return max(prompts, min(n, sizing.max_prompts))


def window(runs: Mapping[str, Sequence[Sample]], repeats: int) -> dict[str, list[Sample]]:
    """Each server's last ``repeats`` runs: the baseline once it settled (the first runs after a fleet's start or a
    busy minute are the noisy ones)."""
    return {server: list(samples[-repeats:]) for server, samples in runs.items()}


def settled(runs: Mapping[str, Sequence[Sample]], sizing: GateSizing, limits: GateLimits) -> bool:
    """True when every server has ``repeats`` runs and their spread is within ``max_spread``."""
    if not runs or any(len(v) < sizing.repeats for v in runs.values()):
        return False
    last = window(runs, sizing.repeats)
    return all(spread([s.output_tok_s for s in v]) <= limits.max_spread for v in last.values())


def more_baseline_runs(
    runs: Mapping[str, Sequence[Sample]],
    sizing: GateSizing,
    limits: GateLimits,
    *,
    elapsed_s: float,
    in_turn: int = 1,
) -> bool:
    """Whether the baseline measures once more: not settled yet, under ``max_repeats`` runs and inside its time
    limit (the next run would take about as long as the average one so far). ``in_turn`` servers are measured one
    after another (hosts on one kernel): each round lasts that many times longer, and the limit is each one's."""
    if settled(runs, sizing, limits):
        return False
    done = max((len(v) for v in runs.values()), default=0)
    if done < sizing.repeats:
        return True
    if done >= sizing.max_repeats:
        return False
    return elapsed_s + elapsed_s / done <= sizing.time_limit_s * max(1, in_turn)


def mean_sample(samples: Sequence[Sample]) -> Sample:
    """Several runs of one server as one: mean tok/s, duration and median TTFT (of those that have one), failed
    requests summed, the last run's server figures."""
    if len(samples) == 1:
        return samples[0]
    ttfts = [s.median_ttft_ms for s in samples if s.median_ttft_ms is not None]
    durations = [s.duration_s for s in samples if s.duration_s is not None]
    return Sample(
        statistics.fmean(s.output_tok_s for s in samples),
        statistics.fmean(ttfts) if ttfts else None,
        sum(s.failed for s in samples),
        samples[-1].server,
        statistics.fmean(durations) if durations else None,
    )


@dataclass
class Verdict:
    server: str
    outcome: str  # pass | fail | inconclusive (too noisy to tell) | busy (too busy to measure)
    reasons: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        f = self.figures
        if "new_tok_s" not in f:  # no measurement behind it (busy, or the health gate)
            return f"{self.server}: {self.outcome.upper()}" + (f" -- {'; '.join(self.reasons)}" if self.reasons else "")
        runs = f.get("new_runs") or []
        of_runs = f" (mean of {len(runs)} runs: {', '.join(f'{x:.1f}' for x in runs)})" if len(runs) > 1 else ""
        control = f" {f['control']}" if f.get("control") else ""
        parts = [
            f"output {f['new_tok_s']:.1f} tok/s{of_runs} vs baseline {f['baseline_tok_s']:.1f}",
            f"expected {f['expected_tok_s']:.1f}"
            + (f" (control{control} drift x{f['drift']:.2f})" if f.get("drift") else ""),
            f"change {f['tok_s_change']:+.0%}",
        ]
        if f.get("new_ttft_ms") is not None and f.get("baseline_ttft_ms") is not None:
            parts.append(
                f"median TTFT {f['new_ttft_ms']:.0f} ms vs {f['baseline_ttft_ms']:.0f} ms ({f['ttft_change']:+.0%})"
            )
        parts.append(f"run-to-run spread {f['spread']:.0%}")
        side = server_line(f.get("server"))
        if side:
            parts.append(side)
        return (
            f"{self.server}: {self.outcome.upper()}: "
            + ", ".join(parts)
            + (f" -- {'; '.join(self.reasons)}" if self.reasons else "")
        )


def spread(samples: Sequence[float]) -> float:
    """Relative run-to-run spread: (max - min) / mean; 0 with one sample."""
    if len(samples) < 2 or not statistics.fmean(samples):
        return 0.0
    return (max(samples) - min(samples)) / statistics.fmean(samples)


def control_drift(
    reference: Sequence[Sample], now: Sample | None, prior: tuple[float, float] = (1.0, 1.0)
) -> tuple[float | None, float | None]:
    """The machine's drift as a control server shows it (tok/s, median TTFT): now against its reference, times the
    drift ``prior`` to the reference (1.0 when the reference is the baseline). None: nothing to tell it by."""
    drift = ttft_drift = None
    if reference and now is not None:
        cb = statistics.fmean(s.output_tok_s for s in reference)
        if cb > 0:
            drift = prior[0] * now.output_tok_s / cb
        cbt = [s.median_ttft_ms for s in reference if s.median_ttft_ms is not None]
        if cbt and now.median_ttft_ms is not None and statistics.fmean(cbt) > 0:
            ttft_drift = prior[1] * now.median_ttft_ms / statistics.fmean(cbt)
    return drift, ttft_drift


def verdict(
    server: str,
    baseline: Sequence[Sample],
    new: Sample | Sequence[Sample],
    limits: GateLimits,
    *,
    fleet_spread: float,
    control_baseline: Sequence[Sample] = (),
    control_now: Sample | Sequence[Sample] | None = None,
    prior_drift: tuple[float, float] = (1.0, 1.0),
) -> Verdict:
    """Compare a changed server with its own baseline (measured before the rollout changed anything), corrected by
    an untouched control server measured at the same time as the new one (its drift is the machine's noise, not
    the change). Fails on a drop of output tok/s beyond ``max_tps_drop`` + spread, or a rise of median TTFT beyond
    ``max_ttft_rise`` + spread; inconclusive when the measured spread exceeds ``max_spread``. ``new`` and
    ``control_now`` may be several gate runs (a gate that measured again): their means are judged.

    ``prior_drift`` (tok/s, TTFT): when the control's reference (``control_baseline``) was not measured with the
    baseline but later, the machine's drift from the baseline to then (the last batch's control is a host changed
    in an earlier batch, its reference its figures at that batch's gate, whose own drift this is): the two drifts
    multiply."""
    news = [new] if isinstance(new, Sample) else list(new)
    controls = [control_now] if isinstance(control_now, Sample) else list(control_now or ())
    new = mean_sample(news)
    control_now = mean_sample(controls) if controls else None
    base_tps = statistics.fmean(s.output_tok_s for s in baseline)
    ttfts = [s.median_ttft_ms for s in baseline if s.median_ttft_ms is not None]
    base_ttft = statistics.fmean(ttfts) if ttfts else None
    sp = max(fleet_spread, spread([s.output_tok_s for s in baseline]))
    drift, ttft_drift = control_drift(control_baseline, control_now, prior_drift)
    expected = base_tps * (drift or 1.0)
    change = new.output_tok_s / expected - 1 if expected > 0 else 0.0
    figures: dict[str, Any] = {
        "baseline_tok_s": round(base_tps, 2),
        "baseline_runs": [round(s.output_tok_s, 2) for s in baseline],
        "new_tok_s": round(new.output_tok_s, 2),
        "new_runs": [round(x.output_tok_s, 2) for x in news],
        "expected_tok_s": round(expected, 2),
        "drift": round(drift, 3) if drift else None,
        "ttft_drift": round(ttft_drift, 3) if ttft_drift else None,
        "tok_s_change": round(change, 4),
        "spread": round(sp, 4),
        "baseline_ttft_ms": round(base_ttft, 1) if base_ttft is not None else None,
        "new_ttft_ms": new.median_ttft_ms,
        "ttft_change": None,
        "control_tok_s": round(control_now.output_tok_s, 2) if control_now else None,
        "control_runs": [round(x.output_tok_s, 2) for x in controls],
        "failed": new.failed,
        "max_tps_drop": limits.max_tps_drop,
        "max_ttft_rise": limits.max_ttft_rise,
        # what the server says of the new run and of the control's: a slower engine, a full KV cache or preemptions
        "server": dict(new.server) if new.server else None,
        "control_server": dict(control_now.server) if control_now and control_now.server else None,
    }
    reasons: list[str] = []
    if new.failed:
        reasons.append(f"{new.failed} request(s) failed")
    if -change > limits.max_tps_drop + sp:
        reasons.append(
            f"output tok/s {change:+.0%} is beyond -{limits.max_tps_drop:.0%} - spread {sp:.0%} (--max-tps-drop)"
        )
    if base_ttft and new.median_ttft_ms is not None:
        expected_ttft = base_ttft * (ttft_drift or 1.0)
        rise = new.median_ttft_ms / expected_ttft - 1
        figures["ttft_change"] = round(rise, 4)
        if rise > limits.max_ttft_rise + sp:
            reasons.append(
                f"median TTFT {rise:+.0%} is beyond +{limits.max_ttft_rise:.0%} + spread {sp:.0%} (--max-ttft-rise)"
            )
    if reasons:
        return Verdict(server, "fail", reasons, figures)
    if sp > limits.max_spread:
        return Verdict(
            server,
            "inconclusive",
            [f"the run-to-run spread {sp:.0%} is above --max-spread {limits.max_spread:.0%}: too noisy to tell"],
            figures,
        )
    return Verdict(server, "pass", [], figures)


# A gate run that fails this far beyond its bound is a slower release, not one run's noise: the gate does not measure
# again. Output tok/s: a drop twice its bound (max_tps_drop + spread); median TTFT: a rise four times its bound (the
# TTFT of short prompts is the noisier figure: one scheduling hiccup can double it).
GROSS_TPS = 2.0
GROSS_TTFT = 4.0


def gross(v: Verdict) -> bool:
    """True when a failing verdict's figures are so far beyond their bounds (GROSS_TPS, GROSS_TTFT) that they tell a
    slower release, not one run's noise: the gate does not measure again to average it out."""
    f = v.figures
    if v.outcome != "fail" or "tok_s_change" not in f:
        return False
    sp = float(f.get("spread") or 0.0)
    drop = -float(f["tok_s_change"])
    if drop > GROSS_TPS * (float(f["max_tps_drop"]) + sp):
        return True
    rise = f.get("ttft_change")
    return rise is not None and float(rise) > GROSS_TTFT * (float(f["max_ttft_rise"]) + sp)
