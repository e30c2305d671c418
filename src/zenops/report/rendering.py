"""Results and comparisons as text: Markdown tables and CSV, every cell through zenops.report.cells."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zenops.report.cells import clean, csv_cell
from zenops.report.comparison import Comparison
from zenops.report.results import BenchResult, ordered

# --- text output ------------------------------------------------------------------------------------------------


def fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def fmt_price(p: float) -> str:
    """0.79 -> "0.79", 1.5 -> "1.50", 0.1234 -> "0.1234"."""
    two = f"{p:.2f}"
    return two if math.isclose(float(two), p, rel_tol=0, abs_tol=1e-9) else f"{p:.6f}".rstrip("0")


def cost_header(results: Sequence[BenchResult]) -> tuple[str, bool]:
    """The cost column's title, and whether a per-row price column is needed (the results differ in price)."""
    prices = {r.price_per_hour for r in results if r.price_per_hour is not None}
    if len(prices) == 1 and all(r.price_per_hour is not None for r in results):
        return f"$ per 1M output tokens at ${fmt_price(prices.pop())}/h", False
    return "$ per 1M output tokens", bool(prices)


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(clean(c).replace("|", "\\|") for c in cells) + " |"


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [_md_row(header), "|" + "---|" * len(header)]
    lines.extend(_md_row(r) for r in rows)
    return "\n".join(lines) + "\n"


FLOAT_WEIGHTS = ("bfloat16", "float16", "float32")


def model_cell(r: BenchResult, model: str | None = None) -> str:
    """The model's name, with its weights' format when they are quantized (``Qwen/Qwen3-4B-AWQ (awq-int4)``): the
    plan's ``weights`` (zenops.planner.Plan), carried in the result's metadata by zenops.report.loading."""
    weights = r.metadata.get("weights")
    name = model if model is not None else r.model
    return f"{name} ({weights})" if weights and weights not in FLOAT_WEIGHTS else name


def roofline_cell(r: BenchResult) -> str:
    """``"41.2% of 152.3 (memory)"``: measured output tok/s against the plan's ceiling and the binding roof."""
    if r.roofline_pct is None or not r.roofline:
        return "-"
    return f"{r.roofline_pct:.1f}% of {fmt(float(r.roofline['ceiling_tok_s']), 1)} ({r.roofline.get('binding')})"


def _failed_cell(r: BenchResult) -> str:
    if r.failed is None:
        return "?" if not r.flagged else f"? ({'; '.join(r.problems)})"
    return f"{r.failed} FAILED" if r.flagged else str(r.failed)


def markdown(results: Sequence[BenchResult], *, label_column: bool = False) -> str:
    """A Markdown table in the layout of the seed write-up (Model | Output tok/s | Median TTFT ms | Median TPOT ms |
    $ per 1M output tokens at $P/h). Columns appear only when they say something: Concurrency when the results
    differ in it, Flavor when they differ in flavor, $/h when they differ in price, Failed when any result failed;
    with ``label_column`` each row's label first (the host of :func:`host_totals` rows)."""
    rows = ordered(results)
    show_conc = len({r.max_concurrency for r in rows}) > 1
    show_flavor = len({r.flavor for r in rows}) > 1
    show_platform = len({r.platform for r in rows}) > 1
    show_failed = any(r.flagged for r in rows)
    show_roof = any(r.roofline_pct is not None for r in rows)
    cost_title, show_price = cost_header(rows)
    header = ["Label"] if label_column else []
    header += ["Model"]
    header += ["Flavor"] if show_flavor else []
    header += ["Platform"] if show_platform else []
    header += ["Concurrency"] if show_conc else []
    header += ["Output tok/s", "Median TTFT ms", "Median TPOT ms"]
    header += ["Failed"] if show_failed else []
    header += ["$/h"] if show_price else []
    header += ["Of the plan's ceiling (roof)"] if show_roof else []
    header.append(cost_title)
    body = []
    for r in rows:
        cells = [r.label or "-"] if label_column else []
        cells += [model_cell(r)]
        cells += [r.flavor or "-"] if show_flavor else []
        cells += [r.platform or "-"] if show_platform else []
        cells += [str(r.max_concurrency or "-")] if show_conc else []
        cells += [fmt(r.output_tok_s), fmt(r.median_ttft_ms), fmt(r.median_tpot_ms)]
        cells += [_failed_cell(r)] if show_failed else []
        cells += [fmt_price(r.price_per_hour) if r.price_per_hour is not None else "-"] if show_price else []
        cells += [roofline_cell(r)] if show_roof else []
        cells.append(fmt(r.cost_per_million_output_tokens))
        body.append(cells)
    return md_table(header, body)


SERVER_HEADER = ("Server", "Concurrency", "KV peak %", "Preemptions", "Queue ms (mean)", "Mean batch",
                 "Prefix-cache hits %")  # fmt: skip


def server_rows(results: Sequence[BenchResult]) -> list[list[str]]:
    """The server-side figures of each run that has them (zenops.metrics.server): one row per server and level."""
    out = []
    for r in ordered(results):
        f = r.server
        if not f:
            continue
        host = r.metadata.get("host") or r.label or "-"
        name = f"{host}/{r.instance}" if r.instance is not None else str(host)
        if r.platform:
            name += f" ({r.platform})"
        out.append(
            [name, str(r.max_concurrency or "-"), fmt(f.get("kv_peak_pct"), 1), fmt(f.get("preemptions"), 0),
             fmt(f.get("queue_ms_mean"), 1), fmt(f.get("running_mean"), 2), fmt(f.get("prefix_cache_hit_pct"), 1)]
        )  # fmt: skip
    return out


def server_markdown(results: Sequence[BenchResult]) -> str:
    """The server side of the runs, read from each server's /metrics around the run ("" when none was read)."""
    rows = server_rows(results)
    return md_table(list(SERVER_HEADER), rows) if rows else ""


COMPARISON_HEADER = (
    "Model",
    "Concurrency",
    "Output tok/s",
    "Baseline tok/s",
    "Δ tok/s",
    "Median TTFT ms",
    "Baseline TTFT ms",
    "Δ TTFT",
    "Median TPOT ms",
    "Baseline TPOT ms",
    "Δ TPOT",
    "$ per 1M output tokens",
    "Baseline $",
    "Δ $",
)


def comparison_rows(comp: Comparison) -> list[list[str]]:
    rows = []
    for d in comp.deltas:
        c, b = d.current, d.baseline
        rows.append(
            [
                d.model,
                str(d.max_concurrency or "-"),
                fmt(c.output_tok_s),
                fmt(b.output_tok_s),
                fmt_pct(d.output_tok_s_pct),
                fmt(c.median_ttft_ms),
                fmt(b.median_ttft_ms),
                fmt_pct(d.median_ttft_pct),
                fmt(c.median_tpot_ms),
                fmt(b.median_tpot_ms),
                fmt_pct(d.median_tpot_pct),
                fmt(c.cost_per_million_output_tokens),
                fmt(b.cost_per_million_output_tokens),
                fmt_pct(d.cost_pct),
            ]
        )
    return rows


def comparison_markdown(comp: Comparison) -> str:
    out = md_table(COMPARISON_HEADER, comparison_rows(comp))
    for title, rs in (("Only in the report", comp.only_current), ("Only in the baseline", comp.only_baseline)):
        if rs:
            names = ", ".join(f"{r.model} (concurrency {r.max_concurrency or '-'})" for r in rs)
            out += f"\n{title}: {clean(names)}\n"
    return out


CSV_FIELDS = (
    "model",
    "max_concurrency",
    "num_prompts",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "median_ttft_ms",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "price_per_hour",
    "cost_per_million_output_tokens",
    "roofline_pct",
    "ceiling_tok_s",
    "roofline_binding",
    "flavor",
    "platform",
    "label",
    "source",
    "problems",
    *(f"server_{k}" for k in ("kv_peak_pct", "preemptions", "queue_ms_mean", "running_mean", "prefix_cache_hit_pct")),
)


def csv_text(fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(row.get(k)) for k in fields})
    return buf.getvalue()


def to_csv(results: Sequence[BenchResult]) -> str:
    """One row per result, full precision (numbers unrounded), empty cells for unknowns; problems joined by '; '."""
    rows = []
    for r in ordered(results):
        d = r.to_dict()
        d["problems"] = "; ".join(r.problems)
        d.update({f"server_{k}": v for k, v in (r.server or {}).items()})
        rows.append(d)
    return csv_text(CSV_FIELDS, rows)


COMPARISON_CSV_FIELDS = (
    "model",
    "max_concurrency",
    "output_throughput",
    "baseline_output_throughput",
    "output_throughput_pct",
    "median_ttft_ms",
    "baseline_median_ttft_ms",
    "median_ttft_pct",
    "median_tpot_ms",
    "baseline_median_tpot_ms",
    "median_tpot_pct",
    "cost_per_million_output_tokens",
    "baseline_cost_per_million_output_tokens",
    "cost_pct",
    "source",
    "baseline_source",
)


def comparison_csv(comp: Comparison) -> str:
    """One row per matched (model, concurrency): both values and the change in percent of the report's numbers."""
    return csv_text(COMPARISON_CSV_FIELDS, (d.to_dict() for d in comp.deltas))
