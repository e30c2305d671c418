"""`zenops bench`: benchmark the servers zenops started, bring the artifacts home, and report them.

Library: zenops.bench (zenops.bench.run), then zenops.report. Playbook: playbooks/bench.yml (and playbooks/serve.yml
for --compare-platforms).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import Rows, RowValues, deployment_argument, json_option, options
from zenops.cli.report import check_failures, print_comparison, print_table
from zenops.option_table import request_from_rows

if TYPE_CHECKING:  # zenops.bench.run imports ansible-runner: only a benchmark loads it, not --help
    from zenops.bench import run as lib


@click.command("bench")
@deployment_argument
@options("bench", "inventory", "deployment", "cloud", Rows("request", request="BenchRequest"), "allow_failed", "limit")
@json_option
@click.pass_context
def bench(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    request: RowValues,
    allow_failed: bool,
    limit: str | None,
) -> None:
    """Benchmark every vLLM server zenops started with `vllm bench serve`, and bring the results home.

    \b
    The client runs inside each server's own image (nothing else installed on the host), on CPUs no server holds
    when there are any, with the server's API key from a root-only file. The run directory gets, per host and
    instance: the result JSON and text summary of each run, the server's log tail, its image and the versions of
    vLLM, zentorch and torch inside it; per host the CPU facts and the serving plan; and run.json (profile, flavor,
    price, timestamps, zenops version). Then the results are reported like `zenops report` does; a run with failed
    requests fails the command (exit 12), since `vllm bench serve` itself exits 0 then. It holds the deployment's
    lock, as `up` and `rollout` do: while another zenops command works on the deployment it refuses (exit 14).

    \b
    Examples:
      zenops bench -i hosts.yml                                    the seed profile
      zenops bench gp-5-24-96 --profile sweep                      concurrency 1, 2, 4, 8 (a deployment by name)
      zenops bench -i hosts.yml --concurrency 1,16 --num-prompts 64
      zenops bench -i hosts.yml --compare-platforms                zentorch on and off
      zenops bench -i fleet.yml --through-gateway                  the endpoint: every server behind HAProxy
      zenops bench -i devhosts.yml --one-at-a-time                 hosts sharing one machine, measured in turn
      zenops report runs/20261121-140000 --plot sweep.png          tables, costs and plots afterwards
    """
    from zenops.bench import run as lib  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud)
    dep = target.entry
    values = dict(request.values)
    if dep is not None:  # a deployment's flavor and price, unless given
        values["flavor"] = values["flavor"] or dep.flavor
        if values["price_per_hour"] is None:
            values["price_per_hour"] = dep.price_per_hour
    req = request_from_rows(
        lib.BenchRequest, values, cloud=dep.cloud if dep else None, deployment=dep.name if dep else None
    )
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

    # a bench starts its clients on the deployment's hosts and removes them after (--compare-platforms restarts the
    # servers): it holds the deployment's lock, so neither another bench nor an up, rollout or down runs meanwhile
    with app.run_context() as run_ctx, Deployment.open(run_ctx, target) as opened:
        outcome = opened.bench(req, limit=limit)
    _report(app, outcome)
    check_failures(app, outcome.report, None, allow_failed)


def _report(app: App, outcome: lib.BenchOutcome) -> None:
    from zenops import report as report_lib  # noqa: PLC0415

    results = outcome.report.results
    if app.json:
        app.emit_json({"type": "result", "command": "bench", "ok": not outcome.report.flagged, **outcome.to_dict()})
        return
    print_table(app, results)
    platforms = {r.platform for r in results}
    if len(platforms) == 2 and None not in platforms:
        zen = [r for r in results if r.platform == "zen"]
        cpu = [r for r in results if r.platform != "zen"]
        if zen and cpu:
            print_comparison(app, report_lib.compare(zen, cpu), Path("the stock CPU platform (zentorch off)"))
    for w in outcome.warnings:
        app.err.print(f"[yellow]warning:[/] {escape(w)}")
    n = len(results)
    app.out.print(
        f"{n} result(s) of {len(outcome.runs)} run(s) per server in {escape(str(outcome.run_dir))}; "
        f"report again with: zenops report {escape(str(outcome.run_dir))}"
    )
