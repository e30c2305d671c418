"""`zenops status -i` prints the same text for the same state: the deployment's own lines, then each service's
(zenops.deployment.services: ``lines``). The expected text below was captured from `status` before the services
printed their own lines (cli/status.py had a printer per service); it must not change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zenops.cli.main import main
from zenops.config import load
from zenops.deployment.record import ServingRecord
from zenops.deployment.services import gateway as gw_lib
from zenops.deployment.services import metrics as metrics_lib
from zenops.deployment.store import Store

ENDPOINTS = {
    "h1": [{"instance": 0, "port": 8000, "url": "http://h1:8000/v1"}, {"instance": 1, "port": 8001, "url": "http://h1:8001/v1"}],
    "h2": [{"instance": 0, "port": 8000, "url": "http://h2:8000/v1"}],
}  # fmt: skip
GATEWAY = gw_lib.Gateway(
    host="h1",
    port=8080,
    url="http://h1:8080/v1",
    backends=gw_lib.backends_from_endpoints(ENDPOINTS),
).to_dict()
METRICS = metrics_lib.plan(ENDPOINTS, gateway=gw_lib.Gateway.from_dict(GATEWAY)).to_dict()
BACKENDS = [
    gw_lib.ServerState("h1-8000", "UP", 2),
    gw_lib.ServerState("h1-8001", "DRAIN", 0),
    gw_lib.ServerState("h2-8000", "DOWN", 1),
]
TARGETS = [
    {"labels": {"job": "vllm", "zenops_host": "h1", "zenops_instance": "0"}, "scrapeUrl": "http://h1:8000/metrics",
     "health": "up"},
    {"labels": {"job": "vllm", "zenops_host": "h2", "zenops_instance": "0"}, "scrapeUrl": "http://h2:8000/metrics",
     "health": "down", "lastError": "connection refused"},
    {"labels": {"job": "node", "zenops_host": "h1"}, "scrapeUrl": "http://h1:9100/metrics", "health": "up"},
]  # fmt: skip


def _status(capsys: pytest.CaptureFixture[str], inventory: Path, *more: str) -> tuple[str, str]:
    with pytest.raises(SystemExit) as info:
        main(["status", "-i", str(inventory), *more])
    assert info.value.code == 0
    got = capsys.readouterr()
    return got.out, got.err


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A served inventory whose HAProxy and Prometheus answer with BACKENDS and TARGETS (no playbook runs)."""
    monkeypatch.setenv("COLUMNS", "200")
    inventory = tmp_path / "fleet.yml"
    inventory.write_text("all: {hosts: {h1: {}, h2: {}}}\n")
    monkeypatch.setattr(gw_lib, "status", lambda ctx, inv, gw: list(BACKENDS))
    monkeypatch.setattr(metrics_lib, "status", lambda ctx, inv, m: {"targets": TARGETS})
    return inventory


def _record(inventory: Path, services: dict[str, Any]) -> None:
    Store(load(), inventory).save_record(ServingRecord(model="tiny", endpoints=ENDPOINTS, services=services))


def test_status_with_a_gateway_and_metrics_prints_as_before(capsys, deployment):
    _record(deployment, {"gateway": GATEWAY, "metrics": METRICS})
    out, err = _status(capsys, deployment)
    assert out == (
        f"{deployment}: tiny on 2 host(s), 3 server(s)\n"
        "endpoint: http://h1:8080/v1 (gateway on h1)\n"
        "  h1-8000                      UP         in flight 2\n"
        "  h1-8001                      DRAIN      in flight 0\n"
        "  h2-8000                      DOWN       in flight 1\n"
        "metrics: Prometheus at http://127.0.0.1:9090 (on h1), 2 of 3 target(s) up (`zenops top` reads it)\n"
        "  vllm http://h2:8000/metrics down: connection refused\n"
    )
    assert err == ""


def test_status_without_a_gateway_lists_the_servers_as_before(capsys, deployment):
    _record(deployment, {"metrics": metrics_lib.plan(ENDPOINTS, gateway=None).to_dict()})
    out, err = _status(capsys, deployment)
    assert out == (
        f"{deployment}: tiny on 2 host(s), 3 server(s)\n"
        "  h1: http://h1:8000/v1\n"
        "  h1: http://h1:8001/v1\n"
        "  h2: http://h2:8000/v1\n"
        "metrics: Prometheus at http://127.0.0.1:9090 (on h1), 2 of 3 target(s) up (`zenops top` reads it)\n"
        "  vllm http://h2:8000/metrics down: connection refused\n"
    )
    assert err == ""


def test_status_when_the_services_cannot_be_read_prints_as_before(capsys, deployment, monkeypatch):
    def unreachable(*_a: Any) -> Any:
        raise RuntimeError("ssh: h1 unreachable")

    monkeypatch.setattr(gw_lib, "status", unreachable)
    monkeypatch.setattr(metrics_lib, "status", unreachable)
    _record(deployment, {"gateway": GATEWAY, "metrics": METRICS})
    out, err = _status(capsys, deployment)
    assert out == f"{deployment}: tiny on 2 host(s), 3 server(s)\nendpoint: http://h1:8080/v1 (gateway on h1)\n"
    assert err == "gateway status unavailable: ssh: h1 unreachable\nmetrics status unavailable: ssh: h1 unreachable\n"


def test_status_json_keeps_its_keys(capsys, deployment):
    _record(deployment, {"gateway": GATEWAY, "metrics": METRICS})
    out, _err = _status(capsys, deployment, "--json")
    got = json.loads(out.strip().splitlines()[-1])
    assert got["gateway"] == GATEWAY
    assert got["backends"] == [{"name": s.name, "status": s.status, "in_flight": s.in_flight} for s in BACKENDS]
    assert "gateway_error" not in got
    assert sorted(got["services"]) == ["gateway", "metrics"]
    assert got["services"]["metrics"]["live"]["up"] == 2
    assert got["serving"]["endpoint"] == "http://h1:8080/v1"
