"""In place: the batch's servers are drained in the gateway (their in-flight requests finish), replaced on their own
hosts, gated, and put back in rotation. Its state is the batch's own (``BatchState.status``: draining, replacing,
gating, done), so a re-run redoes an unfinished batch from the top."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from zenops.deployment.rollouts import BatchState, now
from zenops.rollout.strategies._shared import batch_done, perf_gate

if TYPE_CHECKING:
    from zenops.rollout.steps import BatchSteps


class InPlace:
    name: ClassVar[str] = "in-place"

    def __init__(self, steps: BatchSteps) -> None:
        self.d = steps

    def plan(self, hosts: list[str]) -> list[BatchState]:
        return [BatchState(hosts=b, strategy=self.name) for b in self.d.cut(hosts)]

    def run(self, i: int, batch: BatchState) -> None:
        d = self.d
        what = d.label(i)
        d.note(f"{what}: {', '.join(batch.hosts)}")
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        names = d.names_on(batch.hosts)
        batch.status = "draining"
        d.save()
        with d.phase(batch, "drain"):
            d.drain(names)
        batch.status = "replacing"
        d.save()
        with d.phase(batch, "replace"):  # stop the old container, start the new, its health gate
            d.serve(i, batch, batch.hosts)
        with d.phase(batch, "services"):
            new_names = d.follow(batch.hosts)
        perf_gate(d, i, batch, ready_on_pause=new_names)
        with d.phase(batch, "ready"):
            d.ready(new_names)
        batch_done(d, i, batch, t0=t0, hosts=batch.hosts)
        phases = ", ".join(f"{k} {v:.0f}s" for k, v in batch.phases.items())
        d.note(f"{what} done in {batch.wall_s:.0f}s ({phases}): {', '.join(batch.hosts)} serve the new release")

    def revert(self, batch: BatchState) -> None:
        d = self.d
        names = d.names_on(batch.hosts)
        d.note(f"reverting {', '.join(batch.hosts)} to the previous release")
        if not set(names) <= set(d.state.drained):
            d.drain(names)
        d.serve_previous(batch.hosts)
        d.ready(d.follow(batch.hosts))  # the services follow the old servers; back in rotation
        batch.status = "reverted"
        d.save()

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        return []

    @staticmethod
    def addresses(batch: BatchState) -> dict[str, str]:
        return {}

    @staticmethod
    def creates(batch: BatchState) -> int:
        return 0


STRATEGY = InPlace
