"""Comparing two sets of results: the same model, concurrency, flavor and platform matched up, deltas in percent;
and one host's instances summed into one row (:func:`host_totals`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zenops.metrics.server import merged as merged_server
from zenops.report.results import BenchResult, ordered

# --- comparison -------------------------------------------------------------------------------------------------


def pct_change(new: float | None, old: float | None) -> float | None:
    """(new - old) / old in percent; None when either is unknown or old is 0."""
    if new is None or old is None or old == 0:
        return None
    return (new - old) / old * 100


@dataclass(frozen=True)
class Delta:
    """One model at one concurrency in two reports: ``current`` (the report) against ``baseline`` (--compare)."""

    current: BenchResult
    baseline: BenchResult

    @property
    def model(self) -> str:
        return self.current.model

    @property
    def max_concurrency(self) -> int | None:
        return self.current.max_concurrency

    @property
    def output_tok_s_pct(self) -> float | None:
        return pct_change(self.current.output_tok_s, self.baseline.output_tok_s)

    @property
    def median_ttft_pct(self) -> float | None:
        return pct_change(self.current.median_ttft_ms, self.baseline.median_ttft_ms)

    @property
    def median_tpot_pct(self) -> float | None:
        return pct_change(self.current.median_tpot_ms, self.baseline.median_tpot_ms)

    @property
    def cost_pct(self) -> float | None:
        return pct_change(self.current.cost_per_million_output_tokens, self.baseline.cost_per_million_output_tokens)

    def to_dict(self) -> dict[str, Any]:
        cur, base = self.current, self.baseline
        return {
            "model": self.model,
            "max_concurrency": self.max_concurrency,
            "output_throughput": cur.output_tok_s,
            "baseline_output_throughput": base.output_tok_s,
            "output_throughput_pct": self.output_tok_s_pct,
            "median_ttft_ms": cur.median_ttft_ms,
            "baseline_median_ttft_ms": base.median_ttft_ms,
            "median_ttft_pct": self.median_ttft_pct,
            "median_tpot_ms": cur.median_tpot_ms,
            "baseline_median_tpot_ms": base.median_tpot_ms,
            "median_tpot_pct": self.median_tpot_pct,
            "cost_per_million_output_tokens": cur.cost_per_million_output_tokens,
            "baseline_cost_per_million_output_tokens": base.cost_per_million_output_tokens,
            "cost_pct": self.cost_pct,
            "source": cur.source,
            "baseline_source": base.source,
        }


@dataclass(frozen=True)
class Comparison:
    deltas: list[Delta]
    only_current: list[BenchResult]
    only_baseline: list[BenchResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "deltas": [d.to_dict() for d in self.deltas],
            "only_in_report": [_key_dict(r) for r in self.only_current],
            "only_in_baseline": [_key_dict(r) for r in self.only_baseline],
        }


def _key_dict(r: BenchResult) -> dict[str, Any]:
    return {"model": r.model, "max_concurrency": r.max_concurrency, "source": r.source}


def compare(current: Sequence[BenchResult], baseline: Sequence[BenchResult]) -> Comparison:
    """Pair results by (model, max concurrency); repeated runs of a pair are matched in the order they were read."""
    base: dict[tuple[str, int | None], list[BenchResult]] = defaultdict(list)
    for r in baseline:
        base[(r.model, r.max_concurrency)].append(r)
    deltas: list[Delta] = []
    only_current: list[BenchResult] = []
    for r in ordered(current):
        candidates = base.get((r.model, r.max_concurrency))
        if candidates:
            deltas.append(Delta(r, candidates.pop(0)))
        else:
            only_current.append(r)
    return Comparison(deltas, only_current, ordered(r for rs in base.values() for r in rs))


# --- several instances on one host ------------------------------------------------------------------------------


def host_totals(results: Iterable[BenchResult]) -> list[BenchResult]:
    """One row per host and run where several instances served side by side (the planner's throughput objective):
    their output, total and request throughput and their requests summed, so the host's $ per 1M output tokens is
    the server's price over everything it served (each instance's own row prices it as if it had the server alone).
    Latencies are per request, not additive: the row keeps the worst instance's medians. Hosts with one instance
    get no row. Grouped by run, host, model, flavor, platform, label and concurrency."""
    groups: dict[tuple[Any, ...], list[BenchResult]] = defaultdict(list)
    for r in results:
        host = r.metadata.get("host")
        if host is None or r.instance is None:
            continue
        key = (r.metadata.get("run_id"), host, r.model, r.flavor, r.platform, r.label, r.max_concurrency)
        groups[key].append(r)
    out = []
    for (_run, host, *_), rs in groups.items():
        instances = sorted({r.instance for r in rs if r.instance is not None})
        if len(instances) < 2:
            continue

        def total(values: Iterable[float | None]) -> float | None:
            vs = list(values)
            return None if any(v is None for v in vs) else sum(v for v in vs if v is not None)

        def worst(values: Iterable[float | None]) -> float | None:
            vs = [v for v in values if v is not None]
            return max(vs) if vs else None

        first = rs[0]
        failed = [r.failed for r in rs]
        out.append(
            replace(
                first,
                output_tok_s=sum(r.output_tok_s for r in rs),
                total_tok_s=total(r.total_tok_s for r in rs),
                request_s=total(r.request_s for r in rs),
                median_ttft_ms=worst(r.median_ttft_ms for r in rs),
                mean_ttft_ms=None,
                p99_ttft_ms=worst(r.p99_ttft_ms for r in rs),
                median_tpot_ms=worst(r.median_tpot_ms for r in rs),
                mean_tpot_ms=None,
                p99_tpot_ms=worst(r.p99_tpot_ms for r in rs),
                median_itl_ms=worst(r.median_itl_ms for r in rs),
                mean_itl_ms=None,
                p99_itl_ms=worst(r.p99_itl_ms for r in rs),
                completed=sum(r.completed for r in rs),
                failed=None if any(f is None for f in failed) else sum(f for f in failed if f is not None),
                num_prompts=None
                if any(r.num_prompts is None for r in rs)
                else sum(r.num_prompts for r in rs if r.num_prompts is not None),
                duration_s=worst(r.duration_s for r in rs),
                source=f"{host}: instances {', '.join(map(str, instances))} summed",
                label=f"{host} total ({len(instances)} instances)",
                instance=None,
                roofline=None,
                server=merged_server([r.server for r in rs]),
            )
        )
    return ordered(out)
