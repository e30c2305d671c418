"""plugins/module_utils/cpu_topology.py on fake /proc + /sys trees of known machines, and on this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import sysfs
from zenops.cpulist import display_cpulist
from zenops.errors import UsageError
from zenops.facts import load_facts_file

topo = sysfs.load_cpu_topology()
GIB = sysfs.GIB

SCHEMA_KEYS = {
    "schema",
    "architecture",
    "vendor",
    "model_name",
    "family",
    "model",
    "stepping",
    "flags",
    "sockets",
    "numa_nodes",
    "cpus",
    "online_cpus",
    "allowed_cpus",
    "physical_cores",
    "threads_per_core",
    "smt_active",
    "memory_total_kib",
    "memory_available_kib",
    "hypervisor",
    "kernel",
    "boot_id",
    "notes",
}
NODE_KEYS = {"id", "cpus", "memory_total_kib", "memory_free_kib", "distances"}
CPU_KEYS = {"cpu", "core_id", "package", "node", "siblings"}


def check_invariants(t: dict[str, Any]) -> None:
    """What holds on any host: the schema's keys, allowed within online, every online CPU in exactly one node."""
    assert set(t) == SCHEMA_KEYS
    assert t["schema"] == 1
    assert all(set(n) == NODE_KEYS for n in t["numa_nodes"])
    assert all(set(c) == CPU_KEYS for c in t["cpus"])
    assert t["online_cpus"] == sorted(t["online_cpus"])
    assert t["online_cpus"]
    assert [c["cpu"] for c in t["cpus"]] == t["online_cpus"]
    assert t["allowed_cpus"] == sorted(t["allowed_cpus"])
    assert set(t["allowed_cpus"]) <= set(t["online_cpus"])
    in_nodes = [cpu for n in t["numa_nodes"] for cpu in n["cpus"]]
    assert sorted(in_nodes) == t["online_cpus"]  # each online CPU in exactly one node
    node_ids = {n["id"] for n in t["numa_nodes"]}
    assert all(c["node"] in node_ids for c in t["cpus"])
    assert all(c["cpu"] in c["siblings"] for c in t["cpus"])
    assert all(len(n["distances"]) == len(t["numa_nodes"]) for n in t["numa_nodes"])
    assert t["memory_total_kib"] > 0
    assert 0 < t["memory_available_kib"] <= t["memory_total_kib"]
    assert t["flags"] == sorted(t["flags"])
    assert set(t["flags"]) <= topo.INTERESTING_FLAGS
    assert t["smt_active"] == (t["threads_per_core"] > 1)
    assert 1 <= t["sockets"] <= t["physical_cores"] <= len(t["online_cpus"])
    assert isinstance(t["notes"], list)
    assert all(isinstance(n, str) and n for n in t["notes"])
    json.dumps(t)  # JSON-ready


# --- cpulists ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("0", [0]),
        ("", []),
        ("\n", []),
        ("0-13,28-41\n", [*range(14), *range(28, 42)]),
        ("5,1-2,2", [1, 2, 5]),
        ("0-7:2/4", [0, 1, 4, 5]),
    ],
)
def test_parse_cpulist(text, cpus):
    assert topo.parse_cpulist(text) == cpus


def test_parse_cpulist_rejects_garbage():
    with pytest.raises(ValueError, match="invalid cpu range"):
        topo.parse_cpulist("3-1")
    with pytest.raises(ValueError, match="invalid literal"):
        topo.parse_cpulist("a-b")


@pytest.mark.parametrize("cpus", [[], [0], [0, 1, 2, 3, 8, 10, 11], [*range(14), *range(28, 42)], [3, 5, 7]])
def test_format_cpulist_round_trips(cpus):
    text = display_cpulist(cpus)
    assert topo.parse_cpulist("" if text == "-" else text) == cpus


def test_format_cpulist_compresses():
    assert display_cpulist(list(range(24))) == "0-23"
    assert display_cpulist([*range(14), *range(28, 42)]) == "0-13,28-41"
    assert display_cpulist([]) == "-"


# --- known machines ---------------------------------------------------------------------------------------------


def test_gp_5_24_96_openstack_vm(tmp_path):
    t = sysfs.topology_of(sysfs.gp_5_24_96(), tmp_path)
    check_invariants(t)
    assert (t["vendor"], t["family"], t["model"], t["stepping"]) == ("AuthenticAMD", 25, 17, 1)
    assert t["model_name"] == "AMD EPYC 9454 48-Core Processor"
    assert t["online_cpus"] == t["allowed_cpus"] == list(range(24))
    assert t["sockets"] == 1
    assert t["physical_cores"] == 24
    assert t["threads_per_core"] == 1
    assert t["smt_active"] is False
    assert len(t["numa_nodes"]) == 1
    assert t["numa_nodes"][0]["cpus"] == list(range(24))
    assert t["numa_nodes"][0]["distances"] == [10]
    assert 93 * GIB < t["memory_total_kib"] <= 96 * GIB  # a 96 GiB flavor shows ~94 GiB
    assert 90 * GIB < t["memory_available_kib"] < t["memory_total_kib"]
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "hypervisor"} <= set(t["flags"])
    assert not {"amx_tile", "avx512_fp16"} & set(t["flags"])
    assert t["hypervisor"] == "OpenStack Foundation"
    assert t["kernel"] == "6.1.0-18-amd64"
    assert t["boot_id"] == "5f1c2a9e-7d3b-4c1e-8f2a-9b0d6e4c3a21"
    assert t["notes"] == []  # node 0 holds all the memory: nothing odd to say
    assert t["architecture"] == "x86_64"


def test_epyc_9755_two_sockets_smt_off(tmp_path):
    t = sysfs.topology_of(sysfs.epyc_9755_2s(), tmp_path)
    check_invariants(t)
    assert (t["vendor"], t["family"], t["model"]) == ("AuthenticAMD", 26, 2)
    assert t["sockets"] == 2
    assert t["physical_cores"] == 256  # core ids repeat per package: counted as (package, core_id)
    assert t["smt_active"] is False
    assert t["threads_per_core"] == 1
    assert [n["id"] for n in t["numa_nodes"]] == [0, 1]
    assert t["numa_nodes"][0]["cpus"] == list(range(128))
    assert t["numa_nodes"][1]["cpus"] == list(range(128, 256))
    for node in t["numa_nodes"]:
        assert 1500 * GIB < node["memory_total_kib"] <= 1536 * GIB
    assert [n["distances"] for n in t["numa_nodes"]] == [[10, 32], [32, 10]]
    assert {c["package"] for c in t["cpus"] if c["node"] == 1} == {1}
    assert t["hypervisor"] is None
    assert "hypervisor" not in t["flags"]
    assert {"avx512f", "avx512_bf16", "avx512_vnni"} <= set(t["flags"])


def test_xeon_e5_2680v4_two_sockets_smt_on(tmp_path):
    t = sysfs.topology_of(sysfs.xeon_e5_2680v4_2s(), tmp_path)
    check_invariants(t)
    assert (t["vendor"], t["family"], t["model"]) == ("GenuineIntel", 6, 79)
    assert t["flags"] == ["avx", "avx2"]  # Broadwell: no AVX-512, no AMX
    assert t["sockets"] == 2
    assert t["physical_cores"] == 28
    assert t["threads_per_core"] == 2
    assert t["smt_active"] is True
    by_cpu = {c["cpu"]: c for c in t["cpus"]}
    assert by_cpu[0]["siblings"] == [0, 28]
    assert by_cpu[13]["siblings"] == [13, 41]
    assert by_cpu[14]["siblings"] == [14, 42]
    assert by_cpu[14]["package"] == 1
    assert by_cpu[55]["siblings"] == [27, 55]
    assert by_cpu[55]["node"] == 1
    assert t["numa_nodes"][0]["cpus"] == [*range(14), *range(28, 42)]
    assert t["numa_nodes"][1]["cpus"] == [*range(14, 28), *range(42, 56)]
    for node in t["numa_nodes"]:
        assert 60 * GIB < node["memory_total_kib"] <= 64 * GIB
    assert t["hypervisor"] is None


def test_xeon_with_smt_threads_offline(tmp_path):
    """echo off > /sys/devices/system/cpu/smt/control: the second threads go offline and drop out everywhere."""
    t = sysfs.topology_of(sysfs.xeon_e5_2680v4_2s(online="0-27"), tmp_path)
    check_invariants(t)
    assert t["online_cpus"] == list(range(28))
    assert t["smt_active"] is False
    assert t["threads_per_core"] == 1
    assert t["physical_cores"] == 28
    assert t["numa_nodes"][0]["cpus"] == list(range(14))


def test_container_view_without_numa_dirs_and_a_cpuset(tmp_path):
    host = sysfs.container_view()
    t = sysfs.topology_of(host, tmp_path, allowed_cpus={2, 3, 18, 19})
    check_invariants(t)
    assert not (tmp_path / "sys/devices/system/node").exists()
    assert t["allowed_cpus"] == [2, 3, 18, 19]
    assert t["online_cpus"] == list(range(32))
    assert len(t["numa_nodes"]) == 1
    node = t["numa_nodes"][0]
    assert node["id"] == 0
    assert node["cpus"] == list(range(32))
    assert node["distances"] == [10]
    assert node["memory_total_kib"] == host.mem_total_kib  # from /proc/meminfo
    assert node["memory_free_kib"] == host.mem_free_kib
    assert t["physical_cores"] == 16
    assert t["smt_active"] is True
    assert t["hypervisor"] is None


def test_allowed_cpus_outside_the_online_ones_are_dropped(tmp_path):
    t = sysfs.topology_of(sysfs.container_view(), tmp_path, allowed_cpus={0, 31, 64})
    assert t["allowed_cpus"] == [0, 31]


def test_container_view_without_topology_files(tmp_path):
    t = sysfs.topology_of(sysfs.container_view(topology_files=False), tmp_path)
    check_invariants(t)
    assert all(c["core_id"] == c["cpu"] and c["package"] == 0 and c["siblings"] == [c["cpu"]] for c in t["cpus"])
    assert t["physical_cores"] == 32
    assert t["sockets"] == 1
    assert t["smt_active"] is False


def test_hypervisor_flag_without_dmi_is_unknown(tmp_path):
    host = sysfs.gp_5_24_96()
    host.dmi = None
    t = sysfs.topology_of(host, tmp_path)
    assert t["hypervisor"] == "unknown"


def test_hypervisor_falls_back_to_product_name(tmp_path):
    host = sysfs.gp_5_24_96()
    host.dmi = ("", "KVM")
    assert sysfs.topology_of(host, tmp_path)["hypervisor"] == "KVM"


def test_arm_host_without_vendor_or_family(tmp_path):
    t = sysfs.topology_of(sysfs.arm_host(), tmp_path)
    check_invariants(t)
    assert t["architecture"] == "aarch64"
    assert t["vendor"] == ""
    assert t["model_name"] == ""
    assert t["family"] is None
    assert t["model"] is None
    assert t["stepping"] is None
    assert t["flags"] == []


def test_minimal_tree_only_cpuinfo_and_meminfo(tmp_path):
    """No /sys at all (a very locked-down container): CPUs from /proc/cpuinfo, one node, nothing invented."""
    host = sysfs.container_view()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(host.cpuinfo())
    (tmp_path / "proc/meminfo").write_text("MemTotal: 1000 kB\nMemFree: 500 kB\n")
    t = topo.gather(str(tmp_path))
    check_invariants(t)
    assert t["online_cpus"] == list(range(32))
    assert t["memory_available_kib"] == 500  # MemFree on kernels without MemAvailable
    assert t["kernel"] == ""
    assert t["boot_id"] == ""  # no boot id: the rollout cannot tell it shares a machine, and measures as before
    assert t["architecture"] == "x86_64"


def test_memory_only_node_has_no_cpus(tmp_path):
    """A CXL memory expander shows as a NUMA node without CPUs."""
    host = sysfs.gp_5_24_96()
    assert host.nodes is not None
    host.nodes = [
        sysfs.Node(0, "0-23", 98_853_436, 96_934_112, (10, 20)),
        sysfs.Node(1, "", 64 * GIB, 64 * GIB, (20, 10)),
    ]
    t = sysfs.topology_of(host, tmp_path)
    check_invariants(t)
    assert t["numa_nodes"][1]["cpus"] == []
    assert t["numa_nodes"][1]["memory_total_kib"] == 64 * GIB


def test_amd_epyc_vm_with_avx2_but_no_avx512(tmp_path):
    t = sysfs.topology_of(sysfs.epyc_7763_vm(), tmp_path)
    check_invariants(t)
    assert (t["vendor"], t["family"], t["model"]) == ("AuthenticAMD", 25, 1)
    assert {"avx", "avx2", "hypervisor"} <= set(t["flags"])
    assert not [f for f in t["flags"] if f.startswith("avx512")]
    assert t["physical_cores"] == 8
    assert t["hypervisor"] == "QEMU"
    assert t["notes"] == []


def test_single_node_whose_meminfo_counts_only_the_boot_memory_is_noted_once_in_the_facts(tmp_path):
    """A VM with hot-plugged memory: node 0's meminfo counts 5.59 GiB of 23.54 GiB. The facts say so, in words."""
    t = sysfs.topology_of(sysfs.zen4_vm_hotplug(), tmp_path)
    check_invariants(t)
    assert t["numa_nodes"][0]["memory_total_kib"] == 5_859_532  # reported as read: facts are what the kernel says
    assert t["memory_total_kib"] == 24_684_084
    assert len(t["notes"]) == 1
    note = t["notes"][0]
    assert "node 0's meminfo counts 5.59 GiB of the system's 23.54 GiB" in note
    assert "system total" in note


@pytest.mark.parametrize("node0_kib", [24_684_084, 23_000_000])
def test_no_note_when_the_single_node_counts_about_all_the_memory(node0_kib, tmp_path):
    t = sysfs.topology_of(sysfs.zen4_vm_hotplug(node0_kib), tmp_path)
    assert t["notes"] == []


def test_no_note_for_several_nodes_even_when_they_differ(tmp_path):
    host = sysfs.xeon_e5_2680v4_2s()
    host.nodes = [host.nodes[0], sysfs.Node(1, "14-27,42-55", 1_000_000, 900_000, (21, 10))]  # type: ignore[index]
    t = sysfs.topology_of(host, tmp_path)
    assert t["notes"] == []


# --- the committed fixtures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(sysfs.FIXTURES))
def test_fixture_files_match_the_builder(name, tmp_path):
    """tests/fixtures/facts/*.json are what gather() returns (regenerate: python -m tests.fixtures.sysfs --write)."""
    path = sysfs.FACTS_DIR / f"{name}.json"
    expected = sysfs.topology_of(sysfs.FIXTURES[name](), tmp_path)
    assert json.loads(path.read_text()) == expected, f"{path} is stale: run `python -m tests.fixtures.sysfs --write`"
    assert path.read_text() == sysfs.fixture_text(expected)
    assert load_facts_file(path) == expected


# --- load_facts_file ----------------------------------------------------------------------------------------------


def test_load_facts_file_reads_a_facts_json_result_after_event_lines(tmp_path):
    a = json.loads((sysfs.FACTS_DIR / "gp-5-24-96.json").read_text())
    b = json.loads((sysfs.FACTS_DIR / "xeon-e5-2680v4-2s.json").read_text())
    one = tmp_path / "one.jsonl"
    one.write_text(
        json.dumps({"type": "event", "kind": "play", "play": "x"})
        + "\n"
        + json.dumps({"type": "result", "command": "facts", "hosts": {"vm1": a}, "saved": {}})
        + "\n"
    )
    assert load_facts_file(one) == a
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"type": "result", "command": "facts", "hosts": {"vm1": a, "old": b}, "saved": {}}))
    with pytest.raises(UsageError) as info:
        load_facts_file(two)
    assert "--limit" in str(info.value.hint)
    assert "old, vm1" in info.value.message
    assert load_facts_file(two, host="old") == b
    with pytest.raises(UsageError, match="no host 'nope'"):
        load_facts_file(two, host="nope")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"schema": 2}', "schema 2 is not supported"),
        ('{"schema": 1, "flags": []}', "lacks"),
        ("[1, 2]", "neither a CPU topology"),
        ("{not json", "not JSON"),
        ('{"type": "result", "command": "up", "hosts": []}', "neither a CPU topology"),
    ],
)
def test_load_facts_file_rejects_other_files(tmp_path, content, fragment):
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=fragment) as info:
        load_facts_file(path)
    assert info.value.hint


def test_load_facts_file_missing(tmp_path):
    with pytest.raises(UsageError, match="not found") as info:
        load_facts_file(tmp_path / "nope.json")
    assert "zenops facts" in str(info.value.hint)


# --- this machine -----------------------------------------------------------------------------------------------


def test_this_machine():
    t = topo.gather()
    check_invariants(t)
    assert t["allowed_cpus"] == sorted(os.sched_getaffinity(0))
    assert t["architecture"] == os.uname().machine
    assert t["kernel"] == os.uname().release
    assert t["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert all(n["memory_total_kib"] >= 0 for n in t["numa_nodes"])
    # a VM whose single node counts only its boot memory (hot-plugged memory) must be told so in the facts, once
    nodes = t["numa_nodes"]
    undercounted = len(nodes) == 1 and nodes[0]["memory_total_kib"] < 0.9 * t["memory_total_kib"]
    assert len(t["notes"]) == (1 if undercounted else 0), t["notes"]


def test_this_machine_with_an_explicit_root_path():
    assert topo.gather(str(Path("/")), {0})["allowed_cpus"] == [0]
