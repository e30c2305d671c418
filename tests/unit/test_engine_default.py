"""Issue 45, "the default is the tested route": `plan` shows the engine `up` deploys (the vLLM/zentorch pair and the
image route, both resolved by zenops.compat.engine_of), the default is the pair zenops's CI runs by the route it runs
it by, and anything else is labelled not verified by zenops's tests. `up`'s playbooks run faked (test_tuned_cli's
fake_runs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.test_tuned_cli import FACTS, fake_runs  # noqa: F401  (a fixture)
from zenops import compat, serve

MODEL = "Qwen/Qwen3-4B"


def last_json(output: str) -> dict[str, Any]:
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture
def no_pip_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pip route reads this machine's pip configuration (a subprocess): not what these tests are about."""
    monkeypatch.setattr(serve, "pip_settings", lambda: {})


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--image-source", "pip"],
        ["--vllm", "0.32.0", "--zentorch", "2.13.0.1"],
        ["--vllm", "0.14.1"],
        ["--image-source", "build", "--vllm", "0.25.1"],
        ["--image-source", "prebuilt", "--vllm", "0.25.1"],
        ["--image-source", "prebuilt", "--image-ref", "registry.example/vllm-zen:1"],
    ],
)
def test_plan_shows_the_engine_up_deploys(run, tmp_path, fake_runs, no_pip_config, flags):  # noqa: F811
    """The same flags: `plan --json`'s engine is the engine `up` hands its playbook and records (pair, route, image
    ref, what was verified), and the plan is for that pair's vLLM."""
    from zenops.config import load  # noqa: PLC0415
    from zenops.deployment.record import load_serving_record  # noqa: PLC0415

    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1\n")
    r = run(["up", "-i", str(inventory), "--model", MODEL, *flags, "--json"])
    assert r.exit_code == 0, r.output
    up_engine = last_json(r.output)["engine"]
    (spec,) = fake_runs
    assert spec.extravars["vllm_image_source"] == up_engine["image_source"]
    assert spec.extravars["vllm_image_combo"]["id"] == up_engine["pair"]
    if up_engine["image_source"] == "prebuilt" and "--image-ref" in flags:
        assert spec.extravars["vllm_image_prebuilt_ref"] == up_engine["prebuilt_ref"]
    record = load_serving_record(load(), inventory)
    assert record is not None
    assert record.request["image_source"] == up_engine["image_source"]  # a rollout keeps the route deployed

    r = run(["plan", "--facts", str(FACTS), "--model", MODEL, *flags, "--json"])
    assert r.exit_code == 0, r.output
    planned = last_json(r.output)
    assert planned["engine"] == up_engine
    assert planned["vllm_version"] == record.plans["h1"]["vllm_version"] == up_engine["vllm"]
    assert planned["zentorch"] == (planned["platform"] == "zen")


def test_the_default_engine_is_the_tested_pair_by_pip_and_says_so(run):
    r = run(["plan", "--facts", str(FACTS), "--model", MODEL, "--json"])
    assert r.exit_code == 0, r.output
    engine = last_json(r.output)["engine"]
    default = compat.table().default
    assert (engine["pair"], engine["image_source"], engine["status"]) == (default.id, "pip", "tested")
    assert engine["verified"] is True
    assert engine["verification"].startswith("tested: zenops's landing CI runs this pair")
    assert '"type": "warning"' not in r.output
    r = run(["plan", "--facts", str(FACTS), "--model", MODEL])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert f"engine {default.id} by --image-source pip (tested:" in text
    assert "not verified" not in text


def test_plan_of_a_source_build_is_labelled_not_verified(run):
    """`plan --image-source build --vllm 0.25.1`: planned, and labelled as an engine zenops's tests do not run."""
    args = ["plan", "--facts", str(FACTS), "--model", MODEL, "--image-source", "build", "--vllm", "0.25.1"]
    r = run(args)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "engine vllm-0.25.1-zentorch-2.11.0.3 by --image-source build (not verified by zenops's tests:" in text
    assert "only renders and lints its image build" in text
    r = run([*args, "--json"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.output.strip().splitlines()]
    engine = lines[-1]["engine"]
    assert (engine["status"], engine["verified"]) == ("supported", False)
    assert any(e.get("type") == "warning" and "not verified by zenops's tests" in e["message"] for e in lines[:-1])


def test_the_tested_pair_by_another_route_is_not_verified_either(run):
    args = ["plan", "--facts", str(FACTS), "--model", MODEL, "--image-source", "prebuilt", "--image-ref", "r/x:1"]
    r = run([*args, "--json"])
    assert r.exit_code == 0, r.output
    engine = last_json(r.output)["engine"]
    assert (engine["pair"], engine["status"], engine["verified"]) == (compat.table().default.id, "tested", False)
    assert "tested by --image-source pip only" in engine["verification"]


def test_plan_refuses_what_up_refuses(run):
    """A route that cannot make the default pair, and a broken pair: the same refusals as `up` (exit 2 and 11)."""
    r = run(["plan", "--facts", str(FACTS), "--model", MODEL, "--image-source", "build"])
    assert r.exit_code == 2, r.output
    assert "package-index build, not a vLLM source release" in r.output
    r = run(["plan", "--facts", str(FACTS), "--model", MODEL, "--vllm", "0.18.0"])
    assert r.exit_code == 11, r.output
    r = run(["plan", "--facts", str(FACTS), "--model", MODEL, "--vllm", "0.18.0", "--force-unsupported", "--json"])
    assert r.exit_code == 0, r.output
    assert last_json(r.output)["engine"]["verified"] is False


def test_a_quantized_model_plans_without_vllm(run):
    """The default pair is the one whose quantized kernels zenops read: no --vllm 0.32.0 needed any more."""
    r = run(["plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B-AWQ", "--json"])
    assert r.exit_code == 0, r.output
    result = last_json(r.output)
    assert result["weights"] == "awq-int4"
    assert result["engine"]["verified"] is True


def test_plan_help_offers_the_engine_options_up_has(run):
    r = run(["plan", "--help"])
    assert r.exit_code == 0
    for flag in ("--image-source", "--zentorch", "--image-ref", "--force-unsupported"):
        assert flag in r.output
    text = " ".join(r.output.split())
    assert "the route zenops's CI runs end to end" in text


def test_a_rollout_of_a_deployment_of_the_earlier_default_keeps_its_pair():
    """A serving record from before the default became the tested pair (`up` without --vllm: vLLM 0.25.1 built from
    source, request vllm None): its pair is pinned from the record, so a rollout of another setting does not
    switch the engine to today's default."""
    from zenops.rollout.run import old_request  # noqa: PLC0415

    earlier = {"id": "vllm-0.25.1-zentorch-2.11.0.3", "vllm": "0.25.1", "zentorch": "2.11.0.3"}
    old = old_request({"model": MODEL, "image_source": "build", "vllm": None, "zentorch": None}, earlier)
    assert (old["vllm"], old["zentorch"], old["image_source"]) == ("0.25.1", "2.11.0.3", "build")
    assert compat.engine_of(old).combo.id == earlier["id"]
    now = {"id": compat.table().default.id, "vllm": "0.32.0", "zentorch": "2.13.0.1"}
    same = old_request({"model": MODEL, "image_source": "pip", "vllm": None}, now)
    assert same["vllm"] is None  # today's records are left as they are
