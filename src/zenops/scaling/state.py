"""The scaling loop's state on its host, and the pause file that stops it between steps.

The loop (zenops.scaling.loop) writes ``<state dir>/scaling/<deployment>.json`` after every tick (atomically, through
zenops.statefile); `zenops scale status` on the host and `zenops status` from the operator's machine (over SSH) read
it. Its schema is :class:`ScalingState` (``version`` 1):

* what the loop keeps the fleet within: ``replicas`` (MIN..MAX after the price cap), ``cap_per_hour``, ``policy``;
* where it is: ``target`` and ``actual`` replicas, ``phase`` (idle, acting, paused, stopped), ``step`` (the action
  in flight, while acting), ``paused_by`` (the pause file's content, while paused), ``stopped`` (why it stopped);
* what it did: ``decisions`` (the last 50 that were not holds, and each first hold after an action: a Decision's
  dict, ``at`` and ``result``), ``last`` (the newest decision, a hold included), ``series`` (the last 2000 ticks'
  ``[epoch_s, actual, target]``), ``attempts`` (zenops.scaling.heal.Attempt, the last 20), ``last_action_t``
  (when the last scaling action ended: the cooldown and the windows count from it across restarts). A scale-out's
  decision carries ``phases`` (zenops.scaling.phases: seconds per phase, from the decision's step to the new replicas
  in rotation); older files without it read the same.

The pause file ``<state dir>/scaling/<deployment>.pause`` (JSON: ``by``, ``reason``, ``at``) asks the loop to stop
acting: it finishes the step in flight, writes phase ``paused`` and waits until the file is gone. The loop writes
it too when it stops after repeated failures (``by`` "loop"): removing it (`zenops scale resume`) resumes the loop,
and the failures before no longer count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from zenops import statefile
from zenops.errors import ZenopsError
from zenops.scaling.decide import Decision, Policy, Target
from zenops.scaling.heal import Attempt
from zenops.scaling.phases import line as phases_line
from zenops.scaling.replicas import Replicas
from zenops.statefile import DamagedStateError

VERSION = 1
MAX_DECISIONS = 50
MAX_SERIES = 2000
MAX_ATTEMPTS = 20
Phase = Literal["idle", "acting", "paused", "stopped"]
PHASES: tuple[Phase, ...] = ("idle", "acting", "paused", "stopped")
SUBDIR = "scaling"


def state_path(state_dir: Path, deployment: str) -> Path:
    """The loop's state file of ``deployment`` under zenops's state directory (``Config.state_dir``)."""
    return state_dir / SUBDIR / f"{deployment}.json"


def pause_path(state_dir: Path, deployment: str) -> Path:
    """The pause file of ``deployment``'s loop."""
    return state_dir / SUBDIR / f"{deployment}.pause"


def iso(epoch_s: float) -> str:
    """An epoch time as the state writes it: ISO 8601, UTC, to the second."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


def policy_from_dict(data: Mapping[str, Any]) -> Policy:
    """A Policy from :meth:`Policy.to_dict` (its targets, cooldown and steps; the rest: Policy's defaults). A bad
    value is Policy's UsageError."""
    return Policy(
        scale_out=Target(**dict(data["scale_out"])),
        scale_in=Target(**dict(data["scale_in"])),
        **{k: data[k] for k in ("cooldown_s", "step_out", "step_in") if k in data},
    )


@dataclass
class ScalingState:
    """The loop's state (see the module's text). Mutable: the loop changes it, then :meth:`save`s it."""

    deployment: str
    replicas: Replicas
    cloud: str | None = None
    cap_per_hour: float | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    target: int = 0
    actual: int = 0
    phase: Phase = "idle"
    step: str | None = None
    paused_by: dict[str, Any] | None = None
    stopped: str | None = None
    updated_at: str = ""
    last_action_t: float | None = None
    last: dict[str, Any] | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    series: list[list[float]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)

    # --- what the loop records ----------------------------------------------------------------------------------

    def record(self, decision: Decision, *, at: float, result: str = "") -> None:
        """``decision`` (decided at ``at``, epoch s) as the newest; kept in ``decisions`` unless it is a hold that
        follows a hold (a loop ticking every few seconds would keep nothing else). ``result``: "done", "failed:
        ...", "" for a hold."""
        entry = {**decision.to_dict(), "at": iso(at), "result": result}
        self.last = entry
        if decision.action == "hold" and self.decisions and self.decisions[-1]["action"] == "hold":
            return
        self.decisions = [*self.decisions, entry][-MAX_DECISIONS:]

    def finish(self, result: str) -> None:
        """The newest decision's result, once its action ended."""
        if self.last is not None:
            self.last["result"] = result
        if self.decisions and self.last is not None and self.decisions[-1]["at"] == self.last["at"]:
            self.decisions[-1]["result"] = result

    def timed(self, phases: Mapping[str, float]) -> None:
        """The newest decision's ``phases`` (zenops.scaling.phases: seconds per phase of its scale-out)."""
        if self.last is None:
            return
        self.last["phases"] = dict(phases)
        if self.decisions and self.decisions[-1]["at"] == self.last["at"]:
            self.decisions[-1]["phases"] = dict(phases)

    def tick(self, at: float) -> None:
        """One point of the replica series (``at``, actual, target), and the time of this write."""
        self.series = [*self.series, [round(at, 1), self.actual, self.target]][-MAX_SERIES:]
        self.updated_at = iso(at)

    def attempt(self, a: Attempt) -> None:
        self.attempts = [*self.attempts, attempt_to_dict(a)][-MAX_ATTEMPTS:]

    def attempts_typed(self) -> list[Attempt]:
        return [attempt_from_dict(a) for a in self.attempts]

    # --- (de)serialisation ----------------------------------------------------------------------------------

    def summary(self) -> str:
        """``scaling: 2 replicas (1..3, cap $2.50/h), target 2, idle; last: out 1 -> 2 at 12:03:10 (...)``."""
        cap = f", cap ${self.cap_per_hour:.2f}/h" if self.cap_per_hour is not None else ""
        phase: str = self.phase
        if self.phase == "acting" and self.step:
            phase = f"acting: {self.step}"
        elif self.phase == "stopped" and self.stopped:
            phase = f"stopped: {self.stopped}"
        elif self.phase == "paused" and self.paused_by:
            phase = f"paused by {self.paused_by.get('by', '?')}" + (
                f" ({self.paused_by['reason']})" if self.paused_by.get("reason") else ""
            )
        line = f"scaling: {self.actual} replicas ({self.replicas}{cap}), target {self.target}, {phase}"
        acted = [d for d in self.decisions if d.get("action") != "hold"]
        if acted:
            line += f"; last: {decision_line(acted[-1])}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "deployment": self.deployment,
            "cloud": self.cloud,
            "replicas": self.replicas.to_dict(),
            "cap_per_hour": self.cap_per_hour,
            "policy": dict(self.policy),
            "target": self.target,
            "actual": self.actual,
            "phase": self.phase,
            "step": self.step,
            "paused_by": self.paused_by,
            "stopped": self.stopped,
            "updated_at": self.updated_at,
            "last_action_t": self.last_action_t,
            "last": self.last,
            "decisions": list(self.decisions),
            "series": [list(p) for p in self.series],
            "attempts": list(self.attempts),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, path: Path | None = None) -> ScalingState:
        """The state from its JSON; DamagedStateError (naming ``path``) when it is not the shape written, a
        ZenopsError when a newer zenops wrote it."""
        where = path or Path("scaling state")
        version = data.get("version")
        if isinstance(version, int) and version > VERSION:
            raise ZenopsError(
                f"{where}: scaling state version {version}, this zenops reads version {VERSION}",
                hint="upgrade zenops here to the version the loop runs",
            )
        if version != VERSION:
            raise DamagedStateError(where, f"scaling state version {version!r}, expected {VERSION}")
        try:
            bounds = data["replicas"]
            phase = str(data.get("phase") or "idle")
            if phase not in PHASES:
                raise ValueError(f"phase {phase!r}")
            cap = data.get("cap_per_hour")
            last_t = data.get("last_action_t")
            return cls(
                deployment=str(data["deployment"]),
                replicas=Replicas(int(bounds["min"]), int(bounds["max"])),
                cloud=str(data["cloud"]) if data.get("cloud") else None,
                cap_per_hour=float(cap) if cap is not None else None,
                policy=dict(data.get("policy") or {}),
                target=int(data.get("target") or 0),
                actual=int(data.get("actual") or 0),
                phase=phase,
                step=str(data["step"]) if data.get("step") else None,
                paused_by=dict(data["paused_by"]) if data.get("paused_by") else None,
                stopped=str(data["stopped"]) if data.get("stopped") else None,
                updated_at=str(data.get("updated_at") or ""),
                last_action_t=float(last_t) if last_t is not None else None,
                last=dict(data["last"]) if data.get("last") else None,
                decisions=[dict(d) for d in data.get("decisions") or []][-MAX_DECISIONS:],
                series=[[float(x) for x in p] for p in data.get("series") or []][-MAX_SERIES:],
                attempts=[attempt_to_dict(attempt_from_dict(a)) for a in data.get("attempts") or []][-MAX_ATTEMPTS:],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise DamagedStateError(where, f"not a scaling state: {type(e).__name__} {e}") from e

    def save(self, path: Path) -> Path:
        """Written atomically (zenops.statefile: a reader sees the old state or the new one, never a part)."""
        return statefile.write_json(path, self.to_dict())


def load_state(path: Path) -> ScalingState | None:
    """The state in ``path``; None when there is none; DamagedStateError naming it when it cannot be read."""
    data = statefile.read_json_object(path)
    return None if data is None else ScalingState.from_dict(data, path=path)


def decision_line(d: Mapping[str, Any]) -> str:
    """A recorded decision in one line: ``out 1 -> 2 at 12:03:10 (waiting/replica 5.5 > 4 ...): done: web-2``."""
    who = f" {', '.join(d.get('replicas') or [])}" if d.get("replicas") else ""
    moved = f" {d.get('current')} -> {d.get('target')}" if d.get("action") in ("out", "in") else ""
    at = str(d.get("at") or "")[11:19]
    result = f": {d['result']}" if d.get("result") else ""
    took = f" [{phases_line(d['phases'])}]" if d.get("phases") else ""
    return f"{d.get('action')}{moved}{who} at {at} ({d.get('reason')}){result}{took}"


def attempt_to_dict(a: Attempt) -> dict[str, Any]:
    return {"t": a.t, "outcome": a.outcome, "what": a.what, "error": a.error}


def attempt_from_dict(data: Mapping[str, Any]) -> Attempt:
    outcome = str(data["outcome"])
    if outcome not in ("ok", "failed", "reset"):
        raise ValueError(f"attempt outcome {outcome!r}")
    t = float(data["t"])
    if not math.isfinite(t):
        raise ValueError(f"attempt time {t}")
    return Attempt(t, cast(Any, outcome), str(data.get("what") or ""), str(data.get("error") or ""))


# --- the pause file -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pause:
    """Who asked the loop to pause, why, and when (ISO 8601)."""

    by: str
    reason: str
    at: str

    def to_dict(self) -> dict[str, str]:
        return {"by": self.by, "reason": self.reason, "at": self.at}

    def line(self) -> str:
        return f"paused by {self.by} at {self.at}" + (f": {self.reason}" if self.reason else "")


def write_pause(path: Path, *, by: str, reason: str = "", at: float) -> Pause:
    """Ask the loop to pause (the file replaced atomically: a second pause says who asked last)."""
    pause = Pause(by, reason, iso(at))
    statefile.write_json(path, pause.to_dict())
    return pause


def read_pause(path: Path) -> Pause | None:
    """The pause asked, None: none. A damaged pause file still pauses (its content unknown: said so)."""
    try:
        data = statefile.read_json_object(path)
    except DamagedStateError as e:
        return Pause("?", f"the pause file is damaged ({e.reason})", "")
    if data is None:
        return None
    return Pause(str(data.get("by") or "?"), str(data.get("reason") or ""), str(data.get("at") or ""))


def remove_pause(path: Path) -> bool:
    """The pause file removed; False: there was none."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
