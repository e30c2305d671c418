"""zenops.rollout.plan (batches, what changes on a host, the performance gate's verdict) and zenops.deployment.rollouts
(the ledger): pure logic and files in a tmp state dir, nothing runs."""

from __future__ import annotations

import json

import pytest

from zenops.config import load
from zenops.deployment.rollouts import BatchState, Ledger, RolloutState, ledger_dir
from zenops.errors import UsageError
from zenops.rollout.plan import (
    GateLimits,
    Sample,
    Verdict,
    batch_size,
    gross,
    host_change,
    make_batches,
    spread,
    verdict,
)

# --- batch_size ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "hosts", "size"),
    [
        ("1", 10, 1),
        ("2", 10, 2),
        (" 3 ", 10, 3),
        ("25%", 10, 2),  # 2.5 rounded down
        ("25%", 8, 2),
        ("25%", 3, 1),  # 0.75 rounded down is 0: at least 1
        ("50%", 5, 2),
        ("100%", 4, 4),
        ("7", 3, 7),  # a count is not capped by the fleet (the batches just end sooner)
    ],
)
def test_batch_size(spec, hosts, size):
    assert batch_size(spec, hosts) == size


@pytest.mark.parametrize("spec", ["0", "x", "150%", "101%", "0%", "-1", "", "2.5", "%", "1 %", "25%%"])
def test_batch_size_refuses_bad_specs(spec):
    with pytest.raises(UsageError) as info:
        batch_size(spec, 10)
    assert f"--batch {spec}" in info.value.message
    assert info.value.exit_code == 2


# --- make_batches -------------------------------------------------------------------------------------------------

FIVE = ["a", "b", "c", "d", "e"]


def test_canary_first_then_batches_in_host_order():
    assert make_batches(FIVE, batch="2", canary=1) == [["a"], ["b", "c"], ["d", "e"]]
    assert make_batches(FIVE, batch="1", canary=2) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert make_batches(FIVE, batch="40%", canary=1) == [["a"], ["b", "c"], ["d", "e"]]


def test_canary_zero_means_no_canary_batch():
    assert make_batches(["a", "b", "c", "d"], batch="2", canary=0) == [["a", "b"], ["c", "d"]]
    assert make_batches(["a", "b", "c"], batch="1", canary=0) == [["a"], ["b"], ["c"]]


def test_no_hosts_no_batches():
    assert make_batches([], batch="1", canary=1) == []


def test_max_unavailable_cuts_batches_by_instance_counts():
    instances = {"a": 2, "b": 2, "c": 1, "d": 1, "e": 1}
    # canary a (2 instances: fits), then [b c d e] in batches of 4 cut to 2 instances at a time
    assert make_batches(FIVE, batch="4", canary=1, instances=instances, max_unavailable=2) == [
        ["a"],
        ["b"],
        ["c", "d"],
        ["e"],
    ]
    # the same without instance counts: one instance per host
    assert make_batches(FIVE, batch="4", canary=1, max_unavailable=2) == [["a"], ["b", "c"], ["d", "e"]]
    # a limit at least as large as the batches changes nothing
    assert make_batches(FIVE, batch="2", canary=1, instances=instances, max_unavailable=4) == [
        ["a"],
        ["b", "c"],
        ["d", "e"],
    ]


def test_max_unavailable_never_cuts_below_one_host():
    three_each = {"a": 3, "b": 3, "c": 3}
    batches = make_batches(["a", "b", "c"], batch="3", canary=0, instances=three_each, max_unavailable=1)
    assert batches == [["a"], ["b"], ["c"]]


def test_max_unavailable_can_turn_a_whole_fleet_batch_into_a_legal_plan():
    # batch 100% with no canary would take every host; cut to one instance at a time it is fine
    assert make_batches(["a", "b"], batch="100%", canary=0, max_unavailable=1) == [["a"], ["b"]]


@pytest.mark.parametrize(
    ("hosts", "kwargs"),
    [
        (["a", "b"], {"batch": "2", "canary": 0}),
        (["a", "b", "c"], {"batch": "100%", "canary": 0}),
        (["a", "b", "c"], {"batch": "1", "canary": 3}),
        (["a", "b", "c"], {"batch": "1", "canary": 5}),  # a canary larger than the fleet is the whole fleet
        (["a"], {"batch": "1", "canary": 1}),  # a one-host fleet
        (["a"], {"batch": "1", "canary": 0}),
    ],
)
def test_a_batch_covering_every_host_is_refused_unless_downtime_is_allowed(hosts, kwargs):
    with pytest.raises(UsageError) as info:
        make_batches(hosts, **kwargs)
    assert "every instance" in info.value.message
    assert "--allow-downtime" in (info.value.hint or "")
    batches = make_batches(hosts, allow_downtime=True, **kwargs)
    assert [h for b in batches for h in b] == hosts
    assert hosts in batches


def test_a_batch_of_all_but_one_host_is_allowed():
    assert make_batches(["a", "b", "c"], batch="100%", canary=1) == [["a"], ["b", "c"]]


def test_make_batches_refuses_bad_canary_max_unavailable_and_batch():
    with pytest.raises(UsageError, match="--canary"):
        make_batches(FIVE, canary=-1)
    with pytest.raises(UsageError, match="--max-unavailable"):
        make_batches(FIVE, max_unavailable=0)
    with pytest.raises(UsageError, match="--batch 0"):
        make_batches(FIVE, batch="0")


# --- host_change --------------------------------------------------------------------------------------------------

REQ = {
    "model": "Qwen/Qwen3-0.6B",
    "served_model_name": None,
    "image_source": "build",
    "vllm": "0.11.0",
    "zentorch": None,
    "prebuilt_ref": None,
    "base_image": None,
    "base_image_archive": None,
    "platform": "auto",
    "max_num_seqs": None,
}


def _inst(port: int, **extra):
    return {"index": 0, "port": port, "args": ["--max-num-seqs", "5"], "env": {"A": "1"}, "cpuset": "1-23",
            "container": {"name": f"vllm-{port}"}, "kv_cache_gib": 29.0, **extra}  # fmt: skip


PLAN = {"platform": "zen", "dtype": "bfloat16", "max_model_len": 4096, "max_num_seqs": 5, "instances": [_inst(8000)]}


def test_host_change_none():
    assert host_change(PLAN, dict(PLAN), REQ, dict(REQ)) == ("none", [])


def test_host_change_model_wins_over_image_and_args():
    new_req = {**REQ, "model": "/models/tiny-b", "vllm": "0.12.0"}
    new_plan = {**PLAN, "max_num_seqs": 9}
    assert host_change(PLAN, new_plan, REQ, new_req) == ("model", ["model Qwen/Qwen3-0.6B -> /models/tiny-b"])


def test_host_change_served_model_name_is_a_model_change():
    kind, diffs = host_change(PLAN, PLAN, REQ, {**REQ, "served_model_name": "chat"})
    assert (kind, diffs) == ("model", ["served_model_name None -> chat"])


def test_host_change_image_wins_over_args():
    new_req = {**REQ, "vllm": "0.12.0", "zentorch": "5.1"}
    kind, diffs = host_change(PLAN, {**PLAN, "max_num_seqs": 9}, REQ, new_req)
    assert kind == "image"
    assert diffs == ["vllm 0.11.0 -> 0.12.0", "zentorch None -> 5.1"]


@pytest.mark.parametrize("key", ["image_source", "prebuilt_ref", "base_image", "base_image_archive"])
def test_host_change_image_keys(key):
    assert host_change(PLAN, PLAN, REQ, {**REQ, key: "other"}) == ("image", [f"{key} {REQ[key]} -> other"])


def test_host_change_args_from_plan_fields():
    kind, diffs = host_change(PLAN, {**PLAN, "max_num_seqs": 9, "platform": "cpu"}, REQ, REQ)
    assert kind == "args"
    assert diffs == ["platform zen -> cpu", "max_num_seqs 5 -> 9"]


def test_host_change_instance_count():
    two = {**PLAN, "instances": [_inst(8000), _inst(8001)]}
    assert host_change(PLAN, two, REQ, REQ) == ("args", ["instances 1 -> 2"])
    assert host_change(two, PLAN, REQ, REQ) == ("args", ["instances 2 -> 1"])


@pytest.mark.parametrize(
    "change",
    [
        {"port": 8100},
        {"args": ["--max-num-seqs", "9"]},
        {"env": {"A": "2"}},
        {"cpuset": "1-11"},
        {"container": {"name": "other"}},
    ],
)
def test_host_change_per_instance_settings(change):
    new = {**PLAN, "instances": [{**_inst(8000), **change}]}
    assert host_change(PLAN, new, REQ, REQ) == ("args", ["per-instance settings (args, env, CPUs or ports)"])


def test_host_change_ignores_instance_fields_that_are_not_settings():
    new = {**PLAN, "instances": [_inst(8000, kv_cache_gib=30.5, index=0)]}
    assert host_change(PLAN, new, REQ, REQ) == ("none", [])


def test_host_change_without_an_old_plan_is_an_args_change():
    kind, diffs = host_change(None, PLAN, REQ, REQ)
    assert kind == "args"
    assert "platform None -> zen" in diffs
    assert "instances 0 -> 1" in diffs


# --- spread -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "expected"),
    [([], 0.0), ([42.0], 0.0), ([100.0, 100.0], 0.0), ([90.0, 110.0], 0.2), ([80.0, 100.0, 120.0], 0.4), ([0, 0], 0.0)],
)
def test_spread(samples, expected):
    assert spread(samples) == pytest.approx(expected)


# --- verdict ------------------------------------------------------------------------------------------------------

LIMITS = GateLimits()  # max_tps_drop 0.10, max_ttft_rise 0.25, max_spread 0.25


def s(tps: float, ttft: float | None = 100.0, failed: int = 0) -> Sample:
    return Sample(tps, ttft, failed)


def test_gate_limits_defaults():
    assert (LIMITS.max_tps_drop, LIMITS.max_ttft_rise, LIMITS.max_spread) == (0.10, 0.25, 0.25)


def test_verdict_pass_within_the_allowed_drop():
    v = verdict("h1-8000", [s(100), s(100)], s(92), LIMITS, fleet_spread=0.0)
    assert v.outcome == "pass", v.reasons
    assert v.reasons == []
    assert v.figures["baseline_tok_s"] == 100.0
    assert v.figures["expected_tok_s"] == 100.0
    assert v.figures["tok_s_change"] == pytest.approx(-0.08)
    assert v.figures["drift"] is None


def test_verdict_fails_on_a_drop_beyond_the_limit():
    v = verdict("h1-8000", [s(100), s(100)], s(85), LIMITS, fleet_spread=0.0)
    assert v.outcome == "fail"
    assert len(v.reasons) == 1
    assert "output tok/s -15%" in v.reasons[0]
    assert "--max-tps-drop" in v.reasons[0]


def test_verdict_the_own_baseline_spread_widens_the_allowed_drop():
    # baseline 100 and 110: mean 105, spread 10/105 = 9.5%; allowed drop 10% + 9.5% = 19.5%
    base = [s(100), s(110)]
    within = verdict("h1-8000", base, s(86), LIMITS, fleet_spread=0.0)  # 86/105 - 1 = -18.1%
    assert within.outcome == "pass", within.reasons
    assert within.figures["spread"] == pytest.approx(10 / 105, abs=1e-4)
    beyond = verdict("h1-8000", base, s(84), LIMITS, fleet_spread=0.0)  # -20%
    assert beyond.outcome == "fail"


def test_verdict_the_fleet_spread_widens_the_allowed_drop_when_larger():
    base = [s(100), s(100)]  # own spread 0
    assert verdict("h1-8000", base, s(80), LIMITS, fleet_spread=0.12).outcome == "pass"  # -20% < 10% + 12%
    assert verdict("h1-8000", base, s(77), LIMITS, fleet_spread=0.12).outcome == "fail"  # -23%
    assert verdict("h1-8000", base, s(80), LIMITS, fleet_spread=0.0).outcome == "fail"


def test_verdict_max_tps_drop_is_honoured():
    base = [s(100), s(100)]
    assert verdict("h1-8000", base, s(85), GateLimits(max_tps_drop=0.2), fleet_spread=0.0).outcome == "pass"
    assert verdict("h1-8000", base, s(95), GateLimits(max_tps_drop=0.02), fleet_spread=0.0).outcome == "fail"


def test_verdict_a_faster_server_passes():
    assert verdict("h1-8000", [s(100), s(100)], s(150), LIMITS, fleet_spread=0.0).outcome == "pass"


def test_verdict_control_drift_a_fleet_wide_slowdown_is_a_pass():
    # the control host is 20% slower too (50 -> 40 tok/s): the machine, not the change
    v = verdict(
        "h1-8000",
        [s(100), s(100)],
        s(80),
        LIMITS,
        fleet_spread=0.0,
        control_baseline=[s(50), s(50)],
        control_now=s(40),
    )
    assert v.outcome == "pass", v.reasons
    assert v.figures["drift"] == pytest.approx(0.8)
    assert v.figures["expected_tok_s"] == pytest.approx(80.0)
    assert v.figures["tok_s_change"] == pytest.approx(0.0)
    assert v.figures["control_tok_s"] == 40.0


def test_verdict_control_unchanged_the_same_drop_fails():
    v = verdict(
        "h1-8000",
        [s(100), s(100)],
        s(80),
        LIMITS,
        fleet_spread=0.0,
        control_baseline=[s(50), s(50)],
        control_now=s(50),
    )
    assert v.outcome == "fail"
    assert v.figures["drift"] == pytest.approx(1.0)


def test_verdict_control_got_faster_a_flat_server_fails():
    # the control is 20% faster now (50 -> 60): the changed server should be at 120, it is at 100 (-17%)
    v = verdict(
        "h1-8000",
        [s(100), s(100)],
        s(100),
        LIMITS,
        fleet_spread=0.0,
        control_baseline=[s(50), s(50)],
        control_now=s(60),
    )
    assert v.outcome == "fail"
    assert v.figures["expected_tok_s"] == pytest.approx(120.0)
    assert v.figures["tok_s_change"] == pytest.approx(100 / 120 - 1, abs=1e-4)


def test_verdict_several_gate_runs_are_judged_on_their_means():
    # the --full run of 2026-11-27, a no-change release on 2 shared cores: one gate run read the changed server 8.6%
    # below its baseline and its control 11% above its own (-18%: a fail). The means of three runs judge it instead.
    base, control_base = [s(338.3), s(334.7)], [s(356.5), s(346.4)]
    one = verdict("h1-8000", base, s(307.4), LIMITS, fleet_spread=0.03, control_baseline=control_base,
                  control_now=s(390.1))  # fmt: skip
    assert one.outcome == "fail"
    three = verdict("h1-8000", base, [s(307.4), s(331.0), s(334.0)], LIMITS, fleet_spread=0.03,
                    control_baseline=control_base, control_now=[s(390.1), s(350.0), s(348.0)])  # fmt: skip
    assert three.outcome == "pass", three.line()
    assert three.figures["new_tok_s"] == pytest.approx((307.4 + 331.0 + 334.0) / 3, abs=0.01)
    assert three.figures["drift"] == pytest.approx((390.1 + 350.0 + 348.0) / 3 / 351.45, abs=1e-3)
    assert three.figures["new_runs"] == [307.4, 331.0, 334.0]
    assert "mean of 3 runs: 307.4, 331.0, 334.0" in three.line()
    # failed requests add up over the runs; a slower server stays a fail however many runs
    assert verdict("h1-8000", base, [s(330), s(330, failed=1)], LIMITS, fleet_spread=0.0).figures["failed"] == 1
    slow = verdict("h1-8000", base, [s(120.0)] * 3, LIMITS, fleet_spread=0.03, control_baseline=control_base,
                   control_now=[s(350.0)] * 3)  # fmt: skip
    assert slow.outcome == "fail"


def test_verdict_a_control_measured_after_the_baseline_carries_the_drift_before_it():
    # the last batch of the landing of 2026-11-30 (2 devhosts on a 2-vCPU Xeon): batch 1's gate read the untouched
    # flb649-2 at 772.4 against its baseline 887.8 (drift 0.87) and the changed flb649-1 at 711.6 (a pass); batch 2,
    # with no untouched host left, read flb649-2's no-change release at 487.9 (-45% against its baseline alone: a
    # fail). With flb649-1 as the control, against its 711.6 at batch 1's gate: a machine 0.6x as fast since then
    # reads 427 there, so 487.9 is what the machine gives, not the release.
    base = [s(896.66, 21.5), s(878.93, 20.5)]
    alone = verdict("h2-8000", base, s(487.93, 57.0), LIMITS, fleet_spread=0.1281)
    assert alone.outcome == "fail"
    carried = verdict("h2-8000", base, s(487.93, 57.0), LIMITS, fleet_spread=0.1281,
                      control_baseline=[s(711.59, 33.7)], control_now=s(427.0, 80.0),
                      prior_drift=(772.42 / 887.79, 1.1))  # fmt: skip
    assert carried.outcome == "pass", carried.line()
    assert carried.figures["drift"] == pytest.approx(0.87 * 427.0 / 711.59, abs=1e-3)
    assert carried.figures["ttft_drift"] == pytest.approx(1.1 * 80.0 / 33.7, abs=1e-3)
    # the same control that did not slow down: the drop is the release's, whatever the drift before it
    same = verdict("h2-8000", base, s(487.93, 57.0), LIMITS, fleet_spread=0.1281,
                   control_baseline=[s(711.59, 33.7)], control_now=s(711.59, 33.7),
                   prior_drift=(772.42 / 887.79, 1.1))  # fmt: skip
    assert same.outcome == "fail"
    assert same.figures["tok_s_change"] == pytest.approx(487.93 / (887.795 * 0.87) - 1, abs=2e-3)


def test_verdict_control_without_a_baseline_is_ignored():
    v = verdict("h1-8000", [s(100), s(100)], s(80), LIMITS, fleet_spread=0.0, control_now=s(40))
    assert v.outcome == "fail"
    assert v.figures["drift"] is None


def test_verdict_fails_on_a_ttft_rise_beyond_the_limit():
    base = [s(100, 100.0), s(100, 100.0)]
    up = verdict("h1-8000", base, s(100, 140.0), LIMITS, fleet_spread=0.0)  # +40% > 25%
    assert up.outcome == "fail"
    assert len(up.reasons) == 1
    assert "median TTFT +40%" in up.reasons[0]
    assert "--max-ttft-rise" in up.reasons[0]
    assert up.figures["ttft_change"] == pytest.approx(0.4)
    ok = verdict("h1-8000", base, s(100, 120.0), LIMITS, fleet_spread=0.0)  # +20%
    assert ok.outcome == "pass", ok.reasons
    assert verdict("h1-8000", base, s(100, 130.0), LIMITS, fleet_spread=0.1).outcome == "pass"  # 30% < 25% + 10%


def test_verdict_ttft_rise_seen_on_the_control_too_is_a_pass():
    base = [s(100, 100.0), s(100, 100.0)]
    kwargs = {"fleet_spread": 0.0, "control_baseline": [s(50, 200.0), s(50, 200.0)]}
    # the control's TTFT rose by 50% too: 140 ms is below the expected 150 ms
    assert verdict("h1-8000", base, s(100, 140.0), LIMITS, control_now=s(50, 300.0), **kwargs).outcome == "pass"
    # the control's TTFT did not move: 140 ms is +40%
    assert verdict("h1-8000", base, s(100, 140.0), LIMITS, control_now=s(50, 200.0), **kwargs).outcome == "fail"


def test_verdict_without_ttft_figures_checks_tok_s_only():
    v = verdict("h1-8000", [s(100, None), s(100, None)], s(100, 999.0), LIMITS, fleet_spread=0.0)
    assert v.outcome == "pass"
    assert v.figures["baseline_ttft_ms"] is None
    assert v.figures["ttft_change"] is None


def test_verdict_inconclusive_when_the_spread_is_too_large():
    # baseline 100 and 140: spread 40/120 = 33% > 25%; the new figure equals the mean
    v = verdict("h1-8000", [s(100), s(140)], s(120), LIMITS, fleet_spread=0.0)
    assert v.outcome == "inconclusive"
    assert "--max-spread" in v.reasons[0]
    # the fleet's spread counts as well
    assert verdict("h1-8000", [s(100), s(100)], s(100), LIMITS, fleet_spread=0.3).outcome == "inconclusive"
    # a larger --max-spread accepts it
    assert verdict("h1-8000", [s(100), s(140)], s(120), GateLimits(max_spread=0.4), fleet_spread=0.0).outcome == "pass"


def test_verdict_a_failure_beyond_a_large_spread_is_still_a_fail():
    v = verdict("h1-8000", [s(100), s(140)], s(50), LIMITS, fleet_spread=0.0)  # -58% beyond 10% + 33%
    assert v.outcome == "fail"


def test_verdict_failed_requests_fail():
    v = verdict("h1-8000", [s(100), s(100)], s(100, failed=2), LIMITS, fleet_spread=0.0)
    assert v.outcome == "fail"
    assert v.reasons == ["2 request(s) failed"]


def test_verdict_line_names_the_server_outcome_and_figures():
    v = verdict(
        "h2-8001",
        [s(100, 200.0), s(100, 200.0)],
        s(60, 300.0),
        LIMITS,
        fleet_spread=0.0,
        control_baseline=[s(50), s(50)],
        control_now=s(40),
    )
    line = v.line()
    assert line.startswith("h2-8001: FAIL: ")
    assert "output 60.0 tok/s vs baseline 100.0" in line
    assert "expected 80.0 (control drift x0.80)" in line
    assert "change -25%" in line
    assert "median TTFT 300 ms vs 200 ms (+50%)" in line
    assert "run-to-run spread 0%" in line
    assert "--max-tps-drop" in line  # the reasons follow
    ok = verdict("h2-8001", [s(100), s(100)], s(100), LIMITS, fleet_spread=0.0).line()
    assert ok.startswith("h2-8001: PASS: ")
    assert "drift" not in ok
    assert " -- " not in ok


def test_verdict_to_dict_is_json_ready():
    v = verdict("h1-8000", [s(100), s(100)], s(90), LIMITS, fleet_spread=0.0)
    data = json.loads(json.dumps(v.to_dict()))
    assert data["server"] == "h1-8000"
    assert data["outcome"] == "pass"
    assert Verdict(**data) == v


# --- the ledger (zenops.deployment.rollouts) --------------------------------------------------------------------------


@pytest.fixture
def config(isolated_home):
    return load()


def _state(**extra) -> RolloutState:
    return RolloutState(
        id="rollout-20260101-000000",
        deployment="fleet",
        inventory="/tmp/fleet.yml",
        from_request={"model": "a", "max_num_seqs": None},
        to_request={"model": "b", "max_num_seqs": 9},
        from_record={"plans": {"h1": {"instances": [{"port": 8000}]}}, "gateway": {}},
        batches=[
            BatchState(
                hosts=["h1"],
                status="done",
                started_at="t0",
                finished_at="t1",
                wall_s=12.5,
                verdicts=[{"server": "h1-8000", "outcome": "pass"}],
            ),
            BatchState(hosts=["h2", "h3"]),
        ],
        **extra,
    )


def test_ledger_save_load_round_trip(config):
    ledger = Ledger(config, "fleet-12345678")
    assert ledger.dir == ledger_dir(config, "fleet-12345678") == config.state_dir / "rollouts" / "fleet-12345678"
    assert ledger.load() is None
    state = _state(
        changes={"h1": {"kind": "args", "diffs": ["max_num_seqs 5 -> 9"]}},
        baseline={"h1-8000": [{"output_tok_s": 10.0, "median_ttft_ms": 5.0, "failed": 0}]},
        baseline_spread=0.05,
        drained=["h2-8000"],
        served={"h1": {"plan": {}, "endpoints": [], "image": {}}},
        run_dir="/tmp/runs/x",
        message="hi",
    )
    ledger.save(state)
    loaded = ledger.load()
    assert loaded == state
    assert isinstance(loaded.batches[0], BatchState)
    assert RolloutState.from_dict(state.to_dict()) == state
    assert (ledger.dir.stat().st_mode & 0o777) == 0o700
    assert [p.name for p in ledger.dir.iterdir()] == ["state.json"]  # no temporary file left
    # saving again replaces it
    state.status = "done"
    ledger.save(state)
    assert ledger.load().status == "done"


def test_rollout_state_from_dict_ignores_unknown_keys_and_active():
    data = {**_state().to_dict(), "something_new": 1}
    state = RolloutState.from_dict(data)
    assert state == _state()
    assert state.active
    assert RolloutState.from_dict({**data, "status": "paused"}).active
    for status in ("done", "reverted", "failed"):
        assert not RolloutState.from_dict({**data, "status": status}).active


def test_ledger_history_appends_events_in_order(config):
    ledger = Ledger(config, "fleet-12345678")
    assert ledger.history() == []
    first = ledger.event("r1", "started", batches=[["h1"], ["h2"]])
    ledger.event("r1", "batch done", batch=1, wall_s=3.0)
    ledger.event("r1", "gate", batch=2, path=ledger.dir)  # not JSON: written as a string
    ledger.event("r1", "finished")
    assert first["event"] == "started"
    assert first["rollout"] == "r1"
    events = ledger.history()
    assert [e["event"] for e in events] == ["started", "batch done", "gate", "finished"]
    assert events[0]["batches"] == [["h1"], ["h2"]]
    assert events[1]["batch"] == 1
    assert events[2]["path"] == str(ledger.dir)
    assert all(e["at"] for e in events)
    assert [e["event"] for e in ledger.history(last=2)] == ["gate", "finished"]
    assert [e["event"] for e in ledger.history(last=10)] == ["started", "batch done", "gate", "finished"]
    # kept for good: a new Ledger object on the same deployment reads the same lines
    assert Ledger(config, "fleet-12345678").history() == events
    assert Ledger(config, "other-00000000").history() == []


def test_host_change_shutdown_timeout_is_a_container_restart():
    """vLLM's --shutdown-timeout is not in the plan but in the server's command: changing it restarts the server."""
    kind, diffs = host_change(PLAN, dict(PLAN), {**REQ, "shutdown_timeout": 30}, {**REQ, "shutdown_timeout": 600})
    assert kind == "args"
    assert diffs == ["shutdown_timeout 30 -> 600"]


def test_a_gate_verdict_shows_the_servers_own_figures_beside_the_clients():
    side = {"kv_peak_pct": 97.5, "preemptions": 12.0, "queue_ms_mean": 840.0, "running_mean": 1.0}
    base = [Sample(100.0, 50.0), Sample(101.0, 50.0)]
    v = verdict("h1-8000", base, Sample(60.0, 400.0, 0, side), GateLimits(), fleet_spread=0.0)
    assert v.outcome == "fail"
    assert v.figures["server"] == side
    assert "server: KV peak 97.5%, 12 preemptions, queue 840.0 ms, mean batch 1.0" in v.line()
    plain = verdict("h1-8000", base, Sample(100.0, 50.0), GateLimits(), fleet_spread=0.0)
    assert plain.figures["server"] is None
    assert "server:" not in plain.line()


def test_gross_is_a_fail_far_beyond_its_bound_never_one_runs_noise():
    # the landing run of 2026-11-30 (test 4 of the rollout fleet, max-num-seqs 1 under a C=4 gate): 209 tok/s vs an
    # expected 592 (-65%) and median TTFT 926 ms vs 29 ms, baseline spread 20%: both far beyond their bounds
    slow = verdict("h1-8000", [s(710.8, 29.0)] * 2, s(209.0, 926.0), LIMITS, fleet_spread=0.20)
    assert slow.outcome == "fail"
    assert gross(slow)
    # tok/s alone: -65% is beyond twice its bound of 10% + 20%
    assert gross(verdict("h1-8000", [s(700.0, None)] * 2, s(245.0, None), LIMITS, fleet_spread=0.20))
    # TTFT alone: +400% is beyond four times 25% + 20%; +100% (one scheduling hiccup on short prompts) is not
    assert gross(verdict("h1-8000", [s(100.0, 30.0)] * 2, s(100.0, 150.0), LIMITS, fleet_spread=0.20))
    hiccup = verdict("h1-8000", [s(100.0, 30.0)] * 2, s(100.0, 60.0), LIMITS, fleet_spread=0.20)
    assert hiccup.outcome == "fail"
    assert not gross(hiccup)
    # the --full run of 2026-11-27: one noisy run of a no-change release read -18% (a fail): measured again
    noisy = verdict("h1-8000", [s(338.3), s(334.7)], s(307.4), LIMITS, fleet_spread=0.03,
                    control_baseline=[s(356.5), s(346.4)], control_now=s(390.1))  # fmt: skip
    assert noisy.outcome == "fail"
    assert not gross(noisy)
    # a pass, an inconclusive verdict and one without figures are never gross
    assert not gross(verdict("h1-8000", [s(100.0)] * 2, s(100.0), LIMITS, fleet_spread=0.0))
    assert not gross(verdict("h1-8000", [s(100.0)] * 2, s(100.0), LIMITS, fleet_spread=0.30))
    assert not gross(Verdict("h1-8000", "fail", ["2 request(s) failed"]))
