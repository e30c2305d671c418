"""`zenops campaign`: a matrix of flavors x models x variants, provisioned, benchmarked and torn down by itself.

Library: zenops.campaign (spec: the file; plan: cells and cost; state: resumable ledger; run: the loop; report: the
table, the best per model, the tuned file). Playbooks: those of `up`, `bench` and `down`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import OldSpellingOption, json_option, option
from zenops.errors import in_one_line

if TYPE_CHECKING:
    from rich.console import Console

    from zenops.campaign.planned import Planned
    from zenops.campaign.state import CampaignState

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_campaign_file = click.argument("file", type=_FILE, metavar="FILE.yaml")
_campaign_id = click.argument("campaign_id", metavar="ID", required=False)


@click.group()
def campaign() -> None:
    """Benchmark campaigns: every cell of a matrix (flavors x models x variants) served, benchmarked, torn down.

    \b
      zenops campaign plan sweep.yaml       the cells and the projected cost (refused over budget.max_usd: exit 17)
      zenops campaign run sweep.yaml        run it; again after a crash or Ctrl-C: it continues
      zenops campaign status [ID]           progress, cost so far against the cap, each cell's state and reason
      zenops campaign report ID             the table, the best configuration per model, the tuned file for `up`
      zenops campaign down ID               remove whatever the campaign still has on its cloud

    \b
    The file (example: `zenops campaign example`):
      name: sweep
      cloud: sandbox                  # or inventory: hosts.yml (your own hosts)
      flavors: [gp.5.24.96]
      models: [Qwen/Qwen3-0.6B]
      variants: {zen: {platform: zen}, cpu: {platform: cpu}}
      bench: {concurrency: [1, 4], input_len: 128, output_len: 64, prompts: 16, repeats: 1}
      budget: {max_usd: 5, ttl: 2h}   # every server expires (zenops:expires_at; `zenops reap` removes it)

    Cells on one flavor share one server; it is torn down after the flavor's last cell, and on every way out
    (a failed cell, Ctrl-C, the budget reached). Exit codes: 17 over budget, 18 cells failed, 130 interrupted.
    """


def _load(file: Path) -> Any:
    from zenops.campaign.spec import load_spec  # noqa: PLC0415

    return load_spec(file)


def _store(app: App) -> Any:
    from zenops.campaign.state import Store  # noqa: PLC0415

    return Store(app.config)


def _print_plan(app: App, planned: Planned, console: Console) -> None:
    """The cells and the projected cost (dollars as zenops.spend writes them): on stdout for `campaign plan` (its
    answer), on stderr as `run` starts."""
    from zenops.spend import hourly, usd  # noqa: PLC0415

    data = planned.to_dict()
    if app.json:
        app.emit_json({"type": "plan", "command": "campaign", **data})
        return
    spec = planned.spec
    head = f"campaign {spec.name}" + (f" (continues {planned.state.id})" if planned.state else " (new)")
    console.print(f"{escape(head)}: {len(planned.cells)} cell(s), {len(planned.todo)} to run")
    style = "" if planned.engine.verified else "yellow"
    engine = f"  engine {escape(planned.engine.describe())}"
    console.print(f"[{style}]{engine}[/]" if style else engine)
    for c in data["cells"]:
        where = f"{c['group']} / {Path(c['model']).name} / {c['variant']}"
        console.print(f"  {c['key']}  {escape(where)}  {c['status']}")
    for line in planned.left_out:  # not a failure: cells that measure nothing (a llama.cpp cell of quantized weights)
        console.print(f"  {escape(line)}")
    proj = planned.projection
    for g in proj.groups:
        price = hourly(g.price_per_hour) if g.price_per_hour is not None else "price unknown"
        cost = usd(g.usd) if g.usd is not None else "?"
        console.print(
            f"  group {escape(g.group)}: {g.cells} cell(s), {g.hours * 60:.0f} server-minutes at {price}: {cost}"
        )
    cap = f" of budget {usd(spec.budget.max_usd)}" if spec.budget.max_usd is not None else " (no budget cap)"
    spent = f" ({usd(proj.spent_usd)} spent)" if proj.spent_usd else ""
    d = proj.durations
    est = (
        f"durations measured by {d.source} ({', '.join(d.measured)}; the rest estimated)"
        if d.measured
        else "durations estimated (no earlier campaign of these flavors and image route here)"
    )
    console.print(f"projected {usd(proj.usd)}{spent}{cap}; {est}; servers expire after {spec.budget.ttl_s // 60} min")
    if proj.unknown_prices:
        console.print(
            f"[yellow]no price for {', '.join(proj.unknown_prices)}: counted as $0 (set prices: in the file)[/]"
        )


@campaign.command("plan")
@_campaign_file
@json_option
@click.pass_context
def plan_cmd(ctx: click.Context, file: Path) -> None:
    """The cells, what is already done, and the projected cost; exit 17 when over budget.max_usd."""
    from zenops.campaign import plan as plan_lib  # noqa: PLC0415
    from zenops.campaign.planned import plan_campaign  # noqa: PLC0415
    from zenops.context import RunContext  # noqa: PLC0415

    app = get_app(ctx)
    spec = _load(file)
    planned = plan_campaign(RunContext(app.config, note=app.note), spec, _store(app))
    _print_plan(app, planned, app.out)
    if app.json:
        app.emit_json({"type": "result", "command": "campaign plan", **planned.to_dict()})
    plan_lib.check_budget(planned.projection, spec.budget.max_usd)


@campaign.command("run")
@_campaign_file
@click.option("--new", is_flag=True, help="Start a new campaign even when one of this name can be continued.")
@click.option(
    "--within-budget",
    is_flag=True,
    help="Start even when the projection is over budget.max_usd, and measure what the budget buys: cells run in "
    "the file's order while the rest of the budget covers the next one; the others are skipped (exit 17).",
)
@option("yes", "campaign run")
@json_option
@click.pass_context
def run_cmd(ctx: click.Context, file: Path, new: bool, within_budget: bool, yes: bool) -> None:
    """Run the campaign (or continue the one of this name): provision, serve, benchmark, tear down.

    Done cells are never re-run; cells that failed for a transient reason (a host or the cloud not answering) are
    tried again, deterministic failures (plan refused, health gate, KV cache, failed requests, a server that went to
    ERROR after the cloud profile's replacements) are not.

    A projection over budget.max_usd refuses to start (exit 17, nothing created) unless --within-budget: then the
    cells the budget covers run, in the file's order, and the campaign stops with the rest skipped, torn down,
    exit 17; its report is labelled partial.

    On a cloud it says what it will create (a server per flavor, $/h, $/month), its projected total and
    budget.max_usd, then asks (default No); without a terminal (scripts, CI) it needs --yes.
    """
    from zenops.campaign.commands import run_campaign  # noqa: PLC0415
    from zenops.cli.confirm import agree  # noqa: PLC0415

    app = get_app(ctx)
    spec = _load(file)
    store = _store(app)
    with app.run_context(campaign=spec.name) as run_ctx:
        try:
            run_campaign(
                run_ctx,
                spec,
                store,
                new=new,
                within_budget=within_budget,
                on_plan=lambda p: _print_plan(app, p, app.err),
                confirm=lambda spend: agree(
                    app,
                    spend,
                    yes=yes,
                    hint=f"pass --yes (-y) to run it without asking; `zenops campaign plan {file}` "
                    "shows the plan and its cost",
                ),
            )
        finally:
            latest = store.latest(spec.name)
            if latest is not None:
                _print_status(app, latest, final=True)


def _print_status(app: App, state: CampaignState, *, final: bool = False) -> None:
    counts = state.counts()
    summary = {
        "campaign": state.id,
        "status": state.status,
        "cells": counts,
        "spent_usd": round(state.spent(), 4),
        "max_usd": state.max_usd,
        "servers_running": [s.deployment for s in state.running_servers()],
        "leaks": state.leaks,
    }
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "campaign status",
                **summary,
                "cell_states": [vars(c) for c in state.cells.values()],
                "servers": [
                    {**vars(s), "hours": round(s.hours(), 4), "cost_usd": round(s.cost(), 4)}
                    for s in state.servers.values()
                ],
            }
        )
        return
    from zenops.campaign.results import progress_line  # noqa: PLC0415

    out = app.err if final else app.out
    out.print(f"campaign {state.id} [{state.status}] {escape(progress_line(state))}")
    for c in state.cells.values():
        why = f": {escape(c.failure or '')} {escape(in_one_line(c.reason))}" if c.reason else ""
        out.print(f"  {c.key}  {escape(c.group)} / {escape(Path(c.model).name)} / {escape(c.variant)}  {c.status}{why}")
    running = state.running_servers()
    if running:
        out.print(f"servers still up: {', '.join(s.deployment for s in running)} (`zenops campaign down {state.id}`)")
    if state.leaks is not None:
        out.print(f"resources with its mark left on the cloud: {state.leaks}")


@campaign.command("status")
@_campaign_id
@json_option
@click.pass_context
def status_cmd(ctx: click.Context, campaign_id: str | None) -> None:
    """One campaign's progress (ID), or every campaign of this state dir."""
    app = get_app(ctx)
    store = _store(app)
    if campaign_id:
        _print_status(app, store.load(campaign_id))
        return
    states, damaged = store.scan()
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "campaign status",
                "campaigns": [
                    {"campaign": s.id, "status": s.status, "cells": s.counts(), "spent_usd": round(s.spent(), 4)}
                    for s in states
                ]
                + [
                    {"campaign": e.path.parent.name, "status": "damaged", "path": str(e.path), "reason": e.reason}
                    for e in damaged
                ],
            }
        )
        return
    from zenops.spend import usd  # noqa: PLC0415

    for s in states:
        app.out.print(f"{s.id}  {s.status}  {s.counts()}  {usd(s.spent())}")
    for e in damaged:  # never hidden: its servers may still be running (the warning says how to check)
        app.out.print(f"{e.path.parent.name}  damaged  {escape(str(e.path))}: {escape(e.reason)}")
    if not states and not damaged:
        app.out.print("no campaigns yet: `zenops campaign run FILE.yaml`")


@campaign.command("report")
@click.argument("campaign_id", metavar="ID")
@click.option("--max-tpot-ms", type=click.FloatRange(min=0, min_open=True), help="Latency bound of the best choice.")
@click.option(
    "--api-price",
    type=click.FloatRange(min=0, min_open=True),
    metavar="USD",
    help="A hosted API's $ per 1M output tokens: the monthly volume at which each configuration breaks even.",
)
@click.option("--compare", "other", metavar="ID", help="Another campaign: the changes of each common row.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write report.md, report.csv, report.json and pareto.png into this directory.",
)
@click.option(
    "--write-tuned",
    "--tuned",
    "tuned",
    cls=OldSpellingOption,
    old=("--tuned",),
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write the best configuration per model as a tuned file (`zenops up --tuned FILE` deploys it).",
)
@json_option
@click.pass_context
def report_cmd(
    ctx: click.Context,
    campaign_id: str,
    max_tpot_ms: float | None,
    api_price: float | None,
    other: str | None,
    out: Path | None,
    tuned: Path | None,
) -> None:
    """The campaign's table, the best configuration per model ($ per 1M output tokens under --max-tpot-ms), the
    non-dominated set, break-even volumes, failed and skipped cells with their reasons (partial: labelled)."""
    from zenops.campaign.results import load_report  # noqa: PLC0415

    app = get_app(ctx)
    store = _store(app)
    state, rep = load_report(app.config, store, campaign_id, max_tpot_ms=max_tpot_ms, api_price=api_price)
    comparison = None
    if other:
        from zenops.campaign.report import compare_campaigns  # noqa: PLC0415

        _other_state, other_rep = load_report(app.config, store, other, max_tpot_ms=max_tpot_ms, api_price=api_price)
        comparison = compare_campaigns(rep, other_rep)
    if out is not None:
        from zenops.campaign.report import plot_pareto  # noqa: PLC0415

        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(rep.markdown())
        (out / "report.csv").write_text(rep.csv())
        import json  # noqa: PLC0415

        (out / "report.json").write_text(json.dumps(rep.to_dict(), indent=2, default=str))
        if rep.rows:
            plot_pareto(rep, out / "pareto.png")
    if tuned is not None:
        from zenops.campaign.tuned import write_tuned  # noqa: PLC0415

        write_tuned(rep, state.id, tuned, variants=state.variants, engine=state.engine)
    if app.json:
        extra = {"comparison": comparison.to_dict()} if comparison is not None else {}
        app.emit_json({"type": "result", "command": "campaign report", "campaign": state.id, **rep.to_dict(), **extra})
        return
    app.out.print(rep.markdown(), markup=False, highlight=False)
    if comparison is not None:
        from zenops.report.rendering import comparison_markdown  # noqa: PLC0415

        app.out.print(f"\nagainst {other}:\n" + comparison_markdown(comparison), markup=False, highlight=False)
    for what, path in (("report", out), ("tuned file", tuned)):
        if path is not None:
            app.err.print(f"{what}: {path}")


@campaign.command("example")
def example_cmd() -> None:
    """Print an example campaign file (every key, commented)."""
    from zenops.campaign.example import EXAMPLE  # noqa: PLC0415

    click.echo(EXAMPLE, nl=False)


@campaign.command("down")
@click.argument("campaign_id", metavar="ID")
@option("yes", "campaign down")
@json_option
@click.pass_context
def down_cmd(ctx: click.Context, campaign_id: str, yes: bool) -> None:
    """Remove every resource on the campaign's cloud that carries its mark (servers, networks, keys...).

    It says what it will delete and what that stops costing, then asks (default No); without a terminal
    (scripts, CI) it needs --yes."""
    from zenops.campaign.commands import down_campaign  # noqa: PLC0415
    from zenops.cli.confirm import agree  # noqa: PLC0415

    app = get_app(ctx)
    store = _store(app)
    name = store.load(campaign_id).name  # an unknown id is refused here, naming the known ones
    with app.run_context(campaign=name) as run_ctx:
        removed = down_campaign(
            run_ctx,
            store,
            campaign_id,
            confirm=lambda spend: agree(
                app,
                spend,
                yes=yes,
                hint=f"pass --yes (-y) to remove it without asking; `zenops campaign status {campaign_id}` "
                "shows what it still has",
            ),
        )
    if app.json:
        app.emit_json({"type": "result", "command": "campaign down", "campaign": campaign_id, "removed": removed})
        return
    app.out.print(f"removed {len(removed)} resource(s) of campaign {campaign_id}")
