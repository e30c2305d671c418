"""`zenops top` from the deployment's Prometheus (`up --metrics on`, zenops.deployment.services.metrics).

Prometheus listens on its host's loopback only, so it is asked there: a few lines of the host's python3 over SSH (as
zenops.metrics.probe reads the instances) run each PromQL query of :data:`QUERIES` and print the answers. Prometheus
does the arithmetic (rates, counter resets, percentiles from the histograms' buckets), over the same window as the
direct view; the rows have the same fields (zenops.metrics.top.Row), so `top` shows either the same way.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from zenops.deployment.access import HostAccess
from zenops.metrics.probe import Instance
from zenops.metrics.top import Row

BY = "zenops_host, zenops_instance"
RATE_WINDOW = "30s"  # rates: the last 30 s (3 scrapes at the role's 10 s interval)


def queries(window_s: int, host_match: str = "") -> dict[str, str]:
    """Row field -> PromQL, each answering one value per vLLM instance (labels zenops_host, zenops_instance), or per
    host (``host_*``). ``host_match``: only the hosts whose name matches this regular expression (the Grafana
    dashboard's ``$host``); "": every host."""
    w = f"{int(window_s)}s"

    def sel(name: str, *labels: str) -> str:
        every = [*labels, f'zenops_host=~"{host_match}"'] if host_match else list(labels)
        return f"{name}{{{', '.join(every)}}}" if every else name

    def quantile(q: float, *buckets: str) -> str:
        # the first name a server has (rate() drops the name: the same label sets, `or` keeps the first's)
        rates = " or ".join(f"rate({sel(b)}[{w}])" for b in buckets)
        return f"1000 * histogram_quantile({q}, sum by ({BY}, le) ({rates}))"

    up = sel("up", 'job="vllm"')
    idle = sel("node_cpu_seconds_total", 'mode="idle"')
    kv = f"{sel('vllm:kv_cache_usage_perc')} or {sel('vllm:gpu_cache_usage_perc')}"  # the older name second
    ttft = ("vllm:time_to_first_token_seconds_bucket",)
    itl = ("vllm:inter_token_latency_seconds_bucket", "vllm:time_per_output_token_seconds_bucket")
    return {
        "up": f"max by ({BY}) ({up})",
        "running": f"sum by ({BY}) ({sel('vllm:num_requests_running')})",
        "waiting": f"sum by ({BY}) ({sel('vllm:num_requests_waiting')})",
        "kv_cache_pct": f"100 * max by ({BY}) ({kv})",
        "generated_tok_s": f"sum by ({BY}) (rate({sel('vllm:generation_tokens_total')}[{RATE_WINDOW}]))",
        "prompt_tok_s": f"sum by ({BY}) (rate({sel('vllm:prompt_tokens_total')}[{RATE_WINDOW}]))",
        "ttft_p50_ms": quantile(0.5, *ttft),
        "ttft_p95_ms": quantile(0.95, *ttft),
        "itl_p50_ms": quantile(0.5, *itl),
        "itl_p95_ms": quantile(0.95, *itl),
        "preemptions": f"sum by ({BY}) ({sel('vllm:num_preemptions_total')})",
        "preemptions_in_window": f"sum by ({BY}) (increase({sel('vllm:num_preemptions_total')}[{w}]))",
        # per host (label zenops_host only): node_exporter's
        "host_cpu_pct": f"100 * (1 - avg by (zenops_host) (rate({idle}[{RATE_WINDOW}])))",
        "host_mem_pct": f"100 * (1 - max by (zenops_host) ({sel('node_memory_MemAvailable_bytes')})"
        f" / max by (zenops_host) ({sel('node_memory_MemTotal_bytes')}))",
    }


# runs on Prometheus's host: argv = its URL, then field=query pairs; prints {field: vector or {"error": ...}}
_PROGRAM = """
import json, sys, urllib.parse, urllib.request
base, out = sys.argv[1], {}
for pair in sys.argv[2:]:
    field, _, query = pair.partition("=")
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        answer = json.load(urllib.request.urlopen(url, timeout=10))
        out[field] = answer["data"]["result"] if answer.get("status") == "success" else {"error": answer.get("error")}
    except Exception as e:
        out[field] = {"error": str(e)}
print(json.dumps(out))
"""


def _value(sample: Mapping[str, Any]) -> float | None:
    try:
        v = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def rows_from_answers(
    answers: Mapping[str, Any], instances: Sequence[Instance], window_s: int, *, digits: int = 1
) -> list[Row]:
    """One row per instance from Prometheus's answers (field -> its instant vector). An instance Prometheus never
    scraped, or whose last scrape failed (up 0), gets an error instead of figures."""
    per_instance: dict[tuple[str, str], dict[str, float | None]] = {}
    per_host: dict[str, dict[str, float | None]] = {}
    errors = {f: a["error"] for f, a in answers.items() if isinstance(a, Mapping) and "error" in a}
    for field, vector in answers.items():
        if not isinstance(vector, list):
            continue
        for sample in vector:
            labels = sample.get("metric") or {}
            host = str(labels.get("zenops_host", ""))
            if field.startswith("host_"):
                per_host.setdefault(host, {})[field] = _value(sample)
            else:
                key = (host, str(labels.get("zenops_instance", "")))
                per_instance.setdefault(key, {})[field] = _value(sample)
    out = []
    for inst in instances:
        row = Row(inst.host, inst.index, inst.port, window_s=float(window_s))
        got = per_instance.get((inst.host, str(inst.index)), {})
        if "up" in errors:
            row.error = f"Prometheus: {errors['up']}"
        elif got.get("up") is None:
            row.error = "not a Prometheus target (yet)"
        elif got["up"] == 0:
            row.error = "Prometheus cannot scrape it (up 0)"
        if row.error:
            out.append(row)
            continue
        for field, value in {**got, **per_host.get(inst.host, {})}.items():
            if field == "up" or not hasattr(row, field):
                continue
            setattr(row, field, round(value, digits) if value is not None else None)
        out.append(row)
    return out


def read(
    access: HostAccess, url: str, instances: Sequence[Instance], window_s: int, *, timeout: float = 30
) -> list[Row]:
    """Every instance's row, from the Prometheus at ``url`` on ``access``'s host (an error row each when it could
    not be asked)."""

    def failed(why: str) -> list[Row]:
        return [Row(i.host, i.index, i.port, error=why) for i in instances]

    pairs = [f"{k}={q}" for k, q in queries(window_s).items()]
    argv = access.run_argv(["python3", "-c", _PROGRAM, url, *pairs], batch=True)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return failed(f"Prometheus on {access.host}: no answer in {timeout:.0f}s")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return failed(f"Prometheus on {access.host}: {why}")
    try:
        answers = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return failed(f"Prometheus on {access.host}: its answer was not JSON")
    return rows_from_answers(answers, instances, window_s)
