"""The performance gate sized by time (issue 25 item 2): prompts from a first run's pace, baseline repeats until the
last runs agree or a limit says stop, and which bench failures mean a fleet too busy to measure."""

from __future__ import annotations

import pytest

from tests.unit.test_rollout_cli import models  # noqa: F401  (a fixture)
from zenops.errors import HostFailure, RunFailedError
from zenops.rollout.gates import busy_failure
from zenops.rollout.plan import GateLimits, GateSizing, Sample, more_baseline_runs, settled, sized_prompts, window
from zenops.rollout.run import RolloutRequest

SIZING = GateSizing(first_prompts=32, min_seconds=10.0, max_prompts=4096, repeats=2, max_repeats=5, time_limit_s=300)
LIMITS = GateLimits(max_spread=0.25)


def runs(*per_run: float, server: str = "h1-8000") -> dict[str, list[Sample]]:
    return {server: [Sample(x, 10.0, duration_s=12.0) for x in per_run]}


def test_a_short_first_run_is_scaled_to_the_minimum_duration_in_whole_waves():
    # 32 prompts in 1.4 s (a tiny model): 10 s needs 32 * 10 / 1.4 = 229, +10% = 252 -> 252 (C=4 waves: 63 x 4)
    assert sized_prompts(32, 1.4, SIZING, concurrency=4) == 252
    assert sized_prompts(32, 1.4, SIZING, concurrency=5) == 255  # rounded up to a whole wave of 5


def test_a_run_already_long_enough_keeps_its_prompts():
    assert sized_prompts(32, 10.0, SIZING, concurrency=4) == 32
    assert sized_prompts(32, 95.0, SIZING, concurrency=4) == 32


def test_an_unknown_duration_keeps_the_prompts_and_the_cap_holds():
    assert sized_prompts(32, None, SIZING) == 32
    assert sized_prompts(32, 0.0, SIZING) == 32
    assert sized_prompts(32, 0.01, SIZING) == 4096  # a run that lasted nothing would ask 35200 prompts
    assert sized_prompts(8000, None, SIZING) == 4096


def test_the_baseline_is_the_last_repeats_runs():
    r = runs(50.0, 80.0, 79.0)
    assert [s.output_tok_s for s in window(r, 2)["h1-8000"]] == [80.0, 79.0]


@pytest.mark.parametrize(
    ("tok_s", "expected"),
    [
        ((80.0,), False),  # one run: not enough
        ((80.0, 79.0), True),  # spread 1%
        ((50.0, 80.0), False),  # spread 46% > 25%
        ((50.0, 80.0, 79.0), True),  # the last two agree: the noisy first one is dropped
    ],
)
def test_settled_needs_the_last_runs_to_agree_within_max_spread(tok_s, expected):
    assert settled(runs(*tok_s), SIZING, LIMITS) is expected


def test_settled_needs_every_server():
    both = {**runs(80.0, 79.0), **runs(40.0, 80.0, server="h2-8000")}
    assert not settled(both, SIZING, LIMITS)
    assert not settled({}, SIZING, LIMITS)


def test_more_runs_until_settled_or_a_limit():
    assert more_baseline_runs({}, SIZING, LIMITS, elapsed_s=0)
    assert more_baseline_runs(runs(80.0), SIZING, LIMITS, elapsed_s=999)  # fewer than `repeats`: always one more
    assert not more_baseline_runs(runs(80.0, 79.0), SIZING, LIMITS, elapsed_s=20)  # settled
    assert more_baseline_runs(runs(50.0, 80.0), SIZING, LIMITS, elapsed_s=30)  # noisy, time left
    # noisy, but the next run (about 105 s, the average so far) would end past the 300 s limit
    assert not more_baseline_runs(runs(50.0, 80.0), SIZING, LIMITS, elapsed_s=210)
    assert more_baseline_runs(runs(50.0, 80.0), SIZING, LIMITS, elapsed_s=200)  # ends at 300 s: still inside
    assert not more_baseline_runs(runs(50.0, 80.0, 50.0, 80.0, 50.0), SIZING, LIMITS, elapsed_s=30)  # max_repeats


def test_baseline_time_limit_is_per_server_measured_in_turn():
    # 3 hosts on one kernel take turns: 2 rounds took 230 s (the 3-host fleet of 2026-11-28 stopped there, spread 25%)
    noisy = runs(50.0, 80.0)
    assert not more_baseline_runs(noisy, SIZING, LIMITS, elapsed_s=230)
    assert more_baseline_runs(noisy, SIZING, LIMITS, elapsed_s=230, in_turn=3)  # 345 s of 900
    assert not more_baseline_runs(noisy, SIZING, LIMITS, elapsed_s=610, in_turn=3)  # a third round ends past 900 s
    assert more_baseline_runs(noisy, SIZING, LIMITS, elapsed_s=200, in_turn=0)  # no group: the limit as it is
    assert not more_baseline_runs(noisy, SIZING, LIMITS, elapsed_s=210, in_turn=0)


def test_the_request_builds_its_sizing_from_the_flags():
    req = RolloutRequest(changes={}, gate_prompts=16, gate_seconds=20, baseline_repeats=3, baseline_max_repeats=2)
    s = req.sizing
    assert (s.first_prompts, s.min_seconds, s.repeats) == (16, 20, 3)
    assert s.max_repeats == 3  # never fewer runs at most than the baseline keeps


def failed(*failures: HostFailure) -> RunFailedError:
    return RunFailedError("bench.yml", list(failures), rc=2)


def test_an_answer_check_that_timed_out_is_a_busy_fleet():
    e = failed(
        HostFailure(
            "h1",
            "vllm_server : Check each server answers, and which platform it runs",
            "http://127.0.0.1:8000/v1/completions failed: The read operation timed out",
        )
    )
    assert busy_failure(e) == "h1: http://127.0.0.1:8000/v1/completions failed: The read operation timed out"
    e = failed(HostFailure("h2", "Check each server answers", "http://x:8000: /health did not answer 200 within 5s"))
    assert busy_failure(e) is not None


@pytest.mark.parametrize(
    "failure",
    [
        HostFailure("h1", "Check each server answers", "http://x:8000/v1/models answered HTTP 401 (wrong API key?)"),
        HostFailure("h1", "Fail when a server is not running", "not running on h1: zenops-vllm-0 is exited"),
        HostFailure("h1", "Check each server answers", "timed out", unreachable=True),
        HostFailure("h1", "Run the benchmark", "the client timed out"),  # a run too long: not the answer check
    ],
)
def test_other_bench_failures_are_not_a_busy_fleet(failure):
    assert busy_failure(failed(failure)) is None


# --- the baseline as the rollout measures it (zenops.bench.run.bench_inventory replaced by a TEST DOUBLE that answers
# with scripted figures: the real one runs playbooks/bench.yml against vLLM servers, tests/e2e/test_rollout_fleet.py)


def scripted_bench(monkeypatch, script):
    """Each bench_inventory call answers the next entry of ``script``: (duration_s, {host: tok/s}) or an exception."""
    from types import SimpleNamespace  # noqa: PLC0415

    from zenops.bench import run as bench_run  # noqa: PLC0415

    asked: list[tuple[str, int]] = []

    def fake(ctx, inventory, req, *, limit=None):
        step = script[len(asked)]
        asked.append((req.run_id.rsplit("-", 1)[0], req.num_prompts))
        if isinstance(step, Exception):
            raise step
        duration, figures = step
        results = [
            SimpleNamespace(
                metadata={"host": h},
                instance=0,
                output_tok_s=tps,
                median_ttft_ms=9.0,
                failed=0,
                server=None,
                duration_s=duration,
            )
            for h, tps in figures.items()
        ]
        return SimpleNamespace(report=SimpleNamespace(results=results))

    monkeypatch.setattr(bench_run, "bench_inventory", fake)
    return asked


@pytest.fixture
def two_hosts(isolated_home, tmp_path, monkeypatch, models):  # noqa: F811
    from tests.unit.test_rollout_cli import Fleet  # noqa: PLC0415
    from zenops.config import load  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    f = Fleet(load(), tmp_path / "fleet.ini", models)
    f.serve(["h1", "h2"])
    return f


def baseline_of(fleet, req):
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.rollout.run import Rollout  # noqa: PLC0415

    notes: list[str] = []
    r = Rollout(RunContext(fleet.config, note=notes.append), fleet.inventory, req)
    r.state = r.prepare()
    assert r.perf.baseline() is None
    return r.state, notes


def test_the_baseline_sizes_its_runs_by_time_and_repeats_until_the_last_two_agree(two_hosts, monkeypatch):
    asked = scripted_bench(
        monkeypatch,
        [
            (1.4, {"h1": 300.0, "h2": 310.0}),  # the sizing run: 32 prompts in 1.4 s
            (11.0, {"h1": 200.0, "h2": 300.0}),  # h1 noisy
            (11.0, {"h1": 290.0, "h2": 305.0}),
            (11.0, {"h1": 300.0, "h2": 300.0}),  # the last two agree on both servers
        ],
    )
    state, notes = baseline_of(two_hosts, RolloutRequest(changes={"max_num_seqs": 1}))
    assert asked == [("baseline-sizing", 32), ("baseline1", 252), ("baseline2", 252), ("baseline3", 252)]
    assert state.gate_prompts == 252
    port = state.from_record["plans"]["h1"]["instances"][0]["port"]
    assert [x["output_tok_s"] for x in state.baseline[f"h1-{port}"]] == [290.0, 300.0]
    assert state.baseline_all[f"h1-{port}"] == [200.0, 290.0, 300.0]
    assert state.baseline_spread == pytest.approx(10 / 295)
    assert "each gate run has 252 prompts" in "\n".join(notes), notes


def test_a_first_run_long_enough_counts_and_two_runs_can_do(two_hosts, monkeypatch):
    asked = scripted_bench(monkeypatch, [(12.0, {"h1": 50.0, "h2": 51.0}), (12.0, {"h1": 50.5, "h2": 50.0})])
    state, _notes = baseline_of(two_hosts, RolloutRequest(changes={"max_num_seqs": 1}))
    assert asked == [("baseline-sizing", 32), ("baseline2", 32)]
    assert state.gate_prompts == 32
    assert all(len(v) == 2 for v in state.baseline.values())


def test_a_baseline_that_never_settles_stops_at_its_limit_and_says_busy_with_its_figures(two_hosts, monkeypatch):
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.rollout.run import Rollout  # noqa: PLC0415

    noisy = [(11.0, {"h1": 100.0, "h2": 200.0}), (11.0, {"h1": 200.0, "h2": 100.0})] * 3
    asked = scripted_bench(monkeypatch, [(1.0, {"h1": 100.0, "h2": 100.0}), *noisy])
    req = RolloutRequest(changes={"max_num_seqs": 1}, baseline_max_repeats=4)
    r = Rollout(RunContext(two_hosts.config), two_hosts.inventory, req)
    r.state = r.prepare()
    v = r.perf.baseline()
    assert len(asked) == 1 + 4  # it stopped at its limit
    assert v is not None
    assert (v.server, v.outcome, v.figures["gate"]) == ("the baseline", "busy", "spread")
    assert v.figures["spread"] == pytest.approx(100 / 150, abs=1e-4)
    assert (v.figures["max_spread"], v.figures["runs"]) == (0.25, 4)
    assert "spread 67% on h1-" in v.reasons[0]
    assert "over --max-spread 25% after 4 run(s)" in v.reasons[0]
    assert r.state.baseline == {}  # no baseline kept: a re-run measures it again


def test_a_baseline_that_never_settles_pauses_the_rollout_before_any_host_changes(two_hosts, monkeypatch):
    """Reported: the baseline spent 867 s, spread 104% over --max-spread 25%, then changed the canary anyway."""
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.errors import RolloutPausedError  # noqa: PLC0415
    from zenops.rollout.run import Rollout  # noqa: PLC0415

    noisy = [(11.0, {"h1": 100.0, "h2": 300.0}), (11.0, {"h1": 300.0, "h2": 100.0})] * 3
    scripted_bench(monkeypatch, [(1.0, {"h1": 100.0, "h2": 100.0}), *noisy])
    req = RolloutRequest(changes={"max_num_seqs": 1}, baseline_max_repeats=4)
    r = Rollout(RunContext(two_hosts.config), two_hosts.inventory, req)
    state = r.prepare()
    served: list[object] = []
    monkeypatch.setattr(r, "serve", lambda *a, **k: served.append(a))  # a changed host would pass here
    monkeypatch.setattr(r, "drain", served.append)
    with pytest.raises(RolloutPausedError, match="too busy to measure the baseline: the runs did not settle") as e:
        r.run(state)
    assert e.value.exit_code == 16
    assert "spread 100% on h1-" in e.value.message
    assert "--max-spread 25%" in e.value.message
    assert "nothing was drained" in (e.value.hint or "")
    assert "raise --max-spread" in (e.value.hint or "")
    assert served == []  # no host drained, none served the new release
    assert state.status == "paused"
    assert all(b.status == "pending" for b in state.batches)
    (paused,) = [x for x in r.ledger.history() if x["event"] == "paused"]
    assert paused["figures"]["runs"] == 4


def test_servers_too_busy_to_answer_pause_the_rollout_before_anything_changes(two_hosts, monkeypatch):
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.errors import RolloutPausedError  # noqa: PLC0415
    from zenops.rollout.run import Rollout  # noqa: PLC0415

    busy = failed(HostFailure("h2", "Check each server answers", "http://h2:8000/v1/completions failed: timed out"))
    asked = scripted_bench(monkeypatch, [busy])
    r = Rollout(RunContext(two_hosts.config), two_hosts.inventory, RolloutRequest(changes={"max_num_seqs": 1}))
    state = r.prepare()
    # the gate says so, as a verdict ...
    r.state = state
    v = r.perf.baseline()
    assert v is not None
    assert (v.outcome, v.server) == ("busy", "the baseline")
    assert "h2: http://h2:8000/v1/completions failed: timed out" in v.reasons[0]
    # ... and the driver pauses on it (exit 16), before anything changed
    asked.clear()
    scripted_bench(monkeypatch, [busy])
    with pytest.raises(RolloutPausedError, match="too busy to measure the baseline: h2") as e:
        r.run(state)
    assert e.value.exit_code == 16
    assert "nothing was drained" in (e.value.hint or "")
    assert state.status == "paused"
    assert all(b.status == "pending" for b in state.batches)


def test_another_bench_failure_is_not_a_pause(two_hosts, monkeypatch):
    broken = failed(
        HostFailure("h2", "Fail when a server is not running", "not running on h2: zenops-vllm-0 is exited")
    )
    scripted_bench(monkeypatch, [broken])
    with pytest.raises(RunFailedError):
        baseline_of(two_hosts, RolloutRequest(changes={"max_num_seqs": 1}))
