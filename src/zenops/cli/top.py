"""`zenops top`: a live view of a deployment's vLLM instances, one row each: requests running and waiting, KV cache
use, generated tok/s, TTFT and inter-token p50/p95 over the last minute, preemptions, the host's CPU and memory.

Library: zenops.metrics (``prom.read``: the deployment's Prometheus; ``probe.snapshot``: each host read over SSH,
``top.rows``: the arithmetic). Playbook: none.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from zenops.cli.context import get_app
from zenops.cli.options import DurationType, deployment_argument, json_option, option

SOURCES = ("auto", "prometheus", "direct")

COLUMNS = (
    ("instance", "server"),
    ("running", "run"),
    ("waiting", "wait"),
    ("kv_cache_pct", "KV %"),
    ("generated_tok_s", "gen tok/s"),
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p95_ms", "p95"),
    ("itl_p50_ms", "ITL p50 ms"),
    ("itl_p95_ms", "p95"),
    ("preemptions", "preempt"),
    ("host_cpu_pct", "host CPU %"),
    ("host_mem_pct", "mem %"),
)


@click.command()
@deployment_argument
@option("inventory", "top")
@option("deployment", "top")
@option("cloud", "top")
@click.option(
    "--interval", type=DurationType(minimum=1), default="5s", show_default=True, help="Seconds between reads."
)
@click.option(
    "--window", type=DurationType(minimum=1), default="60s", show_default=True, help="Percentiles over this long."
)
@click.option(
    "--source",
    type=click.Choice(SOURCES),
    default="auto",
    show_default=True,
    help="prometheus: the deployment's Prometheus (`up --metrics on`); direct: each instance's /metrics; auto: "
    "Prometheus where the deployment has it.",
)
@json_option
@click.pass_context
def top(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    interval: int,
    window: int,
    source: str,
) -> None:
    """Watch a deployment's vLLM instances live (Ctrl-C ends it); --json prints one snapshot and exits.

    \b
    Where the deployment has metrics (`up --metrics on`), its Prometheus is asked on its host over SSH (it listens
    on that host's loopback only): rates over the last 30 s, TTFT and inter-token percentiles over --window, the
    hosts' CPU and memory from node_exporter; --json asks once.
    Otherwise (or --source direct) each host is read over SSH as `zenops ssh` connects: its instances' /metrics (with
    the deployment's API key, on the program's stdin) and its /proc counters. No port opens for it. Rates and CPU are
    between the last two reads, percentiles over --window; --json reads twice, --interval apart.

    \b
      zenops top fleet                                (the same as --deployment fleet)
      zenops top -i hosts.yml --interval 2 --json
    """
    from zenops.deployment.access import hosts_from, read_inventory  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415
    from zenops.errors import NoServerError, UsageError  # noqa: PLC0415
    from zenops.metrics import probe  # noqa: PLC0415
    from zenops.metrics import top as top_lib  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="top")
    record = Store(app.config, target.hosts).record()
    if record is None or not record.endpoints:
        raise NoServerError(
            f"zenops has not started servers for {target.hosts}: nothing to watch",
            hint=f"start them with `zenops up --inventory {target.hosts} --model MODEL`",
        )
    metrics_state = record.services.get("metrics")
    if source == "prometheus" and not metrics_state:
        raise UsageError(
            f"the deployment of {target.hosts} has no Prometheus",
            hint=f"add it with `zenops up --inventory {target.hosts} --model {record.model} --metrics on`, or "
            "read the instances with --source direct",
        )
    instances = probe.instances_of(record.endpoints)
    if metrics_state and source != "direct":
        from zenops.deployment.services.metrics import Metrics  # noqa: PLC0415
        from zenops.metrics import prom  # noqa: PLC0415

        m = Metrics.from_dict(metrics_state)
        prom_inventory = Path(m.inventory) if m.own_server else target.hosts
        access = hosts_from(read_inventory(prom_inventory), app.config.ssh).get(m.host)
        if access is None:
            raise UsageError(f"Prometheus's host {m.host} is not in {prom_inventory}", hint="try --source direct")

        def read_prom() -> list[top_lib.Row]:
            return prom.read(access, m.url, instances, window)

        _show(app, record, target.hosts, read_prom, interval, window, "prometheus", once=True)
        return
    if not record.api_key_file or not Path(record.api_key_file).is_file():
        raise UsageError(
            f"the deployment's API key file {record.api_key_file or '(none recorded)'} is not there: its servers' "
            "/metrics cannot be read",
            hint=f"start them again with `zenops up --inventory {target.hosts} --model ...` (a new key)",
        )
    hosts = hosts_from(read_inventory(target.hosts), app.config.ssh)
    key_file = Path(record.api_key_file)
    history: deque[dict[str, Any]] = deque(maxlen=max(3, window // interval + 2))

    def read() -> list[top_lib.Row]:
        history.append(probe.snapshot(hosts, instances, key_file))
        return top_lib.rows(list(history), instances, window)

    _show(app, record, target.hosts, read, interval, window, "direct", once=False)


def _show(
    app: Any,
    record: Any,
    inventory: Path,
    read: Callable[[], list[Any]],
    interval: int,
    window: int,
    source: str,
    *,
    once: bool,
) -> None:
    """--json: one snapshot (``once``: one read is enough; else two, --interval apart); else the live table."""
    from zenops.errors import ExitCode, ZenopsError  # noqa: PLC0415

    if app.json:
        if not once:
            read()
            time.sleep(interval)
        rows = read()
        app.emit_json(
            {"type": "result", "command": "top", "inventory": str(inventory), "model": record.model,
             "source": source, "interval_s": interval, "window_s": window, "instances": [r.to_dict() for r in rows]}
        )  # fmt: skip
        if rows and all(r.error for r in rows):
            unread = ZenopsError(f"no instance could be read: {rows[0].error}", hint="check `zenops ssh` to the hosts")
            unread.exit_code = ExitCode.UNREACHABLE
            raise unread
        return
    from rich.live import Live  # noqa: PLC0415

    try:
        with Live(_table(record.model, read(), interval, source), console=app.out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(_table(record.model, read(), interval, source), refresh=True)
    except KeyboardInterrupt:
        return


def _fmt(value: Any) -> str:
    from zenops.cli.text import shown  # noqa: PLC0415

    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.1f}"
    return shown(value)


def _table(model: str | None, rows: list[Any], interval: int, source: str) -> Any:
    from rich.table import Table  # noqa: PLC0415

    from zenops.cli.text import shown  # noqa: PLC0415  (what the hosts and the record say: cleaned, escaped)

    title = f"{shown(model or '?')}: every {interval}s from {source}, Ctrl-C to leave"
    table = Table(title=title, title_justify="left")
    for _key, title in COLUMNS:
        table.add_column(title, justify="left" if _key == "instance" else "right")
    for r in rows:
        name = f"{r.host}/{r.instance} :{r.port}"
        if r.error:
            table.add_row(shown(name), f"[red]{shown(r.error)}[/]", *[""] * (len(COLUMNS) - 2))
            continue
        table.add_row(shown(name), *[_fmt(getattr(r, key)) for key, _t in COLUMNS[1:]])
    return table
