"""What the strategies share: the performance gate of a batch and the end of one (every strategy); the deployment's
cloud servers, the room for new ones, and the way back for the strategies that add servers (surge, blue/green): the
servers they kept serve on, the ones they made are drained, taken out of the gateway and deleted."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from zenops.deployment.rollouts import now
from zenops.errors import ExitCode, ZenopsError

if TYPE_CHECKING:
    from zenops.deployment.rollouts import BatchState
    from zenops.rollout.steps import BatchSteps, Servers


def perf_gate(
    d: BatchSteps,
    i: int,
    batch: BatchState,
    *,
    against: Mapping[str, str] | None = None,
    ready_on_pause: list[str],
) -> None:
    """With the performance gate on: the batch gated (``against`` as :meth:`BatchSteps.gate` takes it) and its
    verdicts decided (a revert or a pause raises); off: nothing."""
    if not d.perf_gate:
        return
    batch.status = "gating"
    d.save()
    with d.phase(batch, "perf gate"):
        verdicts = d.gate(i, batch, against=against)
    d.decide(i, batch, verdicts, ready_on_pause=ready_on_pause)


def batch_done(d: BatchSteps, i: int, batch: BatchState, *, t0: float, hosts: list[str]) -> None:
    """The batch done: its status, end and wall time (since the monotonic ``t0``) saved, the event said."""
    batch.status = "done"
    batch.finished_at = now()
    batch.wall_s = round(time.monotonic() - t0, 1)
    d.save()
    d.event("batch done", batch=i + 1, hosts=hosts, wall_s=batch.wall_s)


def cloud_servers(d: BatchSteps, what: str) -> Servers:
    """The deployment's cloud servers, for a strategy that planned with them; gone from the ledger since, ``what``
    (the surge, the blue/green rollout) cannot go on."""
    servers = d.servers()
    if servers is None:
        raise ZenopsError(
            f"the cloud deployment is no longer in this controller's ledger: {what} cannot go on",
            hint="`zenops status` lists the deployments; `zenops rollout --abort` sends the fleet back",
        )
    return servers


def room_for(servers: Servers, more: int, *, what: str, hint: str) -> None:
    """Room in the project for ``more`` servers of the deployment's flavor, checked before anything changes; a quota
    refusal says it is ``what`` (the surge's new server...) there is no room for, and ``hint`` the ways out."""
    try:
        servers.preflight(more)
    except ZenopsError as e:
        if e.exit_code != ExitCode.QUOTA:
            raise
        raise type(e)(f"no room for {what}: {e.message}", hint=hint) from e


def retire_new(d: BatchSteps, servers: Servers, batch: BatchState, *, keep: list[str], gone: list[str]) -> None:
    """``keep``'s servers back in rotation (if a step had drained them), ``gone``'s drained if in rotation (their
    in-flight requests finish first), out of the state and the gateway, then deleted; the batch is reverted."""
    drained_keep = set(d.names_on(keep)) & set(d.state.drained)
    if drained_keep:
        d.ready(sorted(drained_keep))
    in_rotation = [n for n in d.names_on(gone) if n not in d.state.drained]
    if in_rotation:
        d.drain(in_rotation)
    for name in gone:
        d.state.served.pop(name, None)
    d.follow([])
    d.state.drained = [n for n in d.state.drained if not any(n.startswith(f"{g}-") for g in gone)]
    d.save()
    for name in gone:
        servers.retire(name)
    batch.status = "reverted"
    d.save()
