"""zenops.bandwidth: what each probe measures (one thread per core, never an SMT sibling), the arithmetic of GB/s and
GFLOP/s, parsing the probe, keeping the measurement with the facts, and `zenops facts --bandwidth` end to end with a
recorded playbook result (the real probe runs in tests/e2e/test_roofline_devhost.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from zenops import bandwidth, serve
from zenops import facts as facts_lib
from zenops.config import Config
from zenops.context import RunContext
from zenops.cpulist import parse_cpulist
from zenops.errors import ExitCode, UsageError
from zenops.facts import facts_path, load_facts_file, save_facts
from zenops.planner import Topology
from zenops.runner import HostStats, RunResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"
ALL_FACTS = sorted(FIXTURES.glob("*.json"))

# what the probe printed on this kind of machine (2 cores, torch 2.13 CPU): raw timings only
PROBE_OUT = {
    "probe": "zenops-bandwidth",
    "schema": 1,
    "node": 0,
    "cpus": [0, 1],
    "threads": 2,
    "l3_bytes": 33554432,
    "triad": {"elements": 67108864, "element_bytes": 4, "arrays": 3, "best_s": 0.03125, "runs": 27},
    "gemm": {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16", "op": "torch.matmul", "best_s": 0.075, "runs": 12},
    "torch": "2.13.0+cpu",
    "zentorch": None,
    "python": "3.11.7",
}


def facts(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


# --- what to measure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_FACTS, ids=lambda p: p.stem)
def test_one_probe_per_node_on_one_thread_of_each_allowed_core(path):
    t = json.loads(path.read_text())
    targets = bandwidth.probe_targets(t)
    topo = Topology.from_facts(t)
    assert [x["node"] for x in targets] == [n.id for n in topo.nodes]
    siblings = {c["cpu"]: set(c.get("siblings") or [c["cpu"]]) for c in t["cpus"]}
    allowed = set(t["allowed_cpus"]) & set(t["online_cpus"])
    for target in targets:
        cpus = parse_cpulist(target["cpus"])
        node = next(n for n in t["numa_nodes"] if n["id"] == target["node"])
        assert set(cpus) <= set(node["cpus"]) & allowed
        assert target["mems"] == str(target["node"])
        assert target["cores"] == len(cpus)
        for a in cpus:  # never two threads of one core
            assert not (siblings[a] - {a}) & set(cpus)
    assert sum(x["cores"] for x in targets) == topo.physical_cores


def test_zentorch_is_probed_only_where_the_zen_platform_runs():
    """On an AVX2-only EPYC or an Intel host the engine runs without zentorch (hidden), and its AVX-512 kernels could
    kill the probe: it must not import it there."""
    expected = {
        "zen4-vm-hotplug.json": True,  # AMD Zen 4 with AVX-512
        "epyc-9755-2s.json": True,
        "epyc-7763-vm.json": False,  # AMD Zen 3: AVX2 only
        "xeon-8480-2s.json": False,  # Intel with AVX-512: zentorch is AMD's
    }
    for name, zentorch in expected.items():
        targets = bandwidth.probe_targets(facts(name))
        assert targets, name
        assert {t["zentorch"] for t in targets} == {zentorch}, name


def test_probe_cpus_follow_sibling_numbering_interleaved_and_adjacent():
    assert [x["cpus"] for x in bandwidth.probe_targets(facts("vm-8-smt-interleaved.json"))] == ["0-3"]
    adjacent = bandwidth.probe_targets(facts("vm-8-smt-adjacent.json"))
    assert parse_cpulist(adjacent[0]["cpus"]) == [0, 2, 4, 6]


# --- the arithmetic -------------------------------------------------------------------------------------------


def test_triad_counts_three_arrays_and_decimal_gigabytes():
    # 1e9 float32 elements x 3 arrays = 12e9 bytes in 0.5 s = 24 GB/s
    assert bandwidth.triad_gbps(1_000_000_000, 4, 3, 0.5) == pytest.approx(24.0)
    # 256 MiB arrays (67108864 floats) in 31.25 ms: 805306368 bytes / 0.03125 s
    assert bandwidth.triad_gbps(67108864, 4, 3, 0.03125) == pytest.approx(25.769803776)


def test_gemm_counts_two_flops_per_multiply_add():
    # 1000 x 1000 x 1000 = 1e9 multiply-adds = 2e9 FLOPs in 0.01 s = 200 GFLOP/s
    assert bandwidth.gemm_gflops(1000, 1000, 1000, 0.01) == pytest.approx(200.0)
    assert bandwidth.gemm_gflops(2048, 2048, 2048, 0.075) == pytest.approx(229.0649, rel=1e-6)
    assert bandwidth.gemm_gflops(10, 20, 30, 1.0) == pytest.approx(2 * 6000 / 1e9)  # not square: m n k


@pytest.mark.parametrize("args", [(0, 4, 3, 1.0), (10, 4, 3, 0.0), (10, 0, 3, 1.0), (10, 4, 3, -1.0)])
def test_triad_refuses_what_is_not_a_measurement(args):
    with pytest.raises(ValueError, match="positive"):
        bandwidth.triad_gbps(*args)


def test_gemm_refuses_zero_time():
    with pytest.raises(ValueError, match="positive"):
        bandwidth.gemm_gflops(8, 8, 8, 0)


# --- parsing the probe ----------------------------------------------------------------------------------------


def test_parse_probe_takes_the_json_line_and_labels_the_method():
    stdout = "a torch warning\n" + json.dumps(PROBE_OUT) + "\n"
    f = bandwidth.parse_probe(stdout, where="h node 0", image="zenops/vllm-zen:x")
    assert f.node == 0
    assert f.cores == 2
    assert f.gbps == round(bandwidth.triad_gbps(67108864, 4, 3, 0.03125), 2)
    assert f.gflops == round(bandwidth.gemm_gflops(2048, 2048, 2048, 0.075), 1)
    for part in ("STREAM triad 3 x 256 MiB", "2 thread(s)", "bfloat16 GEMM 2048x2048x2048", "torch 2.13.0+cpu",
                 "zenops/vllm-zen:x"):  # fmt: skip
        assert part in f.method
    assert "zentorch" not in f.method
    with_zt = bandwidth.parse_probe(json.dumps({**PROBE_OUT, "zentorch": "5.2.1"}), where="h", image="i")
    assert "zentorch 5.2.1" in with_zt.method


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [
        ("", "printed no result"),
        ("Traceback ...\nImportError: torch", "printed no result"),
        (json.dumps({"error": "triad gave a wrong result"}), "triad gave a wrong result"),
        (json.dumps({k: v for k, v in PROBE_OUT.items() if k != "gemm"}), "incomplete"),
        (json.dumps({**PROBE_OUT, "triad": {**PROBE_OUT["triad"], "best_s": 0}}), "incomplete"),
    ],
)
def test_parse_probe_says_what_is_wrong(stdout, problem):
    with pytest.raises(bandwidth.MeasurementError, match=problem) as e:
        bandwidth.parse_probe(stdout, where="web-1 node 0", image="i")
    assert "web-1 node 0" in e.value.message


def _run(node: int, out: dict[str, Any] | None = None, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    return {
        "item": {"node": node, "cpus": "0-1", "mems": str(node), "cores": 2},
        "rc": rc,
        "stdout": json.dumps(out or {**PROBE_OUT, "node": node}),
        "stderr": stderr,
    }


def test_from_runs_makes_the_facts_key_the_planner_reads():
    result = {"image": "zenops/vllm-zen:v", "image_id": "sha256:1", "runs": [_run(1), _run(0)]}
    key = bandwidth.from_runs("web-1", result)
    assert list(key["nodes"]) == ["0", "1"]
    assert key["image"] == "zenops/vllm-zen:v"
    node = key["nodes"]["0"]
    assert node["cores"] == 2
    assert node["gbps"] == pytest.approx(25.77)
    # the planner reads it back as node 0's measured roofs
    topo = Topology.from_facts({**facts("gp-5-24-96.json"), "bandwidth": key})
    m = topo.measurement(0)
    assert m is not None
    assert (m.gbps, m.gflops, m.cores) == (node["gbps"], node["gflops"], 2)
    assert not topo.notes


@pytest.mark.parametrize(("rc", "why"), [(1, "exit 1"), (124, "timed out"), (137, "timed out")])
def test_from_runs_fails_a_node_whose_probe_failed(rc, why):
    result = {"image": "i", "runs": [_run(0), _run(1, rc=rc, stderr="line\nModuleNotFoundError: No module torch")]}
    with pytest.raises(bandwidth.MeasurementError) as e:
        bandwidth.from_runs("web-1", result)
    assert e.value.message.startswith(f"web-1 node 1: the bandwidth probe failed ({why})")
    assert "No module torch" in e.value.message
    assert "import torch" in (e.value.hint or "")


def test_from_runs_names_the_probes_own_error():
    result = {"image": "i", "runs": [_run(0, {"error": "triad gave a wrong result"}, rc=1, stderr="Traceback: boom")]}
    with pytest.raises(bandwidth.MeasurementError) as e:
        bandwidth.from_runs("web-1", result)
    assert "exit 1): triad gave a wrong result (Traceback: boom)" in e.value.message


def test_from_runs_without_runs_is_an_error():
    with pytest.raises(bandwidth.MeasurementError, match="no NUMA node was measured"):
        bandwidth.from_runs("web-1", {"image": "i", "runs": []})


# --- kept with the facts ----------------------------------------------------------------------------------------

MEASURED = {"nodes": {"0": {"gbps": 25.8, "gflops": 229.1, "method": "m", "cores": 2}}, "image": "i"}


def test_carry_over_keeps_the_measurement_of_the_same_hardware_only():
    old = {**facts("gp-5-24-96.json"), "bandwidth": MEASURED}
    same = facts("gp-5-24-96.json")
    assert bandwidth.carry_over(same, old)
    assert same["bandwidth"] == MEASURED
    fewer = facts("gp-5-24-96.json")
    fewer["allowed_cpus"] = fewer["allowed_cpus"][:-1]  # a cgroup took a CPU away: another measurement
    assert not bandwidth.carry_over(fewer, old)
    assert "bandwidth" not in fewer
    other_cpu = {**facts("gp-5-24-96.json"), "model_name": "AMD EPYC 9B14"}
    assert not bandwidth.carry_over(other_cpu, old)
    more_memory = facts("gp-5-24-96.json")
    more_memory["memory_total_kib"] *= 2  # DIMMs changed: the bandwidth may have too
    assert not bandwidth.carry_over(more_memory, old)
    node_meminfo_moved = facts("gp-5-24-96.json")
    node_meminfo_moved["numa_nodes"][0]["memory_total_kib"] -= 400 * 1024  # the VM quirk: not a new machine
    assert bandwidth.carry_over(node_meminfo_moved, old)
    own = {**facts("gp-5-24-96.json"), "bandwidth": {"nodes": {"0": {"gbps": 1.0}}}}
    assert not bandwidth.carry_over(own, old)
    assert own["bandwidth"]["nodes"]["0"]["gbps"] == 1.0
    assert not bandwidth.carry_over(facts("gp-5-24-96.json"), None)


def test_save_facts_carries_the_measurement_into_fresh_facts(tmp_path):
    config = Config(state_dir=tmp_path / "state")
    save_facts(config, "web-1", {**facts("gp-5-24-96.json"), "bandwidth": MEASURED})
    fresh = facts("gp-5-24-96.json")
    save_facts(config, "web-1", fresh)
    assert fresh["bandwidth"] == MEASURED  # the caller plans with it
    assert json.loads(facts_path(config, "web-1").read_text())["bandwidth"] == MEASURED
    moved = facts("vm-8-smt-adjacent.json")
    save_facts(config, "web-1", moved)  # other hardware under the same name: the old figures are dropped
    assert "bandwidth" not in json.loads(facts_path(config, "web-1").read_text())


# --- zenops facts --bandwidth, with the playbook runs recorded --------------------------------------------------


class FakeRuns:
    """Stands in for zenops.runner.run_playbook: the facts run returns fixture facts, the bandwidth run what the
    role returns for the nodes it was given (so the test sees what zenops asked for)."""

    def __init__(self, topology: dict[str, Any], fail_node: int | None = None) -> None:
        self.topology = topology
        self.fail_node = fail_node
        self.specs: list[Any] = []

    def __call__(self, spec: Any, settings: Any, sink: Any = None, cancel: Any = None) -> RunResult:
        self.specs.append(spec)
        result = RunResult("id", f"{spec.playbook}.yml", "successful", 0, Path("/run"), "now", 1.0)
        result.stats = {"web-1": HostStats()}
        if spec.playbook == "facts":
            result.host_facts = {"web-1": {"zenops_cpu_topology": copy.deepcopy(self.topology)}}
        else:
            nodes = spec.extravars["zenops_bandwidth_nodes"]["web-1"]
            runs = [
                {
                    "item": n,
                    "rc": 1 if n["node"] == self.fail_node else 0,
                    "stdout": json.dumps({**PROBE_OUT, "node": n["node"], "threads": n["cores"]}),
                    "stderr": "",
                }
                for n in nodes
            ]
            result.host_facts = {"web-1": {"zenops_bandwidth": {"image": "zenops/vllm-zen:v", "runs": runs}}}
        return result


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "hosts.ini"
    inv.write_text("web-1 ansible_host=192.0.2.1\n")
    return inv


def test_facts_bandwidth_measures_each_node_and_plan_uses_it(run, monkeypatch, inventory, tmp_path):
    fake = FakeRuns(facts("epyc-9654-2s-nps4.json"))
    monkeypatch.setattr("zenops.context.run_playbook", fake)
    monkeypatch.setattr("zenops.runner.run_playbook", fake)
    r = run(["facts", "--inventory", str(inventory), "--bandwidth", "--engine-image", "zenops/vllm-zen:v"])
    assert r.exit_code == 0, r.output
    assert [s.playbook for s in fake.specs] == ["facts", "bandwidth"]
    asked = fake.specs[1].extravars
    assert asked["zenops_bandwidth_image"] == "zenops/vllm-zen:v"
    assert [n["node"] for n in asked["zenops_bandwidth_nodes"]["web-1"]] == list(range(8))
    assert "node 7: 25.77 GB/s memory (triad)" in r.output
    saved = Path(r.output.split("saved")[-1].split()[0])
    kept = load_facts_file(saved)
    assert sorted(kept["bandwidth"]["nodes"]) == [str(i) for i in range(8)]
    assert kept["bandwidth"]["nodes"]["3"]["cores"] == 24
    # the plan reads the measurement and says so (exact figures: tests/unit/test_planner.py)
    r = run(["plan", "--facts", str(saved), "--model", "Qwen/Qwen3-8B", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output.strip().splitlines()[-1])
    plan = plan.get("plan", plan)
    roof = plan["instances"][0]["roofline"]
    assert roof["source"].startswith("measured")
    assert "25.77 GB/s" in roof["source"]
    # a later plain `zenops facts` keeps the measurement (same hardware)
    fake.specs.clear()
    r = run(["facts", "--inventory", str(inventory)])
    assert r.exit_code == 0, r.output
    assert [s.playbook for s in fake.specs] == ["facts"]
    assert "bandwidth" in load_facts_file(saved)


def test_facts_bandwidth_failure_names_the_node_and_saves_nothing_new(run, monkeypatch, inventory):
    fake = FakeRuns(facts("gp-5-24-96.json"), fail_node=0)
    monkeypatch.setattr("zenops.context.run_playbook", fake)
    monkeypatch.setattr("zenops.runner.run_playbook", fake)
    r = run(["facts", "--inventory", str(inventory), "--bandwidth"])
    assert r.exit_code != 0
    assert "web-1 node 0: the bandwidth probe failed (exit 1)" in r.output
    assert "zenops_bandwidth_image" not in fake.specs[1].extravars


@pytest.mark.parametrize("flag", ["--engine-image", "--image"])  # --image: the old spelling, still taken
def test_image_without_bandwidth_is_bad_usage(run, inventory, flag):
    r = run(["facts", "--inventory", str(inventory), flag, "x"])
    assert r.exit_code == ExitCode.USAGE
    assert "--engine-image goes with --bandwidth" in r.output


def test_local_without_image_or_torch_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(facts_lib, "_local_image", lambda image: False)
    monkeypatch.setattr(bandwidth, "local_torch_available", lambda python=None: False)
    topologies = {"localhost": facts("gp-5-24-96.json")}
    with pytest.raises(UsageError) as e:
        facts_lib.measure_hosts(
            RunContext(Config(state_dir=tmp_path)), tmp_path / "x.ini", topologies, local=True, image=None
        )
    assert "neither the engine image" in e.value.message
    assert "zenops up --inventory HOSTS --model MODEL" in (e.value.hint or "")
    assert "pip install torch" in (e.value.hint or "")


# --- zenops up --measure ----------------------------------------------------------------------------------------


def test_up_measure_measures_only_hosts_without_a_measurement_then_plans_again(monkeypatch, tmp_path):
    config = Config(state_dir=tmp_path / "state")
    topologies = {"a": facts("gp-5-24-96.json"), "b": {**facts("gp-5-24-96.json"), "bandwidth": MEASURED}}
    asked: list[tuple[list[str], str | None]] = []

    def measure(ctx: Any, inventory: Path, missing: dict[str, Any], *, image: str | None, **_: Any) -> Any:
        asked.append((sorted(missing), image))
        return {h: bandwidth.from_runs(h, {"image": image, "runs": [_run(0)]}) for h in missing}

    monkeypatch.setattr(bandwidth, "measure_inventory", measure)
    replanned: list[dict[str, Any]] = []
    notes: list[str] = []
    before: dict[str, Any] = {"a": "old plan"}
    out = serve.measure_missing(
        RunContext(config, note=notes.append), tmp_path / "hosts.yml", topologies, {"a": {"ref": "zenops/vllm-zen:v"}},
        lambda t: replanned.append(copy.deepcopy(t)) or {"a": "new plan"}, before,
    )  # fmt: skip
    assert asked == [(["a"], "zenops/vllm-zen:v")]
    assert out == {"a": "new plan"}
    assert replanned[0]["a"]["bandwidth"]["nodes"]["0"]["gbps"] == pytest.approx(25.77)
    assert replanned[0]["b"]["bandwidth"] == MEASURED  # the kept one, not measured again
    assert json.loads(facts_path(config, "a").read_text())["bandwidth"]["image"] == "zenops/vllm-zen:v"
    assert "measuring memory bandwidth" in notes[0]
    # everything measured: nothing runs, the plans stay
    asked.clear()
    same = serve.measure_missing(RunContext(config), tmp_path / "h.yml", topologies, {}, lambda t: {}, before)
    assert same is before
    assert asked == []


def test_up_measure_that_fails_is_a_warning_and_keeps_the_plans(monkeypatch, tmp_path):
    """The servers already run when `up --measure` measures: a failed probe must not fail `up` (its serving record
    is written after this) nor change the plans. A test double stands in for the playbook run (no engine here)."""
    config = Config(state_dir=tmp_path / "state")
    topologies = {"a": facts("gp-5-24-96.json")}

    def failing_measure(*_: Any, **__: Any) -> Any:
        raise bandwidth.MeasurementError("a: the bandwidth probe failed: killed", hint="look at the run log")

    monkeypatch.setattr(bandwidth, "measure_inventory", failing_measure)
    notes: list[str] = []
    before: dict[str, Any] = {"a": "plan"}
    out = serve.measure_missing(
        RunContext(config, note=notes.append), tmp_path / "h.yml", topologies, {},
        lambda t: pytest.fail("must not plan again"), before,
    )  # fmt: skip
    assert out is before
    assert any(n.startswith("warning: the measurement failed") and "probe failed: killed" in n for n in notes), notes
    assert "bandwidth" not in topologies["a"]
    assert not facts_path(config, "a").exists()


def test_up_help_says_measuring_is_off_by_default(run):
    r = run(["up", "--help"])
    assert "--measure / --no-measure" in r.output
    assert "Off by default" in " ".join(r.output.split())
