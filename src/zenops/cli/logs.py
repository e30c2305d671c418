"""`zenops logs`: the logs of a deployment's vLLM containers (each line prefixed with host/instance) or its gateway,
read over SSH; --follow streams every source at once until Ctrl-C.

Library: zenops.deployment.access (``log_sources``, ``hosts_from``). Playbook: none (ssh, docker logs, journalctl).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import click

from zenops.cli.context import App, get_app
from zenops.cli.options import DurationType, deployment_argument, json_option, option


@click.command()
@deployment_argument
@option("inventory", "logs")
@option("deployment", "logs")
@option("cloud", "logs")
@option("limit", "logs")
@click.option("--instance", type=click.IntRange(min=0), metavar="N", help="Only instance N (every host, or --limit).")
@option("through_gateway", "logs")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming new lines until Ctrl-C.")
@click.option("--since", type=DurationType(), metavar="DURATION", help="Only lines of the last DURATION (90s, 1h30m).")
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N lines of each source.")
@json_option
@click.pass_context
def logs(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    limit: str | None,
    instance: int | None,
    through_gateway: bool,
    follow: bool,
    since: int | None,
    tail: int | None,
) -> None:
    """Print the logs of a deployment's vLLM servers (every instance by default), or of its gateway.

    \b
    Each line is prefixed with its source, <host>/<instance> or <host>/gateway, and Docker's timestamp. Sources are
    printed one after another, or with --follow streamed together until Ctrl-C. --json: one {"type": "log"} object
    per line.

    \b
      zenops logs fleet --since 10m                          every server's last ten minutes (a deployment)
      zenops logs -i hosts.yml --limit h1 --instance 0 -f    follow one server
      zenops logs -i hosts.yml --through-gateway --tail 50   the gateway (HAProxy)
    """
    from zenops.deployment.access import hosts_from, log_sources, read_inventory  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415
    from zenops.errors import NoServerError  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="logs")
    record = Store(app.config, target.hosts).record()
    if record is None:
        raise NoServerError(
            f"zenops has not started servers for {target.hosts}: no logs to read",
            hint=f"start them with `zenops up --inventory {target.hosts} --model MODEL`",
        )
    sources = log_sources(record, host=limit, instance=instance, gateway=through_gateway)
    hosts = hosts_from(read_inventory(target.hosts), app.config.ssh)
    jobs = []
    for s in sources:
        access = hosts.get(s.host)
        if access is None:
            raise NoServerError(f"{s.host} serves but is not in {target.hosts} any more")
        cmd = s.command(follow=follow, since_s=since, tail=tail, sudo=access.become)
        jobs.append((s.label, access.run_argv(cmd, batch=True)))
    failed = _stream(app, jobs) if follow else [label for label, argv in jobs if not _print(app, label, argv)]
    if failed:
        from zenops.errors import ZenopsError  # noqa: PLC0415

        raise ZenopsError(f"could not read the logs of {', '.join(failed)} (see above)")


def _emit(app: App, label: str, line: str, lock: threading.Lock) -> None:
    line = line.rstrip("\n")
    with lock:
        if app.json:
            app.emit_json({"type": "log", "source": label, "line": line})
        else:
            click.echo(f"{label} | {line}")


def _print(app: App, label: str, argv: list[str]) -> bool:
    """One source, to its end; whether it could be read."""
    return not _stream(app, [(label, argv)])


def _stream(app: App, jobs: list[tuple[str, list[str]]]) -> list[str]:
    """Every source at once, lines as they come, until they end (or Ctrl-C); the labels of those that failed."""
    lock = threading.Lock()
    procs = [
        (label, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"))
        for label, argv in jobs
    ]

    def pump(label: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            _emit(app, label, line, lock)

    threads = [threading.Thread(target=pump, args=p, daemon=True) for p in procs]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
        return [label for label, proc in procs if proc.wait() != 0]
    except KeyboardInterrupt:
        for _label, proc in procs:
            proc.terminate()
        raise
