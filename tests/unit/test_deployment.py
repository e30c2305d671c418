"""A deployment's home (zenops.deployment): one identity, its files in one store, and its services, which `up`,
`rollout`, `down` and `status` call through zenops.deployment.services, never one by name.

The services are exercised with the real gateway service and a second one, ``Probe``: a TEST DOUBLE standing for a
further service, registered the way a new service is (its line in services()); the metrics service has its own tests
(tests/unit/test_metrics_service.py). The Ansible runs are TEST
DOUBLES too (``ctx.run`` records the playbooks); the real runs are in the e2e tests (tests/e2e/test_rollout_fleet.py:
up, rollout, status and down of a gateway fleet)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_rollout_cli import models, rollout  # noqa: F401  (models: a fixture)
from tests.unit.test_rollout_surge import NEW, OLD, ROLL, Surge, cloud_fleet, new_model  # noqa: F401
from zenops import hosts, serve
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import services as services_lib
from zenops.deployment.identity import DeploymentId, inventory_name, of_inventory
from zenops.deployment.record import ServingRecord
from zenops.deployment.rollouts import RolloutState
from zenops.deployment.services import gateway as gw_lib
from zenops.deployment.status import serving_status
from zenops.deployment.store import Store
from zenops.errors import UsageError
from zenops.runner import RunResult


class Probe:
    """TEST DOUBLE of a further service: its state is the servers it follows."""

    name = "probe"

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    @staticmethod
    def _targets(view: services_lib.View) -> list[str]:
        return sorted(f"{h}:{ep['port']}" for h, eps in view.endpoints.items() for ep in eps)

    def preflight(self, view: services_lib.View) -> None:
        self.calls.append(("preflight", sorted(view.hosts)))

    def apply(self, ctx: RunContext, view: services_lib.View, had: dict[str, Any] | None) -> dict[str, Any] | None:
        self.calls.append(("apply", had))
        return {"targets": self._targets(view)}

    def update(self, ctx: RunContext, view: services_lib.View, had: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("update", self._targets(view)))
        return {"targets": self._targets(view)}

    def remove(self, ctx: RunContext, inventory: Path, had: dict[str, Any]) -> None:
        self.calls.append(("remove", had))

    def status(self, ctx: RunContext, inventory: Path, had: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("status", had))
        if had.get("broken"):
            raise RuntimeError("probe unreachable")
        return {"up": len(had["targets"])}


@pytest.fixture
def probe(monkeypatch) -> Probe:
    p = Probe()
    monkeypatch.setattr(services_lib, "services", lambda: (gw_lib.SERVICE, p))
    return p


class Runs:
    """TEST DOUBLE of Ansible: records each playbook with its extravars; the gateway play reports a result."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.specs: list[Any] = []

    def __call__(self, spec: Any) -> RunResult:
        self.specs.append(spec)
        host = spec.extravars.get("zenops_gateway_host")
        facts = {}
        if host:
            facts = {host: {"zenops_gateway_result": {"url": f"http://{host}:8080/v1", "servers": []}}}
        return RunResult("r1", spec.playbook, "successful", 0, self.tmp_path, "now", 0.1, host_facts=facts)

    def playbooks(self) -> list[str]:
        return [f"{s.playbook}:{s.extravars.get('zenops_gateway_action', '')}".rstrip(":") for s in self.specs]


@pytest.fixture
def ctx(isolated_home, tmp_path, monkeypatch) -> RunContext:
    monkeypatch.chdir(tmp_path)
    c = RunContext(load())
    runs = Runs(tmp_path)
    monkeypatch.setattr(c, "run", runs)
    monkeypatch.setattr(RunContext, "quiet", lambda self, cancel=None: self)
    c.runs = runs  # type: ignore[attr-defined]
    return c


ENDPOINTS = {
    "h1": [{"instance": 0, "port": 8000, "url": "http://h1:8000/v1"}],
    "h2": [{"instance": 0, "port": 8000, "url": "http://h2:8000/v1"}],
}


# --- identity and store -----------------------------------------------------------------------------------------


def test_own_hosts_are_named_after_their_inventory_and_locked_by_that_name(ctx, tmp_path):
    inv = tmp_path / "fleet.yml"
    inv.write_text("all: {}\n")
    dep = of_inventory(ctx.config, inv)
    assert dep == DeploymentId(inventory_name(inv), None, inv)
    assert dep.key == dep.name == dep.files_name
    assert dep.name.startswith("fleet-")
    other = tmp_path / "sub" / "fleet.yml"  # same stem, another file: another deployment
    other.parent.mkdir()
    other.write_text("all: {}\n")
    assert of_inventory(ctx.config, other).key != dep.key


def test_a_record_written_before_services_reads_its_gateway_as_the_gateway_service(ctx, tmp_path):
    inv = tmp_path / "fleet.yml"
    store = Store(ctx.config, inv)
    gw = {"host": "h1", "port": 8080, "url": "http://h1:8080/v1", "backends": []}
    store.record_path.parent.mkdir(parents=True)
    store.record_path.write_text(json.dumps({"inventory": str(inv), "model": "m", "gateway": gw}))
    record = store.record()
    assert record is not None
    assert record.services == {"gateway": gw}
    assert record.gateway == gw
    store.save_record(record)
    saved = json.loads(store.record_path.read_text())
    assert "gateway" not in saved
    assert saved["services"] == {"gateway": gw}


def test_a_rollout_state_written_before_services_keeps_its_gateway():
    data = {"id": "r", "deployment": "d", "inventory": "i", "from_request": {}, "to_request": {}, "from_record": {},
            "batches": [], "gateway": {"host": "h1"}}  # fmt: skip
    assert RolloutState.from_dict(data).services == {"gateway": {"host": "h1"}}


# --- up: preflight and apply ------------------------------------------------------------------------------------


def test_preflight_refuses_a_gateway_host_outside_the_inventory_and_asks_every_service(probe, tmp_path):
    req = serve.ServeRequest(model="m", gateway_host="h9")
    view = services_lib.View(tmp_path / "inv.yml", request=req, hosts=frozenset({"h1", "h2"}))
    with pytest.raises(UsageError, match="--gateway-host h9 is not a host of"):
        services_lib.preflight(view)
    services_lib.preflight(dataclasses.replace(view, request=serve.ServeRequest(model="m", gateway_host="h2")))
    assert probe.calls == [("preflight", ["h1", "h2"])]  # the one refused stopped before the probe


def test_up_applies_every_service_and_the_record_keeps_their_states(ctx, probe, tmp_path):
    inv = tmp_path / "fleet.yml"
    store = Store(ctx.config, inv)
    req = serve.ServeRequest(model="m")
    applied = serve._services_step(ctx, store, store.record(), req, ENDPOINTS, None, apply=True)
    assert applied["probe"] == {"targets": ["h1:8000", "h2:8000"]}
    assert applied["gateway"]["host"] == "h1"
    assert [b["name"] for b in applied["gateway"]["backends"]] == ["h1-8000", "h2-8000"]
    assert ctx.runs.playbooks() == ["gateway:present"]
    store.save_record(ServingRecord(inventory=str(inv), endpoints=ENDPOINTS, services=applied))
    # a second `up` with --gateway off: the gateway goes, the probe is applied again with what it had
    again = serve._services_step(
        ctx, store, store.record(), serve.ServeRequest(model="m", gateway="off"), ENDPOINTS, None, apply=True
    )
    assert set(again) == {"probe"}
    assert ctx.runs.playbooks() == ["gateway:present", "gateway:absent"]
    assert probe.calls[-1] == ("apply", {"targets": ["h1:8000", "h2:8000"]})


def test_an_up_that_must_not_touch_services_keeps_the_recorded_ones(ctx, probe, tmp_path):
    store = Store(ctx.config, tmp_path / "fleet.yml")
    store.save_record(ServingRecord(endpoints=ENDPOINTS, services={"probe": {"targets": ["x"]}}))
    kept = serve._services_step(ctx, store, store.record(), serve.ServeRequest(model="m"), ENDPOINTS, None, apply=False)
    assert kept == {"probe": {"targets": ["x"]}}
    assert probe.calls == []
    assert ctx.runs.specs == []


# --- rollout: every service follows the servers -------------------------------------------------------------------


def test_a_surge_rollout_updates_every_service_and_records_their_states(
    run,
    cloud_fleet,  # noqa: F811
    monkeypatch,
    probe,
):
    record = Store(cloud_fleet.config, cloud_fleet.inventory).record()
    assert record is not None
    Store(cloud_fleet.config, cloud_fleet.inventory).save_record(
        record.with_services({**record.services, "probe": {"targets": [f"{OLD}:8000"]}})
    )
    Surge(cloud_fleet, monkeypatch)
    r = rollout(run, cloud_fleet, "--model", new_model(cloud_fleet), *ROLL)
    assert r.exit_code == 0, r.output
    assert [c for c in probe.calls if c[0] == "update"] == [
        ("update", [f"{OLD}:8000", f"{NEW}:8000"]),  # the new server joins
        ("update", [f"{NEW}:8000"]),  # the old one is gone
    ]
    after = Store(cloud_fleet.config, cloud_fleet.inventory).record()
    assert after is not None
    assert after.services["probe"] == {"targets": [f"{NEW}:8000"]}
    assert [b["name"] for b in after.services["gateway"]["backends"]] == [f"{NEW}-8000"]


# --- down and status ----------------------------------------------------------------------------------------------


def test_down_removes_every_service_before_the_servers_and_forgets_the_record(ctx, probe, tmp_path):
    inv = tmp_path / "fleet.yml"
    inv.write_text("h1\nh2\n")
    store = Store(ctx.config, inv)
    gw = gw_lib.Gateway("h1", 8080, "http://h1:8080/v1", gw_lib.backends_from_endpoints(ENDPOINTS)).to_dict()
    store.save_record(ServingRecord(endpoints=ENDPOINTS, services={"gateway": gw, "probe": {"targets": ["h1:8000"]}}))
    hosts.down_inventory(ctx, inv)
    assert ctx.runs.playbooks() == ["gateway:absent", "down"]
    assert probe.calls == [("remove", {"targets": ["h1:8000"]})]
    assert store.record() is None


def test_down_of_some_hosts_leaves_the_services(ctx, probe, tmp_path):
    inv = tmp_path / "fleet.yml"
    inv.write_text("h1\nh2\n")
    store = Store(ctx.config, inv)
    store.save_record(ServingRecord(endpoints=ENDPOINTS, services={"probe": {"targets": ["h1:8000"]}}))
    hosts.down_inventory(ctx, inv, limit="h2")
    assert probe.calls == []
    assert ctx.runs.playbooks() == ["down"]
    assert store.record() is not None


def test_status_reads_every_service_live_and_reports_a_failing_one_as_its_error(ctx, probe, tmp_path):
    inv = tmp_path / "fleet.yml"
    store = Store(ctx.config, inv)
    gw = gw_lib.Gateway("h1", 8080, "http://h1:8080/v1", gw_lib.backends_from_endpoints(ENDPOINTS)).to_dict()
    store.save_record(
        ServingRecord(model="m", endpoints=ENDPOINTS, services={"gateway": gw, "probe": {"targets": [], "broken": 1}})
    )
    out = serving_status(ctx, inv, last=5)
    assert out["serving"]["servers"] == 2
    assert out["serving"]["endpoint"] == "http://h1:8080/v1"
    assert out["services"]["gateway"]["live"]["url"] == "http://h1:8080/v1"
    assert out["gateway"] == gw
    assert out["backends"] == []
    assert out["services"]["probe"]["error"] == "probe unreachable"
    assert "live" not in out["services"]["probe"]
    assert out["lock"] is None
    assert out["rollout"] is None
    assert out["history"] == []


def test_the_serving_summary_names_model_endpoint_and_instances(ctx, tmp_path):
    from zenops.deployment.status import serving_summary  # noqa: PLC0415

    inv = tmp_path / "fleet.yml"
    assert serving_summary(ctx.config, inv) is None  # nothing served there
    assert serving_summary(ctx.config, None) is None  # a cloud deployment without servers yet
    store = Store(ctx.config, inv)
    one = {"h1": [{"instance": 0, "port": 8000, "url": "http://h1:8000/v1"}]}
    key = str(tmp_path / "k.api-key")
    store.save_record(ServingRecord(model="m", endpoints=one, api_key_file=key))
    assert serving_summary(ctx.config, inv) == {
        "model": "m",
        "endpoint": "http://h1:8000/v1",
        "instances": 1,
        "api_key_file": key,  # where a client reads the key (the README's quickstart request)
    }
    store.save_record(ServingRecord(model="m", endpoints=ENDPOINTS))  # two servers, no gateway: no one endpoint
    assert serving_summary(ctx.config, inv) == {"model": "m", "endpoint": None, "instances": 2, "api_key_file": None}
    gw = {"host": "h1", "port": 8080, "url": "http://h1:8080/v1"}
    store.save_record(ServingRecord(model="m", endpoints=ENDPOINTS, services={"gateway": gw}))
    summary = serving_summary(ctx.config, str(inv))
    assert summary == {"model": "m", "endpoint": "http://h1:8080/v1", "instances": 2, "api_key_file": None}
