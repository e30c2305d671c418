"""The expiry switch's credential against the sandbox's Keystone and Nova.

What the sandbox allows: zenops makes the deployment's application credential (restricted by an access rule to
DELETE of its server on the compute service, unrestricted false, expiring after the server), the switch's script
authenticates with it, `leaks` on a controller that does not know the deployment lists it, and `down` deletes it.

What the sandbox does not allow: a server cannot reach the APIs (Keystone and Nova listen on 127.0.0.1 of this
machine, sandbox/zenops_sandbox/manage.py), so the role's preflight refuses to install the switch there; and Nova's
keystonemiddleware has no [keystone_authtoken] service_type, so it refuses every token that carries access rules
(401). Both are asserted here, so the day the sandbox allows them this test says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openstack
import pytest

from tests.integration.conftest import REPO, SMALL, Zenops
from zenops.cloud import expiry_switch as es
from zenops.cloud import marks as m
from zenops.errors import ExitCode

pytestmark = pytest.mark.integration

SCRIPT = REPO / "roles" / "expiry_switch" / "files" / "zenops-expiry-switch"
DEP = "itswitch"


@pytest.fixture
def other(sandbox_clouds: Path, tmp_path: Path) -> Zenops:
    """A second controller without this deployment in its ledger."""
    home = tmp_path / "other"
    env = {
        **os.environ,
        "OS_CLIENT_CONFIG_FILE": str(sandbox_clouds),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "COLUMNS": "200",
    }
    env.pop("ZENOPS_CONFIG", None)
    work = tmp_path / "other-work"
    work.mkdir()
    return Zenops(env, work)


@pytest.fixture
def tenant(sandbox_clouds: Path) -> Any:
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(sandbox_clouds)
    conn = openstack.connect(cloud="sandbox")
    yield conn
    es.delete(conn, deployment=DEP)  # whatever a failed test left


def switch(tmp_path: Path, conf: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "credential.json"
    path.write_text(json.dumps(conf))
    path.chmod(0o600)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, str(path)], capture_output=True, text=True, timeout=120, check=False
    )


def role_on_server(tmp_path: Path, inventory: str, conf: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """zenops.inference.expiry_switch on the deployment's server, with the credential (vars in a 0600 file)."""
    play = tmp_path / "switch.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles:\n    - role: zenops.inference.expiry_switch\n")
    extra = tmp_path / "switch-vars.json"
    extra.write_text(
        json.dumps(
            {
                "expiry_switch_auth_url": conf["auth_url"],
                "expiry_switch_credential_id": conf["credential_id"],
                "expiry_switch_credential_secret": conf["credential_secret"],
                "expiry_switch_expires_at": conf["expires_at"],
            }
        )
    )
    extra.chmod(0o600)
    collections = subprocess.run(
        [sys.executable, "-m", "zenops.paths"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": collections, "ANSIBLE_HOST_KEY_CHECKING": "false"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory, str(play), "-e", f"@{extra}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_expiry_credential_is_restricted_authenticates_and_goes_with_down(zenops, other, tenant, admin, tmp_path):
    started = time.monotonic()
    code, lines, err = zenops("up", "--cloud", "sandbox", "--flavor", SMALL, "--name", DEP, "--ttl", "30m")
    assert code == 0, err[-3000:]
    up_s = time.monotonic() - started
    dep = lines[-1]["deployment"]
    server_id = next(s["id"] for s in dep["servers"])
    server = admin.compute.get_server(server_id)
    expires_at = server.metadata[m.EXPIRES_KEY]

    cred = es.create(tenant, m.Marks(DEP), [server_id], expires_at=expires_at, margin_s=600)
    stored = tenant.identity.get_application_credential(tenant.current_user_id, cred.id)
    assert stored.name == f"zenops-expiry-{DEP}"
    assert stored.unrestricted is False
    assert [(r["service"], r["method"], r["path"]) for r in stored.access_rules] == [
        ("compute", "DELETE", f"/v2.1/servers/{server_id}")
    ]
    want = m.parse_expiry(expires_at) + timedelta(seconds=600)  # type: ignore[operator]
    assert m.parse_expiry(stored.expires_at) == want

    conf = {
        "auth_url": tenant.config.get_auth_args()["auth_url"],
        "credential_id": cred.id,
        "credential_secret": cred.secret,
        "server_id": server_id,
        "expires_at": expires_at,
        "interface": "public",
        "region": "",
        "compute_url": "",
    }
    # from this machine, which reaches the APIs: the restricted credential authenticates
    res = switch(tmp_path, conf, "--check")
    assert res.returncode == 0, res.stderr
    assert "compute endpoint http://127.0.0.1:8774/v2.1" in res.stdout
    assert cred.secret not in res.stdout + res.stderr

    # past the expiry: Nova refuses the restricted token (keystonemiddleware without service_type), the server stays
    res = switch(tmp_path, {**conf, "expires_at": m.format_expiry(datetime.now(UTC) - timedelta(seconds=1))})
    assert res.returncode == 1
    assert "Nova refused to delete server" in res.stderr
    assert "HTTP 401" in res.stderr
    assert admin.compute.get_server(server_id).status == "ACTIVE"

    # on the server: the role's preflight finds that it cannot reach Keystone, and installs nothing
    res = role_on_server(tmp_path, dep["inventory"], conf)
    assert res.returncode != 0
    assert "cannot reach Keystone at http://127.0.0.1:5000/v3" in res.stdout, res.stdout[-3000:]
    assert cred.secret not in res.stdout + res.stderr

    # another controller: the credential is a leak there, with its deployment
    code, lines, _ = other("leaks", "--cloud", "sandbox")
    assert code == ExitCode.LEAKS
    found = next(line for line in lines if line.get("type") == "result")["leaks"]
    assert {"kind": "application_credential", "name": cred.name, "deployment": DEP} in [
        {k: r[k] for k in ("kind", "name", "deployment")} for r in found
    ]

    code, lines, err = zenops("down", "--name", DEP, "--yes")
    assert code == 0, err
    assert "application_credential" in [r["kind"] for r in lines[-1]["removed"]]
    assert es.owned(tenant, deployment=DEP) == []
    code, lines, err = zenops("leaks", "--cloud", "sandbox")
    assert code == 0, err
    assert lines[-1]["leaks"] == []
    print(f"\nup 1 server: {up_s:.0f}s; credential made, checked, refused by Nova, removed by down")
