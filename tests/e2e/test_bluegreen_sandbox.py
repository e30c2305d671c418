"""`zenops rollout --strategy blue-green` on the sandbox cloud, all real: a two-server deployment (`up --cloud --count 2
--gateway-flavor`: real vLLM on each, a tiny model, HAProxy on a small server of its own) rolls to another model
under a load through the gateway. Blue/green: a whole new set of two servers is made and serves the new model, passes
the gates (each new server against an old one's baseline, the old one measured at the same time; the limits wide
open: four servers measured at once on this machine's cores are too noisy for a verdict), then the gateway switches
to the new set at once (the new set in rotation, the whole old set drained in one step, the backends the new set
only) and the old set is deleted, with no failed request. `status` shows the new set's backends UP; a completion goes
through; `down` removes everything, and nothing of the deployment is left in the cloud (asked of the SDK).

Marked ``full``: five servers (two, two more, the gateway's), four vLLM servers at once, 20-30 minutes of a lane on
a 2-core machine; the landing run keeps the surge (tests/e2e/test_gateway_server_sandbox.py, its --full part) and the
strategy's state machine, revert and resume are unit-tested (tests/unit/test_rollout_bluegreen.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.test_gateway_server_sandbox import (
    BASE_ARCHIVE,
    FLAVOR,
    GATEWAY_FLAVOR,
    complete,
    env,  # noqa: F401  (a fixture)
    zenops,
)
from tests.e2e.test_rollout_fleet import SERVED, Load
from zenops.errors import ExitCode
from zenops.tinymodel import generate

pytestmark = [pytest.mark.e2e, pytest.mark.full]
DEP = "e2ebg"
REPORT = REPO / ".cache" / "e2e" / "bluegreen.json"  # the figures, for the notes


def mine(conn: Any) -> list[Any]:
    return [
        s
        for s in conn.compute.servers(details=True)
        if (s.metadata or {}).get("zenops") == "1" and (s.metadata or {}).get("zenops:deployment") == DEP
    ]


@pytest.fixture
def tenant(env: dict[str, str]) -> Any:  # noqa: F811
    import subprocess  # noqa: PLC0415

    import openstack  # noqa: PLC0415

    from tests.e2e.test_gateway_server_sandbox import ZENOPS  # noqa: PLC0415

    conn = openstack.connect(cloud="sandbox")
    yield conn
    if mine(conn):  # a failed test: nothing of it is left behind
        subprocess.run([ZENOPS, "down", "--deployment", DEP, "--cloud", "sandbox", "--yes"], env=env, check=False)


def blue_green(
    environ: dict[str, str], tmp_path: Path, inventory: str, url: str, key: str, old: list[str], model_b: Path
) -> list[str]:
    """`zenops rollout --strategy blue-green --model B` under a load through the gateway: no failed request, both
    new servers pass the gate with an old one as the control, the old set is retired. Returns the new set."""
    t0 = time.monotonic()
    with Load(url, key) as load:
        time.sleep(3)
        lines = zenops(
            environ, "rollout", "--yes", "-i", inventory, "--model", str(model_b), "--strategy", "blue-green",
            "--min-healthy", "5", "--gate-concurrency", "2", "--gate-prompts", "6", "--gate-output-len", "16",
            "--max-tps-drop", "1", "--max-ttft-rise", "100", "--max-spread", "100", cwd=tmp_path, timeout=3600,
        )  # fmt: skip
        time.sleep(2)
    roll = lines[-1]
    (batch,) = roll["batch_states"]
    figures = {
        "load": load.summary(),
        "wall_s": round(time.monotonic() - t0, 1),
        "batch_wall_s": batch["wall_s"],
        "phases": batch["phases"],
        "verdicts": [v["figures"] for v in batch["verdicts"]],
        "notes": [str(x.get("message")) for x in lines if x.get("type") == "note"][-14:],
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(figures, indent=2))
    assert load.failed == 0, figures
    assert load.ok > 5, figures
    assert roll["status"] == "done", roll
    assert roll["retired"] == old, roll
    own = batch["blue-green"]
    new = sorted(own["new"])
    assert new == [f"zenops-{DEP}-3", f"zenops-{DEP}-4"], own
    assert own["deleted"] == old, own
    assert own["retiring"] is True, own
    assert [v["outcome"] for v in batch["verdicts"]] == ["pass", "pass"], batch["verdicts"]
    for v in batch["verdicts"]:
        assert v["figures"]["new_tok_s"] > 0, v
        assert v["figures"]["control_tok_s"] > 0, v  # the old server, measured at the same time
    return new


def test_blue_green_rolls_a_whole_new_set_behind_the_gateway_then_down_leaves_nothing(env, tenant, tmp_path):  # noqa: F811
    model = generate(tmp_path / "tiny-bg", seed=7).path
    up = (
        "up", "--yes", "--cloud", "sandbox", "--flavor", FLAVOR, "--count", "2", "--deployment", DEP,
        "--served-model-name", SERVED, "--image-source", "pip", "--base-image", "zenops/bookworm-slim:latest",
        "--base-image-archive", str(BASE_ARCHIVE), "--engine-arg=--enforce-eager", "--health-timeout", "600",
        "--gateway-flavor", GATEWAY_FLAVOR,
    )  # fmt: skip
    result = zenops(env, *up, "--model", str(model), cwd=tmp_path, timeout=2400)[-1]
    dep, gw = result["deployment"], result["gateway"]
    old = sorted(s["name"] for s in dep["servers"])
    (gw_server,) = dep["gateway_servers"]
    assert old == [f"zenops-{DEP}-1", f"zenops-{DEP}-2"], old
    assert sorted(b["name"] for b in gw["backends"]) == [f"{h}-8000" for h in old], gw
    key = Path(result["api_key_file"]).read_text().strip()

    # the dry run: one batch of the whole fleet, nothing made
    model_b = generate(tmp_path / "tiny-bg-b", seed=8).path
    plan = zenops(env, "rollout", "-i", dep["inventory"], "--model", str(model_b), "--strategy", "blue-green",
                  "--dry-run", cwd=tmp_path)[-1]  # fmt: skip
    assert plan["batches"] == [old], plan
    assert plan["batch_states"][0]["strategy"] == "blue-green", plan
    assert sorted(s.name for s in mine(tenant)) == sorted([*old, gw_server["name"]])

    new = blue_green(env, tmp_path, dep["inventory"], gw["url"], key, old, model_b)

    # the cloud: the new set and the gateway's server, the old set gone; the inventory names the new set
    servers = {s.name: s for s in mine(tenant)}
    assert set(servers) == {*new, gw_server["name"]}, sorted(servers)
    assert sorted(yaml.safe_load(Path(dep["inventory"]).read_text())["all"]["hosts"]) == new
    # the gateway balances the new set only, reached at their fixed addresses, UP; a completion goes through
    state = zenops(env, "status", "-i", dep["inventory"], cwd=tmp_path)[-1]
    assert sorted((b["name"], b["status"][:2]) for b in state["backends"]) == [(f"{h}-8000", "UP") for h in new], state
    answer = complete(gw["url"], key, SERVED)
    assert answer["choices"][0]["text"] is not None, answer
    listed = zenops(env, "status", cwd=tmp_path)[-1]
    row = next(d for d in listed["deployments"] if d["name"] == DEP)
    assert {s["name"]: s["role"] for s in row["servers"]} == {
        **dict.fromkeys(new, "serving"),
        gw_server["name"]: "gateway",
    }

    # down: everything goes; nothing of the deployment is left
    zenops(env, "down", "--deployment", DEP, "--cloud", "sandbox", "--yes", cwd=tmp_path)
    assert mine(tenant) == []
    assert tenant.network.find_security_group(f"zenops-{DEP}") is None
    lines = zenops(env, "leaks", "--cloud", "sandbox", cwd=tmp_path, rc=(0, ExitCode.LEAKS))
    leaks = next(x for x in lines if x.get("type") == "result")["leaks"]
    assert [r for r in leaks if r["deployment"] == DEP] == [], leaks
