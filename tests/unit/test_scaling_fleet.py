"""zenops.scaling.fleet's readers (gateway backends and Prometheus rows into the loop's Health and Sample) and the
lifecycle's scaling steps (zenops.deployment.lifecycle.Deployment.scale_out/scale_in) with their parts doubled."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from zenops import serve
from zenops.deployment import services
from zenops.deployment.identity import DeploymentId
from zenops.deployment.lifecycle import Deployment
from zenops.deployment.services import gateway as gw_lib
from zenops.errors import RunFailedError
from zenops.metrics.top import Row
from zenops.scaling.fleet import ask_prometheus, backend_states, samples_of


def test_backend_states_map_backends_to_hosts_and_a_down_one_wins() -> None:
    recorded = {"backends": [
        {"name": "web-1-8000", "host": "web-1"}, {"name": "web-1-8001", "host": "web-1"},
        {"name": "web-2-8000", "host": "web-2"},
    ]}  # fmt: skip
    live = {"backends": [
        {"name": "web-1-8000", "status": "UP"}, {"name": "web-1-8001", "status": "DOWN 1/2"},
        {"name": "web-2-8000", "status": "UP"}, {"name": "stranger-1", "status": "DOWN"},
    ]}  # fmt: skip
    assert backend_states(recorded, live) == {"web-1": "DOWN", "web-2": "UP"}
    assert backend_states(None, live) == {}


def test_samples_sum_each_hosts_instances() -> None:
    rows = [
        Row("web-1", 0, 8000, running=4, waiting=2, kv_cache_pct=50),
        Row("web-1", 1, 8001, running=3, waiting=1, kv_cache_pct=70),
        Row("web-2", 0, 8000, error="Prometheus cannot scrape it (up 0)"),
    ]
    got = samples_of(5.0, rows)
    assert (got["web-1"].waiting, got["web-1"].running, got["web-1"].kv_usage) == (3, 7, 0.7)
    assert got["web-2"].waiting is None


def test_a_prometheus_that_does_not_answer_is_each_fields_error() -> None:
    answers = ask_prometheus("http://127.0.0.1:9", {"up": "up"}, timeout=2)
    assert "error" in answers["up"]


@pytest.fixture
def opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Deployment, list[Any]]:
    """An open deployment whose records, cloud and services are doubles; ``calls`` lists what it did."""
    calls: list[Any] = []
    ctx = SimpleNamespace(config=SimpleNamespace(state_dir=tmp_path), note=lambda _: None)
    dep = Deployment(ctx, DeploymentId("fleet", "sandbox", tmp_path / "hosts.yml"))  # type: ignore[arg-type]
    gateway = {"host": "gw", "port": 9443, "url": "https://gw:9443/v1"}  # not the default port: it is the recorded one
    record = SimpleNamespace(request={"model": "m"}, services={"gateway": gateway}, api_key_file="",
                             plans={}, endpoints={"web-1": []}, images={})  # fmt: skip
    entry = SimpleNamespace(name="fleet", cloud="sandbox", servers=[{"name": "web-1"}])
    made = SimpleNamespace(servers=[{"name": "web-1"}, {"name": "web-2", "fixed_ip": "10.0.0.2"}])

    def add_servers(self: Any, e: Any, *, keep: list[str], more: int, gateway_port: int) -> Any:
        calls.append(("add", keep, more, gateway_port))
        return ["web-2"], made

    def remove_server(self: Any, e: Any, name: str) -> Any:
        calls.append(("remove", name))
        return e

    monkeypatch.setattr(Deployment, "_replicas", lambda self: ("store", record, entry))
    monkeypatch.setattr(Deployment, "add_servers", add_servers)
    monkeypatch.setattr(Deployment, "remove_server", remove_server)
    monkeypatch.setattr(Deployment, "_follow", lambda self, store, rec, **kw: calls.append(("follow", kw)))
    return dep, calls


def test_scale_out_deletes_the_new_server_when_its_serve_fails(
    opened: tuple[Deployment, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, calls = opened

    def failed(*_: Any, **kw: Any) -> Any:
        calls.append(("serve", kw["limit"]))
        raise RunFailedError("the health gate failed on web-2", [])

    monkeypatch.setattr(serve, "serve_inventory", failed)
    with pytest.raises(RunFailedError):
        dep.scale_out(1)
    assert calls == [("add", ["web-1"], 1, 9443), ("serve", "web-2"), ("remove", "web-2")]


class FakeTicks:
    """TEST DOUBLE of the monotonic clock: each reading 10 s after the one before."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 10.0
        return self.t


def fake_served(marks: dict[str, Any] | None) -> Any:
    """What serve_inventory returns, as far as the phases read it: the up run's time, the serve run's marks."""
    facts = {"web-2": {"zenops_serve_marks": marks}} if marks is not None else {}
    return SimpleNamespace(up=SimpleNamespace(run=SimpleNamespace(duration_s=3.0)),
                           serve=SimpleNamespace(host_facts=facts))  # fmt: skip


def test_scale_out_serves_the_new_server_then_the_gateway_follows_and_says_each_phases_time(
    opened: tuple[Deployment, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, calls = opened
    got = fake_served({"began": "1000.0", "image": "1004.0", "model": 1005.0, "healthy": "1009.5"})

    def served(*_: Any, **kw: Any) -> Any:
        calls.append(("serve", kw["limit"], kw["record"], kw["gateway"]))
        return got

    monkeypatch.setattr(serve, "serve_inventory", served)
    out = dep.scale_out(1, clock=FakeTicks())
    assert out.names == ["web-2"]
    assert calls[:2] == [("add", ["web-1"], 1, 9443), ("serve", "web-2", False, False)]
    assert calls[2] == ("follow", {"served": got, "addresses": {"web-2": "10.0.0.2"}, "ready_timeout": 120})
    # clock: 10 before, 20 made, 30 served, 40 in rotation; the up run 3 s; the marks split the serve run
    assert out.phases == {"provision": 10.0, "docker": 3.0, "image": 4.0, "model": 1.0, "vllm": 4.5,
                          "rotation": 10.0, "total": 30.0}  # fmt: skip
    assert list(out.phases) == ["provision", "docker", "image", "model", "vllm", "rotation", "total"]


def test_new_servers_are_opened_to_the_drainable_services_port_else_the_gateways_default(
    opened: tuple[Deployment, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port scale_out opens a new server to comes through the service protocol (the Drainable's port, whatever
    the service's name), the gateway's DEFAULT_PORT the one default: no gateway name nor literal port outside it."""
    dep, calls = opened
    gateway = {"host": "gw", "port": 9443, "url": "https://gw:9443/v1"}
    assert services.server_port({"gateway": gateway}) == 9443
    assert services.server_port({}) == services.server_port({"metrics": {"on": True}}) == gw_lib.DEFAULT_PORT == 8080
    balancer = SimpleNamespace(name="balancer", drainable=lambda had, addresses: SimpleNamespace(port=int(had["p"])))
    monkeypatch.setattr(services, "services", lambda: (balancer,))  # a drainable service that is not the gateway
    record = SimpleNamespace(request={"model": "m"}, services={"balancer": {"p": 7000}})
    entry = SimpleNamespace(name="fleet", cloud="sandbox", servers=[{"name": "web-1"}])
    monkeypatch.setattr(Deployment, "_replicas", lambda self: ("store", record, entry))
    monkeypatch.setattr(serve, "serve_inventory", lambda *_a, **_k: fake_served(None))
    dep.scale_out(1, clock=FakeTicks())
    assert calls[0] == ("add", ["web-1"], 1, 7000)


def test_a_serve_without_marks_is_one_phase_after_docker(
    opened: tuple[Deployment, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, _ = opened
    monkeypatch.setattr(serve, "serve_inventory", lambda *_a, **_k: fake_served(None))
    out = dep.scale_out(1, clock=FakeTicks())
    assert out.phases == {"provision": 10.0, "docker": 3.0, "serve": 7.0, "rotation": 10.0, "total": 30.0}


def test_scale_in_drains_then_the_gateway_forgets_then_the_server_goes(
    opened: tuple[Deployment, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    dep, calls = opened

    class Gw:
        def names_on(self, hosts: Any) -> list[str]:
            return [f"{h}-8000" for h in hosts]

        def drain(self, ctx: Any, inventory: Any, names: list[str], *, timeout: int) -> None:
            calls.append(("drain", names, timeout))

    monkeypatch.setattr(services, "drainable", lambda *_: Gw())
    dep.scale_in(["web-1"], drain_timeout=30)
    assert calls == [("drain", ["web-1-8000"], 30), ("follow", {"gone": ["web-1"]}), ("remove", "web-1")]
