"""Quantized checkpoints (``zenops tiny-model --quant``): the tiny model's linear layers quantized in the exact
on-disk layout vLLM's CPU backend loads. Its names are importable from :mod:`zenops.tinymodel` too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zenops.errors import UsageError
from zenops.tinymodel.tensors import bf16_bits

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


# The linear layers' weights quantized in the exact on-disk layout vLLM 0.32's CPU backend loads (read in the
# installed wheel: vllm/model_executor/layers/quantization/auto_gptq.py, compressed_tensors/, the kernels in
# model_executor/kernels/linear/); embeddings, lm_head and the norms stay bf16, as in published checkpoints.
QUANT_FORMATS = ("gptq-int4", "w4a16", "w8a8")
GROUP_SIZE = 128  # int4 formats: one scale per 128 input channels (GPTQ's and compressed-tensors' usual group)
_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantization_config(quant: str) -> dict[str, Any]:
    """config.json's ``quantization_config`` of a format (what vLLM's loader reads)."""
    if quant == "gptq-int4":
        return {"quant_method": "gptq", "bits": 4, "group_size": GROUP_SIZE, "desc_act": False, "sym": True,
                "lm_head": False, "checkpoint_format": "gptq"}  # fmt: skip
    if quant == "w4a16":
        weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": GROUP_SIZE,
                   "dynamic": False}  # fmt: skip
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                              "output_activations": None}},
                "ignore": ["lm_head"]}  # fmt: skip
    if quant == "w8a8":
        weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False}
        acts = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
        return {"quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts,
                                              "output_activations": None}},
                "ignore": ["lm_head"]}  # fmt: skip
    raise UsageError(f"--quant {quant}: unknown format", hint=f"one of {', '.join(QUANT_FORMATS)}")


def quantize_int4(w: npt.NDArray[np.float32], group: int = GROUP_SIZE) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Symmetric int4 per group of ``group`` input channels of ``w`` [N out, K in]: (q, scales). ``q`` [N, K] holds
    the unsigned codes 0..15 (the signed value + 8, as GPTQ and compressed-tensors store it), ``scales`` [N, K/group]
    float32 = max |w| / 7 of each group; the weight is (q - 8) x scale."""
    import numpy as np  # noqa: PLC0415

    n, k = w.shape
    if k % group:
        raise ValueError(f"the group size {group} does not divide {k} input channels")
    grouped = w.reshape(n, k // group, group)
    scales = np.maximum(np.abs(grouped).max(axis=2), np.float32(1e-8)) / np.float32(7)
    q = np.clip(np.rint(grouped / scales[:, :, None]), -8, 7).astype(np.int32) + 8
    return q.reshape(n, k), scales.astype(np.float32)


def pack_int4(q: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Codes 0..15 [rows, cols] -> int32 [rows, cols/8]: eight consecutive columns per int32, the first in the lowest
    nibble (vLLM's pack_quantized_values_into_int32 along that dimension)."""
    import numpy as np  # noqa: PLC0415

    rows, cols = q.shape
    u = q.astype(np.uint32).reshape(rows, cols // 8, 8)
    packed = np.zeros((rows, cols // 8), dtype=np.uint32)
    for i in range(8):
        packed |= (u[:, :, i] & 0xF) << np.uint32(4 * i)
    return packed.view(np.int32)


def quantize_int8(w: npt.NDArray[np.float32]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Symmetric int8 per output channel of ``w`` [N, K]: (int8 [N, K], float32 scales [N, 1] = max |w| / 127)."""
    import numpy as np  # noqa: PLC0415

    scales = np.maximum(np.abs(w).max(axis=1, keepdims=True), np.float32(1e-8)) / np.float32(127)
    return np.clip(np.rint(w / scales), -127, 127).astype(np.int8), scales.astype(np.float32)


def quantized_tensors(name: str, w: npt.NDArray[np.float32], quant: str) -> dict[str, npt.NDArray[Any]]:
    """One linear layer's tensors in ``quant``'s layout, named after ``name`` (``...q_proj.weight``)."""
    import numpy as np  # noqa: PLC0415

    base = name.removesuffix(".weight")
    n, k = w.shape
    if quant == "w8a8":
        q8, s8 = quantize_int8(w)
        return {f"{base}.weight": q8, f"{base}.weight_scale": s8}
    q, scales = quantize_int4(w)
    if quant == "w4a16":  # [N, K/8] packed along K; scales [N, K/G] in the model's dtype
        return {
            f"{base}.weight_packed": pack_int4(q),
            f"{base}.weight_scale": bf16_bits(scales),
            f"{base}.weight_shape": np.array([n, k], dtype=np.int64),
        }
    # gptq-int4: qweight [K/8, N] packed along K; qzeros [K/G, N/8] (zero 8 stored as 7, GPTQ v1's +1); scales [K/G, N]
    groups = k // GROUP_SIZE
    return {
        f"{base}.qweight": np.ascontiguousarray(pack_int4(q).T),
        f"{base}.qzeros": np.full((groups, n // 8), 0x77777777, dtype=np.int32),
        f"{base}.scales": bf16_bits(np.ascontiguousarray(scales.T)),
        f"{base}.g_idx": (np.arange(k, dtype=np.int32) // GROUP_SIZE).astype(np.int32),
    }
