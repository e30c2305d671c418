"""`zenops config check` runs the validators the commands run and says every mistake at once, each with its line
(issue 45: one validation); YAML's unquoted on/off where a mode is meant; one duration grammar for bench --timeout,
--ttl and clouds.*.active_timeout."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from zenops import config as config_lib
from zenops import schema
from zenops.cli.main import cli
from zenops.cli.options import to_default_map
from zenops.errors import ConfigError, ExitCode

# every line a mistake is on is marked with its key; the rest are fine
MANY = """\
keep_runs: 0                        # keep_runs
ssh:
  host_key_checking: off            # fine: YAML's off is the mode off
docker:
  source: apt                       # docker.source
flavors:
  mine.16:                          # flavors.mine.16: no ram (plan refuses it)
    vcpus: 16
  other:
    vcpus: many                     # flavors.other.vcpus
    ram_gb: 4
clouds:
  flex:
    active_timeout: 2hours          # clouds.flex.active_timeout
    error_retries: 1
defaults:
  up:
    gateway: on                     # fine: the mode on
    ttl: 2hours                     # defaults.up.ttl
    engine_args: [--max-num-seqs=4] # defaults.up.engine_args: the guard `up` runs
  plan:
    cuont: 3                        # defaults.plan.cuont
"""


def _expected(text: str) -> set[tuple[str, int]]:
    return {
        (line.split("# ")[1].split(":")[0].strip(), n)
        for n, line in enumerate(text.splitlines(), 1)
        if "# " in line and not line.split("# ")[1].startswith("fine")
    }


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_config_check_reports_every_mistake_with_its_line(run, here):
    path = here / "many.yaml"
    path.write_text(MANY)
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == ExitCode.CONFIG, r.output
    result = json.loads(r.output.splitlines()[0])
    assert result["ok"] is False
    found = {(e["key"], e["line"]) for e in result["errors"]}
    assert found == _expected(MANY)
    assert len(found) == 8
    assert [e["line"] for e in result["errors"]] == sorted(e["line"] for e in result["errors"])  # the file's order


def test_config_check_text_names_file_line_key_and_fix(run, here):
    path = here / "many.yaml"
    path.write_text(MANY)
    r = run(["config", "check", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    assert f"{path}:14: clouds.flex.active_timeout: not a duration: '2hours'" in r.output
    assert f"{path}:19: defaults.up.ttl:" in r.output
    assert "90s, 30m, 2h, 1d, 1h30m" in r.output  # the grammar, by examples
    assert f"{path}:7: flavors.mine.16: a flavor needs at least vcpus and ram_mib (or ram_gb)" in r.output
    assert "8 mistakes" in r.output


def test_config_check_json_shape_of_a_good_file(run, here):
    path = here / "good.yaml"
    path.write_text("defaults:\n  up:\n    gateway: on\n    ttl: 1h30m\nclouds:\n  flex:\n    active_timeout: 15m\n")
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {
        "type": "result",
        "command": "config check",
        "file": str(path),
        "ok": True,
        "errors": [],
    }


def test_config_check_json_error_fields(run, here):
    path = here / "bad.yaml"
    path.write_text("docker:\n  log_max_file: 0\n")
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    (error,) = json.loads(r.output.splitlines()[0])["errors"]
    assert error == {
        "path": str(path),
        "key": "docker.log_max_file",
        "line": 2,
        "problem": "must be a positive integer",
        "hint": None,
    }


def test_a_yaml_syntax_error_is_one_finding_with_its_line(run, here):
    path = here / "broken.yaml"
    path.write_text("keep_runs: 3\nssh: [a\n")
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    (error,) = json.loads(r.output.splitlines()[0])["errors"]
    assert error["line"] == 3
    assert "not valid YAML" in error["problem"]


# --- one validator: the command and config check say the same ---------------------------------------------------


def test_plan_and_config_check_refuse_the_same_incomplete_flavor_alike(run, here):
    path = here / "zenops.yaml"
    path.write_text("flavors:\n  mine.16:\n    vcpus: 16\n")
    said = "flavors.mine.16: a flavor needs at least vcpus and ram_mib (or ram_gb)"
    planned = run(["--config", str(path), "plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B"])
    assert planned.exit_code == ExitCode.CONFIG
    assert said in planned.output
    checked = run(["config", "check", "--json", str(path)])
    assert checked.exit_code == ExitCode.CONFIG
    (error,) = json.loads(checked.output.splitlines()[0])["errors"]
    assert f"{error['key']}: {error['problem']}" == said
    assert error["line"] == 2


def test_up_and_config_check_refuse_the_same_engine_arg(run, here):
    inventory = here / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1}\n")
    refused = run(["up", "-i", str(inventory), "--model", "Qwen/Qwen3-4B", "--engine-arg", "--max-num-seqs=4"])
    assert refused.exit_code == ExitCode.USAGE
    path = here / "c.yaml"
    path.write_text("defaults:\n  up:\n    engine_args: [--max-num-seqs=4]\n")
    checked = run(["config", "check", "--json", str(path)])
    (error,) = json.loads(checked.output.splitlines()[0])["errors"]
    assert error["problem"] in refused.output
    assert "zenops sets --max-num-seqs itself" in error["problem"]
    # and every command reading that file stops on it, as config check says
    assert run(["--config", str(path), "status"]).exit_code == ExitCode.CONFIG


def test_config_check_reads_the_tuned_file_a_default_names(run, here):
    missing = here / "gone" / "tuned.yaml"
    broken = here / "tuned.yaml"
    broken.write_text("models: 3\n")
    path = here / "c.yaml"
    path.write_text(f"defaults:\n  up:\n    tuned_file: {missing}\n  plan:\n    tuned: {broken}\n")
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    errors = {e["key"]: e for e in json.loads(r.output.splitlines()[0])["errors"]}
    assert set(errors) == {"defaults.up.tuned_file", "defaults.plan.tuned"}
    assert "does not exist" in errors["defaults.up.tuned_file"]["problem"]
    assert errors["defaults.plan.tuned"]["problem"].startswith("the tuned file does not read")
    assert errors["defaults.plan.tuned"]["line"] == 5


# --- YAML's on/off where a mode is meant -------------------------------------------------------------------------


def _default_map(text: str, tmp: Path) -> dict[str, dict[str, object]]:
    path = tmp / "c.yaml"
    path.write_text(text)
    loaded = config_lib.load(path)
    ctx = click.Context(cli)
    return to_default_map(
        cli,
        ctx,
        {k: dict(v) for k, v in loaded.command_defaults.items()},
        {k: dict(v) for k, v in loaded.command_default_sources.items()},
    )


def test_gateway_on_unquoted_is_the_mode_on(run, here):
    assert _default_map("defaults:\n  up:\n    gateway: on\n", here)["up"]["gateway_mode"] == "on"
    assert _default_map("defaults:\n  up:\n    gateway: off\n", here)["up"]["gateway_mode"] == "off"
    path = here / "c.yaml"
    assert run(["--config", str(path), "status"]).exit_code == 0  # the file every command reads


def test_host_key_checking_off_unquoted_is_the_mode_off(here):
    path = here / "c.yaml"
    path.write_text("ssh:\n  host_key_checking: off\n")
    assert config_lib.load(path).ssh.host_key_checking == "off"


def test_a_yaml_boolean_no_choice_reads_as_names_the_choices(run, here):
    path = here / "c.yaml"
    path.write_text("ssh:\n  host_key_checking: on\ndefaults:\n  up:\n    network_mode: yes\n")
    r = run(["config", "check", "--json", str(path)])
    errors = {e["key"]: e for e in json.loads(r.output.splitlines()[0])["errors"]}
    assert "YAML reads an unquoted on/yes/true as the boolean true" in errors["ssh.host_key_checking"]["problem"]
    assert errors["defaults.up.network_mode"]["hint"] == "use one of them, e.g. network_mode: provider"


def test_where_a_boolean_is_ambiguous_the_fix_is_to_quote_it():
    # a plain choice takes no boolean: the word is one of the choices, so the fix quotes it
    found = schema.choice_problem(True, ["auto", "on", "off"], key="defaults.up.gateway", yaml_bools=False)
    assert found is not None
    assert found.hint == 'quote it: gateway: "on"'
    # two choices read as true: which one was meant cannot be told
    found = schema.choice_problem(True, ["on", "yes", "auto"], key="mode")
    assert found is not None
    assert found.hint == 'quote it: mode: "on"'
    assert schema.yaml_word(True, ["auto", "on", "off"]) == "on"
    assert schema.yaml_word(False, ["accept-new", "strict", "off"]) == "off"
    assert schema.yaml_word("on", ["on"]) is None


# --- one duration grammar ----------------------------------------------------------------------------------------


def _bench_timeout() -> click.Parameter:
    bench = cli.get_command(click.Context(cli), "bench")
    assert bench is not None
    return next(p for p in bench.params if p.name == "timeout")


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("600", 600), ("2h", 7200)])
def test_bench_timeout_takes_the_duration_grammar(text, seconds):
    param = _bench_timeout()
    assert param.type.convert(text, param, None) == seconds


@pytest.mark.parametrize(("text", "said"), [("2hours", "not a duration: '2hours'"), ("5s", "under 10s")])
def test_bench_timeout_refuses_what_is_no_duration(run, text, said):
    r = run(["bench", "--timeout", text])
    assert r.exit_code == ExitCode.USAGE
    assert said in r.output


def test_active_timeout_takes_the_duration_grammar(here):
    path = here / "c.yaml"
    path.write_text("clouds:\n  flex:\n    active_timeout: 15m\n  lab:\n    active_timeout: 600\n")
    loaded = config_lib.load(path)
    assert loaded.cloud_profile("flex").active_timeout == 900
    assert loaded.cloud_profile("lab").active_timeout == 600
    path.write_text("clouds:\n  flex:\n    active_timeout: 2hours\n")
    with pytest.raises(ConfigError) as info:
        config_lib.load(path)
    assert "clouds.flex.active_timeout: not a duration: '2hours'" in info.value.message
    assert "1h30m" in (info.value.hint or "")


def test_a_ttl_default_that_is_no_duration_stops_every_command(run, here):
    path = here / "c.yaml"
    path.write_text("defaults:\n  up:\n    ttl: 2hours\n")
    r = run(["--config", str(path), "status"])
    assert r.exit_code == ExitCode.CONFIG
    assert "defaults.up.ttl" in r.output
    assert "not a duration: '2hours'" in r.output


# --- the schema gathers; commands still stop at the first --------------------------------------------------------

DOC = schema.Schema(
    schema.Section(
        {
            "a": schema.Field(schema.positive_int),
            "b": schema.Section(
                {"x": schema.Field(schema.positive_int), "y": schema.Field(schema.positive_int)},
                rules=(lambda s: schema.Issue("x", "x above y") if s["x"] > s["y"] else None,),
            ),
            "c": schema.ListOf(schema.Field(schema.non_empty_str)),
        }
    ),
    reference="the docs",
)


def test_collect_gathers_every_mistake_and_validate_raises_the_first():
    data = {"a": 0, "b": {"x": "no", "y": 1}, "c": ["ok", ""], "d": 1}
    found = DOC.collect(data, "f.yaml")
    assert [e.key for e in found] == ["a", "b.x", "c[1]", "d"]  # b's rule skipped: b.x is already wrong
    with pytest.raises(ConfigError) as info:
        DOC.validate(data, "f.yaml")
    assert info.value.key == "a"
    assert [e.key for e in DOC.collect({"b": {"x": 3, "y": 1}}, "f.yaml")] == ["b.x"]  # the rule, once keys pass


def test_key_lines_follow_dotted_names_and_lists():
    lines = schema.key_lines("flavors:\n  a.b:\n    vcpus: 1\nmodels:\n  - x\n  - y\n")
    assert lines["flavors.a.b.vcpus"] == 3
    assert lines["models[1]"] == 6
    assert schema.line_of(lines, "flavors.a.b.ram_gb") == 2  # a missing key: where its section is
    assert schema.line_of(lines, "nowhere") is None


def test_an_unknown_defaults_key_lists_the_keys_a_file_writes(run, here):
    """The valid keys are what a config file writes (`gateway`, the option), not click's parameter names
    (`gateway_mode`), which a file may write too but no user would guess."""
    path = here / "bad.yaml"
    path.write_text("defaults:\n  up:\n    nosuchkey: 1\n")
    r = run(["config", "check", "--json", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    (error,) = json.loads(r.output.splitlines()[0])["errors"]
    valid = error["hint"].removeprefix("valid keys: ").split(", ")
    assert {"gateway", "os_image", "ttl", "tuned", "engine_arg"} <= set(valid), valid
    assert "gateway_mode" not in valid
