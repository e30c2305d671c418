"""One table of serving and engine options (zenops.request_options): the click options of `plan`, `up` and `rollout`,
the request each builds, the rollout's changeable fields, the campaign file's keys and the role variables all come
from it, so an option added there reaches every one of them; --dtype and --tensor-parallel reach `up` and `rollout`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import pytest

from zenops.campaign import spec as campaign_spec
from zenops.cli.main import cli
from zenops.request_options import BY_FIELD, CHANGEABLE, OPTIONS, campaign_keys, for_command, role_vars
from zenops.rollout.run import CHANGEABLE as ROLLOUT_CHANGEABLE
from zenops.serve import ServeRequest, plan_options


def _params(command: str) -> dict[str, click.Parameter]:
    cmd = cli.get_command(click.Context(cli), command)
    assert cmd is not None
    return {p.name: p for p in cmd.params if p.name}


@pytest.mark.parametrize("command", ["plan", "up", "rollout"])
def test_each_command_takes_exactly_the_tables_options_for_it(command):
    params = _params(command)
    table_fields = {o.field for o in OPTIONS}
    assert {name for name in params if name in table_fields} == {o.field for o in for_command(command)}
    for o in for_command(command):
        p = params[o.field]
        assert o.flag.split("/")[0] in p.opts, (command, o.field, p.opts)
        assert p.help == o.help  # one help text, wherever it is taken


def test_dtype_and_tensor_parallel_are_on_plan_up_and_rollout():
    for command in ("plan", "up", "rollout"):
        assert {"dtype", "tensor_parallel"} <= set(_params(command))


def test_every_option_a_command_takes_is_a_serve_request_field():
    fields = {f.name for f in dataclasses.fields(ServeRequest)}
    assert {o.field for o in OPTIONS if o.commands} <= fields
    # a campaign-only key (llamacpp: llama.cpp serves the cell) is no ServeRequest field: `up` cannot switch engines
    assert {o.field for o in OPTIONS if not o.commands} == {"llamacpp"}
    assert "llamacpp" not in fields


def test_llamacpp_is_a_campaign_variant_key_only_with_the_gguf_formats():
    from zenops import llamacpp  # noqa: PLC0415

    o = BY_FIELD["llamacpp"]
    assert (o.kind, o.default, o.campaign) == ("choice", None, ("variant",))
    assert o.choices == tuple(llamacpp.FORMATS) == ("bf16", "q8_0", "q4_k_m")
    assert not any(o.takes(c) for c in ("plan", "up", "rollout"))  # zenops does not switch engines by itself
    assert "llamacpp" not in CHANGEABLE
    assert "peer measurement" in o.help
    for command in ("plan", "up", "rollout"):
        assert "llamacpp" not in _params(command)
    assert "llamacpp" in campaign_spec.VARIANT_OPTIONS
    assert "llamacpp" not in {x.field for x in campaign_keys("engine")}


def test_a_campaign_variant_takes_a_gguf_format_and_refuses_another(tmp_path: Path):
    from zenops.errors import ConfigError  # noqa: PLC0415

    path = tmp_path / "c.yaml"
    path.write_text("name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\nvariants: {ll: {llamacpp: q8_0}}\n")
    assert dict(campaign_spec.load_spec(path).variants[0].options) == {"llamacpp": "q8_0"}
    path.write_text("name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\nvariants: {ll: {llamacpp: q5_k}}\n")
    with pytest.raises(ConfigError) as e:
        campaign_spec.load_spec(path)
    assert "bf16, q8_0, q4_k_m" in e.value.message


def test_the_rollout_changes_what_the_table_calls_changeable():
    assert ROLLOUT_CHANGEABLE == CHANGEABLE
    assert "tensor_parallel" in CHANGEABLE
    assert "dtype" in CHANGEABLE
    assert "api_key_file" not in CHANGEABLE  # a rollout does not rotate keys


def test_a_campaign_file_takes_the_tables_keys(tmp_path: Path):
    assert set(campaign_spec.VARIANT_OPTIONS) == {o.field for o in campaign_keys("variant")}
    engine = campaign_spec.campaign_schema(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\n"
        "variants: {tp2: {tensor_parallel: 2, dtype: float32}}\nengine: {health_timeout: 20m}\n"
    )
    spec = campaign_spec.load_spec(path)
    assert dict(spec.variants[0].options) == {"tensor_parallel": 2, "dtype": "float32"}
    assert spec.engine == {"health_timeout": 1200}
    assert engine is not None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("variants: {a: {dtype: int4}}", "bfloat16, float16, float32"),
        ("variants: {a: {max_model_len: 8}}", "at least 16"),
    ],
)
def test_a_campaign_value_is_checked_as_its_flag_is(tmp_path: Path, text: str, said: str):
    from zenops.errors import ConfigError  # noqa: PLC0415

    path = tmp_path / "c.yaml"
    path.write_text(f"name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\n{text}\n")
    with pytest.raises(ConfigError) as e:
        campaign_spec.load_spec(path)
    assert said in e.value.message


def test_role_vars_pass_through_what_is_set():
    req = ServeRequest(model="m", served_model_name=None, engine_args=("--enforce-eager",), health_timeout=60)
    out = role_vars(vars(req))
    assert out["vllm_server_extra_args"] == ["--enforce-eager"]
    assert out["vllm_server_health_timeout"] == 60
    assert out["vllm_server_shutdown_timeout"] == 30
    assert "vllm_server_served_model_name" not in out  # unset: the role's default
    assert role_vars({"served_model_name": "chat"}) == {"vllm_server_served_model_name": "chat"}
    assert {o.role_var for o in OPTIONS if o.role_var} == set(
        role_vars(vars(ServeRequest(model="m", served_model_name="x")))
    )


def test_the_plan_gets_dtype_and_tensor_parallel_from_the_request():
    opts = plan_options(ServeRequest(model="m", dtype="float32", tensor_parallel=2), "0.32.0")
    assert (opts.dtype, opts.tensor_parallel) == ("float32", 2)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`up`'s request, recorded where serving would start (nothing runs)."""
    seen: list[Any] = []

    def serve_inventory(_ctx: Any, _inventory: Path, req: ServeRequest, **_kw: Any) -> None:
        seen.append(req)
        raise SystemExit(0)

    monkeypatch.setattr("zenops.serve.serve_inventory", serve_inventory)
    monkeypatch.setattr("zenops.lock.deployment_lock", lambda *a, **k: __import__("contextlib").nullcontext())
    return seen


def test_up_hands_tensor_parallel_and_dtype_to_the_serve_request(run, served, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    h1:\n")
    r = run(["up", "-i", str(inventory), "-m", "Qwen/Qwen3-0.6B", "--tensor-parallel", "2", "--dtype", "float32"])
    assert r.exit_code == 0, r.output
    [req] = served
    assert (req.tensor_parallel, req.dtype) == (2, "float32")
    assert req.image_source == BY_FIELD["image_source"].default  # a default from the table


def test_a_config_default_uses_the_old_key_too(run, served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("zenops.yaml").write_text(
        "defaults:\n  up:\n    vllm_version: 0.14.1\n    image_ref: r/x:1\n    image_source: prebuilt\n"
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    h1:\n")
    r = run(["up", "-i", str(inventory), "-m", "Qwen/Qwen3-0.6B"])
    assert r.exit_code == 0, r.output
    assert (served[0].vllm, served[0].prebuilt_ref) == ("0.14.1", "r/x:1")
    assert "defaults.up.vllm_version" in r.output  # taken, with a warning naming the key to write instead
    assert "use defaults.up.vllm" in r.output
