"""The serving planner: hardware facts + model + options -> every vLLM CPU setting, each with its reason.

Pure and deterministic: no I/O, no clock, no randomness. The CLI (`zenops plan`) and the Ansible filter plugin
(zenops.inference.serving_plan) both call :func:`plan`; there is no second copy of this arithmetic.

What it decides, and the rules (each shows up in ``Plan.reasons`` with its inputs):

* platform: ``zen`` (vLLM + zentorch) needs an AMD CPU (AuthenticAMD) with AVX-512; other x86 CPUs with AVX2 get the
  stock vLLM CPU platform; no AVX2 at all is refused (vLLM's CPU kernels need it).
* instances: one per NUMA node, never spanning nodes, except: a model that fits no single node is tensor-parallel
  across nodes; on several nodes with low expected concurrency (< DP_TP_CROSSOVER) one tensor-parallel instance beats
  one instance per node (data parallel), above it data parallel wins.
* CPUs: OpenMP threads are bound to one logical CPU per physical core (SMT siblings skipped), NUMA-local, with
  RESERVED_CORES_PER_RANK core(s) per rank left out for the API server / engine frontend (vLLM #25818). The container's
  cpuset holds the whole slice (siblings and reserved cores included) so the frontend has somewhere to run.
* memory: per instance, KV cache = node memory share - OS headroom - weights - runtime overhead, but never more than
  max_num_seqs x max_model_len tokens need (2 x layers x KV heads x head dim x dtype bytes per token): more KV than
  that buys nothing and the write-up warns that too much KV cache kills the server.
* version semantics: VLLM_CPU_KVCACHE_SPACE (GiB) up to 0.19; from 0.20 the engine argument --kv-cache-memory-bytes
  (the env var is legacy) and a startup check of --gpu-memory-utilization x node memory against free memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from zenops.catalog import DTYPE_BYTES, GIB, FlavorSpec, ModelSpec
from zenops.errors import ExitCode, UsageError, ZenopsError

MIB = 1024 * 1024

# --- constants, each a named, explained estimate ------------------------------------------------------------------
DEFAULT_VLLM_VERSION = "0.25.1"  # the tested default pairing is vLLM 0.25.1 + zentorch 2.11.0.3 (AMD's image pin)
DP_TP_CROSSOVER = 6  # concurrent requests above which one instance per NUMA node beats cross-socket tensor parallel
RESERVED_CORES_PER_RANK = 1  # physical cores per rank kept free of OpenMP threads for the frontend (vLLM #25818)
OS_HEADROOM_MIN = 2 * GIB  # memory left to the OS, sshd, Docker, page cache, per NUMA node ...
OS_HEADROOM_FRACTION = 0.04  # ... or this fraction of the node, whichever is larger
RUNTIME_OVERHEAD_FIXED = int(2.5 * GIB)  # Python, torch, zentorch, compile caches, activation buffers per instance
RUNTIME_OVERHEAD_WEIGHT_FRACTION = 0.10  # temporary copies while weights are loaded and prepacked
SHM_PER_RANK = 4 * GIB  # /dev/shm for the engine's message queues (vLLM docs run CPU containers with --shm-size=4g)
MIN_MAX_MODEL_LEN = 2048  # an automatic max_model_len is never planned below this
AUTO_LEN_STEP = 1024  # an automatic max_model_len is a multiple of this
GUEST_KERNEL_RESERVE = 0.02  # a VM's MemTotal is about 2% below its flavor's RAM (kernel, firmware)
DEFAULT_CONCURRENCY = 4  # the seed benchmark profile: max concurrency 4
CAPABILITIES = ("SYS_NICE",)  # instead of --privileged: lets vLLM set NUMA memory policy and thread affinity
SECURITY_OPTS = ("seccomp=unconfined",)  # get_mempolicy/set_mempolicy are blocked by Docker's default profile


class PlanRefusedError(ZenopsError):
    """No plan can be made: the message says why, the hint names the fix. Nothing was started."""

    exit_code = ExitCode.PLAN_REFUSED

    def __init__(self, code: str, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.code = code

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "code": self.code}


# --- facts ---------------------------------------------------------------------------------------------------------


def cpulist(cpus: Sequence[int]) -> str:
    """[0,1,2,3,8,10,11] -> '0-3,8,10-11' (the format of VLLM_CPU_OMP_THREADS_BIND and Docker's cpuset)."""
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


@dataclass(frozen=True)
class Core:
    primary: int  # the logical CPU OpenMP binds to (lowest allowed id of the core)
    cpus: tuple[int, ...]  # all allowed logical CPUs of the core (primary + SMT siblings)


@dataclass(frozen=True)
class Node:
    id: int
    cores: tuple[Core, ...]  # allowed physical cores of this node, by primary CPU
    memory_bytes: int

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(c for core in self.cores for c in core.cpus))


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

    @property
    def physical_cores(self) -> int:
        return sum(len(n.cores) for n in self.nodes)

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> Topology:
        """Build from the zenops.inference.cpu_topology module's output (schema 1)."""
        try:
            if facts.get("schema") != 1:
                raise KeyError("schema")
            allowed = set(facts["allowed_cpus"]) & set(facts["online_cpus"])
            by_core: dict[tuple[int, int], list[int]] = {}
            node_of: dict[int, int] = {}
            for cpu in facts["cpus"]:
                if cpu["cpu"] in allowed:
                    by_core.setdefault((cpu["package"], cpu["core_id"]), []).append(cpu["cpu"])
                    node_of[cpu["cpu"]] = cpu["node"]
            total = int(facts["memory_total_kib"]) * 1024
            # One NUMA node holds all the memory: plan with the system total, never with the node's own meminfo,
            # which on VMs with hot-plugged memory counts only (a varying part of) the boot memory. The facts
            # (cpu_topology's notes, printed by `zenops facts`) say so once; the plan quotes no live number, so a
            # plan made twice from the same host is the same plan.
            single_node = len(facts["numa_nodes"]) == 1
            nodes = []
            for n in sorted(facts["numa_nodes"], key=lambda n: n["id"]):
                cores = sorted(
                    (Core(min(cs), tuple(sorted(cs))) for cs in by_core.values() if node_of[min(cs)] == n["id"]),
                    key=lambda c: c.primary,
                )
                memory = total if single_node else int(n["memory_total_kib"]) * 1024
                if cores and memory > 0:
                    nodes.append(Node(int(n["id"]), tuple(cores), memory))
            notes: list[str] = []
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


# --- options and plan ----------------------------------------------------------------------------------------------


def parse_version(version: str) -> tuple[int, int, int]:
    parts = version.lstrip("v").split("+")[0].split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts[:3]]
    except ValueError as e:
        raise UsageError(f"not a vLLM version: {version!r}", hint="use a release number like 0.25.1") from e
    padded = [*nums, 0, 0, 0]
    return padded[0], padded[1], padded[2]


@dataclass(frozen=True)
class PlanOptions:
    dtype: str = "bfloat16"
    max_model_len: int | None = None  # None: the model's context, lowered automatically to what fits
    max_num_seqs: int | None = None  # None: expected concurrency + 1
    concurrency: int = DEFAULT_CONCURRENCY
    instances: int | None = None  # None: auto
    platform: str = "auto"  # auto | zen | cpu
    vllm_version: str = DEFAULT_VLLM_VERSION
    base_port: int = 8000


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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for inst, raw in zip(self.instances, d["instances"], strict=True):
            raw["numa_node"] = inst.numa_node
        return d


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


def _layout(
    topo: Topology, model: ModelSpec, opts: PlanOptions, weights: int, reasons: list[Reason]
) -> list[list[_Slot]]:
    """Instances as lists of rank slots."""
    nodes = topo.nodes
    if not nodes:
        raise PlanRefusedError(
            "no_cpus",
            "no allowed CPU with memory on any NUMA node",
            hint="check the CPU affinity / cpuset this host gives zenops",
        )

    def whole(node: Node) -> _Slot:
        return _Slot(node, node.cores, node.memory_bytes, _headroom(node.memory_bytes))

    fits_one_node = max(_kv_budget(whole(n), weights, MIB) for n in nodes) > 0
    if opts.instances is None:
        if len(nodes) == 1:
            reasons.append(Reason("instances", f"1 instance: one NUMA node (node {nodes[0].id})"))
            return [[whole(nodes[0])]]
        if not fits_one_node:
            reasons.append(
                Reason(
                    "instances",
                    f"1 tensor-parallel instance over {len(nodes)} NUMA nodes: "
                    f"{model.name} weights ({_gib(weights)} GiB) do not fit one node",
                )
            )
            return [[whole(n) for n in nodes]]
        if opts.concurrency < DP_TP_CROSSOVER:
            reasons.append(
                Reason(
                    "instances",
                    f"1 tensor-parallel instance over {len(nodes)} NUMA nodes: expected "
                    f"concurrency {opts.concurrency} < {DP_TP_CROSSOVER}, where cross-socket tensor "
                    "parallel gives lower latency than one instance per node",
                )
            )
            return [[whole(n) for n in nodes]]
        reasons.append(
            Reason(
                "instances",
                f"{len(nodes)} instances, one per NUMA node (data parallel): expected "
                f"concurrency {opts.concurrency} >= {DP_TP_CROSSOVER}, where separate instances beat "
                "cross-socket tensor parallel",
            )
        )
        return [[whole(n)] for n in nodes]

    wanted = opts.instances
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
        return [[whole(n)] for n in nodes[:wanted]]
    if wanted % len(nodes):
        raise PlanRefusedError(
            "bad_options",
            f"--instances {wanted} cannot be split evenly over {len(nodes)} NUMA nodes (an instance never spans nodes)",
            hint=f"use a multiple of {len(nodes)}, or --instances auto",
        )
    per_node = wanted // len(nodes)
    out: list[list[_Slot]] = []
    for node in nodes:
        size = len(node.cores) // per_node
        if size < 1 + RESERVED_CORES_PER_RANK:
            raise PlanRefusedError(
                "bad_options",
                f"--instances {wanted}: node {node.id} has {len(node.cores)} physical cores, too few for {per_node} "
                f"instances of at least {1 + RESERVED_CORES_PER_RANK} cores each",
                hint=f"use at most {max(len(node.cores) // (1 + RESERVED_CORES_PER_RANK), 1) * len(nodes)} instances",
            )
        share = node.memory_bytes // per_node
        for k in range(per_node):
            out.append(
                [_Slot(node, node.cores[k * size : (k + 1) * size], share, _headroom(node.memory_bytes) // per_node)]
            )
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


def _choose_dtype(requested: str, platform: str, topo: Topology, reasons: list[Reason], warnings: list[str]) -> str:
    dtype = requested
    if dtype == "float16" and platform == "zen":
        dtype = "bfloat16"
        reasons.append(
            Reason(
                "dtype",
                "float16 asked for, but the Zen platform runs float16 as bfloat16: planned bfloat16 (same size)",
            )
        )
    elif dtype == "bfloat16" and "avx512_bf16" not in topo.flags:
        warnings.append(
            "no avx512_bf16 on this CPU: bfloat16 runs through conversions and is slower; "
            "--dtype float32 avoids that at twice the weight memory"
        )
        reasons.append(Reason("dtype", "bfloat16 (no native avx512_bf16: emulated, slower)"))
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
        if max_model_len * per_rank_token > min_budget:
            fit = int(min_budget // per_rank_token) // AUTO_LEN_STEP * AUTO_LEN_STEP
            raise PlanRefusedError(
                "bad_options",
                f"--max-model-len {max_model_len}: one such request needs {_gib(max_model_len * per_rank_token)} GiB "
                f"of KV cache per rank, but only {_gib(min_budget)} GiB is left after weights and overhead",
                hint=f"use --max-model-len {fit} or less, or a host with more memory per NUMA node",
            )
        reasons.append(Reason("max_model_len", f"{max_model_len} as asked"))
    else:
        fit_all = int(min_budget // (per_rank_token * max_num_seqs))
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
    platform, platform_reason = choose_platform(topo, opts.platform)
    reasons.append(Reason("platform", platform_reason))

    dtype = _choose_dtype(opts.dtype, platform, topo, reasons, warnings)

    max_num_seqs = opts.max_num_seqs or opts.concurrency + 1
    if opts.max_num_seqs is None:
        reasons.append(
            Reason(
                "max_num_seqs",
                f"{max_num_seqs} = expected concurrency {opts.concurrency} + 1 slot of "
                "slack (the write-up ran 4 concurrent requests with --max-num-seqs=5)",
            )
        )

    weights = model.weight_bytes(dtype)
    per_token = model.kv_bytes_per_token(dtype)
    reasons.append(
        Reason(
            "model",
            f"{model.name}: {model.params_b}B parameters -> {_gib(weights)} GiB of {dtype} "
            f"weights; KV cache per token = 2 x {model.layers} layers x {model.kv_heads} KV heads x "
            f"{model.head_dim} head dim x {DTYPE_BYTES[dtype]} bytes = {per_token} bytes"
            + (" (sliding-window layers make this conservative)" if model.sliding_window else ""),
        )
    )

    layout = _layout(topo, model, opts, weights, reasons)

    # memory per rank and the max_model_len that fits
    budgets = []
    for slots in layout:
        tp = len(slots)
        for slot in slots:
            budgets.append((_kv_budget(slot, weights // tp, kv_unit(version)), tp))
    min_budget, tp_of_min = min(budgets)
    per_rank_token = per_token / tp_of_min  # KV heads are split over tensor-parallel ranks
    min_kv = MIN_MAX_MODEL_LEN * per_rank_token
    if min_budget < min_kv:
        worst = min(layout, key=lambda s: sum(x.memory_bytes for x in s))
        need = (
            sum(x.headroom_bytes for x in worst)
            + weights
            + len(worst) * _overhead(weights // len(worst))
            + int(MIN_MAX_MODEL_LEN * per_token)
        )
        where = (
            f"{'node ' + str(worst[0].node.id) if len(worst) == 1 else str(len(worst)) + ' NUMA nodes'}"
            f" of {topo.source}"
        )
        raise _refuse_too_big(model, opts, topo, need, flavors, where)

    max_model_len = _choose_max_model_len(model, opts, max_num_seqs, min_budget, per_rank_token, reasons)

    instances = []
    port = opts.base_port
    for index, slots in enumerate(layout):
        inst = _instance(
            index,
            port,
            slots,
            weights,
            per_token,
            max_model_len,
            max_num_seqs,
            dtype,
            version,
            platform,
            topo,
            reasons if index == 0 else None,
            warnings,
        )
        instances.append(inst)
        port += 1
    if len(instances) > 1:
        reasons.append(Reason("ports", f"ports {opts.base_port}-{port - 1}, one per instance"))

    return Plan(
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
    )


@dataclass(frozen=True)
class _KvFigures:
    kv_gib: float
    need_all: int
    budget: int
    kv_tokens: int
    weights_rank: int
    overhead: int
    per_rank_token: float


def _explain(
    reasons: list[Reason],
    slots: list[_Slot],
    topo: Topology,
    platform: str,
    version: tuple[int, int, int],
    omp: str,
    reserved: list[int],
    container: dict[str, Any],
    kv: _KvFigures,
    max_num_seqs: int,
    max_model_len: int,
) -> None:
    """The reasons for one instance's numbers (given once: every instance follows the same rules)."""
    tp = len(slots)
    kv_gib, need_all, budget, kv_tokens = kv.kv_gib, kv.need_all, kv.budget, kv.kv_tokens
    weights_rank, overhead, per_rank_token = kv.weights_rank, kv.overhead, kv.per_rank_token
    first = slots[0]
    n_cores = len(first.cores)
    smt = " (SMT siblings left out: one thread per physical core)" if topo.smt_active else ""
    reasons.append(
        Reason(
            "cpus",
            f"OpenMP threads on {omp}: node {first.node.id}'s {n_cores} physical cores"
            f"{smt}, minus {len(reserved) // tp or 0} reserved for the API server/engine frontend "
            f"({cpulist(reserved) or 'none: a single core'}); the write-up bound 0-(nproc-1), "
            "and its VLLM_CPU_NUM_OF_RESERVED_CPU=1 only applies to automatic binding",
        )
    )
    reasons.append(
        Reason(
            "kv_cache",
            f"{kv_gib:.2f} GiB per rank: needed {max_num_seqs} seqs x {max_model_len} "
            f"tokens x {per_rank_token:g} bytes = {_gib(need_all)} GiB; available "
            f"{_gib(first.memory_bytes)} GiB node share - {_gib(first.headroom_bytes)} OS headroom - "
            f"{_gib(weights_rank)} weights - {_gib(overhead)} runtime overhead = {_gib(budget)} GiB; "
            f"planned min(need rounded up, budget rounded down), holding {kv_tokens} tokens. "
            "The write-up's 75% of RAM allocates KV that is never used and risks the OOM killer",
        )
    )
    if version >= (0, 20, 0):
        reasons.append(
            Reason(
                "kv_semantics",
                f"vLLM {'.'.join(map(str, version))} >= 0.20: "
                "--kv-cache-memory-bytes (VLLM_CPU_KVCACHE_SPACE is legacy there; without either, "
                "--gpu-memory-utilization 0.92 x node memory is taken)",
            )
        )
    else:
        reasons.append(
            Reason(
                "kv_semantics",
                f"vLLM {'.'.join(map(str, version))} < 0.20: "
                "VLLM_CPU_KVCACHE_SPACE in GiB (unset means 4 GiB up to 0.11, 50% of RAM per NUMA "
                "node in 0.14-0.18)",
            )
        )
    reasons.append(
        Reason(
            "container",
            f"--shm-size {container['shm_size']} ({SHM_PER_RANK // GIB} GiB per rank) "
            "instead of the write-up's total-1 GiB (tmpfs only holds what the message queues use); "
            f"cpuset {container['cpuset_cpus']} on memory node(s) {container['cpuset_mems']}; "
            "--cap-add SYS_NICE and seccomp=unconfined instead of --privileged",
        )
    )
    if platform == "zen":
        how = (
            "VLLM_PLUGINS=zentorch loads the out-of-tree plugin"
            if version < (0, 18, 0)
            else "the in-tree ZenCpuPlatform is chosen when zentorch imports"
        )
        reasons.append(Reason("zentorch", f"vLLM {'.'.join(map(str, version))}: {how}"))


def _instance(
    index: int,
    port: int,
    slots: list[_Slot],
    weights: int,
    per_token: int,
    max_model_len: int,
    max_num_seqs: int,
    dtype: str,
    version: tuple[int, int, int],
    platform: str,
    topo: Topology,
    reasons: list[Reason] | None,
    warnings: list[str],
) -> Instance:
    tp = len(slots)
    weights_rank = weights // tp
    overhead = _overhead(weights_rank)
    per_rank_token = per_token / tp
    need_all = math.ceil(max_num_seqs * max_model_len * per_rank_token)
    unit = kv_unit(version)
    budget = min(_kv_budget(s, weights_rank, unit) for s in slots)
    # the need rounded up to the unit, capped by the budget (already rounded down, and at least one full request)
    kv_bytes = min(math.ceil(need_all / unit), budget // unit) * unit
    kv_gib = kv_bytes / GIB
    kv_tokens = int(kv_bytes // per_rank_token)

    bind_ranks: list[list[int]] = []
    reserved: list[int] = []
    for s in slots:
        keep = RESERVED_CORES_PER_RANK if len(s.cores) > RESERVED_CORES_PER_RANK else 0
        reserved += [c.primary for c in s.cores[:keep]]
        bind_ranks.append([c.primary for c in s.cores[keep:]])
    all_cpus = sorted(c for s in slots for core in s.cores for c in core.cpus)
    omp = "|".join(cpulist(r) for r in bind_ranks)
    nodes = [s.node.id for s in slots]

    env: dict[str, str] = {"VLLM_CPU_OMP_THREADS_BIND": omp}
    args = [
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--port",
        str(port),
    ]
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp)]
    if version >= (0, 20, 0):
        args += ["--kv-cache-memory-bytes", str(kv_bytes)]
        share = max(s.memory_bytes for s in slots) / max(s.node.memory_bytes for s in slots)
        if share < 1:  # several instances on one node: the startup check must not demand the whole node
            used = (weights_rank + overhead + kv_bytes) / max(s.node.memory_bytes for s in slots)
            args += ["--gpu-memory-utilization", f"{math.ceil(used * 100) / 100:.2f}"]
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_bytes // GIB)
    if platform == "zen" and version < (0, 18, 0):
        env["VLLM_PLUGINS"] = "zentorch"

    container: dict[str, Any] = {
        "cpuset_cpus": cpulist(all_cpus),
        "cpuset_mems": ",".join(str(n) for n in nodes),
        "shm_size": f"{SHM_PER_RANK * tp // GIB}g",
        "ipc_mode": None,
        "cap_add": list(CAPABILITIES),
        "security_opts": list(SECURITY_OPTS),
        "privileged": False,
    }

    if kv_bytes < need_all:
        held = int(kv_bytes // (max_model_len * per_rank_token))
        warnings.append(
            f"instance {index}: the KV cache ({kv_gib:.2f} GiB) holds {held} full-length sequence(s), "
            f"fewer than --max-num-seqs {max_num_seqs}; long requests beyond that queue"
        )
    if reasons is not None:
        _explain(
            reasons,
            slots,
            topo,
            platform,
            version,
            omp,
            reserved,
            container,
            _KvFigures(kv_gib, need_all, budget, kv_tokens, weights_rank, overhead, per_rank_token),
            max_num_seqs,
            max_model_len,
        )

    return Instance(
        index=index,
        port=port,
        numa_nodes=nodes,
        tensor_parallel_size=tp,
        cpus=[c for r in bind_ranks for c in r],
        omp_threads_bind=omp,
        reserved_cpus=reserved,
        cpuset=container["cpuset_cpus"],
        memory_share_gib=_gib(sum(s.memory_bytes for s in slots)),
        weights_gib=_gib(weights),
        overhead_gib=_gib(overhead * tp),
        headroom_gib=_gib(sum(s.headroom_bytes for s in slots)),
        kv_cache_gib=round(kv_gib, 2),
        kv_cache_bytes=kv_bytes,
        kv_tokens=kv_tokens,
        env=env,
        args=args,
        container=container,
    )
