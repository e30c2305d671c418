"""`zenops rollout --strategy blue-green` on a two-server cloud deployment: a whole new set of servers, gated, then the
gateway switches to it at once and the old set is drained and deleted. Through the CLI, with a TEST DOUBLE
(`BlueGreenCloud` below) for what needs a cloud, Ansible and HAProxy: zenops.deployment.surge.add_servers /
retire_server / surge_preflight, the rollout's serve and bench steps and the gateway's update, ready and drain. It
records the calls in order and keeps the ledger as the real ones do. The real path runs in
tests/e2e/test_bluegreen_sandbox.py."""

from __future__ import annotations

import dataclasses
import json
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
from zenops.deployment.record import load_serving_record, save_serving_record
from zenops.deployment.rollouts import Ledger
from zenops.deployment.services import gateway as gw_lib
from zenops.errors import ExitCode, RunFailedError
from zenops.rollout import strategies

OLD = ["fle-1", "fle-2"]
NEW = ["fle-3", "fle-4"]
ADDRESS = {"fle-1": "10.0.0.1", "fle-2": "10.0.0.2", "fle-3": "10.0.0.3", "fle-4": "10.0.0.4"}


def backends(hosts: list[str]) -> str:
    return ",".join(f"{h}-8000@{ADDRESS[h]}" for h in hosts)


def names(hosts: list[str]) -> str:
    return ",".join(f"{h}-8000" for h in hosts)


class BlueGreenCloud(AddingCloud):
    """TEST DOUBLE of the cloud, the Ansible runs and HAProxy for a blue/green rollout (tests/unit/cloud_double.py),
    adding the new set."""

    def __init__(self, fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(fleet, monkeypatch, old=OLD, new=NEW)
        m = monkeypatch
        m.setattr(deploy, "surge_preflight", self.preflight)
        m.setattr(deploy, "add_servers", self.add_servers)
        m.setattr(deploy, "add_server", lambda *a, **k: pytest.fail("blue/green adds its set with add_servers"))

    def preflight(self, ctx: Any, dep: ledger.Deployment, *, more: int = 1) -> None:
        self.calls.append(f"preflight {len(dep.servers) + more}")
        if not self.quota_ok:
            raise QuotaExceededError(f"cloud 'c': {more} more server(s) of gp.5.2.8 do not fit: instances 1 > 0 left")

    def add_servers(
        self, ctx: Any, dep: ledger.Deployment, *, keep: list[str], more: int, gateway_port: int
    ) -> tuple[list[str], ledger.Deployment]:
        assert (keep, more, gateway_port) == (OLD, 2, 8080)
        self.in_cloud |= set(NEW)
        self.step("add", NEW)
        dep.servers = [s for s in dep.servers if s["name"] not in NEW]  # adopted when there
        dep.servers += [{"name": n, "id": n, "fixed_ip": ADDRESS[n], "address": ADDRESS[n]} for n in NEW]
        dep.count = len(dep.servers)
        ledger.save(self.fleet.config.state_dir, dep)
        return list(NEW), dep


@pytest.fixture
def cloud_fleet(isolated_home, tmp_path, monkeypatch, models) -> Fleet:  # noqa: F811
    """A two-server deployment as `zenops up --cloud c --deployment fle --count 2 --gateway-flavor ...` leaves it:
    its serving record (the gateway on fle-gw-1, one instance per server) and its ledger entry naming the same
    inventory."""
    monkeypatch.chdir(tmp_path)
    config = load()
    fleet = Fleet(config, tmp_path / "fle.inventory.yml", models)
    record = fleet.serve(OLD, instances=1)
    gw = gw_lib.Gateway.from_dict(record.gateway)
    gw = dataclasses.replace(gw, host="fle-gw-1", inventory=str(tmp_path / "fle.gateway.inventory.yml"),
                             addresses={h: ADDRESS[h] for h in OLD},
                             backends=gw_lib.backends_from_endpoints(record.endpoints, ADDRESS))  # fmt: skip
    save_serving_record(config, fleet.inventory, record.with_services({"gateway": gw.to_dict()}))
    dep = ledger.Deployment(
        name="fle", cloud="c", flavor="gp.5.2.8", image="debian-12", count=2, network_mode="provider",
        price_per_hour=0.1, status="ready", inventory=str(fleet.inventory),
        servers=[{"name": h, "id": h, "fixed_ip": ADDRESS[h], "address": ADDRESS[h]} for h in OLD],
        gateway_flavor="gp.5.2.8", gateway_servers=[{"name": "fle-gw-1", "id": "g1", "fixed_ip": "10.0.0.9"}],
    )  # fmt: skip
    ledger.save(config.state_dir, dep)
    return fleet


def new_model(fleet: Fleet) -> str:
    return str(fleet.models / "tiny-b")


ROLL = ("--strategy", "blue-green", "--min-healthy", "0", "--json", "--yes")


def servers_in_ledger(fleet: Fleet) -> list[str]:
    dep = ledger.load(fleet.config.state_dir, "c", "fle")
    assert dep is not None
    return sorted(str(s["name"]) for s in dep.servers)


def test_every_registered_strategy_is_its_module_s_class_under_its_own_name():
    """The registry's one line per strategy names the module whose STRATEGY has that name."""
    assert strategies.names() == ["in-place", "surge", "blue-green"]
    for name in strategies.names():
        assert strategies.get(name).name == name
    assert strategies.STRATEGIES["blue-green"].__name__ == "BlueGreen"


def test_dry_run_plans_one_batch_of_the_whole_fleet_and_creates_nothing(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--strategy", "blue-green", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    res = result_of(r.output)
    assert res["batches"] == [OLD]
    assert res["batch_states"][0]["strategy"] == "blue-green"
    assert res["batch_states"][0]["blue-green"] == {"old": OLD, "new": {}, "retiring": False, "deleted": []}
    assert double.calls == ["preflight 4"]  # room for as many servers again, checked; nothing made


def test_dry_run_text_says_what_blue_green_does(run, cloud_fleet, monkeypatch):
    BlueGreenCloud(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--strategy", "blue-green", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "the gateway switches to them at once and fle-1, fle-2 are drained and deleted" in flat(r.output)


def test_no_room_for_the_new_set_is_refused_before_anything(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.quota_ok = False
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.QUOTA, r.output
    assert "no room for the blue/green rollout's 2 new server(s)" in flat(r.output)
    assert double.calls == ["preflight 4"]
    assert Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load() is None  # no rollout begun


def test_own_hosts_cannot_go_blue_green_and_the_refusal_names_in_place(run, cloud_fleet, monkeypatch):
    ledger.remove(cloud_fleet.config.state_dir, "c", "fle")  # not a cloud deployment of this controller
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--strategy", "blue-green", "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--strategy in-place" in flat(r.output)


def test_a_gateway_on_one_of_the_servers_is_refused_naming_gateway_flavor(run, cloud_fleet, monkeypatch):
    dep = ledger.load(cloud_fleet.config.state_dir, "c", "fle")
    assert dep is not None
    dep.gateway_servers, dep.gateway_flavor = [], None
    ledger.save(cloud_fleet.config.state_dir, dep)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--strategy", "blue-green", "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--gateway-flavor" in flat(r.output)


def test_the_new_set_is_gated_then_the_gateway_switches_then_the_old_set_is_deleted(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert double.calls == [
        "preflight 4",
        f"bench {','.join(OLD)}", f"bench {','.join(OLD)}",  # the baseline
        f"add {','.join(NEW)}",
        f"serve {','.join(NEW)},tiny-b",  # the new set, while the old one serves on
        f"bench {','.join(OLD + NEW)}",  # the gate: each new server against an old one, measured at the same time
        f"gateway {backends(OLD + NEW)}",  # the new set joins...
        f"ready {names(NEW)}",
        f"drain {names(OLD)}",  # ... and the whole old set goes out of rotation at once
        f"gateway {backends(NEW)}",  # the gateway's backends: the new set only, before the old servers go
        "retire fle-1",
        "retire fle-2",
    ]  # fmt: skip
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == sorted(record.endpoints) == NEW
    assert Path(record.request["model"]).name == "tiny-b"
    assert [b["name"] for b in record.gateway["backends"]] == [f"{h}-8000" for h in NEW]
    assert {h: record.gateway["addresses"][h] for h in NEW} == {h: ADDRESS[h] for h in NEW}
    assert servers_in_ledger(cloud_fleet) == NEW
    state = result_of(r.output)
    assert state["status"] == "done"
    assert state["retired"] == OLD
    assert [v["outcome"] for v in state["batch_states"][0]["verdicts"]] == ["pass", "pass"]
    assert state["batch_states"][0]["blue-green"]["deleted"] == OLD


def test_a_slower_new_server_fails_the_gate_and_the_new_set_is_deleted_the_old_never_drained(
    run, cloud_fleet, monkeypatch
):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.tok_s["fle-4"] = 40.0
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.ROLLOUT_GATE, r.output
    assert "performance gate failed on fle-4" in flat(r.output)
    assert double.calls[-2:] == ["retire fle-3", "retire fle-4"]
    assert not any(c.startswith(("drain", "gateway", "ready")) for c in double.calls)  # it never joined the gateway
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == OLD
    assert Path(record.request["model"]).name == "tiny-a"
    assert servers_in_ledger(cloud_fleet) == OLD


def test_a_new_set_that_cannot_start_fails_the_health_gate_and_is_deleted(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.fail["serve"] = RunFailedError("serve.yml failed (rc=2)", failures=[])
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.ROLLOUT_GATE, r.output
    assert "health gate failed on fle-3" in flat(r.output)
    assert double.calls[-2:] == ["retire fle-3", "retire fle-4"]
    assert servers_in_ledger(cloud_fleet) == OLD


def test_interrupted_at_the_switch_then_resumed_makes_no_second_set(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.fail["drain"] = KeyboardInterrupt()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.CANCELED, r.output
    assert double.calls[-2:] == [f"drain {names(OLD)}", f"ready {names(OLD)}"]  # put back on the way out
    state = Ledger(cloud_fleet.config, inventory_name(cloud_fleet.inventory)).load()
    assert state is not None
    assert state.batches[0].status == "switching"
    assert state.batches[0].strategy_state == {
        "old": OLD, "new": {h: ADDRESS[h] for h in NEW}, "retiring": False, "deleted": [],
    }  # fmt: skip
    double.calls.clear()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert not any(c.startswith("add") for c in double.calls)
    assert double.calls[-4:] == [f"drain {names(OLD)}", f"gateway {backends(NEW)}", "retire fle-1", "retire fle-2"]
    assert servers_in_ledger(cloud_fleet) == NEW


def test_interrupted_while_the_old_set_is_deleted_only_finishes_and_cannot_be_aborted(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.fail["retire"] = KeyboardInterrupt()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == ExitCode.CANCELED, r.output
    assert double.calls[-1] == "retire fle-1"  # not put back in rotation on the way out: it is being deleted
    r = run(["rollout", "-i", str(cloud_fleet.inventory), "--abort"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "re-run the same `zenops rollout` to finish it" in flat(r.output)
    double.calls.clear()
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert double.calls == ["retire fle-1", "retire fle-2"]  # no serve, no gate, no new set, the gateway as it was
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == NEW


def test_abort_after_the_new_set_joined_puts_the_old_set_back_and_deletes_the_new(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    double.fail["drain"] = KeyboardInterrupt()
    rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    double.calls.clear()
    r = run(["rollout", "-i", str(cloud_fleet.inventory), "--abort", "--json"])
    assert r.exit_code == 0, r.output
    # the new set was in rotation: drained first (its in-flight requests finish), then out of the gateway
    assert double.calls == [f"drain {names(NEW)}", f"gateway {backends(OLD)}", "retire fle-3", "retire fle-4"]
    record = load_serving_record(cloud_fleet.config, cloud_fleet.inventory)
    assert record is not None
    assert sorted(record.plans) == OLD
    assert servers_in_ledger(cloud_fleet) == OLD


def test_auto_on_a_two_server_deployment_still_rolls_in_place(run, cloud_fleet, monkeypatch):
    BlueGreenCloud(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    assert {b["strategy"] for b in result_of(r.output)["batch_states"]} == {"in-place"}


def test_a_surge_ledger_written_before_strategy_states_still_resumes(run, cloud_fleet, monkeypatch):
    """A state.json as zenops wrote it before each strategy had its state (``BatchState.surge``; and before that,
    no ``strategy`` at all): the surge batch resumes from where it stopped."""
    from tests.unit.test_rollout_surge import Surge  # noqa: PLC0415

    fleet = cloud_fleet
    record = fleet.serve(["fle-1"])  # one server: a surge
    gw = dataclasses.replace(gw_lib.Gateway.from_dict(record.gateway), host="fle-gw-1", addresses={"fle-1": "10.0.0.1"})
    save_serving_record(fleet.config, fleet.inventory, record.with_services({"gateway": gw.to_dict()}))
    dep = ledger.load(fleet.config.state_dir, "c", "fle")
    assert dep is not None
    dep.servers = dep.servers[:1]
    ledger.save(fleet.config.state_dir, dep)
    double = Surge(fleet, monkeypatch)
    double.fail["drain"] = KeyboardInterrupt()
    r = rollout(run, fleet, "--model", new_model(fleet), "--min-healthy", "0", "--json", "--yes")
    assert r.exit_code == ExitCode.CANCELED, r.output
    path = Ledger(fleet.config, inventory_name(fleet.inventory)).state_path
    data = json.loads(path.read_text())
    (batch,) = data["batches"]
    old_shape = {  # the fields of the BatchState that wrote it, "surge" among them, and no "strategy"
        k: batch[k] for k in ("hosts", "status", "started_at", "finished_at", "wall_s", "phases", "verdicts")
    }
    old_shape["surge"] = batch["surge"]
    assert old_shape["surge"]["new"] == "fle-2"
    path.write_text(json.dumps({**data, "batches": [old_shape]}))
    state = Ledger(fleet.config, inventory_name(fleet.inventory)).load()
    assert state is not None
    assert (state.batches[0].strategy, state.batches[0].strategy_state) == ("surge", old_shape["surge"])
    double.calls.clear()
    r = rollout(run, fleet, "--model", new_model(fleet), "--min-healthy", "0", "--json", "--yes")
    assert r.exit_code == 0, r.output
    assert "add fle-2" not in double.calls  # resumed: no second new server
    assert double.calls[-2:] == ["retire fle-1", "gateway fle-2-8000@10.0.0.2"]
    assert servers_in_ledger(fleet) == ["fle-2"]


def test_an_in_place_batch_of_an_old_ledger_reads_with_no_state_of_its_own():
    from zenops.deployment.rollouts import BatchState  # noqa: PLC0415

    b = BatchState.from_dict({"hosts": ["h1"], "strategy": "in-place", "status": "done", "surge": None})
    assert (b.strategy, b.strategy_state, b.status) == ("in-place", {}, "done")
    assert "surge" not in b.to_dict()


def test_surge_asked_of_a_two_server_deployment_is_refused_naming_the_other_strategies(run, cloud_fleet, monkeypatch):
    double = BlueGreenCloud(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), "--strategy", "surge", "--dry-run")
    assert r.exit_code == ExitCode.USAGE, r.output
    text = flat(r.output)
    assert "a surge rolls a one-server deployment: this rollout changes 2 hosts" in text
    assert "--strategy in-place" in text
    assert double.calls == []  # nothing asked of the cloud
