"""The peers' serving settings, reproduced on the same host as zenops's plan (`--layout`, a campaign's ``layout``
variant): what a person following the write-up, AMD's serving skill, or vLLM's defaults would run, so that one run
measures zenops against each of them.

Each peer's rule is written once, here, with its source (:data:`PEERS`); :func:`relayout` turns zenops's plan for a
host into that peer's one instance. What is not a layout decision stays as zenops planned it, the same for every peer
so the comparison is about the layout: the model, dtype, --max-model-len (a benchmark parameter), the engine image
and platform (the zentorch plugin on AMD with AVX-512), the port, and the server's key and model mounts.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from zenops.cpulist import format_cpulist

if TYPE_CHECKING:
    from zenops.planner import Plan, Topology

ZENOPS = "zenops"


@dataclass(frozen=True)
class Peer:
    name: str
    title: str
    rule: str  # what it sets, as its source documents it
    source: str


PEERS: tuple[Peer, ...] = (
    Peer(
        ZENOPS,
        "zenops's plan",
        "one instance per NUMA node (or per L3 group where that measures faster), OpenMP threads bound to the "
        "instance's physical cores with one core left to its frontend, KV cache sized to the expected concurrency",
        "zenops.planner (README, `How zenops plan decides`)",
    ),
    Peer(
        "writeup",
        "the write-up's recipe",
        "all CPUs bound (VLLM_CPU_OMP_THREADS_BIND=0-(nproc-1)), VLLM_CPU_NUM_OF_RESERVED_CPU=1, KV cache 75% of "
        "RAM, --max-num-seqs 5, --shm-size RAM-1G, bf16",
        "the gp.5.24.96 write-up this project started from (issue 27)",
    ),
    Peer(
        "amd-skill",
        "AMD's serving-llms-on-epyc skill",
        "one socket's physical cores (--cpuset-cpus, --cpuset-mems), no tensor parallel, vLLM's own binding inside "
        "them, KV cache min(40% of the socket's RAM, RAM-16 GB)",
        "AMD's serving-llms-on-epyc skill (issue 27)",
    ),
    Peer(
        "vllm-defaults",
        "vLLM's defaults",
        "no binding, KV size or --max-num-seqs given: vLLM's automatic OpenMP binding (one thread per physical core "
        "of the first NUMA node, a core reserved) and its default KV cache (--gpu-memory-utilization of the node)",
        "vLLM's CPU docs and engine defaults (docs/reference/vllm-zentorch.md, Runtime env)",
    ),
)
NAMES = tuple(p.name for p in PEERS)
_BIND = "VLLM_CPU_OMP_THREADS_BIND"
_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
_RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def peer(name: str) -> Peer:
    for p in PEERS:
        if p.name == name:
            return p
    raise KeyError(name)


def _without(args: list[str], *flags: str) -> list[str]:
    """``args`` without the given flags and their values."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        out.append(a)
    return out


def _kv(args: list[str], env: dict[str, str], kv_bytes: int, legacy: bool) -> tuple[list[str], dict[str, str]]:
    """The KV cache size as this engine takes it: --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE (GiB, < 0.20)."""
    from zenops.catalog import GIB  # noqa: PLC0415  (not at the top: request_options imports this module on --help)

    if legacy:
        return args, {**env, _KV_ENV: str(max(1, kv_bytes // GIB))}
    return [*args, "--kv-cache-memory-bytes", str(kv_bytes)], env


def relayout(name: str, plan: Plan, topo: Topology) -> tuple[Plan, str]:
    """zenops's ``plan`` for the host of ``topo`` as peer ``name`` runs it there: one instance; and the reason line
    that says what was set. ``zenops`` returns the plan unchanged. Raises ValueError when the peer's rule cannot run
    on this host (naming why)."""
    if name == ZENOPS:
        return plan, ""
    from zenops.catalog import GIB  # noqa: PLC0415  (not at the top: request_options imports this module on --help)

    p = peer(name)
    all_cpus = sorted(c for n in topo.nodes for core in n.cores for c in core.cpus)
    all_nodes = [n.id for n in topo.nodes]
    socket = min(n.package for n in topo.nodes)
    socket0 = [n for n in topo.nodes if n.package == socket]
    memory_total_bytes = topo.memory_total_bytes
    first = plan.instances[0]
    legacy = _KV_ENV in first.env
    args = _without(first.args, "--max-num-seqs", "--kv-cache-memory-bytes", "--gpu-memory-utilization",
                    "--tensor-parallel-size")  # fmt: skip
    env = {k: v for k, v in first.env.items() if k not in (_BIND, _KV_ENV, _RESERVED)}
    container = dict(first.container)
    max_num_seqs = 0
    kv_bytes = 0
    cpus = all_cpus
    nodes = all_nodes
    bind = ""
    if name == "writeup":
        bind = format_cpulist(all_cpus)
        env.update({_BIND: bind, _RESERVED: "1"})
        kv_bytes = int(memory_total_bytes * 0.75)
        args, env = _kv(args, env, kv_bytes, legacy)
        max_num_seqs = 5
        args += ["--max-num-seqs", "5"]
        container["shm_size"] = f"{max(1, memory_total_bytes // GIB - 1)}g"
    elif name == "amd-skill":
        cpus = [core.primary for n in socket0 for core in n.cores]
        nodes = [n.id for n in socket0]
        kv_bytes = int(min(0.4 * sum(n.memory_bytes for n in socket0), memory_total_bytes - 16 * GIB))
        if kv_bytes <= 0:
            raise ValueError(
                f"{p.title}: its KV rule min(40% of the socket's RAM, RAM-16 GB) gives {kv_bytes / GIB:.1f} GiB on "
                f"this host ({memory_total_bytes / GIB:.1f} GiB of RAM): it cannot run here"
            )
        args, env = _kv(args, env, kv_bytes, legacy)
    container["cpuset_cpus"] = format_cpulist(cpus)
    container["cpuset_mems"] = ",".join(str(n) for n in nodes)
    inst = replace(
        first,
        index=0,
        numa_nodes=list(nodes),
        tensor_parallel_size=1,
        cpus=list(cpus),
        omp_threads_bind=bind,
        reserved_cpus=[],
        cpuset=container["cpuset_cpus"],
        kv_cache_gib=round(kv_bytes / GIB, 2),
        kv_cache_bytes=kv_bytes,
        kv_tokens=0,
        env=env,
        args=args,
        container=container,
        max_num_seqs=max_num_seqs,
        roofline=None,
    )
    what = (
        f"layout {name} ({p.title}): {p.rule}. Here: one instance on CPUs {container['cpuset_cpus']}, memory "
        f"node(s) {container['cpuset_mems']}"
        + (f", OpenMP bound to {bind}" if bind else ", vLLM's own OpenMP binding")
        + (f", KV cache {kv_bytes / GIB:.1f} GiB" if kv_bytes else ", vLLM's default KV cache")
        + (f", --max-num-seqs {max_num_seqs}" if max_num_seqs else ", vLLM's default --max-num-seqs")
        + f". Source: {p.source}"
    )
    return replace(plan, instances=[inst], max_num_seqs=max_num_seqs), what
