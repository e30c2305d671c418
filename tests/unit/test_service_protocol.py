"""The services own their options, previews and status (zenops.deployment.services): ``plan`` says what `up
--dry-run` would do, ``lines`` is what `status` prints, ``drainable`` is what the rollout and bench ask for, and a
service's options are the table's rows tagged with its name."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.record import ServingRecord, metrics_password_path
from zenops.deployment.services import gateway as gw_lib
from zenops.deployment.services import metrics as metrics_lib
from zenops.deployment.store import Store
from zenops.option_table import TABLE
from zenops.serve import ServeRequest

ENDPOINTS = {
    "h1": [{"instance": 0, "port": 8000}, {"instance": 1, "port": 8001}],
    "h2": [{"instance": 0, "port": 8000}],
}
ONE = {"h1": [{"instance": 0, "port": 8000}]}


def _previews(endpoints: Any, had: Any = None, **req: Any) -> dict[str, services.Preview]:
    view = services.View(Path("fleet.yml"), endpoints, request=ServeRequest(model="m", **req))
    return {p.name: p for p in services.plan(view, had or {})}


# --- plan: `up --dry-run` ----------------------------------------------------------------------------------------


def test_the_gateway_preview_says_mode_host_port_and_tls():
    got = _previews(ENDPOINTS, gateway_host="h2", gateway_port=9000, gateway_tls_cert_file=Path("gw.pem"))["gateway"]
    assert got.on
    assert got.summary == "on (3 instances); HAProxy on h2, port 9000, HTTPS, balancing 3 server(s)"
    assert got.to_dict() == {
        "on": True,
        "summary": got.summary,
        "mode": "auto",
        "host": "h2",
        "port": 9000,
        "tls": True,
        "own_server": False,
        "backends": ["h1-8000", "h1-8001", "h2-8000"],
    }


def test_the_gateway_preview_with_one_instance_is_off_and_says_it_would_go():
    had = {"gateway": gw_lib.Gateway("h1", 8080, "http://h1:8080/v1").to_dict()}
    got = _previews(ONE, had)["gateway"]
    assert not got.on
    assert got.summary == "off (one instance; --gateway on adds one); would be removed from h1"
    assert got.state is None
    assert _previews(ENDPOINTS, gateway="off")["gateway"].summary == "off (--gateway off)"


def test_the_metrics_preview_follows_the_gateways(isolated_home):
    got = _previews(ENDPOINTS, gateway_host="h2", metrics="on")["metrics"]
    assert got.on
    assert got.details["prometheus_host"] == "h2"  # where the gateway would be
    assert got.details["targets"] == {
        "vllm": ["h1:8000", "h1:8001", "h2:8000"],
        "node": ["h1:9100", "h2:9100"],
        "haproxy": ["127.0.0.1:8405"],
    }
    assert "Prometheus on h2 (127.0.0.1:9090), node_exporter on 2 host(s)" in got.summary
    alone = _previews(ENDPOINTS, gateway="off", metrics="on")["metrics"]
    assert alone.details["prometheus_host"] == "h1"
    assert alone.details["targets"]["haproxy"] == []
    assert _previews(ENDPOINTS)["metrics"].summary == "off (--metrics off)"
    # a dry run writes nothing: no metrics password is made
    assert not metrics_password_path(load(), Path("fleet.yml")).exists()


def test_a_dry_run_of_up_previews_each_service_from_the_plans(isolated_home, tmp_path):
    from zenops.serve import _services_preview  # noqa: PLC0415

    inventory = tmp_path / "fleet.yml"
    plans = {h: SimpleNamespace(instances=[SimpleNamespace(index=0, port=8000)]) for h in ("h1", "h2")}
    req = ServeRequest(model="m", metrics="on")
    got = {p.name: p for p in _services_preview(Store(load(), inventory), req, plans, None)}  # type: ignore[arg-type]
    assert got["gateway"].details["backends"] == ["h1-8000", "h2-8000"]
    assert got["metrics"].details["prometheus_host"] == "h1"


# --- lines: `status` ---------------------------------------------------------------------------------------------


class Probe:
    """TEST DOUBLE of a further service: it shows one line of its own, and clients go through it."""

    name = "probe"

    def lines(self, entry: Any) -> list[services.Line]:
        return [services.Line(f"probe: {entry['live']['says']}")]

    def drainable(self, had: Any, addresses: Any) -> Any:
        return SimpleNamespace(host=had["on"], own_server=False, tls=False)

    def status(self, ctx: RunContext, inventory: Path, had: Any) -> dict[str, Any]:
        return {"says": "all good"}


def test_status_prints_the_lines_of_every_service_it_has(run, tmp_path, monkeypatch):
    monkeypatch.setattr(services, "services", lambda: (gw_lib.SERVICE, metrics_lib.SERVICE, Probe()))
    inventory = tmp_path / "fleet.yml"
    inventory.write_text("all: {hosts: {h1: {}}}\n")
    Store(load(), inventory).save_record(ServingRecord(model="m", endpoints=ONE, services={"probe": {"on": "h1"}}))
    r = run(["status", "-i", str(inventory)])
    assert r.exit_code == 0, r.output
    assert "probe: all good" in r.output
    assert "  h1:" not in r.output  # clients go through the probe: no server's own endpoint listed


def test_a_service_that_cannot_be_read_says_so_on_stderr():
    entry = {"state": {"url": "http://h1:8080", "host": "h1", "port": 8080}, "error": "ssh: no route"}
    got = services.lines({"metrics": {"error": "boom"}, "gateway": entry})
    assert [(line.err, line.text) for line in got] == [
        (False, "endpoint: http://h1:8080 (gateway on h1)"),
        (True, "[yellow]gateway status unavailable:[/] ssh: no route"),
        (True, "[yellow]metrics status unavailable:[/] boom"),
    ]  # in the services' order: the gateway first
    console = Console(file=io.StringIO(), width=200, color_system=None)
    hostile = services.lines({"metrics": {"live": {"url": "[/]x", "up": 0, "targets": []}}})
    console.print(hostile[0].text)  # a host's markup is escaped: the line prints as written
    assert "[/]x" in console.file.getvalue()  # type: ignore[attr-defined]


# --- drainable: the rollout and bench ------------------------------------------------------------------------------


def test_the_drainable_service_is_the_gateway_with_a_surges_addresses():
    gw = gw_lib.Gateway("gw", 8080, "http://gw.example:8080/v1", inventory="gw.yml", addresses={"h1": "10.0.0.1"})
    states = {"metrics": {"host": "gw"}, "gateway": gw.to_dict()}
    got = services.drainable(states, {"h2": "10.0.0.2"})
    assert isinstance(got, gw_lib.Gateway)
    assert dict(got.addresses) == {"h1": "10.0.0.1", "h2": "10.0.0.2"}
    assert got.address() == "gw.example"  # its own server, no fixed address known: the endpoint's host
    assert gw_lib.Gateway("gw", 8080, "", addresses={"gw": "10.0.0.9"}).address() == "10.0.0.9"
    assert services.drainable({"metrics": {"host": "gw"}}) is None  # clients do not go through the metrics
    assert services.drainable({}) is None


def test_drain_and_ready_run_the_gateways_actions(monkeypatch):
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(gw_lib, "_run", lambda ctx, inv, host, action, extra=None: calls.append((action, extra)) or {})
    gw = services.drainable({"gateway": gw_lib.Gateway("h1", 9000, "u").to_dict()})
    assert gw is not None
    gw.drain(None, Path("i.yml"), ["h1-8000"], timeout=30)  # type: ignore[arg-type]
    gw.ready(None, Path("i.yml"), ["h1-8000"], timeout=5)  # type: ignore[arg-type]
    assert [a for a, _ in calls] == ["drain", "ready"]
    assert calls[0][1]["gateway_drain_timeout"] == 30
    assert calls[0][1]["gateway_port"] == 9000
    assert calls[1][1]["gateway_ready_timeout"] == 5


def test_bench_through_the_endpoint_asks_for_the_drainable_service(monkeypatch, tmp_path):
    from zenops.bench import run as bench_run  # noqa: PLC0415

    monkeypatch.setattr(services, "services", lambda: (Probe(),))
    record = ServingRecord(model="m", plans={"h1": {}, "h2": {}}, services={"probe": {"on": "h2"}})
    req = SimpleNamespace(compare_platforms=False)
    assert bench_run._gateway_target(record, tmp_path / "i.yml", req, None) == "h2"  # type: ignore[arg-type]
    with pytest.raises(Exception, match="has no gateway to benchmark"):
        bench_run._gateway_target(ServingRecord(model="m"), tmp_path / "i.yml", req, None)  # type: ignore[arg-type]


# --- options: the table's rows tagged with the service -------------------------------------------------------------


def test_every_service_tag_names_a_service_and_every_service_has_rows():
    tags = {o.service for o in TABLE if o.service}
    assert tags == {s.name for s in services.services()}
    assert {o.name for o in services.rows(gw_lib.SERVICE)} == {
        "gateway_mode", "gateway_host", "gateway_flavor", "gateway_port", "gateway_tls_cert", "through_gateway",
    }  # fmt: skip
    assert [o.name for o in services.rows(metrics_lib.SERVICE)] == ["metrics"]
    assert gw_lib.MODES == ("auto", "on", "off")  # read from the rows
    assert gw_lib.DEFAULT_PORT == 8080


def _dry_run_result(tmp_path: Path, previews: list[services.Preview]) -> Any:
    from zenops import compat  # noqa: PLC0415
    from zenops.hosts import UpResult  # noqa: PLC0415
    from zenops.runner import RunResult  # noqa: PLC0415
    from zenops.serve import ServeResult  # noqa: PLC0415

    up = UpResult(RunResult("r1", "up", "successful", 0, tmp_path, "now", 0.1), [])
    return ServeResult(up, None, compat.engine_of({}), {}, {}, {}, None, "m", tmp_path / "i.yml", previews=previews)


def test_up_dry_run_prints_and_reports_each_services_preview(tmp_path):
    from zenops.cli.up import _report_serve  # noqa: PLC0415

    previews = services.plan(services.View(Path("i.yml"), ENDPOINTS, request=ServeRequest(model="m")), {})
    served = _dry_run_result(tmp_path, previews)
    out = io.StringIO()
    app = SimpleNamespace(json=False, out=Console(file=out, width=200, color_system=None), err=Console(file=out))
    _report_serve(app, served, True)  # type: ignore[arg-type]
    assert "gateway (dry run): on (3 instances); HAProxy on h1, port 8080, plain HTTP, balancing 3 server(s)" in (
        out.getvalue()
    )
    assert "metrics (dry run): off (--metrics off)" in out.getvalue()
    got = served.to_dict()["service_plans"]
    assert (got["gateway"]["host"], got["gateway"]["port"], got["gateway"]["tls"]) == ("h1", 8080, False)
    assert got["metrics"] == {"on": False, "summary": "off (--metrics off)", "mode": "off"}
    assert "service_plans" not in _dry_run_result(tmp_path, []).to_dict()  # not a dry run: the output as before
