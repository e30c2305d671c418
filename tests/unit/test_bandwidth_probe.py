"""The bandwidth probe's GEMM dtype (roles/vllm_server/files/bandwidth_probe.py, run inside the engine image): bf16 only
where the CPU computes it natively. On a CPU without AVX-512 BF16 or AMX, torch's bf16 matmul runs 20-50x slower
than float32 (measured on a 2-vCPU AMD EPYC with AVX2: 0.4-1 GFLOP/s against 17-20), and the probe ran past its
10-minute timeout there: `up --measure` then planned no ceiling. The CPU kinds come from fixture cpuinfo lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("bandwidth_probe", REPO / "roles/vllm_server/files/bandwidth_probe.py")
assert spec is not None
assert spec.loader is not None
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

ZEN3_AVX2 = "fpu vme sse sse2 avx avx2 fma bmi2 sha_ni vaes"
ZEN4 = "fpu sse2 avx2 avx512f avx512dq avx512_bf16 avx512_vnni"
SAPPHIRE = "fpu sse2 avx2 avx512f avx512_fp16 amx_bf16 amx_tile amx_int8"
SKYLAKE_X = "fpu sse2 avx2 avx512f avx512dq avx512bw"


@pytest.mark.parametrize(
    ("flags", "native"),
    [(ZEN3_AVX2, False), (ZEN4, True), (SAPPHIRE, True), (SKYLAKE_X, False)],
)
def test_bf16_only_where_the_cpu_computes_it(tmp_path: Path, flags: str, native: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert probe.native_bf16(str(cpuinfo)) is native


def test_unreadable_cpuinfo_keeps_bf16(tmp_path: Path) -> None:
    assert probe.native_bf16(str(tmp_path / "missing")) is True
