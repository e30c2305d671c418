"""Self-healing: which replica to replace, and when to stop trying.

A replica has failed when its health observations (:class:`Health`, oldest first) have said so without a break for a
window: its server is in ERROR or SHUTOFF or gone from the cloud (``server_window_s``, default 60 s: such a server
does not come back by itself), or its gateway backend is DOWN or its vLLM does not answer (``serving_window_s``,
default 300 s: the container's restart and the model's load get the time they take before the server is written
off). The newest observation must be fresh: a replica the loop could not look at is not called dead.

Every action that creates a server (a replacement, a scale-out) ends in an :class:`Attempt`. After a failed one the
next waits (exponential backoff: 60 s, 120 s, 240 s, ... at most 15 min); after ``give_up_after`` (3) failures in a
row the loop stops and reports (a broken image or a full quota fails every time: retrying only bills). An operator
resuming the loop records an Attempt with outcome ``reset``.

On own hosts there is no server to replace: the Decision says to restart the replica's vLLM (``can_replace`` False).
Pure: given the observations, the attempts and ``now``, what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from zenops.errors import UsageError
from zenops.scaling.decide import Decision

SERVER_FAILED = frozenset({"ERROR", "SHUTOFF", "DELETED", "MISSING"})  # MISSING: the cloud no longer lists it
SERVER_WINDOW_S = 60.0
SERVING_WINDOW_S = 300.0
MAX_AGE_S = 60.0


@dataclass(frozen=True)
class Health:
    """One look at a replica at time ``t``: its server's status in the cloud (ACTIVE, BUILD, ERROR, SHUTOFF, ... or
    MISSING; None: own host, or not read), its gateway backend's (HAProxy: UP, DOWN, MAINT, DRAIN; None: not read),
    whether its vLLM answered /health (None: not asked)."""

    t: float
    server: str | None = None
    backend: str | None = None
    vllm: bool | None = None

    def server_failure(self) -> str | None:
        status = (self.server or "").upper()
        return f"server {status}" if status in SERVER_FAILED else None

    def failure(self) -> str | None:
        """What is wrong, None: nothing seen wrong (a server booting, a backend drained on purpose included)."""
        if found := self.server_failure():
            return found
        if (self.backend or "").upper() == "DOWN":
            return "backend DOWN"
        if self.vllm is False:
            return "vLLM not answering"
        return None


@dataclass(frozen=True)
class Failed:
    """A replica found failed: what is wrong (the newest observation's), for how long."""

    replica: str
    what: str
    for_s: float
    window_s: float

    def line(self) -> str:
        return f"{self.replica}: {self.what} for {self.for_s:.0f} s (window {self.window_s:.0f} s)"


def failed(
    health: Mapping[str, Sequence[Health]],
    *,
    now: float,
    server_window_s: float = SERVER_WINDOW_S,
    serving_window_s: float = SERVING_WINDOW_S,
    max_age_s: float = MAX_AGE_S,
) -> list[Failed]:
    """The replicas whose observations have said failed, without a break, for their window (the longest failing
    first, then by name)."""
    out = []
    for replica, seen in health.items():
        looks = sorted(seen, key=lambda h: h.t)
        if not looks or now - looks[-1].t > max_age_s:
            continue
        newest = looks[-1].failure()
        if newest is None:
            continue
        since = since_server = None
        for h in reversed(looks):
            if h.failure() is None:
                break
            since = h.t
        for h in reversed(looks):
            if h.server_failure() is None:
                break
            since_server = h.t
        assert since is not None
        if since_server is not None and now - since_server >= server_window_s:
            out.append(Failed(replica, newest, now - since_server, server_window_s))
        elif now - since >= serving_window_s:
            out.append(Failed(replica, newest, now - since, serving_window_s))
    return sorted(out, key=lambda f: (-f.for_s, f.replica))


@dataclass(frozen=True)
class Attempt:
    """An action that creates a server (``what``: "replace web-2", "out 2 -> 3"), ended at ``t``: ``ok``, ``failed``
    (``error``: why), or ``reset``: the operator resumed the loop (the failures before it no longer count)."""

    t: float
    outcome: Literal["ok", "failed", "reset"]
    what: str = ""
    error: str = ""


@dataclass(frozen=True)
class Backoff:
    """Wait ``first_s`` after a failed attempt, ``factor`` times longer after each further one (at most ``most_s``);
    stop after ``give_up_after`` failures in a row."""

    first_s: float = 60.0
    factor: float = 2.0
    most_s: float = 900.0
    give_up_after: int = 3

    def __post_init__(self) -> None:
        if not (self.first_s > 0 and self.factor >= 1 and self.most_s >= self.first_s and self.give_up_after >= 1):
            raise UsageError(
                f"backoff {self.first_s} s x {self.factor} up to {self.most_s} s, {self.give_up_after} tries: "
                "needs a first wait > 0, a factor >= 1, a longest wait >= the first and at least 1 try"
            )

    def wait_s(self, failures: int) -> float:
        """The wait after ``failures`` failed attempts in a row (0: none)."""
        if failures < 1:
            return 0.0
        return float(min(self.first_s * self.factor ** (failures - 1), self.most_s))


def failures_in_a_row(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The failed attempts since the last one that went well (or the operator's reset), oldest first."""
    out: list[Attempt] = []
    for a in sorted(attempts, key=lambda a: a.t):
        out = [*out, a] if a.outcome == "failed" else []
    return out


def gate(attempts: Sequence[Attempt], *, now: float, current: int, backoff: Backoff) -> Decision | None:
    """Whether an action that creates a server may run now: a ``stop`` Decision after ``give_up_after`` failures in a
    row, a ``hold`` while backing off, None: go."""
    row = failures_in_a_row(attempts)
    if not row:
        return None
    last = row[-1]
    said = f"{last.what}: {last.error}" if last.what else last.error
    if len(row) >= backoff.give_up_after:
        return Decision(
            "stop",
            f"{len(row)} attempts failed in a row (the last: {said}); the loop stopped: fix the cause (the image, "
            "the quota) and resume it",
            current,
        )
    due = last.t + backoff.wait_s(len(row))
    if now < due:
        return Decision(
            "hold",
            f"backing off: try {len(row) + 1} of {backoff.give_up_after} in {due - now:.0f} s "
            f"({len(row)} failed in a row, the last: {said})",
            current,
        )
    return None


def heal(
    health: Mapping[str, Sequence[Health]],
    *,
    now: float,
    current: int,
    attempts: Sequence[Attempt] = (),
    backoff: Backoff | None = None,
    can_replace: bool = True,
    server_window_s: float = SERVER_WINDOW_S,
    serving_window_s: float = SERVING_WINDOW_S,
    max_age_s: float = MAX_AGE_S,
) -> Decision:
    """What self-healing does now: ``stop`` (too many failures in a row: reported even when nothing is failing), else
    ``hold`` (every replica healthy, or backing off), else ``heal`` the replica failing longest, one at a time (the
    reason names the others still failing). ``can_replace`` False (own hosts): heal means restart its vLLM."""
    backoff = backoff or Backoff()
    held = gate(attempts, now=now, current=current, backoff=backoff)
    if held is not None and held.action == "stop":
        return held
    found = failed(
        health, now=now, server_window_s=server_window_s, serving_window_s=serving_window_s, max_age_s=max_age_s
    )
    if not found:
        return Decision("hold", f"no replica failed for its window ({len(health)} watched)", current)
    if held is not None:
        return held
    first, rest = found[0], found[1:]
    verb = "replace" if can_replace else "restart vLLM on"
    more = f" ({len(rest)} more failing: {', '.join(f.replica for f in rest)})" if rest else ""
    return Decision("heal", f"{verb} {first.line()}{more}", current, 1, (first.replica,))
