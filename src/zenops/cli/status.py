"""`zenops status`: the deployments this machine knows, with their servers, age, cost and reachability; with
--inventory, one deployment's serving state: model, servers, the gateway and its backends, the lock, rollouts.

Library: zenops.deployment.listing (``status``: the cloud's deployments), zenops.deployment.status
(``serving_status``: one deployment, each of its services read live). Playbook: playbooks/gateway.yml (status)
with --inventory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from zenops.cli.context import App, get_app
from zenops.cli.options import deployment_argument, json_option, option
from zenops.cli.text import shown  # text from hosts, clouds and records: cleaned and escaped
from zenops.errors import UsageError


@click.command()
@deployment_argument
@option("cloud", "status")
@option("deployment", "status")
@option("inventory", "status")
@click.option("--history", "last", type=click.IntRange(min=0), default=10, show_default=True, help="Rollout events.")
@json_option
@click.pass_context
def status(ctx: click.Context, cloud: str | None, deployment: str | None, inventory: Path | None, last: int) -> None:
    """List deployments: what each serves (model x instances at its endpoint), servers, addresses, flavor, age, cost
    so far, SSH reachability. `zenops status demo` (or --deployment demo): only that one.

    \b
    With --inventory: what serves there (model, servers), the gateway's endpoint and each backend's state
    (UP, DRAIN, DOWN, in-flight requests; read live from HAProxy), who holds the deployment's lock, the rollout
    in progress and the last rollout events (--history N).
    """
    from zenops.deployment.listing import status as status_lib  # noqa: PLC0415

    app = get_app(ctx)
    if deployment is not None and inventory is not None:
        raise UsageError("--inventory and --deployment: your hosts or a deployment, not both")
    if inventory is not None:
        _serving_status(app, inventory, last)
        return
    deps = status_lib(app.config, cloud)
    if deployment is not None:
        deps = [d for d in deps if d["name"] == deployment]
        if not deps:
            from zenops.deployment.target import unknown_deployment  # noqa: PLC0415

            raise unknown_deployment(deployment, cloud)
    if app.json:
        app.emit_json({"type": "result", "command": "status", "deployments": deps})
        return
    if not deps:
        app.out.print("no deployments")
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="zenops deployments", title_justify="left")
    cols = ("deployment", "cloud", "state", "serves", "server", "address", "status", "ssh", "expires", "flavor")
    for col in (*cols, "age", "cost so far"):
        table.add_column(col)
    for d in deps:
        cost = f"${d['cost_so_far']:.2f}" if d["cost_so_far"] is not None else "-"
        serves = _serves(d.get("serving"))
        rows = d["servers"] or [{"name": "-", "address": "-", "status": "-", "ssh": False}]
        for i, s in enumerate(rows):
            first = i == 0
            gateway = s.get("role") == "gateway"
            flavor = f"{d.get('gateway_flavor')} (gateway)" if gateway else d["flavor"] if first else ""
            table.add_row(
                shown(d["name"]) if first else "",
                shown(d["cloud"]) if first else "",
                shown(d["status"]) if first else "",
                serves if first else "",
                shown(s["name"]),
                shown(s.get("address") or "-"),
                shown(s["status"]),
                "yes" if s["ssh"] else "no",
                shown(_expires(s.get("expires_at"), d.get("expiry_switch"))),
                shown(flavor),
                f"{d['age_hours']:.1f}h" if first else "",
                cost if first else "",
            )
    app.out.print(table)


def _serves(serving: dict[str, Any] | None) -> str:
    """``tiny-llama x3 at http://...:8080/v1`` (model, instances, endpoint), or - when nothing is served."""
    if not serving:
        return "-"
    where = f" at {serving['endpoint']}" if serving.get("endpoint") else ""
    return shown(f"{serving['model']} x{serving['instances']}{where}")


def _expires(expires_at: str | None, switch: dict[str, Any] | None) -> str:
    """``2026-11-24T19:52:00Z, switch`` (the server deletes itself then), ``..., reap`` (`zenops reap` must), or -."""
    if not expires_at:
        return "-"
    return f"{expires_at}, {'switch' if switch and switch.get('servers') else 'reap'}"


def _serving_status(app: App, inventory: Path, last: int) -> None:
    from zenops.deployment import services  # noqa: PLC0415
    from zenops.deployment.status import serving_status  # noqa: PLC0415

    with app.run_context(read_only=True) as ctx:
        out = serving_status(ctx, inventory, last=last)
    record = out["serving"]
    if app.json:
        app.emit_json({"type": "result", "command": "status", **out})
        return
    if record is None:
        app.out.print(f"{shown(inventory)}: zenops serves nothing there (no serving record)")
    else:
        hosts = len(record["endpoints"])
        app.out.print(f"{shown(inventory)}: {shown(record['model'])} on {hosts} host(s), {record['servers']} server(s)")
        states = {name: entry.get("state") or {} for name, entry in out["services"].items()}
        if services.drainable(states) is None:  # no service fronts the servers: each one's endpoint
            for host, eps in sorted(record["endpoints"].items()):
                for ep in eps:
                    app.out.print(f"  {shown(host)}: {shown(ep.get('url'))}")
        for line in services.lines(out["services"]):  # each service's own (the gateway's: the endpoint first)
            (app.err if line.err else app.out).print(line.text)
    lock = out["lock"]
    if lock:
        state_word = "alive" if lock["alive"] else "dead (the next command takes it over)"
        app.out.print(f"locked by pid {lock['pid']} on {shown(lock['host'])} ({state_word}): {shown(lock['command'])}")
    ro = out["rollout"]
    if ro and ro["status"] in ("running", "paused", "failed"):
        app.out.print(f"rollout {shown(ro['id'])}: {shown(ro['status'])} {shown(ro.get('message') or '')}")
    for h in out["history"]:
        extra = {k: v for k, v in h.items() if k in ("hosts", "batch", "gate", "host", "wall_s", "to")}
        app.out.print(f"  {shown(h['at'])} {shown(h['rollout'])} {shown(h['event'])} {shown(extra) if extra else ''}")
