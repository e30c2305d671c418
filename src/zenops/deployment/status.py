"""One deployment's serving state, for `zenops status -i`: what serves (model, servers), each service's state read
live (the gateway: every backend's UP/DRAIN/DOWN and in-flight requests), who holds its lock, the rollout in progress
and the last rollout events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.config import Config
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.identity import lock_holder, of_inventory
from zenops.deployment.rollouts import RolloutState
from zenops.deployment.store import Store


def current_rollout(store: Store) -> RolloutState | None:
    """The rollout in progress or the last one, for showing: a damaged state file is warned about (naming it) and
    shows as none."""
    try:
        return store.rollouts.load()
    except statefile.DamagedStateError as e:
        statefile.warn_damaged(e)
        return None


def serving_summary(config: Config, inventory: Path | str | None) -> dict[str, Any] | None:
    """What a deployment serves, from its serving record (no host is asked): ``model``, ``endpoint`` (the gateway's
    URL, else the one server's, else None), ``instances``, ``api_key_file``; None when zenops serves nothing there.
    A damaged record is warned about (naming it) and reads as None."""
    if not inventory:
        return None
    try:
        record = Store(config, Path(inventory)).record()
    except statefile.DamagedStateError as e:
        statefile.warn_damaged(e)
        return None
    if record is None:
        return None
    urls = [str(ep.get("url")) for eps in record.endpoints.values() for ep in eps if ep.get("url")]
    endpoint = (record.gateway or {}).get("url") or (urls[0] if len(urls) == 1 else None)
    return {
        "model": record.model,
        "endpoint": endpoint,
        "instances": sum(len(v) for v in record.endpoints.values()),
        # the file the servers' key is in (a client reads it; the key itself is never printed)
        "api_key_file": record.api_key_file,
    }


def serving_status(ctx: RunContext, inventory: Path, *, last: int = 10) -> dict[str, Any]:
    """The deployment on ``inventory``: ``serving`` (model, endpoints; None: zenops serves nothing there),
    ``services`` (name -> {state, live | error}), ``gateway``/``backends``/``gateway_error`` (the gateway's, as
    before services), ``lock``, ``rollout`` (without its bulky snapshots) and the ``last`` rollout ``history``
    events."""
    store = Store(ctx.config, inventory)
    try:
        record = store.record()
    except statefile.DamagedStateError as e:  # said (naming the file); the lock and the rollout still show
        statefile.warn_damaged(e)
        record = None
    out: dict[str, Any] = {"inventory": str(inventory), "serving": None, "services": {}}
    out.update(gateway=None, backends=[])
    if record is not None:
        n = sum(len(v) for v in record.endpoints.values())
        out["serving"] = {
            "model": record.model,
            "endpoints": record.endpoints,
            "servers": n,
            "endpoint": (record.gateway or {}).get("url"),
            "updated_at": record.updated_at,
        }
        out["services"] = services.status(ctx.quiet(), inventory, record.services)
        gw = out["services"].get("gateway")
        if gw:
            out["gateway"] = gw["state"]
            out["backends"] = (gw.get("live") or {}).get("backends") or []
            if gw.get("error"):
                out["gateway_error"] = gw["error"]
    out["lock"] = lock_holder(ctx.config, of_inventory(ctx.config, inventory))
    state = current_rollout(store)
    out["rollout"] = {k: v for k, v in state.to_dict().items() if k not in ("from_record", "served")} if state else None
    out["history"] = store.rollouts.history(last) if last else []
    return out
