"""An elastic deployment on the sandbox cloud, all real (issue 49's scenario): `zenops up --cloud sandbox --replicas
1..3 --max-price-per-hour 0.30` of a tiny model behind the gateway on a server of its own, where the scaling loop runs
as the service zenops-scaler (zenops itself, its own application credential); a bounded load client sends completions
through the gateway, and the loop is read through `zenops status --json` (its scaler entry: the loop's state file on
the gateway's server, read over SSH) and, between those, the state file itself (`docker exec` into the gateway's
server: a sandbox server is a container of this machine).

The module's tests share one deployment and one load, in order:

1. the load rises: the replicas go from MIN 1 to 2 (MAX 3 capped to 2 by the price: MIN 1 x $0.10 + the gateway's
   $0.10 = $0.20, $0.30 pays for 2), the new server joins the gateway UP, the decision's reason has its figures;
2. (--full) one replica's server is deleted behind zenops's back (openstacksdk): the loop replaces it;
3. (--full) `zenops rollout --model B` while the loop runs under the load: it pauses the loop, takes the replicas the
   loop made (not in this controller's inventory), rolls them all to B, resumes the loop;
4. the load stops: the replicas go back to MIN 1 (drained through the gateway, deleted); the requests are counted:
   none failed but those in flight when the test killed a server (--full), and the counts are printed;
4b. (--full) `zenops image bake` of the remaining server, then the load again: the loop's new replica boots from the
   baked image; its phases beside test 1's cold ones are the "decision to first request, cold vs baked" figures;
5. the plot of the replica count over time (`zenops scale status --plot`, written under .cache/e2e/scaling/, its path
   printed), then `down`: nothing of the deployment left in the cloud (asked of the SDK), the loop's credential gone,
   and the leak checker finds nothing of it.

The policy, shortened for a test where the options allow it: --max-num-seqs 1 (one seat per replica, so four clients
keep three requests waiting: the waiting-requests target is met by a tiny model, which answers in well under a
second), --scale-out-waiting 1 (out when more than one request waits per replica, median over the 60 s window),
--scale-in-load 0.5 (in when running + waiting per replica stays under 0.5, p90 over the 300 s window: idle),
--scale-cooldown 30s (the default 2 min would only add waiting). The windows (out 60 s, in 300 s) and the
self-healing's (a server gone for 60 s) are the defaults: they are not options, and a test-only knob was not needed for
them (one scale-in window is 5 min of the run).

Time (measured on a 2-vCPU Zen 5, 2026-11-29): the `up` with the loop's installation 282-328 s; test 1 about 5 min
(the 60 s window, then a cold scale-out of 185-200 s: provision 39-48 s, Docker 7-8 s, the image tarball copied
and loaded 54-57 s, the model 5-6 s, vLLM's start 34-36 s, into rotation 43-46 s); test 2 (--full) 309 s from the
delete to the replacement in rotation; test 4b (--full): the bake 66 s, then a scale-out from the baked image of 109 s
(the engine image already inside: 3 s). In `scripts/test --full` beside the other lanes (load average about 20) the
whole module took 57 min (the `up` 931 s, the cold scale-out 747 s, the replacement 743 s). --full only (scripts/test
says why).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.e2e.test_gateway_server_sandbox import (
    BASE_ARCHIVE,
    FLAVOR,
    GATEWAY_FLAVOR,
    HEALTH_TIMEOUT_S,
    UP_TIMEOUT_S,
    ZENOPS,
    complete,
    env,  # noqa: F401  (a fixture)
    zenops,
)
from tests.e2e.test_rollout_fleet import SERVED, Load, in_host
from zenops.deployment.services.scaler import HOST_STATE
from zenops.errors import ExitCode
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
DEP = "e2esc"
PRICE = 0.10  # $/h of the sandbox's flavor (the catalogue has no price for it: ./zenops.yaml gives one)
CAP = 0.30  # --max-price-per-hour: 1..3 capped to 1..2
POLICY = ("--scale-out-waiting", "1", "--scale-in-load", "0.5", "--scale-cooldown", "30s")
RUNS = REPO / ".cache" / "e2e" / "scaling"  # the figures and the plot, for the notes
STATE_FILE = f"{HOST_STATE}/scaling/{DEP}.json"  # the loop's state file on the gateway's server
POLL_S = 10.0
# A new server's wait (a scale-out, a replacement): created, its image shipped and loaded, its health gate (the
# deployment's HEALTH_TIMEOUT_S, which the loop's `up` takes): the bound of an `up`. In --full on a 2-vCPU Intel Xeon
# (2026-11-30, load average 33) the first scale-out's server had not answered /health after the 600 s then allowed,
# 24 minutes after the decision; the wait of 1800 s ran out before the loop's next try.
NEW_SERVER_S = UP_TIMEOUT_S


@dataclass
class Scenario:
    env: dict[str, str]
    work: Path
    conn: Any
    inventory: str = ""
    url: str = ""
    key: str = ""
    gateway_id: str = ""
    model_b: Path = Path()
    load: Load | None = None  # the steady load, from test 1 to test 4 (its requests are counted)
    bursts: list[Load] = field(default_factory=list)  # the loads that made the loop scale out (counted too)
    kill: tuple[float, float] | None = None  # the killed server: (delete asked, gone), epoch s
    killed: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    down: bool = False

    def zenops(self, *args: str, timeout: float = 1500, rc: tuple[int, ...] = (0,)) -> list[dict[str, Any]]:
        return zenops(self.env, *args, cwd=self.work, timeout=timeout, rc=rc)


def mine(conn: Any) -> list[Any]:
    return [
        s
        for s in conn.compute.servers(details=True)
        if (s.metadata or {}).get("zenops") == "1" and (s.metadata or {}).get("zenops:deployment") == DEP
    ]


def serving(conn: Any) -> dict[str, Any]:
    """The deployment's serving servers as the cloud has them (name -> server): the gateway's left out."""
    return {s.name: s for s in mine(conn) if (s.metadata or {}).get("zenops:role") != "gateway"}


def loop_state(s: Scenario) -> dict[str, Any] | None:
    """The loop's state file on the gateway's server, as it is now (None: not written yet)."""
    try:
        return dict(json.loads(in_host(s.gateway_id, "cat", STATE_FILE)))
    except (subprocess.CalledProcessError, ValueError):
        return None


def said(st: dict[str, Any] | None) -> str:
    """The loop's state in a few lines, for a failure's message."""
    if st is None:
        return "(no state written)"
    keep = ("phase", "step", "stopped", "actual", "target", "replicas", "last")
    return json.dumps({**{k: st.get(k) for k in keep}, "decisions": st.get("decisions", [])[-6:]}, indent=1)


def wait_loop(s: Scenario, done: Callable[[dict[str, Any]], bool], *, timeout: float, what: str) -> dict[str, Any]:
    """Poll the loop's state until ``done`` says so; a failure names ``what`` and shows where the loop was."""
    end = time.monotonic() + timeout
    st = None
    while time.monotonic() < end:
        st = loop_state(s)
        if st is not None and done(st):
            return st
        if st is not None and st.get("phase") == "stopped":
            pytest.fail(f"the loop stopped while waiting for {what}:\n{said(st)}")
        time.sleep(POLL_S)
    pytest.fail(f"{what}: not within {timeout:.0f} s\n{said(st)}")


def decided(st: dict[str, Any], action: str, *, after: float = 0.0) -> bool:
    """Whether the loop decided ``action`` since ``after`` (epoch s), done or still in flight."""
    return any(
        d.get("action") == action and datetime.fromisoformat(str(d["at"])).timestamp() >= after - 1
        for d in st.get("decisions") or []
    )


def burst_until_out(s: Scenario, after: float) -> None:
    """Four clients without a pause (one seat per replica: three requests wait) until the loop decides a scale-out,
    then they stop. Only that long: this machine's two cores are every sandbox server's, and a saturated vLLM
    busy-polls them; under a burst kept on, the new server's vLLM worker got 1.3 CPU-s in ten minutes and failed its
    health gate (seen on the first runs). The steady load (2 clients, a request every 2.5 s) goes on meanwhile."""
    burst = Load(s.url, s.key, workers=4, pause=0.0, max_tokens=16).__enter__()
    s.bursts.append(burst)
    try:
        wait_loop(s, lambda st: decided(st, "out", after=after), timeout=900, what="the loop to decide a scale-out")
    finally:
        burst.__exit__(None, None, None)


def acted(st: dict[str, Any], action: str, *, after: float = 0.0) -> list[dict[str, Any]]:
    """The loop's decisions of ``action`` done since ``after`` (epoch s)."""
    return [
        d
        for d in st.get("decisions") or []
        if d.get("action") == action
        and str(d.get("result") or "").startswith("done")
        and datetime.fromisoformat(str(d["at"])).timestamp() >= after - 1
    ]


def scaler_entry(s: Scenario) -> dict[str, Any]:
    """`zenops status --json`'s scaler entry ({state, live: {host, active, state}}) and the gateway's backends."""
    out = s.zenops("status", "-i", s.inventory)[-1]
    entry = dict(out["services"]["scaler"])
    assert "error" not in entry, entry
    return {**entry, "backends": out["backends"]}


def up_backends(s: Scenario, names: set[str]) -> None:
    """The gateway balances exactly ``names``' servers, every one UP."""
    backends = scaler_entry(s)["backends"]
    assert sorted((b["name"], b["status"][:2]) for b in backends) == [(f"{n}-8000", "UP") for n in sorted(names)]


def release_of(server_id: str) -> str:
    """The model directory a server's vLLM was started with (its container's command's first word)."""
    inspect = json.loads(in_host(server_id, "docker", "inspect", "zenops-vllm-0"))[0]
    assert inspect["State"]["Running"], inspect["State"]
    return Path((inspect["Config"]["Cmd"] or ["?"])[0]).name


def counts(log: list[tuple[float, float, bool]], kill: tuple[float, float] | None) -> dict[str, int]:
    """The load's requests: sent, ok, failed; those in flight when the test killed a server (sent before it was gone,
    not answered before its delete was asked), how many of those failed, and how many failed outside them (must
    be 0: the gateway drains before a scale-in and takes a dead server out; only what was on the killed one fails)."""
    in_flight = [r for r in log if kill is not None and r[0] < kill[1] and r[1] > kill[0]]
    failed = [r for r in log if not r[2]]
    return {
        "requests": len(log),
        "ok": len(log) - len(failed),
        "failed": len(failed),
        "in_flight_at_kill": len(in_flight),
        "failed_in_flight_at_kill": sum(1 for r in in_flight if not r[2]),
        "failed_otherwise": sum(1 for r in failed if r not in in_flight),
    }


def save_plot(s: Scenario, st: dict[str, Any] | None) -> Path | None:
    """`zenops scale status --plot` of the loop's state ``st`` (as `zenops status` read it), put where `zenops scale
    status` reads it on the loop's host (its state dir), then plotted; the path printed. None: no state."""
    if st is None:
        return None
    RUNS.mkdir(parents=True, exist_ok=True)
    (RUNS / "state.json").write_text(json.dumps(st, indent=1))
    home = s.work / "plot-home"
    (home / "zenops" / "scaling").mkdir(parents=True, exist_ok=True)
    (home / "zenops" / "scaling" / f"{DEP}.json").write_text(json.dumps(st))
    png = RUNS / "replicas.png"
    on_host = {**s.env, "XDG_STATE_HOME": str(home)}
    out = zenops(on_host, "scale", "status", DEP, "--plot", str(png), cwd=s.work)[-1]
    assert out["plot"] == str(png), out
    print(f"\nreplicas over time: {png}")
    return png


@pytest.fixture(scope="module")
def scenario(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:  # noqa: F811
    import openstack  # noqa: PLC0415

    work = tmp_path_factory.mktemp("scaling")
    (work / "zenops.yaml").write_text(f"flavors:\n  {FLAVOR}: {{vcpus: 2, ram_gb: 8, price_per_hour: {PRICE}}}\n")
    # the loop's wheelhouse is built under this test's XDG_CACHE_HOME (built and installed for real each run); pip's
    # own cache is the machine's, so its `pip download` of zenops's requirements does not fetch them all again
    pip_cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    s = Scenario({**env, "PIP_CACHE_DIR": pip_cache}, work, openstack.connect(cloud="sandbox"))
    model = generate(work / "tiny-sc-a", seed=11).path
    s.model_b = generate(work / "tiny-sc-b", seed=12).path
    up = (
        "up", "--yes", "--cloud", "sandbox", "--flavor", FLAVOR, "--deployment", DEP, "--served-model-name", SERVED,
        "--image-source", "pip", "--base-image", "zenops/bookworm-slim:latest", "--base-image-archive",
        str(BASE_ARCHIVE), "--engine-arg=--enforce-eager", "--health-timeout", str(HEALTH_TIMEOUT_S),
        "--max-num-seqs", "1",
        "--gateway-flavor", GATEWAY_FLAVOR, "--replicas", "1..3", "--max-price-per-hour", str(CAP), *POLICY,
        "--model", str(model),
    )  # fmt: skip
    t0 = time.monotonic()
    try:
        lines = s.zenops(*up, timeout=UP_TIMEOUT_S)
        s.figures["up_s"] = round(time.monotonic() - t0, 1)
        result = lines[-1]
        notes = " ".join(str(x.get("message")) for x in lines if x.get("type") == "note")
        assert "MAX 3 lowered to 2" in notes, notes[-2000:]
        dep, gw = result["deployment"], result["gateway"]
        (gw_server,) = dep["gateway_servers"]
        s.inventory, s.url, s.gateway_id = dep["inventory"], gw["url"], gw_server["id"]
        s.key = Path(result["api_key_file"]).read_text().strip()
        scaler = result["services"]["scaler"]
        assert (scaler["host"], scaler["replicas"]) == (gw_server["name"], {"min": 1, "max": 2}), scaler
        yield s
    finally:
        for load in [s.load, *s.bursts]:
            if load is not None:
                load.__exit__(None, None, None)
        RUNS.mkdir(parents=True, exist_ok=True)
        (RUNS / "figures.json").write_text(json.dumps(s.figures, indent=2))
        if not s.down:  # a failed test: the plot if there is a state, then nothing of the deployment is left
            try:
                save_plot(s, loop_state(s))
            except Exception as e:  # the teardown goes on
                print(f"no plot: {e}")
            subprocess.run([ZENOPS, "down", "--deployment", DEP, "--cloud", "sandbox", "--yes"], env=s.env, check=False)


def test_1_load_rises_and_the_loop_adds_a_replica_behind_the_gateway(scenario: Scenario) -> None:
    s = scenario
    from zenops.cloud import scaler_cred  # noqa: PLC0415

    # the loop runs on the gateway's server, with its own credential: restricted, the deployment's only
    wait_loop(s, lambda st: bool(st.get("series")), timeout=300, what="the loop's first tick")
    entry = scaler_entry(s)
    assert entry["live"]["active"] == "active", entry["live"]
    st = entry["live"]["state"]
    assert st is not None, entry
    assert (st["replicas"], st["cap_per_hour"], st["actual"]) == ({"min": 1, "max": 2}, CAP, 1), said(st)
    assert st["policy"]["scale_out"]["value"] == 1, st["policy"]
    assert st["policy"]["scale_in"]["value"] == 0.5, st["policy"]
    assert st["policy"]["cooldown_s"] == 30, st["policy"]
    (cred,) = scaler_cred.owned(s.conn, deployment=DEP)
    assert cred.unrestricted is False
    (first,) = serving(s.conn)
    up_backends(s, {first})

    # a burst: three requests wait per replica; the loop adds a replica (MAX 2), the steady load runs throughout
    started = time.time()
    s.load = Load(s.url, s.key).__enter__()
    burst_until_out(s, started)
    st = wait_loop(
        s, lambda st: st["actual"] == 2 and st["phase"] == "idle" and bool(acted(st, "out", after=started)),
        timeout=NEW_SERVER_S, what="the replicas to go from 1 to 2 under the load",
    )  # fmt: skip
    (out,) = acted(st, "out", after=started)
    assert out["current"] == 1, out
    assert out["target"] == 2, out
    assert "waiting/replica" in out["reason"], out  # with its figures: "waiting/replica 3 > 1 over 60 s (...)"
    assert " > 1 " in out["reason"], out
    now = serving(s.conn)
    assert len(now) == 2, sorted(now)
    assert first in now, sorted(now)
    up_backends(s, set(now))
    # `zenops status` from this machine says what the loop says
    live = scaler_entry(s)["live"]["state"]
    assert (live["actual"], live["target"]) == (2, 2), said(live)
    assert s.load.failed == 0, s.load.summary()
    assert s.bursts[-1].failed == 0, s.bursts[-1].summary()
    s.figures["scale_out"] = {
        "decided": out, "load": s.load.summary(), "burst": s.bursts[-1].summary(),
        "wait_s": round(time.time() - started, 1),
    }  # fmt: skip


@pytest.mark.full
def test_2_a_replica_deleted_behind_zenops_back_is_replaced(scenario: Scenario) -> None:
    s = scenario
    assert s.load is not None, "test 1 did not leave the load running"
    before = serving(s.conn)
    assert len(before) == 2, sorted(before)
    s.killed = f"zenops-{DEP}-1"
    victim = before[s.killed]
    t_kill = time.time()
    s.conn.compute.delete_server(victim.id)
    s.conn.compute.wait_for_delete(victim, wait=300)
    s.kill = (t_kill, time.time())
    st = wait_loop(
        s, lambda st: st["actual"] == 2 and st["phase"] == "idle" and bool(acted(st, "heal", after=t_kill)),
        timeout=NEW_SERVER_S, what=f"{s.killed} (deleted behind zenops's back) to be replaced",
    )  # fmt: skip
    (heal,) = acted(st, "heal", after=t_kill)
    assert heal["replicas"] == [s.killed], heal
    assert re.search(r"server (MISSING|DELETED)", heal["reason"]), heal
    now = serving(s.conn)
    assert len(now) == 2, sorted(now)
    assert victim.id not in {v.id for v in now.values()}, sorted(now)  # a new server (in the replaced one's place,
    # under its name)
    up_backends(s, set(now))
    s.figures["heal"] = {"decided": heal, "replaced_in_s": round(time.time() - t_kill, 1)}


@pytest.mark.full
def test_3_a_rollout_during_scaling_takes_every_replica_to_the_new_release(scenario: Scenario) -> None:
    s = scenario
    assert s.load is not None, "test 1 did not leave the load running"
    servers = serving(s.conn)  # made by the loop (test 1's, test 2's replacement): not in this machine's inventory
    t0 = time.time()
    lines = s.zenops(
        "rollout", "--yes", "-i", s.inventory, "--model", str(s.model_b), "--min-healthy", "5", "--no-perf-gate",
        timeout=3600,
    )  # fmt: skip
    roll = lines[-1]
    assert roll["status"] == "done", roll
    after = serving(s.conn)
    assert set(after) <= set(servers), (sorted(servers), sorted(after))  # in place: the same ones (the loop, paused,
    # may have scaled in before the pause: the steady load alone is under the scale-in target)
    assert {n: release_of(v.id) for n, v in after.items()} == dict.fromkeys(after, s.model_b.name)
    # the loop was paused for it, and runs again with the fleet as the rollout left it
    st = wait_loop(s, lambda st: st["phase"] == "idle", timeout=300, what="the loop to resume after the rollout")
    assert st["actual"] == len(after), said(st)
    up_backends(s, set(after))
    during = counts([r for r in s.load.log if r[0] >= t0], None)
    assert during["failed"] == 0, (during, s.load.errors[-5:])
    s.figures["rollout"] = {"wall_s": round(time.time() - t0, 1), "load": during}


def test_4_load_stops_and_the_loop_goes_back_to_min(scenario: Scenario) -> None:
    s = scenario
    assert s.load is not None, "test 1 did not leave the load running"
    s.load.__exit__(None, None, None)
    stopped = time.time()
    c = counts(sorted([*s.load.log, *(r for b in s.bursts for r in b.log)]), s.kill)
    s.figures["requests"] = {**c, "killed": s.killed, "errors": s.load.errors[:8]}
    print(f"\nrequests through the gateway: {json.dumps(s.figures['requests'])}")
    s.load = None
    assert c["requests"] > 20, c
    assert c["failed_otherwise"] == 0, s.figures["requests"]  # only what was in flight on the killed server
    assert c["failed"] <= 4, c  # at most one per client

    # (the steady load alone is under the scale-in target: the loop may have scaled in already, after test 1's)
    out_t = datetime.fromisoformat(str(s.figures["scale_out"]["decided"]["at"])).timestamp()
    st = wait_loop(
        s, lambda st: st["actual"] == 1 and st["phase"] == "idle" and bool(acted(st, "in", after=out_t)),
        timeout=1500, what="the replicas to go back to MIN 1 once the load stopped",
    )  # fmt: skip
    in_ = acted(st, "in", after=out_t)[-1]
    assert "running+waiting/replica" in in_["reason"], in_
    assert " < 0.5 " in in_["reason"], in_
    (left,) = serving(s.conn)
    up_backends(s, {left})
    answer = complete(s.url, s.key, SERVED)
    assert answer["choices"][0]["text"] is not None, answer
    s.figures["scale_in"] = {"decided": in_, "wait_s": round(time.time() - stopped, 1)}


@pytest.mark.full
def test_4b_a_baked_image_and_the_next_scale_out_boots_from_it(scenario: Scenario) -> None:
    """`zenops image bake` of the serving server (the loop paused and given the image), then the load again: the
    loop's new replica boots from the baked image. Its phases beside the cold scale-out's (test 1) are the figures
    for "decision to first request served, cold vs baked" (printed and kept in figures.json; not asserted: a time)."""
    s = scenario
    lines = s.zenops("image", "bake", DEP, "--cloud", "sandbox", timeout=3600)
    baked = lines[-1]
    assert baked["deployment"] == DEP, baked
    assert baked["image_id"], baked
    s.figures["bake"] = {k: baked.get(k) for k in ("image_id", "size", "seconds", "server", "reused")}
    st = wait_loop(s, lambda st: st["phase"] == "idle", timeout=300, what="the loop to resume after the bake")
    assert st["actual"] == 1, said(st)

    started = time.time()
    burst_until_out(s, started)
    st = wait_loop(
        s, lambda st: st["actual"] == 2 and st["phase"] == "idle" and bool(acted(st, "out", after=started)),
        timeout=NEW_SERVER_S, what="the replicas to go from 1 to 2 again, from the baked image",
    )  # fmt: skip
    warm = s.bursts[-1].summary()
    (out,) = acted(st, "out", after=started)
    replicas = serving(s.conn)
    from_image = {n: str((v.image or {}).get("id")) for n, v in replicas.items()}
    assert baked["image_id"] in from_image.values(), from_image  # the loop's replica booted from the baked image
    cold = (s.figures.get("scale_out") or {}).get("decided", {}).get("phases")
    s.figures["scale_out_baked"] = {"decided": out, "load": warm, "wait_s": round(time.time() - started, 1)}
    print(f"\nscale-out phases, cold: {cold}\nscale-out phases, baked: {out.get('phases')}")
    assert out.get("phases", {}).get("total"), out


def test_5_the_plot_then_down_leaves_nothing(scenario: Scenario) -> None:
    s = scenario
    from zenops.cloud import scaler_cred  # noqa: PLC0415

    png = save_plot(s, scaler_entry(s)["live"]["state"])
    assert png is not None
    assert png.read_bytes()[:4] == b"\x89PNG"
    s.zenops("down", "--deployment", DEP, "--cloud", "sandbox", "--yes")
    s.down = True
    assert mine(s.conn) == []
    assert s.conn.network.find_security_group(f"zenops-{DEP}") is None
    assert scaler_cred.owned(s.conn, deployment=DEP) == []  # the loop's credential went with it
    lines = s.zenops("leaks", "--cloud", "sandbox", rc=(0, ExitCode.LEAKS))
    leaks = next(x for x in lines if x.get("type") == "result")["leaks"]
    assert [r for r in leaks if r["deployment"] == DEP] == [], leaks
