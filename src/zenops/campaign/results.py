"""What a campaign measured: its report from its state and bench runs, and its one-line progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zenops import catalog
from zenops.campaign.state import CampaignState, Store


def load_report(
    config: Any, store: Store, campaign_id: str, *, max_tpot_ms: float | None = None, api_price: float | None = None
) -> Any:
    """The campaign's report (zenops.campaign.report) from its state and the bench runs of its done cells."""
    from zenops.campaign.report import CellOutcome, build_report  # noqa: PLC0415
    from zenops.errors import NoBenchResultError  # noqa: PLC0415
    from zenops.report import loading  # noqa: PLC0415

    state = store.load(campaign_id)
    cells = [
        CellOutcome(
            key=c.key,
            flavor=c.group,  # the flavor (cloud), or the inventory's name (own hosts)
            model=c.model,
            variant=c.variant,
            status=c.status if c.status in ("done", "failed", "skipped") else "pending",
            reason=c.reason,
            run_dir=c.run_dirs[0] if c.run_dirs else None,  # later repeats: <key>-r2... (matched by the key)
        )
        for c in state.cells.values()
    ]
    run_dirs = [Path(d) for c in state.cells.values() if c.status == "done" for d in c.run_dirs if Path(d).is_dir()]
    flavors = catalog.flavors(config.flavors)
    servers = {s.group: s.price_per_hour for s in state.servers.values()}

    def price_of(name: str) -> float | None:
        if servers.get(name) is not None:
            return servers[name]
        f = flavors.get(name)
        return f.price_per_hour if f else None

    results = []
    if run_dirs:
        try:
            results = list(loading.load(run_dirs, price_of=price_of).results)
        except NoBenchResultError:
            results = []
    return state, build_report(results, cells, max_tpot_ms=max_tpot_ms, api_price=api_price)


def progress_line(state: CampaignState, width: int = 20) -> str:
    counts = state.counts()
    total = sum(counts.values()) or 1
    ended = counts.get("done", 0) + counts.get("failed", 0) + counts.get("skipped", 0)
    filled = int(width * ended / total)
    others = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if k in ("failed", "skipped") and n)
    cap = f" of ${state.max_usd:.2f}" if state.max_usd is not None else ""
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {counts.get('done', 0)}/{total} cells done"
        + (f" ({others})" if others else "")
        + f", ${state.spent():.2f}{cap}"
    )
