"""The peers' settings (zenops.peers), derived from fixture facts of real machines: a 2-socket EPYC 9755, a 1-socket
192-core EPYC 9965 and a 2-vCPU Zen 4 VM (tests/fixtures/facts). Each peer's rule is written once, in zenops.peers
(with its source); these tests check what the rule must give on each machine, computed by hand from the facts."""

from __future__ import annotations

import pytest

from tests.unit.test_planner import topo
from zenops import catalog, peers
from zenops.campaign.spec import VARIANT_PRESETS
from zenops.catalog import GIB
from zenops.planner import PlanOptions, PlanRefusedError, plan

MODEL = "Qwen/Qwen3-0.6B"


def _plan(facts: str, layout: str, **kw):
    return plan(topo(facts), catalog.get_model(MODEL), PlanOptions(layout=layout, **kw))


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize("facts", ["epyc-9755-2s", "epyc-9965-1s", "zen4-vm-hotplug"])
def test_zenops_is_the_plan_itself(facts):
    assert _plan(facts, "zenops") == _plan(facts, "zenops")
    assert not any(r.topic == "layout" for r in _plan(facts, "zenops").reasons)
    assert _plan(facts, "zenops").layout == "zenops"


@pytest.mark.parametrize(("facts", "cpus", "nproc", "ram_gib"), [
    ("epyc-9755-2s", "0-255", 256, 3070.4),
    ("epyc-9965-1s", "0-191", 192, 749.6),
    ("zen4-vm-hotplug", "0-1", 2, 23.5),
])  # fmt: skip
def test_the_writeup_binds_every_cpu_reserves_one_and_gives_three_quarters_of_ram_to_kv(facts, cpus, nproc, ram_gib):
    t = topo(facts)
    p = _plan(facts, "writeup")
    (inst,) = p.instances
    assert inst.env["VLLM_CPU_OMP_THREADS_BIND"] == cpus  # 0-(nproc-1)
    assert len(inst.cpus) == nproc
    assert inst.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    assert int(_arg(inst.args, "--kv-cache-memory-bytes") or 0) == int(t.memory_total_bytes * 0.75)
    assert _arg(inst.args, "--max-num-seqs") == "5"
    assert inst.container["shm_size"] == f"{t.memory_total_bytes // GIB - 1}g"  # RAM - 1G
    assert round(t.memory_total_bytes / GIB, 1) == ram_gib
    assert "--tensor-parallel-size" not in inst.args
    assert _arg(inst.args, "--dtype") == "bfloat16"
    assert _arg(inst.args, "--max-model-len") == str(p.max_model_len)  # as zenops's: a benchmark parameter
    why = next(r.text for r in p.reasons if r.topic == "layout")
    assert why.startswith("layout writeup (the write-up's recipe)")
    assert p.layout == "writeup"


def test_amds_skill_takes_one_sockets_physical_cores_and_its_memory_with_its_kv_rule():
    t = topo("epyc-9755-2s")
    p = _plan("epyc-9755-2s", "amd-skill")
    (inst,) = p.instances
    socket0 = [n for n in t.nodes if n.package == 0]
    assert inst.container["cpuset_cpus"] == "0-127"  # socket 0's 128 cores (no SMT on these facts)
    assert inst.container["cpuset_mems"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in inst.env  # vLLM's own binding inside the cpuset
    kv = int(min(0.4 * sum(n.memory_bytes for n in socket0), t.memory_total_bytes - 16 * GIB))
    assert int(_arg(inst.args, "--kv-cache-memory-bytes") or 0) == kv
    assert kv == int(0.4 * socket0[0].memory_bytes)  # 40% of the socket's 1.5 TB is the smaller here
    assert _arg(inst.args, "--max-num-seqs") is None  # vLLM's default
    one_socket = _plan("epyc-9965-1s", "amd-skill").instances[0]
    assert one_socket.container["cpuset_cpus"] == "0-191"


def test_amds_skill_on_a_vm_with_23_gib_keeps_ram_minus_16_gb():
    t = topo("zen4-vm-hotplug")
    inst = _plan("zen4-vm-hotplug", "amd-skill").instances[0]
    assert int(_arg(inst.args, "--kv-cache-memory-bytes") or 0) == int(t.memory_total_bytes - 16 * GIB)


def test_a_peer_whose_rule_cannot_run_on_the_host_is_refused_naming_why():
    t = topo("zen4-vm-hotplug")
    small = type(t)(**{**t.__dict__, "memory_total_bytes": 12 * GIB})
    base = plan(t, catalog.get_model(MODEL))
    with pytest.raises(ValueError, match=r"min\(40% of the socket's RAM, RAM-16 GB\) gives -4.0 GiB"):
        peers.relayout("amd-skill", base, small)


@pytest.mark.parametrize("facts", ["epyc-9755-2s", "epyc-9965-1s", "zen4-vm-hotplug"])
def test_vllms_defaults_set_no_binding_kv_size_or_seats(facts):
    (inst,) = _plan(facts, "vllm-defaults").instances
    assert "VLLM_CPU_OMP_THREADS_BIND" not in inst.env
    assert "VLLM_CPU_KVCACHE_SPACE" not in inst.env
    for flag in ("--kv-cache-memory-bytes", "--max-num-seqs", "--gpu-memory-utilization"):
        assert flag not in inst.args
    assert inst.port == 8000


def test_an_old_engine_gets_the_kv_size_as_its_environment():
    inst = _plan("zen4-vm-hotplug", "writeup", vllm_version="0.11.0").instances[0]
    assert "--kv-cache-memory-bytes" not in inst.args
    assert inst.env["VLLM_CPU_KVCACHE_SPACE"] == str(int(topo("zen4-vm-hotplug").memory_total_bytes * 0.75) // GIB)


def test_an_unknown_layout_is_refused_with_the_names():
    with pytest.raises(PlanRefusedError, match="--layout nope: unknown"):
        _plan("zen4-vm-hotplug", "nope")


def test_every_peer_is_cited_and_the_campaign_preset_measures_them_all():
    for p in peers.PEERS:
        assert p.rule
        assert p.source
    assert VARIANT_PRESETS["peers"] == {name: {"layout": name} for name in peers.NAMES}
    assert peers.NAMES[0] == "zenops"  # the reference every ratio is taken against


# --- the campaign report's ratios ----------------------------------------------------------------------------------


def _rows(figures: dict[tuple[str, int], list[tuple[float, float, float]]]):
    """Rows of (variant, concurrency) -> repeats of (tok/s, TTFT ms, TPOT ms)."""
    from tests.unit.test_campaign_report import res  # noqa: PLC0415
    from zenops.campaign.report import Row  # noqa: PLC0415

    out = []
    for (variant, conc), runs in figures.items():
        results = tuple(res(t, tp, ttft=tf, variant=variant, conc=conc) for t, tf, tp in runs)
        mean = res(sum(r[0] for r in runs) / len(runs), sum(r[2] for r in runs) / len(runs),
                   ttft=sum(r[1] for r in runs) / len(runs), variant=variant, conc=conc)  # fmt: skip
        out.append(Row(mean, results))
    return out


def test_peer_ratios_tell_a_win_only_beyond_the_run_to_run_spread():
    from zenops.campaign.report import peer_ratios  # noqa: PLC0415

    rows = _rows({
        ("zenops", 1): [(100.0, 50.0, 10.0), (104.0, 52.0, 10.0)],      # spread 4%
        ("writeup", 1): [(80.0, 60.0, 12.5), (82.0, 60.0, 12.5)],       # 0.79x: beyond 4%
        ("vllm-defaults", 1): [(101.0, 50.0, 10.0), (99.0, 50.0, 10.0)],  # 0.98x: inside
        ("amd-skill", 1): [(130.0, 40.0, 8.0), (128.0, 40.0, 8.0)],      # 1.26x
        ("zenops", 4): [(300.0, 80.0, 13.0)],                             # one run: no spread
        ("writeup", 4): [(250.0, 90.0, 16.0)],
        ("other", 1): [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0)],                 # not a peer: left out
    })  # fmt: skip
    got = {(p.peer, p.concurrency): p for p in peer_ratios(rows)}
    assert set(got) == {("writeup", 1), ("vllm-defaults", 1), ("amd-skill", 1), ("writeup", 4)}
    w = got[("writeup", 1)]
    assert w.tok_s == pytest.approx(81 / 102)
    assert w.ttft == pytest.approx(60 / 51)
    assert w.tpot == pytest.approx(1.25)
    assert w.noise == pytest.approx(4 / 102)
    assert w.verdict == "zenops ahead"
    assert got[("vllm-defaults", 1)].verdict == "within the noise"
    assert got[("amd-skill", 1)].verdict == "peer ahead"
    assert got[("writeup", 4)].verdict.startswith("one run each: no spread")
