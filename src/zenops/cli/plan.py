"""`zenops plan`: the serving settings zenops derives from a machine's facts, with the reason for each number.

Library: zenops.planner (facts from zenops.facts with --inventory/--local). Playbook: playbooks/facts.yml when it
gathers facts; none otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import (
    RequestFlags,
    TunedOptions,
    json_option,
    option,
    request_options,
    tuned_fields,
    tuned_options,
)
from zenops.errors import UsageError
from zenops.option_table import request_from_rows

if TYPE_CHECKING:
    from zenops.catalog import FlavorSpec
    from zenops.compat import Engine
    from zenops.planner import Plan, PlanCost, Topology


@click.command("plan")
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Facts saved by `zenops facts --json` (or one host's topology JSON).",
)
@option("inventory", "plan")
@click.option("--local", is_flag=True, help="Gather the facts of this machine.")
@request_options("plan", model_required=True)
@option("flavor", "plan")
@option("tuned_file", "plan")
@option("limit", "plan")
@json_option
@click.pass_context
def plan_cmd(
    ctx: click.Context,
    facts_file: Path | None,
    inventory: Path | None,
    local: bool,
    request: RequestFlags,
    flavor: str | None,
    tuned_file: Path | None,
    limit: str | None,
) -> None:
    """Derive the vLLM CPU serving settings for MODEL from hardware facts, and explain each number.

    \b
    Facts from exactly one of:
      --facts FILE        saved by `zenops facts --json`
      --inventory FILE    gathered now from those hosts over SSH
      --local             gathered now from this machine
      --flavor F alone    projected from a flavor (a VM not created yet)

    \b
    Examples:
      zenops plan --flavor gp.5.24.96 --model Qwen/Qwen3-4B
      zenops plan --local --model Qwen/Qwen3-0.6B --json
      zenops plan --facts epyc.json --model meta-llama/Llama-3.3-70B-Instruct --concurrency 16
      zenops plan --facts epyc.json --model Qwen/Qwen3-8B --objective throughput
      zenops plan --flavor gp.5.24.96 --model Qwen/Qwen3-4B --tuned tuned.yaml   what a campaign measured best

    Each instance shows its decode ceiling (roofline) when the facts carry a bandwidth measurement
    (`zenops facts --bandwidth`) or the catalogue knows the CPU (then labelled theoretical).

    A refusal (model too big, CPU cannot run zentorch, no AVX2, contradictory options) exits 7 and names the fix.
    """
    from zenops import catalog  # noqa: PLC0415
    from zenops.planner import PlanOptions, plan  # noqa: PLC0415

    app = get_app(ctx)
    sources = [name for name, on in (("--facts", facts_file), ("--inventory", inventory), ("--local", local)) if on]
    if len(sources) > 1:
        raise UsageError(f"{' and '.join(sources)}: give one source of facts", hint="pick one of them")
    user_flavors = app.config.flavors
    flavor_spec = catalog.get_flavor(flavor, user_flavors) if flavor else None
    if not sources and flavor_spec is None:
        raise UsageError(
            "no facts to plan from", hint="pass --facts FILE, --inventory FILE, --local, or --flavor F for a projection"
        )
    model = request.model
    assert model is not None  # required=True
    model_spec = catalog.get_model(model)
    values = dict(request.values)
    tuned = None
    if tuned_file is not None:
        tuned = tuned_options(ctx, tuned_file, model, tuned_fields("plan"))
        values.update(tuned.values)
        app.note(tuned.describe("zenops plan"))
        if flavor_spec is not None and tuned.config.flavor and tuned.config.flavor != flavor_spec.name:
            app.note(f"note: measured on {tuned.config.flavor}, planned for {flavor_spec.name}: the figures may differ")
    from zenops import compat  # noqa: PLC0415

    compat.check_vllm(values["vllm"])  # a release nothing can deploy: exit 11, naming those it knows
    engine = _engine(app, values)
    opts = request_from_rows(PlanOptions, values, vllm_version=engine.combo.vllm, tuned=tuned.reason if tuned else None)

    topologies = _topologies(app, facts_file, inventory, local, limit, flavor_spec)
    all_flavors = list(catalog.flavors(user_flavors).values())
    plans = {name: plan(topo, model_spec, opts, all_flavors) for name, topo in topologies.items()}
    price = flavor_spec.price_per_hour if flavor_spec else None
    if app.json:
        _emit_json(app, plans, flavor, price, engine, tuned)
        return
    for name, p in plans.items():
        _print_plan(app, name, p, price, engine)


def _topologies(
    app: App,
    facts_file: Path | None,
    inventory: Path | None,
    local: bool,
    limit: str | None,
    flavor_spec: FlavorSpec | None,
) -> dict[str, Topology]:
    """The machines to plan for, by name: from the one source of facts given, else projected from the flavor."""
    from zenops.facts import gather_facts, load_facts_file  # noqa: PLC0415
    from zenops.planner import Topology  # noqa: PLC0415

    topologies: dict[str, Topology] = {}
    if facts_file is not None:
        topologies[limit or "facts"] = Topology.from_facts(load_facts_file(facts_file, host=limit))
    elif inventory is not None or local:
        with app.run_context(read_only=True) as run_ctx:
            gathered = gather_facts(run_ctx, inventory, local=local, limit=limit)
        for name, facts in gathered.items():
            topologies[name] = Topology.from_facts(facts)
    else:
        assert flavor_spec is not None
        topologies[flavor_spec.name] = Topology.from_flavor(flavor_spec)
    return topologies


def _emit_json(
    app: App,
    plans: Mapping[str, Plan],
    flavor: str | None,
    price: float | None,
    engine: Engine,
    tuned: TunedOptions | None,
) -> None:
    """The --json result: every host's plan (with its zentorch and cost); one host's also at the top level."""
    from zenops.planner import plan_cost  # noqa: PLC0415

    costs = {name: plan_cost(p, price) for name, p in plans.items()}
    items = [
        {
            "host": name,
            **p.to_dict(),
            "zentorch": p.platform == "zen",
            "cost": c.to_dict() if (c := costs[name]) else None,
        }
        for name, p in plans.items()
    ]
    out: dict[str, Any] = {
        "type": "result",
        "command": "plan",
        "flavor": flavor,
        "price_per_hour": price,
        "engine": engine.to_dict(),
        "plans": items,
    }
    if tuned is not None:
        out["tuned"] = tuned.config.to_dict()
    if len(items) == 1:
        out.update(items[0])
    app.emit_json(out)


def _engine(app: App, values: Mapping[str, Any]) -> Engine:
    """The engine (pair and image route) as `up` resolves it: zenops.serve.resolve_engine calls the same function.
    One zenops's tests do not run is labelled: a warning with --json, the engine's line otherwise."""
    from zenops import compat  # noqa: PLC0415

    engine = compat.engine_of(values, app.warn)
    if app.json and not engine.verified:
        app.warn(f"engine {engine.combo.id} by --image-source {engine.image_source}: {engine.verification}")
    return engine


def _print_plan(app: App, host: str, p: Plan, price: float | None, engine: Engine) -> None:
    from rich import box  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    from zenops.planner import plan_cost  # noqa: PLC0415

    out = app.out
    out.print(f"[bold]{escape(host)}[/]: {escape(p.topology)}")
    out.print(f"  platform [bold]{p.platform}[/] ({escape(p.platform_reason)})")
    zentorch = "on" if p.platform == "zen" else "off (vLLM's own CPU backend; the image still has it)"
    line = f"  engine {escape(engine.describe())}; zentorch {zentorch}"
    out.print(line if engine.verified else f"[yellow]{line}[/]")
    out.print(
        f"  model {escape(p.model)}, vLLM {p.vllm_version}, {p.dtype}, max-model-len {p.max_model_len}, "
        f"max-num-seqs {p.max_num_seqs}, objective {p.objective}"
    )
    cost = plan_cost(p, price)
    if cost is not None:
        out.print(f"  cost {_cost_line(cost)}")
    # short cells, so that the table reads in 100 columns (tests/unit/test_plan_cli.py)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    columns = ["#", "port", "node", "TP", "OMP CPUs", "rsvd", "KV GiB", "KV tokens", "cpuset", "shm"]
    for col in [*columns, "ceiling tok/s", "bound"]:
        table.add_column(col, no_wrap=col in ("ceiling tok/s", "OMP CPUs", "cpuset"))
    for i in p.instances:
        roof = i.roofline
        ceiling = f"{roof['ceiling_tok_s']:g} @{roof['concurrency']}" if roof else "-"
        bound = str(roof["binding"]) + ("*" if str(roof["source"]).startswith("theoretical") else "") if roof else "-"
        table.add_row(
            str(i.index),
            str(i.port),
            ",".join(map(str, i.numa_nodes)),
            str(i.tensor_parallel_size),
            i.omp_threads_bind,
            ",".join(map(str, i.reserved_cpus)) or "-",
            f"{i.kv_cache_gib:g}",
            str(i.kv_tokens),
            i.cpuset,
            str(i.container["shm_size"]),
            ceiling,
            bound,
        )
    out.print(table)
    if any(i.roofline and str(i.roofline["source"]).startswith("theoretical") for i in p.instances):
        out.print("  [dim]* theoretical: the catalogue's figures for this CPU; `zenops facts --bandwidth` measures[/]")
    elif not all(i.roofline for i in p.instances):
        out.print("  [dim]- no ceiling: no bandwidth figures for this CPU (`zenops facts --bandwidth` measures)[/]")
    for i in p.instances:
        env = " ".join(f"{k}={v}" for k, v in sorted(i.env.items()))
        out.print(
            f"  [dim]instance {i.index}:[/] {escape(env)}  vllm serve {escape(p.model)} {escape(' '.join(i.args))}"
        )
    out.print("  [bold]why[/]")
    for r in p.reasons:
        out.print(f"   - [cyan]{r.topic}[/]: {escape(r.text)}")
    for w in p.warnings:
        out.print(f"   [yellow]warning:[/] {escape(w)}")
    out.print()


def _cost_line(cost: PlanCost) -> str:
    """``$0.79/h, $576.70/month (730 h); at the ceiling of 226.13 tok/s*: $0.97 per 1M output tokens`` ($/h and
    $/month as zenops.spend writes them): the token price is a floor (measured tok/s are below the ceiling); ``*``: a
    theoretical ceiling, as in the table."""
    from zenops.spend import rate  # noqa: PLC0415

    line = rate(cost.per_hour, hours=True)
    if cost.per_million_tokens is None or cost.ceiling_tok_s is None:
        return line + "; $ per 1M output tokens: no ceiling to price at"
    star = "*" if cost.theoretical else ""
    return (
        line
        + f"; at the ceiling of {cost.ceiling_tok_s:g} tok/s{star}: ${cost.per_million_tokens:.2f} per 1M output tokens"
    )
