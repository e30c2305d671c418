"""Surge: a one-server cloud deployment (`zenops up --cloud`, its gateway on a server of its own) cannot drain its only
server, so a new server serves the new release, passes the gates (the old one, measured at the same time, is the
control), joins the gateway; then the old one is drained and deleted. Each step is recorded before it starts
(``SurgeState``): a re-run goes on from the first step not done, and once the old server's deletion began it only
finishes it (no way back)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from zenops.deployment.rollouts import BatchState, now
from zenops.errors import RunFailedError, UsageError, ZenopsError
from zenops.rollout.gates import health_verdict

if TYPE_CHECKING:
    from zenops.rollout.run import Rollout


class SurgeState:
    """A surge batch's state, typed, over the dict the ledger keeps (``BatchState.surge``): every change is in the
    state the driver saves next."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._d = data

    @classmethod
    def new(cls, old: str) -> dict[str, Any]:
        return {"old": old, "new": None, "new_address": None, "retiring": False, "old_retired": False}

    @classmethod
    def of(cls, batch: BatchState) -> SurgeState:
        if batch.surge is None:
            batch.surge = {}
        return cls(batch.surge)

    @property
    def old(self) -> str:
        return str(self._d["old"])

    @property
    def new_server(self) -> str | None:
        value = self._d.get("new")
        return str(value) if value else None

    @property
    def new_address(self) -> str | None:
        value = self._d.get("new_address")
        return str(value) if value else None

    def made(self, name: str, address: str | None) -> None:
        self._d["new"], self._d["new_address"] = name, address

    @property
    def retiring(self) -> bool:
        """The old server is drained for good: from here on it goes, whatever happens."""
        return bool(self._d.get("retiring"))

    @retiring.setter
    def retiring(self, value: bool) -> None:
        self._d["retiring"] = value

    @property
    def old_retired(self) -> bool:
        return bool(self._d.get("old_retired"))

    @old_retired.setter
    def old_retired(self, value: bool) -> None:
        self._d["old_retired"] = value


def surge_addresses(batches: list[BatchState]) -> dict[str, str]:
    """The fixed address of each surge's new server (the serving record has them once the rollout finished)."""
    out = {}
    for b in batches:
        if b.strategy == Surge.name and b.surge:
            s = SurgeState(b.surge)
            if s.new_server and s.new_address:
                out[s.new_server] = s.new_address
    return out


class Surge:
    name: ClassVar[str] = "surge"

    def __init__(self, driver: Rollout) -> None:
        self.d = driver

    @staticmethod
    def plan(driver: Rollout, host: str) -> dict[str, Any]:
        """Whether a one-host deployment can surge, checked before anything changes: only a cloud deployment whose
        gateway has a server of its own (it outlives the old server), with room for one more server. Otherwise
        refused, naming the way out. Returns the batch's initial state."""
        from zenops.cloud.errors import QuotaExceededError  # noqa: PLC0415
        from zenops.deployment import surge as cloud_surge  # noqa: PLC0415

        dep = driver.store.cloud_entry()
        if dep is None:
            raise UsageError(
                "a one-host deployment cannot roll without downtime: its only instance would be drained",
                hint="add a host to the inventory first (then `zenops up`), or pass --allow-downtime (a cloud "
                "deployment with its gateway on a server of its own rolls by surging: a new server, then the old "
                "one goes)",
            )
        if not dep.gateway_servers:
            raise UsageError(
                f"deployment '{dep.name}' has one server and its gateway on it: a rollout surges (a new server, then "
                "the old one goes), and the endpoint must outlive the old server",
                hint=f"give the gateway a server of its own: zenops up --cloud {dep.cloud} --deployment {dep.name} "
                f"--flavor {dep.flavor} --model ... --gateway-flavor SMALL_FLAVOR (same options as before); or pass "
                "--allow-downtime (the only server is replaced in place: clients are refused meanwhile)",
            )
        serving = sorted(str(s["name"]) for s in dep.servers)
        if serving != [host]:
            raise UsageError(
                f"deployment '{dep.name}' has the servers {', '.join(serving) or 'none'} and serves on {host}: "
                "a surge starts from one server that serves",
                hint="a rollout left a surge's server (`zenops rollout --abort` deletes it), or `zenops up` did "
                "not finish (re-run it)",
            )
        try:
            cloud_surge.surge_preflight(driver.ctx, dep)
        except QuotaExceededError as e:
            raise QuotaExceededError(
                f"no room for the surge's new server: {e.message}",
                hint="free resources (zenops status) or raise the project's quota, or pass --allow-downtime (the "
                "only server is replaced in place: clients are refused meanwhile)",
            ) from e
        price = dep.price_per_hour
        driver.ctx.note(
            f"one server: the rollout surges: a new {dep.flavor} server serves the new release, and {host} is "
            "deleted once it passed the gates" + (f" (${price}/h more meanwhile)" if price is not None else "")
        )
        return SurgeState.new(host)

    def _cloud_deployment(self) -> Any:
        d = self.d
        dep = d.store.cloud_entry()
        if dep is None:
            raise ZenopsError(
                f"the cloud deployment of {d.inventory} is no longer in this controller's ledger: the surge "
                "cannot go on",
                hint="`zenops status` lists the deployments; `zenops rollout --abort` sends the fleet back",
            )
        return dep

    def run(self, i: int, batch: BatchState) -> None:
        """New server (up --count 2) -> the new release on it -> health gate -> performance gate -> into the
        gateway -> the old one drained and deleted."""
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        d = self.d
        st = SurgeState.of(batch)
        old = st.old
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        d.note(f"surge: a new server for the new release, then {old} goes")
        dep = self._cloud_deployment()
        if not st.new_server:
            batch.status = "surging"
            d.save()
            port = int((d.record.gateway or {}).get("port") or 8080)
            with d.phase(batch, "new server"):
                name, dep = Deployment.of_entry(d.ctx.quiet(), dep).add_server(dep, keep=old, gateway_port=port)
            st.made(name, next((s.get("fixed_ip") or s.get("address") for s in dep.servers if s["name"] == name), None))
            d.save()
            d.ledger.event(d.state.id, "surge server", batch=i + 1, server=name)
            d.note(f"new server {name} is up ({time.monotonic() - t0:.0f}s)")
        new = str(st.new_server)
        if not st.retiring:
            self._gates_and_switch(i, batch, st, new)
        if not st.old_retired:
            with d.phase(batch, "old server deleted"):
                gone = self._cloud_deployment()
                Deployment.of_entry(d.ctx.quiet(), gone).remove_server(gone, old)
            st.old_retired = True
            d.state.retired = sorted(set(d.state.retired) | {old})
            d.state.drained = [n for n in d.state.drained if not n.startswith(f"{old}-")]
            d.save()
            d.ledger.event(d.state.id, "surge retired", batch=i + 1, server=old)
            d.note(f"{old} drained and deleted")
        d.update_services([])  # the gateway balances what is left: the new server's
        batch.status = "done"
        batch.finished_at = now()
        batch.wall_s = round(time.monotonic() - t0, 1)
        d.save()
        d.ledger.event(d.state.id, "batch done", batch=i + 1, hosts=[new], wall_s=batch.wall_s)
        d.note(f"surge done in {batch.wall_s:.0f}s: {new} serves the new release in place of {old}")

    def _gates_and_switch(self, i: int, batch: BatchState, st: SurgeState, new: str) -> None:
        """The new release on the new server, its gates, then the new server in rotation and the old one drained."""
        d = self.d
        old = st.old
        batch.status = "replacing"
        d.save()
        try:
            with d.phase(batch, "replace"):
                served = d.serve(d.state.to_request, [new], min_healthy=d.req.min_healthy)
        except RunFailedError as e:
            d.decide(i, batch, [health_verdict(e, new)])
        d.keep_served(served)
        if d.req.perf_gate:
            batch.status = "gating"
            d.save()
            with d.phase(batch, "perf gate"):
                verdicts = d.perf.surge(i, old, new)
            d.decide(i, batch, verdicts, ready_on_pause=[])
        batch.status = "switching"
        d.save()
        with d.phase(batch, "switch"):
            d.ready(d.update_services([new]))  # in rotation once its health checks pass
            gw = d.gateway()
            d.drain(gw.names_on([old]) if gw else [])
        st.retiring = True  # from here on the old server goes, whatever happens: no way back to it
        # ... and it stays drained: an interrupted run must not put a server that is being deleted back in rotation
        d.state.drained = [n for n in d.state.drained if not n.startswith(f"{old}-")]
        d.save()

    def revert(self, batch: BatchState) -> None:
        """The old server serves on (it was never drained before the new one passed, or is put back first); the new
        one is drained if it was in rotation, taken out of the gateway and deleted: every serving server of the
        deployment but the old one, as the cloud, the ledger and the state know them. Refused once the old server's
        deletion began: the surge can only finish then."""
        from zenops.deployment import surge as cloud_surge  # noqa: PLC0415
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        d = self.d
        st = SurgeState.of(batch)
        old = st.old
        if st.retiring or st.old_retired:
            raise UsageError(
                f"the surge is deleting or has deleted {old}: there is no previous server to go back to",
                hint="re-run the same `zenops rollout` to finish it; then roll the previous release out with "
                "`zenops rollout` (it surges again)",
            )
        dep = self._cloud_deployment()
        extra = set(cloud_surge.serving_server_names(dep)) | {str(s["name"]) for s in dep.servers}
        if st.new_server:
            extra.add(st.new_server)
        extra.discard(old)
        gone = sorted(extra)
        d.note(f"reverting the surge: {old} serves on; {', '.join(gone) or 'no new server'} goes")
        gw = d.gateway()
        drained_old = set(gw.names_on([old])) & set(d.state.drained) if gw else set()
        if drained_old:
            d.ready(sorted(drained_old))
        in_rotation = [n for n in (gw.names_on(gone) if gw else []) if n not in d.state.drained]
        if in_rotation:
            d.drain(in_rotation)  # its in-flight requests finish first
        for name in gone:
            d.state.served.pop(name, None)
        d.update_services([])
        d.state.drained = [n for n in d.state.drained if not any(n.startswith(f"{g}-") for g in gone)]
        d.save()
        for name in gone:
            dep = Deployment.of_entry(d.ctx.quiet(), dep).remove_server(dep, name)
        batch.status = "reverted"
        d.save()

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        return [
            f"surge: a new server serves the new release and passes the gates, then {batch.hosts[0]} is drained and "
            "deleted"
        ]
