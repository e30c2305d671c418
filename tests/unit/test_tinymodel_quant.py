"""Quantized tiny models (`zenops tiny-model --quant`): the exact on-disk layout vLLM 0.32's CPU backend loads.

The layout each format must have is vLLM's, quoted from the installed wheel (vllm/model_executor/layers/quantization/
auto_gptq.py, compressed_tensors/schemes/compressed_tensors_wNa16.py and _w8a8_int8.py; the unpacking of
vllm/model_executor/layers/quantization/utils/quant_utils.py, ``(w >> 4 * i) & 0xF`` for the i-th value of an
int32): these tests read the written files back by that convention. The real load is the quantization e2e
(scripts/bench-quant: each format served by vLLM on a devhost)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from zenops import tinymodel
from zenops.errors import UsageError

SHAPE = tinymodel.Shape(hidden=256, layers=2, heads=4, kv_heads=1, intermediate=768)


def read_safetensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__")
    data = raw[8 + n :]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """vLLM's unpack along the last dimension: value i of each int32 is (w >> 4 i) & 0xF."""
    u = packed.view(np.uint32)
    return np.stack([(u >> np.uint32(4 * i)) & 0xF for i in range(8)], axis=-1).reshape(*u.shape[:-1], -1)


def bf16(raw: bytes, shape: list[int]) -> np.ndarray:
    return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)


def test_int4_codes_are_symmetric_per_group_and_within_half_a_step():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 256), dtype=np.float32) * np.float32(0.02)
    q, scales = tinymodel.quantize_int4(w)
    assert q.min() >= 1  # symmetric: -7..7 used (+8), -8 only by rounding at the edge
    assert q.max() <= 15
    assert scales.shape == (64, 2)
    back = (q.astype(np.float32) - 8).reshape(64, 2, 128) * scales[:, :, None]
    assert np.abs(back.reshape(64, 256) - w).max() <= scales.max() / 2 + 1e-9
    with pytest.raises(ValueError, match="does not divide 200"):
        tinymodel.quantize_int4(w[:, :200])


def test_packing_puts_eight_consecutive_values_in_an_int32_lowest_nibble_first():
    q = np.arange(16, dtype=np.int32).reshape(1, 16) % 16
    packed = tinymodel.pack_int4(q)
    assert packed.dtype == np.int32
    assert packed.shape == (1, 2)
    assert packed.view(np.uint32)[0, 0] == 0x76543210
    assert (unpack_int4(packed) == q).all()


def _model(tmp_path: Path, quant: str | None) -> tuple[dict[str, Any], dict[str, tuple[str, list[int], bytes]]]:
    d = tmp_path / (quant or "bf16")
    d.mkdir()
    tinymodel._write_model(d, seed=3, vocab_size=2000, shape=SHAPE, quant=quant)
    return json.loads((d / "config.json").read_text()), read_safetensors(d / "model.safetensors")


def test_gptq_int4_is_the_layout_vllms_gptq_loader_takes(tmp_path):
    config, tensors = _model(tmp_path, "gptq-int4")
    qc = config["quantization_config"]
    assert {k: qc[k] for k in ("quant_method", "bits", "group_size", "desc_act", "sym")} == {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
    }  # fmt: skip
    p = "model.layers.0.mlp.down_proj"  # K = intermediate 768 in, N = hidden 256 out
    assert tensors[f"{p}.qweight"][:2] == ("I32", [768 // 8, 256])
    assert tensors[f"{p}.qzeros"][:2] == ("I32", [768 // 128, 256 // 8])
    assert tensors[f"{p}.scales"][:2] == ("BF16", [768 // 128, 256])
    assert tensors[f"{p}.g_idx"][:2] == ("I32", [768])
    assert set(np.frombuffer(tensors[f"{p}.qzeros"][2], "<u4")) == {0x77777777}  # zero 8, stored as 7 (v1)
    assert f"{p}.weight" not in tensors
    # embeddings, lm_head and norms stay bf16
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        assert tensors[name][0] == "BF16"
    # the codes dequantize to the bf16 twin's weights (same seed), within half a quantization step
    _c, twin = _model(tmp_path, None)
    w = bf16(twin[f"{p}.weight"][2], [256, 768])  # [N, K]
    qweight = np.frombuffer(tensors[f"{p}.qweight"][2], "<i4").reshape(96, 256)
    codes = unpack_int4(np.ascontiguousarray(qweight.T)).T  # unpacked along K: [K, N]
    scales = bf16(tensors[f"{p}.scales"][2], [6, 256])
    back = (codes.astype(np.float32) - 8) * np.repeat(scales, 128, axis=0)
    assert np.abs(back.T - w).max() <= scales.max() * 0.51 + 1e-3


def test_w4a16_is_compressed_tensors_pack_quantized_the_gptq_codes_transposed(tmp_path):
    config, tensors = _model(tmp_path, "w4a16")
    _c, gptq = _model(tmp_path, "gptq-int4")
    qc = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["format"] == "pack-quantized"
    assert qc["config_groups"]["group_0"]["weights"]["group_size"] == 128
    p = "model.layers.1.self_attn.q_proj"  # K = 256 in, N = 256 out
    assert tensors[f"{p}.weight_packed"][:2] == ("I32", [256, 256 // 8])
    assert tensors[f"{p}.weight_scale"][:2] == ("BF16", [256, 256 // 128])
    assert np.frombuffer(tensors[f"{p}.weight_shape"][2], "<i8").tolist() == [256, 256]
    packed = np.frombuffer(tensors[f"{p}.weight_packed"][2], "<i4").reshape(256, 32)
    qweight = np.frombuffer(gptq[f"{p}.qweight"][2], "<i4").reshape(32, 256)
    assert (packed == qweight.T).all()


def test_w8a8_is_int8_per_channel_with_float32_scales(tmp_path):
    config, tensors = _model(tmp_path, "w8a8")
    acts = config["quantization_config"]["config_groups"]["group_0"]["input_activations"]
    assert acts == {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
    p = "model.layers.0.self_attn.k_proj"  # N = 64, K = 256
    assert tensors[f"{p}.weight"][:2] == ("I8", [64, 256])
    assert tensors[f"{p}.weight_scale"][:2] == ("F32", [64, 1])


def test_an_unknown_format_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(UsageError, match="--quant int3: unknown format"):
        tinymodel.generate(tmp_path / "m", quant="int3")
    assert not (tmp_path / "m").exists()
