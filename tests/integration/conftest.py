"""Integration tests against the local sandbox cloud (scripts/sandbox up): real Keystone, Nova, Neutron, Glance,
Placement; every server a systemd container reached over SSH.

The sandbox must be running. Without it these tests skip, unless ZENOPS_REQUIRE_SANDBOX=1 (scripts/test sets it in
CI), where a missing sandbox is a failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openstack
import pytest

from zenops.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
ZENOPS = str(Path(sys.executable).parent / "zenops")
CLOUDS = Path(os.environ.get("ZENOPS_SANDBOX_DIR", REPO / ".cache" / "sandbox")) / "clouds.yaml"
SMALL = "gp.5.2.8"


@dataclass
class Zenops:
    """Runs the real `zenops` command with its own state, config and the sandbox's clouds.yaml."""

    env: dict[str, str]
    cwd: Path

    def __call__(self, *args: str, timeout: float = 900) -> tuple[int, list[dict[str, Any]], str]:
        proc = subprocess.run(
            [ZENOPS, "--json", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.cwd,
            timeout=timeout,
            check=False,
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return proc.returncode, lines, proc.stderr

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [ZENOPS, "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.cwd,
        )

    def config(self, text: str) -> None:
        (self.cwd / "zenops.yaml").write_text(text)

    @staticmethod
    def interrupt_when(proc: subprocess.Popen[str], task: str, timeout: float = 300) -> tuple[int, str]:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("kind") == "task" and event.get("task") == task:
                break
            assert time.monotonic() < deadline, f"task {task!r} never started"
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err


@pytest.fixture(scope="session")
def sandbox_clouds() -> Path:
    if not CLOUDS.is_file():
        if os.environ.get("ZENOPS_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox cloud is required but {CLOUDS} is missing: run scripts/sandbox up")
        pytest.skip("the sandbox cloud is not running (scripts/sandbox up)")
    return CLOUDS


@pytest.fixture(scope="session")
def admin(sandbox_clouds: Path) -> openstack.connection.Connection:
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(sandbox_clouds)
    return openstack.connect(cloud="sandbox-admin")


def controller(sandbox_clouds: Path, home: Path, work: Path) -> Zenops:
    """A zenops controller on the sandbox cloud: its state, config and cache under ``home``, run from ``work``."""
    env = {
        **os.environ,
        "OS_CLIENT_CONFIG_FILE": str(sandbox_clouds),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "COLUMNS": "200",
    }
    env.pop("ZENOPS_CONFIG", None)
    work.mkdir()
    return Zenops(env, work)


@pytest.fixture
def zenops(sandbox_clouds: Path, tmp_path: Path) -> Iterator[Zenops]:
    z = controller(sandbox_clouds, tmp_path / "home", tmp_path / "work")
    yield z
    # whatever a test left behind is removed, so one failure does not cascade into the next test: the deployments of
    # the integration tests (named it*), not `down --all-mine`, which removes every zenops deployment in the tenant:
    # scripts/test runs its lanes side by side, and CI10/CI11 --full lost the campaign's servers to it
    failed = {}
    for dep in leftovers(z):  # each one tried, whatever the others did
        code, _, err = z("down", "--deployment", dep, "--cloud", "sandbox", "--yes", timeout=600)
        if code != 0:
            failed[dep] = err[-2000:]
    assert not failed, failed


@pytest.fixture
def other(sandbox_clouds: Path, tmp_path: Path) -> Zenops:
    """A second controller: the same cloud, its own state dir (no ledger, no keys, no locks of the first). What a test
    leaves is removed by the `zenops` fixture's teardown (every it* deployment in the cloud, `leftovers`)."""
    return controller(sandbox_clouds, tmp_path / "other", tmp_path / "other-work")


PREFIX = "it"  # every deployment an integration test makes is named it<something> (itswitch, it1, itreap, ...)


def leftovers(z: Zenops) -> list[str]:
    """The integration tests' deployments still in the cloud or in this test's ledger."""
    code, lines, err = z("leaks", "--cloud", "sandbox")
    assert code in (0, ExitCode.LEAKS), err
    found = next(line for line in lines if line.get("type") == "result")["leaks"]
    names = {str(r.get("deployment") or "") for r in found}
    ledger = Path(z.env["XDG_STATE_HOME"]) / "zenops" / "deployments" / "sandbox"  # this test's own (no cloud calls)
    names |= {p.stem for p in ledger.glob("*.json")}
    return sorted(n for n in names if n.startswith(PREFIX))


def ours(conn: openstack.connection.Connection, deployment: str) -> list[str]:
    """Everything in the cloud carrying the marks of ``deployment``, by the SDK and not by zenops's own listing."""
    found = []
    tag = f"zenops:deployment={deployment}"
    for s in conn.compute.servers(details=True, all_projects=True):
        if (s.metadata or {}).get("zenops:deployment") == deployment:
            found.append(f"server {s.name}")
    for lister, kind in (
        (conn.network.networks, "network"),
        (conn.network.routers, "router"),
        (conn.network.ips, "floating_ip"),
        (conn.network.security_groups, "security_group"),
        (conn.network.ports, "port"),
    ):
        found += [f"{kind} {r.id}" for r in lister(tags=tag)]
    found += [f"keypair {k.name}" for k in conn.compute.keypairs() if k.name == f"zenops-{deployment}"]
    return found


def no_leaks_of(zenops: Zenops, *deployments: str) -> None:
    """`zenops leaks` finds nothing of these deployments. Other tests may hold resources in the sandbox at the same
    time (scripts/test runs its lanes side by side: the campaign's servers, the gateway's, Molecule provision's), which
    this controller does not know: exit 10 listing only theirs is fine here; each of them checks its own."""
    code, lines, err = zenops("leaks", "--cloud", "sandbox")
    assert code in (0, ExitCode.LEAKS), err
    found = next(line for line in lines if line.get("type") == "result")["leaks"]  # (exit 10: an error line follows)
    mine = [r for r in found if r.get("deployment") in deployments]
    assert mine == [], mine
