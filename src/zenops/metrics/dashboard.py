"""A Grafana dashboard (JSON model, schema 39) with the panels of `zenops top`, built from the same PromQL
(zenops.metrics.prom.queries), so the two never disagree. The file ships as dashboards/zenops-vllm.json:

    python -m zenops.metrics.dashboard > dashboards/zenops-vllm.json

Grafana is not in Debian's archive: the file is checked by tests/unit/test_metrics_dashboard.py (structure, every
query one of top's, the committed file equal to this output), never loaded in a real Grafana here. Import it in
Grafana with the deployment's Prometheus as data source (reached through `ssh -L 9090:127.0.0.1:9090`, see the
README); the variable ``host`` filters by inventory host.
"""

from __future__ import annotations

import json
from typing import Any

from zenops.metrics.prom import queries

# panel title, unit, the fields of prom.queries() it draws (one series per instance or host)
PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Requests running and waiting", "short", ("running", "waiting")),
    ("KV cache usage", "percent", ("kv_cache_pct",)),
    ("Generated tokens/s", "short", ("generated_tok_s", "prompt_tok_s")),
    ("Time to first token p50 / p95", "ms", ("ttft_p50_ms", "ttft_p95_ms")),
    ("Inter-token latency p50 / p95", "ms", ("itl_p50_ms", "itl_p95_ms")),
    ("Preemptions in the window", "short", ("preemptions_in_window",)),
    ("Host CPU busy", "percent", ("host_cpu_pct",)),
    ("Host memory used", "percent", ("host_mem_pct",)),
)
WINDOW_S = 60  # the percentiles' and preemptions' window, as `zenops top --window`'s default


def build() -> dict[str, Any]:
    qs = queries(WINDOW_S, host_match="$host")
    panels = []
    for i, (title, unit, fields) in enumerate(PANELS):
        per_host = all(f.startswith("host_") for f in fields)
        legend = "{{zenops_host}}" if per_host else "{{zenops_host}}/{{zenops_instance}}"
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + j),
                        "expr": qs[f],
                        "legendFormat": f"{legend} {f}" if len(fields) > 1 else legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    }
                    for j, f in enumerate(fields)
                ],
            }
        )
    return {
        "title": "zenops: vLLM on CPU",
        "uid": "zenops-vllm",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "tags": ["zenops", "vllm"],
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {
                    "name": "host",
                    "type": "query",
                    "label": "host",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(up, zenops_host)",
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "allValue": ".*",
                },
            ]
        },
        "panels": panels,
    }


if __name__ == "__main__":
    print(json.dumps(build(), indent=2))
