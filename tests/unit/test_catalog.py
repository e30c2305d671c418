from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

from zenops import catalog
from zenops.catalog import (
    ModelConfigError,
    ModelSpec,
    estimate_params,
    flavors,
    flavors_that_fit,
    get_flavor,
    get_model,
    model_from_config_json,
)
from zenops.config import EXAMPLE, load, read_file
from zenops.errors import ConfigError, ExitCode, UsageError

SEED_MODELS = [  # the write-up's 11 benchmarked models
    "Qwen/Qwen3-0.6B",
    "meta-llama/Llama-3.2-1B",
    "google/gemma-3-1b-it",
    "Qwen/Qwen3-1.7B",
    "meta-llama/Llama-3.2-3B",
    "microsoft/Phi-4-mini-instruct",
    "Qwen/Qwen3-4B",
    "google/gemma-3-4b-it",
    "Qwen/Qwen3-8B",
    "google/gemma-3-12b-it",
    "microsoft/phi-4",
]
EXTRA_MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "meta-llama/Llama-3.3-70B-Instruct",
]
# config.json sets head_dim explicitly and it differs from hidden_size / attention_heads
DECOUPLED_HEAD_DIM = {
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-4B-AWQ",
    "google/gemma-3-1b-it",
    "google/gemma-3-4b-it",
    "google/gemma-3-12b-it",
}
MULTIMODAL = {"google/gemma-3-4b-it", "google/gemma-3-12b-it"}  # params_b includes the vision tower

LLAMA_32_1B: dict[str, Any] = {  # meta-llama/Llama-3.2-1B config.json, the keys that matter
    "architectures": ["LlamaForCausalLM"],
    "head_dim": 64,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def model_dir(tmp_path: Path, config: Any, name: str = "model") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return d


def shape_of(spec: ModelSpec) -> dict[str, Any]:
    assert spec.vocab_size
    assert spec.intermediate_size
    return {
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "layers": spec.layers,
        "attention_heads": spec.attention_heads,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "tied_embeddings": spec.tied_embeddings,
        "num_experts": spec.num_experts,
    }


# --- the model catalogue ----------------------------------------------------------------------------------------


def test_seed_and_extra_models_are_all_there():
    assert set(SEED_MODELS + EXTRA_MODELS) <= set(catalog.models())


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_catalogue_model_is_self_consistent(name: str):
    m = catalog.models()[name]
    assert m.name == name
    assert m.source == "catalogue"
    for value in (m.layers, m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim, m.max_context):
        assert isinstance(value, int)
        assert value > 0
    assert m.attention_heads % m.kv_heads == 0
    if name not in DECOUPLED_HEAD_DIM:
        assert m.head_dim * m.attention_heads == m.hidden_size
    if m.sliding_window is not None:
        assert m.sliding_window < m.max_context
    else:
        assert m.sliding_window_pattern is None
    assert m.params_b > 0
    assert "checked" in m.provenance or "verify" in m.provenance
    # The shape reproduces the published parameter count: text models within 2%; multimodal ones fall short by
    # their vision tower only.
    estimate = estimate_params(**shape_of(m)) / 1e9
    if name in MULTIMODAL:
        assert 0.3 < m.params_b - estimate < 0.5
    else:
        assert estimate == pytest.approx(m.params_b, rel=0.02)


def test_gated_repos():
    gated = {name for name, m in catalog.models().items() if m.hf_token_required}
    assert gated == {n for n in catalog.models() if n.split("/")[0] in ("meta-llama", "google", "mistralai")}


def test_known_numbers():
    q = get_model("Qwen/Qwen3-4B")
    assert (q.layers, q.hidden_size, q.attention_heads, q.kv_heads, q.head_dim, q.max_context) == (
        36,
        2560,
        32,
        8,
        128,
        40960,
    )
    assert get_model("meta-llama/Llama-3.2-1B").head_dim == 64
    phi = get_model("microsoft/phi-4")
    assert (phi.layers, phi.hidden_size, phi.attention_heads, phi.kv_heads, phi.max_context) == (
        40,
        5120,
        40,
        10,
        16384,
    )
    big = get_model("meta-llama/Llama-3.3-70B-Instruct")
    assert (big.layers, big.hidden_size, big.attention_heads, big.kv_heads) == (80, 8192, 64, 8)
    gemma = get_model("google/gemma-3-4b-it")
    assert (gemma.sliding_window, gemma.sliding_window_pattern) == (1024, 6)
    assert get_model("mistralai/Mixtral-8x7B-Instruct-v0.1").num_experts == 8


def test_kv_bytes_per_token():
    q = get_model("Qwen/Qwen3-4B")
    assert q.kv_bytes_per_token("bfloat16") == 2 * 36 * 8 * 128 * 2 == 147456
    assert q.kv_bytes_per_token("float32") == 2 * 147456


def test_weight_bytes_are_sane():
    assert get_model("Qwen/Qwen3-4B").weight_bytes("bfloat16") == 8_000_000_000
    for m in catalog.models().values():
        bf16 = m.weight_bytes("bfloat16")
        assert bf16 == m.weight_bytes("float16")
        assert 1 * catalog.GIB < bf16 < 150 * catalog.GIB
        if m.quant_format is None:
            assert m.weight_bytes("float32") == pytest.approx(2 * bf16, abs=1)
        else:  # the linear layers stay at their bits: only the rest doubles
            assert bf16 < m.weight_bytes("float32") < 2 * bf16


def test_unknown_dtype_names_the_valid_ones():
    with pytest.raises(UsageError) as info:
        get_model("Qwen/Qwen3-4B").kv_bytes_per_token("int3")
    assert info.value.hint
    assert "bfloat16" in info.value.hint


def test_models_is_cached_but_returns_a_copy():
    first = catalog.models()
    first.clear()
    assert len(catalog.models()) >= 15


# --- get_model --------------------------------------------------------------------------------------------------


def test_get_model_exact_and_case_insensitive():
    assert get_model("Qwen/Qwen3-4b") is get_model("Qwen/Qwen3-4B")
    assert get_model("MICROSOFT/PHI-4").name == "microsoft/phi-4"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Qwen/Qwen3-5B", {"Qwen/Qwen3-4B", "Qwen/Qwen3-8B"}),
        ("Qwen3-4B", {"Qwen/Qwen3-4B"}),  # no org
        ("google/gemma-3-4b", {"google/gemma-3-4b-it"}),
    ],
)
def test_get_model_unknown_suggests_close_matches(name: str, expected: set[str]):
    with pytest.raises(UsageError) as info:
        get_model(name)
    err = info.value
    assert err.exit_code == ExitCode.USAGE
    assert name in err.message
    assert err.hint
    assert any(f"'{e}'" in err.hint for e in expected)
    assert "local model directory containing config.json" in err.hint


def test_get_model_without_any_close_match_lists_the_catalogue():
    with pytest.raises(UsageError) as info:
        get_model("zzz/nothing-like-it")
    assert info.value.hint
    assert "Qwen/Qwen3-4B" in info.value.hint
    assert "config.json" in info.value.hint


def test_get_model_reads_a_local_directory(tmp_path: Path):
    d = model_dir(tmp_path, LLAMA_32_1B)
    m = get_model(str(d))
    assert m.name == str(d)
    assert m.source == f"config.json:{d / 'config.json'}"
    assert m == model_from_config_json(d) == model_from_config_json(d / "config.json")


# --- model_from_config_json -------------------------------------------------------------------------------------


def test_llama_style_config(tmp_path: Path):
    m = model_from_config_json(model_dir(tmp_path, LLAMA_32_1B))
    catalogued = get_model("meta-llama/Llama-3.2-1B")
    for key in ("architecture", "layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_context"):
        assert getattr(m, key) == getattr(catalogued, key), key
    assert m.tied_embeddings is True
    assert m.sliding_window is None
    assert m.hf_token_required is False
    assert m.params_b == pytest.approx(1.236, abs=0.001)  # estimated: no weights in the directory
    assert "estimated" in m.provenance
    assert m.kv_bytes_per_token("bfloat16") == 2 * 16 * 8 * 64 * 2


def test_head_dim_and_kv_heads_default_like_transformers(tmp_path: Path):
    config = {k: v for k, v in LLAMA_32_1B.items() if k not in ("head_dim", "num_key_value_heads")}
    m = model_from_config_json(model_dir(tmp_path, config))
    assert m.head_dim == 2048 // 32
    assert m.kv_heads == m.attention_heads


def test_params_from_the_safetensors_index(tmp_path: Path):
    d = model_dir(tmp_path, LLAMA_32_1B)
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 2_471_645_184}}))
    m = model_from_config_json(d)
    assert m.params_b == pytest.approx(1.235822592)
    assert "total_size" in m.provenance

    d32 = model_dir(tmp_path, {**LLAMA_32_1B, "torch_dtype": "float32"}, "fp32")
    (d32 / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 4_000_000_000}}))
    assert model_from_config_json(d32).params_b == pytest.approx(1.0)


def test_params_from_safetensors_headers(tmp_path: Path):
    d = model_dir(tmp_path, LLAMA_32_1B)
    for i, tensors in enumerate(({"a": [1000, 2048], "b": [2048]}, {"c": [3, 5, 7], "__metadata__": {}})):
        header = json.dumps(
            {
                k: {"dtype": "BF16", "shape": v, "data_offsets": [0, 0]} if k != "__metadata__" else v
                for k, v in tensors.items()
            }
        ).encode()
        (d / f"model-{i}.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    m = model_from_config_json(d)
    assert m.params_b * 1e9 == pytest.approx(1000 * 2048 + 2048 + 105)
    assert "safetensors" in m.provenance


def test_a_broken_safetensors_file_is_named(tmp_path: Path):
    d = model_dir(tmp_path, LLAMA_32_1B)
    (d / "model.safetensors").write_bytes(b"\x05\x00")
    with pytest.raises(ModelConfigError) as info:
        model_from_config_json(d)
    assert info.value.path == str(d / "model.safetensors")


def test_quantized_checkpoints_are_estimated_from_the_shape(tmp_path: Path):
    d = model_dir(tmp_path, {**LLAMA_32_1B, "quantization_config": {"quant_method": "awq"}})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 700_000_000}}))
    assert model_from_config_json(d).params_b == pytest.approx(1.236, abs=0.001)


def test_multimodal_config_is_read_through_text_config(tmp_path: Path):
    # google/gemma-3-4b-it: text_config leaves heads, head_dim and positions to transformers' defaults
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "torch_dtype": "bfloat16",
        "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27},
    }
    m = model_from_config_json(model_dir(tmp_path, config))
    catalogued = get_model("google/gemma-3-4b-it")
    for key in (
        "architecture",
        "layers",
        "hidden_size",
        "attention_heads",
        "kv_heads",
        "head_dim",
        "max_context",
        "sliding_window",
        "sliding_window_pattern",
        "tied_embeddings",
    ):
        assert getattr(m, key) == getattr(catalogued, key), key
    assert m.params_b == pytest.approx(3.88, abs=0.01)  # text model only, no weights here


@pytest.mark.parametrize(
    ("extra", "window"),
    [
        ({"sliding_window": 131072, "use_sliding_window": False}, None),  # Qwen2.5
        ({"sliding_window": 4096}, 4096),  # Mistral-7B v0.1
        ({"sliding_window": 262144}, None),  # Phi-4-mini: longer than the context
        ({"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 8}, 128),
        ({"sliding_window": 128, "layer_types": ["full_attention"] * 16}, None),
    ],
)
def test_sliding_window_only_when_a_layer_is_windowed(tmp_path: Path, extra: dict[str, Any], window: int | None):
    m = model_from_config_json(model_dir(tmp_path, {**LLAMA_32_1B, **extra}))
    assert m.sliding_window == window
    if "layer_types" in extra and window:
        assert m.sliding_window_pattern == 2


def test_mixture_of_experts_counts_every_expert(tmp_path: Path):
    mixtral = {
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    }
    m = model_from_config_json(model_dir(tmp_path, mixtral))
    assert m.num_experts == 8
    assert m.params_b == pytest.approx(46.7, rel=0.01)


@pytest.mark.parametrize(
    ("config", "key", "fragment"),
    [
        ('{"hidden_size": 2048,', "line 1, column 22", "not valid JSON"),
        ("[1, 2]", "", "JSON object"),
        ({k: v for k, v in LLAMA_32_1B.items() if k != "num_hidden_layers"}, "num_hidden_layers", "missing"),
        ({**LLAMA_32_1B, "hidden_size": "2048"}, "hidden_size", "positive integer"),
        ({k: v for k, v in LLAMA_32_1B.items() if k != "vocab_size"}, "vocab_size", "missing"),
        ({"architectures": ["X"], "text_config": {"num_hidden_layers": 2}}, "text_config.hidden_size", "missing"),
        (
            {k: v for k, v in LLAMA_32_1B.items() if k not in ("architectures", "model_type")},
            "architectures",
            "missing",
        ),
    ],
)
def test_a_broken_config_names_the_file_and_key(tmp_path: Path, config: Any, key: str, fragment: str):
    d = model_dir(tmp_path, config)
    with pytest.raises(ModelConfigError) as info:
        model_from_config_json(d)
    err = info.value
    assert err.exit_code == ExitCode.USAGE
    assert err.path == str(d / "config.json")
    assert err.key == key
    assert str(d / "config.json") in err.message
    assert fragment in err.message
    assert err.hint


def test_a_directory_without_config_json(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelConfigError, match=r"no config\.json"):
        get_model(str(tmp_path / "empty"))


def test_an_index_without_total_size_names_the_key(tmp_path: Path):
    d = model_dir(tmp_path, LLAMA_32_1B)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    with pytest.raises(ModelConfigError) as info:
        model_from_config_json(d)
    assert info.value.path == str(d / "model.safetensors.index.json")
    assert info.value.key == "metadata.total_size"


# --- flavors ----------------------------------------------------------------------------------------------------


def test_catalogue_flavor_gp_5_24_96():
    f = get_flavor("gp.5.24.96")
    assert (f.vcpus, f.ram_mib, f.disk_gb, f.ephemeral_gb) == (24, 98304, 240, 128)
    assert f.ram_gib == 96.0
    assert (f.cpu_model, f.cpu_vendor, f.numa_nodes, f.smt_exposed) == ("AMD EPYC 9454", "AuthenticAMD", 1, False)
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_vnni"} <= set(f.cpu_flags)
    assert (f.price_per_hour, f.currency, f.cloud, f.source) == (0.79, "USD", "flex", "catalogue")
    # the write-up's cost table: $ per 1M output tokens = price / (tok/s x 3600) x 1e6
    assert f.price_per_hour is not None
    assert round(f.price_per_hour / (124.81 * 3600) * 1e6, 2) == 1.76  # Qwen3-0.6B
    assert round(f.price_per_hour / (23.83 * 3600) * 1e6, 2) == 9.21  # phi-4


def test_the_catalogue_has_no_invented_prices():
    priced = {name for name, f in flavors().items() if f.price_per_hour is not None}
    assert priced == {"gp.5.24.96"}


def test_user_flavors_add_and_override():
    user = {
        "mine.16.64": {"vcpus": 16, "ram_gb": 64, "cpu_flags": ["avx2"], "price_per_hour": 0.5},
        "gp.5.24.96": {"price_per_hour": 0.6},  # only the price differs: my discount
    }
    result = flavors(user, source="/etc/zenops.yaml")
    mine = result["mine.16.64"]
    assert (mine.vcpus, mine.ram_mib, mine.cpu_flags, mine.price_per_hour) == (16, 65536, ("avx2",), 0.5)
    assert mine.source == "config:/etc/zenops.yaml"
    gp = result["gp.5.24.96"]
    assert gp.price_per_hour == 0.6
    assert (gp.vcpus, gp.ram_mib, gp.cpu_model) == (24, 98304, "AMD EPYC 9454")
    assert gp.source == "config:/etc/zenops.yaml"
    assert flavors()["gp.5.24.96"].price_per_hour == 0.79  # the catalogue itself is untouched


def test_a_new_user_flavor_needs_vcpus_and_ram():
    with pytest.raises(ConfigError) as info:
        flavors({"tiny": {"vcpus": 2}}, source="zenops.yaml")
    assert info.value.key == "flavors.tiny"
    assert info.value.path == "zenops.yaml"
    assert info.value.hint


def test_user_flavors_are_validated_here_too():
    with pytest.raises(ConfigError) as info:
        flavors({"x": {"vcpus": 0, "ram_mib": 1024}})
    assert info.value.key == "flavors.x.vcpus"


def test_get_flavor_case_insensitive_and_unknown():
    assert get_flavor("GP.5.24.96").name == "gp.5.24.96"
    assert get_flavor("mine", {"mine": {"vcpus": 2, "ram_mib": 4096}}).vcpus == 2
    with pytest.raises(UsageError) as info:
        get_flavor("gp.5.24.69")
    assert info.value.hint
    assert "'gp.5.24.96'" in info.value.hint
    assert "flavors:" in info.value.hint


def test_flavors_that_fit_filter_and_sort_cheapest_first():
    user = {
        "big.cheap": {"vcpus": 32, "ram_gb": 128, "cpu_flags": ["avx2", "avx512f"], "price_per_hour": 0.5},
        "big.noavx512": {"vcpus": 32, "ram_gb": 128, "cpu_flags": ["avx2"], "price_per_hour": 0.1},
        "big.unpriced": {"vcpus": 32, "ram_gb": 256, "cpu_flags": ["avx512f"]},
        "small": {"vcpus": 4, "ram_gb": 16, "price_per_hour": 0.01},
    }
    names = [f.name for f in flavors_that_fit(64, user)]
    assert names == ["big.noavx512", "big.cheap", "gp.5.24.96", "big.unpriced"]
    assert [f.name for f in flavors_that_fit(64, user, need_avx512=True)] == ["big.cheap", "gp.5.24.96", "big.unpriced"]
    assert [f.name for f in flavors_that_fit(96)] == ["gp.5.24.96"]
    assert flavors_that_fit(97) == []


# --- the config file's flavors: section --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "fragment", "hint"),
    [
        ("flavors: {f1: {vcpus: -2}}\n", "flavors.f1.vcpus", "positive integer", "vcpus: 24"),
        ("flavors: {f1: {ram_gb: lots}}\n", "flavors.f1.ram_gb", "number above 0", "ram_gb: 96"),
        ("flavors: {f1: {cpu_flags: avx2}}\n", "flavors.f1.cpu_flags", "list", "avx512f"),
        ("flavors: {f1: {smt_exposed: 1}}\n", "flavors.f1.smt_exposed", "true or false", None),
        ("flavors: {f1: {price_per_hour: -1}}\n", "flavors.f1.price_per_hour", "0 or more", None),
        ("flavors: {f1: {currency: dollars}}\n", "flavors.f1.currency", "like USD", None),
        ("flavors: {f1: {vpcus: 4}}\n", "flavors.f1.vpcus", "unknown key", "did you mean 'vcpus'"),
        ("flavors: {f1: {ram_mib: 1024, ram_gb: 1}}\n", "flavors.f1.ram_gb", "not both", None),
        ("flavors: {f1: [vcpus, 4]}\n", "flavors.f1", "mapping", None),
        ("flavors: [f1]\n", "flavors", "mapping", None),
    ],
)
def test_config_flavors_errors_name_file_key_and_fix(tmp_path: Path, text: str, key: str, fragment: str, hint: str):
    path = tmp_path / "zenops.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_file(path)
    err = info.value
    assert err.exit_code == ExitCode.CONFIG
    assert err.path == str(path)
    assert err.key == key
    assert fragment in err.message
    if key.startswith("flavors."):
        assert err.hint
    if hint:
        assert err.hint
        assert hint in err.hint


def test_config_flavors_merge_across_files_and_feed_the_catalogue(tmp_path, monkeypatch, isolated_home):
    user = isolated_home / "config" / "zenops" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("flavors:\n  a: {vcpus: 8, ram_gb: 32}\n  b: {vcpus: 2, ram_mib: 4096}\n")
    (tmp_path / "zenops.yaml").write_text("flavors:\n  b: {vcpus: 4, ram_mib: 8192, price_per_hour: 0.2}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load()
    assert set(cfg.flavors) == {"a", "b"}
    assert cfg.flavors["b"] == {"vcpus": 4, "ram_mib": 8192, "price_per_hour": 0.2}
    specs = flavors(cfg.flavors)
    assert (specs["a"].ram_mib, specs["b"].vcpus, specs["b"].source) == (32768, 4, "config")
    assert "gp.5.24.96" in specs


def test_no_flavors_section_means_an_empty_mapping(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load().flavors == {}


def test_the_example_config_has_valid_flavors(tmp_path: Path):
    path = tmp_path / "zenops.yaml"
    path.write_text(EXAMPLE)
    data = read_file(path)
    example = yaml.safe_load(EXAMPLE)["flavors"]
    assert data["flavors"] == example
    specs = flavors(example, source=str(path))
    assert all(specs[name].vcpus > 0 for name in example)
