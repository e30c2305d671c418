"""What the strategies that add servers (surge, blue/green) share when they go back: the servers they kept serve on,
the ones they made are drained, taken out of the gateway and deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zenops.deployment.rollouts import BatchState
    from zenops.rollout.steps import BatchSteps, Servers


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
