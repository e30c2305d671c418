"""`zenops reap`: remove deployments whose servers have passed their expiry (`zenops up --ttl`).

Library: zenops.deployment.reaping (``reap``, ``select_expired``; each removal is ``down``). Playbook: none
(openstacksdk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import json_option, option

if TYPE_CHECKING:
    from zenops.spend import Spend


@click.command()
@option("cloud", "reap")
@option("dry_run", "reap")
@option("yes", "reap")
@json_option
@click.pass_context
def reap(ctx: click.Context, cloud: str, dry_run: bool, yes: bool) -> None:
    """Remove every deployment whose servers have all passed their expiry, as `zenops down --deployment D` does.

    The expiry is server metadata zenops:expires_at, set at creation by `zenops up --cloud C --ttl 2h` (or a
    campaign's budget.ttl). reap asks the cloud, not this machine's ledger, so it also removes what another
    controller made, one that is gone or whose cron stopped. A deployment is removed (servers, floating IPs,
    router, network, security group, and its keypair zenops-<name>) only when every server of it has an expiry
    and all have passed; servers without an expiry are never touched, and unexpired ones are listed with the
    time they have left. Each deployment's lock is held while it is removed (a running `up` or `rollout` on
    this machine is not cut under: reap says so and the next run removes it).

    \b
      zenops reap --cloud flex --dry-run        what has expired, and what would be removed
      zenops reap --cloud flex --yes            remove it
      zenops reap --cloud flex --yes --json     for scripts: reaped, kept and failed deployments

    \b
    Exit 0 when nothing has expired or everything expired was removed (and checked gone); otherwise the code of
    the first failure (8: the cloud refused, 14: a deployment is locked by a running command).

    \b
    Run it on a schedule on a machine that has the clouds.yaml entry (cron's PATH is short: give zenops's full
    path; set OS_CLIENT_CONFIG_FILE when clouds.yaml is elsewhere), e.g. every 10 minutes from `crontab -e`:
      */10 * * * *  $HOME/.local/bin/zenops reap --cloud flex --yes --json >> $HOME/zenops-reap.log 2>&1

    \b
    or from a systemd timer (systemctl --user enable --now zenops-reap.timer):
      # ~/.config/systemd/user/zenops-reap.service
      [Unit]
      Description=zenops reap: remove expired zenops deployments
      [Service]
      Type=oneshot
      ExecStart=%h/.local/bin/zenops reap --cloud flex --yes
      # ~/.config/systemd/user/zenops-reap.timer
      [Timer]
      OnCalendar=*:0/10
      Persistent=true
      [Install]
      WantedBy=timers.target
    (a user timer runs while you are logged in; `loginctl enable-linger $USER` keeps it running when you are not.)
    """
    from zenops.cli.confirm import agree  # noqa: PLC0415
    from zenops.deployment.reaping import ReapFailedError  # noqa: PLC0415
    from zenops.deployment.reaping import reap as reap_lib  # noqa: PLC0415

    app = get_app(ctx)

    def confirm(spend: Spend) -> bool:
        return agree(app, spend, yes=yes, hint="pass --yes (as in a cron line), or --dry-run to list them")

    result = reap_lib(app.config, cloud, dry_run=dry_run, confirm=confirm, note=app.note)
    if app.json:
        app.emit_json({"type": "result", "command": "reap", **result.to_dict()})
    else:
        verb = "would remove" if dry_run else "removed"
        for d in result.reaped:
            app.out.print(
                f"{verb} deployment {d['deployment']} ({d['reason']}, at {d['expires_at']}): "
                + (", ".join(f"{r['kind']} {escape(str(r['name']))}" for r in d["removed"]) or "nothing left")
            )
        for d in result.kept:
            app.out.print(f"kept deployment {d['deployment']}: {escape(d['reason'])}")
        for d in result.failed:
            app.err.print(f"[red]not removed:[/] deployment {d['deployment']}: {escape(str(d['error']))}")
        expired = len(result.reaped) + len(result.failed)
        app.out.print(
            f"{len(result.reaped)} expired deployment(s) {verb} on {cloud} at {result.now}"
            if expired
            else f"nothing has expired on {cloud} at {result.now}"
        )
    if result.failed:
        first = result.failed[0]
        raise ReapFailedError(
            f"{len(result.failed)} expired deployment(s) on {cloud} are still there: "
            + ", ".join(d["deployment"] for d in result.failed),
            hint=first.get("hint") or "re-run zenops reap; the error above says what the cloud answered",
            exit_code=int(first["exit_code"]),
        )
