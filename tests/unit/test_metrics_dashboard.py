"""The Grafana dashboard (dashboards/zenops-vllm.json): built from the queries `zenops top` sends to Prometheus
(zenops.metrics.dashboard), so the two show the same figures. Grafana is not in Debian's archive: this lints the JSON
model (structure, ids, layout, datasource, every query filtered by the ``host`` variable); it was never loaded in a
real Grafana here. The queries themselves are evaluated by a real Prometheus in molecule/metrics (verify)."""

from __future__ import annotations

import json

from tests.conftest import REPO
from zenops.metrics import dashboard, prom

FILE = REPO / "dashboards" / "zenops-vllm.json"


def test_the_committed_dashboard_is_the_one_built_from_tops_queries():
    assert json.loads(FILE.read_text()) == dashboard.build(), (
        "dashboards/zenops-vllm.json is stale: python -m zenops.metrics.dashboard > dashboards/zenops-vllm.json"
    )


def test_the_dashboard_is_a_valid_grafana_model_with_every_figure_of_top():
    d = json.loads(FILE.read_text())
    assert {"title", "uid", "schemaVersion", "panels", "templating"} <= set(d)
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "host"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0, p["title"]
        assert g["x"] + g["w"] <= 24, p["title"]  # the grid is 24 wide
        cells |= {(g["x"] + dx, g["y"] + dy) for dx in range(g["w"]) for dy in range(g["h"])}
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            assert 'zenops_host=~"$host"' in t["expr"], t["expr"]
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    assert len(cells) == sum(p["gridPos"]["w"] * p["gridPos"]["h"] for p in d["panels"])  # no two panels overlap
    drawn = {f for _t, _u, fields in dashboard.PANELS for f in fields}
    assert drawn == set(prom.queries(60)) - {"up", "preemptions"}  # top's figures, each in a panel
