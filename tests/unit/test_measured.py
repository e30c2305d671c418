"""zenops.measured: the one table of measured serving ratios (engine, format, CPU kind, concurrency) against zenops's
bf16 plan, its lookups, and the plan's warning when something else measured faster. CPU kinds come from fixture flags
(tests/fixtures/facts: an AVX2-only AMD EPYC Zen 3 VM, an AMD EPYC 9454 with AVX-512, an Intel Xeon 8480+ with AMX),
never from this machine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.test_planner import topo
from zenops import catalog, llamacpp, measured, quant
from zenops.measured import LLAMA_CPP, MEASURED, Measurement, faster_warning, lookup
from zenops.peers import ZENOPS
from zenops.planner import PlanOptions, plan

AVX2 = topo("epyc-7763-vm").flags  # AMD EPYC 7763 (Zen 3) VM: AVX2 only; zenops plans the cpu platform
AMD_AVX512 = topo("gp-5-24-96").flags  # AMD EPYC 9454 (Zen 4): AVX-512 with BF16; the zen platform
INTEL_AMX = topo("xeon-8480-2s").flags  # Intel Xeon 8480+: AMX tiles; the cpu platform
INTEL_AVX512 = INTEL_AMX - {"amx_tile", "amx_bf16", "amx_int8"}  # the same CPU without AMX


def test_the_fixture_flags_are_the_three_cpu_kinds():
    assert (measured.isa(AVX2), measured.isa(AMD_AVX512), measured.isa(INTEL_AMX)) == ("avx2", "avx512", "amx")
    assert measured.isa(INTEL_AVX512) == "avx512"
    assert quant.isa is measured.isa  # one definition of the CPU kind, quant's callers keep their name


def test_the_table_has_one_row_per_cell_each_with_its_source_and_a_known_engine_format_and_kind():
    keys = [(m.engine, m.fmt, m.platform, m.isa, m.concurrency, m.params_b) for m in MEASURED]
    assert len(keys) == len(set(keys))
    for m in MEASURED:
        assert m.engine in measured.ENGINES, m
        names = llamacpp.FORMATS if m.engine == LLAMA_CPP else {*quant.FORMATS, "bfloat16"}
        assert m.fmt in names, m
        assert (m.platform, m.isa) in {(p, i) for p in measured.PLATFORMS for i in measured.ISAS}, m
        assert min(m.ratio, m.concurrency, m.repeats, len(m.source)) > 0, m
        assert m.spread is None or m.repeats >= 2, m


def test_the_llamacpp_runs_on_the_avx2_epyc_are_the_issues_single_runs():
    """Issue 47 (Zen 3, one run each): vLLM bf16 13.3 / 15.4 tok/s; llama.cpp bf16 37.6 (2.83x) and 56.3 (3.66x, one
    failed request), Q8_0 71.0 (5.34x) at C=1."""
    bf16_c1 = lookup(LLAMA_CPP, "bf16", "cpu", AVX2, 1)
    bf16_c4 = lookup(LLAMA_CPP, "bf16", "cpu", AVX2, 4)
    q8_c1 = lookup(LLAMA_CPP, "q8_0", "cpu", AVX2, 1)
    assert bf16_c1
    assert bf16_c4
    assert q8_c1
    assert (bf16_c1.ratio, bf16_c4.ratio, q8_c1.ratio) == pytest.approx((37.6 / 13.3, 56.3 / 15.4, 71.0 / 13.3))
    assert f"{bf16_c1.ratio:.2f} {bf16_c4.ratio:.2f} {q8_c1.ratio:.2f}" == "2.83 3.66 5.34"
    assert {bf16_c1.repeats, bf16_c4.repeats, q8_c1.repeats} == {1}
    assert bf16_c1.spread is None
    assert bf16_c1.qualifier().startswith("one run; tok/s as vllm bench 0.32 counted llama.cpp's text")
    assert "1 of 32 requests failed" in bf16_c4.qualifier()
    assert lookup(LLAMA_CPP, "q8_0", "cpu", AVX2, 4) is None  # not measured
    assert lookup(LLAMA_CPP, "bf16", "zen", AVX2, 1) is None  # another platform: another kind


def test_the_zen5_runs_give_the_ratio_of_the_means_and_the_larger_spread():
    """scripts/bench-engines on a Zen 5, 2 runs each (200M): vLLM bf16 C=1 63.0/62.0, C=4 198.6/189.4; llama.cpp bf16
    C=1 108.9/92.0, C=4 173.7/169.3, Q8_0 C=4 105.8/104.2."""
    bf16 = lookup(LLAMA_CPP, "bf16", "zen", AMD_AVX512, 4)
    q8 = lookup(LLAMA_CPP, "q8_0", "zen", AMD_AVX512, 4)
    assert bf16
    assert q8
    assert bf16.ratio == pytest.approx(171.5 / 194.0)
    assert bf16.spread == pytest.approx(9.2 / 194.0)  # vLLM's spread this time, larger than llama.cpp's 2.6%
    assert bf16.repeats == 2
    assert q8.ratio == pytest.approx(105.0 / 194.0)
    assert q8.ratio < 1
    c1 = lookup(LLAMA_CPP, "bf16", "zen", AMD_AVX512, 1)
    assert c1
    assert c1.spread == pytest.approx(16.9 / 100.45)
    # the 1B model's rows are another table, picked by the planned model's size
    big = lookup(LLAMA_CPP, "q4_k_m", "zen", AMD_AVX512, 1, params_b=1.0)
    assert big
    assert big.params_b == measured.ONE_B
    assert big.ratio == pytest.approx(40.1 / 21.25, rel=0.01)


def test_a_measurement_is_one_line_of_runs():
    one = measured.runs(LLAMA_CPP, "q4_k_m", ("cpu", "amx"), 8, (30.0,), (10.0, 12.0), 1.0, "src")
    assert (one.ratio, one.spread, one.repeats) == (pytest.approx(30 / 11), None, 1)
    two = measured.runs(LLAMA_CPP, "q4_k_m", ("cpu", "amx"), 8, (30.0, 36.0), (10.0, 12.0), 1.0, "src")
    assert two.spread == pytest.approx(max(6 / 33, 2 / 11))


def test_quants_view_keeps_the_ratios_the_plan_quotes():
    w8 = quant.measured("w8a8", "cpu", AVX2)
    assert w8
    assert w8.ratios == "0.56x at 1 concurrent request, 0.90x at 4"
    assert w8.slower
    w4 = quant.measured("w4a16", "zen", AMD_AVX512)
    assert w4
    assert w4.ratios == "1.04x at 1 concurrent request, 1.32x at 4, 1.41x at 8, 1.36x at 16"
    assert not w4.slower
    big = quant.measured("w4a16", "zen", AMD_AVX512, params_b=1.0)
    assert big
    assert big.ratios == "0.54x at 1 concurrent request, 1.46x at 4, 1.36x at 8, 1.32x at 16"  # int4 at C=1, 1B
    assert quant.measured("w8a8", "cpu", INTEL_AMX) is None
    assert quant.faster_than_bf16("zen", AMD_AVX512) == ["w4a16", "w8a8"]


@pytest.mark.parametrize(
    ("params_b", "sizes", "nearest"),
    [(0.6, {0.196, 1.0}, 1.0), (0.3, {0.196, 1.0}, 0.196), (None, {1.0, 0.196}, 0.196), (70, {0.196}, 0.196)],
)
def test_the_measured_model_nearest_in_size_is_used(params_b, sizes, nearest):
    assert measured.nearest_model(params_b, sizes) == nearest


# --- the plan's warning --------------------------------------------------------------------------------------------


def test_avx2_bf16_plan_is_told_llamacpp_measured_faster_with_the_figure_one_run_and_the_source():
    said = faster_warning("bfloat16", "cpu", AVX2, 4)
    assert said is not None
    assert "(cpu platform, avx2) at concurrency 4 (as planned)" in said
    assert "llama.cpp bf16 3.66x (one run; 1 of 32 requests failed; tok/s as vllm bench" in said
    assert "q8_0" not in said.split("Sources:")[0]  # not measured at C=4
    assert "w8a8" not in said.split("Sources:")[0]  # 0.90x: slower
    assert "AMD EPYC Zen 3" in said
    assert "does not switch engines" in said


def test_between_measured_levels_the_nearest_below_is_used_and_named():
    said = faster_warning("bfloat16", "cpu", AVX2, 2)
    assert said is not None
    assert "at concurrency 1 (the nearest measured at or below the planned 2)" in said
    assert said.index("llama.cpp q8_0 5.34x (one run;") < said.index("llama.cpp bf16 2.83x (one run;")  # fastest first


def test_amd_avx512_counts_a_known_spread_and_leaves_out_what_is_within_it_or_slower():
    said = faster_warning("bfloat16", "zen", AMD_AVX512, 4)
    assert said is not None
    assert "zenops w8a8 1.53x (2 runs, spread 6%: beyond it)" in said
    assert "zenops w4a16 1.32x (2 runs, spread 5%: beyond it)" in said
    assert "llama.cpp" not in said.split("Sources:")[0]  # bf16 0.88x and Q8_0 0.54x slower, Q4_K_M 0.97x
    at16 = faster_warning("bfloat16", "zen", AMD_AVX512, 16)
    assert at16
    assert "llama.cpp bf16" not in at16.split("Sources:")[0]  # 1.01x within its 3% spread
    at1 = faster_warning("bfloat16", "zen", AMD_AVX512, 1)
    assert at1
    assert at1.index("llama.cpp q4_k_m 2.67x") < at1.index("zenops w8a8 1.56x")  # the fastest first
    # against a quantized plan: the ratio is to that format, bf16 itself is an option
    int4 = faster_warning("gptq-int4", "zen", AMD_AVX512, 4)
    assert int4
    assert "zenops bfloat16 1.52x" in int4
    assert "zenops w8a8 2.32x" in int4
    w4 = faster_warning("w4a16", "zen", AMD_AVX512, 1)
    assert w4
    assert "llama.cpp q4_k_m 2.58x (2 runs, spread 2%; beyond the 2% spread of the two)" in w4
    assert faster_warning("w8a8", "zen", AMD_AVX512, 4) is None  # w8a8 1.53x is the fastest measured there
    # a 1B model: llama.cpp's Q4_K_M beats zenops's w8a8 at 1 request, nothing does from 4
    big = faster_warning("w8a8", "zen", AMD_AVX512, 1, params_b=1.0)
    assert big
    assert "on a 1.013B-parameter model" in big
    assert "llama.cpp q4_k_m 1.34x" in big
    assert faster_warning("w8a8", "zen", AMD_AVX512, 4, params_b=1.0) is None


def test_a_figure_within_its_spread_is_not_a_warning():
    close = Measurement(LLAMA_CPP, "bf16", "zen", "avx512", 4, 1.15, 0.2, 2, 0.196, "fixture")
    assert faster_warning("bfloat16", "zen", AMD_AVX512, 4, table=(close,)) is None
    assert faster_warning("bfloat16", "zen", AMD_AVX512, 4, table=(replace(close, ratio=1.25),)) is not None


def test_intel_amx_has_no_measurement_yet_and_a_row_of_its_own_kind_reaches_it_only():
    assert faster_warning("bfloat16", "cpu", INTEL_AMX, 4) is None
    amx = Measurement(LLAMA_CPP, "q4_k_m", "cpu", "amx", 4, 2.0, None, 1, 1.0, "fixture: Xeon 8480+")
    said = faster_warning("bfloat16", "cpu", INTEL_AMX, 16, table=(*MEASURED, amx))
    assert said
    assert "(cpu platform, amx) at concurrency 4 (the nearest" in said
    assert "llama.cpp q4_k_m 2.00x" in said
    assert "fixture: Xeon 8480+" in said
    assert faster_warning("bfloat16", "cpu", INTEL_AVX512, 16, table=(*MEASURED, amx)) is None  # no AMX: not its kind
    assert faster_warning("bfloat16", "cpu", INTEL_AMX, 2, table=(amx,)) is None  # nothing measured at or below 2


def test_the_plan_warns_with_the_figure_on_the_measured_kind_and_not_elsewhere():
    model = catalog.get_model("Qwen/Qwen3-0.6B")
    zen3 = plan(topo("epyc-7763-vm"), model, PlanOptions(concurrency=4))
    (said,) = [w for w in zen3.warnings if w.startswith("Measured faster than zenops serving bfloat16")]
    assert "llama.cpp bf16 3.66x" in said
    intel = plan(topo("xeon-8480-2s"), model, PlanOptions(concurrency=4))
    assert not [w for w in intel.warnings if w.startswith("Measured faster")]
    assert ZENOPS == "zenops"
    assert zen3.weights == "bfloat16"


@pytest.mark.parametrize(("ratio", "a", "b", "want"), [
    (1.21, 0.2, 0.1, (0.2, 1)),
    (1.2, 0.2, 0.1, (0.2, 0)),  # on the edge: not beyond
    (0.79, 0.1, 0.2, (0.2, -1)),
    (0.8, 0.1, 0.2, (0.2, 0)),
    (5.0, None, 0.1, (None, None)),  # one run: no spread, whatever the ratio
    (0.1, 0.1, None, (None, None)),
])  # fmt: skip
def test_one_spread_rule_tells_two_rows_apart_only_beyond_the_larger_spread(ratio, a, b, want):
    assert measured.beyond_spread(ratio, a, b) == want


def test_the_llamacpp_table_uses_the_one_spread_rule(monkeypatch):
    """llama.cpp's verdict follows zenops.measured.beyond_spread (no second copy of the rule)."""
    calls = []

    def rule(ratio, a, b):
        calls.append(ratio)
        return 0.5, 1

    monkeypatch.setattr(measured, "beyond_spread", rule)
    assert llamacpp.verdict(1.01, 0.0, 0.0) == (0.5, llamacpp.LLAMA_FASTER)
    assert calls == [1.01]
