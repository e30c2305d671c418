"""`zenops ssh`: a shell, or one command, on a host of a deployment, with the deployment's key and pinned host keys.

Library: zenops.deployment.access (``read_inventory``, ``hosts_from``, ``pick_host``). Playbook: none (ssh).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from zenops.cli.context import get_app
from zenops.cli.options import json_option, one_deployment, option


class DashDashCommand(click.Command):
    """A command whose arguments after ``--`` are a command to run elsewhere (``ctx.meta["remote_command"]``), never
    its own arguments or options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["remote_command"] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


@click.command(cls=DashDashCommand)
@click.argument("names", nargs=-1, metavar="[DEPLOYMENT] [HOST]")
@option("inventory", "ssh")
@option("deployment", "ssh")
@option("cloud", "ssh")
@click.option("--print-command", is_flag=True, help="Print the ssh command instead of running it.")
@json_option
@click.pass_context
def ssh(
    ctx: click.Context,
    names: tuple[str, ...],
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    print_command: bool,
) -> None:
    """Open a shell on HOST of a deployment, or run a command there (after --).

    \b
    The deployment is the first name (`zenops ssh fleet fleet-2`) or --deployment NAME; with --inventory or
    --deployment, the one name is HOST.

    \b
    It connects as Ansible does: the inventory's address, user, port and key, and for a cloud deployment its pinned
    host keys (a host whose key changed since `up` is refused). HOST may be left out when the deployment has one.
    The exit status is the remote command's (255: ssh could not connect).

    \b
      zenops ssh fleet                                   a shell on the deployment's one server
      zenops ssh fleet fleet-2 -- uptime                 one command on fleet-2 (= --deployment fleet fleet-2)
      zenops ssh -i hosts.yml h1 -- sudo docker ps       your own hosts: the inventory's
      zenops ssh -i hosts.yml h1 --print-command         the ssh command, for scripts (--json: its argv)
    """
    from zenops.deployment.access import hosts_from, pick_host, read_inventory  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    app = get_app(ctx)
    deployment, host = _names(ctx, names, inventory, deployment)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="ssh")
    access = pick_host(hosts_from(read_inventory(target.hosts), app.config.ssh), host, target.hosts)
    command = list(ctx.meta.get("remote_command") or [])
    argv = access.run_argv(command) if command else access.ssh_argv(tty=True)
    if print_command or app.json:
        if app.json:
            app.emit_json({"type": "result", "command": "ssh", "host": access.to_dict(), "argv": argv})
        else:
            import shlex  # noqa: PLC0415

            click.echo(shlex.join(argv))
        return
    rc = subprocess.run(argv, check=False).returncode
    sys.exit(rc)  # the remote command's status (click's ctx.exit would be swallowed outside standalone mode)


def _names(
    ctx: click.Context, names: tuple[str, ...], inventory: Path | None, deployment: str | None
) -> tuple[str | None, str | None]:
    """(deployment, host) from the positional names: [DEPLOYMENT] [HOST], where a deployment given as --deployment or
    hosts given as --inventory leave one name, the host (``zenops ssh -i hosts.yml h1``, ``zenops ssh --deployment
    fleet fleet-2``); ``zenops ssh fleet fleet-2`` names both."""
    from zenops.errors import UsageError  # noqa: PLC0415

    if len(names) > 2:
        raise UsageError(
            f"{' '.join(names)}: at most a deployment and a host", hint="a command to run goes after --: -- uptime"
        )
    if len(names) == 2:
        if inventory is not None:
            raise UsageError(
                f"--inventory {inventory} and deployment {names[0]!r}: your hosts or a deployment, not both",
                hint=f"zenops ssh -i {inventory} {names[1]}",
            )
        return one_deployment(ctx, names[0], deployment), names[1]
    if not names:
        return deployment, None
    if inventory is not None or deployment is not None:
        return deployment, names[0]
    return names[0], None
