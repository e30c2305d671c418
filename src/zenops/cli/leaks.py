"""`zenops leaks`: zenops-marked resources that no live deployment accounts for.

Library: zenops.deployment.leakcheck (``leaks``). Playbook: none (openstacksdk).
"""

from __future__ import annotations

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import json_option, option


@click.command()
@option("cloud", "leaks")
@json_option
@click.pass_context
def leaks(ctx: click.Context, cloud: str) -> None:
    """List every resource carrying zenops's marks whose deployment is not in this machine's ledger.

    Exits 0 when there are none, 10 when there are (remove them with `zenops down --all-mine` or --deployment).
    """
    from zenops.deployment.leakcheck import LeaksFoundError  # noqa: PLC0415
    from zenops.deployment.leakcheck import leaks as leaks_lib  # noqa: PLC0415

    app = get_app(ctx)
    found = leaks_lib(app.config, cloud)
    if app.json:
        app.emit_json({"type": "result", "command": "leaks", "cloud": cloud, "leaks": found})
    else:
        for r in found:
            app.out.print(f"{r['kind']:<15} {escape(str(r['name']))}  deployment={r['deployment']} id={r['id']}")
        app.out.print(f"{len(found)} leaked resource(s) on {cloud}")
    if found:
        raise LeaksFoundError(
            f"{len(found)} zenops resource(s) on {cloud} belong to no live deployment",
            hint=f"remove them: zenops down --cloud {cloud} --deployment <deployment> (or --all-mine)",
        )
