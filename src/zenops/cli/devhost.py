"""`zenops devhost`: local systemd containers reached over SSH, to try zenops without a cloud or spare servers.

Library: zenops.devhost. Playbook: none (Docker on this machine).
"""

from __future__ import annotations

import click

from zenops.cli.context import get_app
from zenops.cli.options import json_option
from zenops.errors import UsageError

name_option = click.option("--name", default="dev", show_default=True, help="Name of the set of hosts.")


@click.group()
def devhost() -> None:
    """Local container hosts (systemd + sshd, nested Docker) for trying and testing zenops.

    \b
      zenops devhost up --count 2        start two hosts, write an inventory, print its path
      zenops up -i "$(zenops devhost inventory)"
      zenops devhost down                remove them

    Needs a Docker engine on this machine and the image from scripts/build-images.
    """


@devhost.command("up")
@name_option
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 16), help="How many hosts.")
@click.option(
    "--cpus",
    metavar="LIST",
    help="The CPUs each host may use (e.g. 1, or 0-3): a smaller machine than this one, as its facts then show.",
)
@json_option
@click.pass_context
def up_cmd(ctx: click.Context, name: str, count: int, cpus: str | None) -> None:
    """Start (or reuse) the hosts and write their inventory."""
    from zenops import devhost as lib  # noqa: PLC0415

    app = get_app(ctx)
    inv, hosts = lib.up(app.config.state_dir, name, count, cpus=cpus)
    if app.json:
        app.emit_json(
            {"type": "result", "command": "devhost up", "inventory": str(inv), "hosts": [h.__dict__ for h in hosts]}
        )
        return
    for h in hosts:
        click.echo(f"{h.container:<24} {h.state:<8} {h.address}", err=True)
    click.echo(str(inv))


@devhost.command("inventory")
@name_option
@click.pass_context
def inventory_cmd(ctx: click.Context, name: str) -> None:
    """Print the path of the hosts' inventory."""
    from zenops import devhost as lib  # noqa: PLC0415

    inv = lib.inventory_path(get_app(ctx).config.state_dir, name)
    if not inv.is_file():
        raise UsageError(f"no devhost set named '{name}'", hint=f"start it: zenops devhost up --name {name}")
    click.echo(str(inv))


@devhost.command("status")
@json_option
@click.pass_context
def status_cmd(ctx: click.Context) -> None:
    """List every devhost container."""
    from zenops import devhost as lib  # noqa: PLC0415

    app = get_app(ctx)
    hosts = lib.list_hosts()
    if app.json:
        app.emit_json({"type": "result", "command": "devhost status", "hosts": [h.__dict__ for h in hosts]})
        return
    if not hosts:
        click.echo("no devhosts")
    for h in hosts:
        click.echo(f"{h.name:<10} {h.container:<24} {h.state:<8} {h.address}")


@devhost.command("down")
@name_option
@json_option
@click.pass_context
def down_cmd(ctx: click.Context, name: str) -> None:
    """Remove the hosts, their volumes, key and inventory."""
    from zenops import devhost as lib  # noqa: PLC0415

    app = get_app(ctx)
    removed = lib.down(app.config.state_dir, name)
    if app.json:
        app.emit_json({"type": "result", "command": "devhost down", "removed": removed})
        return
    click.echo(f"removed {len(removed)} container(s)" + (f": {', '.join(removed)}" if removed else ""))
