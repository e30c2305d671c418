"""`zenops up`: bring hosts to a serving state."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from zenops import __version__
from zenops.cli.context import App, get_app
from zenops.cli.options import check_option, inventory_option, json_option, limit_option
from zenops.errors import NotImplementedYetError, UsageError
from zenops.up import UpResult, up_inventory


@click.command()
@inventory_option
@click.option("--cloud", metavar="NAME", help="[not implemented yet] clouds.yaml entry to provision servers in.")
@click.option("--flavor", metavar="FLAVOR", help="[not implemented yet] server flavor, e.g. gp.5.24.96.")
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
    model: str | None,
    limit: str | None,
    check: bool,
) -> None:
    """Prepare hosts for serving: wait until they answer over SSH and are ready, then install the Docker engine.

    \b
    Works today:
      zenops up --inventory hosts.yml            your own hosts (bare metal, any SSH host)
      zenops up -i hosts.yml --limit gpu-less-1  only some of them
      zenops up -i hosts.yml --check             show what would change, change nothing

    \b
    Not implemented yet (they stop with an error before anything runs):
      --cloud C --flavor F   provision OpenStack servers first (e.g. --cloud flex --flavor gp.5.24.96)
      --model M              start a vLLM + ZenTorch server for M and prove it healthy

    Docker settings (source distro|upstream, users, log rotation) come from the `docker:` section of the config.
    Re-running is safe: hosts already prepared report no changes.
    """
    app = get_app(ctx)
    missing = [flag for flag, value in (("--cloud", cloud), ("--flavor", flavor)) if value]
    if missing:
        raise NotImplementedYetError(
            f"{' and '.join(missing)}: provisioning OpenStack servers is not implemented yet in zenops "
            f"{__version__}; nothing was created",
            hint="prepare hosts you already have with `zenops up --inventory FILE` (try `zenops devhost up`)",
        )
    if model:
        raise NotImplementedYetError(
            f"--model {model}: starting a vLLM server is not implemented yet in zenops {__version__}; nothing was run",
            hint="`zenops up --inventory FILE` without --model prepares the hosts (SSH, Docker) today",
        )
    if inventory is None:
        raise UsageError(
            "zenops up needs hosts: --inventory FILE",
            hint="pass --inventory hosts.yml, or set defaults.up.inventory in zenops.yaml; "
            "`zenops devhost up` makes a local one to try",
        )
    with app.progress() as sink:
        result = up_inventory(
            app.config, inventory, limit=limit, check=check, verbosity=max(app.verbose - 1, 0), sink=sink
        )
    _report(app, result, check)


def _report(app: App, result: UpResult, check: bool) -> None:
    if app.json:
        app.emit_json({"type": "result", "command": "up", "ok": True, "check": check, **result.to_dict()})
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
