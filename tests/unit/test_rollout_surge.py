"""`zenops rollout` on a one-server cloud deployment: the surge (a new server first, the old one deleted once the new
one passed the gates). Through the CLI, with a TEST DOUBLE (`Surge` below) for what needs a cloud, Ansible and
HAProxy: zenops.deployment.surge.add_server / retire_server / surge_preflight, the rollout's serve and bench steps
and the gateway's update, ready and drain. It records the calls in order and keeps the ledger as the real ones do.
The real path runs in tests/e2e/test_gateway_server_sandbox.py (sandbox cloud, real vLLM and HAProxy)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.unit.cloud_double import AddingCloud
from tests.unit.test_rollout_cli import Fleet, flat, models, result_of, rollout  # noqa: F401  (models: a fixture)
from zenops.cloud import ledger
from zenops.cloud.errors import QuotaExceededError
from zenops.config import load
from zenops.deployment import surge as deploy
from zenops.deployment.identity import inventory_name
from zenops.deployment.record import load_serving_record
from zenops.deployment.rollouts import Ledger
from zenops.deployment.services import gateway as gw_lib
from zenops.errors import ExitCode, HostFailure, RunFailedError
from zenops.rollout import gates
from zenops.rollout import run as rollout_run

OLD, NEW = "fle-1", "fle-2"


class Surge(AddingCloud):
    """TEST DOUBLE of the cloud, the Ansible runs and HAProxy for a surge (tests/unit/cloud_double.py), adding the
    new server; ``new_runs``: the new server's tok/s of its next gate runs, in order (then ``tok_s``)."""

    def __init__(self, fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(fleet, monkeypatch, old=[OLD], new=[NEW])
        self.new_runs: list[float] = []
        monkeypatch.setattr(deploy, "surge_preflight", self.surge_preflight)
        monkeypatch.setattr(deploy, "add_server", self.add_server)

    def surge_preflight(self, ctx: Any, dep: ledger.Deployment) -> None:
        self.calls.append(f"preflight {len(dep.servers) + 1}")
        if not self.quota_ok:
            raise QuotaExceededError("cloud 'c': 1 more server(s) of gp.5.2.8 do not fit: instances 1 > 0 left")

    def add_server(
        self, ctx: Any, dep: ledger.Deployment, *, keep: str, gateway_port: int
    ) -> tuple[str, ledger.Deployment]:
        assert (keep, gateway_port) == (OLD, 8080)
        self.in_cloud.add(NEW)
        self.step("add", [NEW])
        dep.servers = [s for s in dep.servers if s["name"] != NEW]  # adopted when there
        dep.servers.append({"name": NEW, "id": "id2", "fixed_ip": "10.0.0.2", "address": "10.0.0.2"})
        dep.count = len(dep.servers)
        ledger.save(self.fleet.config.state_dir, dep)
        return NEW, dep

    def measured(self, host: str) -> float:
        if host == NEW and self.new_runs:
            return self.new_runs.pop(0)
        return super().measured(host)


@pytest.fixture
def cloud_fleet(isolated_home, tmp_path, monkeypatch, models) -> Fleet:  # noqa: F811
    """A one-server deployment as `zenops up --cloud c --deployment fle --gateway-flavor ...` leaves it: its serving
    record (gateway on fle-gw-1) and its ledger entry naming the same inventory."""
    monkeypatch.chdir(tmp_path)
    config = load()
    fleet = Fleet(config, tmp_path / "fle.inventory.yml", models)
    record = fleet.serve([OLD])
    gw = gw_lib.Gateway.from_dict(record.gateway)
    gw = dataclasses.replace(gw, host="fle-gw-1", inventory=str(tmp_path / "fle.gateway.inventory.yml"),
                             addresses={OLD: "10.0.0.1"})  # fmt: skip
    from zenops.deployment.record import save_serving_record  # noqa: PLC0415

    save_serving_record(config, fleet.inventory, record.with_services({"gateway": gw.to_dict()}))
    dep = ledger.Deployment(
        name="fle", cloud="c", flavor="gp.5.2.8", image="debian-12", count=1, network_mode="provider",
        price_per_hour=0.1, status="ready", inventory=str(fleet.inventory),
        servers=[{"name": OLD, "id": "id1", "fixed_ip": "10.0.0.1", "address": "10.0.0.1"}],
        gateway_flavor="gp.5.2.8", gateway_servers=[{"name": "fle-gw-1", "id": "g1", "fixed_ip": "10.0.0.9"}],
    )  # fmt: skip
    ledger.save(config.state_dir, dep)
    return fleet


def new_model(fleet: Fleet) -> str:
    return str(fleet.models / "tiny-b")


ROLL = ("--min-healthy", "0", "--json", "--yes")


def test_one_own_host_is_refused_naming_allow_downtime_and_the_surge(run, cloud_fleet):
    ledger.remove(cloud_fleet.config.state_dir, "c", "fle")  # not a cloud deployment of this controller: own hosts
    r = rollout(run, cloud_fleet, "--max-num-seqs", "8", "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    text = flat(r.output)
    assert "a one-host deployment cannot roll without downtime" in text
    assert "--allow-downtime" in text
    assert "surging" in text


def test_one_cloud_server_with_its_gateway_on_it_is_refused_naming_gateway_flavor(run, cloud_fleet):
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    dep.gateway_servers, dep.gateway_flavor = [], None
    ledger.save(cloud_fleet.config.state_dir, dep)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--gateway-flavor" in flat(r.output)


def test_no_room_for_the_surge_server_is_refused_before_anything(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.quota_ok = False
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.QUOTA, r.output
    assert "no room for the surge's new server" in flat(r.output)
    assert double.calls == ["preflight 2"]
    assert Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load() is None  # no rollout begun


def test_a_surge_without_yes_and_without_a_terminal_is_refused_before_anything(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--min-healthy", "0")
    assert r.exit_code == ExitCode.USAGE, r.output
    text = flat(r.output)
    assert "zenops rollout would create 1 server(s) ($0.10/h, $73.00/month" in text
    assert "pass --yes" in text
    assert double.calls == ["preflight 2"]  # checked, nothing created, measured or served
    assert Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load() is None  # no rollout begun


def test_dry_run_plans_a_surge(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    res = result_of(r.output)
    assert res["batches"] == [[OLD]]
    assert res["batch_states"][0]["strategy"] == "surge"
    assert res["batch_states"][0]["surge"] == {
        "old": OLD, "new": None, "new_address": None, "retiring": False, "old_retired": False,
    }  # fmt: skip
    assert double.calls == ["preflight 2"]


def test_surge_new_server_gated_then_in_rotation_then_the_old_one_drained_and_deleted(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert double.calls == [
        "preflight 2",
        f"bench {OLD}", f"bench {OLD}",  # the baseline
        f"add {NEW}",
        f"serve {NEW},tiny-b",
        f"bench {OLD},{NEW}",  # the gate: the old server is the control, measured at the same time
        f"gateway {OLD}-8000@10.0.0.1,{NEW}-8000@10.0.0.2",
        f"ready {NEW}-8000",
        f"drain {OLD}-8000",  # only once the new one serves
        f"retire {OLD}",
        f"gateway {NEW}-8000@10.0.0.2",
    ]  # fmt: skip
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == sorted(record.endpoints) == [NEW]
    assert Path(record.request["model"]).name == "tiny-b"
    assert [b["name"] for b in record.gateway["backends"]] == [f"{NEW}-8000"]
    assert record.gateway["addresses"][NEW] == "10.0.0.2"
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    assert [s["name"] for s in dep.servers] == [NEW]
    state = result_of(r.output)
    assert state["status"] == "done"
    assert state["retired"] == [OLD]
    assert state["batch_states"][0]["verdicts"][0]["outcome"] == "pass"


def test_a_slower_new_server_fails_the_gate_and_is_deleted_the_old_one_never_drained(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.tok_s[NEW] = 85.0  # -15%: beyond the gate's 10%, not so far beyond that one run settles it (plan.gross)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.ROLLOUT_GATE, r.output
    assert "performance gate failed on fle-2" in flat(r.output)
    # below in each of the gate's 3 runs: a change, not one run's noise
    assert "85.0 tok/s (mean of 3 runs: 85.0, 85.0, 85.0) vs baseline 100.0" in flat(r.output)
    assert "measuring again" in flat(r.output)
    assert double.calls[-4:] == [f"bench {OLD},{NEW}"] * 3 + [f"retire {NEW}"]  # it never joined the gateway
    assert not any(c.startswith("drain") for c in double.calls)
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == [OLD]
    assert Path(record.request["model"]).name == "tiny-a"
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    assert [s["name"] for s in dep.servers] == [OLD]


def test_one_slow_gate_run_is_measured_again_and_the_mean_passes(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.new_runs = [80.0, 101.0]  # one run 20% below (noise on a shared machine), then as fast as before
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert f"{NEW}-8000 -20% in gate run 1 of up to 3: measuring again" in flat(r.output)
    assert double.calls.count(f"bench {OLD},{NEW}") == 2  # the second run's mean (90.5, -9.5%) passed: no third
    state = result_of(r.output)
    figures = state["batch_states"][0]["verdicts"][0]["figures"]
    assert (figures["new_runs"], figures["new_tok_s"], figures["control_runs"]) == ([80.0, 101.0], 90.5, [100.0, 100.0])


def test_a_new_server_that_cannot_start_fails_the_health_gate_and_is_deleted(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.fail["serve"] = RunFailedError("serve.yml failed (rc=2)", failures=[])
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.ROLLOUT_GATE, r.output
    assert "health gate failed on fle-2" in flat(r.output)
    assert f"retire {NEW}" in double.calls
    assert not any(c.startswith(("drain", "gateway")) for c in double.calls)
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    assert [s["name"] for s in dep.servers] == [OLD]


def test_a_container_that_cannot_be_stopped_is_reported_as_such_not_as_a_health_gate(run, cloud_fleet, monkeypatch):
    """Docker's words for a container whose PID 1 is a zombie (started without an init): the rollout names the stop,
    the host and the container, and goes back as for any failed replacement."""
    double = Surge(cloud_fleet, monkeypatch)
    zombie = (
        "Error response from daemon: cannot stop container: 4f2a9c: PID 1976 is zombie and can not be killed. "
        "Use the --init option when creating containers"
    )
    double.fail["serve"] = RunFailedError(
        "serve.yml", [HostFailure(NEW, "Fail when a server could not be started", zombie)], rc=2
    )
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.ROLLOUT_GATE, r.output
    said = flat(r.output)
    assert f"stopping the old server failed on {NEW}" in said
    assert "4f2a9c" in said  # the container Docker named
    assert "health gate failed" not in said
    assert f"retire {NEW}" in double.calls


def test_replace_failure_tells_a_stop_from_a_health_gate():
    def failure(message: str) -> RunFailedError:
        return RunFailedError("serve.yml", [HostFailure("h", "t", message)], rc=2)

    assert gates.replace_failure(failure("cannot stop container: abc: PID 7 is zombie")) == gates.STOP
    assert gates.replace_failure(failure("server did not become healthy in 900 s")) == "health"
    assert gates.replace_failure(RunFailedError("serve.yml", [], rc=2)) == "health"


def test_interrupted_while_switching_then_resumed_makes_no_second_server(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.fail["drain"] = KeyboardInterrupt()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.CANCELED, r.output
    assert double.calls[-2:] == [f"drain {OLD}-8000", f"ready {OLD}-8000"]  # put back on the way out
    state = Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load()
    assert state is not None
    assert state.batches[0].status == "switching"
    assert state.batches[0].strategy_state == {
        "old": OLD, "new": NEW, "new_address": "10.0.0.2", "retiring": False, "old_retired": False,
    }  # fmt: skip
    assert state.batches[0].strategy_state["retiring"] is False  # the old server was not being deleted yet
    assert state.drained == []
    double.calls.clear()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert f"add {NEW}" not in double.calls
    assert double.calls[-3:] == [f"drain {OLD}-8000", f"retire {OLD}", f"gateway {NEW}-8000@10.0.0.2"]
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    assert [s["name"] for s in dep.servers] == [NEW]


def test_abort_after_the_new_server_joined_puts_the_old_one_back_and_deletes_the_new(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.fail["drain"] = KeyboardInterrupt()
    rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    double.calls.clear()
    r = run(["rollout", "-i", str(cloud_fleet.inventory), "--abort", "--json"])
    assert r.exit_code == 0, r.output
    # the new server was in rotation: drained first (its in-flight requests finish), then out of the gateway
    assert double.calls == [f"drain {NEW}-8000", f"gateway {OLD}-8000@10.0.0.1", f"retire {NEW}"]
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == [OLD]


def test_abort_after_a_failed_creation_deletes_the_server_the_ledger_does_not_know(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)

    def add_fails(ctx: Any, dep: ledger.Deployment, **_kw: Any) -> Any:  # up made it, then failed before recording it
        double.in_cloud.add(NEW)
        raise RunFailedError("up.yml failed (rc=2)", failures=[])

    monkeypatch.setattr(deploy, "add_server", add_fails)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.RUN_FAILED, r.output
    double.calls.clear()
    r = run(["rollout", "-i", str(cloud_fleet.inventory), "--abort", "--json"])
    assert r.exit_code == 0, r.output
    assert double.calls == [f"retire {NEW}"]
    assert double.in_cloud == {OLD}


def test_interrupted_while_the_old_server_is_deleted_only_finishes_and_cannot_be_aborted(run, cloud_fleet, monkeypatch):
    double = Surge(cloud_fleet, monkeypatch)
    double.fail["retire"] = KeyboardInterrupt()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.CANCELED, r.output
    assert double.calls[-1] == f"retire {OLD}"  # not put back in rotation on the way out: it is being deleted
    state = Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load()
    assert state is not None
    own = state.batches[0].strategy_state
    assert (own["retiring"], own["old_retired"]) == (True, False)
    # --abort cannot go back: the old server may be gone; it names the way on
    r = run(["rollout", "-i", str(cloud_fleet.inventory), "--abort"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "re-run the same `zenops rollout` to finish it" in flat(r.output)
    double.calls.clear()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert double.calls == [f"retire {OLD}", f"gateway {NEW}-8000@10.0.0.2"]  # no serve, no gate, no new server
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == [NEW]


def test_a_deployment_with_a_server_beside_the_serving_one_is_refused(run, cloud_fleet, monkeypatch):
    Surge(cloud_fleet, monkeypatch)
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    dep.servers.append({"name": NEW, "id": "id2", "fixed_ip": "10.0.0.2", "address": "10.0.0.2"})
    ledger.save(cloud_fleet.config.state_dir, dep)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--abort" in flat(r.output)


def test_a_multi_host_cloud_rollout_is_refused_while_up_cloud_holds_the_deployment(
    run,
    isolated_home,
    tmp_path,
    monkeypatch,
    models,  # noqa: F811
):
    """`up --cloud` and `down` name a cloud deployment by cloud and name, the rollout by its inventory: both take
    the one lock of the deployment, the rollout before it records anything (nothing of a surge here)."""
    import json  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from dataclasses import asdict  # noqa: PLC0415

    from zenops.lock import Holder, lock_path, proc_start  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    config = load()
    fleet = Fleet(config, tmp_path / "fle.inventory.yml", models)
    fleet.serve(["fle-1", "fle-2", "fle-3"])
    servers = [{"name": f"fle-{i}", "id": f"id{i}", "fixed_ip": f"10.0.0.{i}"} for i in (1, 2, 3)]
    ledger.save(config.state_dir, ledger.Deployment(
        name="fle", cloud="c", flavor="gp.5.2.8", image="debian-12", count=3, network_mode="provider",
        price_per_hour=0.1, status="ready", inventory=str(fleet.inventory), servers=servers,
    ))  # fmt: skip
    holder = Holder(pid=1, pid_start=proc_start(1), host=socket.gethostname(), command="zenops up --cloud c --name fle",
                    started_at="2026-11-25T03:00:00+00:00", token="")  # fmt: skip
    path = lock_path(config, "cloud-c-fle")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(holder)))
    monkeypatch.setattr(rollout_run.Rollout, "serve_hosts", lambda *a, **k: pytest.fail("nothing may be served"))
    monkeypatch.setattr(gates.PerfGate, "measure", lambda *a, **k: pytest.fail("nothing may be measured"))
    r = rollout(run, fleet, "--model", new_model(fleet), *ROLL)
    assert r.exit_code == ExitCode.LOCKED, r.output
    assert "deployment cloud-c-fle is locked by" in flat(r.output)
    assert "zenops up --cloud c --name fle" in flat(r.output)
    assert Ledger(config, inventory_name(fleet.inventory)).load() is None  # no rollout was recorded
