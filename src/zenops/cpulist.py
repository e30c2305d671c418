"""The kernel's cpulist notation (``0-3,8,10-11``), read and written: the format of sysfs's cpu and node lists,
Docker's cpuset and VLLM_CPU_OMP_THREADS_BIND.

The controller's one copy. The cpu_topology module reads the same notation on the hosts, where zenops is not installed,
with its own copy (plugins/module_utils/cpu_topology.py ``parse_cpulist``); tests/unit/test_cpulist.py runs one table
of cases through both.
"""

from __future__ import annotations

from collections.abc import Sequence


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (sorted, unique); empty text -> ``[]``. Also reads the
    ``a-b:used/group`` stride form the kernel documents (``0-7:2/4`` -> ``[0, 1, 4, 5]``). Anything else, a
    descending range included, raises ValueError ("not a cpu list")."""
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        item = raw.strip()
        if not item:
            continue
        span, colon, stride = item.partition(":")
        lo, dash, hi = span.partition("-")
        used, slash, group = stride.partition("/")
        numbers = [lo, *([hi] if dash else []), *([used, group] if colon else [])]
        if not all(n.isdigit() for n in numbers) or (colon and not slash):
            raise ValueError(f"not a cpu list: {text!r}")
        first, last = int(lo), int(hi or lo)
        if last < first or (colon and int(group) == 0):
            raise ValueError(f"not a cpu list: {text!r}")
        cpus.update(cpu for cpu in range(first, last + 1) if not colon or (cpu - first) % int(group) < int(used))
    return sorted(cpus)


def format_cpulist(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"``; ``[]`` -> ``""``."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def display_cpulist(cpus: Sequence[int]) -> str:
    """:func:`format_cpulist` for people: ``[]`` -> ``"-"``."""
    return format_cpulist(cpus) or "-"
