"""`zenops status` of cloud deployments: the ledger's entries with their servers' live state and cost."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.cloud.preflight import cost_so_far
from zenops.config import Config
from zenops.deployment.status import serving_summary
from zenops.errors import ZenopsError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    pass


def _age_hours(created_at: str) -> float:
    started = datetime.fromisoformat(created_at)
    return max((datetime.now(UTC) - started).total_seconds() / 3600, 0.0)


def _ssh_answers(address: str | None, timeout: float = 2.0) -> bool:
    if not address:
        return False
    try:
        with socket.create_connection((address, 22), timeout=timeout):
            return True
    except OSError:
        return False


def status(config: Config, cloud: str | None = None) -> list[dict[str, Any]]:
    from zenops.cloud import ops  # noqa: PLC0415

    out = []
    if cloud is not None:
        listed = ledger.listing(config.state_dir)
        ops.check_cloud_name(cloud, [d.cloud for d in listed.deployments] + [c for c, _ in listed.damaged])
    by_cloud: dict[str, list[ledger.Deployment]] = {}
    for d in ledger.all_deployments(config.state_dir, cloud):
        by_cloud.setdefault(d.cloud, []).append(d)
    for c, deps in sorted(by_cloud.items()):
        try:
            conn = ops.connect(c)
            live = {s.id: s for s in conn.compute.servers(details=True)}
            reachable = True
        except ZenopsError:
            live, reachable = {}, False
        for d in deps:
            hours = _age_hours(d.created_at)
            servers = []
            for role, s in [("serving", s) for s in d.servers] + [("gateway", s) for s in d.gateway_servers]:
                srv = live.get(s["id"])
                servers.append(
                    {
                        **s,
                        "role": role,
                        "status": srv.status if srv else ("unknown" if not reachable else "gone"),
                        "ssh": _ssh_answers(s.get("address")),
                        "expires_at": (srv.metadata or {}).get(m.EXPIRES_KEY) if srv else None,
                    }
                )
            out.append(
                {
                    **d.to_dict(),
                    "age_hours": round(hours, 2),
                    "servers": servers,
                    "cost_so_far": cost_so_far(d.cost_per_hour(), 1, hours),
                    "cloud_reachable": reachable,
                    "serving": serving_summary(config, d.inventory),  # model, endpoint, instances (None: nothing)
                }
            )
    return out
