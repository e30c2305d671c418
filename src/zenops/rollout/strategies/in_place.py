"""In place: the batch's servers are drained in the gateway (their in-flight requests finish), replaced on their own
hosts, gated, and put back in rotation. Its state is the batch's own (``BatchState.status``: draining, replacing,
gating, done), so a re-run redoes an unfinished batch from the top."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from zenops.deployment.rollouts import BatchState, now
from zenops.errors import RunFailedError
from zenops.rollout.gates import health_verdict

if TYPE_CHECKING:
    from zenops.rollout.run import Rollout


class InPlace:
    name: ClassVar[str] = "in-place"

    def __init__(self, driver: Rollout) -> None:
        self.d = driver

    def run(self, i: int, batch: BatchState) -> None:
        d = self.d
        n = len(d.state.batches)
        what = "canary batch" if i == 0 and d.req.canary and n > 1 else f"batch {i + 1}/{n}"
        d.note(f"{what}: {', '.join(batch.hosts)}")
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        gw = d.gateway()
        names = gw.names_on(batch.hosts) if gw else []
        batch.status = "draining"
        d.save()
        with d.phase(batch, "drain"):
            d.drain(names)
        batch.status = "replacing"
        d.save()
        try:
            with d.phase(batch, "replace"):  # stop the old container, start the new, its health gate
                served = d.serve(d.state.to_request, batch.hosts, min_healthy=d.req.min_healthy)
        except RunFailedError as e:
            d.decide(i, batch, [health_verdict(e, batch.hosts[0])])
        d.keep_served(served)
        with d.phase(batch, "services"):
            new_names = d.update_services(batch.hosts)
        if d.req.perf_gate:
            batch.status = "gating"
            d.save()
            with d.phase(batch, "perf gate"):
                verdicts = d.perf.batch(i, batch)
            d.decide(i, batch, verdicts, ready_on_pause=new_names)
        with d.phase(batch, "ready"):
            d.ready(new_names)
        batch.status = "done"
        batch.finished_at = now()
        batch.wall_s = round(time.monotonic() - t0, 1)
        d.save()
        d.ledger.event(d.state.id, "batch done", batch=i + 1, hosts=batch.hosts, wall_s=batch.wall_s)
        phases = ", ".join(f"{k} {v:.0f}s" for k, v in batch.phases.items())
        d.note(f"{what} done in {batch.wall_s:.0f}s ({phases}): {', '.join(batch.hosts)} serve the new release")

    def revert(self, batch: BatchState) -> None:
        d = self.d
        gw = d.gateway()
        names = gw.names_on(batch.hosts) if gw else []
        d.note(f"reverting {', '.join(batch.hosts)} to the previous release")
        if not set(names) <= set(d.state.drained):
            d.drain(names)
        d.serve(d.state.from_request, batch.hosts, min_healthy=0)
        for host in batch.hosts:
            d.state.served.pop(host, None)
        d.ready(d.update_services(batch.hosts))  # the services follow the old servers; back in rotation
        batch.status = "reverted"
        d.save()

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        return []
