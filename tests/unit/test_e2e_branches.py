"""Which platform branch a CPU lets the serving e2e prove (tests/e2e/branches.py), from fixture facts and cpuinfo
text: the branch it cannot take is a skip whose reason says why, whatever CPU runs this test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.branches import not_proven_here, platform_for, this_cpu

FACTS = REPO / "tests" / "fixtures" / "facts"


def cpu(name: str) -> dict[str, object]:
    return json.loads((FACTS / f"{name}.json").read_text())


def test_an_avx512_epyc_proves_zen_and_the_stock_platform_only_in_the_full_sweep() -> None:
    zen5 = cpu("epyc-9965-1s")
    assert not_proven_here("zen", zen5, full=False) is None
    assert not_proven_here("zen", zen5, full=True) is None
    reason = not_proven_here("cpu", zen5, full=False)
    assert reason is not None
    assert reason.startswith("stock platform not served: this CPU (")
    assert "takes zen; the --full --compare-platforms sweep serves it" in reason
    assert not_proven_here("cpu", zen5, full=True) is None  # --compare-platforms restarts it on the stock platform


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("epyc-7763-vm", "has no AVX-512"),  # AMD Zen 3: AVX2 only
        ("xeon-8480-2s", "is not AMD (zentorch is AMD's plugin)"),  # Intel with AVX-512
        ("xeon-e5-2680v4-2s", "is not AMD (zentorch is AMD's plugin)"),
    ],
)
@pytest.mark.parametrize("full", [False, True])
def test_any_other_cpu_proves_the_stock_platform_and_says_why_not_zen(name: str, why: str, full: bool) -> None:
    facts = cpu(name)
    assert not_proven_here("cpu", facts, full) is None
    reason = not_proven_here("zen", facts, full)
    assert reason is not None
    assert reason.startswith(f"zentorch not served: this CPU ({facts['model_name']}, {facts['vendor']}) {why}")
    assert "tests/runner/test_plan_to_role.py" in reason  # where that branch is checked all the same


def test_an_unknown_branch_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown platform branch 'rocm'"):
        not_proven_here("rocm", cpu("epyc-9965-1s"), full=False)


@pytest.mark.parametrize(
    ("vendor", "flags", "platform"),
    [
        ("AuthenticAMD", "fpu avx2 avx512f avx512_bf16 sse4_2", "zen"),
        ("AuthenticAMD", "fpu avx2 sse4_2", "cpu"),
        ("GenuineIntel", "fpu avx2 avx512f amx_tile", "cpu"),
    ],
)
def test_this_cpu_reads_cpuinfo_as_the_facts_do(tmp_path: Path, vendor: str, flags: str, platform: str) -> None:
    info = tmp_path / "cpuinfo"
    block = "processor\t: {n}\nvendor_id\t: {v}\nmodel name\t: Some CPU\nflags\t\t: {f}\n\n"
    info.write_text("".join(block.format(n=n, v=vendor, f=flags) for n in (0, 1)))
    mine = this_cpu(info)
    assert mine["vendor"] == vendor
    assert mine["model_name"] == "Some CPU"
    assert "fpu" not in mine["flags"]  # only the flags the facts keep
    assert platform_for(mine) == platform
