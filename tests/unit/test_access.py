"""`zenops ssh` and `zenops logs`: how a host is reached (read from real inventories through the real
ansible-inventory), which log streams a deployment has, and the commands that read them. The real SSH path (a
non-root user with sudo, real containers) runs in tests/e2e/test_serve_devhost.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from zenops.config import SshSettings
from zenops.deployment.access import HostAccess, LogSource, hosts_from, log_sources, pick_host, read_inventory
from zenops.deployment.record import ServingRecord
from zenops.deployment.store import Store
from zenops.errors import ExitCode, NoServerError, UsageError

CLOUD_INVENTORY = """\
all:
  hosts:
    fle-1:
      ansible_host: 203.0.113.7
      ansible_user: debian
      ansible_ssh_private_key_file: /state/keys/zenops-fle
      ansible_ssh_common_args: >-
        -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/state/deployments/c/fle.known_hosts
        -o HostKeyAlias=8d1f
    fle-2:
      ansible_host: 203.0.113.8
      ansible_user: debian
      ansible_port: 2222
"""

INI_INVENTORY = """\
[fleet]
h1 ansible_host=192.0.2.1
h2 ansible_host=192.0.2.2 ansible_user=root

[fleet:vars]
ansible_user=ops
ansible_ssh_private_key_file=~/.ssh/fleet

[ctl]
me ansible_connection=local
"""


@pytest.fixture
def cloud_inv(tmp_path: Path) -> Path:
    p = tmp_path / "fle.inventory.yml"
    p.write_text(CLOUD_INVENTORY)
    return p


def test_a_cloud_inventory_gives_the_key_and_the_pinned_host_keys(cloud_inv):
    hosts = hosts_from(read_inventory(cloud_inv))
    assert sorted(hosts) == ["fle-1", "fle-2"]
    h = hosts["fle-1"]
    argv = h.ssh_argv(["sudo", "docker", "logs", "zenops vllm"])
    assert argv[:5] == ["ssh", "-i", "/state/keys/zenops-fle", "-o", "IdentitiesOnly=yes"]
    # the pinning options exactly as Ansible passes them, then the login, then the quoted command
    known = "UserKnownHostsFile=/state/deployments/c/fle.known_hosts"
    assert argv[5:11] == ["-o", "StrictHostKeyChecking=accept-new", "-o", known, "-o", "HostKeyAlias=8d1f"]
    assert argv[11:] == ["debian@203.0.113.7", "--", "sudo docker logs 'zenops vllm'"]
    assert h.become
    assert hosts["fle-2"].ssh_argv()[:3] == ["ssh", "-p", "2222"]


def test_an_ini_inventory_with_group_vars_and_a_local_host(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text(INI_INVENTORY)
    hosts = hosts_from(read_inventory(inv))
    assert hosts["h1"] == HostAccess("h1", "192.0.2.1", "ops", None, "~/.ssh/fleet", (), False)
    assert hosts["h2"].user == "root"
    assert not hosts["h2"].become  # root reads Docker's logs itself
    assert hosts["me"].local
    assert hosts["me"].run_argv(["docker", "ps"]) == ["docker", "ps"]  # the controller itself: no ssh


def test_zenops_yaml_ssh_settings_come_first_as_for_ansible(cloud_inv):
    strict = SshSettings(user="ops", private_key_file=Path("/k/ops"), host_key_checking="strict")
    h = hosts_from(read_inventory(cloud_inv), strict)["fle-1"]
    # ssh keeps the first value of an option: zenops.yaml's checking wins over the inventory's accept-new
    assert h.ssh_args[:4] == ("-o", "StrictHostKeyChecking=yes", "-o", "StrictHostKeyChecking=accept-new")
    assert (h.user, h.key_file) == ("debian", "/state/keys/zenops-fle")  # the inventory's own win over defaults
    off = hosts_from(read_inventory(cloud_inv), SshSettings(host_key_checking="off"))["fle-2"]
    assert off.ssh_args == ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")
    assert off.ssh_argv(["true"], batch=True)[:5] == ["ssh", "-o", "BatchMode=yes", "-p", "2222"]


def test_a_broken_inventory_is_a_usage_error_naming_it(tmp_path):
    inv = tmp_path / "bad.yml"
    inv.write_text("all: [this is not an inventory\n")
    with pytest.raises(UsageError, match="cannot read the inventory"):
        read_inventory(inv)


def test_pick_host_takes_the_only_one_and_names_the_choices_otherwise(cloud_inv):
    hosts = hosts_from(read_inventory(cloud_inv))
    with pytest.raises(UsageError, match="has 2 hosts: name one") as e:
        pick_host(hosts, None, cloud_inv)
    assert e.value.hint == "one of: fle-1, fle-2"
    with pytest.raises(UsageError, match="fle-9 is not a host of"):
        pick_host(hosts, "fle-9", cloud_inv)
    assert pick_host({"a": hosts["fle-1"]}, None, cloud_inv) is hosts["fle-1"]


RECORD = ServingRecord(
    endpoints={
        "h1": [{"instance": 0, "port": 8000, "container": "zenops-vllm-0"},
               {"instance": 1, "port": 8001, "container": "zenops-vllm-1"}],
        "h2": [{"instance": 0, "port": 8000, "container": "zenops-vllm-0"}],
    },
    services={"gateway": {"host": "h1", "port": 8080, "url": "http://h1:8080/v1"}},
)  # fmt: skip


def test_log_sources_are_every_instance_or_the_ones_asked_for():
    assert [s.label for s in log_sources(RECORD)] == ["h1/0", "h1/1", "h2/0"]
    assert [s.label for s in log_sources(RECORD, host="h1")] == ["h1/0", "h1/1"]
    assert [(s.label, s.container) for s in log_sources(RECORD, instance=1)] == [("h1/1", "zenops-vllm-1")]
    assert log_sources(RECORD, gateway=True) == [LogSource("h1", "h1/gateway", unit="haproxy")]
    with pytest.raises(UsageError, match="zenops serves nothing on h9"):
        log_sources(RECORD, host="h9")
    with pytest.raises(UsageError, match="no instance 3 serves on h2"):
        log_sources(RECORD, host="h2", instance=3)
    with pytest.raises(NoServerError, match="no gateway"):
        log_sources(ServingRecord(endpoints=RECORD.endpoints), gateway=True)
    own = RECORD.with_services({"gateway": {"host": "gw-1", "inventory": "/s/gw.yml"}})
    with pytest.raises(UsageError, match="a server of its own") as e:
        log_sources(own, gateway=True)
    assert "zenops ssh -i /s/gw.yml" in str(e.value.hint)


def test_log_commands_read_docker_and_journald_with_sudo_for_a_login_user():
    vllm = LogSource("h1", "h1/0", container="zenops-vllm-0")
    assert vllm.command(follow=True, since_s=600, tail=20, sudo=True) == [
        "sudo", "-n", "docker", "logs", "--timestamps", "--since", "600s", "--tail", "20", "--follow", "zenops-vllm-0",
    ]  # fmt: skip
    assert vllm.command(follow=False, since_s=None, tail=None, sudo=False) == [
        "docker", "logs", "--timestamps", "zenops-vllm-0"
    ]  # fmt: skip
    gw = LogSource("h1", "h1/gateway", unit="haproxy")
    assert gw.command(follow=False, since_s=90, tail=5, sudo=True) == [
        "sudo", "-n", "journalctl", "--no-pager", "--output", "short-iso", "-u", "haproxy", "--since", "-90s",
        "--lines", "5",
    ]  # fmt: skip


# --- the commands ---------------------------------------------------------------------------------------------------


def test_ssh_prints_the_command_or_runs_it_and_exits_with_its_status(run, isolated_home, tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text(INI_INVENTORY)
    r = run(["ssh", "-i", str(inv), "h1", "--print-command", "--", "echo", "a b"])
    assert r.exit_code == 0, r.output
    assert shlex.split(r.output.strip()) == [
        "ssh",
        "-i",
        "~/.ssh/fleet",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "ops@192.0.2.1",
        "--",
        "echo 'a b'",
    ]  # fmt: skip  (zenops.yaml's ssh.host_key_checking, as Ansible's runs get it: accept-new by default)
    r = run(["ssh", "-i", str(inv), "--json", "h2"])
    assert json.loads(r.output.strip().splitlines()[-1])["argv"][:2] == ["ssh", "-t"]  # a shell: a terminal
    # the controller itself (ansible_connection=local): the command really runs, its exit status is zenops's
    marker = tmp_path / "ran"
    r = run(["ssh", "-i", str(inv), "me", "--", "sh", "-c", f"touch {marker}; exit 3"])
    assert r.exit_code == 3, r.output
    assert marker.exists()
    r = run(["ssh", "-i", str(inv)])
    assert r.exit_code == ExitCode.USAGE
    assert "has 3 hosts: name one" in r.output


def test_logs_without_servers_names_up(run, isolated_home, tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text(INI_INVENTORY)
    r = run(["logs", "-i", str(inv)])
    assert r.exit_code == ExitCode.NO_SERVER, r.output
    assert "zenops up --inventory" in " ".join(r.output.split())


def test_logs_of_the_controller_itself_are_read_and_prefixed(run, isolated_home, tmp_path, monkeypatch):
    """The local host (ansible_connection=local) runs the log command itself: here a stand-in `docker` on PATH (a
    TEST DOUBLE: this machine's unit tests have no engine containers), so the streaming and prefixing are real."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("me ansible_connection=local\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text('#!/bin/sh\necho "args: $*"\necho "INFO Application startup complete."\n')
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    Store(__import__("zenops.config", fromlist=["load"]).load(), inv).save_record(
        ServingRecord(endpoints={"me": [{"instance": 0, "port": 8000, "container": "zenops-vllm-0"}]})
    )
    r = run(["logs", "-i", str(inv), "--since", "5m", "--tail", "3"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[:2] == [
        "me/0 | args: logs --timestamps --since 300s --tail 3 zenops-vllm-0",
        "me/0 | INFO Application startup complete.",
    ]
