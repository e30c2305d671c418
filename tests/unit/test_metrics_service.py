"""The metrics service (zenops.deployment.services.metrics): where Prometheus runs, what it scrapes, which plays `up`,
a rollout and `down` run; and `top` from Prometheus's answers (zenops.metrics.prom).

The Ansible runs are TEST DOUBLES (``Runs`` records each play and answers as playbooks/metrics.yml does); the real
role runs in molecule/metrics, the real service in tests/e2e/test_rollout_fleet.py (a devhost fleet with --metrics on).
Prometheus's answers are fixtures in the shape of its /api/v1/query (as the role's Molecule verify reads them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_deployment import ENDPOINTS
from zenops import serve
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import record as record_lib
from zenops.deployment import services as services_lib
from zenops.deployment.services import gateway as gw_lib
from zenops.deployment.services import metrics as m_lib
from zenops.errors import UsageError
from zenops.metrics import prom
from zenops.metrics.probe import instances_of
from zenops.runner import RunResult

OWN = {
    "a1": [
        {"instance": 0, "port": 8000, "url": "http://10.0.0.1:8000/v1", "listen": "10.0.0.1"},
        {"instance": 1, "port": 8001, "url": "http://10.0.0.1:8001/v1", "listen": "10.0.0.1"},
    ],
    "a2": [{"instance": 0, "port": 8000, "url": "http://10.0.0.2:8000/v1", "listen": "10.0.0.2"}],
}


def _gateway(host: str = "a2", inventory: str = "", addresses: dict[str, str] | None = None) -> gw_lib.Gateway:
    return gw_lib.Gateway(host=host, port=8080, url=f"http://{host}:8080/v1", inventory=inventory,
                          addresses=addresses or {})  # fmt: skip


# --- where Prometheus runs and what it scrapes ----------------------------------------------------------------------


def test_prometheus_runs_on_the_gateways_host_and_scrapes_every_instance_where_the_gateway_reaches_it(tmp_path):
    key = tmp_path / "key"
    m = m_lib.plan(OWN, gateway=_gateway("a2"), api_key_file=key)
    assert (m.host, m.inventory, m.haproxy) == ("a2", "", True)
    assert [(t["host"], t["instance"], t["address"], t["port"]) for t in m.vllm] == [
        ("a1", 0, "10.0.0.1", 8000),
        ("a1", 1, "10.0.0.1", 8001),
        ("a2", 0, "10.0.0.2", 8000),
    ]
    assert m.nodes == {"a1": "10.0.0.1", "a2": "10.0.0.2"}
    v = m.role_vars()
    assert v["metrics_node_targets"] == [
        {"host": "a1", "address": "10.0.0.1", "port": 9100},
        {"host": "a2", "address": "10.0.0.2", "port": 9100},
    ]
    assert v["metrics_haproxy_targets"] == [{"host": "a2", "address": "127.0.0.1", "port": 8405}]
    assert v["metrics_api_key_file"] == str(key.resolve())


def test_without_a_gateway_prometheus_runs_on_the_first_host_and_scrapes_no_haproxy():
    m = m_lib.plan(OWN, gateway=None)
    assert (m.host, m.haproxy) == ("a1", False)
    assert m.role_vars()["metrics_haproxy_targets"] == []
    assert "metrics_api_key_file" not in m.role_vars()


def test_on_the_gateways_own_server_prometheus_reads_its_own_node_exporter_on_the_loopback():
    cloud = {"s1": [{"instance": 0, "port": 8000, "url": "http://203.0.113.5:8000/v1"}]}
    gw = _gateway("zgw", inventory="/state/gw.yml", addresses={"s1": "10.1.0.7"})
    m = m_lib.plan(cloud, gateway=gw)
    assert m.own_server
    assert m.host == "zgw"
    assert [t["address"] for t in m.vllm] == ["10.1.0.7"]  # the fixed address the gateway uses, not the public one
    assert m.node_targets() == [
        {"host": "s1", "address": "10.1.0.7", "port": 9100},
        {"host": "zgw", "address": "127.0.0.1", "port": 9100},
    ]
    # a surge's new server: reached by its fixed address too
    m2 = m_lib.plan({**cloud, "s2": cloud["s1"]}, gateway=gw, addresses={"s2": "10.1.0.8"})
    assert m2.nodes == {"s1": "10.1.0.7", "s2": "10.1.0.8"}


def test_node_exporter_listens_on_the_hosts_address_and_on_every_address_only_for_a_name():
    assert m_lib._listen_address("10.0.0.1") == "10.0.0.1"
    assert m_lib._listen_address("fd00::5") == "fd00::5"
    assert m_lib._listen_address("h1.example") == "0.0.0.0"


def test_the_state_survives_the_serving_record_round_trip():
    m = m_lib.plan(OWN, gateway=_gateway("a2"))
    assert m_lib.Metrics.from_dict(m.to_dict()) == m


def test_metrics_on_or_off_only():
    assert m_lib.wanted("on")
    assert not m_lib.wanted("off")
    with pytest.raises(UsageError, match="--metrics auto: use one of on, off"):
        m_lib.SERVICE.preflight(services_lib.View(Path("h.yml"), request=serve.ServeRequest(model="m", metrics="auto")))


# --- the plays: up, rollout, down ----------------------------------------------------------------------------------


class Runs:
    """TEST DOUBLE of Ansible: records each play; the metrics play answers on the Prometheus host as
    playbooks/metrics.yml does (every target up)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.specs: list[Any] = []
        self.scraped: list[dict[str, Any]] = []  # the vLLM targets last written (what Prometheus scrapes)

    def __call__(self, spec: Any) -> RunResult:
        self.specs.append(spec)
        facts: dict[str, Any] = {}
        if host := spec.extravars.get("zenops_gateway_host"):
            facts[host] = {"zenops_gateway_result": {"url": f"http://{host}:8080/v1", "servers": []}}
        if host := spec.extravars.get("zenops_metrics_prometheus_host"):
            if "metrics_vllm_targets" in spec.extravars:
                self.scraped = spec.extravars["metrics_vllm_targets"]
            vllm = self.scraped
            targets = [
                {
                    "labels": {"job": "vllm", "zenops_host": t["host"], "zenops_instance": str(t["instance"])},
                    "scrapeUrl": f"http://{t['address']}:{t['port']}/metrics",
                    "health": "up",
                }
                for t in vllm
            ]
            facts[host] = {"zenops_metrics_result": {"url": "http://127.0.0.1:9090", "targets": targets}}
        return RunResult("r1", spec.playbook, "successful", 0, self.tmp_path, "now", 0.1, host_facts=facts)

    def metrics_plays(self) -> list[tuple[str, str, str]]:
        """(action, limit, Prometheus host) of every metrics play."""
        return [
            (s.extravars["zenops_metrics_action"], s.limit, s.extravars["zenops_metrics_prometheus_host"])
            for s in self.specs
            if s.playbook == "metrics"
        ]


@pytest.fixture
def ctx(isolated_home, tmp_path, monkeypatch) -> RunContext:
    monkeypatch.chdir(tmp_path)
    c = RunContext(load())
    runs = Runs(tmp_path)
    monkeypatch.setattr(c, "run", runs)
    c.runs = runs  # type: ignore[attr-defined]
    return c


def _view(endpoints: Any, *, metrics: str = "on", gateway: str = "on", **kw: Any) -> services_lib.View:
    req = serve.ServeRequest(model="m", metrics=metrics, gateway=gateway)
    return services_lib.View(Path("hosts.yml"), endpoints, request=req, **kw)


def test_up_installs_the_metrics_after_the_gateway_and_on_its_host(ctx):
    states = services_lib.apply(ctx, _view(ENDPOINTS), {})
    assert list(states) == ["gateway", "metrics"]
    assert states["metrics"]["host"] == states["gateway"]["host"] == "h1"
    assert ctx.runs.metrics_plays() == [("present", "h1,h2", "h1")]
    present = ctx.runs.specs[-1].extravars
    assert present["zenops_metrics_listen"] == {"h1": "0.0.0.0", "h2": "0.0.0.0"}  # known by name only here
    assert [t["host"] for t in present["metrics_vllm_targets"]] == ["h1", "h2"]


def test_up_gives_node_exporter_a_password_of_its_own_kept_beside_the_api_key(ctx, tmp_path):
    key = tmp_path / "api-key"
    key.write_text("zk-not-a-real-key-0123456789\n")
    key.chmod(0o600)
    states = services_lib.apply(ctx, _view(ENDPOINTS, api_key_file=key), {})
    present = ctx.runs.specs[-1].extravars
    password = Path(present["metrics_scrape_password_file"])
    assert password == record_lib.metrics_password_path(ctx.config, Path("hosts.yml")).resolve()
    assert password.stat().st_mode & 0o777 == 0o600
    assert password.read_text().strip() not in ("", key.read_text().strip())
    assert present["metrics_api_key_file"] == str(key.resolve())
    assert states["metrics"]["password_file"] == str(password)
    # the same password on the next `up` (node_exporter's hash stays), a new one once `down` forgot it
    first = password.read_text()
    services_lib.apply(ctx, _view(ENDPOINTS, api_key_file=key), states)
    assert ctx.runs.specs[-1].extravars["metrics_scrape_password_file"] == str(password)
    assert password.read_text() == first
    assert record_lib.forget_secrets(ctx.config, Path("hosts.yml"), lambda _: None) == [password]
    services_lib.apply(ctx, _view(ENDPOINTS, api_key_file=key), states)
    assert password.read_text() != first


def test_a_rollout_moves_a_deployment_made_before_the_metrics_password_to_it_on_every_host(ctx):
    old = m_lib.plan(ENDPOINTS, gateway=None, api_key_file="/state/k.api-key").to_dict()
    del old["password_file"]  # a serving record an earlier zenops wrote
    after = services_lib.update(ctx, dataclasses.replace(_view(ENDPOINTS), request=None), {"metrics": old})
    assert ctx.runs.metrics_plays() == [("present", "h1,h2", "h1")]  # not only the targets: every host's credentials
    assert ctx.runs.specs[-1].extravars["metrics_scrape_password_file"] == after["metrics"]["password_file"] != ""
    ctx.runs.specs.clear()
    assert services_lib.update(ctx, dataclasses.replace(_view(ENDPOINTS), request=None), after) == after
    assert ctx.runs.specs == []


@pytest.mark.parametrize(("mode", "text", "error"), [(0o644, "zm-x", "readable by others"), (0o600, "", "empty")])
def test_a_metrics_password_file_readable_by_others_or_empty_is_refused_with_the_fix(ctx, mode, text, error):
    path = record_lib.metrics_password_path(ctx.config, Path("hosts.yml"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    with pytest.raises(UsageError, match=error) as e:
        record_lib.ensure_metrics_password(ctx.config, Path("hosts.yml"))
    assert str(path) in (e.value.hint or "")


def test_up_with_metrics_off_removes_them_from_every_host(ctx):
    had = {"metrics": m_lib.plan(ENDPOINTS, gateway=None).to_dict()}
    states = services_lib.apply(ctx, _view(ENDPOINTS, metrics="off", gateway="off"), had)
    assert "metrics" not in states
    assert ctx.runs.metrics_plays() == [("absent", "h1,h2", "")]


def test_a_rollout_on_other_ports_rewrites_only_the_targets_and_an_unchanged_one_runs_nothing(ctx):
    states = services_lib.apply(ctx, _view(ENDPOINTS), {})
    ctx.runs.specs.clear()
    assert services_lib.update(ctx, _view(ENDPOINTS, metrics="on"), states) == states
    assert ctx.runs.specs == []
    moved = {h: [{**ep, "port": 8001} for ep in eps] for h, eps in ENDPOINTS.items()}
    after = services_lib.update(ctx, dataclasses.replace(_view(moved), request=None), states)
    assert ctx.runs.metrics_plays() == [("targets", "h1", "h1")]
    assert [t["port"] for t in after["metrics"]["vllm"]] == [8001, 8001]


def test_a_new_host_gets_node_exporter_and_down_removes_everything_from_every_host(ctx):
    states = services_lib.apply(ctx, _view(ENDPOINTS), {})
    ctx.runs.specs.clear()
    grown = {**ENDPOINTS, "h3": [{"instance": 0, "port": 8000, "url": "http://h3:8000/v1"}]}
    after = services_lib.update(ctx, dataclasses.replace(_view(grown), request=None), states)
    assert ctx.runs.metrics_plays() == [("present", "h1,h3", "h1")]  # the new host and Prometheus's
    ctx.runs.specs.clear()
    assert services_lib.remove(ctx, Path("hosts.yml"), after) == ["gateway", "metrics"]
    assert ctx.runs.metrics_plays() == [("absent", "h1,h2,h3", "")]


def test_status_lists_each_target_and_counts_those_up(ctx):
    states = services_lib.apply(ctx, _view(ENDPOINTS), {})
    live = services_lib.status(ctx, Path("hosts.yml"), states)["metrics"]["live"]
    assert live["up"] == 2
    assert [(t["job"], t["host"], t["instance"]) for t in live["targets"]] == [("vllm", "h1", "0"), ("vllm", "h2", "0")]


# --- top from Prometheus's answers ----------------------------------------------------------------------------------


def _vec(field_values: dict[tuple[str, str], float | str], *, by_host: bool = False) -> list[dict[str, Any]]:
    out = []
    for (host, inst), v in field_values.items():
        labels = {"zenops_host": host} if by_host else {"zenops_host": host, "zenops_instance": inst}
        out.append({"metric": labels, "value": [1764190000.0, str(v)]})
    return out


def test_top_rows_from_prometheus_answers():
    instances = instances_of(OWN)
    answers = {
        "up": _vec({("a1", "0"): 1, ("a1", "1"): 1, ("a2", "0"): 0}),
        "running": _vec({("a1", "0"): 2, ("a1", "1"): 0}),
        "generated_tok_s": _vec({("a1", "0"): 41.666, ("a1", "1"): 0}),
        "ttft_p50_ms": _vec({("a1", "0"): 123.45, ("a1", "1"): "NaN"}),  # no request in the window: NaN
        "host_cpu_pct": _vec({("a1", ""): 87.5}, by_host=True),
    }
    rows = {(r.host, r.instance): r for r in prom.rows_from_answers(answers, instances, 60)}
    a10, a11, a20 = rows[("a1", 0)], rows[("a1", 1)], rows[("a2", 0)]
    assert (a10.running, a10.generated_tok_s, a10.ttft_p50_ms, a10.host_cpu_pct) == (2.0, 41.7, 123.5, 87.5)
    assert a10.error is None
    assert a10.window_s == 60.0
    assert (a11.running, a11.ttft_p50_ms, a11.host_cpu_pct) == (0.0, None, 87.5)
    assert a20.error == "Prometheus cannot scrape it (up 0)"
    assert a20.running is None


def test_top_from_prometheus_says_so_when_an_instance_is_no_target_or_prometheus_failed():
    instances = instances_of(OWN)
    rows = prom.rows_from_answers({"up": _vec({("a1", "0"): 1})}, instances, 60)
    assert [r.error for r in rows] == [None, "not a Prometheus target (yet)", "not a Prometheus target (yet)"]
    failed = prom.rows_from_answers({"up": {"error": "connection refused"}}, instances, 60)
    assert {r.error for r in failed} == {"Prometheus: connection refused"}


def test_every_query_groups_by_instance_or_host_and_covers_every_row_figure():
    qs = prom.queries(60)
    row_fields = {f.name for f in dataclasses.fields(prom.Row)}
    assert set(qs) - {"up"} <= row_fields
    for field, q in qs.items():
        assert ("by (zenops_host)" in q) if field.startswith("host_") else ("zenops_instance" in q), field
    assert "[60s]" in qs["ttft_p95_ms"]
    assert "[60s]" in qs["preemptions_in_window"]
