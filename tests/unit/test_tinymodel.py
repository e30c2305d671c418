"""zenops.tinymodel: safetensors layout, determinism, tokenizer, config, chat template, idempotence and the CLI."""

from __future__ import annotations

import itertools
import json
import struct
import sys
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from zenops import tinymodel
from zenops.catalog import model_from_config_json
from zenops.errors import ExitCode, UsageError

np = pytest.importorskip("numpy")
spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tinymodel.TinyModel:
    """One model for the read-only tests (generation takes about half a second)."""
    return tinymodel.generate(tmp_path_factory.mktemp("tm") / "tiny-llama", seed=0)


def read_safetensors(path: Path) -> tuple[dict[str, dict[str, object]], bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return header, raw[8 + n :]


def test_the_directory_holds_a_complete_model(model):
    names = {p.name for p in model.path.iterdir()}
    assert names == {*tinymodel.FILES, tinymodel.STAMP}
    assert model.created
    assert model.parameters == tinymodel.parameter_count(2000) == 807_552
    assert model.size_bytes == sum(p.stat().st_size for p in model.path.iterdir())
    assert not [p for p in model.path.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_safetensors_header_names_shapes_dtypes_and_offsets_cover_the_data(model):
    header, data = read_safetensors(model.path / "model.safetensors")
    assert header.pop("__metadata__") == {"format": "pt"}
    expected = tinymodel.weight_shapes(2000)
    assert set(header) == set(expected)
    assert header["model.embed_tokens.weight"]["shape"] == [2000, 128]
    assert header["lm_head.weight"]["shape"] == [2000, 128]
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [64, 128]  # 2 KV heads x head_dim 32
    assert header["model.layers.0.mlp.down_proj.weight"]["shape"] == [128, 256]  # [out, in]
    assert "model.layers.2.input_layernorm.weight" not in header
    spans = []
    for name, info in header.items():
        assert info["dtype"] == "BF16"
        assert info["shape"] == list(expected[name])
        start, end = info["data_offsets"]
        assert end - start == 2 * int(np.prod(info["shape"]))
        spans.append((start, end))
    spans.sort()
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous, no overlap
    assert spans[-1][1] == len(data)  # ... and cover the data exactly
    raw = (model.path / "model.safetensors").read_bytes()
    assert (8 + struct.unpack("<Q", raw[:8])[0]) % 8 == 0  # data starts aligned


def tensor(path: Path, name: str) -> np.ndarray:
    header, data = read_safetensors(path)
    start, end = header[name]["data_offsets"]
    bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(header[name]["shape"])


def test_weights_are_small_random_values_and_norms_are_ones(model):
    st = model.path / "model.safetensors"
    q = tensor(st, "model.layers.0.self_attn.q_proj.weight")
    assert 0.015 < float(q.std()) < 0.025
    assert abs(float(q.mean())) < 0.002
    assert np.all(tensor(st, "model.norm.weight") == 1.0)
    assert np.all(tensor(st, "model.layers.1.post_attention_layernorm.weight") == 1.0)


def test_bf16_rounds_to_nearest_even():
    one = 1.0
    ulp = 2.0**-7  # bf16 spacing at 1.0
    values = np.array([one, one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2**-20, -2.5, np.inf], dtype=np.float32)
    bits = tinymodel.bf16_bits(values).astype(np.uint32) << 16
    back = bits.view(np.float32)
    assert back.tolist() == [one, one, one + 2 * ulp, one + ulp, -2.5, np.inf]
    assert np.isnan(
        (tinymodel.bf16_bits(np.array([np.nan], dtype=np.float32)).astype(np.uint32) << 16).view(np.float32)
    )


def test_same_seed_gives_identical_files_and_another_seed_other_weights(model, tmp_path):
    again = tinymodel.generate(tmp_path / "again", seed=0)
    for name in [*tinymodel.FILES, tinymodel.STAMP]:
        assert (again.path / name).read_bytes() == (model.path / name).read_bytes(), name
    other = tinymodel.generate(tmp_path / "other", seed=1)
    assert (other.path / "model.safetensors").read_bytes() != (model.path / "model.safetensors").read_bytes()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not np.array_equal(
        tensor(other.path / "model.safetensors", name), tensor(model.path / "model.safetensors", name)
    )
    assert (other.path / "tokenizer.model").read_bytes() == (model.path / "tokenizer.model").read_bytes()
    assert (
        read_safetensors(other.path / "model.safetensors")[0] == read_safetensors(model.path / "model.safetensors")[0]
    )


def test_tokenizer_round_trips_and_has_the_llama_special_ids(model):
    sp = spm.SentencePieceProcessor(model_file=str(model.path / "tokenizer.model"))
    assert sp.get_piece_size() == 2000
    assert (sp.id_to_piece(0), sp.id_to_piece(1), sp.id_to_piece(2)) == ("<unk>", "<s>", "</s>")
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert sp.id_to_piece(3) == "<0x00>"  # byte fallback pieces follow
    for text in ("The quick brown fox returns a value.", "def f(x):\n\treturn x + 1  # ünïcödé 🐍 12345"):
        ids = sp.encode(text)
        assert 0 not in ids  # byte fallback: nothing is unknown
        assert sp.decode(ids) == text
    assert len(sp.encode("return self.value")) <= 6  # it learned Python: common words are single pieces


def test_config_is_consistent_with_the_tokenizer_and_itself(model):
    config = json.loads((model.path / "config.json").read_text())
    sp = spm.SentencePieceProcessor(model_file=str(model.path / "tokenizer.model"))
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["vocab_size"] == sp.get_piece_size()
    assert config["head_dim"] * config["num_attention_heads"] == config["hidden_size"]
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert (config["bos_token_id"], config["eos_token_id"]) == (sp.bos_id(), sp.eos_id())
    assert config["torch_dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is False
    assert config["max_position_embeddings"] == 2048
    generation = json.loads((model.path / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    tok = json.loads((model.path / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "LlamaTokenizer"
    assert (tok["bos_token"], tok["eos_token"], tok["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert tok["model_max_length"] == 2048
    special = json.loads((model.path / "special_tokens_map.json").read_text())
    assert special == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def render(model: tinymodel.TinyModel, messages: list[dict[str, object]], add_generation_prompt: bool) -> str:
    tok = json.loads((model.path / "tokenizer_config.json").read_text())
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders templates
    return env.from_string(tok["chat_template"]).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>"
    )


def test_chat_template_accepts_string_and_list_content(model):
    as_string = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    as_parts = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "image_url"}, {"type": "text", "text": "there"}],
        },
    ]
    text = render(model, as_string, add_generation_prompt=True)
    assert text == "<s><|system|>\nBe brief.</s>\n<|user|>\nHello there</s>\n<|assistant|>\n"
    parts = render(model, as_parts, add_generation_prompt=True)
    assert parts == text.replace("Hello there", "Hello\nthere")
    assert not render(model, as_string, add_generation_prompt=False).endswith("<|assistant|>\n")


def test_rerun_with_the_same_settings_rewrites_nothing(tmp_path):
    first = tinymodel.generate(tmp_path / "m", seed=5)
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()}
    again = tinymodel.generate(tmp_path / "m", seed=5)
    assert not again.created
    assert again == tinymodel.TinyModel(first.path, first.parameters, first.size_bytes, created=False)
    assert {p.name: p.stat().st_mtime_ns for p in again.path.iterdir()} == mtimes
    forced = tinymodel.generate(tmp_path / "m", seed=5, force=True)
    assert forced.created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp or old directory left


def test_other_settings_or_foreign_files_need_force(tmp_path):
    path = tinymodel.generate(tmp_path / "m", seed=0).path
    with pytest.raises(UsageError, match="other settings") as info:
        tinymodel.generate(path, seed=1)
    assert "--force" in (info.value.hint or "")
    assert tinymodel.generate(path, seed=1, force=True).created
    assert json.loads((path / tinymodel.STAMP).read_text())["seed"] == 1
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a tiny model"):
        tinymodel.generate(foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tinymodel.generate(empty).created


def test_a_damaged_model_is_rebuilt(tmp_path):
    path = tinymodel.generate(tmp_path / "m").path
    good = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(good[:100])
    assert tinymodel.generate(path).created
    assert (path / "model.safetensors").read_bytes() == good


def test_missing_numpy_or_sentencepiece_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import fails
    with pytest.raises(UsageError) as info:
        tinymodel.generate(tmp_path / "m")
    assert "pip install 'zenops[tiny]'" in (info.value.hint or "")
    assert not (tmp_path / "m").exists()


def test_bad_arguments_are_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        tinymodel.generate(tmp_path / "m", vocab_size=100)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not a directory"):
        tinymodel.generate(tmp_path / "file")


def test_cli_prints_path_parameters_and_size(run, tmp_path):
    out = tmp_path / "tiny"
    r = run(["tiny-model", str(out), "--seed", "2"])
    assert r.exit_code == 0, r.output
    assert str(out) in r.output
    assert "807,552" in r.output
    assert "1.6 MB" in r.output
    r = run(["tiny-model", str(out), "--seed", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output.strip().splitlines()[-1])
    assert data == {
        "type": "result",
        "command": "tiny-model",
        "seed": 2,
        "params_asked": None,
        "quant": None,
        "path": str(out),
        "parameters": 807_552,
        "size_bytes": data["size_bytes"],
        "created": False,
    }
    r = run(["tiny-model", str(out)])
    assert r.exit_code == ExitCode.USAGE
    assert "--force" in r.output
    assert run(["tiny-model", str(out), "--force"]).exit_code == 0


# --- --params N: a model big enough to be bandwidth bound ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [("300M", 300_000_000), ("0.3B", 300_000_000), ("0.3b", 300_000_000), ("2e8", 200_000_000),
     ("150000000", 150_000_000), ("1.5G", 1_500_000_000), ("5000K", 5_000_000)],
)  # fmt: skip
def test_parse_params_reads_suffixes_and_plain_numbers(text, count):
    assert tinymodel.parse_params(text) == count


@pytest.mark.parametrize("text", ["", "M", "lots", "3M", "4B", "-200M", "2e10"])
def test_parse_params_refuses_what_is_not_a_count_in_range(text):
    with pytest.raises(UsageError) as e:
        tinymodel.parse_params(text)
    assert "--params" in e.value.message
    assert "e.g." in (e.value.hint or "")


@pytest.mark.parametrize("params", [5_000_000, 20_000_000, 100_000_000, 200_000_000, 300_000_000, 500_000_000,
                                    1_000_000_000, 3_000_000_000])  # fmt: skip
def test_shape_for_lands_within_3_percent_and_is_a_valid_llama(params):
    shape = tinymodel.shape_for(params, 2000)
    count = tinymodel.parameter_count(2000, shape)
    assert abs(count - params) / params <= 0.03, (shape, count)
    assert shape.heads % shape.kv_heads == 0
    assert shape.hidden == shape.heads * shape.head_dim
    assert 2 <= shape.layers <= 64


def test_a_sized_model_config_counts_what_its_safetensors_hold(tmp_path):
    """The config of `--params 20M`, read by the planner's own reader (config.json + safetensors headers), holds the
    parameters the generator counts, within 3% of what was asked."""
    model = tinymodel.generate(tmp_path / "m20", params=20_000_000)
    config = json.loads((model.path / "config.json").read_text())
    shape = tinymodel.Shape(
        config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
        config["num_key_value_heads"], config["intermediate_size"],
    )  # fmt: skip
    assert shape == tinymodel.shape_for(20_000_000, 2000)
    assert config["head_dim"] * config["num_attention_heads"] == config["hidden_size"]
    header, data = read_safetensors(model.path / "model.safetensors")
    header.pop("__metadata__")
    stored = sum(int(np.prod(info["shape"])) for info in header.values())
    assert stored == model.parameters == tinymodel.parameter_count(2000, shape)
    assert len(data) == 2 * stored
    assert abs(model.parameters - 20_000_000) / 20_000_000 <= 0.03
    spec = model_from_config_json(model.path)
    assert spec.params_b * 1e9 == pytest.approx(model.parameters)
    # sized models are made the same way: deterministic, and a second call leaves it alone
    again = tinymodel.generate(tmp_path / "m20", params=20_000_000)
    assert not again.created


def test_the_default_model_is_unchanged_by_the_sizing(model):
    assert tinymodel.settings(0, 2000) == tinymodel.settings(0, 2000, tinymodel.DEFAULT_SHAPE)
    assert json.loads((model.path / "config.json").read_text())["hidden_size"] == 128


def test_a_directory_of_another_size_is_not_replaced_without_force(tmp_path):
    tinymodel.generate(tmp_path / "m", params=5_000_000)
    with pytest.raises(UsageError, match="other settings"):
        tinymodel.generate(tmp_path / "m")


def test_cli_params_sizes_the_model_and_refuses_a_bad_count(run, tmp_path):
    r = run(["tiny-model", str(tmp_path / "m"), "--params", "0.006B", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output.strip().splitlines()[-1])
    assert data["params_asked"] == 6_000_000
    assert abs(data["parameters"] - 6_000_000) / 6_000_000 <= 0.03
    r = run(["tiny-model", str(tmp_path / "n"), "--params", "huge"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--params 'huge' is not a parameter count" in r.output
