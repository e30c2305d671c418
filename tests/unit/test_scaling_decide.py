"""zenops.scaling.decide: out, in or hold from recorded metric series (tests/unit/scaling_series.py): the windows,
hysteresis, the cooldown, the bounds (MIN, MAX after the price cap), too few samples, and the reasons' figures."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.scaling_series import FALLING, NOISY, RISING, table
from zenops.errors import UsageError
from zenops.scaling.decide import (
    Decision,
    Policy,
    Sample,
    Target,
    decide,
    default_policy,
    quantile,
    sample_of,
    seats,
)
from zenops.scaling.replicas import Replicas

SEATS = 9  # max_num_seqs of the replicas in the recorded series: out over 4.5 waiting, in under 2.25 running+waiting
POLICY = default_policy(SEATS)


def _decide(series: dict[str, list[Sample]], now: float, current: int, **kw: Any) -> Decision:
    args: dict[str, Any] = {"bounds": Replicas(1, 4), "last_action_t": None, "policy": POLICY, **kw}
    return decide(series, now=now, current=current, **args)


def _flat(replicas: int, until: int, **fields: float) -> dict[str, list[Sample]]:
    return {f"web-{i}": [Sample(float(t), **fields) for t in range(0, until + 1, 10)] for i in range(1, replicas + 1)}


# ---- the defaults ---------------------------------------------------------------------------------------------


def test_the_defaults_come_from_the_seats() -> None:
    assert (POLICY.scale_out.metric, POLICY.scale_out.value, POLICY.scale_out.window_s) == ("waiting", 4.5, 60.0)
    assert (POLICY.scale_in.metric, POLICY.scale_in.value, POLICY.scale_in.window_s) == ("load", 2.25, 300.0)
    assert POLICY.cooldown_s == 120.0
    assert (POLICY.step_out, POLICY.step_in) == (1, 1)


def test_a_replica_seats_are_its_instances_max_num_seqs() -> None:
    plan = SimpleNamespace(max_num_seqs=5, instances=[SimpleNamespace(max_num_seqs=3), SimpleNamespace(max_num_seqs=0)])
    assert seats(plan) == 8  # type: ignore[arg-type]  # 3, and the plan's 5 for the instance that does not say


def test_the_defaults_take_overrides() -> None:
    policy = default_policy(SEATS, cooldown_s=30.0, step_out=2)
    assert (policy.cooldown_s, policy.step_out, policy.scale_out.value) == (30.0, 2, 4.5)


# ---- out ------------------------------------------------------------------------------------------------------


def test_rising_load_scales_out_with_the_figures() -> None:
    got = _decide(RISING, 180, 2)
    assert (got.action, got.count, got.target) == ("out", 1, 3)
    # web-1's last minute 6 7 7 8 7 8 9 (median 7), web-2's 7 7 8 8 8 9 9 (median 8)
    assert got.reason == (
        "waiting/replica 7.5 > 4.5 over 60 s (window 60 s, median per replica, 2 replicas, 14 samples)"
    )
    assert got.line().startswith("out 2 -> 3: waiting/replica 7.5 > 4.5")


def test_rising_load_not_yet_over_the_target_holds_and_says_both_figures() -> None:
    got = _decide(RISING, 100, 2)  # medians 3 and 3 over 40..100 s; no 300 s window for scale-in yet
    assert got.action == "hold"
    assert got.reason.startswith("waiting/replica 3 <= 4.5 (out); in: too few samples of running+waiting/replica")
    assert "(the best: 11 over 100 s)" in got.reason


def test_exactly_at_the_out_target_holds() -> None:
    got = _decide(_flat(2, 300, waiting=4.5, running=9), 300, 2)
    assert got.action == "hold"
    assert got.reason.startswith("waiting/replica 4.5 <= 4.5 (out)")


def test_out_stops_at_max() -> None:
    got = _decide(RISING, 180, 2, bounds=Replicas(1, 2))
    assert got.action == "hold"
    assert got.reason.startswith("at MAX 2: waiting/replica 7.5 > 4.5")


def test_a_step_out_never_passes_max() -> None:
    got = _decide(RISING, 180, 2, bounds=Replicas(1, 3), policy=default_policy(SEATS, step_out=3))
    assert (got.action, got.count) == ("out", 1)


def test_the_step_out_is_taken_below_max() -> None:
    got = _decide(RISING, 180, 2, bounds=Replicas(1, 8), policy=default_policy(SEATS, step_out=3))
    assert (got.action, got.count, got.target) == ("out", 3, 5)


def test_a_noisy_queue_does_not_scale_out_on_its_bursts() -> None:
    # every minute of NOISY has one or two scrapes of 15 waiting: the mean crosses 4.5, the median does not
    decisions = [_decide(NOISY, float(now), 2) for now in range(60, 1201, 10)]
    assert {d.action for d in decisions} == {"hold"}


def test_kv_usage_as_the_out_target() -> None:
    series = table("""
    t   a.kv b.kv
    0   0.90 0.96
    10  0.93 0.97
    20  0.95 0.99
    30  0.96 0.97
    40  0.94 0.98
    50  0.95 0.99
    60  0.97 0.98
    """)
    policy = default_policy(SEATS, scale_out=Target("kv", 0.9, 60, 0.5), scale_in=Target("kv", 0.3, 300, 0.9))
    got = _decide(series, 60, 2, policy=policy)
    assert got.action == "out"
    assert got.reason.startswith("KV cache usage 96% > 90% over 60 s")


def test_ttft_p95_as_the_out_target() -> None:
    series = _flat(2, 120, ttft_p95_s=2.4)
    policy = default_policy(
        SEATS, scale_out=Target("ttft_p95", 2.0, 60, 0.5), scale_in=Target("ttft_p95", 0.5, 300, 0.9)
    )
    got = _decide(series, 120, 2, policy=policy)
    assert got.action == "out"
    assert got.reason.startswith("TTFT p95 2.40 s > 2.00 s")


# ---- in -------------------------------------------------------------------------------------------------------


def test_falling_load_scales_in_the_least_loaded_replica() -> None:
    got = _decide(FALLING, 400, 3)
    assert (got.action, got.count, got.target, got.replicas) == ("in", 1, 2, ("web-3",))
    assert got.reason.startswith("running+waiting/replica 1 < 2.25 over 300 s (window 300 s, p90 per replica, 3")


def test_scale_in_never_removes_a_protected_replica() -> None:
    got = _decide(FALLING, 400, 3, protected={"web-3"})
    assert got.replicas == ("web-2",)


def test_scale_in_holds_when_only_protected_replicas_are_left() -> None:
    got = _decide(FALLING, 400, 3, protected={"web-1", "web-2", "web-3"})
    assert got.action == "hold"
    assert "every replica left is protected" in got.reason


def test_scale_in_stops_at_min() -> None:
    got = _decide(FALLING, 400, 3, bounds=Replicas(3, 4))
    assert got.action == "hold"
    assert got.reason.startswith("at MIN 3: running+waiting/replica 1 < 2.25")


def test_a_step_in_never_passes_min() -> None:
    got = _decide(FALLING, 400, 3, bounds=Replicas(2, 4), policy=default_policy(SEATS, step_in=2))
    assert (got.action, got.count, got.replicas) == ("in", 1, ("web-3",))


def test_exactly_at_the_in_target_holds() -> None:
    got = _decide(_flat(2, 400, waiting=0, running=2.25), 400, 2)
    assert got.action == "hold"
    assert "running+waiting/replica 2.25 >= 2.25 (in)" in got.reason


def test_scale_in_needs_the_whole_longer_window() -> None:
    got = _decide(FALLING, 200, 3)  # 200 s of a low load, the in window is 300 s (240 s of it covered at least)
    assert got.action == "hold"
    assert "in: too few samples of running+waiting/replica: 0 of 3 replica(s)" in got.reason


def test_one_burst_in_the_night_does_not_block_scale_in() -> None:
    series = FALLING
    burst = {n: [s if s.t != 300 else Sample(s.t, waiting=3, running=9) for s in got] for n, got in series.items()}
    assert _decide(burst, 400, 3).action == "in"


# ---- the cooldown and the window after an action ---------------------------------------------------------------


def test_rising_load_in_the_cooldown_holds_and_says_so() -> None:
    got = _decide(RISING, 180, 2, last_action_t=120)
    assert got.action == "hold"
    assert got.reason == "cooling down: 60 s since the last scaling action (cooldown 120 s)"


def test_the_cooldown_ends() -> None:
    assert _decide(RISING, 180, 2, last_action_t=60).action == "out"


def test_samples_from_before_the_last_action_do_not_count() -> None:
    # the cooldown is over (130 s), the out window is covered since the action, the in window is not: a low load
    # read with 3 replicas says nothing of 2
    got = _decide(FALLING, 400, 3, last_action_t=270)
    assert got.action == "hold"
    assert "too few samples of running+waiting/replica since the last scaling action" in got.reason


# ---- too few samples -------------------------------------------------------------------------------------------


def test_a_fresh_fleet_holds_for_too_few_samples() -> None:
    got = _decide({n: s[:3] for n, s in RISING.items()}, 20, 2)
    assert got.action == "hold"
    assert got.reason.startswith(
        "too few samples of waiting/replica: 0 of 2 replica(s) have 3+ fresh samples over 48 s"
    )


def test_stale_samples_do_not_count() -> None:
    got = _decide(RISING, 240, 2)  # the newest samples are 60 s old
    assert got.action == "hold"
    assert got.reason.startswith("too few samples of waiting/replica")


def test_a_minority_of_replicas_reporting_decides_nothing() -> None:
    series = {**RISING, "web-3": [], "web-4": []}
    got = _decide(series, 180, 4, bounds=Replicas(1, 6))
    assert got.action == "hold"
    assert got.reason.startswith("too few samples of waiting/replica: 2 of 4 replica(s)")
    assert _decide(series, 180, 3, bounds=Replicas(1, 6)).action == "out"  # 2 of 3 report


def test_figures_not_read_are_not_samples() -> None:
    series = _flat(2, 120, waiting=None, running=9)  # type: ignore[arg-type]
    assert _decide(series, 120, 2).reason.startswith("too few samples of waiting/replica")


# ---- the bounds ------------------------------------------------------------------------------------------------


def test_below_min_scales_out_to_min_even_in_the_cooldown() -> None:
    got = _decide(FALLING, 400, 1, bounds=Replicas(3, 5), last_action_t=399)
    assert (got.action, got.count, got.target) == ("out", 2, 3)
    assert got.reason == "1 replica(s), below MIN 3"


def test_over_max_scales_in_to_max() -> None:
    got = _decide(FALLING, 400, 3, bounds=Replicas(1, 2), protected={"web-1"})
    assert (got.action, got.count, got.replicas) == ("in", 1, ("web-2",))
    assert got.reason == "3 replicas, over MAX 2"


# ---- the policy refuses no hysteresis ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("out", "in_", "said"),
    [
        (Target("waiting", 4, 60, 0.5), Target("waiting", 4, 300, 0.9), "is not below the scale-out target"),
        (Target("waiting", 4, 60, 0.5), Target("waiting", 5, 300, 0.9), "is not below the scale-out target"),
        (Target("kv", 0.8, 60, 0.5), Target("kv", 0.8, 300, 0.9), "80% is not below the scale-out target 80%"),
        (Target("load", 4, 60, 0.5), Target("waiting", 1, 300, 0.9), "has no hysteresis"),
        (Target("kv", 0.8, 60, 0.5), Target("load", 1, 300, 0.9), "has no hysteresis"),
        (Target("waiting", 4, 60, 0.5), Target("load", 2, 30, 0.9), "window 30 s is shorter"),
    ],
)
def test_the_policy_refuses_no_hysteresis(out: Target, in_: Target, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        Policy(out, in_)


def test_out_on_waiting_and_in_on_load_is_hysteresis() -> None:
    assert Policy(Target("waiting", 4, 60, 0.5), Target("load", 2, 60, 0.9)).scale_in.metric == "load"


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"cooldown_s": -1.0}, "cooldown"),
        ({"step_out": 0}, "a step is at least 1"),
        ({"step_in": 0}, "a step is at least 1"),
        ({"min_samples": 0}, "min_samples"),
        ({"coverage": 0.0}, "coverage"),
    ],
)
def test_the_policy_refuses_bad_settings(kw: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        default_policy(SEATS, **kw)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("waiting", 0, 60, 0.5), "not a positive number"),
        (("kv", 90, 60, 0.5), "KV cache usage target 90 is over 1"),
        (("waiting", 4, 0, 0.5), "not a positive duration"),
        (("waiting", 4, 60, 1.5), "not between 0 and 1"),
        (("qps", 4, 60, 0.5), "no scaling metric"),
    ],
)
def test_a_target_refuses_bad_values(args: tuple[Any, ...], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        Target(*args)


def test_no_seats_no_policy() -> None:
    with pytest.raises(UsageError, match="0 seats"):
        default_policy(0)


# ---- the pieces ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "want"),
    [([3.0, 1.0, 2.0], 0.5, 2.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5), ([0.0, 10.0], 0.9, 9.0), ([5.0], 0.9, 5.0)],
)
def test_quantile(values: list[float], q: float, want: float) -> None:
    assert quantile(values, q) == pytest.approx(want)


@dataclass
class _Row:
    running: float | None = None
    waiting: float | None = None
    kv_cache_pct: float | None = None
    ttft_p95_ms: float | None = None
    error: str | None = None


def test_a_replica_sample_sums_its_instances() -> None:
    got = sample_of(5.0, [_Row(4, 1, 50.0, 300.0), _Row(9, 3, 80.0, None)])
    assert got == Sample(5.0, waiting=4, running=13, kv_usage=0.8, ttft_p95_s=0.3)


def test_a_replica_with_an_instance_not_read_has_no_sums() -> None:
    got = sample_of(5.0, [_Row(4, 1, 50.0, 300.0), _Row(error="connection refused")])
    assert got == Sample(5.0)


def test_a_decision_as_a_line_and_a_dict() -> None:
    d = Decision("in", "running+waiting/replica 1 < 2.25", 3, 1, ("web-3",))
    assert d.line() == "in 3 -> 2 (web-3): running+waiting/replica 1 < 2.25"
    assert d.to_dict()["target"] == 2
    assert Decision("hold", "cooling down", 3).target == 3
