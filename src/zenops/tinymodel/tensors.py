"""The tiny model's tensors on disk: float32 -> bfloat16 bit patterns, and the safetensors file written by hand (no
torch, no safetensors package). Its names are importable from :mod:`zenops.tinymodel` too."""

from __future__ import annotations

import io
import json
import struct
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def bf16_bits(values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN stays a quiet NaN)."""
    import numpy as np  # noqa: PLC0415

    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(values)
    bits = np.where(nan, (u >> 16) | 0x40, rounded)
    return bits.astype("<u2")


# numpy dtype -> safetensors dtype; uint16 arrays hold bf16 bit patterns (bf16_bits)
_ST_DTYPES = {"uint16": "BF16", "int32": "I32", "int8": "I8", "int64": "I64", "float32": "F32", "float16": "F16"}


def safetensors_bytes(tensors: dict[str, npt.NDArray[Any]]) -> bytes:
    """The safetensors format: u64 LE header length, JSON header (padded to 8 bytes), then the raw data."""
    out = io.BytesIO()
    write_safetensors(out, tensors)
    return out.getvalue()


def write_safetensors(f: BinaryIO, tensors: dict[str, npt.NDArray[Any]]) -> None:
    """:func:`safetensors_bytes` written to ``f`` tensor by tensor (a 500M model is never held twice in memory).
    Little-endian data of the dtypes of :data:`_ST_DTYPES` (uint16: bf16 bit patterns)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        size = t.size * t.dtype.itemsize
        dtype = _ST_DTYPES[t.dtype.name]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    f.write(struct.pack("<Q", len(raw)) + raw)
    for name in sorted(tensors):
        t = tensors[name]
        f.write(t.astype(t.dtype.newbyteorder("<"), copy=False).tobytes())
