"""`zenops --help` and every `--help` start without the heavy libraries (openstacksdk, ansible-runner, matplotlib,
...): each command imports its library when it runs. Checked in a fresh interpreter (this test process has imported
them already), with what that interpreter has in sys.modules; the time it takes is scripts/bench-help's business."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from zenops.cli.main import cli

# never loaded by importing the CLI or by any --help: (top-level) packages only a running command needs
NEVER_ON_HELP = (
    "openstack",  # openstacksdk: up --cloud, down, leaks, status
    "keystoneauth1",
    "requests",
    "ansible_runner",  # every command that runs a playbook
    "ansible",
    "matplotlib",  # report --plot
    "numpy",  # tiny-model
    "sentencepiece",
    "zenops.runner",
    "zenops.progress",
    "zenops.bench",
    "zenops.serve",
    "zenops.deployment.provision",  # the cloud lifecycle (was the zenops.deploy package)
    "zenops.deployment.common",
    "zenops.deployment.firewall",
    "zenops.deployment.leakcheck",
    "zenops.deployment.listing",
    "zenops.deployment.reaping",
    "zenops.deployment.surge",
    "zenops.deployment.teardown",
    "zenops.cloud.ops",
    "zenops.report",
    "zenops.facts",
    "zenops.hosts",
    "zenops.deployment.record",
    "zenops.tinymodel",
    "zenops.devhost",
    "zenops.compat",
)
# not loaded by `import zenops.cli.main` nor `zenops --help` either; some subcommand's help needs them for what it
# shows (bench --help lists the profiles of bench.yaml)
NOT_AT_START = (
    *NEVER_ON_HELP,
    "zenops.catalog",
    "zenops.planner",
    "yaml",
    "rich.table",
)

PROBE = """
import contextlib, io, json, sys

def loaded():
    return sorted(sys.modules)

snapshots = {}
import zenops.cli.main
snapshots["import zenops.cli.main"] = loaded()
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            zenops.cli.main.main([*argv, "--help"])
        except SystemExit as e:
            if e.code not in (0, None):
                raise SystemExit(f"zenops {' '.join(argv)} --help exited {e.code}: {out.getvalue()}")
    snapshots[" ".join(["zenops", *argv, "--help"])] = loaded()
print(json.dumps(snapshots))
"""


def command_paths() -> list[list[str]]:
    """Every command and subcommand of the CLI, as argv prefixes."""

    def walk(group: click.Group, ctx: click.Context, prefix: list[str]) -> list[list[str]]:
        out = []
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None
            out.append([*prefix, name])
            if isinstance(cmd, click.Group):
                out += walk(cmd, click.Context(cmd, info_name=name, parent=ctx), [*prefix, name])
        return out

    return walk(cli, click.Context(cli, info_name="zenops"), [])


def loaded(names: list[str], module: str) -> bool:
    """``module`` or one of its submodules is among ``names``."""
    return any(n == module or n.startswith(module + ".") for n in names)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """sys.modules of one fresh interpreter after `import zenops.cli.main`, then after `zenops --help`, then after
    each subcommand's --help in turn (run where no zenops.yaml is, with the test's isolated config dir)."""
    argvs = [[], *command_paths()]
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs)],
        cwd=tmp_path_factory.mktemp("cwd"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    result: dict[str, list[str]] = json.loads(r.stdout)
    return result


def test_every_command_is_probed(snapshots):
    labels = list(snapshots)
    assert labels[:2] == ["import zenops.cli.main", "zenops --help"]
    # the walk found the commands and the groups' subcommands (not a vacuous loop over nothing)
    for label in ("zenops up --help", "zenops bench --help", "zenops report --help", "zenops config show --help"):
        assert label in labels
    assert len(labels) == 2 + len(command_paths())


@pytest.mark.parametrize("stage", ["import zenops.cli.main", "zenops --help"])
def test_the_cli_starts_without_any_command_library(snapshots, stage):
    found = [m for m in NOT_AT_START if loaded(snapshots[stage], m)]
    assert not found, f"{stage} loads {found}: import them inside the function of the command that needs them"


def test_no_help_loads_what_only_running_a_command_needs(snapshots):
    blamed: dict[str, str] = {}
    for stage, names in snapshots.items():  # in order: the first stage a module shows up in loaded it
        for m in NEVER_ON_HELP:
            if m not in blamed and loaded(names, m):
                blamed[m] = stage
    assert not blamed, f"loaded by --help: {blamed}; import them inside the function of the command that needs them"


# --- what --help teaches is unchanged by the lazy sources ----------------------------------------------------------


def test_bench_help_lists_the_profiles_of_the_catalogue(run):
    from zenops import bench  # noqa: PLC0415

    r = run(["bench", "--help"])
    assert r.exit_code == 0
    assert f"[{'|'.join(sorted(bench.profiles()))}]" in r.output
    assert "[default: seed]" in r.output


def test_bench_refuses_a_profile_not_in_the_catalogue(run, tmp_path):
    from zenops import bench  # noqa: PLC0415

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n")
    r = run(["bench", "-i", str(inv), "--profile", "no-such-profile"])
    assert r.exit_code == 2
    names = ", ".join(repr(n) for n in sorted(bench.profiles()))
    assert f"'no-such-profile' is not one of {names}" in r.output


def test_plan_takes_the_default_pair_and_a_config_default_over_it(run, tmp_path, monkeypatch):
    from zenops import compat  # noqa: PLC0415

    args = ["plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-0.6B", "--json"]
    r = run(args)
    assert r.exit_code == 0, r.output
    result = json.loads(r.output.splitlines()[-1])
    assert result["vllm_version"] == compat.table().default.vllm
    assert result["engine"]["pair"] == compat.table().default.id
    monkeypatch.chdir(tmp_path)
    Path("zenops.yaml").write_text("defaults:\n  plan:\n    vllm_version: 0.14.1\n")
    r = run(args)
    assert r.exit_code == 0, r.output
    # (the old key is taken with a warning on stderr, which the runner prints after stdout)
    result = json.loads(next(x for x in reversed(r.output.splitlines()) if x.startswith("{")))
    assert result["vllm_version"] == "0.14.1"
    assert (result["engine"]["pair"], result["engine"]["image_source"]) == ("vllm-0.14.1-zentorch-5.2.0", "build")


def test_up_image_sources_are_the_ones_serve_accepts(run):
    from zenops.request_options import BY_FIELD  # noqa: PLC0415
    from zenops.serve import IMAGE_SOURCES  # noqa: PLC0415

    assert BY_FIELD["image_source"].choices == IMAGE_SOURCES  # --image-source's choices: the table's
    r = run(["up", "--help"])
    assert f"[{'|'.join(IMAGE_SOURCES)}]" in r.output
