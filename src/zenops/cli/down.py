"""`zenops down`: remove what zenops created, in dependency order, and prove it is gone.

Library: zenops.deployment.teardown (``down``: a cloud deployment, through openstacksdk) or zenops.hosts
(``down_inventory``: the servers on your hosts). Playbook: playbooks/down.yml for --inventory; none for a deployment.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import deployment_argument, json_option, option
from zenops.errors import UsageError


@click.command()
@deployment_argument
@option("deployment", "down")
@option("campaign", "down")
@click.option("--all-mine", is_flag=True, help="Every resource carrying zenops's marks in the cloud.")
@option("cloud", "down")
@option("dry_run", "down")
@option("yes", "down")
@option("inventory", "down")
@click.option("--images", is_flag=True, help="With --inventory: also remove the engine images zenops made.")
@click.option(
    "--data", is_flag=True, help="With --inventory: also remove models and the model cache (/var/lib/zenops)."
)
@click.option(
    "--keep-secrets",
    is_flag=True,
    help="Keep the deployment's API key file (by default removed with it, so a deployment made again gets a new key).",
)
@option("limit", "down")
@json_option
@click.pass_context
def down(
    ctx: click.Context,
    deployment: str | None,
    campaign: str | None,
    all_mine: bool,
    cloud: str | None,
    dry_run: bool,
    yes: bool,
    inventory: Path | None,
    images: bool,
    data: bool,
    limit: str | None,
    keep_secrets: bool,
) -> None:
    """Remove a deployment's servers, floating IPs, routers, networks, security groups and keypair.

    It says what it will delete and what that stops costing, then asks (default No); without a terminal (scripts,
    CI) it needs --yes. Only resources carrying zenops's ownership marks are touched. Each deletion waits until the
    cloud answers 404; afterwards zenops lists the cloud again and fails if anything of the selection is left.

    \b
      zenops down demo --dry-run                (the same as --deployment demo)
      zenops down demo --yes
      zenops down --campaign sweep-nov --cloud flex --yes

    \b
    Your own hosts: stop and remove the vLLM servers zenops started there (containers labelled io.zenops.managed),
    then list again and fail if any is left; the deployment's gateway (HAProxy) goes first. The Docker engine stays.
      zenops down --inventory hosts.yml                  the servers
      zenops down --inventory hosts.yml --images --data  and the engine images, models and model cache

    \b
    Either way the API key file and the metrics password file zenops generated for the deployment (<state
    dir>/secrets/) are removed too, so a deployment made again gets new ones; --keep-secrets keeps them (so does
    --limit: the other hosts still use them). A key given with --api-key-file is the operator's and is never removed.
    """
    app = get_app(ctx)
    if inventory is not None:
        if deployment or campaign or all_mine or cloud:
            raise UsageError(
                "--inventory and --deployment/--campaign/--all-mine/--cloud: choose your hosts or a deployment"
            )
        _down_inventory(app, inventory, images=images, data=data, limit=limit, keep_secrets=keep_secrets)
        return
    if images or data or limit:
        raise UsageError("--images, --data and --limit go with --inventory", hint="zenops down --inventory hosts.yml")
    from zenops.cli.confirm import agree  # noqa: PLC0415
    from zenops.deployment.teardown import down_locked  # noqa: PLC0415

    # each deployment's lock (the one `up --cloud` holds), so a running up, rollout or bench is not cut under it
    result = down_locked(
        app.config,
        cloud=cloud,
        name=deployment,
        campaign=campaign,
        all_mine=all_mine,
        dry_run=dry_run,
        confirm=lambda spend: agree(app, spend, yes=yes),
        note=app.note,
        keep_secrets=keep_secrets,
    )
    if app.json:
        app.emit_json({"type": "result", "command": "down", **result.to_dict()})
        return
    verb = "would remove" if dry_run else "removed"
    for r in result.removed:
        app.out.print(f"{verb} {r['kind']:<15} {escape(str(r['name']))}")
    if not result.removed:
        app.out.print(f"nothing of {', '.join(result.deployments) or 'zenops'} is left on {result.cloud}")
    elif not dry_run:
        app.out.print(
            f"{len(result.removed)} resource(s) removed from {result.cloud}; checked: nothing of "
            f"{', '.join(result.deployments)} is left"
        )


def _down_inventory(
    app: App, inventory: Path, *, images: bool, data: bool, limit: str | None, keep_secrets: bool
) -> None:
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    dep = resolve_target(app.config, inventory=inventory, command="down")
    with app.run_context() as run_ctx, Deployment.open(run_ctx, dep) as deployment:
        run, hosts = deployment.stop_servers(images=images, data=data, limit=limit, keep_secrets=keep_secrets)
    if app.json:
        app.emit_json(
            {"type": "result", "command": "down", "run": run.to_dict(), "hosts": [h.to_dict() for h in hosts]}
        )
        return
    for h in hosts:
        if not h.docker:
            app.out.print(f"{h.host}: no Docker engine, nothing of zenops runs there")
            continue
        removed = [*h.containers, *h.images]
        what = ", ".join(escape(r) for r in removed) if removed else "nothing was running"
        app.out.print(f"{h.host}: removed {what}; checked: nothing of zenops is left")
