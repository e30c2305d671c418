"""The CLI through click's CliRunner, via zenops.cli.main.main so exit codes are the real ones."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from zenops import __version__
from zenops.cli.main import cli
from zenops.errors import ExitCode, UsageError


def test_version(run):
    r = run(["--version"])
    assert r.exit_code == 0
    assert __version__ in r.output


def test_help_lists_commands_and_up_documents_the_serving_flags(run):
    r = run(["--help"])
    assert r.exit_code == 0
    for command in ("up", "config", "devhost", "paths"):
        assert command in r.output
    r = run(["up", "--help"])
    assert r.exit_code == 0
    for flag in ("--inventory", "--cloud", "--flavor", "--model", "--image-source", "--vllm", "--dry-run", "--json"):
        assert flag in r.output
    assert "not implemented" not in r.output


@pytest.fixture
def inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 192.0.2.1\n")
    return inv


@pytest.mark.parametrize(
    ("extra", "code", "fragment"),
    [
        (["--model", "no/such-model"], ExitCode.USAGE, "unknown model"),
        (["--model", "Qwen/Qwen3-4B", "--vllm", "0.18.0"], ExitCode.INCOMPATIBLE, "known not to work"),
        (["--model", "Qwen/Qwen3-4B", "--vllm", "0.9.9"], ExitCode.INCOMPATIBLE, "not in zenops's compatibility"),
        (["--model", "Qwen/Qwen3-4B", "--image-source", "pip", "--vllm", "0.25.1"], ExitCode.USAGE, "no package-index"),
        (["--model", "Qwen/Qwen3-4B", "--image-source", "prebuilt", "--vllm", "0.14.1"], ExitCode.USAGE, "--image-ref"),
    ],
)
def test_up_model_refusals_happen_before_anything_runs(run, isolated_home, inventory, extra, code, fragment):
    r = run(["up", "-i", str(inventory), *extra])
    assert r.exit_code == code, r.output
    assert fragment in r.output
    assert not (isolated_home / "state" / "zenops" / "runs").exists()  # nothing ran


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["up", "--cloud", "nosuchcloud", "--flavor", "gp.5.24.96"], ExitCode.CLOUD, "clouds.yaml"),
        (["up", "--flavor", "gp.5.24.96"], ExitCode.USAGE, "--cloud and --flavor go together"),
        (["up", "--cloud", "x", "--flavor", "f", "--deployment", "Bad_Name"], ExitCode.USAGE, "not allowed"),
        (["down", "--deployment", "a", "--campaign", "b"], ExitCode.USAGE, "exactly one of"),
        (["down", "--deployment", "ghost"], ExitCode.UNKNOWN_DEPLOYMENT, "no deployment named 'ghost' is recorded"),
    ],
)
def test_cloud_commands_fail_before_touching_anything(run, isolated_home, monkeypatch, tmp_path, args, code, fragment):
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "clouds.yaml"))
    monkeypatch.delenv("OS_CLOUD", raising=False)  # an operator's OS_CLOUD would name the cloud `up` refuses without
    (tmp_path / "clouds.yaml").write_text("clouds: {}\n")
    r = run(args)
    assert r.exit_code == code, r.output
    assert fragment in r.output.replace("\n", " ")
    assert not (isolated_home / "state" / "zenops" / "deployments").exists()


def test_up_without_inventory_names_the_fix(run):
    r = run(["up"])
    assert r.exit_code == ExitCode.USAGE
    assert "--inventory" in r.output


def test_up_with_missing_inventory_file_is_a_usage_error(run, tmp_path):
    r = run(["up", "-i", str(tmp_path / "nope.yml")])
    assert r.exit_code == ExitCode.USAGE
    assert "does not exist" in r.output


def test_json_errors_are_machine_readable(run, inventory):
    r = run(["--json", "up", "-i", str(inventory), "--model", "Qwen/Qwen3-4B", "--vllm", "0.18.0"])
    assert r.exit_code == ExitCode.INCOMPATIBLE
    line = next(line for line in r.output.splitlines() if line.startswith("{"))
    data = json.loads(line)
    assert data["type"] == "error"
    assert data["exit_code"] == ExitCode.INCOMPATIBLE
    assert data["error"] == "IncompatiblePairError"


def test_invalid_config_stops_every_command(run, tmp_path, monkeypatch):
    (tmp_path / "zenops.yaml").write_text("docker:\n  source: snap\n")
    monkeypatch.chdir(tmp_path)
    r = run(["config", "show"])
    assert r.exit_code == ExitCode.CONFIG
    assert "zenops.yaml: docker.source: must be one of distro, upstream" in r.output


@pytest.mark.parametrize(
    ("defaults", "fragment"),
    [
        ("defaults: {up: {inventroy: x}}", "defaults.up.inventroy: `zenops up` has no such option"),
        ("defaults: {upp: {inventory: x}}", "defaults.upp: no such command"),
        ("defaults: {up: {check: perhaps}}", "defaults.up.check"),
    ],
)
def test_command_defaults_are_checked_against_the_command(run, tmp_path, monkeypatch, defaults, fragment):
    (tmp_path / "zenops.yaml").write_text(defaults + "\n")
    monkeypatch.chdir(tmp_path)
    r = run(["config", "show"])
    assert r.exit_code == ExitCode.CONFIG
    assert fragment in r.output.replace("\n", " ")


def test_config_defaults_feed_flags_and_flags_win(run, tmp_path, monkeypatch):
    inv = tmp_path / "from-config.yml"
    inv.write_text("all: {}\n")
    (tmp_path / "zenops.yaml").write_text(f"defaults:\n  up:\n    inventory: {inv}\n")
    monkeypatch.chdir(tmp_path)
    # the config's inventory is used: an empty inventory is refused after the run, naming that file
    r = run(["up"])
    assert r.exit_code == ExitCode.USAGE
    assert "from-config.yml has no hosts" in r.output.replace("\n", "")
    # a flag wins over the config value
    other = tmp_path / "from-flag.yml"
    other.write_text("all: {}\n")
    r = run(["up", "-i", str(other)])
    assert r.exit_code == ExitCode.USAGE
    assert "from-flag.yml has no hosts" in r.output.replace("\n", "")


def test_config_show_json_reports_sources(run, tmp_path, monkeypatch):
    (tmp_path / "zenops.yaml").write_text("docker: {users: [ops]}\n")
    monkeypatch.chdir(tmp_path)
    r = run(["config", "show", "--json"])
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["config"]["docker"]["users"] == ["ops"]
    assert data["config"]["sources"] == [str(tmp_path / "zenops.yaml")]


def test_config_check_and_example(run, tmp_path):
    example = run(["config", "example"])
    assert example.exit_code == 0
    path = tmp_path / "example.yaml"
    path.write_text(example.output)
    r = run(["config", "check", str(path)])
    assert r.exit_code == 0, r.output  # the example we print must itself be valid
    bad = tmp_path / "bad.yaml"
    bad.write_text("keep_runs: 0\n")
    r = run(["config", "check", str(bad)])
    assert r.exit_code == ExitCode.CONFIG


def test_paths_points_at_this_checkout(run):
    r = run(["paths", "--json"])
    assert r.exit_code == 0
    data = json.loads(r.output)
    root = Path(data["collection_root"])
    assert (root / "galaxy.yml").is_file()
    link = Path(data["collections_path"]) / "ansible_collections" / "zenops" / "inference"
    assert link.resolve() == root


def test_group_is_a_click_group():
    assert set(cli.list_commands(click.Context(cli))) >= {"up", "config", "devhost", "paths"}


# click's own CliRunner, on the group itself: parsing, help and usage errors that click handles before zenops runs.
def test_clirunner_up_help_and_bad_choice():
    runner = CliRunner()
    r = runner.invoke(cli, ["up", "--help"])
    assert r.exit_code == 0
    assert "--inventory" in r.output
    r = runner.invoke(cli, ["devhost", "up", "--count", "0"])
    assert r.exit_code == 2
    assert "0 is not in the range" in r.output
    r = runner.invoke(cli, ["no-such-command"])
    assert r.exit_code == 2
    assert "No such command" in r.output


def test_clirunner_zenops_errors_carry_their_exit_code(inventory):
    r = CliRunner().invoke(cli, ["up", "-i", str(inventory), "--model", "no/such-model"])
    assert isinstance(r.exception, UsageError)
    assert r.exception.exit_code == ExitCode.USAGE
