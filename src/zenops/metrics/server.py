"""A benchmark run's server-side figures, from what the client's sampler read of the server (zenops.bench.sampler:
/metrics before and after the run, the gauges every 0.25 s during it). Pure.

- ``preemptions``: requests the scheduler preempted during the run (KV cache full);
- ``kv_peak_pct``: the highest KV cache usage seen;
- ``running_mean`` / ``running_peak``: the batch the engine ran (requests running), over the samples with work;
- ``waiting_peak``: the longest queue seen;
- ``queue_ms_mean``: the mean time a request waited before it was scheduled;
- ``prefix_cache_hit_pct``: prefix-cache hits of the run's queries;
- ``requests``: requests the server completed during the run (warm-up requests of the client included);
- ``output_tokens``: the tokens the server generated during the run, by its own count (vLLM's
  ``vllm:generation_tokens``, llama.cpp's ``llamacpp:tokens_predicted``; warm-up requests included): what
  zenops.report.loading.counted_by_server checks the client's count against.

A figure the server does not export (an older engine) or that could not be read is None; ``errors`` says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zenops.metrics import promtext, series

SUFFIX = ".server.json"  # a run's read of its server, beside its result <stem>.json (zenops.bench.client writes it)


KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the older name on older engines
GENERATED = ("vllm:generation_tokens", "llamacpp:tokens_predicted")  # counters: vLLM's, llama.cpp's (--metrics)


def _grew(before: list[promtext.Sample], after: list[promtext.Sample], name: str) -> float | None:
    return series.increase(promtext.counter(before, name), promtext.counter(after, name))


def _generated(before: list[promtext.Sample], after: list[promtext.Sample]) -> float | None:
    """The increase of the first GENERATED counter the server exports (an engine exports one of them)."""
    return next((v for name in GENERATED if (v := _grew(before, after, name)) is not None), None)


def server_figures(read: Mapping[str, Any]) -> dict[str, Any]:
    before = promtext.parse(str(read.get("before") or ""))
    after = promtext.parse(str(read.get("after") or ""))
    gauges = [g for g in read.get("gauges") or [] if isinstance(g, Mapping)]
    kv = [float(g["kv"]) for g in gauges if g.get("kv") is not None]
    kv += [v for snap in (before, after) if (v := promtext.first_total(snap, KV_USAGE)) is not None]
    busy = [float(g["running"]) for g in gauges if g.get("running")]
    waiting = [float(g["waiting"]) for g in gauges if g.get("waiting") is not None]
    queue_sum = _grew(before, after, "vllm:request_queue_time_seconds_sum")
    queue_n = _grew(before, after, "vllm:request_queue_time_seconds_count")
    hits = _grew(before, after, "vllm:prefix_cache_hits")
    queries = _grew(before, after, "vllm:prefix_cache_queries")
    complete = bool(before) and bool(after)
    queue_ms = 1000 * queue_sum / queue_n if complete and queue_sum is not None and queue_n else None
    return {
        "preemptions": _grew(before, after, "vllm:num_preemptions") if complete else None,
        "kv_peak_pct": round(max(kv) * 100, 1) if kv else None,
        "running_mean": round(sum(busy) / len(busy), 2) if busy else None,
        "running_peak": max(busy) if busy else None,
        "waiting_peak": max(waiting) if waiting else None,
        "queue_ms_mean": round(queue_ms, 2) if queue_ms is not None else None,
        "prefix_cache_hit_pct": round(100 * hits / queries, 1) if complete and hits is not None and queries else None,
        "requests": _grew(before, after, "vllm:request_success") if complete else None,
        "output_tokens": _generated(before, after) if complete else None,
        "samples": len(gauges),
        "errors": [str(e) for e in read.get("errors") or []][:5],
    }


def line(figures: Mapping[str, Any] | None) -> str:
    """``server: KV peak 12.5%, 0 preemptions, queue 3.1 ms, mean batch 3.9`` (what was read), or ""."""
    if not figures:
        return ""
    parts = []
    if figures.get("kv_peak_pct") is not None:
        parts.append(f"KV peak {figures['kv_peak_pct']:.1f}%")
    if figures.get("preemptions") is not None:
        parts.append(f"{figures['preemptions']:.0f} preemptions")
    if figures.get("queue_ms_mean") is not None:
        parts.append(f"queue {figures['queue_ms_mean']:.1f} ms")
    if figures.get("running_mean") is not None:
        parts.append(f"mean batch {figures['running_mean']:.1f}")
    if figures.get("prefix_cache_hit_pct") is not None:
        parts.append(f"prefix cache hits {figures['prefix_cache_hit_pct']:.0f}%")
    return "server: " + ", ".join(parts) if parts else ""


def merged(figures: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Several runs' server figures as one (instances of a host side by side, repeats of a cell): the peaks are the
    highest, preemptions and requests add up, the means are averaged; None when no run has figures."""
    known = [f for f in figures if f]
    if not known:
        return None

    def values(key: str) -> list[float]:
        return [float(f[key]) for f in known if f.get(key) is not None]

    def peak(key: str) -> float | None:
        vs = values(key)
        return max(vs) if vs else None

    def added(key: str) -> float | None:
        vs = values(key)
        return sum(vs) if len(vs) == len(known) else None  # a run without it: the total is unknown

    def mean(key: str, digits: int) -> float | None:
        vs = values(key)
        return round(sum(vs) / len(vs), digits) if vs else None

    return {
        "preemptions": added("preemptions"),
        "kv_peak_pct": peak("kv_peak_pct"),
        "running_mean": mean("running_mean", 2),
        "running_peak": peak("running_peak"),
        "waiting_peak": peak("waiting_peak"),
        "queue_ms_mean": mean("queue_ms_mean", 2),
        "prefix_cache_hit_pct": mean("prefix_cache_hit_pct", 1),
        "requests": added("requests"),
        "output_tokens": added("output_tokens"),
        "samples": sum(int(f.get("samples") or 0) for f in known),
        "errors": [e for f in known for e in f.get("errors") or []][:5],
    }
