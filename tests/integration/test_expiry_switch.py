"""The expiry switch (dead-man's switch) on the sandbox cloud, all real: `zenops up --count 2 --ttl` makes each
server its own application credential (restricted by an access rule to DELETE of that server on the compute service,
unrestricted false, expiring after the server: a server cannot delete its sibling), installs the switch on each
server (it reaches Keystone and Nova at the catalog's
internal endpoints, sandbox/README.md), and with no controller doing anything from then on, the server deletes
itself at its expiry. The credential's secret is on the server in a root-only file and nowhere in zenops's output or
state; Nova refuses the credential for anything but that DELETE; `leaks` on another controller lists it, `down`
deletes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import openstack
import pytest

from tests.integration.conftest import SMALL, Zenops, no_leaks_of
from zenops.cloud import expiry_switch as es
from zenops.cloud import marks as m
from zenops.errors import ExitCode

pytestmark = pytest.mark.integration

DEP = "itswitch"
# The expiry must be at least es.MIN_LEAD_S ahead when `up` arms the switches, or `up` rightly arms none. `up` sets it
# (now + TTL) at its provisioning, after this test started it, and arms before it returns; so with `up` given
# UP_TIMEOUT_S, the lead at arming is at least TTL_S - UP_TIMEOUT_S by construction, however slow `up` is, and a slower
# `up` fails as such (its timeout) instead of as a switch not armed. The budget: a loaded CI machine (three lanes on 2
# cores) took 126 s from the servers' creation to arming; a 2-vCPU AVX2 machine took 4 min 35 s for the whole `up`
# (CI3, 2026-11-27), which left ~1.5 min of the 7m expiry this test had, 30 s above MIN_LEAD_S. Short enough to wait
# for.
UP_TIMEOUT_S = 7 * 60
TTL_S = UP_TIMEOUT_S + es.MIN_LEAD_S + 60  # 60 s more: the clocks read to the second, the SSH of the arming play
TTL = f"{TTL_S // 60}m"
assert TTL_S % 60 == 0, "TTL is given in whole minutes"


@pytest.fixture
def tenant(sandbox_clouds: Path) -> Any:
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(sandbox_clouds)
    conn = openstack.connect(cloud="sandbox")
    yield conn
    es.delete(conn, deployment=DEP)  # whatever a failed test left


def http(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("X-Auth-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def on_server(inventory: str, command: str, host: str | None = None) -> str:
    """A command as root on a server of the deployment (the first one by default), over SSH with the deployment's
    key (the inventory's)."""
    import yaml  # noqa: PLC0415

    hosts = yaml.safe_load(Path(inventory).read_text())["all"]["hosts"]
    h = hosts[host] if host else next(iter(hosts.values()))
    argv = ["ssh", "-i", h["ansible_ssh_private_key_file"], "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", f"{h['ansible_user']}@{h['ansible_host']}",
            f"sudo sh -c '{command}'"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def everything_written_by(zenops: Zenops) -> str:
    """zenops's state, cache, config and working dir (ledger, keys, runs, ansible-runner artifacts) as text, to look
    for a secret."""
    out = []
    for root in (*(Path(zenops.env[v]) for v in ("XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")), zenops.cwd):
        for f in root.rglob("*"):
            if f.is_file() and f.stat().st_size < 5_000_000:
                out.append(f.read_text(errors="replace"))
    return "\n".join(out)


def switch_on(inventory: str, host: str, cred_id: str) -> str:
    """The switch on one server: its credential in a root-only file, the timer waiting; returns the secret."""
    conf = json.loads(on_server(inventory, "cat /etc/zenops-expiry-switch/credential.json", host))
    assert conf["credential_id"] == cred_id
    assert conf["auth_url"].startswith("http://172.30.0.1:5000")  # the internal endpoint: what the server reaches
    modes = on_server(inventory, "stat -c %a /etc/zenops-expiry-switch/credential.json; "
                      "systemctl is-active zenops-expiry-switch.timer", host).split()  # fmt: skip
    assert modes == ["600", "active"]
    return str(conf["credential_secret"])


def refused_but_for_its_delete(cred_id: str, secret: str, sibling_id: str) -> None:
    """The secret buys a token that Nova honours for that DELETE only: listing servers is refused, and so is
    deleting the sibling server of the same deployment."""
    body = {"auth": {"identity": {"methods": ["application_credential"],
                                  "application_credential": {"id": cred_id, "secret": secret}}}}  # fmt: skip
    status, headers, _ = http("POST", "http://127.0.0.1:5000/v3/auth/tokens", body)
    assert status == 201
    token = {k.lower(): v for k, v in headers.items()}["x-subject-token"]
    assert http("GET", "http://127.0.0.1:8774/v2.1/servers", token=token)[0] in (401, 403)
    assert http("DELETE", f"http://127.0.0.1:8774/v2.1/servers/{sibling_id}", token=token)[0] in (401, 403)


def up_within_budget(zenops: Zenops) -> tuple[list[dict[str, Any]], str]:
    """`up --count 2 --ttl TTL`, given UP_TIMEOUT_S (see TTL_S): its output lines and stderr."""
    try:
        code, lines, err = zenops(
            "up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", DEP, "--count", "2", "--ttl", TTL,
            timeout=UP_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"`up` took over {UP_TIMEOUT_S} s, this test's budget for it: its --ttl {TTL} leaves the switch "
                    f"{es.MIN_LEAD_S} s of lead only within it (UP_TIMEOUT_S)")  # fmt: skip
    assert code == 0, err[-3000:]
    return lines, err


def test_a_server_deletes_itself_at_its_expiry_with_no_controller(zenops, other, tenant, admin):
    started = time.monotonic()
    lines, err = up_within_budget(zenops)
    up_s = time.monotonic() - started
    said = err + json.dumps(lines)
    assert "expiry switch armed on 2 server(s)" in said, said[-3000:]
    dep = lines[-1]["deployment"]
    ids = {s["name"]: s["id"] for s in dep["servers"]}
    (first, server_id), (second, sibling_id) = sorted(ids.items())
    expires_at = admin.compute.get_server(server_id).metadata[m.EXPIRES_KEY]
    deadline = m.parse_expiry(expires_at)
    assert deadline is not None

    # the credentials: one per server, each restricted to deleting its own server, expiring after it
    stored = {c.name: c for c in es.owned(tenant, deployment=DEP)}
    assert sorted(stored) == sorted(es.credential_name(DEP, i) for i in ids.values())
    for sid in ids.values():
        cred = stored[es.credential_name(DEP, sid)]
        assert cred.unrestricted is False
        assert [(r["service"], r["method"], r["path"]) for r in cred.access_rules] == [
            ("compute", "DELETE", f"/v2.1/servers/{sid}")
        ]
        assert m.parse_expiry(cred.expires_at) == deadline + timedelta(seconds=es.DEFAULT_MARGIN_S)

    # on each server: a root-only file with its own credential's secret; the timer waits for the expiry
    secrets_seen = [switch_on(dep["inventory"], name, stored[es.credential_name(DEP, sid)].id) for name, sid in
                    ids.items()]  # fmt: skip
    secret = secrets_seen[0]
    assert len(secret) > 20
    assert len(set(secrets_seen)) == 2
    for each in secrets_seen:
        assert each not in err + json.dumps(lines)
        assert each not in everything_written_by(zenops)  # ledger, keys, runs, ansible-runner artifacts

    # the first server's credential: its own DELETE only, not its sibling's
    refused_but_for_its_delete(stored[es.credential_name(DEP, server_id)].id, secret, sibling_id)
    assert admin.compute.find_server(sibling_id, ignore_missing=True) is not None

    # `status` says the server expires and deletes itself then
    code, lines, err = zenops("status", "--cloud", "sandbox")
    assert code == 0, err
    [shown] = [d for d in lines[-1]["deployments"] if d["name"] == DEP]
    assert shown["expiry_switch"]["servers"] == [first, second]
    assert {s["expires_at"] for s in shown["servers"]} == {expires_at}

    # another controller: the credentials are leaks there, with their deployment
    code, lines, _ = other("leaks", "--cloud", "sandbox")
    assert code == ExitCode.LEAKS
    found = next(line for line in lines if line.get("type") == "result")["leaks"]
    listed = [{k: r[k] for k in ("kind", "name", "deployment")} for r in found]
    for name in stored:
        assert {"kind": "application_credential", "name": name, "deployment": DEP} in listed

    # no controller from here on: each server deletes itself at its expiry (the timer fires at it, AccuracySec=1s)
    while any(admin.compute.find_server(i, ignore_missing=True) is not None for i in ids.values()):
        late = time.time() - deadline.timestamp()
        assert late < 180, f"servers {sorted(ids)} still there {late:.0f}s after their expiry {expires_at}"
        time.sleep(3)
    gone_after = time.time() - deadline.timestamp()
    assert gone_after > 0  # not before its time

    code, lines, err = zenops("down", "--deployment", DEP, "--yes")
    assert code == 0, err
    assert "application_credential" in [r["kind"] for r in lines[-1]["removed"]]
    assert es.owned(tenant, deployment=DEP) == []
    no_leaks_of(zenops, DEP)
    print(f"\nup --count 2 --ttl {TTL} (switches armed): {up_s:.0f}s; both deleted themselves {gone_after:.0f}s after")
