# Copyright: zenops developers
# Apache License 2.0 (see galaxy.yml)
"""CPU, SMT and NUMA topology of a Linux host, read from /proc and /sys.

Runs on the managed hosts inside an Ansible module, so it is plain Python 3 standard library only. Every path is read
below ``root`` so tests can point it at a fake tree. Ansible's own facts give CPU flags and counts but no NUMA map and
no SMT sibling map, and ``lscpu -J`` prints invalid JSON on util-linux 2.38/2.39: hence this reader.

Containers and stripped-down VMs are handled: without /sys/devices/system/node there is a single node 0 holding all
online CPUs with /proc/meminfo's totals; without topology files each CPU is its own core in package 0.

The output schema (``SCHEMA``) is consumed by the zenops planner: keep its key names stable.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

SCHEMA = 1

# The CPU flags the planner cares about; everything else in /proc/cpuinfo is dropped.
INTERESTING_FLAGS = frozenset(
    (
        "avx",
        "avx2",
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "avx512bw",
        "avx512vl",
        "avx512_fp16",
        "amx_bf16",
        "amx_int8",
        "amx_tile",
        "hypervisor",
    )
)

_CPU_DIR = re.compile(r"cpu(\d+)$")
_NODE_DIR = re.compile(r"node(\d+)$")


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, unique). Empty text -> ``[]``.

    Also accepts the ``a-b:step/group`` form the kernel documents for cpu lists (``0-7:2/4``).

    The hosts' copy of zenops.cpulist.parse_cpulist (zenops is not installed there): tests/unit/test_cpulist.py runs one
    table of cases through both.
    """
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        item = raw.strip()
        if not item:
            continue
        stride = None
        span, colon, stride_text = item.partition(":")
        if colon:
            used, _, group = stride_text.partition("/")
            stride = (int(used), int(group))
        if "-" in span:
            lo_text, hi_text = span.split("-", 1)
            lo, hi = int(lo_text), int(hi_text)
        else:
            lo = hi = int(span)
        if hi < lo:
            raise ValueError(f"invalid cpu range {item!r}")
        for cpu in range(lo, hi + 1):
            if stride is None or (cpu - lo) % stride[1] < stride[0]:
                cpus.add(cpu)
    return sorted(cpus)


def _path(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def _read(root: str, rel: str) -> str | None:
    """The stripped text of a file, or None when it is missing or unreadable."""
    try:
        with open(_path(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(root: str, rel: str) -> int | None:
    text = _read(root, rel)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _numbered_dirs(root: str, rel_dir: str, pattern: re.Pattern[str]) -> dict[int, str]:
    """{number: path} for the directories below rel_dir whose name matches pattern (cpu12, node1, ...)."""
    out: dict[int, str] = {}
    for path in glob.glob(os.path.join(_path(root, rel_dir), "*")):
        m = pattern.match(os.path.basename(path))
        if m and os.path.isdir(path):
            out[int(m.group(1))] = path
    return out


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """Vendor, model and flags from /proc/cpuinfo (the first processor block describes them all)."""
    first: dict[str, str] = {}
    processors: list[int] = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            if value.isdigit():  # some arm kernels print "Processor : ARMv7 ..." at the top: not a cpu number
                processors.append(int(value))
            continue
        first.setdefault(key, value)

    def as_int(key: str) -> int | None:
        try:
            return int(first[key])
        except (KeyError, ValueError):
            return None

    flags_text = first.get("flags", first.get("Features", ""))
    return {
        "vendor": first.get("vendor_id", ""),
        "model_name": first.get("model name", ""),
        "family": as_int("cpu family"),
        "model": as_int("model"),
        "stepping": as_int("stepping"),
        "all_flags": set(flags_text.split()),
        "processors": sorted(set(processors)),
    }


def parse_meminfo(text: str) -> dict[str, int]:
    """{key: KiB} from /proc/meminfo or a node's meminfo (``Node 0 MemTotal: 123 kB``)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.split()[-1] if key.split() else key
        fields = value.split()
        if fields:
            try:
                out[key] = int(fields[0])
            except ValueError:
                continue
    return out


def _architecture(root: str) -> str:
    arch = _read(root, "/proc/sys/kernel/arch")
    if arch:
        return arch
    if os.path.abspath(root) == "/":
        return os.uname().machine
    return "x86_64"


def _kernel(root: str) -> str:
    release = _read(root, "/proc/sys/kernel/osrelease")
    if release:
        return release
    if os.path.abspath(root) == "/":
        return os.uname().release
    return ""


def _boot_id(root: str) -> str:
    """The running kernel's boot id: the same for every container on one machine, different on another machine or VM
    (and after a reboot). Empty when the kernel does not expose it."""
    return _read(root, "/proc/sys/kernel/random/boot_id") or ""


def _hypervisor(root: str, flags: set[str]) -> str | None:
    """The virtualization platform from DMI when the CPU says it runs under a hypervisor, else None.

    "unknown" when the hypervisor flag is set but DMI is unreadable (microVMs without DMI, hardened containers).
    """
    if "hypervisor" not in flags:
        return None
    for rel in ("/sys/class/dmi/id/sys_vendor", "/sys/class/dmi/id/product_name"):
        value = _read(root, rel)
        if value:
            return value
    return "unknown"


def _online_cpus(root: str, cpuinfo: dict[str, Any]) -> list[int]:
    text = _read(root, "/sys/devices/system/cpu/online")
    if text:
        return parse_cpulist(text)
    processors: list[int] = cpuinfo["processors"]
    if processors:
        return processors
    dirs = sorted(_numbered_dirs(root, "/sys/devices/system/cpu", _CPU_DIR))
    if dirs:
        return dirs
    if os.path.abspath(root) == "/":
        return sorted(os.sched_getaffinity(0))
    return [0]


def _cpu_topology(root: str, cpu: int, online: set[int]) -> dict[str, Any]:
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
    core_id = _read_int(root, base + "/core_id")
    package = _read_int(root, base + "/physical_package_id")
    siblings_text = _read(root, base + "/thread_siblings_list")
    siblings = parse_cpulist(siblings_text) if siblings_text else [cpu]
    # only siblings that run: an offlined SMT thread does not count
    siblings = sorted((set(siblings) & online) | {cpu})
    return {
        "cpu": cpu,
        "core_id": cpu if core_id is None else core_id,
        "package": 0 if package is None or package < 0 else package,
        "siblings": siblings,
    }


def _numa_nodes(root: str, online: set[int], meminfo: dict[str, int]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    for node_id, path in sorted(_numbered_dirs(root, "/sys/devices/system/node", _NODE_DIR).items()):
        rel = os.path.relpath(path, root)
        cpulist = _read(root, rel + "/cpulist")
        cpus = sorted(set(parse_cpulist(cpulist)) & online) if cpulist else []
        node_mem = parse_meminfo(_read(root, rel + "/meminfo") or "")
        distance_text = _read(root, rel + "/distance") or ""
        nodes.append(
            {
                "id": node_id,
                "cpus": cpus,
                "memory_total_kib": node_mem.get("MemTotal", 0),
                "memory_free_kib": node_mem.get("MemFree", 0),
                "distances": [int(d) for d in distance_text.split() if d.lstrip("-").isdigit()],
            }
        )
    if not nodes:  # a container or a kernel without NUMA: one node with everything
        nodes.append(
            {
                "id": 0,
                "cpus": sorted(online),
                "memory_total_kib": meminfo.get("MemTotal", 0),
                "memory_free_kib": meminfo.get("MemFree", 0),
                "distances": [10],
            }
        )
    return nodes


def gather(root: str = "/", allowed_cpus: set[int] | None = None) -> dict[str, Any]:
    """The topology of the host whose /proc and /sys are below ``root``, as a JSON-ready dict (schema 1).

    ``allowed_cpus``: the CPUs this process may run on; None means sched_getaffinity(0) when root is "/", else all
    online CPUs. It is reported intersected with the online CPUs.
    """
    cpuinfo = parse_cpuinfo(_read(root, "/proc/cpuinfo") or "")
    meminfo = parse_meminfo(_read(root, "/proc/meminfo") or "")
    online_list = _online_cpus(root, cpuinfo)
    online = set(online_list)
    if allowed_cpus is None:
        allowed_cpus = os.sched_getaffinity(0) if os.path.abspath(root) == "/" else online
    allowed = sorted(set(allowed_cpus) & online)

    nodes = _numa_nodes(root, online, meminfo)
    node_of: dict[int, int] = {}
    for node in nodes:
        for cpu in node["cpus"]:
            node_of.setdefault(cpu, node["id"])

    cpus: list[dict[str, Any]] = []
    for cpu in online_list:
        entry = _cpu_topology(root, cpu, online)
        entry["node"] = node_of.get(cpu)
        cpus.append({k: entry[k] for k in ("cpu", "core_id", "package", "node", "siblings")})

    threads_per_core = max((len(c["siblings"]) for c in cpus), default=1)
    flags = sorted(cpuinfo["all_flags"] & INTERESTING_FLAGS)
    notes = _notes(nodes, meminfo)
    return {
        "schema": SCHEMA,
        "architecture": _architecture(root),
        "vendor": cpuinfo["vendor"],
        "model_name": cpuinfo["model_name"],
        "family": cpuinfo["family"],
        "model": cpuinfo["model"],
        "stepping": cpuinfo["stepping"],
        "flags": flags,
        "sockets": len({c["package"] for c in cpus}),
        "numa_nodes": nodes,
        "cpus": cpus,
        "online_cpus": online_list,
        "allowed_cpus": allowed,
        "physical_cores": len({(c["package"], c["core_id"]) for c in cpus}),
        "threads_per_core": threads_per_core,
        "smt_active": threads_per_core > 1,
        "memory_total_kib": meminfo.get("MemTotal", 0),
        "memory_available_kib": meminfo.get("MemAvailable", meminfo.get("MemFree", 0)),
        "hypervisor": _hypervisor(root, cpuinfo["all_flags"]),
        "kernel": _kernel(root),
        "boot_id": _boot_id(root),
        "notes": notes,
    }


def _notes(nodes: list[dict[str, Any]], meminfo: dict[str, int]) -> list[str]:
    """Oddities of this host an operator should hear about once (``zenops facts`` prints them), not in every plan."""
    notes: list[str] = []
    total = meminfo.get("MemTotal", 0)
    if len(nodes) == 1 and total > 0 and nodes[0]["memory_total_kib"] < total * 0.9:
        # seen on VMs with hot-plugged memory: the node's meminfo counts only (a varying part of) the boot memory
        notes.append(
            f"node {nodes[0]['id']}'s meminfo counts {nodes[0]['memory_total_kib'] / 1048576:.2f} GiB of the "
            f"system's {total / 1048576:.2f} GiB (a VM with hot-plugged memory?); with one NUMA node zenops plans "
            "with the system total"
        )
    return notes
