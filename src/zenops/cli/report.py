"""`zenops report`: tables, CSV, JSON and plots of `vllm bench serve` results, priced, flagged and compared.

Library: zenops.report. Playbook: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from zenops.cli.context import App, get_app
from zenops.cli.options import json_option, option, plot_option, png_target
from zenops.errors import BenchFailedError, UsageError

if TYPE_CHECKING:
    from zenops import report as lib


@click.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH...")
@option("price_per_hour", "report")
@option("flavor", "report")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "md", "csv", "json"]),
    default="table",
    show_default=True,
    help="table for people, md for a write-up, csv and json for scripts.",
)
@plot_option("Also write a PNG: output tok/s, median TTFT and TPOT against max concurrency, one line per model.")
@click.option(
    "--compare",
    "baseline_path",
    type=click.Path(path_type=Path),
    metavar="OTHER",
    help="A baseline (file or run directory): percent change of tok/s, TTFT, TPOT and cost, by model and concurrency.",
)
@option("allow_failed", "report")
@json_option
@click.pass_context
def report(
    ctx: click.Context,
    paths: tuple[Path, ...],
    price_per_hour: float | None,
    flavor: str | None,
    output_format: str,
    plot_file: Path | None,
    baseline_path: Path | None,
    allow_failed: bool,
) -> None:
    """Summarize `vllm bench serve` results: throughput, latency, failures and $ per 1M output tokens.

    \b
    PATH is a text summary `vllm bench serve` printed (one or many results; both the 0.11 and the newer spelling),
    a JSON file of --save-result, or a run directory: every bench JSON below it, priced and labelled by the
    run.json manifest there (price_per_hour or flavor, platform, label).

    \b
    Examples:
      zenops report results.optimized.txt --price-per-hour 0.79 --format md
      zenops report runs/2026-11-21/ --plot throughput.png
      zenops report runs/zen/ --compare runs/stock/        percent change against the baseline
      zenops report runs/zen/ --format csv > results.csv

    Cost = price per hour / (output tok/s x 3600) x 1e6; without a known price the cost shows "-".
    The md table has the seed write-up's columns, plus Concurrency, Flavor, $/h or Failed when they vary or matter.
    With --compare, csv prints the comparison rows; md and table print both tables; json holds both.

    A result with failed requests, or none completed, is flagged on stderr and the command exits 12
    (`vllm bench serve` exits 0 even when every request failed); --allow-failed keeps the exit code 0.
    """
    from zenops import report as lib  # noqa: PLC0415

    app = get_app(ctx)
    if app.json:
        output_format = _json_format(ctx, output_format)
    current, baseline = _read(app, paths, baseline_path, flavor, price_per_hour)
    comparison = lib.compare(current.results, baseline.results) if baseline is not None else None

    if plot_file is not None:
        _plot(app, current, baseline, plot_file)

    _write(app, output_format, current, baseline, comparison, baseline_path, plot_file)
    check_failures(app, current, baseline, allow_failed)


def _read(
    app: App, paths: Sequence[Path], baseline_path: Path | None, flavor: str | None, price_per_hour: float | None
) -> tuple[lib.Report, lib.Report | None]:
    """The results at ``paths`` and at the baseline (--compare), priced: --price-per-hour, else --flavor's price, else
    each result's own (its run manifest's flavor or price); what was skipped and a flavor without a price noted."""
    from zenops import catalog  # noqa: PLC0415
    from zenops import report as lib  # noqa: PLC0415

    unknown_flavors: set[str] = set()

    def price_of(name: str) -> float | None:
        try:
            return catalog.get_flavor(name, app.config.flavors).price_per_hour
        except UsageError:
            unknown_flavors.add(name)
            return None

    flavor_price: float | None = None
    if flavor is not None:
        flavor_price = catalog.get_flavor(flavor, app.config.flavors).price_per_hour
        if flavor_price is None and price_per_hour is None:
            app.note(f"flavor {flavor} has no price in the catalogue or config: costs show '-' (or --price-per-hour)")

    def read(where: Sequence[Path]) -> lib.Report:
        rep = lib.load(where, price_of=price_of)
        results = rep.results
        if flavor is not None:
            results = [replace(r, flavor=flavor, price_per_hour=flavor_price or r.price_per_hour) for r in results]
        rep.results = lib.with_price(results, price_per_hour)
        for file, why in rep.skipped:
            app.note(f"skipped {lib.clean(str(file))}: {lib.clean(why)}")
        return rep

    current = read(paths)
    baseline = read([baseline_path]) if baseline_path is not None else None
    for name in sorted(unknown_flavors):
        app.note(
            f"flavor {lib.clean(name)} (from a run manifest or result) is not in the catalogue or config: "
            "no price for it"
        )
    return current, baseline


def _write(
    app: App,
    output_format: str,
    current: lib.Report,
    baseline: lib.Report | None,
    comparison: lib.Comparison | None,
    baseline_path: Path | None,
    plot_file: Path | None,
) -> None:
    """The report in ``output_format`` (json, md, csv or the table), with the comparison when there is one."""
    from zenops import report as lib  # noqa: PLC0415

    if output_format == "json":
        out: dict[str, Any] = {
            "type": "result",
            "command": "report",
            "results": [r.to_dict() for r in lib.ordered(current.results)],
            "host_totals": [r.to_dict() for r in lib.host_totals(current.results)],
            "skipped": [{"file": f, "reason": why} for f, why in current.skipped],
            "flagged": len(current.flagged) + (len(baseline.flagged) if baseline else 0),
            "plot": str(plot_file) if plot_file else None,
        }
        if baseline is not None and comparison is not None:
            out["baseline"] = [r.to_dict() for r in lib.ordered(baseline.results)]
            out["comparison"] = comparison.to_dict()
        app.emit_json(out)
    elif output_format == "md":
        click.echo(lib.markdown(current.results) + _server_md(current.results), nl=False)
        _host_totals(app, current.results, output_format)
        if comparison is not None:
            click.echo(f"\nCompared with {lib.clean(str(baseline_path))}:\n")
            click.echo(lib.comparison_markdown(comparison), nl=False)
    elif output_format == "csv":
        text = lib.comparison_csv(comparison) if comparison is not None else lib.to_csv(current.results)
        click.echo(text, nl=False)
    else:
        print_table(app, current.results)
        _host_totals(app, current.results, output_format)
        if comparison is not None:
            print_comparison(app, comparison, baseline_path)


def _text(value: object) -> str:
    """A value from results as rich text: control characters escaped (zenops.report.clean), markup escaped."""
    from zenops.cli.text import shown  # noqa: PLC0415

    return shown(value)


def _json_format(ctx: click.Context, output_format: str) -> str:
    """--json's format: "json". --format given on the command line as anything else contradicts it (refused: nothing
    can mean both); a config default (defaults.report.format) gives way."""
    given = ctx.get_parameter_source("output_format") in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    if given and output_format != "json":
        raise UsageError(
            f"--json and --format {output_format}: one output format",
            hint=f"leave out --json for {output_format}, or --format for JSON",
        )
    return "json"


def _host_totals(app: App, results: Sequence[lib.BenchResult], output_format: str) -> None:
    """Hosts that ran several instances: their instances summed, priced as the whole server (md or table)."""
    from zenops import report as lib  # noqa: PLC0415

    totals = lib.host_totals(results)
    if not totals:
        return
    title = "per host, its instances summed ($ per 1M output tokens of the whole server)"
    if output_format == "md":
        click.echo(f"\n{title[0].upper()}{title[1:]}:\n")
        click.echo(lib.markdown(totals, label_column=True), nl=False)
    else:
        print_table(app, totals, title=title, host_column=True)


def _plot(app: App, current: lib.Report, baseline: lib.Report | None, path: Path) -> None:
    png_target(path)
    from zenops import report as lib  # noqa: PLC0415

    try:
        n = lib.plot(current.results, path, baseline=baseline.results if baseline else ())
    except OSError as e:
        raise UsageError(f"--plot {path}: cannot write: {e.strerror or e}") from e
    total = len(current.results) + (len(baseline.results) if baseline else 0)
    left_out = f" ({total - n} without a max concurrency left out)" if n < total else ""
    app.note(f"wrote {path}: {n} results{left_out}")


def _pct_cell(pct: float | None, *, higher_is_better: bool) -> str:
    from zenops import report as lib  # noqa: PLC0415

    text = lib.fmt_pct(pct)
    if pct is None or abs(pct) < 0.05:
        return text
    return f"[green]{text}[/]" if (pct > 0) == higher_is_better else f"[red]{text}[/]"


def _failed_cell(r: lib.BenchResult) -> str:
    if r.flagged:
        return f"[bold red]{r.failed if r.failed is not None else '?'} FAILED[/]"
    return "?" if r.failed is None else str(r.failed)


def _server_md(results: Sequence[lib.BenchResult]) -> str:
    from zenops import report as lib  # noqa: PLC0415

    side = lib.server_markdown(results)
    return f"\nServer side (each server's /metrics around the run):\n\n{side}" if side else ""


def print_server_table(app: App, results: Sequence[lib.BenchResult]) -> None:
    """The server side of the runs that have it (zenops.metrics.server), below the results."""
    from rich.table import Table  # noqa: PLC0415

    from zenops import report as lib  # noqa: PLC0415

    rows = lib.server_rows(results)
    if not rows:
        return
    table = Table(title="server side (each server's /metrics around the run)", title_justify="left")
    for i, col in enumerate(lib.SERVER_HEADER):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[_text(c) for c in row])
    app.out.print(table)


def print_table(
    app: App, results: Sequence[lib.BenchResult], title: str = "vllm bench serve results", host_column: bool = False
) -> None:
    from rich.table import Table  # noqa: PLC0415

    from zenops import report as lib  # noqa: PLC0415

    rows = lib.ordered(results)
    cost_title, show_price = lib.cost_header(rows)
    show_flavor = len({r.flavor for r in rows}) > 1
    show_platform = len({r.platform for r in rows}) > 1
    table = Table(title=title, title_justify="left")
    if host_column:  # the per-host totals: which host each row sums
        table.add_column("host")
    table.add_column("model")
    if show_flavor:
        table.add_column("flavor")
    if show_platform:
        table.add_column("platform")
    table.add_column("concurrency", justify="right")
    for col in ("output tok/s", "median TTFT ms", "median TPOT ms", "failed"):
        table.add_column(col, justify="right")
    if show_price:
        table.add_column("$/h", justify="right")
    show_roof = any(r.roofline_pct is not None for r in rows)
    if show_roof:
        table.add_column("of the plan's ceiling (roof)", justify="right")
    table.add_column(cost_title.replace("$ per 1M output tokens", "$/1M output tokens"), justify="right")
    for r in rows:
        cells = [_text(r.label or "-")] if host_column else []
        cells.append(_text(lib.model_cell(r)))
        if show_flavor:
            cells.append(_text(r.flavor or "-"))
        if show_platform:
            cells.append(_text(r.platform or "-"))
        cells += [
            str(r.max_concurrency or "-"),
            lib.fmt(r.output_tok_s),
            lib.fmt(r.median_ttft_ms),
            lib.fmt(r.median_tpot_ms),
            _failed_cell(r),
        ]
        if show_price:
            cells.append(lib.fmt_price(r.price_per_hour) if r.price_per_hour is not None else "-")
        if show_roof:
            cells.append(_text(lib.roofline_cell(r)))
        cells.append(lib.fmt(r.cost_per_million_output_tokens))
        table.add_row(*cells, style="red" if r.flagged else None)
    app.out.print(table)
    if not host_column:  # the runs' own rows: their server side below them
        print_server_table(app, results)


def print_comparison(app: App, comp: lib.Comparison, baseline_path: Path | None) -> None:
    """This report's numbers and their change against the baseline (the baseline's own numbers: md, csv, json)."""
    from rich.table import Table  # noqa: PLC0415

    from zenops import report as lib  # noqa: PLC0415

    table = Table(title=f"compared with {_text(baseline_path)}", title_justify="left")
    table.add_column("model", no_wrap=True)
    for col in ("concurrency", "output tok/s", "Δ", "median TTFT ms", "Δ", "median TPOT ms", "Δ", "$/1M out", "Δ"):
        table.add_column(col, justify="right")
    for d in comp.deltas:
        c = d.current
        table.add_row(
            _text(d.model),
            str(d.max_concurrency or "-"),
            lib.fmt(c.output_tok_s),
            _pct_cell(d.output_tok_s_pct, higher_is_better=True),
            lib.fmt(c.median_ttft_ms),
            _pct_cell(d.median_ttft_pct, higher_is_better=False),
            lib.fmt(c.median_tpot_ms),
            _pct_cell(d.median_tpot_pct, higher_is_better=False),
            lib.fmt(c.cost_per_million_output_tokens),
            _pct_cell(d.cost_pct, higher_is_better=False),
        )
    app.out.print(table)
    for title, rs in (("only in this report", comp.only_current), ("only in the baseline", comp.only_baseline)):
        if rs:
            names = ", ".join(f"{r.model} (concurrency {r.max_concurrency or '-'})" for r in rs)
            app.out.print(f"[yellow]{title}:[/] {_text(names)}")


def check_failures(app: App, current: lib.Report, baseline: lib.Report | None, allow_failed: bool) -> None:
    flagged = [("", r) for r in current.flagged] + [("baseline ", r) for r in (baseline.flagged if baseline else [])]
    if not flagged:
        return
    for side, r in flagged:
        app.err.print(
            f"[bold red]warning: {side}{_text(r.model)} at concurrency {r.max_concurrency or '-'}: "
            f"{_text('; '.join(r.problems))}[/] [dim]({_text(r.source)})[/]: its numbers do not measure serving",
            highlight=False,
        )
    if allow_failed:
        return
    raise BenchFailedError(
        f"{len(flagged)} benchmark result(s) with failed requests or none completed "
        "(`vllm bench serve` exits 0 even then)",
        hint="look at the server's log for why requests failed and benchmark again; --allow-failed reports them anyway",
    )
