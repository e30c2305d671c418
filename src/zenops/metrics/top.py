"""The rows of `zenops top`: one per vLLM instance, from the snapshots read so far (zenops.metrics.probe).

Gauges (requests running and waiting, KV cache usage) are the newest snapshot's. Rates (generated tokens per second)
are between the two newest. Percentiles (TTFT, inter-token latency) are over the window: between the newest snapshot
and the oldest one no older than ``window_s`` (at least the two newest). The host's CPU is busy time between the two
newest reads of /proc/stat; its memory is the newest MemAvailable against MemTotal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from zenops.metrics import promtext, series
from zenops.metrics.probe import HostSnapshot, Instance
from zenops.metrics.server import KV_USAGE

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATED = "vllm:generation_tokens"
PROMPT = "vllm:prompt_tokens"
PREEMPTIONS = "vllm:num_preemptions"
REQUESTS = "vllm:request_success"  # finished requests: never goes back, but for a restart
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")


@dataclass
class Row:
    host: str
    instance: int
    port: int
    running: float | None = None
    waiting: float | None = None
    kv_cache_pct: float | None = None
    generated_tok_s: float | None = None
    prompt_tok_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    preemptions: float | None = None  # since the server started
    preemptions_in_window: float | None = None
    host_cpu_pct: float | None = None
    host_mem_pct: float | None = None
    window_s: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _first(samples: list[promtext.Sample], names: Sequence[str], suffix: str = "") -> str | None:
    present = {s.name for s in samples}
    return next((n for n in names if f"{n}{suffix}" in present), None)


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 1) if seconds is not None else None


def rows(
    history: Sequence[dict[str, HostSnapshot]], instances: Sequence[Instance], window_s: float = 60.0
) -> list[Row]:
    """One row per instance from the snapshots so far (oldest first; one snapshot gives the gauges only)."""
    if not history:
        return []
    newest = history[-1]
    prev = history[-2] if len(history) > 1 else None
    out = []
    for inst in instances:
        row = Row(inst.host, inst.index, inst.port)
        now = newest.get(inst.host)
        if now is None or now.error:
            row.error = now.error if now else "not read"
            out.append(row)
            continue
        text = now.metrics.get(inst.index)
        if text is None:
            row.error = now.errors.get(inst.index, "no metrics")
            out.append(row)
            continue
        cur = promtext.parse(text)
        row.running = promtext.total(cur, RUNNING)
        row.waiting = promtext.total(cur, WAITING)
        kv = promtext.first_total(cur, KV_USAGE)
        row.kv_cache_pct = round(kv * 100, 1) if kv is not None else None
        row.preemptions = promtext.counter(cur, PREEMPTIONS)
        if now.mem_total:
            row.host_mem_pct = round(100 * (1 - (now.mem_available or 0) / now.mem_total), 1)
        before = prev.get(inst.host) if prev else None
        if before is not None and not before.error and inst.index in before.metrics:
            old = promtext.parse(before.metrics[inst.index])
            dt = now.time - before.time
            gen = series.rate(promtext.counter(old, GENERATED), promtext.counter(cur, GENERATED), dt)
            row.generated_tok_s = round(gen, 2) if gen is not None else None
            pr = series.rate(promtext.counter(old, PROMPT), promtext.counter(cur, PROMPT), dt)
            row.prompt_tok_s = round(pr, 2) if pr is not None else None
            busy = series.cpu_busy(before.cpu, now.cpu)
            row.host_cpu_pct = round(busy * 100, 1) if busy is not None else None
        start = _window_start(history, inst, window_s)
        if start is not None:
            # a restart inside the window (a counter went back between two reads): the server's counts since then
            restarted = _restarted_after(history, inst, start)
            base = [] if restarted else promtext.parse(start.metrics[inst.index])
            row.window_s = round(now.time - start.time, 1)
            row.preemptions_in_window = series.increase(
                promtext.counter(base, PREEMPTIONS) if base else 0.0, row.preemptions
            )
            for names, p50, p95 in (TTFT, "ttft_p50_ms", "ttft_p95_ms"), (ITL, "itl_p50_ms", "itl_p95_ms"):
                name = _first(cur, names, "_bucket")
                if name is None:
                    continue
                grown = series.bucket_increase(promtext.buckets(base, name), promtext.buckets(cur, name))
                setattr(row, p50, _ms(series.quantile(0.5, grown)))
                setattr(row, p95, _ms(series.quantile(0.95, grown)))
        out.append(row)
    return out


def _window_start(history: Sequence[dict[str, HostSnapshot]], inst: Instance, window_s: float) -> HostSnapshot | None:
    """The oldest snapshot of the instance no older than ``window_s`` before the newest, else the newest one before
    it; None with fewer than two."""
    newest = history[-1][inst.host]
    usable = [
        s for snap in history[:-1] if (s := snap.get(inst.host)) is not None and not s.error and inst.index in s.metrics
    ]
    if not usable:
        return None
    inside = [s for s in usable if newest.time - s.time <= window_s]
    return inside[0] if inside else usable[-1]


def _restarted_after(history: Sequence[dict[str, HostSnapshot]], inst: Instance, start: HostSnapshot) -> bool:
    """Whether the instance's server restarted after ``start`` (its requests counter went back between two reads)."""
    seen = False
    last: float | None = None
    for snap in history:
        s = snap.get(inst.host)
        if s is start:
            seen = True
        if not seen or s is None or s.error or inst.index not in s.metrics:
            continue
        done = promtext.counter(promtext.parse(s.metrics[inst.index]), REQUESTS)
        if done is not None and last is not None and done < last:
            return True
        last = done if done is not None else last
    return False
