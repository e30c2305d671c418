"""`zenops up`: bring hosts to a serving state."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from zenops import __version__
from zenops.cli.context import App, get_app
from zenops.cli.options import check_option, inventory_option, json_option, limit_option
from zenops.cloud.ledger import Deployment
from zenops.deploy import CloudRequest, up_cloud
from zenops.errors import NotImplementedYetError, UsageError
from zenops.up import UpResult, up_inventory


@click.command()
@inventory_option
@click.option("--cloud", metavar="NAME", help="clouds.yaml entry to provision servers in (e.g. flex, sandbox).")
@click.option("--flavor", metavar="FLAVOR", help="Server flavor, e.g. gp.5.24.96 (with --cloud).")
@click.option("--count", type=click.IntRange(1, 100), default=1, show_default=True, help="Servers (with --cloud).")
@click.option("--name", metavar="NAME", help="Deployment name (default: from the flavor). Re-using a name adopts.")
@click.option("--image", metavar="IMAGE", help="Image (default: the cloud profile's, debian-12).")
@click.option("--campaign", metavar="ID", help="Campaign the deployment belongs to (marks its resources).")
@click.option(
    "--network-mode",
    type=click.Choice(["provider", "floating"]),
    help="provider network, or tenant network + router + floating IPs (default: the cloud profile's).",
)
@click.option("--model", metavar="MODEL", help="[not implemented yet] model to serve, e.g. Qwen/Qwen3-4B.")
@limit_option
@check_option
@json_option
@click.pass_context
def up(
    ctx: click.Context,
    inventory: Path | None,
    cloud: str | None,
    flavor: str | None,
    count: int,
    name: str | None,
    image: str | None,
    campaign: str | None,
    network_mode: str | None,
    model: str | None,
    limit: str | None,
    check: bool,
) -> None:
    """Bring hosts to a serving state: provision them (or take yours), wait for SSH, install the Docker engine.

    \b
    Your own hosts (bare metal, any SSH host):
      zenops up --inventory hosts.yml
      zenops up -i hosts.yml --limit web-1 --check     show what would change, change nothing

    \b
    OpenStack servers (clouds.yaml entry; see `zenops config example` for cloud profiles):
      zenops up --cloud flex --flavor gp.5.24.96                    one server, deployment gp-5-24-96
      zenops up --cloud sandbox --flavor gp.5.2.8 --count 3 --name demo
    Preflight runs first (cloud reachable, flavor, image, networks, quota room, cost per hour): nothing is created
    unless it passes. Every resource is marked as zenops's; re-running with the same --name adopts what exists;
    a failed or interrupted run is resumed by re-running, or removed by `zenops down --name NAME`.

    \b
    Not implemented yet (stops with an error before anything runs):
      --model M              start a vLLM + ZenTorch server for M and prove it healthy

    Docker settings (source distro|upstream, users, log rotation) come from the `docker:` section of the config.
    """
    app = get_app(ctx)
    if model:
        raise NotImplementedYetError(
            f"--model {model}: starting a vLLM server is not implemented yet in zenops {__version__}; nothing was run",
            hint="`zenops up` without --model prepares the hosts (SSH, Docker) today",
        )
    if cloud or flavor:
        if inventory is not None:
            raise UsageError("--inventory and --cloud: choose your own hosts or new cloud servers, not both")
        if not (cloud and flavor):
            raise UsageError("--cloud and --flavor go together", hint="e.g. --cloud flex --flavor gp.5.24.96")
        request = CloudRequest(
            cloud=cloud,
            flavor=flavor,
            count=count,
            name=name,
            image=image,
            campaign=campaign,
            network_mode=network_mode,
        )

        with app.progress() as sink:
            result, dep = up_cloud(
                app.config, request, check=check, verbosity=max(app.verbose - 1, 0), sink=sink, note=app.note
            )
        _report(app, result, check, dep)
        return
    if inventory is None:
        raise UsageError(
            "zenops up needs hosts: --inventory FILE, or --cloud C --flavor F",
            hint="pass --inventory hosts.yml, or set defaults.up.inventory in zenops.yaml; "
            "`zenops devhost up` makes a local one to try",
        )
    with app.progress() as sink:
        result = up_inventory(
            app.config, inventory, limit=limit, check=check, verbosity=max(app.verbose - 1, 0), sink=sink
        )
    _report(app, result, check)


def _report(app: App, result: UpResult, check: bool, dep: Deployment | None = None) -> None:
    if app.json:
        extra = {"deployment": dep.to_dict()} if dep else {}
        app.emit_json({"type": "result", "command": "up", "ok": True, "check": check, **result.to_dict(), **extra})
        return
    table = Table(title="zenops up" + (" (check mode: nothing changed)" if check else ""), title_justify="left")
    for col in ("host", "address", "OS", "CPUs", "memory", "docker", "ok", "changed", "failed"):
        table.add_column(col, justify="right" if col in ("CPUs", "memory", "ok", "changed", "failed") else "left")
    for h in result.hosts:
        mem = f"{h.memory_mb / 1024:.1f} GiB" if h.memory_mb else "-"
        table.add_row(
            h.host,
            h.address or "-",
            h.os or "-",
            str(h.cpus or "-"),
            mem,
            h.docker or "-",
            str(h.stats.ok),
            str(h.stats.changed),
            str(h.stats.failed),
        )
    app.out.print(table)
    app.out.print(f"{len(result.hosts)} host(s) ready in {result.run.duration_s:.0f}s; run log: {result.run.run_dir}")
    if dep is not None:
        cost = f", ${dep.price_per_hour * dep.count:.2f}/h" if dep.price_per_hour is not None else ""
        app.out.print(
            f"deployment {dep.name} on {dep.cloud}: {dep.count} x {dep.flavor}{cost}; inventory {dep.inventory}; "
            f"remove with: zenops down --name {dep.name} --cloud {dep.cloud}"
        )
