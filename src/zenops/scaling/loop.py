"""The scaling loop: observe -> decide -> act -> record, one tick every few seconds, on the deployment's gateway host.

* observe (an :class:`Observer`): the serving replicas now, each one's metrics :class:`~zenops.scaling.decide.Sample`
  and one :class:`~zenops.scaling.heal.Health` look; the loop keeps their recent history (the windows need it);
* decide: self-healing first (:func:`zenops.scaling.heal.heal`: a replica failed for its window is replaced, the loop
  stops after repeated failures), then :func:`zenops.scaling.decide.decide` (out, in, hold), a scale-out through
  :func:`zenops.scaling.heal.gate` (the backoff after failed attempts);
* act (a :class:`Fleet`: zenops.scaling.fleet's runs the deployment's lifecycle, under its lock): out, in (drained
  first), heal (replace, or on own hosts restart vLLM). A step the deployment's lock keeps from running (an operator
  command holds it) waits for the next tick;
* record: every decision that is not a repeated hold, its result, the replica series and the attempts, in the state
  file (zenops.scaling.state).

Operator commands and the loop never fight: the pause file (zenops.scaling.state) is read before each tick and each
action; while it is there the loop acts on nothing and says ``paused``. After repeated failures the loop writes the
pause file itself (phase ``stopped``, the reason kept): removing it resumes, and the failures before no longer count.
After any pause the fleet may have changed (a rollout adds servers): the cooldown starts again.

Time and sleep come from a :class:`Clock`, so unit tests drive ticks from recorded series.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from zenops.errors import CanceledError, LockedError, ZenopsError
from zenops.scaling import decide, heal
from zenops.scaling.decide import Decision, Policy, Sample
from zenops.scaling.heal import Attempt, Backoff, Health
from zenops.scaling.phases import ScaledOut
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import (
    Phase,
    ScalingState,
    load_state,
    pause_path,
    read_pause,
    remove_pause,
    state_path,
    write_pause,
)

_T = TypeVar("_T", Sample, Health)
INTERVAL_S = 10.0  # between ticks: the metrics' scrape interval (roles/metrics)
WAIT_SLICE_S = 1.0  # how soon a pause asked between ticks is seen


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class Observation:
    """One look at the fleet at ``t``: its serving replicas, and per replica its metrics sample and its health (a
    replica missing from either: not read this time)."""

    t: float
    replicas: tuple[str, ...]
    samples: Mapping[str, Sample] = field(default_factory=dict)
    health: Mapping[str, Health] = field(default_factory=dict)


class Observer(Protocol):
    def observe(self, now: float) -> Observation:
        """The fleet now; raises ZenopsError when it cannot be looked at (the tick holds)."""
        ...


class Fleet(Protocol):
    """What the loop does to the deployment (each step under the deployment's lock: LockedError while an operator
    command holds it)."""

    def scale_out(self, count: int) -> ScaledOut:
        """``count`` replicas more, serving and in the gateway; returns their names and how long each phase took
        (zenops.scaling.phases)."""
        ...

    def scale_in(self, replicas: Sequence[str]) -> None:
        """``replicas`` drained (their in-flight requests finish), out of the gateway, deleted."""
        ...

    def heal(self, replica: str) -> str:
        """``replica`` replaced by a new one (a cloud), or its vLLM restarted (own hosts); returns what serves now."""
        ...


@dataclass(frozen=True)
class Settings:
    """What the loop keeps the fleet within. ``protected``: replicas scale-in never removes (the host the gateway
    shares); ``can_replace`` False: own hosts, healing restarts vLLM."""

    deployment: str
    bounds: Replicas
    policy: Policy
    cloud: str | None = None
    cap_per_hour: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    interval_s: float = INTERVAL_S
    protected: frozenset[str] = frozenset()
    can_replace: bool = True


@dataclass(frozen=True)
class TickResult:
    """What one tick did: its decision, the action's result ("done ...", "failed: ...", "waiting: ..." for the
    lock, "" for a hold), the loop's phase after it."""

    t: float
    decision: Decision
    result: str
    phase: Phase
    actual: int

    def line(self) -> str:
        return f"[{self.phase}] {self.decision.line()}" + (f" => {self.result}" if self.result else "")

    def to_dict(self) -> dict[str, object]:
        return {"t": self.t, "phase": self.phase, "actual": self.actual, "result": self.result,
                **self.decision.to_dict()}  # fmt: skip


class Loop:
    """The loop of one deployment; its state in ``state_dir``/scaling (zenops.scaling.state)."""

    def __init__(
        self,
        settings: Settings,
        observer: Observer,
        fleet: Fleet,
        *,
        state_dir: Path,
        clock: Clock | None = None,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.observer = observer
        self.fleet = fleet
        self.clock = clock or SystemClock()
        self.note = note or (lambda _: None)
        self.path = state_path(state_dir, settings.deployment)
        self.pause_file = pause_path(state_dir, settings.deployment)
        self.state = load_state(self.path) or ScalingState(settings.deployment, settings.bounds)
        s = self.state
        s.replicas, s.cloud, s.cap_per_hour = settings.bounds, settings.cloud, settings.cap_per_hour
        s.policy = settings.policy.to_dict()
        if s.phase == "acting":  # the loop died in a step: the lifecycle's steps are idempotent, the next tick sees
            s.phase, s.step = "idle", None
        self.samples: dict[str, deque[Sample]] = {}
        self.health: dict[str, deque[Health]] = {}

    # --- one tick ---------------------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        """Observe, decide, act, record (or, paused: record that)."""
        now = self.clock.now()
        held = self._paused(now)
        if held is not None:
            return held
        try:
            obs = self.observer.observe(now)
        except CanceledError:  # the loop stopped (systemctl stop, Ctrl-C) during a look: it ends
            raise
        except Exception as e:  # a look that failed decides nothing; the next tick looks again
            return self._end(now, Decision("hold", f"could not observe the fleet: {e}", self.state.actual), "")
        self._remember(obs)
        self.state.actual = len(obs.replicas)
        decision = self.decide(now)
        if decision.action == "hold":
            self.state.target = self.state.actual
            return self._end(now, decision, "")
        if decision.action == "stop":
            return self._stop(now, decision)
        if read_pause(self.pause_file) is not None:  # asked while observing: the step does not start
            return self.tick()
        return self._end(self.clock.now(), decision, self.act(now, decision))

    def decide(self, now: float) -> Decision:
        """Heal first (or stop), then scale; a scale-out waits out the backoff after failed attempts."""
        s, st = self.settings, self.state
        current = st.actual
        attempts = st.attempts_typed()
        healing = heal.heal(
            {n: list(h) for n, h in self.health.items()}, now=now, current=current, attempts=attempts,
            backoff=s.backoff, can_replace=s.can_replace,
        )  # fmt: skip
        if healing.action in ("stop", "heal"):
            return healing
        scaling = decide.decide(
            {n: list(v) for n, v in self.samples.items()}, now=now, current=current, bounds=s.bounds,
            last_action_t=st.last_action_t, policy=s.policy, protected=s.protected,
        )  # fmt: skip
        if scaling.action == "out":
            gated = heal.gate(attempts, now=now, current=current, backoff=s.backoff)
            if gated is not None:
                return gated
        return scaling

    def act(self, now: float, decision: Decision) -> str:
        """Run ``decision`` on the fleet; returns its result. The state says ``acting`` (and the step) meanwhile."""
        st = self.state
        st.phase, st.step = "acting", decision.line()
        st.target = decision.target
        st.record(decision, at=now, result="in flight")
        st.tick(now)
        st.save(self.path)
        self.note(f"acting: {decision.line()}")
        creates = decision.action == "out" or (decision.action == "heal" and self.settings.can_replace)
        try:
            result = self._run(decision)
        except LockedError as e:  # an operator command holds the deployment: the step waits for the next tick
            st.target = st.actual
            return f"waiting: {e.message}"
        except CanceledError:  # the loop stopped during the step (canceled as a command's): recorded, then it ends
            st.last_action_t = self.clock.now()
            st.target, st.phase, st.step = st.actual, "idle", None
            st.finish("canceled: the loop was stopped during the step")
            st.save(self.path)
            raise
        except Exception as e:
            end = self.clock.now()
            st.last_action_t = end
            if creates:
                st.attempt(Attempt(end, "failed", _what(decision), str(getattr(e, "message", "") or e)))
            st.target = st.actual
            return f"failed: {getattr(e, 'message', '') or e}"
        end = self.clock.now()
        st.last_action_t = end
        if creates:
            st.attempt(Attempt(end, "ok", _what(decision)))
        st.actual = decision.target
        for gone in decision.replicas if decision.action == "in" else ():
            self.samples.pop(gone, None)
            self.health.pop(gone, None)
        return result

    def _run(self, decision: Decision) -> str:
        if decision.action == "out":
            out = self.fleet.scale_out(decision.count)
            if out.phases:  # with the decision: its time to the new replicas in rotation, phase by phase
                self.state.timed(out.phases)
            return f"done: {', '.join(out.names)}"
        if decision.action == "in":
            self.fleet.scale_in(list(decision.replicas))
            return f"done: {', '.join(decision.replicas)} deleted"
        (replica,) = decision.replicas
        now_serving = self.fleet.heal(replica)
        self.samples.pop(replica, None)
        self.health.pop(replica, None)
        return f"done: {now_serving}"

    # --- pause, stop, record ----------------------------------------------------------------------------------

    def _paused(self, now: float) -> TickResult | None:
        """The tick of a paused (or stopped) loop, None: not paused. A loop resumed (the file gone) starts its
        cooldown again, and a stopped one forgets its failures (an Attempt ``reset``)."""
        st = self.state
        pause = read_pause(self.pause_file)
        if pause is None:
            if st.phase in ("paused", "stopped"):
                if st.stopped:
                    st.attempt(Attempt(now, "reset", "resumed"))
                    self.note(f"resumed after the stop ({st.stopped})")
                st.phase, st.stopped, st.paused_by = "idle", None, None
                st.last_action_t = now
            return None
        st.phase = "stopped" if st.stopped else "paused"
        st.paused_by, st.step = pause.to_dict(), None
        why = st.stopped or pause.line()
        return self._end(now, Decision("hold", why, st.actual), st.phase)

    def _stop(self, now: float, decision: Decision) -> TickResult:
        st = self.state
        st.stopped = decision.reason
        write_pause(self.pause_file, by="loop", reason=decision.reason, at=now)
        pause = read_pause(self.pause_file)
        st.phase, st.paused_by = "stopped", pause.to_dict() if pause else None
        self.note(f"stopped: {decision.reason}")
        return self._end(now, decision, "stopped")

    def _end(self, now: float, decision: Decision, result: str) -> TickResult:
        st = self.state
        at = now
        if st.phase == "acting":
            at = max(now, self.clock.now())  # the replicas changed when the action ended, not when it was decided
            st.phase, st.step = "idle", None
        if st.last is not None and st.last.get("result") == "in flight":
            st.finish(result)
        else:
            st.record(decision, at=now, result=result)
        st.tick(at)
        st.save(self.path)
        return TickResult(now, decision, result, st.phase, st.actual)

    def _remember(self, obs: Observation) -> None:
        """The new look into the replicas' histories, each cut to what the windows read (replicas gone: dropped)."""
        p = self.settings.policy
        keep_s = max(p.scale_out.window_s, p.scale_in.window_s) + p.max_age_s
        keep_health_s = max(heal.SERVER_WINDOW_S, heal.SERVING_WINDOW_S) + heal.MAX_AGE_S
        for name in set(self.samples) - set(obs.replicas):
            self.samples.pop(name)
        for name in set(self.health) - set(obs.replicas):
            self.health.pop(name)
        for name in obs.replicas:
            if name in obs.samples:
                _keep(self.samples.setdefault(name, deque()), obs.samples[name], obs.t - keep_s)
            if name in obs.health:
                _keep(self.health.setdefault(name, deque()), obs.health[name], obs.t - keep_health_s)

    # --- running ----------------------------------------------------------------------------------------------

    def run(self, *, ticks: int | None = None, on_tick: Callable[[TickResult], None] | None = None) -> None:
        """Tick every ``interval_s`` (``ticks``: that many, None: until stopped from outside: the service's
        systemctl stop, Ctrl-C)."""
        done = 0
        while ticks is None or done < ticks:
            result = self.tick()
            done += 1
            if on_tick is not None:
                on_tick(result)
            if ticks is not None and done >= ticks:
                return
            self.wait(self.settings.interval_s)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, in slices: a pause asked (or lifted) meanwhile ends the wait, so the loop says so at
        once."""
        end = self.clock.now() + seconds
        paused = self.state.phase in ("paused", "stopped")
        while (left := end - self.clock.now()) > 0:
            if self.pause_file.exists() != paused:
                return
            self.clock.sleep(min(left, WAIT_SLICE_S))


def _keep(history: deque[_T], item: _T, oldest: float) -> None:
    history.append(item)
    while history and history[0].t < oldest:
        history.popleft()


def _what(decision: Decision) -> str:
    """An Attempt's ``what``: "out 2 -> 3", "heal web-2"."""
    if decision.action == "out":
        return f"out {decision.current} -> {decision.target}"
    return f"{decision.action} {', '.join(decision.replicas)}"


# --- the pause protocol, the operator's side (`zenops scale pause/resume` on the loop's host) --------------------


def pause(
    state_dir: Path, deployment: str, *, by: str, reason: str = "", timeout_s: float, clock: Clock | None = None
) -> ScalingState:
    """Ask ``deployment``'s loop to pause and wait (``timeout_s`` at most) until its state says it acts on nothing
    (paused, or stopped); returns that state. A ZenopsError naming the step in flight when it does not in time (the
    pause stays asked: the loop pauses once that step ends), or when no loop has run here."""
    clock = clock or SystemClock()
    path = state_path(state_dir, deployment)
    if load_state(path) is None:
        raise ZenopsError(
            f"no scaling loop has run for {deployment} on this host (no {path})",
            hint="run this on the deployment's gateway host (`zenops up --replicas MIN..MAX` installs the loop "
            "there); `systemctl status zenops-scaler` says whether it runs",
        )
    write_pause(pause_path(state_dir, deployment), by=by, reason=reason, at=clock.now())
    end = clock.now() + timeout_s
    while True:
        st = load_state(path)
        if st is not None and st.phase in ("paused", "stopped"):
            return st
        if clock.now() >= end:
            doing = f"it is still acting: {st.step}" if st is not None and st.step else "it has not ticked since"
            raise ZenopsError(
                f"the scaling loop of {deployment} has not paused in {timeout_s:.0f} s: {doing}",
                hint="the pause stays asked: the loop pauses once that step ends (`zenops scale status` shows it; "
                f"`zenops scale resume {deployment}` withdraws it); `systemctl status zenops-scaler` says whether "
                "it runs",
            )
        clock.sleep(min(WAIT_SLICE_S, max(end - clock.now(), 0.0)))


def resume(state_dir: Path, deployment: str) -> tuple[bool, ScalingState | None]:
    """The pause withdrawn (the loop's own stop too: its failures no longer count); (whether there was one, the
    state as the loop last wrote it)."""
    was = remove_pause(pause_path(state_dir, deployment))
    return was, load_state(state_path(state_dir, deployment))
