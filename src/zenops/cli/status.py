"""`zenops status`: the deployments this machine knows, with their servers, age, cost and reachability.

Library: zenops.deploy (``status``). Playbook: none.
"""

from __future__ import annotations

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import json_option


@click.command()
@click.option("--cloud", metavar="NAME", help="Only this cloud.")
@json_option
@click.pass_context
def status(ctx: click.Context, cloud: str | None) -> None:
    """List deployments: servers, addresses, flavor, age, cost so far, SSH reachability."""
    from zenops.deploy import status as status_lib  # noqa: PLC0415

    app = get_app(ctx)
    deps = status_lib(app.config, cloud)
    if app.json:
        app.emit_json({"type": "result", "command": "status", "deployments": deps})
        return
    if not deps:
        app.out.print("no deployments")
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="zenops deployments", title_justify="left")
    for col in ("deployment", "cloud", "state", "server", "address", "status", "ssh", "flavor", "age", "cost so far"):
        table.add_column(col)
    for d in deps:
        cost = f"${d['cost_so_far']:.2f}" if d["cost_so_far"] is not None else "-"
        rows = d["servers"] or [{"name": "-", "address": "-", "status": "-", "ssh": False}]
        for i, s in enumerate(rows):
            first = i == 0
            table.add_row(
                escape(d["name"]) if first else "",
                d["cloud"] if first else "",
                d["status"] if first else "",
                escape(str(s["name"])),
                str(s.get("address") or "-"),
                s["status"],
                "yes" if s["ssh"] else "no",
                d["flavor"] if first else "",
                f"{d['age_hours']:.1f}h" if first else "",
                cost if first else "",
            )
    app.out.print(table)
