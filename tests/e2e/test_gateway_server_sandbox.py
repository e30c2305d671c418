"""`zenops up --cloud --gateway-flavor` on the sandbox cloud, all real: the deployment's serving server runs a real
vLLM (a tiny model, the engine image from the machine's image cache), and the gateway (real HAProxy from Debian's
packages) runs on a small server of its own, marked as the deployment's (``zenops:role=gateway``) and reached by the
operator on the gateway's port, while it reaches the serving server at its fixed address on the API ports, which the
security group opens between the deployment's servers. A completion goes through the gateway; `status` shows the
backend UP; `bench --through-gateway` measures through it. With `scripts/test --full`, then `zenops rollout` to another
model under a load through the gateway: one serving server, so it surges (a new server serves the new model, passes the
gates with the old one as the control, joins the gateway, and the old one is drained and deleted) with no failed
request; and a re-run of `up` without --gateway-flavor keeps both servers (the serving one is now `-2`: adopted, no
`-1` made again). scripts/test runs this module with --full only (the landing runs of 2026-11-28 were CPU-bound and
over their budget; the gateway's landing e2e is the rollout fleet's). Without ZENOPS_E2E_FULL the surge is left out:
a third server with its engine image copied and loaded and two vLLM servers measured at once, 10-15 minutes of a
lane on a 2-core AVX2 machine; the surge strategy's
state machine and revert are unit-tested (tests/unit/test_rollout_*), the in-place strategy runs for real in the
rollout fleet. `down` removes everything, and nothing of the deployment is left in the cloud (asked of the SDK, not
of zenops).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.bounded import run_bounded
from tests.e2e.test_rollout_fleet import SERVED, Load
from zenops.errors import ExitCode
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")
CLOUDS = Path(os.environ.get("ZENOPS_SANDBOX_DIR", REPO / ".cache" / "sandbox")) / "clouds.yaml"
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
# The health gate's bound (a hang guard; `up`'s default is 900 s), which the rollout takes from the deployment's
# request: in --full on a 2-vCPU Intel Xeon (2026-11-30, five lanes, load average 33) the surge's new server had not
# answered /health after 600 s (its API server logged its first line 10 minutes after the rollout began) and the
# rollout reverted. The rollout fleet's `up` allows 1800 s for the same reason.
HEALTH_TIMEOUT_S = 1800
UP_TIMEOUT_S = 3600  # `up` and the surge: a server's image copy and load, the health gate's 1800 s, the gate's bench
DEP = "e2egw"
FLAVOR = "gp.5.2.8"
GATEWAY_FLAVOR = "gp.5.2.8"  # the sandbox's smallest
PORT = 8080
REPORT = REPO / ".cache" / "e2e" / "gateway-server.json"  # the surge's figures, for the notes
FULL = os.environ.get("ZENOPS_E2E_FULL") == "1"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not CLOUDS.is_file():
        if os.environ.get("ZENOPS_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox cloud is required but {CLOUDS} is missing: run scripts/sandbox up")
        pytest.skip("the sandbox cloud is not running (scripts/sandbox up)")
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    home = tmp_path_factory.mktemp("home")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(CLOUDS)
    out = {k: v for k, v in os.environ.items() if k not in ("ZENOPS_CONFIG", "ZENOPS_COLLECTION_ROOT")}
    out["OS_CLIENT_CONFIG_FILE"] = str(CLOUDS)
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        out[var] = str(home / sub)
    return out


def zenops(
    env: dict[str, str], *args: str, cwd: Path, rc: tuple[int, ...] = (0,), timeout: float = 1500
) -> list[dict[str, Any]]:
    proc = run_bounded([ZENOPS, "--json", *args], env=env, cwd=cwd, timeout=timeout)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode in rc, f"exit {proc.returncode}: {json.dumps(lines[-3:])[-3000:]}\n{proc.stderr[-3000:]}"
    return lines


def mine(conn: Any) -> list[Any]:
    return [
        s
        for s in conn.compute.servers(details=True)
        if (s.metadata or {}).get("zenops") == "1" and (s.metadata or {}).get("zenops:deployment") == DEP
    ]


@pytest.fixture
def tenant(env: dict[str, str]) -> Any:
    import openstack  # noqa: PLC0415

    conn = openstack.connect(cloud="sandbox")
    yield conn
    if mine(conn):  # a failed test: nothing of it is left behind
        subprocess.run([ZENOPS, "down", "--deployment", DEP, "--cloud", "sandbox", "--yes"], env=env, check=False)


def complete(url: str, key: str, model: str) -> dict[str, Any]:
    body = {"model": model, "prompt": "The gateway", "max_tokens": 4}
    req = urllib.request.Request(
        f"{url.rstrip('/')}/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def check_cloud_side(env: dict[str, str], tenant: Any, serving: dict[str, Any], gw_server: dict[str, Any]) -> None:
    """The two servers as the cloud has them, the security group's rules, the dynamic inventory's groups."""
    servers = {s.name: s for s in mine(tenant)}
    assert set(servers) == {serving["name"], gw_server["name"]}
    assert servers[gw_server["name"]].metadata.get("zenops:role") == "gateway"
    assert servers[serving["name"]].metadata.get("zenops:role") is None
    assert servers[gw_server["name"]].flavor["original_name"] == GATEWAY_FLAVOR

    # the security group: the API ports between the deployment's servers, the gateway's port to the operator
    sg = tenant.network.find_security_group(f"zenops-{DEP}")
    rules = list(tenant.network.security_group_rules(security_group_id=sg.id, direction="ingress"))
    assert any(r.remote_group_id == sg.id and r.port_range_min == 8000 for r in rules), rules
    assert any(r.port_range_min == PORT and r.remote_ip_prefix for r in rules), rules
    # a gateway fronts the server: its vLLM ports are not open to the operator, only within the group
    assert not any(r.port_range_min == 8000 and r.remote_ip_prefix for r in rules), rules
    assert any(r.remote_group_id == sg.id and r.port_range_min == PORT for r in rules), rules

    # the dynamic inventory example (openstack.cloud.openstack) tells the two apart by their marks
    graph = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(REPO / "inventories/examples/openstack.yml"),
         "--list"],
        env={**env, "ZENOPS_DEPLOYMENT": DEP}, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    groups = json.loads(graph.stdout)
    assert groups["zenops_targets"]["hosts"] == [serving["name"]]
    assert groups["zenops_gateway"]["hosts"] == [gw_server["name"]]


def surge(
    env: dict[str, str],
    tenant: Any,
    tmp_path: Path,
    dep: dict[str, Any],
    gw: dict[str, Any],
    key: str,
    serving: dict[str, Any],
    gw_server: dict[str, Any],
    model_b: Path,
) -> dict[str, Any]:
    """`zenops rollout --model B` on the one-server deployment while a load runs through the gateway: a new server,
    gated (the performance gate runs for real, its limits wide open: two servers measured at once on this machine's
    cores are too noisy for a verdict), in rotation, the old one drained and deleted; no failed request. Returns the
    new server as the cloud has it ({name, id})."""
    t0 = time.monotonic()
    with Load(gw["url"], key) as load:
        time.sleep(3)
        lines = zenops(
            env, "rollout", "--yes", "-i", dep["inventory"], "--model", str(model_b), "--min-healthy", "5",
            "--gate-concurrency", "2", "--gate-prompts", "6", "--gate-output-len", "16",
            "--max-tps-drop", "1", "--max-ttft-rise", "100", "--max-spread", "100", cwd=tmp_path, timeout=UP_TIMEOUT_S,
        )  # fmt: skip
        time.sleep(2)
    roll = lines[-1]
    notes = [str(x.get("message")) for x in lines if x.get("type") == "note"]
    (batch,) = roll["batch_states"]
    figures = {
        "load": load.summary(),
        "wall_s": round(time.monotonic() - t0, 1),
        "surge_s": batch["wall_s"],
        "verdicts": [v["figures"] for v in batch["verdicts"]],
        "notes": notes[-12:],
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(figures, indent=2))
    assert load.failed == 0, figures
    assert load.ok > 5, figures
    assert roll["status"] == "done", roll
    assert roll["retired"] == [serving["name"]], roll
    new_name = batch["surge"]["new"]
    assert new_name == f"zenops-{DEP}-2", batch
    (verdict,) = batch["verdicts"]
    assert verdict["outcome"] == "pass", verdict
    assert verdict["figures"]["new_tok_s"] > 0, verdict
    assert verdict["figures"]["control_tok_s"] > 0, verdict  # the old server, measured at the same time
    # the cloud: the new server and the gateway's, the old one gone
    servers = {s.name: s for s in mine(tenant)}
    assert set(servers) == {new_name, gw_server["name"]}, sorted(servers)
    assert list(yaml.safe_load(Path(dep["inventory"]).read_text())["all"]["hosts"]) == [new_name]
    # the gateway balances the new server only, reached at its fixed address, UP; a completion goes through
    state = zenops(env, "status", "-i", dep["inventory"], cwd=tmp_path)[-1]
    assert [(b["name"], b["status"][:2]) for b in state["backends"]] == [(f"{new_name}-8000", "UP")], state
    answer = complete(gw["url"], key, SERVED)
    assert answer["choices"][0]["text"] is not None, answer
    return {"name": new_name, "id": servers[new_name].id}


def test_gateway_on_a_server_of_its_own_serves_then_goes_with_down(env, tenant, tmp_path):
    model = generate(tmp_path / "tiny-gw", seed=5).path
    up = (
        "up", "--yes", "--cloud", "sandbox", "--flavor", FLAVOR, "--deployment", DEP, "--served-model-name", SERVED,
        "--image-source", "pip", "--base-image", "zenops/bookworm-slim:latest", "--base-image-archive",
        str(BASE_ARCHIVE), "--engine-arg=--enforce-eager", "--health-timeout", str(HEALTH_TIMEOUT_S),
    )  # fmt: skip
    result = zenops(
        env, *up, "--model", str(model), "--gateway-flavor", GATEWAY_FLAVOR, cwd=tmp_path, timeout=UP_TIMEOUT_S
    )[-1]
    dep, gw = result["deployment"], result["gateway"]

    # the gateway's own server: marked as the deployment's, with its role; not a serving host
    (gw_server,) = dep["gateway_servers"]
    (serving,) = dep["servers"]
    assert gw_server["name"] == f"zenops-{DEP}-gw-1"
    assert gw["host"] == gw_server["name"]
    assert gw["inventory"] == dep["gateway_inventory"]
    assert gw_server["name"] not in yaml.safe_load(Path(dep["inventory"]).read_text())["all"]["hosts"]
    assert gw["url"] == f"http://{gw_server['address']}:{PORT}/v1"
    (backend,) = gw["backends"]
    assert backend["address"] == serving["fixed_ip"]  # the fixed address, through the security group's own rule
    check_cloud_side(env, tenant, serving, gw_server)

    # a completion through the gateway, with the deployment's API key
    key = Path(result["api_key_file"]).read_text().strip()
    answer = complete(gw["url"], key, result["model"])
    assert answer["choices"][0]["text"] is not None, answer
    state = zenops(env, "status", "-i", dep["inventory"], cwd=tmp_path)[-1]
    assert [(b["name"], b["status"][:2]) for b in state["backends"]] == [(backend["name"], "UP")], state

    # `bench --through-gateway`: no engine image on the gateway's server, so one client on the serving server, via it
    bench = zenops(
        env, "bench", "-i", dep["inventory"], "--through-gateway", "--concurrency", "2", "--num-prompts", "4",
        "--input-len", "16", "--output-len", "8", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )[-1]  # fmt: skip
    manifest = json.loads((Path(bench["run_dir"]) / "run.json").read_text())
    assert (manifest["target"], manifest["endpoint"]) == ("gateway", gw["url"]), manifest
    (res,) = bench["results"]
    assert res["completed"] == 4, res
    assert not res.get("failed"), res

    # (--full) a rollout to model B under load through the gateway: one serving server, so it surges; then a re-run
    # without --gateway-flavor keeps the gateway's server (the ledger's) and the surge's server (`-2`: no `-1` made
    # again), nothing new is created, nothing restarts
    serving_now = serving["name"]
    if FULL:
        model_b = generate(tmp_path / "tiny-gw-b", seed=6).path
        new = surge(env, tenant, tmp_path, dep, gw, key, serving, gw_server, model_b)
        serving_now = new["name"]
        again = zenops(env, *up, "--model", str(model_b), cwd=tmp_path)[-1]
        assert again["gateway"]["host"] == gw_server["name"]
        assert again["deployment"]["gateway_servers"][0]["id"] == gw_server["id"]
        assert {s.id for s in mine(tenant)} == {new["id"], gw_server["id"]}
    listed = zenops(env, "status", cwd=tmp_path)[-1]
    row = next(d for d in listed["deployments"] if d["name"] == DEP)
    assert {s["name"]: s["role"] for s in row["servers"]} == {serving_now: "serving", gw_server["name"]: "gateway"}
    # what it serves (with --full after the surge: model B's), one instance, behind the gateway's endpoint
    # and the key file a client reads (status --json names it since the quickstart; the key itself is never listed)
    assert row["serving"] == {
        "model": SERVED,
        "endpoint": gw["url"],
        "instances": 1,
        "api_key_file": result["api_key_file"],
    }, row["serving"]
    assert key not in json.dumps(listed)

    # down: the gateway's server goes with the rest; nothing of the deployment is left
    down = zenops(env, "down", "--deployment", DEP, "--cloud", "sandbox", "--yes", cwd=tmp_path)[-1]
    assert any(r.get("name") == gw_server["name"] for r in down["removed"]), down
    assert mine(tenant) == []
    assert tenant.network.find_security_group(f"zenops-{DEP}") is None
    assert not Path(dep["gateway_inventory"]).exists()
    # (exit 10 when the sandbox holds other tests' resources, which this controller does not know)
    lines = zenops(env, "leaks", "--cloud", "sandbox", cwd=tmp_path, rc=(0, ExitCode.LEAKS))
    leaks = next(x for x in lines if x.get("type") == "result")["leaks"]
    assert [r for r in leaks if r["deployment"] == DEP] == [], leaks
