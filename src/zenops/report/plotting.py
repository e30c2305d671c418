"""Results as a PNG (matplotlib, imported only when a plot is drawn)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from zenops.errors import UsageError
from zenops.report.results import BenchResult, ordered

# --- plot -------------------------------------------------------------------------------------------------------


def _series(results: Sequence[BenchResult]) -> dict[str, list[BenchResult]]:
    several_flavors = len({r.flavor for r in results}) > 1
    several_platforms = len({r.platform for r in results}) > 1
    series: dict[str, list[BenchResult]] = defaultdict(list)
    for r in ordered(results):
        if r.max_concurrency is None:
            continue
        tags = ([r.flavor or "-"] if several_flavors else []) + ([r.platform or "-"] if several_platforms else [])
        name = f"{r.model} ({', '.join(tags)})" if tags else r.model
        series[name].append(r)
    return series


def plot(results: Sequence[BenchResult], path: Path, *, baseline: Sequence[BenchResult] = ()) -> int:
    """PNG at ``path``: output tok/s, median TTFT and median TPOT against max concurrency, one line per model (the
    baseline's dashed). Results without a max concurrency cannot be placed and are left out. Returns the number of
    results plotted."""
    # matplotlib is imported here, not at the top: only --plot pays for it. Agg renders without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    current = _series(results)
    base = _series(baseline)
    plotted = sum(len(rs) for rs in current.values()) + sum(len(rs) for rs in base.values())
    if not plotted:
        raise UsageError(
            "nothing to plot: no result names its max concurrency",
            hint="benchmark with `vllm bench serve --max-concurrency N`",
        )
    fig = Figure(figsize=(16, 5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    panels: list[tuple[str, Callable[[BenchResult], float | None]]] = [
        ("Output tok/s", lambda r: r.output_tok_s),
        ("Median TTFT (ms)", lambda r: r.median_ttft_ms),
        ("Median TPOT (ms)", lambda r: r.median_tpot_ms),
    ]
    style_of: dict[str, tuple[str, str]] = {}  # colour and marker; a model keeps both in the baseline
    for name in [*current, *base]:
        n = len(style_of)
        style_of.setdefault(name, (f"C{n % 10}", "os^Dv"[n // 10 % 5]))
    concurrencies = sorted(
        {c for rs in (*current.values(), *base.values()) for r in rs if (c := r.max_concurrency) is not None}
    )
    for ax, (title, metric) in zip(axes, panels, strict=True):
        for series, style, suffix in ((current, "-", ""), (base, "--", " (baseline)")):
            for name, rs in series.items():
                points = [(r.max_concurrency, metric(r)) for r in rs if metric(r) is not None]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                color, marker = style_of[name]
                ax.plot(xs, ys, style, marker=marker, color=color, label=name + suffix)
        ax.set_title(title)
        ax.set_xlabel("max concurrency")
        ax.set_xticks(concurrencies)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    fig.suptitle("vllm bench serve: throughput and latency against max concurrency")
    fig.savefig(path, format="png", dpi=100)
    return plotted
