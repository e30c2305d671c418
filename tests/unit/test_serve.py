"""zenops.serve: the inputs of `zenops up --model` (pair, pip settings, secrets, plans), decided before any run."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from zenops import compat, serve
from zenops.catalog import get_model
from zenops.config import Config
from zenops.deployment.record import api_key_path
from zenops.errors import UsageError
from zenops.facts import load_facts_file
from zenops.planner import PlanOptions, PlanRefusedError
from zenops.runner import check_no_secrets
from zenops.serve import (
    ServeRequest,
    check_secret_file,
    ensure_api_key,
    hf_token_file,
    make_plans,
    pip_settings,
    resolve_engine,
    resolve_model,
)

FACTS = Path(__file__).parents[1] / "fixtures" / "facts"


def _warns() -> tuple[list[str], object]:
    out: list[str] = []
    return out, out.append


def test_no_engine_options_deploy_the_tested_pair_by_its_tested_route():
    """Issue 45: the default is what zenops's CI runs: a tested pair, by the route it is tested by (pip)."""
    warnings, warn = _warns()
    engine = resolve_engine(ServeRequest(model="m"), warn)
    assert engine.combo == compat.table().default
    assert engine.combo.status == "tested"
    assert engine.image_source == "pip" == compat.own_source(engine.combo)
    assert engine.verified
    assert warnings == []  # nothing to label


def test_pip_source_alone_is_the_default_pair():
    engine = resolve_engine(ServeRequest(model="m", image_source="pip"), lambda _t: None)
    assert engine.combo == compat.table().default
    assert engine.combo.pip


def test_a_source_release_without_image_source_is_built():
    engine = resolve_engine(ServeRequest(model="m", vllm="0.25.1"), lambda _t: None)
    assert (engine.combo.id, engine.image_source) == ("vllm-0.25.1-zentorch-2.11.0.3", "build")


@pytest.mark.parametrize(
    ("req", "fragment"),
    [
        (ServeRequest(model="m", image_source="pip", vllm="0.25.1"), "no package-index route"),
        (ServeRequest(model="m", image_source="build", vllm="0.32.0"), "use --image-source pip"),
        (ServeRequest(model="m", image_source="prebuilt", vllm="0.14.1"), "--image-ref"),
        (ServeRequest(model="m", image_source="docker-hub"), "use one of"),
        # the default pair is a package-index build: another route needs a pair it can make, named in the hint
        (ServeRequest(model="m", image_source="build"), "--vllm: vllm-0.11.0-zentorch-5.1.0"),
        (ServeRequest(model="m", image_source="prebuilt"), "--vllm: vllm-0.23.0-zentorch-2.11.0.2"),
    ],
)
def test_impossible_source_and_pair_combinations_are_refused(req, fragment):
    with pytest.raises(UsageError) as e:
        resolve_engine(req, lambda _t: None)
    assert fragment in (e.value.message + (e.value.hint or ""))


def test_prebuilt_with_an_explicit_ref_is_accepted():
    engine = resolve_engine(
        ServeRequest(model="m", image_source="prebuilt", vllm="0.14.1", prebuilt_ref="x/y:z"), lambda _t: None
    )
    assert engine.combo.vllm == "0.14.1"
    assert engine.prebuilt_ref == "x/y:z"


@pytest.mark.parametrize(
    ("req", "why"),
    [
        (ServeRequest(model="m", image_source="build", vllm="0.25.1"), "only renders and lints"),
        (ServeRequest(model="m", image_source="prebuilt", prebuilt_ref="x/y:z"), "tested by --image-source pip only"),
    ],
)
def test_an_engine_the_tests_do_not_run_is_warned_about(req, why):
    """A supported pair, or the tested pair by another route: labelled not verified, saying what was."""
    warnings, warn = _warns()
    engine = resolve_engine(req, warn)
    assert not engine.verified
    assert len(warnings) == 1
    assert "not verified by zenops's tests" in warnings[0]
    assert why in warnings[0]


def test_forced_unsupported_pair_warns():
    warnings, warn = _warns()
    engine = resolve_engine(ServeRequest(model="m", vllm="0.18.0", force_unsupported=True), warn)
    assert engine.combo.status == "broken"
    assert not engine.verified
    assert any("UNSUPPORTED" in w for w in warnings)


def test_pip_settings_take_find_links_and_ca_bundle_from_the_environment(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{wheels} /does/not/exist")
    monkeypatch.setenv("PIP_CERT", str(ca))
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/local https://pypi.example/simple")
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    out = pip_settings()
    assert out["vllm_image_pip_find_links"] == [str(wheels)]  # missing folders are dropped
    assert out["vllm_image_pip_ca_bundle"] == str(ca)
    # a file: index on this machine means nothing inside an image build
    assert out["vllm_image_pip_extra_index_urls"] == ["https://pypi.example/simple"]
    assert out["vllm_image_pip_index_url"] == "https://mirror.example/simple"


@pytest.mark.parametrize("var", ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"])
def test_pip_settings_refuse_an_index_with_credentials(monkeypatch, var):
    """The pip route writes the index into the image's build: a login in the URL would stay in the image, on every
    host and in the controller's image cache."""
    monkeypatch.setenv(var, "https://builder:s3cr3t-t0ken@pypi.corp.example/simple")
    with pytest.raises(UsageError) as info:
        pip_settings()
    assert "s3cr3t-t0ken" not in info.value.message + str(info.value.hint)
    assert "credentials" in info.value.message
    assert "--image-source build" in str(info.value.hint)


def test_api_key_is_generated_once_per_inventory_with_mode_0600(tmp_path):
    config = Config(state_dir=tmp_path / "state")
    inv_a, inv_b = tmp_path / "a.yml", tmp_path / "b.yml"
    inv_a.write_text("all: {}\n")
    inv_b.write_text("all: {}\n")
    key_a = ensure_api_key(config, inv_a, None)
    assert key_a == api_key_path(config, inv_a).resolve()
    assert stat.S_IMODE(key_a.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_a.parent.stat().st_mode) == 0o700
    first = key_a.read_text()
    assert len(first) > 30
    assert ensure_api_key(config, inv_a, None).read_text() == first  # stable across runs
    assert ensure_api_key(config, inv_b, None).read_text() != first  # one key per inventory


def test_secret_files_readable_by_others_are_refused(tmp_path):
    f = tmp_path / "key"
    f.write_text("s3cret")
    f.chmod(0o644)
    with pytest.raises(UsageError, match="readable by others"):
        check_secret_file(f, "--api-key-file")
    f.chmod(0o600)
    assert check_secret_file(f, "--api-key-file") == f.resolve()
    with pytest.raises(UsageError, match="does not exist"):
        check_secret_file(tmp_path / "nope", "--hf-token-file")


def test_hf_token_from_the_environment_lives_in_a_0600_file_for_the_run_only(monkeypatch):
    token = "hf_" + "x" * 30
    monkeypatch.setenv("HF_TOKEN", token)
    with hf_token_file(None) as path:
        assert path is not None
        assert path.read_text() == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not path.exists()
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with hf_token_file(None) as none:
        assert none is None


def test_local_model_directory_is_resolved_with_its_spec(tmp_path):
    d = tmp_path / "tiny"
    d.mkdir()
    (d / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, '
        '"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, '
        '"vocab_size": 2000, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}'
    )
    spec, local = resolve_model(str(d))
    assert local == d.resolve()
    assert spec.layers == 2
    assert spec.kv_heads == 2
    spec, local = resolve_model("Qwen/Qwen3-4B")
    assert local is None
    assert spec.name == "Qwen/Qwen3-4B"


def test_plans_name_the_host_a_refusal_is_about():
    facts = load_facts_file(FACTS / "gp-5-24-96.json")
    plans = make_plans({"vm-1": facts}, get_model("Qwen/Qwen3-4B"), PlanOptions(vllm_version="0.32.0"), Config())
    assert plans["vm-1"].platform == "zen"
    assert "--kv-cache-memory-bytes" in plans["vm-1"].instances[0].args
    with pytest.raises(PlanRefusedError) as e:
        make_plans({"vm-1": facts}, get_model("meta-llama/Llama-3.3-70B-Instruct"), PlanOptions(), Config())
    assert e.value.message.startswith("vm-1: ")
    assert e.value.hint


def test_plans_can_travel_as_extravars():
    """Plans go to Ansible as extravars: nothing in them may look like a secret to the runner's check."""
    facts = load_facts_file(FACTS / "epyc-9755-2s.json")
    plans = make_plans({"h": facts}, get_model("Qwen/Qwen3-4B"), PlanOptions(vllm_version="0.32.0"), Config())
    check_no_secrets({"zenops_plans": {h: p.to_dict() for h, p in plans.items()}})


def test_engine_args_round_trip_through_the_record_as_a_list():
    req = serve.ServeRequest(model="Qwen/Qwen3-0.6B", engine_args=("--enforce-eager", "--seed", "3"))
    data = serve.request_to_dict(req, hf_token_given=False)
    assert data["engine_args"] == ["--enforce-eager", "--seed", "3"]
    assert json.loads(json.dumps(data)) == data
    assert serve.request_from_dict(data).engine_args == ("--enforce-eager", "--seed", "3")
    assert serve.request_from_dict({"model": "m"}).engine_args == ()  # a record from before the option


def test_check_engine_args_accepts_what_zenops_does_not_set():
    plans = {"h": {"instances": [{"args": ["--dtype", "bfloat16", "--max-num-seqs", "5"]}]}}
    serve.check_engine_args(["--enforce-eager", "--seed", "3", "--enable-prefix-caching"], plans)
    with pytest.raises(UsageError, match="zenops sets --dtype itself"):
        serve.check_engine_args(["--dtype=float32"], plans)
    with pytest.raises(UsageError, match="zenops sets --served-model-name itself") as e:
        serve.check_engine_args(["--served-model-name", "x"], {})
    assert e.value.hint == "use --served-model-name"
