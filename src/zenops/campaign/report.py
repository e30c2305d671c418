"""A campaign's one report: every measurement of every cell in one table, the best configuration per model, the
non-dominated set, the break-even volume against a hosted API, the cells that failed or were skipped, and the
comparison with another campaign. Pure (results and cell outcomes in, values and text out) except
:func:`plot_pareto`, which writes a PNG with matplotlib (imported only then).

It builds on :mod:`zenops.report`: the results are its BenchResults (read with ``zenops.report.load`` from the
cells' bench run directories, whose run.json gives flavor, price and ``label`` = the variant's name), their cost is
its ``cost_per_million``, a server's instances are summed by its ``host_totals``, comparisons are its ``compare``.

The table: one row per (flavor, model, variant, concurrency). Repeats of that measurement are averaged into one
BenchResult (means of throughputs and latencies, requests and failures summed, so its cost, roofline percentage and
problems read as for one run); the row keeps the runs and their spread, (max - min) / mean of output tok/s. A server
that ran several instances side by side counts as one measurement: its instances summed first (the server's
throughput, priced as the whole server).

Which model a result belongs to: the cell's (the campaign's own spelling, a catalogue id or a resolved local path)
when the result's file lies in that cell's run directory (or a directory named ``<cell key>`` / ``<cell key>-...``);
otherwise the result's own model, variant (label) and flavor.

Best configuration per model: the lowest $ per 1M output tokens among its rows served by zenops (not llama.cpp's peer
rows) without failed requests (nor incomplete runs) whose median TPOT is at most ``max_tpot_ms`` (when given) and
whose price is known. Ties: the higher
output tok/s, then the lower median TPOT, then flavor, variant and concurrency in order. None, with the reason,
when nothing qualifies.

Non-dominated set (per model): rows without failed requests and with a median TPOT, none of which another row beats
on both output tok/s per server and per-user speed (1000 / median TPOT, tok/s a user sees). Cost is not an axis: it
is in the row (and the colour of the plot).

Break-even against an API at ``api_price`` $ per 1M output tokens: a server costs price per hour x 730 h a month
(billed around the clock, as a server that is kept up is); the API costs api_price per 1M tokens. They break even at
(price x 730 / api_price) x 1e6 output tokens a month. The server can produce at most output tok/s x 3600 x 730
tokens a month (100% use, at the row's concurrency); the break-even volume as a share of that is the utilisation it
needs, and over 100% it never breaks even (its $ per 1M tokens at full use is above the API's price).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path, PurePath
from statistics import fmean
from typing import Any

from zenops.cost import HOURS_PER_MONTH, cost_per_month
from zenops.errors import UsageError, in_one_line
from zenops.measured import beyond_spread, spread_of
from zenops.metrics.server import merged as merged_server
from zenops.report.comparison import Comparison, compare, host_totals
from zenops.report.rendering import cost_header, csv_text, fmt, fmt_price, md_table, model_cell, roofline_cell
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
    """A configuration against a hosted API (see the module's docstring for the assumption)."""

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


# --- the report -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CampaignReport:
    """What :func:`build_report` found: the rows, the cells, per model the best row (or None and why) and the
    non-dominated rows, the bounds it was built with. ``markdown()``, ``csv()`` and ``to_dict()`` render it."""

    rows: list[Row]
    cells: list[CellOutcome]
    best: dict[str, Row | None]  # model -> its best configuration, None when nothing qualifies
    why: dict[str, str]  # model -> why that one, or why none
    front: dict[str, list[Row]]  # model -> its non-dominated rows
    max_tpot_ms: float | None = None
    api_price: float | None = None
    unmatched_cells: list[CellOutcome] = field(default_factory=list)  # done, but no result read lies in its run dir

    @property
    def partial(self) -> bool:
        """Some cells never ran (pending, or skipped: the budget ran out)."""
        return any(c.status not in ("done", "failed") for c in self.cells)

    @property
    def not_measured(self) -> list[CellOutcome]:
        """Cells that failed, were skipped or are pending, in the campaign's order."""
        return [c for c in self.cells if c.status != "done"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cells:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def status_line(self) -> str:
        """``Partial campaign: 5 of 8 cells measured (2 skipped, 1 pending).`` or ``Complete: ...``."""
        counts = self.counts()
        rest = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s != "done")
        head = "Partial campaign" if self.partial else "Campaign complete"
        text = f"{head}: {counts.get('done', 0)} of {len(self.cells)} cells measured"
        return text + (f" ({rest})." if rest else ".")

    def break_even(self, row: Row) -> BreakEven | None:
        if self.api_price is None:
            return None
        return break_even(row.result.price_per_hour, row.result.output_tok_s, self.api_price)

    def is_best(self, row: Row) -> bool:
        return self.best.get(row.model) is row

    def on_front(self, row: Row) -> bool:
        return any(r is row for r in self.front.get(row.model, ()))

    def row_dict(self, row: Row) -> dict[str, Any]:
        be = self.break_even(row)
        return {
            **row.to_dict(),
            "best": self.is_best(row),
            "pareto": self.on_front(row),
            **(be.to_dict() if be else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "partial": self.partial,
            "status": self.status_line(),
            "cells": dict(sorted(self.counts().items())),
            "max_tpot_ms": self.max_tpot_ms,
            "api_price": self.api_price,
            "hours_per_month": HOURS_PER_MONTH,
            "rows": [self.row_dict(r) for r in self.rows],
            "best": {m: (self.row_dict(r) if r is not None else None) for m, r in self.best.items()},
            "why": dict(self.why),
            "pareto": {m: [self.row_dict(r) for r in rs] for m, rs in self.front.items()},
            "not_measured": [asdict(c) for c in self.not_measured],
            "unmatched_cells": [c.key for c in self.unmatched_cells],
            "peers": [p.to_dict() for p in peer_ratios(self.rows)],
        }

    def markdown(self) -> str:
        return _markdown(self)

    def csv(self) -> str:
        """One line per row, full precision; empty cells for unknowns; the break-even columns with an API price."""
        rows = []
        for r in self.rows:
            d = self.row_dict(r)
            d["problems"] = "; ".join(r.result.problems)
            d["sources"] = "; ".join(d["sources"])
            rows.append(d)
        return csv_text(CSV_FIELDS, rows)


CSV_FIELDS = (
    "flavor",
    "model",
    "variant",
    "engine",
    "weights",
    "concurrency",
    "repeats",
    "output_throughput",
    "output_throughput_spread",
    "median_ttft_ms",
    "median_tpot_ms",
    "user_tok_s",
    "bursty",
    "completed",
    "failed",
    "problems",
    "price_per_hour",
    "cost_per_million_output_tokens",
    "roofline_pct",
    "kv_peak_pct",
    "preemptions",
    "best",
    "pareto",
    "monthly_cost",
    "breakeven_tokens_per_month",
    "capacity_tokens_per_month",
    "breakeven_utilisation",
    "platform",
    "sources",
)


def build_report(
    results: Sequence[BenchResult],
    cells: Sequence[CellOutcome],
    *,
    max_tpot_ms: float | None,
    api_price: float | None,
) -> CampaignReport:
    """The campaign's report from its results (``zenops.report.load`` of the done cells' run directories) and its
    cells (every cell, whatever its status)."""
    if max_tpot_ms is not None and max_tpot_ms <= 0:
        raise UsageError(f"--max-tpot-ms {max_tpot_ms}: must be above 0", hint="e.g. --max-tpot-ms 50")
    if api_price is not None and api_price <= 0:
        raise UsageError(f"--api-price {api_price}: must be above 0", hint="$ per 1M output tokens, e.g. 0.60")
    rows = rows_of(results, cells)
    by_model: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_model[r.model].append(r)
    models = list(dict.fromkeys([*(c.model for c in cells), *by_model]))
    best: dict[str, Row | None] = {}
    why: dict[str, str] = {}
    for m in models:
        # a configuration zenops deploys: llama.cpp's rows are a peer measurement (zenops does not switch engines)
        best[m], why[m] = best_of([r for r in by_model.get(m, []) if r.engine == "zenops"], max_tpot_ms)
        if not by_model.get(m):
            failed = [c for c in cells if c.model == m and c.status != "done"]
            if failed:
                why[m] += ": " + "; ".join(f"{c.flavor} / {c.variant} {c.status}" for c in failed)
    front = {m: pareto(by_model[m]) for m in models if by_model.get(m)}
    read = {run.metadata.get("cell") for r in rows for run in r.runs}
    unmatched = [c for c in cells if c.status == "done" and c.key not in read]
    return CampaignReport(rows, list(cells), best, why, front, max_tpot_ms, api_price, unmatched)


# --- text -------------------------------------------------------------------------------------------------------


def _fmt_tokens(n: float) -> str:
    """1.23e9 -> "1.23 B", 4.5e6 -> "4.50 M"."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f}"


def _spread_cell(row: Row) -> str:
    return "-" if row.spread is None else f"{row.spread * 100:.1f}% of {len(row.runs)}"


def _failed_cell(row: Row) -> str:
    r = row.result
    if r.flagged:
        return "; ".join(r.problems)
    return "?" if r.failed is None else str(r.failed)


def _config_cells(row: Row, *figures: str) -> list[str]:
    return [row.model, row.flavor or "-", row.variant or "-", str(row.concurrency or "-"), *figures]


# --- zenops against the peers (`variants: peers`, zenops.peers) ------------------------------------------------------


@dataclass(frozen=True)
class PeerRatio:
    """One peer's figures as a ratio to zenops's, on the same flavor (or hosts), model and concurrency."""

    flavor: str | None
    model: str
    concurrency: int | None
    peer: str
    tok_s: float | None  # peer / zenops output tok/s (above 1: the peer served more)
    ttft: float | None  # peer / zenops median TTFT (above 1: the peer was slower to the first token)
    tpot: float | None  # peer / zenops median TPOT (above 1: the peer was slower per token)
    noise: float | None  # the larger run-to-run spread of the two rows' tok/s; None with one run each
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def peer_ratios(rows: Sequence[Row]) -> list[PeerRatio]:
    """Every peer's row against zenops's row of the same flavor, model and concurrency (the variants named after
    zenops.peers.NAMES). Verdict: zenops ahead or behind only beyond the run-to-run spread (the larger of the two
    rows' (max - min) / mean of tok/s); within it, or with a single run (no spread), it says so."""
    from zenops.peers import NAMES, ZENOPS  # noqa: PLC0415

    ours = {(r.flavor, r.model, r.concurrency): r for r in rows if r.variant == ZENOPS and r.ok}
    out = []
    for r in rows:
        if r.variant not in NAMES or r.variant == ZENOPS:
            continue
        z = ours.get((r.flavor, r.model, r.concurrency))
        if z is None:
            continue
        tok = _ratio(r.result.output_tok_s, z.result.output_tok_s)
        # the one spread rule (zenops.measured.beyond_spread); without figures there is no ratio to tell
        noise, sign = beyond_spread(tok, r.spread, z.spread) if tok is not None else (None, None)
        if not r.ok:
            verdict = "the peer failed requests"
        elif tok is None:
            verdict = "no figures"
        elif sign is None:
            verdict = "one run each: no spread to tell (repeats >= 2)"
        else:
            verdict = {-1: "zenops ahead", 1: "peer ahead", 0: "within the noise"}[sign]
        out.append(PeerRatio(
            r.flavor, r.model, r.concurrency, str(r.variant), tok,
            _ratio(r.result.median_ttft_ms, z.result.median_ttft_ms),
            _ratio(r.result.median_tpot_ms, z.result.median_tpot_ms), noise, verdict,
        ))  # fmt: skip
    return out


def _peers_markdown(rep: CampaignReport) -> str | None:
    ratios = peer_ratios(rep.rows)
    if not ratios:
        return None
    header = ["Flavor", "Model", "Concurrency", "Peer", "tok/s vs zenops", "TTFT vs zenops", "TPOT vs zenops",
              "Spread", "Verdict"]  # fmt: skip
    body = [
        [p.flavor or "-", p.model, str(p.concurrency or "-"), p.peer, fmt(p.tok_s, 2) + "x",
         fmt(p.ttft, 2) + "x", fmt(p.tpot, 2) + "x", f"{p.noise:.0%}" if p.noise is not None else "-", p.verdict]
        for p in ratios
    ]  # fmt: skip
    return (
        "## zenops against the peers\n\nEach peer's settings reproduced on the same host (zenops.peers), as a ratio to "
        "zenops's plan: tok/s above 1x means the peer served more, TTFT and TPOT above 1x mean it was slower. A "
        "difference inside the run-to-run spread is no win.\n\n" + md_table(header, body)
    )


def _markdown(rep: CampaignReport) -> str:
    out = [f"{rep.status_line()}\n"]
    results = [r.result for r in rep.rows]
    cost_title, show_price = cost_header(results)
    show_roof = any(r.roofline_pct is not None for r in results)
    show_server = any(r.server for r in results)
    header = ["Flavor", "Model", "Variant", "Concurrency", "Output tok/s", "Median TTFT ms", "Median TPOT ms"]
    header += ["Failed"] + (["$/h"] if show_price else []) + [cost_title]
    header += (["Of the plan's ceiling (roof)"] if show_roof else []) + ["Repeat spread (tok/s)"]
    header += ["KV peak %", "Preemptions"] if show_server else []
    body = []
    for row in rep.rows:
        r = row.result
        cells = [row.flavor or "-", model_cell(r, row.model), row.variant or "-", str(row.concurrency or "-")]
        tpot = fmt(r.median_tpot_ms) + (" (bursts)" if row.bursty else "")
        cells += [fmt(r.output_tok_s), fmt(r.median_ttft_ms), tpot, _failed_cell(row)]
        cells += [fmt_price(r.price_per_hour) if r.price_per_hour is not None else "-"] if show_price else []
        cells += [fmt(row.cost) + (" (best)" if rep.is_best(row) else "")]
        cells += [roofline_cell(r)] if show_roof else []
        cells += [_spread_cell(row)]
        side = r.server or {}
        cells += [fmt(side.get("kv_peak_pct"), 1), fmt(side.get("preemptions"), 0)] if show_server else []
        body.append(cells)
    out.append("## Results\n\n" + md_table(header, body))
    peers_section = _peers_markdown(rep)
    if peers_section:
        out.append(peers_section)
    if any(row.bursty for row in rep.rows):
        out.append(
            "(bursts): the tokens of a request arrived in a few chunks (median TPOT under a quarter of the mean, or "
            f"under {BURST_FLOOR_MS} ms), so "
            "no per-user speed is read from it: such rows take no part in the non-dominated set, the plot or a "
            "--max-tpot-ms bound.\n"
        )

    bound = f", median TPOT <= {fmt(rep.max_tpot_ms, 1)} ms" if rep.max_tpot_ms is not None else ""
    config = ["Model", "Flavor", "Variant", "Concurrency"]
    best_rows = [
        _config_cells(row, fmt(row.result.output_tok_s), fmt(row.result.median_tpot_ms), fmt(row.cost))
        if row is not None
        else [m, "-", "-", "-", "-", "-", f"none: {rep.why[m]}"]
        for m, row in rep.best.items()
    ]
    out.append(
        f"## Best configuration per model\n\nLowest $ per 1M output tokens, no failed requests{bound}.\n\n"
        + md_table([*config, "Output tok/s", "Median TPOT ms", "$ per 1M output tokens"], best_rows)
    )

    front_rows = [
        _config_cells(row, fmt(row.result.output_tok_s), fmt(row.user_tok_s), fmt(row.cost))
        for rs in rep.front.values()
        for row in rs
    ]
    if front_rows:
        out.append(
            "## Non-dominated configurations\n\nPer model: no other configuration has both more output tok/s per "
            "server and more per-user speed (1000 / median TPOT).\n\n"
            + md_table([*config, "Output tok/s per server", "Per-user tok/s", "$ per 1M output tokens"], front_rows)
        )

    if rep.api_price is not None:
        be_rows = []
        for row in rep.rows:
            be = rep.break_even(row)
            if be is None or not row.ok:
                continue
            need = f"{be.utilisation * 100:.0f}%" if be.reachable else "never (costs more than the API at full use)"
            be_rows.append(
                _config_cells(
                    row,
                    fmt(be.monthly_cost),
                    _fmt_tokens(be.tokens_per_month),
                    _fmt_tokens(be.capacity_per_month),
                    need,
                )
            )
        out.append(
            f"## Break-even with an API at ${fmt_price(rep.api_price)} per 1M output tokens\n\n"
            f"Assumption: a server is billed {HOURS_PER_MONTH} h a month (kept up around the clock); it breaks even "
            f"at (price per hour x {HOURS_PER_MONTH} / API price) x 1M output tokens a month, and can serve at most "
            f"its output tok/s x 3600 x {HOURS_PER_MONTH} (100% use at that concurrency).\n\n"
            + md_table(
                [*config, "$ a month", "Break-even tokens/month", "Capacity tokens/month", "Use needed"], be_rows
            )
        )

    if rep.not_measured:
        out.append(
            "## Cells not measured\n\n"
            + md_table(
                ["Flavor", "Model", "Variant", "Status", "Reason"],
                [
                    [c.flavor, c.model, c.variant, c.status, in_one_line(c.reason, 600) if c.reason else "-"]
                    for c in rep.not_measured
                ],
            )
        )
    return "\n".join(out)


# --- the plot ---------------------------------------------------------------------------------------------------


def plot_pareto(report: CampaignReport, path: Path) -> int:
    """PNG at ``path``: each row without failed requests as a point, per-user speed (1000 / median TPOT) against
    output tok/s per server, coloured by $ per 1M output tokens (grey: no price), one marker per model, each
    model's non-dominated set joined by a line and labelled. Returns the number of points plotted."""
    # matplotlib is imported here: only a plot pays for it. Agg renders without a display.
    from matplotlib import colormaps  # noqa: PLC0415
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.colors import Normalize  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.lines import Line2D  # noqa: PLC0415

    points = [r for r in report.rows if r.ok and r.user_tok_s is not None]
    if not points:
        raise UsageError(
            "nothing to plot: no measurement without failed requests has a median TPOT",
            hint="the table lists what was measured and why cells failed",
        )
    costs = [r.cost for r in points if r.cost is not None]
    norm = None
    if costs:
        low, high = min(costs), max(costs)
        norm = Normalize(vmin=low, vmax=high if high > low else low * 1.01 + 1e-9)
    cmap = colormaps["viridis"]
    fig = Figure(figsize=(10, 6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    models = list(dict.fromkeys(r.model for r in points))
    handles = []
    for n, model in enumerate(models):
        marker = "os^Dvp*hX"[n % 9]
        mine = [r for r in points if r.model == model]
        xs = [r.user_tok_s or 0.0 for r in mine]
        ys = [r.result.output_tok_s for r in mine]
        colours = [cmap(norm(r.cost)) if norm is not None and r.cost is not None else "lightgrey" for r in mine]
        ax.scatter(xs, ys, c=colours, marker=marker, s=60, edgecolors="black", linewidths=0.5)
        handles.append(Line2D([], [], marker=marker, ls="", mfc="white", mec="black", label=model))
        front = sorted(report.front.get(model, []), key=lambda r: r.user_tok_s or 0.0)
        if front:
            fx = [r.user_tok_s or 0.0 for r in front]
            ax.plot(fx, [r.result.output_tok_s for r in front], "-", color="grey", lw=1)
            for r in front:
                ax.annotate(
                    f"{r.flavor or '-'} / {r.variant or '-'} c{r.concurrency or '-'}",
                    (r.user_tok_s or 0.0, r.result.output_tok_s),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize="x-small",
                )
    if norm is not None:
        from matplotlib.cm import ScalarMappable  # noqa: PLC0415

        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="$ per 1M output tokens")
    ax.set_xlabel("per-user speed (tok/s = 1000 / median TPOT)")
    ax.set_ylabel("output tok/s per server")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, fontsize="small", loc="best")
    title = "Campaign: throughput per server against per-user speed (line: the non-dominated set)"
    fig.suptitle(title + (" [partial]" if report.partial else ""))
    fig.savefig(path, format="png", dpi=100)
    return len(points)


# --- two campaigns ----------------------------------------------------------------------------------------------


def _keyed(row: Row) -> BenchResult:
    """The row's result with its flavor and variant in the model's name: ``compare`` pairs by model and
    concurrency, so each (model, flavor, variant) is then paired with itself only."""
    return replace(row.result, model=f"{row.model} ({row.flavor or '-'}, {row.variant or '-'})")


def compare_campaigns(current: CampaignReport, other: CampaignReport) -> Comparison:
    """``current`` against ``other`` (--compare OTHER_CAMPAIGN): each (model, flavor, variant, concurrency) row's
    mean against the same one of the other campaign, by ``zenops.report.compare``. Deltas and the rows only one side
    has name the model as ``model (flavor, variant)``; render them with ``zenops.report.comparison_markdown`` /
    ``comparison_csv`` / ``Comparison.to_dict``."""
    return compare([_keyed(r) for r in current.rows], [_keyed(r) for r in other.rows])
