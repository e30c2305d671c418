"""Issue 45: one grammar, one code, one name; and what nothing can mean is refused before anything runs.

Through the console entry point (zenops.cli.main.main), so the exit codes are the real ones; stderr apart from stdout
where it matters (deprecation warnings go to stderr, --json output stays parseable)."""

from __future__ import annotations

import json
from enum import IntEnum
from pathlib import Path

import click
import pytest

from zenops.cli.main import cli, exit_codes_help, main
from zenops.cli.options import OldSpellingOption
from zenops.errors import ExitCode

FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "facts" / "gp-5-24-96.json"


@pytest.fixture
def call(capsys, monkeypatch, isolated_home):
    """``call(args) -> (exit code, stdout, stderr)``, each line unwrapped (rich wraps at the terminal width)."""
    monkeypatch.setenv("COLUMNS", "300")

    def _call(args: list[str]) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as info:
            main(args)
        out, err = capsys.readouterr()
        code = info.value.code
        return (code if isinstance(code, int) else 1), out, " ".join(err.split())

    return _call


@pytest.fixture
def inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 192.0.2.1\n")
    return inv


# --- the exit-code table ------------------------------------------------------------------------------------------


def test_help_lists_every_exit_code_with_its_meaning(call):
    code, out, _ = call(["--help"])
    assert code == 0
    text = " ".join(out.split())
    assert "Exit codes" in text
    for c in ExitCode:
        assert f"{int(c)} {' '.join(c.meaning.split())}" in text, c.name


def test_the_table_is_made_from_the_codes_it_is_given():
    class More(IntEnum):  # as ExitCode with one code more
        meaning: str

        def __new__(cls, value: int, meaning: str) -> More:
            member = int.__new__(cls, value)
            member._value_ = value
            member.meaning = meaning
            return member

        USAGE = 2, "bad flags"
        NEW = 77, "a condition added later"

    text = exit_codes_help(More)  # type: ignore[arg-type]
    assert "   77  a condition added later" in text
    assert "    2  bad flags" in text
    assert text.index("bad flags") < text.index("added later")  # by code


def test_exit_codes_are_distinct_and_the_errors_use_them():
    from zenops.errors import UnknownDeploymentError  # noqa: PLC0415

    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    assert UnknownDeploymentError("x").exit_code == ExitCode.UNKNOWN_DEPLOYMENT == 19


# --- an unknown deployment: one code on every command, by name or --deployment -------------------------------------

COMMANDS = [["status"], ["down", "--yes"], ["bench"], ["logs"], ["top"], ["ssh"], ["rollout", "--max-num-seqs", "3"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("form", ["positional", "flag"])
def test_an_unknown_deployment_exits_19_on_every_command(call, command, form):
    name = ["ghost"] if form == "positional" else ["--deployment", "ghost"]
    code, _, err = call([command[0], *name, *command[1:]])
    assert code == ExitCode.UNKNOWN_DEPLOYMENT, err
    assert "no deployment named 'ghost' is recorded here" in err
    assert "`zenops status` lists the deployments" in err


@pytest.mark.parametrize("command", [*COMMANDS[:5], ["ssh", "h1"], COMMANDS[6]], ids=lambda c: c[0])
def test_a_positional_name_and_another_deployment_flag_are_refused(call, command):
    # (`zenops ssh --deployment other NAME`: NAME is the host; `ssh ghost h1 --deployment other` names two)
    code, _, err = call([command[0], "ghost", "--deployment", "other", *command[1:]])
    assert code == ExitCode.USAGE, err
    assert "deployment 'ghost' and --deployment other: name one deployment" in err


def test_the_positional_name_of_a_recorded_deployment_is_the_flags(call, isolated_home, tmp_path):
    from zenops.cloud import ledger  # noqa: PLC0415
    from zenops.config import load  # noqa: PLC0415

    inv = tmp_path / "demo.yml"
    inv.write_text("all:\n  hosts:\n    demo-1:\n      ansible_host: 192.0.2.9\n      ansible_user: debian\n")
    dep = ledger.Deployment(name="demo", cloud="lab", flavor="gp.5.24.96", image="debian-12", count=1,
                            network_mode="floating", price_per_hour=0.79, inventory=str(inv))  # fmt: skip
    ledger.save(load(None).state_dir, dep)
    by_name = call(["ssh", "demo", "--print-command"])
    by_flag = call(["ssh", "--deployment", "demo", "--print-command"])
    assert by_name[0] == 0, by_name
    assert by_name == by_flag
    assert "192.0.2.9" in by_name[1]
    # a deployment and a host by name; with --deployment the one name is the host
    assert call(["ssh", "demo", "demo-1", "--print-command"]) == by_flag
    assert call(["ssh", "--deployment", "demo", "demo-1", "--print-command"]) == by_flag
    code, _, err = call(["ssh", "demo", "nohost", "--print-command"])
    assert code == ExitCode.USAGE
    assert "nohost" in err
    code, out, err = call(["status", "demo", "--json", "--cloud", "lab"])
    assert code == 0, err
    assert [d["name"] for d in json.loads(out.splitlines()[-1])["deployments"]] == ["demo"]


# --- one name per concept: old spellings warn on stderr, naming the new one ---------------------------------------


@pytest.mark.parametrize(
    ("args", "old", "new"),
    [
        (["down", "--name", "ghost", "--yes"], "--name", "--deployment"),
        (["up", "--cloud", "x", "--flavor", "f", "--name", "Bad_Name"], "--name", "--deployment"),
        (["up", "--cloud", "x", "--flavor", "f", "--image", "debian-13", "--deployment", "Bad_Name"], "--image",
         "--os-image"),
        (["bench", "ghost", "--gateway"], "--gateway", "--through-gateway"),
        (["logs", "ghost", "--gateway"], "--gateway", "--through-gateway"),
        (["logs", "ghost", "--host", "h1"], "--host", "--limit"),
        (["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--host", "h1"], "--host", "--limit"),
        (["campaign", "report", "nope", "--tuned", "t.yaml"], "--tuned", "--write-tuned"),
    ],
)  # fmt: skip
def test_old_spellings_still_work_with_a_warning_on_stderr(call, args, old, new):
    _code, out, err = call(args)
    assert "no such option" not in err.lower()  # parsed: what fails is what comes after (no such deployment, ...)
    assert f"warning: {old} is deprecated and goes in the next release: use {new}" in err
    assert "deprecated" not in out


def test_new_spellings_do_not_warn_and_do_the_same(call):
    code, _, err = call(["logs", "ghost", "--through-gateway", "--limit", "h1"])
    assert code == ExitCode.UNKNOWN_DEPLOYMENT
    assert "deprecated" not in err
    code, _, err = call(["up", "--cloud", "x", "--flavor", "f", "--os-image", "i", "--deployment", "Bad_Name"])
    assert code == ExitCode.USAGE
    assert "not allowed" in err
    assert "deprecated" not in err


def _commands(group: click.Group, path: str = "zenops") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in group.commands.items():
        found.append((f"{path} {name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{path} {name}")
    return found


def test_dry_run_and_os_image_are_one_option_each_on_every_command():
    """--dry-run and --os-image are declared once (zenops.cli.options: dry_run_option, os_image_option), each
    command giving its own help: one name (an old spelling only as a deprecated one, `up --check`, `up --image`)."""
    having: dict[str, set[str]] = {"dry_run": set(), "os_image": set()}
    for path, command in _commands(cli):
        for p in command.params:
            if p.name in having:
                having[p.name].add(path)
                assert isinstance(p, OldSpellingOption), f"{path}: {p.opts} declared by hand"
                assert [o for o in p.opts if o not in p.old] == [f"--{p.name.replace('_', '-')}"], path
                assert p.help, path
    assert having["dry_run"] >= {"zenops up", "zenops down", "zenops reap", "zenops rollout", "zenops config init"}
    assert having["os_image"] >= {"zenops up", "zenops config init"}


def test_plan_limit_picks_the_host_of_a_facts_file(call, tmp_path):
    facts = json.loads(FACTS.read_text())
    many = tmp_path / "two.json"
    many.write_text(json.dumps({"type": "result", "command": "facts", "hosts": {"a": facts, "b": facts}}))
    code, _, err = call(["plan", "--facts", str(many), "--model", "Qwen/Qwen3-4B"])
    assert code == ExitCode.USAGE
    assert "pick one with --limit NAME" in err
    code, out, err = call(["plan", "--facts", str(many), "--model", "Qwen/Qwen3-4B", "--limit", "b", "--json"])
    assert code == 0, err
    assert [p["host"] for p in json.loads(out.splitlines()[-1])["plans"]] == ["b"]


def test_two_spellings_with_different_values_are_refused(call):
    code, _, err = call(["up", "--cloud", "x", "--flavor", "f", "--name", "a", "--deployment", "b"])
    assert code == ExitCode.USAGE
    assert "--name a and --deployment b: spellings of one option, with different values" in err
    assert "give it once: --deployment VALUE" in err


def test_an_old_config_key_warns_naming_the_new_key(call, tmp_path, monkeypatch):
    (tmp_path / "zenops.yaml").write_text("defaults:\n  up:\n    image: debian-13\n  bench:\n    gateway: true\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = call(["paths"])
    assert code == 0, err
    assert "defaults.up.image" in err
    assert "use defaults.up.os_image" in err
    assert "use defaults.bench.through_gateway" in err


# --- refused before anything runs: what nothing can mean ------------------------------------------------------------


def test_plan_refuses_a_vllm_release_the_table_does_not_know(call):
    from zenops import compat  # noqa: PLC0415

    code, _, err = call(["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--vllm", "9.9.9"])
    assert code == ExitCode.INCOMPATIBLE, err
    assert "vLLM 9.9.9 is not in zenops's compatibility table" in err
    assert f"use one of {', '.join(compat.known_vllm())}" in err
    code, _, err = call(["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--vllm", compat.known_vllm()[0]])
    assert code == 0, err


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--concurrency", "100000000"],
        ["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--concurrency", "4097"],
        ["bench", "ghost", "--concurrency", "1,100000000"],
    ],
)
def test_concurrency_above_the_bound_is_refused(call, args):
    code, _, err = call(args)
    assert code == ExitCode.USAGE, err
    assert "4096" in err


def test_concurrency_at_the_bound_is_planned(call):
    code, out, err = call(
        ["plan", "--facts", str(FACTS), "--model", "Qwen/Qwen3-4B", "--concurrency", "4096", "--json"]
    )
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["max_num_seqs"] >= 4096


def test_a_campaign_concurrency_above_the_bound_is_refused(tmp_path):
    from zenops.campaign.spec import load_spec  # noqa: PLC0415
    from zenops.errors import ConfigError  # noqa: PLC0415

    base = "name: s\ncloud: c\nflavors: [f]\nmodels: [m/x]\n"
    path = tmp_path / "c.yaml"
    path.write_text(base + "bench: {concurrency: [1, 100000000]}\n")
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    assert "bench.concurrency[1]" in info.value.message
    assert "from 1 to 4096" in info.value.message
    path.write_text(base + "variants: {big: {concurrency: 5000}}\n")
    with pytest.raises(ConfigError, match="from 1 to 4096"):
        load_spec(path)
    path.write_text(base + "bench: {concurrency: [1, 4096]}\n")
    assert load_spec(path).bench.concurrency == (1, 4096)


def test_image_ref_without_prebuilt_is_refused(call, inventory, isolated_home):
    code, _, err = call(["up", "-i", str(inventory), "--model", "Qwen/Qwen3-4B", "--image-ref", "r/x:1"])
    assert code == ExitCode.USAGE, err
    assert (
        "--image-ref r/x:1 goes with --image-source prebuilt (the image source is not given: the pair's own route)"
        in err
    )
    assert not (isolated_home / "state" / "zenops" / "runs").exists()  # nothing ran


def test_json_with_another_report_format_is_refused(call, tmp_path):
    code, out, err = call(["--json", "report", str(tmp_path), "--format", "md"])
    assert code == ExitCode.USAGE, err
    assert "--json and --format md: one output format" in err
    assert json.loads(out.splitlines()[-1])["exit_code"] == ExitCode.USAGE


def test_zentorch_without_vllm_is_a_usage_error_naming_the_pair(call):
    from zenops import compat  # noqa: PLC0415

    default = compat.table().default
    code, _, err = call(["images", "--zentorch", default.zentorch])
    assert code == ExitCode.USAGE, err
    assert f"--zentorch {default.zentorch} without --vllm" in err
    assert f"--vllm {default.vllm} --zentorch {default.zentorch}" in err
    code, _, err = call(["images", "--vllm", "9.9.9", "--zentorch", default.zentorch])
    assert code == ExitCode.INCOMPATIBLE  # a pair the table does not know: 11, as before
