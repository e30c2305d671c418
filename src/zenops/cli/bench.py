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
from zenops.cli.options import (
    DurationType,
    LazyChoice,
    cloud_option,
    deployment_argument,
    deployment_option,
    flavor_option,
    inventory_option,
    json_option,
    limit_option,
    price_option,
    through_gateway_option,
)
from zenops.cli.report import check_failures, print_comparison, print_table

if TYPE_CHECKING:  # zenops.bench.run imports ansible-runner: only a benchmark loads it, not --help
    from zenops.bench import run as lib


def _levels(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    from zenops.bench import parse_levels  # noqa: PLC0415

    return parse_levels(value) if value else None


def _profile_names() -> list[str]:
    """The profiles of zenops/catalog/bench.yaml by name (what zenops.bench.profiles() reads), for --profile."""
    from zenops import catalog  # noqa: PLC0415

    return sorted(catalog.load_resource("bench.yaml", "profiles")[1])


@click.command("bench")
@deployment_argument
@inventory_option
@deployment_option
@cloud_option
@click.option(
    "--profile",
    type=LazyChoice(_profile_names),
    default="seed",
    show_default=True,
    help="seed: the write-up's run (random 128 in/128 out, 20 prompts, concurrency 4, temperature 0.7); "
    "sweep: the same at concurrency 1, 2, 4, 8.",
)
@click.option(
    "--concurrency", metavar="LEVELS", callback=_levels, help="Max concurrency levels, one run each (e.g. 1,2,4,8)."
)
@click.option("--num-prompts", type=click.IntRange(min=1), metavar="N", help="Prompts per run (profile's default).")
@click.option("--input-len", type=click.IntRange(min=1), metavar="N", help="Input tokens per prompt.")
@click.option("--output-len", type=click.IntRange(min=1), metavar="N", help="Output tokens per prompt.")
@click.option(
    "--warmups",
    type=click.IntRange(min=0),
    metavar="N",
    help="Requests sent before each run's measured ones and left out of its figures (vllm bench serve "
    "--num-warmups): a server just started answers its first requests slower.",
)
@click.option(
    "--compare-platforms",
    is_flag=True,
    help="Also run with zentorch off (or on): restart the servers on the other platform, benchmark, restore them.",
)
@through_gateway_option(
    "Benchmark the deployment's endpoint (its gateway, `up --gateway`): one client on the gateway's host, its "
    "requests balanced over every server, instead of each server on its own."
)
@click.option(
    "--one-at-a-time",
    is_flag=True,
    help="Benchmark the hosts one after another, not all at once: for hosts that share a machine (containers, VMs "
    "on one hypervisor), which would otherwise measure each other. `zenops rollout` does it by itself for hosts "
    "whose facts show one kernel.",
)
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where run directories are written (<runs-dir>/<run-id>/<host>/<instance>/).",
)
@click.option("--run-id", metavar="ID", help="Name of the run directory (default: UTC date and time).")
@flavor_option
@price_option
@click.option(
    "--timeout",
    type=DurationType(10),
    default="1h",
    show_default=True,
    help="How long one run may take (90s, 30m, 1h30m, or a number of seconds; at least 10s).",
)
@click.option("--allow-failed", is_flag=True, help="Failed requests are warned about but do not fail the command.")
@limit_option
@json_option
@click.pass_context
def bench(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    profile: str,
    concurrency: tuple[int, ...] | None,
    num_prompts: int | None,
    input_len: int | None,
    output_len: int | None,
    warmups: int | None,
    compare_platforms: bool,
    through_gateway: bool,
    one_at_a_time: bool,
    runs_dir: Path,
    run_id: str | None,
    flavor: str | None,
    price_per_hour: float | None,
    timeout: int,
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
    if dep is not None:
        flavor = flavor or dep.flavor
        if price_per_hour is None:
            price_per_hour = dep.price_per_hour
    req = lib.BenchRequest(
        profile=profile,
        concurrency=concurrency,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        num_warmups=warmups,
        compare_platforms=compare_platforms,
        gateway=through_gateway,
        one_at_a_time=one_at_a_time,
        runs_dir=runs_dir,
        run_id=run_id,
        flavor=flavor,
        price_per_hour=price_per_hour,
        cloud=dep.cloud if dep else None,
        deployment=dep.name if dep else None,
        timeout=timeout,
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
