"""The CLI keeps its word (issue 24, item 3, and the names of item 2): a config file `config check` calls ok never
makes a command exit 3; one duration grammar for --ttl, budget.ttl and every timeout; a cap on an unpriced campaign
is refused; read-only commands print no Ansible lines unless -v; an unknown --cloud is an error; the root's options
also after the subcommand; OS_CLOUD as the default cloud; one name per concept (--deployment, --dry-run,
--engine-image), old spellings still taken."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click
import pytest
from rich.console import Console

from tests.unit.test_campaign_plan import make_spec
from zenops.campaign import plan as plan_lib
from zenops.campaign import spec as campaign_spec
from zenops.cli.main import cli, hoist_global_options
from zenops.cli.options import DurationType
from zenops.errors import ExitCode, UsageError, ZenopsError
from zenops.progress import RichProgress
from zenops.runner import RunEvent

CLOUDS_YAML = """\
clouds:
  lab:
    auth: {auth_url: "http://127.0.0.1:9/v3", username: u, password: p, project_name: p,
           user_domain_name: Default, project_domain_name: Default}
"""


@pytest.fixture
def clouds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "clouds.yaml"
    path.write_text(CLOUDS_YAML)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(path))
    monkeypatch.delenv("OS_CLOUD", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return path


# --- config check: what it calls ok, every command reads -----------------------------------------------------


def test_config_check_catches_a_misspelt_default_that_would_break_every_command(run, tmp_path, clouds):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults:\n  up:\n    cuont: 3\n")
    r = run(["config", "check", str(bad)])
    assert r.exit_code == ExitCode.CONFIG
    assert "defaults.up.cuont" in r.output
    assert "`zenops up` has no such option" in r.output
    # the same file in effect: every command says the same, with the same exit code
    assert run(["--config", str(bad), "status"]).exit_code == ExitCode.CONFIG


@pytest.mark.parametrize(
    "text",
    [
        "defaults:\n  up:\n    count: 3\n    health_timeout: 15m\n    inventory: hosts.yml\n",  # hosts.yml: not here
        "defaults:\n  rollout:\n    drain-timeout: 10m\n    min_healthy: 30\n",
        "defaults:\n  up:\n    name: demo\n    check: true\n",  # old spellings are still keys
        "defaults:\n  down:\n    deployment: demo\n",
    ],
)
def test_a_file_config_check_calls_ok_never_makes_a_command_exit_3(run, tmp_path, clouds, text):
    path = tmp_path / "good.yaml"
    path.write_text(text)
    r = run(["config", "check", str(path)])
    assert r.exit_code == 0, r.output
    for command in (["status"], ["config", "show"]):
        r = run(["--config", str(path), *command])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("defaults:\n  rollout:\n    drain_timeout: 10x\n", "not a duration"),
        ("defaults:\n  up:\n    count: many\n", "defaults.up.count"),
        ("defaults:\n  up:\n    health_timeout: 5\n", "under 10s"),
    ],
)
def test_config_check_checks_each_default_by_its_option_type(run, tmp_path, clouds, text, said):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    r = run(["config", "check", str(path)])
    assert r.exit_code == ExitCode.CONFIG
    assert said in r.output


def test_config_check_runs_even_when_the_searched_config_is_broken(run, tmp_path, clouds):
    (tmp_path / "zenops.yaml").write_text("defaults:\n  up:\n    cuont: 3\n")  # ./zenops.yaml: searched
    other = tmp_path / "other.yaml"
    other.write_text("keep_runs: 5\n")
    r = run(["config", "check", str(other)])
    assert r.exit_code == 0, r.output
    r = run(["config", "show"])  # show says the broken file's error
    assert r.exit_code == ExitCode.CONFIG
    assert "cuont" in r.output


# --- one duration grammar ------------------------------------------------------------------------------------

GOOD = [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("7200s", 7200), ("7200", 7200), (" 2H ", 7200), ("1d", 86400)]
BAD = ["", "1.5h", "2 hours", "-1h", "h", "1y", "0", "0m", "3651d"]


def _ttl(text: str) -> int:
    """What `up --ttl TEXT` reads (the option's own type, as the command declares it)."""
    param = next(p for p in cli.commands["up"].params if p.name == "ttl")
    return int(param.type.convert(text, param, None))


def _budget_ttl(text: str) -> int:
    """What a campaign file's budget.ttl reads (through load_spec: its check, then its value)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.yaml"
        path.write_text(f"name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\nbudget: {{ttl: {json.dumps(text)}}}\n")
        return campaign_spec.load_spec(path).budget.ttl_s


def _timeout(text: str) -> int:
    return DurationType(1).convert(text, None, None)


@pytest.mark.parametrize("parse", [_ttl, _budget_ttl, _timeout], ids=["--ttl", "budget.ttl", "timeouts"])
def test_one_duration_grammar(parse):
    for text, seconds in GOOD:
        assert parse(text) == seconds, text
    for text in BAD:
        with pytest.raises((ValueError, ZenopsError, click.BadParameter)):
            parse(text)


def test_a_campaign_ttl_may_combine_units(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: s\ncloud: sandbox\nflavors: [f]\nmodels: [m]\nbudget: {ttl: 1h30m}\n")
    assert campaign_spec.load_spec(path).budget.ttl_s == 5400


def test_gate_timeouts_take_durations_on_the_command_line(run, clouds):
    r = run(["rollout", "--deployment", "x", "--drain-timeout", "10x"])
    assert r.exit_code == ExitCode.USAGE
    assert "not a duration" in r.output
    r = run(["up", "--inventory", str(clouds), "--health-timeout", "5s"])  # any existing file: refused before use
    assert r.exit_code == ExitCode.USAGE
    assert "under 10s" in r.output


# --- a cap that means something ------------------------------------------------------------------------------


def test_a_capped_campaign_with_an_unpriced_flavor_is_refused_naming_prices():
    spec = make_spec()
    proj = plan_lib.project(spec, plan_lib.cells(spec), {"f.small": 0.5}.get)  # f.big: no price
    assert proj.unknown_prices == ["f.big"]
    plan_lib.check_budget(proj, None)  # no cap: nothing to refuse
    with pytest.raises(UsageError) as e:
        plan_lib.check_budget(proj, 1000.0)
    assert "f.big" in e.value.message
    assert "prices:" in (e.value.hint or "")


# --- read-only commands: no Ansible lines unless -v ----------------------------------------------------------


def _printed(quiet: bool, verbose: int) -> str:
    console = Console(record=True, force_terminal=False, width=200)
    progress = RichProgress(console, verbose, quiet=quiet)
    for e in (
        RunEvent(kind="play", play="Gather facts"),
        RunEvent(kind="task", task="Read the CPU topology"),
        RunEvent(kind="ok", host="web-1", task="Read the CPU topology"),
        RunEvent(kind="failed", host="web-2", task="Read the CPU topology", message="no lscpu"),
    ):
        progress.event(e)
    return console.export_text()


def test_a_read_only_command_prints_failures_but_no_play_or_task_lines():
    quiet = _printed(quiet=True, verbose=0)
    assert "PLAY" not in quiet
    assert "task " not in quiet
    assert "web-2" in quiet
    assert "no lscpu" in quiet
    loud = _printed(quiet=True, verbose=1)  # -v: all of it
    assert "PLAY Gather facts" in loud
    assert "web-1" in loud
    assert "PLAY Gather facts" in _printed(quiet=False, verbose=0)  # a command that changes hosts: as before


# --- an unknown --cloud --------------------------------------------------------------------------------------


def test_status_of_an_unknown_cloud_is_an_error_naming_the_known_ones(run, clouds):
    r = run(["status", "--cloud", "lba"])
    assert r.exit_code == ExitCode.CLOUD
    assert "no cloud named 'lba'" in r.output
    assert "lab" in r.output
    r = run(["status", "--cloud", "lab"])  # a known cloud with nothing recorded: an empty answer
    assert r.exit_code == 0, r.output
    assert "no deployments" in r.output


def test_status_of_an_unknown_deployment_is_an_error(run, clouds):
    r = run(["status", "--deployment", "nope"])
    assert r.exit_code == ExitCode.UNKNOWN_DEPLOYMENT  # as on every command given a deployment name
    assert "nope" in r.output


# --- OS_CLOUD ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["leaks"], ["up", "--flavor", "gp.5.2.8"]])
def test_os_cloud_is_the_default_cloud(run, clouds, monkeypatch, args):
    monkeypatch.setenv("OS_CLOUD", "not-in-clouds-yaml")
    r = run(args)
    assert r.exit_code == ExitCode.CLOUD, r.output  # it was used: the cloud it names is looked up
    assert "not-in-clouds-yaml" in r.output


def test_os_cloud_does_not_turn_your_own_hosts_into_a_cloud_deployment(run, clouds, monkeypatch):
    monkeypatch.setenv("OS_CLOUD", "lab")
    r = run(["up", "--inventory", str(clouds), "--ttl", "1h"])  # --ttl goes with --cloud: still refused so
    assert r.exit_code == ExitCode.USAGE
    assert "--ttl goes with --cloud" in r.output


# --- the root's options after the subcommand -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "hoisted"),
    [
        (["status", "-v"], ["-v", "status"]),
        (["status", "-vv", "--config", "c.yaml"], ["-vv", "--config", "c.yaml", "status"]),
        (["campaign", "status", "--config=c.yaml"], ["--config=c.yaml", "campaign", "status"]),
        (["--config", "c.yaml", "status"], ["--config", "c.yaml", "status"]),
        # a subcommand's option that takes a value keeps it, even when it looks like -v
        (["up", "--engine-arg", "-v", "-v"], ["-v", "up", "--engine-arg", "-v"]),
        (["bench", "--", "-v"], ["bench", "--", "-v"]),
    ],
)
def test_global_options_are_taken_after_the_subcommand(argv, hoisted):
    ctx = click.Context(cli)
    assert hoist_global_options(cli, ctx, argv) == hoisted


def test_config_after_the_subcommand_is_used(run, tmp_path, clouds):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults:\n  up:\n    cuont: 3\n")
    r = run(["status", "--config", str(bad)])
    assert r.exit_code == ExitCode.CONFIG
    assert "cuont" in r.output


# --- one name per concept ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "shown", "old"),
    [(["up"], "--deployment", "--name"), (["up"], "--dry-run", "--check"), (["down"], "--deployment", "--name"),
     (["facts"], "--engine-image", None), (["status"], "--deployment", None)],
)  # fmt: skip
def test_help_shows_one_name_per_concept(run, command, shown, old):
    r = run([*command, "--help"])
    assert r.exit_code == 0
    assert shown in r.output
    if old:
        assert f"{old} " not in r.output
        assert f"{old}," not in r.output


def test_old_spellings_are_still_taken(run, clouds):
    r = run(["down", "--name", "nope", "--cloud", "lab", "--dry-run"])  # parsed: fails on the cloud, not usage
    assert r.exit_code != ExitCode.USAGE, r.output
    r = run(["up", "--inventory", str(clouds), "--check", "--ttl", "1h"])
    assert "no such option" not in r.output
