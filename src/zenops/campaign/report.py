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

The rows, the best row, the non-dominated set and the break-even are computed in zenops.campaign.report_rows
(importable from here); this module builds the report from them and renders it (markdown, CSV, JSON, the plot).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from zenops.campaign.report_rows import (
    BURST_FLOOR_MS,
    BURST_RATIO,
    STATUSES,
    BreakEven,
    CellOutcome,
    Row,
    best_of,
    break_even,
    mean_result,
    pareto,
    per_server,
    rows_of,
)
from zenops.cost import HOURS_PER_MONTH
from zenops.errors import UsageError, in_one_line
from zenops.measured import beyond_spread
from zenops.report.comparison import Comparison, compare
from zenops.report.rendering import cost_header, csv_text, fmt, fmt_price, md_table, model_cell, roofline_cell
from zenops.report.results import BenchResult

__all__ = [  # the rows and the choices (zenops.campaign.report_rows) too: importable from here as before
    "BURST_FLOOR_MS",
    "BURST_RATIO",
    "CSV_FIELDS",
    "STATUSES",
    "BreakEven",
    "CampaignReport",
    "CellOutcome",
    "PeerRatio",
    "Row",
    "best_of",
    "break_even",
    "build_report",
    "compare_campaigns",
    "mean_result",
    "pareto",
    "peer_ratios",
    "per_server",
    "plot_pareto",
    "rows_of",
]


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
    """The report as markdown: its status, then its sections (those with something to show), in this order."""
    sections = [
        _results_markdown(rep),
        _peers_markdown(rep),
        _bursts_note(rep),
        _best_markdown(rep),
        _front_markdown(rep),
        _break_even_markdown(rep),
        _not_measured_markdown(rep),
    ]
    return "\n".join([f"{rep.status_line()}\n", *(s for s in sections if s)])


def _results_markdown(rep: CampaignReport) -> str:
    """Every row: its figures, the best row's cost marked, the columns a campaign has (price, ceiling, server side)."""
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
    return "## Results\n\n" + md_table(header, body)


def _bursts_note(rep: CampaignReport) -> str | None:
    if not any(row.bursty for row in rep.rows):
        return None
    return (
        "(bursts): the tokens of a request arrived in a few chunks (median TPOT under a quarter of the mean, or "
        f"under {BURST_FLOOR_MS} ms), so "
        "no per-user speed is read from it: such rows take no part in the non-dominated set, the plot or a "
        "--max-tpot-ms bound.\n"
    )


_CONFIG = ("Model", "Flavor", "Variant", "Concurrency")  # the columns that name a configuration


def _best_markdown(rep: CampaignReport) -> str:
    bound = f", median TPOT <= {fmt(rep.max_tpot_ms, 1)} ms" if rep.max_tpot_ms is not None else ""
    best_rows = [
        _config_cells(row, fmt(row.result.output_tok_s), fmt(row.result.median_tpot_ms), fmt(row.cost))
        if row is not None
        else [m, "-", "-", "-", "-", "-", f"none: {rep.why[m]}"]
        for m, row in rep.best.items()
    ]
    return (
        f"## Best configuration per model\n\nLowest $ per 1M output tokens, no failed requests{bound}.\n\n"
        + md_table([*_CONFIG, "Output tok/s", "Median TPOT ms", "$ per 1M output tokens"], best_rows)
    )


def _front_markdown(rep: CampaignReport) -> str | None:
    front_rows = [
        _config_cells(row, fmt(row.result.output_tok_s), fmt(row.user_tok_s), fmt(row.cost))
        for rs in rep.front.values()
        for row in rs
    ]
    if not front_rows:
        return None
    return (
        "## Non-dominated configurations\n\nPer model: no other configuration has both more output tok/s per "
        "server and more per-user speed (1000 / median TPOT).\n\n"
        + md_table([*_CONFIG, "Output tok/s per server", "Per-user tok/s", "$ per 1M output tokens"], front_rows)
    )


def _break_even_markdown(rep: CampaignReport) -> str | None:
    if rep.api_price is None:
        return None
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
    return (
        f"## Break-even with an API at ${fmt_price(rep.api_price)} per 1M output tokens\n\n"
        f"Assumption: a server is billed {HOURS_PER_MONTH} h a month (kept up around the clock); it breaks even "
        f"at (price per hour x {HOURS_PER_MONTH} / API price) x 1M output tokens a month, and can serve at most "
        f"its output tok/s x 3600 x {HOURS_PER_MONTH} (100% use at that concurrency).\n\n"
        + md_table([*_CONFIG, "$ a month", "Break-even tokens/month", "Capacity tokens/month", "Use needed"], be_rows)
    )


def _not_measured_markdown(rep: CampaignReport) -> str | None:
    if not rep.not_measured:
        return None
    return "## Cells not measured\n\n" + md_table(
        ["Flavor", "Model", "Variant", "Status", "Reason"],
        [
            [c.flavor, c.model, c.variant, c.status, in_one_line(c.reason, 600) if c.reason else "-"]
            for c in rep.not_measured
        ],
    )


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
