"""`zenops up --inventory` against a systemd container host over real SSH as a non-root login user with sudo (as on
every cloud image): the docker role configures the engine (the devhost image has it installed; Molecule `docker` and
the sandbox's servers test the install itself) and it works there.

Needs a Docker engine and the images of scripts/build-images (.ci/run provides both).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from zenops import devhost

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")


@pytest.fixture
def host(isolated_home: Path):
    state = isolated_home / "state" / "zenops"
    name = f"e2e{secrets.token_hex(2)}"
    inventory, hosts = devhost.up(state, name, count=1)
    try:
        yield inventory, hosts[0]
    finally:
        devhost.down(state, name)


def zenops_up(inventory: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [ZENOPS, "--json", "up", "-i", str(inventory), *extra],
        check=False,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(line["type"] in ("event", "result") for line in lines)
    result = lines[-1]
    assert result["type"] == "result"
    result["events"] = lines[:-1]
    return result


def in_host(container: str, *cmd: str) -> str:
    return subprocess.run(["docker", "exec", container, *cmd], capture_output=True, text=True, check=True).stdout


# a variant (`scripts/test --full`): the rollout fleet and the serving e2e run `up` over SSH as the same non-root user
# on fresh devhosts in the landing run (the docker role, then a model), and the serving e2e's re-run changes nothing
@pytest.mark.full
def test_up_prepares_docker_over_ssh_as_a_non_root_user_and_is_idempotent(host):
    inventory, dev = host
    # the host is reached over real SSH: the inventory names its address and our generated key
    assert dev.address
    assert "ansible_ssh_private_key_file" in inventory.read_text()
    assert "ansible_user: debian" in inventory.read_text()  # not root: zenops becomes root where it must

    first = zenops_up(inventory)
    summary = first["hosts"][0]
    assert summary["host"] == dev.container.removeprefix("zenops-dev-")
    assert summary["address"] == dev.address
    assert summary["os"].startswith("Debian 12")
    assert summary["docker"][0].isdigit()  # a version string read from the engine
    assert first["run"]["stats"][summary["host"]]["changed"] > 0
    assert {e["kind"] for e in first["events"]} >= {"play", "task", "ok", "changed"}

    # Docker really runs inside the host, as a service, with our log rotation applied
    assert in_host(dev.container, "systemctl", "is-enabled", "docker").strip() == "enabled"
    assert in_host(dev.container, "docker", "info", "--format", "{{.LoggingDriver}}").strip() == "json-file"
    daemon = json.loads(in_host(dev.container, "cat", "/etc/docker/daemon.json"))
    assert daemon["log-opts"]["max-size"] == "10m"

    # re-running changes nothing
    second = zenops_up(inventory)
    assert second["run"]["stats"][summary["host"]]["changed"] == 0
    assert second["run"]["stats"][summary["host"]]["failed"] == 0
