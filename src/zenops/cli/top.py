"""`zenops top`: a live view of a deployment's vLLM instances, one row each: requests running and waiting, KV cache
use, generated tok/s, TTFT and inter-token p50/p95 over the last minute, preemptions, the host's CPU and memory.

Library: zenops.metrics (``probe.snapshot``: each host read over SSH, ``top.rows``: the arithmetic). Playbook: none.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import click

from zenops.cli.context import get_app
from zenops.cli.options import DurationType, cloud_option, deployment_option, inventory_option, json_option

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
@inventory_option
@deployment_option
@cloud_option
@click.option(
    "--interval", type=DurationType(minimum=1), default="5s", show_default=True, help="Seconds between reads."
)
@click.option(
    "--window", type=DurationType(minimum=1), default="60s", show_default=True, help="Percentiles over this long."
)
@json_option
@click.pass_context
def top(
    ctx: click.Context, inventory: Path | None, deployment: str | None, cloud: str | None, interval: int, window: int
) -> None:
    """Watch a deployment's vLLM instances live (Ctrl-C ends it); --json prints one snapshot and exits.

    \b
    Each host is read over SSH as `zenops ssh` connects: its instances' /metrics (with the deployment's API key, on
    the program's stdin) and its /proc counters. No port opens for it. Rates and CPU are between the last two reads,
    TTFT and inter-token percentiles over --window (from vLLM's histograms). --json reads twice, --interval apart.

    \b
      zenops top --deployment fleet
      zenops top -i hosts.yml --interval 2 --json
    """
    from zenops.deployment.access import hosts_from, read_inventory  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415
    from zenops.errors import (  # noqa: PLC0415
        ExitCode,
        NoServerError,
        UsageError,
        ZenopsError,
    )
    from zenops.metrics import probe  # noqa: PLC0415
    from zenops.metrics import top as top_lib  # noqa: PLC0415
    from zenops.target import resolve_target  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="top")
    record = Store(app.config, target.inventory).record()
    if record is None or not record.endpoints:
        raise NoServerError(
            f"zenops has not started servers for {target.inventory}: nothing to watch",
            hint=f"start them with `zenops up --inventory {target.inventory} --model MODEL`",
        )
    if not record.api_key_file or not Path(record.api_key_file).is_file():
        raise UsageError(
            f"the deployment's API key file {record.api_key_file or '(none recorded)'} is not there: its servers' "
            "/metrics cannot be read",
            hint=f"start them again with `zenops up --inventory {target.inventory} --model ...` (a new key)",
        )
    hosts = hosts_from(read_inventory(target.inventory), app.config.ssh)
    instances = probe.instances_of(record.endpoints)
    key_file = Path(record.api_key_file)
    history: deque[dict[str, Any]] = deque(maxlen=max(3, window // interval + 2))

    def read() -> list[top_lib.Row]:
        history.append(probe.snapshot(hosts, instances, key_file))
        return top_lib.rows(list(history), instances, window)

    if app.json:
        read()
        time.sleep(interval)
        rows = read()
        app.emit_json(
            {"type": "result", "command": "top", "inventory": str(target.inventory), "model": record.model,
             "interval_s": interval, "window_s": window, "instances": [r.to_dict() for r in rows]}
        )  # fmt: skip
        if rows and all(r.error for r in rows):
            unread = ZenopsError(f"no instance could be read: {rows[0].error}", hint="check `zenops ssh` to the hosts")
            unread.exit_code = ExitCode.UNREACHABLE
            raise unread
        return
    from rich.live import Live  # noqa: PLC0415

    try:
        with Live(_table(record.model, read(), interval), console=app.out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(_table(record.model, read(), interval), refresh=True)
    except KeyboardInterrupt:
        return


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:.1f}"
    return str(value)


def _table(model: str | None, rows: list[Any], interval: int) -> Any:
    from rich.markup import escape  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"{escape(model or '?')}: every {interval}s, Ctrl-C to leave", title_justify="left")
    for _key, title in COLUMNS:
        table.add_column(title, justify="left" if _key == "instance" else "right")
    for r in rows:
        name = f"{r.host}/{r.instance} :{r.port}"
        if r.error:
            table.add_row(escape(name), f"[red]{escape(r.error)}[/]", *[""] * (len(COLUMNS) - 2))
            continue
        table.add_row(escape(name), *[_fmt(getattr(r, key)) for key, _t in COLUMNS[1:]])
    return table
