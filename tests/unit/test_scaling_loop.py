"""zenops.scaling.loop: ticks driven by a clock, recorded metric series and health looks, against a test double of
the fleet. Each test reads what the loop decided and did from the state file it wrote (zenops.scaling.state)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from zenops.errors import CanceledError, LockedError, ZenopsError
from zenops.scaling.decide import Sample, default_policy
from zenops.scaling.heal import Backoff, Health
from zenops.scaling.loop import Loop, Observation, Settings
from zenops.scaling.phases import ScaledOut
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import load_state, pause_path, read_pause, state_path, write_pause

SEATS = 8  # out: waiting/replica > 4 for 60 s; in: running+waiting/replica < 2 for 300 s; cooldown 120 s
STEP_S = 10.0
BOUNDS = Replicas(1, 3)

# recorded per-replica figures: (from t, waiting, running), the last row that started applies
BUSY = [(0.0, 12.0, 8.0)]
RISE_THEN_STOP = [(0.0, 0.0, 1.0), (100.0, 12.0, 8.0), (600.0, 0.0, 0.0)]


def figures(profile: Sequence[tuple[float, float, float]], t: float) -> tuple[float, float]:
    rows = [r for r in profile if r[0] <= t]
    _, waiting, running = rows[-1]
    return waiting, running


@dataclass
class FakeClock:
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class FakeFleet:
    """The fleet as the loop sees it: replica names, a load profile for each, servers' statuses, and what failing
    steps raise."""

    replicas: list[str] = field(default_factory=lambda: ["web-1"])
    profile: Sequence[tuple[float, float, float]] = tuple(BUSY)
    server: dict[str, str] = field(default_factory=dict)  # replica -> cloud status (default ACTIVE)
    fail_out: Exception | None = None
    calls: list[tuple[str, object]] = field(default_factory=list)
    born: int = 1
    phases: dict[str, float] = field(default_factory=dict)  # what each scale-out says its phases took

    def observe(self, now: float) -> Observation:
        waiting, running = figures(self.profile, now)
        return Observation(
            now,
            tuple(self.replicas),
            {n: Sample(now, waiting=waiting, running=running) for n in self.replicas},
            {n: Health(now, server=self.server.get(n, "ACTIVE"), backend="UP") for n in self.replicas},
        )

    def scale_out(self, count: int) -> ScaledOut:
        self.calls.append(("out", count))
        if self.fail_out is not None:
            raise self.fail_out
        made = []
        for _ in range(count):
            self.born += 1
            made.append(f"web-{self.born}")
        self.replicas += made
        return ScaledOut(made, dict(self.phases))

    def scale_in(self, replicas: Sequence[str]) -> None:
        self.calls.append(("in", tuple(replicas)))
        self.replicas = [r for r in self.replicas if r not in replicas]

    def heal(self, replica: str) -> str:
        self.calls.append(("heal", replica))
        self.replicas.remove(replica)
        self.server.pop(replica, None)
        self.born += 1
        self.replicas.append(f"web-{self.born}")
        return f"web-{self.born}"


def make(
    tmp_path: Path, fleet: FakeFleet, *, bounds: Replicas = BOUNDS, cooldown_s: float = 120.0, **kw: object
) -> tuple[Loop, FakeClock]:
    clock = FakeClock()
    policy = default_policy(SEATS, cooldown_s=cooldown_s)
    settings = Settings("fleet", bounds, policy, cloud="sandbox", interval_s=STEP_S, **kw)  # type: ignore[arg-type]
    return Loop(settings, fleet, fleet, state_dir=tmp_path, clock=clock), clock


def run_until(loop: Loop, clock: FakeClock, end: float, each: Callable[[float], None] | None = None) -> None:
    while clock.t <= end:
        if each is not None:
            each(clock.t)
        loop.tick()
        clock.t += STEP_S


def actions(tmp_path: Path) -> list[tuple[str, float]]:
    """The non-hold decisions the state file kept: (action, seconds)."""
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    return [(d["action"], datetime.fromisoformat(d["at"]).timestamp()) for d in st.decisions if d["action"] != "hold"]


def test_load_rises_the_loop_scales_out_after_the_window_then_cools_down_and_stops_at_max(tmp_path: Path) -> None:
    fleet = FakeFleet()
    loop, clock = make(tmp_path, fleet)
    run_until(loop, clock, 600)
    outs = [t for a, t in actions(tmp_path) if a == "out"]
    assert fleet.calls == [("out", 1), ("out", 1)]
    assert fleet.replicas == ["web-1", "web-2", "web-3"]
    assert 48 <= outs[0] <= 60  # 80% of the 60 s window covered, not before
    assert outs[1] - outs[0] >= 120  # the cooldown
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert (st.actual, st.target, st.phase) == (3, 3, "idle")
    assert st.last is not None
    assert "at MAX 3" in st.last["reason"]
    assert [d["result"] for d in st.decisions if d["action"] == "out"] == ["done: web-2", "done: web-3"]
    assert st.series[-1][1:] == [3, 3]
    assert len(st.series) == 61 + 2  # a point each tick, and one when each action began (its target)
    assert [p[1:] for p in st.series if p[0] == outs[0]] == [[1, 2], [2, 2]]


def test_a_scale_out_keeps_its_phases_with_its_decision(tmp_path: Path) -> None:
    fleet = FakeFleet(phases={"provision": 61.0, "docker": 38.0, "image": 92.0, "total": 250.0})
    loop, clock = make(tmp_path, fleet)
    run_until(loop, clock, 100)
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    outs = [d for d in st.decisions if d["action"] == "out"]
    assert [d.get("phases") for d in outs] == [fleet.phases]
    assert [d.get("phases") for d in st.decisions if d["action"] != "out"] == [None] * (len(st.decisions) - 1)


def test_load_stops_the_loop_scales_in_only_after_the_longer_window_and_never_below_min(tmp_path: Path) -> None:
    fleet = FakeFleet(profile=RISE_THEN_STOP)
    loop, clock = make(tmp_path, fleet)
    run_until(loop, clock, 2000)
    seen = actions(tmp_path)
    ins = [t for a, t in seen if a == "in"]
    assert [a for a, _ in seen] == ["out", "out", "in", "in"]
    assert ins[0] >= 600 + 300 * 0.8  # the in-window (300 s, 80% covered) after the load stopped at 600 s
    assert ins[1] - ins[0] >= 120
    assert len(fleet.replicas) == 1  # MIN 1
    assert [c for c in fleet.calls if c[0] == "in"] == [("in", ("web-1",)), ("in", ("web-2",))]  # equal load: by name


def test_scale_in_never_removes_the_protected_replica(tmp_path: Path) -> None:
    fleet = FakeFleet(replicas=["gw-host", "web-2"], profile=[(0.0, 0.0, 0.0)])
    loop, clock = make(tmp_path, fleet, protected=frozenset({"gw-host"}))
    run_until(loop, clock, 400)
    assert fleet.calls == [("in", ("web-2",))]
    assert fleet.replicas == ["gw-host"]


def test_a_server_in_error_for_its_window_is_replaced(tmp_path: Path) -> None:
    fleet = FakeFleet(replicas=["web-1", "web-2"], profile=[(0.0, 1.0, 4.0)], born=2)
    loop, clock = make(tmp_path, fleet)

    def break_web2(t: float) -> None:
        if t == 100:
            fleet.server["web-2"] = "ERROR"

    run_until(loop, clock, 300, break_web2)
    assert fleet.calls == [("heal", "web-2")]
    assert fleet.replicas == ["web-1", "web-3"]
    healed = [t for a, t in actions(tmp_path) if a == "heal"]
    assert healed == [160.0]  # 60 s in ERROR (the server window), not before
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert [a.outcome for a in st.attempts_typed()] == ["ok"]


def test_repeated_add_failures_back_off_then_stop_the_loop_with_the_reason(tmp_path: Path) -> None:
    fleet = FakeFleet(fail_out=ZenopsError("quota exceeded: 0 cores left"))
    # a short cooldown: the backoff, not the cooldown, spaces the attempts
    backoff = Backoff(first_s=60, factor=2, most_s=900, give_up_after=3)
    loop, clock = make(tmp_path, fleet, cooldown_s=10.0, backoff=backoff)
    run_until(loop, clock, 1200)
    assert fleet.calls == [("out", 1)] * 3  # then no more: stopped
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert st.phase == "stopped"
    assert st.stopped is not None
    assert "3 attempts failed in a row" in st.stopped
    assert "quota exceeded" in st.stopped
    pause = read_pause(pause_path(tmp_path, "fleet"))
    assert pause is not None
    assert pause.by == "loop"
    failed = [d for d in st.decisions if d["action"] == "out"]
    assert [d["result"] for d in failed] == ["failed: quota exceeded: 0 cores left"] * 3
    times = [t for a, t in actions(tmp_path) if a == "out"]
    assert times[1] - times[0] >= 60
    assert times[2] - times[1] >= 120

    # resumed (the pause file removed): the failures before no longer count, the loop tries again
    pause_path(tmp_path, "fleet").unlink()
    fleet.fail_out = None
    run_until(loop, clock, clock.t + 200)
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert st.phase == "idle"
    assert st.stopped is None
    assert fleet.calls[-1] == ("out", 1)
    assert "web-2" in fleet.replicas
    outcomes = [a.outcome for a in st.attempts_typed()]
    assert outcomes[:4] == ["failed", "failed", "failed", "reset"]
    assert outcomes[4:]
    assert set(outcomes[4:]) == {"ok"}


def test_a_pause_file_stops_every_action_and_the_state_says_paused(tmp_path: Path) -> None:
    fleet = FakeFleet()
    loop, clock = make(tmp_path, fleet)
    write_pause(pause_path(tmp_path, "fleet"), by="rollout", reason="rolling out", at=0)
    run_until(loop, clock, 600)
    assert fleet.calls == []
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert st.phase == "paused"
    assert st.paused_by is not None
    assert st.paused_by["by"] == "rollout"
    pause_path(tmp_path, "fleet").unlink()
    run_until(loop, clock, clock.t + 100)
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert st.phase == "idle"
    assert st.paused_by is None
    assert fleet.calls == []  # resumed: the cooldown (120 s) starts again, the fleet may have changed


def test_a_locked_deployment_makes_the_step_wait_without_counting_a_failure(tmp_path: Path) -> None:
    fleet = FakeFleet(fail_out=LockedError("deployment 'fleet' is locked by zenops rollout (pid 42)"))
    loop, clock = make(tmp_path, fleet)
    run_until(loop, clock, 400)
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert st.phase == "idle"
    assert st.stopped is None
    assert st.attempts == []
    assert len(fleet.calls) > 3  # tried every tick: waiting for the lock, not backing off
    assert st.last is not None
    assert st.last["result"].startswith("waiting: deployment 'fleet' is locked")


def test_a_stopped_loop_ends_during_a_step_and_records_it_canceled(tmp_path: Path) -> None:
    """systemctl stop during a scale-out: zenops's SIGTERM handler cancels the playbook (CanceledError); the loop
    records the step canceled and ends (it took that for a failed step and went on, so systemd killed it 90 s
    later, in the sandbox e2e)."""
    fleet = FakeFleet(fail_out=CanceledError("canceled"))
    loop, clock = make(tmp_path, fleet)
    with pytest.raises(CanceledError):
        run_until(loop, clock, 400)
    assert fleet.calls == [("out", 1)]
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert (st.phase, st.actual, st.target, st.attempts) == ("idle", 1, 1, [])
    assert st.last is not None
    assert st.last["result"] == "canceled: the loop was stopped during the step"


def test_a_stopped_loop_ends_during_a_look(tmp_path: Path) -> None:
    fleet = FakeFleet()

    def canceled(_now: float) -> Observation:
        raise CanceledError("canceled")

    fleet.observe = canceled  # type: ignore[method-assign]
    loop, _clock = make(tmp_path, fleet)
    with pytest.raises(CanceledError):
        loop.tick()


def test_run_ticks_on_its_interval_and_a_pause_asked_between_ticks_is_seen_at_once(tmp_path: Path) -> None:
    fleet = FakeFleet(profile=[(0.0, 0.0, 1.0)])
    loop, clock = make(tmp_path, fleet)
    seen: list[float] = []
    loop.run(ticks=3, on_tick=lambda r: seen.append(r.t))
    assert seen == [0.0, 10.0, 20.0]
    write_pause(pause_path(tmp_path, "fleet"), by="op", at=clock.t)
    before = clock.t
    loop.wait(10)
    assert clock.t == before  # returned at once: the pause is seen
    assert loop.tick().phase == "paused"


def test_an_observer_that_fails_holds_the_tick(tmp_path: Path) -> None:
    class Broken(FakeFleet):
        def observe(self, now: float) -> Observation:
            raise ZenopsError("Prometheus on gw: no answer in 30s")

    fleet = Broken()
    loop, _clock = make(tmp_path, fleet)
    result = loop.tick()
    assert result.decision.action == "hold"
    assert "no answer" in result.decision.reason
    assert fleet.calls == []


@pytest.mark.parametrize("phase", ["acting"])
def test_a_loop_restarted_mid_step_starts_idle_with_its_history(tmp_path: Path, phase: str) -> None:
    fleet = FakeFleet()
    loop, clock = make(tmp_path, fleet)
    run_until(loop, clock, 60)
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    st.phase = phase  # type: ignore[assignment]
    st.save(state_path(tmp_path, "fleet"))
    again, _ = make(tmp_path, fleet)
    assert again.state.phase == "idle"
    assert again.state.last_action_t == st.last_action_t is not None  # the cooldown holds across restarts


def test_the_series_shows_the_new_replica_when_the_scale_out_ended(tmp_path: Path) -> None:
    """A scale-out takes minutes: the replica count goes up in the series when it ended (the plot drew it at the
    decision, 3 minutes early, in the sandbox e2e's plot)."""
    fleet = FakeFleet()
    loop, clock = make(tmp_path, fleet)
    real = fleet.scale_out

    def slow(count: int) -> ScaledOut:
        clock.t += 200.0  # the step's time
        return real(count)

    fleet.scale_out = slow  # type: ignore[method-assign]
    run_until(loop, clock, 80)
    (out,) = [t for a, t in actions(tmp_path) if a == "out"]
    st = load_state(state_path(tmp_path, "fleet"))
    assert st is not None
    assert [p[1:] for p in st.series if p[0] == out] == [[1, 2]]  # decided: target 2, still 1 replica
    assert [p[1:] for p in st.series if p[0] == out + 200.0] == [[2, 2]]  # in rotation 200 s later
