"""`--tuned FILE` through the console entry point, without any Ansible run: a campaign's best configuration per model
(zenops.campaign.tuned) supplies the options of `zenops plan` (--facts), `zenops up` (its playbook runs faked) and
`zenops rollout --dry-run` (a serving record written into the test's own state dir); flags win; the plans' reasons
name the campaign; a model the file does not have is refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from zenops.errors import ExitCode

from .test_rollout_cli import FACTS, HOSTS, Fleet, result_of

CAMPAIGN = "qwen-sweep-202611211200"
FIGURES = {
    "concurrency": 4,
    "output_tok_s": 123.4,
    "median_ttft_ms": 410.2,
    "median_tpot_ms": 31.9,
    "failed": 0,
    "cost_per_million_output_tokens": 1.78,
    "price_per_hour": 0.79,
    "roofline_pct": 41.2,
    "repeats": 2,
    "spread": 0.031,
}
QWEN_OPTIONS = {  # the engine pinned, as a campaign's tuned file has it (zenops.campaign.run.pinned_engine)
    "image_source": "build",
    "vllm": "0.11.0",
    "zentorch": "5.1.0",
    "engine_args": ["--enforce-eager"],
    "platform": "cpu",
    "max_num_seqs": 7,
    "max_model_len": 4096,
}


def write_tuned(path: Path, models: dict[str, dict[str, Any]]) -> Path:
    """A tuned file in the format zenops.campaign.tuned documents (`zenops campaign report --write-tuned` writes it)."""
    doc = {
        "zenops_tuned": 1,
        "campaign": CAMPAIGN,
        "max_tpot_ms": 50,
        "api_price": None,
        "models": {
            model: {"flavor": "gp.5.24.96", "variant": "cpu-7", "options": options, "figures": FIGURES}
            for model, options in models.items()
        },
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    return write_tuned(tmp_path / "tuned.yaml", {"Qwen/Qwen3-4B": QWEN_OPTIONS})


def last_json(output: str) -> dict[str, Any]:
    return json.loads(output.strip().splitlines()[-1])


def notes(output: str) -> str:
    return " ".join(
        json.loads(line)["message"]
        for line in output.splitlines()
        if line.startswith("{") and json.loads(line).get("type") == "note"
    )


def plan(run, *args: str):
    return run(["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", *args])


# --- help -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "up", "rollout"])
def test_help_teaches_tuned(run, command):
    r = run([command, "--help"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "--tuned FILE" in text
    assert "zenops campaign report ID --write-tuned FILE" in text


# --- zenops plan ----------------------------------------------------------------------------------------------------


def test_plan_takes_the_tuned_options_and_names_the_campaign(run, tuned):
    r = plan(run, "--tuned", str(tuned), "--json")
    assert r.exit_code == 0, r.output
    data = last_json(r.output)
    assert (data["platform"], data["max_num_seqs"], data["max_model_len"]) == ("cpu", 7, 4096)
    first = data["reasons"][0]
    assert first["topic"] == "tuned"
    assert first["text"] == (
        f"tuned by campaign {CAMPAIGN} (variant cpu-7 on gp.5.24.96: $1.78 per 1M output tokens, 123.4 tok/s, "
        "median TPOT 31.9 ms at concurrency 4)"
    )
    assert data["tuned"]["campaign"] == CAMPAIGN
    # what `zenops plan` cannot use is named, not silently dropped
    said = notes(r.output)
    assert "ignored (zenops plan does not take them): engine_args" in said
    assert "image_source=build" in said  # `plan` takes the route now: it plans the engine `up` would deploy
    assert "max_num_seqs=7" in said


def test_the_tuned_file_pins_the_engine_pair_the_cells_ran(run, tmp_path):
    """A campaign's state (and so its tuned file) pins the pair and the route its cells ran, as resolved when the
    file named none, and `plan --tuned` plans for that engine, not for the table's default."""
    from zenops import compat  # noqa: PLC0415
    from zenops.campaign.planned import pinned_engine  # noqa: PLC0415

    ran = compat.engine_of({"vllm": "0.11.0"})
    assert ran.combo != compat.table().default  # else this test could not tell the two apart
    engine = pinned_engine({}, ran)
    assert (engine["vllm"], engine["zentorch"], engine["image_source"]) == ("0.11.0", "5.1.0", "build")
    assert pinned_engine({"vllm": "0.14.1"}, ran)["vllm"] == "0.14.1"  # as the file named
    default = pinned_engine({}, compat.engine_of({}))
    assert (default["vllm"], default["image_source"]) == (compat.table().default.vllm, "pip")  # the route, said
    path = write_tuned(tmp_path / "t.yaml", {"Qwen/Qwen3-4B": {**engine, "platform": "cpu"}})
    r = run(["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--tuned", str(path), "--json"])
    assert r.exit_code == 0, r.output
    result = last_json(r.output)
    assert result["vllm_version"] == "0.11.0"
    assert (result["engine"]["pair"], result["engine"]["image_source"]) == (ran.combo.id, "build")
    assert result["engine"]["verified"] is False


def test_plan_text_output_shows_the_tuned_reason(run, tuned):
    r = plan(run, "--tuned", str(tuned))
    assert r.exit_code == 0, r.output
    assert f"tuned: tuned by campaign {CAMPAIGN}" in " ".join(r.output.split())
    assert "max-num-seqs 7" in r.output


def test_a_flag_given_wins_over_the_tuned_file(run, tuned):
    r = plan(run, "--tuned", str(tuned), "--max-num-seqs", "3", "--platform", "zen", "--json")
    assert r.exit_code == 0, r.output
    data = last_json(r.output)
    assert (data["platform"], data["max_num_seqs"], data["max_model_len"]) == ("zen", 3, 4096)
    assert "your flags win over platform, max_num_seqs" in notes(r.output)
    assert data["reasons"][0]["topic"] == "tuned"


def test_the_tuned_file_wins_over_config_defaults(run, tuned, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zenops.yaml").write_text("defaults: {plan: {max_num_seqs: 3}}\n")
    assert last_json(plan(run, "--json").output)["max_num_seqs"] == 3
    r = plan(run, "--tuned", str(tuned), "--json")
    assert r.exit_code == 0, r.output
    assert last_json(r.output)["max_num_seqs"] == 7


def test_a_catalogue_id_matches_in_any_case(run, tuned):
    r = run(["plan", "--facts", str(FACTS), "--model", "qwen/qwen3-4b", "--tuned", str(tuned), "--json"])
    assert r.exit_code == 0, r.output
    assert last_json(r.output)["max_num_seqs"] == 7


def test_a_model_the_file_does_not_have_is_refused_with_exit_2(run, tuned):
    r = run(["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-8B", "--tuned", str(tuned)])
    assert r.exit_code == ExitCode.USAGE == 2, r.output
    text = " ".join(r.output.split())
    assert "no tuned configuration for Qwen/Qwen3-8B" in text
    assert "the file has Qwen/Qwen3-4B" in text
    assert "leave out --tuned" in text


def test_a_local_model_directory_is_matched_as_a_resolved_path(run, tmp_path, monkeypatch):
    from zenops import tinymodel  # noqa: PLC0415

    tinymodel.generate(tmp_path / "models" / "tiny-a", seed=0)
    path = write_tuned(tmp_path / "tuned.yaml", {str((tmp_path / "models" / "tiny-a").resolve()): {"max_num_seqs": 6}})
    monkeypatch.chdir(tmp_path / "models")
    r = run(["plan", "--facts", str(FACTS), "--model", "./tiny-a", "--tuned", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert last_json(r.output)["max_num_seqs"] == 6

    tinymodel.generate(tmp_path / "models" / "tiny-b", seed=1)
    r = run(["plan", "--facts", str(FACTS), "--model", "./tiny-b", "--tuned", str(path)])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert str((tmp_path / "models" / "tiny-b").resolve()) in r.output


def test_a_file_that_is_not_a_tuned_file_is_a_config_error(run, tmp_path):
    bad = tmp_path / "bad.yaml"
    entry = "{Qwen/Qwen3-4B: {variant: v, options: {platform: gpu}}}"
    bad.write_text(f"zenops_tuned: 1\ncampaign: {CAMPAIGN}\nmodels: {entry}\n")
    r = plan(run, "--tuned", str(bad))
    assert r.exit_code == ExitCode.CONFIG, r.output
    assert "models.Qwen/Qwen3-4B.options.platform" in r.output


# --- zenops up (its playbook runs faked) ----------------------------------------------------------------------------


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`zenops up --model` without Ansible: the hosts' up reports h1's facts, the serve run its one endpoint."""
    from zenops import serve  # noqa: PLC0415
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.facts import FACT_NAME  # noqa: PLC0415
    from zenops.hosts import UpResult  # noqa: PLC0415
    from zenops.runner import HostStats, RunResult  # noqa: PLC0415

    def result(playbook: str, host_facts: dict[str, Any]) -> RunResult:
        return RunResult("r1", playbook, "successful", 0, Path("runs/r1"), "now", 0.1, {"h1": HostStats()}, host_facts)

    specs: list[Any] = []

    def up_inventory(_ctx: Any, _inventory: Path, **_kw: Any) -> UpResult:
        return UpResult(result("up", {"h1": {FACT_NAME: json.loads(FACTS.read_text())}}), [])

    def run_playbook(_self: Any, spec: Any) -> RunResult:
        specs.append(spec)
        endpoint = {"instance": 0, "port": 8000, "url": "http://h1:8000/v1", "platform": "cpu"}
        return result(spec.playbook, {"h1": {"zenops_endpoints": [endpoint], "zenops_image": {"ref": "img"}}})

    monkeypatch.setattr(serve, "up_inventory", up_inventory)
    monkeypatch.setattr(RunContext, "run", run_playbook)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    return specs


def test_up_serves_the_tuned_options_and_its_plans_carry_the_reason(run, tuned, tmp_path, fake_runs):
    from zenops.config import load  # noqa: PLC0415
    from zenops.deployment.record import load_serving_record  # noqa: PLC0415

    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1\n")
    r = run(["up", "-i", str(inventory), "--model", "Qwen/Qwen3-4B", "--tuned", str(tuned), "--max-model-len", "2048"])
    assert r.exit_code == 0, r.output
    (spec,) = fake_runs
    assert spec.extravars["vllm_server_extra_args"] == ["--enforce-eager"]
    record = load_serving_record(load(), inventory)
    assert record is not None
    req = record.request
    assert (req["platform"], req["max_num_seqs"], req["max_model_len"]) == ("cpu", 7, 2048)  # the flag won
    assert req["engine_args"] == ["--enforce-eager"]
    plan = record.plans["h1"]
    assert (plan["platform"], plan["max_num_seqs"], plan["max_model_len"]) == ("cpu", 7, 2048)
    assert plan["reasons"][0] == {"topic": "tuned", "text": tuned_reason()}
    assert spec.extravars["zenops_plans"]["h1"]["reasons"][0]["topic"] == "tuned"
    assert "your flags win over max_model_len" in " ".join(r.output.split())


def tuned_reason() -> str:
    return (
        f"tuned by campaign {CAMPAIGN} (variant cpu-7 on gp.5.24.96: $1.78 per 1M output tokens, 123.4 tok/s, "
        "median TPOT 31.9 ms at concurrency 4)"
    )


def test_up_tuned_without_model_names_the_files_models(run, tuned, tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1\n")
    r = run(["up", "-i", str(inventory), "--tuned", str(tuned)])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "goes with --model" in r.output
    assert "Qwen/Qwen3-4B" in r.output


def test_up_refuses_a_model_the_file_does_not_have_before_anything_runs(run, tuned, tmp_path, fake_runs):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1\n")
    r = run(["up", "-i", str(inventory), "--model", "Qwen/Qwen3-0.6B", "--tuned", str(tuned)])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "no tuned configuration for Qwen/Qwen3-0.6B" in r.output
    assert fake_runs == []


# --- zenops rollout --dry-run -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from zenops import tinymodel  # noqa: PLC0415

    root = tmp_path_factory.mktemp("models")
    tinymodel.generate(root / "tiny-a", seed=0)
    tinymodel.generate(root / "tiny-b", seed=1)
    return root


@pytest.fixture
def fleet(isolated_home, tmp_path, monkeypatch, models) -> Fleet:
    from zenops.config import load  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    fleet = Fleet(load(), tmp_path / "fleet.ini", models)
    fleet.serve(HOSTS)
    return fleet


def test_rollout_dry_run_rolls_out_the_tuned_options_of_the_deployments_model(run, fleet, tmp_path):
    tiny_a = str((fleet.models / "tiny-a").resolve())
    path = write_tuned(tmp_path / "tuned.yaml", {tiny_a: {"max_num_seqs": 8, "engine_args": ["--enforce-eager"]}})
    r = run(["rollout", "-i", str(fleet.inventory), "--tuned", str(path), "--dry-run"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "max_num_seqs: None -> 8" in text
    assert "engine_args: [] -> ['--enforce-eager']" in text
    assert f"tuned by campaign {CAMPAIGN}" in text
    assert "dry run: nothing changed" in text

    r = run(["rollout", "-i", str(fleet.inventory), "--tuned", str(path), "--max-num-seqs", "6", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    data = result_of(r.output)
    assert data["dry_run"] is True
    assert data["to_request"]["max_num_seqs"] == 6  # the flag won
    assert data["to_request"]["engine_args"] == ["--enforce-eager"]
    assert data["tuned"]["campaign"] == CAMPAIGN


def test_rollout_tuned_with_model_takes_that_models_entry(run, fleet, tmp_path):
    tiny_b = str((fleet.models / "tiny-b").resolve())
    path = write_tuned(tmp_path / "tuned.yaml", {tiny_b: {"max_num_seqs": 5}})
    r = run(["rollout", "-i", str(fleet.inventory), "--model", tiny_b, "--tuned", str(path), "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    data = result_of(r.output)
    assert (data["to_request"]["model"], data["to_request"]["max_num_seqs"]) == (tiny_b, 5)


def test_rollout_tuned_without_the_deployments_model_is_refused(run, fleet, tmp_path):
    path = write_tuned(tmp_path / "tuned.yaml", {str((fleet.models / "tiny-b").resolve()): {"max_num_seqs": 5}})
    r = run(["rollout", "-i", str(fleet.inventory), "--tuned", str(path), "--dry-run"])
    assert r.exit_code == ExitCode.USAGE, r.output
    text = " ".join(r.output.split())
    assert "no tuned configuration for" in text
    assert "tiny-a" in text
    assert "tiny-b" in text
