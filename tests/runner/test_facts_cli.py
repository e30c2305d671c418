"""`zenops facts`: the real cpu_topology module through ansible-runner on localhost, the library and the CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.fixtures import sysfs
from tests.unit.test_cpu_topology import check_invariants
from zenops.cli import main as cli_main
from zenops.cli.facts import facts as facts_command
from zenops.cli.facts import summary_lines
from zenops.config import load
from zenops.context import RunContext
from zenops.errors import ExitCode, UsageError
from zenops.facts import facts_path, gather_facts, load_facts_file
from zenops.paths import collections_path, venv_bin


def test_gather_facts_local_runs_the_module_and_saves_the_result():
    config = load()
    hosts = gather_facts(RunContext(config), None, local=True)
    assert list(hosts) == ["localhost"]
    t = hosts["localhost"]
    check_invariants(t)
    # the module on the "remote" side and the module_utils imported here read the same machine
    direct = sysfs.load_cpu_topology().gather()
    for key in ("vendor", "model_name", "flags", "online_cpus", "physical_cores", "sockets", "kernel"):
        assert t[key] == direct[key], key
    assert [n["cpus"] for n in t["numa_nodes"]] == [n["cpus"] for n in direct["numa_nodes"]]

    saved = facts_path(config, "localhost")
    assert saved == config.state_dir / "facts" / "localhost.json"
    assert json.loads(saved.read_text()) == t
    assert stat.S_IMODE(saved.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert load_facts_file(saved) == t
    assert not list(saved.parent.glob(".*.tmp"))


def test_gather_facts_with_an_inventory(local_inventory):
    hosts = gather_facts(RunContext(load()), local_inventory)
    assert set(hosts) == {"localhost"}


def test_gather_facts_limit_matching_nothing_is_a_usage_error(local_inventory):
    with pytest.raises(UsageError, match="no hosts matching --limit nothere"):
        gather_facts(RunContext(load()), local_inventory, limit="nothere")


def test_gather_facts_needs_exactly_one_source(local_inventory):
    with pytest.raises(UsageError, match="exactly one"):
        gather_facts(RunContext(load()), None, local=False)
    with pytest.raises(UsageError, match="exactly one"):
        gather_facts(RunContext(load()), local_inventory, local=True)


# --- the click command (zenops.cli.facts.facts), called directly ------------------------------------------------------


def test_facts_command_local_json(tmp_path):
    result = CliRunner().invoke(facts_command, ["--local", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    final = lines[-1]
    assert final["type"] == "result"
    assert final["command"] == "facts"
    assert set(final["hosts"]) == {"localhost"}
    assert set(final["saved"]) == {"localhost"}
    check_invariants(final["hosts"]["localhost"])
    assert json.loads(Path(final["saved"]["localhost"]).read_text()) == final["hosts"]["localhost"]
    assert all(line["type"] == "event" for line in lines[:-1])
    # what `zenops facts --local --json > FILE` writes is what `zenops plan --facts FILE` reads
    out = tmp_path / "facts.json"
    out.write_text(result.stdout)
    assert load_facts_file(out) == final["hosts"]["localhost"]


def test_facts_command_human_output(local_inventory):
    result = CliRunner().invoke(facts_command, ["--inventory", str(local_inventory)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for label in ("localhost", "CPU", "cores", "node 0", "memory", "allowed", "flags", "hypervisor", "saved"):
        assert label in result.stdout
    assert "localhost.json" in result.stdout


def test_facts_command_prints_this_machines_notes_once(local_inventory):
    """Whatever the facts of this machine note (e.g. a VM's hot-plugged memory) is printed, one `note` row each."""
    result = CliRunner().invoke(facts_command, ["--inventory", str(local_inventory)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = json.loads(facts_path(load(), "localhost").read_text())
    rows = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("note ")]
    assert [r.removeprefix("note").strip() for r in rows] == saved["notes"]


@pytest.mark.parametrize(
    ("fixture", "notes"),
    [("zen4-vm-hotplug", ["node 0's meminfo counts 5.59 GiB of the system's 23.54 GiB"]), ("gp-5-24-96", [])],
)
def test_summary_lines_show_the_notes_of_the_facts(fixture, notes):
    t = load_facts_file(sysfs.FACTS_DIR / f"{fixture}.json")
    rows = [text for label, text in summary_lines(t) if label == "note"]
    assert len(rows) == len(notes)
    for row, start in zip(rows, notes, strict=True):
        assert row.startswith(start)
    # facts written by an older zenops have no notes: nothing to print, no error
    assert [label for label, _ in summary_lines({k: v for k, v in t.items() if k != "notes"})].count("note") == 0


@pytest.mark.parametrize("extra", [[], ["--local", "--inventory", "INV"]])
def test_facts_command_needs_exactly_one_of_inventory_and_local(extra, local_inventory, isolated_home):
    args = [str(local_inventory) if a == "INV" else a for a in extra]
    result = CliRunner().invoke(facts_command, args)
    assert isinstance(result.exception, UsageError)
    assert "exactly one of --inventory FILE and --local" in result.exception.message
    assert "--local" in str(result.exception.hint)
    assert not (isolated_home / "state" / "zenops" / "runs").exists()  # nothing ran


# --- through the console entry point, once main.py registers the command ---------------------------------------------

wired = pytest.mark.skipif(
    "facts" not in cli_main.cli.commands, reason="zenops.cli.main does not register `facts` yet (lead wires it)"
)


@wired
@pytest.mark.parametrize("args", [["facts"], ["facts", "--local", "--inventory", "INV"]])
def test_zenops_facts_usage_error_exit_code(args, local_inventory, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main.main([str(local_inventory) if a == "INV" else a for a in args])
    assert info.value.code == ExitCode.USAGE
    assert "--inventory" in capsys.readouterr().err


@wired
def test_zenops_json_facts_local(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main.main(["--json", "facts", "--local"])
    assert info.value.code == ExitCode.OK
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["command"] == "facts"
    assert "localhost" in final["hosts"]


def test_ansible_doc_documents_every_key_gather_returns(tmp_path):
    """`ansible-doc zenops.inference.cpu_topology` works and its RETURN names every key of the topology."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path()), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(venv_bin() / "ansible-doc"), "--json", "zenops.inference.cpu_topology"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    doc = json.loads(proc.stdout)["zenops.inference.cpu_topology"]
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    topology = doc["return"]["topology"]["contains"]
    t = sysfs.topology_of(sysfs.xeon_e5_2680v4_2s(), tmp_path)
    assert set(topology) == set(t)
    assert set(topology["numa_nodes"]["contains"]) == set(t["numa_nodes"][0])
    assert set(topology["cpus"]["contains"]) == set(t["cpus"][0])
    assert "zenops_cpu_topology" in doc["return"]["ansible_facts"]["contains"]
