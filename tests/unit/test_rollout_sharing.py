"""The rollout's gate measurements on hosts that share a machine: hosts whose saved facts have the same kernel boot id
(containers on one machine, e.g. the devhosts of the fleet e2e) are benchmarked one after another, others all at
once. `zenops.bench.run.bench_inventory` is replaced by a TEST DOUBLE that records the request (the real one runs
playbooks/bench.yml against vLLM servers: tests/e2e/test_rollout_fleet.py); what is checked is what the rollout asks
of it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_rollout_cli import FACTS, Fleet, models  # noqa: F401  (models: a fixture)
from zenops.bench import run as bench_run
from zenops.config import load
from zenops.context import RunContext
from zenops.facts import save_facts
from zenops.rollout.run import Rollout, RolloutRequest

BOOT_A = "11111111-2222-3333-4444-555555555555"
BOOT_B = "66666666-7777-8888-9999-000000000000"


@pytest.fixture
def fleet(isolated_home, tmp_path, monkeypatch, models) -> Fleet:  # noqa: F811
    monkeypatch.chdir(tmp_path)
    f = Fleet(load(), tmp_path / "fleet.ini", models)
    f.serve()  # h1, h2, h3 with the gp.5.24.96 facts
    return f


def with_boot_ids(fleet: Fleet, ids: dict[str, str | None]) -> None:
    topo = json.loads(FACTS.read_text())
    for host, boot in ids.items():
        facts = {k: v for k, v in topo.items() if k != "boot_id"}
        if boot is not None:
            facts["boot_id"] = boot
        save_facts(fleet.config, host, facts)


def measure(fleet: Fleet, monkeypatch: pytest.MonkeyPatch, hosts: list[str]) -> tuple[list[Any], list[str]]:
    """PerfGate.measure on ``hosts``: the requests the bench got, the notes the rollout printed."""
    seen: list[Any] = []
    notes: list[str] = []

    def fake_bench(ctx: Any, inventory: Path, req: Any, *, limit: str | None = None) -> Any:
        seen.append((req, limit))
        return SimpleNamespace(report=SimpleNamespace(results=[]))

    monkeypatch.setattr(bench_run, "bench_inventory", fake_bench)
    ctx = RunContext(fleet.config, note=notes.append)
    r = Rollout(ctx, fleet.inventory, RolloutRequest(changes={"max_num_seqs": 1}))
    r.state = SimpleNamespace(  # type: ignore[assignment]
        run_dir=str(fleet.inventory.parent / "runs"), gate_prompts=None, served={}, retired=[]
    )
    assert r.perf.measure(hosts, "gate-batch1") == {}
    # the gate's runs: zenops's light client, and each host's platform as its health gate saw it (not asked again)
    for req, _limit in seen:
        assert req.client == "zenops"
        assert req.known_platforms == {h: r.record.endpoints[h][0]["platform"] for h in hosts}
    return seen, notes


def test_hosts_on_one_kernel_are_measured_one_after_another(fleet, monkeypatch):
    with_boot_ids(fleet, {"h1": BOOT_A, "h2": BOOT_A, "h3": BOOT_B})
    seen, notes = measure(fleet, monkeypatch, ["h1", "h2"])
    assert [(req.one_at_a_time, limit) for req, limit in seen] == [(True, "h1,h2")]
    assert any("h1, h2: one machine (the same kernel): measured one after another" in n for n in notes), notes


def test_hosts_on_different_kernels_are_measured_at_the_same_time(fleet, monkeypatch):
    with_boot_ids(fleet, {"h1": BOOT_A, "h2": BOOT_A, "h3": BOOT_B})
    seen, notes = measure(fleet, monkeypatch, ["h1", "h3"])
    assert [(req.one_at_a_time, limit) for req, limit in seen] == [(False, "h1,h3")]
    assert not any("one machine" in n for n in notes), notes


def test_gate_runs_warm_the_servers_up_before_measuring(fleet, monkeypatch):
    # a server just started answers its first requests slower: every gate run (baseline, canary, control) asks for
    # unmeasured requests first, --gate-warmups of them
    with_boot_ids(fleet, {"h1": BOOT_A, "h2": BOOT_B, "h3": BOOT_B})
    seen, _notes = measure(fleet, monkeypatch, ["h1", "h2"])
    ((req, _limit),) = seen
    assert req.num_warmups == RolloutRequest(changes={}).gate_warmups == 8
    assert req.concurrency == (4,)
    assert req.num_prompts == 32


def test_facts_without_a_boot_id_count_as_machines_of_their_own(fleet, monkeypatch):
    # facts saved before zenops read the boot id, or a kernel without one: measured as before, all at once
    with_boot_ids(fleet, {"h1": None, "h2": None, "h3": None})
    seen, _notes = measure(fleet, monkeypatch, ["h1", "h2", "h3"])
    assert [req.one_at_a_time for req, _limit in seen] == [False]


def test_the_baseline_says_which_facts_have_no_boot_id(fleet):
    with_boot_ids(fleet, {"h1": BOOT_A, "h2": None, "h3": None})
    notes: list[str] = []
    r = Rollout(RunContext(fleet.config, note=notes.append), fleet.inventory, RolloutRequest(changes={}))
    r.perf.note_unknown_boot_ids(["h1", "h2", "h3"])
    assert len(notes) == 1, notes
    assert "the saved facts of h2, h3 have no kernel boot id" in notes[0], notes
    assert f"zenops facts -i {fleet.inventory}" in notes[0]
    notes.clear()
    r.perf.note_unknown_boot_ids(["h2"])  # one host measures nothing but itself
    with_boot_ids(fleet, {"h1": BOOT_A, "h2": BOOT_B, "h3": BOOT_B})
    r.perf.note_unknown_boot_ids(["h1", "h2", "h3"])
    assert notes == []


def test_one_bench_request_asks_the_playbook_for_one_host_at_a_time(tmp_path, monkeypatch):
    from tests.unit.test_bench import GOOD, _served, bench_playbook  # noqa: PLC0415

    config, inv = _served(tmp_path)
    specs: list[Any] = []
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, seen=specs))
    for one, run_id in ((True, "apart"), (False, "together")):
        req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=run_id, one_at_a_time=one)
        bench_run.bench_inventory(RunContext(config), inv, req)
    assert specs[0].extravars["zenops_bench_serial"] == 1
    assert "zenops_bench_serial" not in specs[1].extravars  # the playbook's default: all hosts at once


def gated_rollout(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, float]]
) -> tuple[Any, list, list]:
    """A Rollout over h1, h2, h3 in three batches of one, whose baseline is 100 tok/s (TTFT 50 ms) each, with the
    gate's measurement replaced (a TEST DOUBLE): ``runs``, the tok/s of each gate run, server -> figure, in order.
    Returns the rollout, the measured hosts per run and the notes."""
    from zenops.deployment.rollouts import BatchState  # noqa: PLC0415
    from zenops.rollout import gates  # noqa: PLC0415
    from zenops.rollout.plan import Sample  # noqa: PLC0415

    notes: list[str] = []
    measured: list[tuple[list[str], str]] = []

    def fake_measure(gate: Any, hosts: list[str], label: str, prompts: int | None = None) -> dict[str, Sample]:
        measured.append((hosts, label))
        return {server: Sample(tok_s, 50.0) for server, tok_s in runs[len(measured) - 1].items()}

    monkeypatch.setattr(gates.PerfGate, "measure", fake_measure)
    r = Rollout(
        RunContext(fleet.config, note=notes.append), fleet.inventory, RolloutRequest(changes={"max_num_seqs": 1})
    )
    base = [{"output_tok_s": 100.0, "median_ttft_ms": 50.0}] * 2
    r.state = SimpleNamespace(  # type: ignore[assignment]
        batches=[BatchState(["h1"]), BatchState(["h2"]), BatchState(["h3"])],
        baseline={"h1-8000": base, "h2-8000": base, "h3-8000": base},
        baseline_spread=0.0,
        gate_reference={},
        retired=[],
    )
    return r, measured, notes


def gate_batch(fleet: Fleet, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, float]]) -> tuple[Any, list, list]:
    """PerfGate.batch for batch 1 (h1) of gated_rollout's h1, h2, h3; ``runs``: the tok/s of each gate run, server ->
    figure, in order. Returns the verdicts, the measured hosts per run and the notes."""
    r, measured, notes = gated_rollout(fleet, monkeypatch, runs)
    return r.perf.batch(0, r.state.batches[0]), measured, notes


def test_an_in_place_batch_gate_measures_again_after_a_slow_run_and_passes_on_the_mean(fleet, monkeypatch):
    verdicts, measured, notes = gate_batch(
        fleet, monkeypatch, [{"h1-8000": 80.0, "h2-8000": 100.0}, {"h1-8000": 100.0, "h2-8000": 100.0}]
    )
    # h2 is the control (an untouched host of a later batch), measured with h1 in each run
    assert measured == [(["h1", "h2"], "gate-batch1"), (["h1", "h2"], "gate-batch1-run2")]
    assert [(v.server, v.outcome, v.figures["new_runs"]) for v in verdicts] == [("h1-8000", "pass", [80.0, 100.0])]
    assert any("h1-8000 -20% in gate run 1 of up to 3: measuring again" in n for n in notes), notes


def test_an_in_place_batch_gate_that_stays_slow_fails_after_its_runs(fleet, monkeypatch):
    # -15%: beyond the 10% bound, within twice it (plan.gross): each run could be noise, so all three are measured
    verdicts, measured, _notes = gate_batch(fleet, monkeypatch, [{"h1-8000": 85.0, "h2-8000": 100.0}] * 3)
    assert len(measured) == 3
    assert [(v.outcome, v.figures["new_tok_s"], v.figures["drift"]) for v in verdicts] == [("fail", 85.0, 1.0)]


def test_an_in_place_batch_gate_far_beyond_its_bound_fails_after_one_run(fleet, monkeypatch):
    # -50% against a 10% bound (spread 0): a slower release, not one run's noise to average out over more runs
    verdicts, measured, notes = gate_batch(fleet, monkeypatch, [{"h1-8000": 50.0, "h2-8000": 100.0}] * 3)
    assert measured == [(["h1", "h2"], "gate-batch1")]
    assert [(v.outcome, v.figures["new_tok_s"], v.figures["new_runs"]) for v in verdicts] == [("fail", 50.0, [50.0])]
    assert any("h1-8000 -50% in gate run 1: far beyond the gate's bounds" in n for n in notes), notes
    assert not any("measuring again" in n for n in notes), notes


@pytest.mark.parametrize(
    ("control_now", "outcome"),
    [(50.0, "pass"), (100.0, "fail")],
    ids=["the-machine-slowed-down", "the-release-is-slower"],
)
def test_the_last_batch_is_measured_with_a_host_whose_release_passed_an_earlier_gate(
    fleet, monkeypatch, control_now, outcome
):
    # batch 1 (h1, control h2: the first untouched host) and batch 2 (h2, control h3) pass at their baseline's 100
    # tok/s. Batch 3 (h3) has no untouched host left: h2, changed in batch 2 and passed there (at 100, drift 1.0),
    # is its control. h3 at 50: when h2 reads 50 now the machine halved, expected 50, a pass; when h2 still reads
    # 100, h3's -50% is the release, a fail (far beyond the bound: measured once).
    r, measured, notes = gated_rollout(
        fleet,
        monkeypatch,
        [
            {"h1-8000": 100.0, "h2-8000": 100.0},
            {"h2-8000": 100.0, "h3-8000": 100.0},
            {"h3-8000": 50.0, "h2-8000": control_now},
        ],
    )
    for i in (0, 1):
        assert [v.outcome for v in r.perf.batch(i, r.state.batches[i])] == ["pass"]
    assert r.state.gate_reference["host"] == "h2"
    (v,) = r.perf.batch(2, r.state.batches[2])
    assert [hosts for hosts, _label in measured] == [["h1", "h2"], ["h2", "h3"], ["h3", "h2"]]
    assert (v.server, v.outcome, v.figures["control"]) == ("h3-8000", outcome, "h2-8000")
    assert v.figures["drift"] == pytest.approx(control_now / 100.0)
    assert v.figures["expected_tok_s"] == pytest.approx(control_now)
    assert f"(control h2-8000 drift x{control_now / 100.0:.2f})" in v.line()
    assert any("no untouched host left for batch 3: h2 (its new release passed batch 2's gate)" in n for n in notes)


def test_the_other_servers_of_a_passed_control_host_are_not_judged_again(fleet, monkeypatch):
    # h2 serves two instances; its 8000 passed batch 2's gate and is the last batch's control: its 8001 (a server of
    # the control host, already judged in batch 2) is measured with it but gives no verdict of batch 3
    r, _measured, _notes = gated_rollout(
        fleet,
        monkeypatch,
        [
            {"h1-8000": 100.0, "h2-8000": 100.0},
            {"h2-8000": 100.0, "h3-8000": 100.0},
            {"h3-8000": 50.0, "h2-8000": 50.0, "h2-8001": 10.0},
        ],
    )
    for i in (0, 1):
        r.perf.batch(i, r.state.batches[i])
    r.state.baseline["h2-8001"] = r.state.baseline["h2-8000"]
    verdicts = r.perf.batch(2, r.state.batches[2])
    assert [(v.server, v.outcome, v.figures["control"]) for v in verdicts] == [("h3-8000", "pass", "h2-8000")]


def test_a_failed_gate_is_no_reference_and_a_batch_without_one_is_judged_on_its_baseline(fleet, monkeypatch):
    r, measured, notes = gated_rollout(fleet, monkeypatch, [{"h1-8000": 40.0, "h2-8000": 100.0}, {"h3-8000": 100.0}])
    assert [v.outcome for v in r.perf.batch(0, r.state.batches[0])] == ["fail"]
    assert r.state.gate_reference == {}
    (v,) = r.perf.batch(2, r.state.batches[2])  # the last batch, nothing passed before it: no control
    assert measured[-1] == (["h3"], "gate-batch3")
    assert (v.outcome, v.figures["drift"], v.figures.get("control")) == ("pass", None, None)
    assert not any("no untouched host left" in n for n in notes)
