"""The campaign report's rows and what is chosen from them (zenops.campaign.report builds the report on these and
names them too; its docstring gives the rules): the cells' outcomes, the results attributed to their cells, one row
per (flavor, model, variant, concurrency) with its repeats averaged and a server's instances summed; the best row of a
model, the non-dominated rows, the break-even against a hosted API. Pure: results in, values out.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import PurePath
from statistics import fmean
from typing import Any

from zenops.cost import HOURS_PER_MONTH, cost_per_month
from zenops.measured import spread_of
from zenops.metrics.server import merged as merged_server
from zenops.report.comparison import host_totals
from zenops.report.rendering import fmt
from zenops.report.results import BenchResult

BURST_RATIO = 0.25  # a median TPOT under this share of the mean: the tokens came in bursts (Row.bursty)
# A median TPOT under this (over 10,000 tok/s per user, beyond any CPU's decode): the tokens of every request came
# together, median and mean alike (measured in CI12: 0.003 ms median, 0.0031 ms mean)
BURST_FLOOR_MS = 0.1
STATUSES = ("done", "failed", "pending", "skipped")


@dataclass(frozen=True)
class CellOutcome:
    """What the campaign state keeps for a cell (the campaign run writes it, the report reads it)."""

    key: str
    flavor: str
    model: str
    variant: str
    status: str  # done | failed | pending | skipped (budget)
    reason: str | None  # failed/skipped: the classified reason
    run_dir: str | None  # bench artifacts (done)


# --- rows -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One (flavor, model, variant, concurrency): ``result`` is the mean of its ``runs`` (one per repeat)."""

    result: BenchResult
    runs: tuple[BenchResult, ...]

    @property
    def flavor(self) -> str | None:
        return self.result.flavor

    @property
    def model(self) -> str:
        return self.result.model

    @property
    def variant(self) -> str | None:
        return self.result.label

    @property
    def concurrency(self) -> int | None:
        return self.result.max_concurrency

    @property
    def cost(self) -> float | None:
        """$ per 1M output tokens (None without a price)."""
        return self.result.cost_per_million_output_tokens

    @property
    def bursty(self) -> bool:
        """The requests' tokens arrived in a few chunks, not one by one: the median TPOT is far below the mean
        (measured: a tiny model on a 4-vCPU server, median 0.003 ms against a mean of 0.82 ms), or below
        BURST_FLOOR_MS (each request's tokens in one chunk: median and mean both about 0.003 ms). Such a median says
        nothing about per-user speed."""
        median, mean = self.result.median_tpot_ms, self.result.mean_tpot_ms
        if median is None:
            return False
        if median < BURST_FLOOR_MS:
            return True
        return mean is not None and mean > 0 and median < BURST_RATIO * mean

    @property
    def tpot_ms(self) -> float | None:
        """The median TPOT as a per-user latency: None without one, or when the stream came in bursts."""
        return None if self.bursty else self.result.median_tpot_ms

    @property
    def user_tok_s(self) -> float | None:
        """Per-user speed: 1000 / median TPOT (the tokens a second one request sees); None without a usable TPOT."""
        tpot = self.tpot_ms
        return 1000 / tpot if tpot else None

    @property
    def spread(self) -> float | None:
        """(max - min) / mean of the repeats' output tok/s; None with one run."""
        return spread_of([r.output_tok_s for r in self.runs])

    @property
    def ok(self) -> bool:
        """No failed request, none missing: its numbers measure serving."""
        return not self.result.flagged

    def key(self) -> tuple[str, str, str, int]:
        return (self.flavor or "", self.model, self.variant or "", self.concurrency or 0)

    @property
    def engine(self) -> str:
        """What served: llama.cpp (a campaign's peer cell, zenops.llamacpp_serve) or zenops (vLLM, any layout)."""
        return "llama.cpp" if self.result.metadata.get("engine") == "llama.cpp" else "zenops"

    def describe(self) -> str:
        """``gp.5.24.96 / zen at concurrency 4``."""
        return f"{self.flavor or '-'} / {self.variant or '-'} at concurrency {self.concurrency or '-'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.result.to_dict(),
            "variant": self.variant,
            "engine": self.engine,
            "weights": self.result.metadata.get("weights"),  # the plan's (bfloat16, w8a8, ...) or the GGUF format
            "concurrency": self.concurrency,
            "repeats": len(self.runs),
            "output_throughput_spread": self.spread,
            "output_throughput_runs": [r.output_tok_s for r in self.runs],  # each repeat's, in order
            "user_tok_s": self.user_tok_s,
            "bursty": self.bursty,
            "sources": [r.source for r in self.runs],
            "kv_peak_pct": (self.result.server or {}).get("kv_peak_pct"),
            "preemptions": (self.result.server or {}).get("preemptions"),
        }


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def _total(values: Iterable[int | None]) -> int | None:
    vs = list(values)
    return None if any(v is None for v in vs) else sum(v for v in vs if v is not None)


# the optional measurements of a BenchResult (throughputs, latencies, duration, lengths): averaged over repeats
_AVERAGED = tuple(f.name for f in fields(BenchResult) if f.type == "float | None" and f.name != "price_per_hour")


def mean_result(runs: Sequence[BenchResult]) -> BenchResult:
    """Repeats of one measurement as one result: throughputs, latencies and lengths averaged (over the runs that
    know them), requests, failures and prompts summed; the first run's labels, price and ceiling."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    averaged: dict[str, Any] = {name: _mean(getattr(r, name) for r in runs) for name in _AVERAGED}
    return replace(
        first,
        output_tok_s=fmean(r.output_tok_s for r in runs),
        completed=sum(r.completed for r in runs),
        failed=_total(r.failed for r in runs),
        num_prompts=_total(r.num_prompts for r in runs),
        price_per_hour=next((r.price_per_hour for r in runs if r.price_per_hour is not None), None),
        source=f"{first.source} (+{len(runs) - 1} repeats)",
        server=merged_server([r.server for r in runs]),
        **averaged,
    )


def per_server(results: Sequence[BenchResult]) -> list[BenchResult]:
    """Each run's server as one result: several instances of one host and run summed (``host_totals``, its variant
    label kept), single instances as they are."""
    by_label: dict[str | None, list[BenchResult]] = defaultdict(list)
    for r in results:
        by_label[r.label].append(r)
    totals: list[BenchResult] = []
    for label, rs in by_label.items():
        totals.extend(replace(t, label=label) for t in host_totals(rs))

    def group(r: BenchResult) -> tuple[Any, ...]:
        return (r.metadata.get("run_id"), r.metadata.get("host"), r.model, r.flavor, r.platform, r.label)

    summed = {(*group(t), t.max_concurrency) for t in totals}
    singles = [r for r in results if r.instance is None or (*group(r), r.max_concurrency) not in summed]
    return singles + totals


def _file_of(source: str) -> PurePath:
    """A result's file: its source without the ``:<line>`` of a text block or JSON line, or the ``[<n>]`` of a list."""
    return PurePath(re.sub(r"(:\d+|\[\d+\])$", "", source))


def _cell_of(result: BenchResult, cells: Sequence[CellOutcome]) -> CellOutcome | None:
    """The cell whose run directory holds the result's file (or a directory named after the cell's key)."""
    path = _file_of(result.source)
    for cell in cells:
        if cell.run_dir and _under(path, PurePath(cell.run_dir)):
            return cell
        if any(part == cell.key or part.startswith(f"{cell.key}-") for part in path.parts[:-1]):
            return cell
    return None


def _under(path: PurePath, directory: PurePath) -> bool:
    try:
        path.relative_to(directory)
    except ValueError:
        return False
    return True


def _attributed(results: Sequence[BenchResult], cells: Sequence[CellOutcome]) -> list[BenchResult]:
    out = []
    for r in results:
        cell = _cell_of(r, cells)
        if cell is None:
            out.append(r)
            continue
        meta = {**r.metadata, "cell": cell.key}
        out.append(replace(r, model=cell.model, label=cell.variant, flavor=r.flavor or cell.flavor, metadata=meta))
    return out


def rows_of(results: Sequence[BenchResult], cells: Sequence[CellOutcome] = ()) -> list[Row]:
    """One row per (flavor, model, variant, concurrency), repeats averaged; ordered by model, flavor, variant and
    concurrency."""
    groups: dict[tuple[str, str, str, int], list[BenchResult]] = defaultdict(list)
    for r in per_server(_attributed(results, cells)):
        groups[(r.flavor or "", r.model, r.label or "", r.max_concurrency or 0)].append(r)
    rows = [Row(mean_result(rs), tuple(rs)) for rs in groups.values()]
    return sorted(rows, key=lambda row: (row.model, *row.key()))


# --- choosing ---------------------------------------------------------------------------------------------------


def _choice_order(row: Row) -> tuple[float, float, float, str, str, int]:
    cost = row.cost if row.cost is not None else math.inf
    tpot = row.result.median_tpot_ms if row.result.median_tpot_ms is not None else math.inf
    return (cost, -row.result.output_tok_s, tpot, row.flavor or "", row.variant or "", row.concurrency or 0)


def best_of(rows: Sequence[Row], max_tpot_ms: float | None) -> tuple[Row | None, str]:
    """The lowest $ per 1M output tokens among ``rows`` (one model's) that qualify, and why (or why none does)."""
    if not rows:
        return None, "no cell of it was measured"
    ok = [r for r in rows if r.ok]
    if not ok:
        first = rows[0]
        return None, (
            f"all {len(rows)} measurement(s) had failed requests "
            f"(first: {first.describe()}: {'; '.join(first.result.problems)})"
        )
    within = ok
    if max_tpot_ms is not None:
        within = [r for r in ok if r.tpot_ms is not None and r.tpot_ms <= max_tpot_ms]
        if not within:
            timed = [r for r in ok if r.tpot_ms is not None]
            if not timed:
                return None, "no measurement has a median TPOT to hold against the bound"
            fastest = min(timed, key=lambda r: r.tpot_ms or math.inf)
            return None, (
                f"no configuration has a median TPOT <= {fmt(max_tpot_ms, 1)} ms "
                f"(the lowest: {fmt(fastest.result.median_tpot_ms, 1)} ms, {fastest.describe()})"
            )
    priced = [r for r in within if r.cost is not None]
    if not priced:
        return None, "no price is known for its flavors: no $ per 1M tokens to choose by (set prices: in the file)"
    best = min(priced, key=_choice_order)
    bound = f", median TPOT <= {fmt(max_tpot_ms, 1)} ms" if max_tpot_ms is not None else ""
    why = f"lowest $ per 1M output tokens of {len(priced)} qualifying measurement(s) (no failed requests{bound})"
    return best, why


def pareto(rows: Sequence[Row]) -> list[Row]:
    """The non-dominated rows: no other row has both more output tok/s per server and more per-user speed (at
    least as much of both and more of one). Rows with failed requests or without a TPOT take no part. Ordered by
    output tok/s, highest first."""
    points = [r for r in rows if r.ok and r.user_tok_s is not None]

    def dominates(a: Row, b: Row) -> bool:
        at, bt = a.result.output_tok_s, b.result.output_tok_s
        au, bu = a.user_tok_s or 0.0, b.user_tok_s or 0.0
        return at >= bt and au >= bu and (at > bt or au > bu)

    front = [r for r in points if not any(dominates(o, r) for o in points if o is not r)]
    return sorted(front, key=lambda r: (-r.result.output_tok_s, r.key()))


@dataclass(frozen=True)
class BreakEven:
    """A configuration against a hosted API (see zenops.campaign.report's docstring for the assumption)."""

    api_price: float  # $ per 1M output tokens
    monthly_cost: float  # price per hour x HOURS_PER_MONTH
    tokens_per_month: float  # the output tokens a month at which both cost the same
    capacity_per_month: float  # output tok/s x 3600 x HOURS_PER_MONTH: the most it can serve (100% use)

    @property
    def utilisation(self) -> float:
        """The break-even volume as a share of the capacity (above 1: it never breaks even)."""
        return self.tokens_per_month / self.capacity_per_month

    @property
    def reachable(self) -> bool:
        return self.tokens_per_month <= self.capacity_per_month

    def to_dict(self) -> dict[str, Any]:
        return {
            "api_price": self.api_price,
            "hours_per_month": HOURS_PER_MONTH,
            "monthly_cost": self.monthly_cost,
            "breakeven_tokens_per_month": self.tokens_per_month,
            "capacity_tokens_per_month": self.capacity_per_month,
            "breakeven_utilisation": self.utilisation,
            "reachable": self.reachable,
        }


def break_even(price_per_hour: float | None, output_tok_s: float, api_price: float) -> BreakEven | None:
    """Monthly output tokens at which a server at ``price_per_hour`` costs what ``api_price`` $ per 1M output
    tokens would; None without a price or throughput."""
    monthly = cost_per_month(price_per_hour)  # zenops.cost: the $/month every command says
    if monthly is None or output_tok_s <= 0 or api_price <= 0:
        return None
    return BreakEven(api_price, monthly, monthly / api_price * 1e6, output_tok_s * 3600 * HOURS_PER_MONTH)
