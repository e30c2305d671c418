"""A ceiling per instance (issue: performance truth, item 1): the bandwidth probe's figures with fewer threads
(zenops.bandwidth.parse_probe: ``scaling``), read at each instance's own OpenMP thread count
(zenops.planner.Measurement.at), and instances side by side on a node held to the node's own figure.

The facts are fixtures of real machines (tests/fixtures/facts) with measurements written here: a 2-vCPU VM whose one
thread moved 19 GB/s and two 36 (measured with numpy on such a VM, issue 27), and a 2-socket EPYC 9755."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_planner import fixture, with_bandwidth
from zenops import bandwidth, catalog
from zenops.planner import Measurement, PlanOptions, Topology, plan

TINY = "Qwen/Qwen3-0.6B"


def test_a_measurement_is_read_at_a_thread_count_measured_between_or_beyond():
    m = Measurement(36.0, 200.0, "probe", cores=2, scaling=((1, 19.0, 95.0),))
    assert m.at(1, 2) == (19.0, 95.0, "measured with 1 thread(s)")
    assert m.at(2, 2) == (36.0, 200.0, "measured with 2 thread(s)")
    assert m.at(3, 4) == (36.0, 200.0, "the most measured: 2 thread(s)")
    big = Measurement(400.0, 12000.0, "probe", cores=127, scaling=((1, 30.0, 100.0), (64, 380.0, 6000.0)))
    gbps, gflops, how = big.at(32, 128) or (0, 0, "")
    assert gbps == pytest.approx(30.0 + (32 - 1) / (64 - 1) * 350.0)
    assert gflops == pytest.approx(100.0 + (32 - 1) / (64 - 1) * 5900.0)
    assert how == "between 1 and 64 measured thread(s)"
    assert Measurement(36.0, None, "old facts", cores=2).at(1, 2) is None


def _vm(scaling: bool = True) -> Topology:
    node = {"gbps": 36.0, "gflops": 200.0, "method": "probe", "cores": 2}
    if scaling:
        node["scaling"] = [{"threads": 1, "gbps": 19.0, "gflops": 95.0}]
    return Topology.from_facts(with_bandwidth(fixture("zen4-vm-hotplug"), {"0": node}))


def test_on_a_2_vcpu_vm_the_one_instance_binds_both_cores_and_gets_their_bandwidth():
    p = plan(_vm(), catalog.get_model(TINY))
    (inst,) = p.instances
    assert inst.omp_threads_bind == "0-1"  # a rank of SMALL_RANK_CORES cores or fewer reserves none
    roof = inst.roofline
    assert roof is not None
    assert roof["bandwidth_gbps"] == pytest.approx(36.0)
    assert "with this instance's 2 OpenMP thread(s) (measured with 2 thread(s)): 36.0 GB/s" in roof["source"]
    assert any(r.topic == "roofline" and "measured per instance" in r.text for r in p.reasons)


def test_an_instance_that_leaves_a_core_to_its_frontend_gets_its_own_threads_figure_not_the_nodes():
    # a 4-core VM (8 CPUs with SMT): one core reserved, 3 OpenMP threads; one thread moved 19 GB/s, three 45, all 4: 52
    node = {
        "gbps": 52.0,
        "gflops": 400.0,
        "method": "probe",
        "cores": 4,
        "scaling": [
            {"threads": 1, "gbps": 19.0, "gflops": 95.0},
            {"threads": 2, "gbps": 36.0, "gflops": 200.0},
            {"threads": 3, "gbps": 45.0, "gflops": 300.0},
        ],
    }
    p = plan(Topology.from_facts(with_bandwidth(fixture("vm-8-smt-adjacent"), {"0": node})), catalog.get_model(TINY))
    (inst,) = p.instances
    assert len(inst.cpus) == 3
    assert len(inst.reserved_cpus) == 1
    roof = inst.roofline
    assert roof is not None
    assert (roof["bandwidth_gbps"], roof["gflops"]) == (pytest.approx(45.0), pytest.approx(300.0))
    assert "with this instance's 3 OpenMP thread(s) (measured with 3 thread(s)): 45.0 GB/s" in roof["source"]
    assert "all 4 thread(s) of the node: 52 GB/s" in roof["source"]


def test_facts_measured_before_per_thread_figures_keep_the_node_share_and_say_so():
    roof = plan(_vm(scaling=False), catalog.get_model(TINY)).instances[0].roofline
    assert roof is not None
    assert roof["bandwidth_gbps"] == pytest.approx(36.0)  # the slot holds both cores: the whole node
    assert "a node figure: `zenops facts --bandwidth` measures per instance" in roof["source"]


def _epyc(scaling: list[dict[str, float]]) -> Topology:
    nodes = {
        str(n): {"gbps": 400.0, "gflops": 12700.0, "method": "probe", "cores": 127, "scaling": scaling} for n in (0, 1)
    }
    return Topology.from_facts(with_bandwidth(fixture("epyc-9755-2s"), nodes))


def test_instances_side_by_side_get_their_threads_figure_while_the_node_can_feed_them_all():
    # two instances of 63 threads per node; 63 threads alone: 150 GB/s, so both together (300) fit the node's 400
    t = _epyc([{"threads": 63, "gbps": 150.0, "gflops": 6300.0}])
    p = plan(t, catalog.get_model("Qwen/Qwen3-4B"), PlanOptions(objective="throughput", concurrency=16))
    assert len(p.instances) == 4
    for inst in p.instances:
        roof = inst.roofline
        assert roof is not None
        assert roof["bandwidth_gbps"] == pytest.approx(150.0)
        assert "side by side" not in roof["source"]


def test_instances_side_by_side_share_the_node_when_their_threads_alone_would_draw_more():
    # 63 threads alone: 300 GB/s; two such instances would draw 600 of a node that measured 400: 200 each
    t = _epyc([{"threads": 63, "gbps": 300.0, "gflops": 6300.0}])
    p = plan(t, catalog.get_model("Qwen/Qwen3-4B"), PlanOptions(objective="throughput", concurrency=16))
    per_node: dict[int, float] = {}
    for inst in p.instances:
        roof = inst.roofline
        assert roof is not None
        assert roof["bandwidth_gbps"] == pytest.approx(200.0)
        assert "x 0.67: the node's instances would draw 600.0 GB/s side by side, it measured 400" in roof["source"]
        per_node[inst.numa_node] = per_node.get(inst.numa_node, 0.0) + roof["bandwidth_gbps"]
    assert per_node == {0: pytest.approx(400.0), 1: pytest.approx(400.0)}  # the node's own figure, not more


def test_the_probe_output_with_scaling_becomes_facts_the_planner_reads():
    def run(threads: int, triad_s: float, gemm_s: float) -> dict[str, object]:
        return {
            "threads": threads,
            "triad": {"elements": 2**26, "element_bytes": 4, "arrays": 3, "best_s": triad_s, "runs": 3},
            "gemm": {"m": 2048, "n": 2048, "k": 2048, "dtype": "bfloat16", "op": "torch.matmul", "best_s": gemm_s,
                     "runs": 3},
        }  # fmt: skip

    full = run(2, 0.0224, 0.086)
    out = {"probe": "zenops-bandwidth", "schema": 2, "node": 0, "cpus": [0, 1], "torch": "2.13", "zentorch": None,
           **full, "scaling": [run(1, 0.0424, 0.18)]}  # fmt: skip
    figures = bandwidth.parse_probe(json.dumps(out), where="vm node 0", image="img")
    assert figures.gbps == pytest.approx(3 * 2**28 / 0.0224 / 1e9, abs=0.01)
    ((t, g, f),) = figures.scaling
    assert t == 1
    assert g == pytest.approx(3 * 2**28 / 0.0424 / 1e9, abs=0.01)
    assert f == pytest.approx(2 * 2048**3 / 0.18 / 1e9, abs=0.1)
    assert "also with 1 thread(s) on the node's first cores" in figures.method
    facts = with_bandwidth(fixture("zen4-vm-hotplug"), bandwidth.measurement([figures], image="img")["nodes"])
    m = Topology.from_facts(facts).measurement(0)
    assert m is not None
    assert m.scaling == ((1, g, f),)


def test_a_scaling_point_that_is_not_positive_is_noted_and_the_measurement_left_out():
    node = {"gbps": 36.0, "gflops": 200.0, "cores": 2, "scaling": [{"threads": 0, "gbps": 19.0}]}
    p = plan(Topology.from_facts(with_bandwidth(fixture("zen4-vm-hotplug"), {"0": node})), catalog.get_model(TINY))
    assert p.instances[0].roofline is None
    assert any("bandwidth measurement of node 0" in w for w in p.warnings)
