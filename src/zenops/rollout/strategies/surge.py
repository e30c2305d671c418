"""Surge: a one-server cloud deployment (`zenops up --cloud`, its gateway on a server of its own) cannot drain its only
server, so a new server serves the new release, passes the gates (the old one, measured at the same time, is the
control), joins the gateway; then the old one is drained and deleted. Each step is recorded before it starts
(``SurgeState``): a re-run goes on from the first step not done, and once the old server's deletion began it only
finishes it (no way back)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from zenops.deployment.rollouts import BatchState, now
from zenops.errors import UsageError
from zenops.rollout.strategies._shared import batch_done, cloud_servers, perf_gate, retire_new, room_for

if TYPE_CHECKING:
    from zenops.rollout.steps import BatchSteps


class SurgeState:
    """A surge batch's state, typed, over the dict the ledger keeps under "surge" (``BatchState.strategy_state``):
    every change is in the state the driver saves next."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._d = data

    @classmethod
    def new(cls, old: str) -> dict[str, Any]:
        return {"old": old, "new": None, "new_address": None, "retiring": False, "old_retired": False}

    @classmethod
    def of(cls, batch: BatchState) -> SurgeState:
        return cls(batch.strategy_state)

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


class Surge:
    name: ClassVar[str] = "surge"

    def __init__(self, steps: BatchSteps) -> None:
        self.d = steps

    def plan(self, hosts: list[str]) -> list[BatchState]:
        """Whether a one-host deployment can surge, checked before anything changes: only a cloud deployment whose
        gateway has a server of its own (it outlives the old server), with room for one more server. Otherwise
        refused, naming the way out. One batch: the host."""
        d = self.d
        if len(hosts) != 1:
            raise UsageError(
                f"a surge rolls a one-server deployment: this rollout changes {len(hosts)} hosts",
                hint="roll them in place (--strategy in-place, the default for several hosts), or a cloud deployment "
                "blue-green (--strategy blue-green)",
            )
        servers = d.servers()
        if servers is None:
            raise UsageError(
                "a one-host deployment cannot roll without downtime: its only instance would be drained",
                hint="add a host to the inventory first (then `zenops up`), or pass --allow-downtime (a cloud "
                "deployment with its gateway on a server of its own rolls by surging: a new server, then the old "
                "one goes)",
            )
        dep = servers.entry
        if not dep.gateway_servers:
            raise UsageError(
                f"deployment '{dep.name}' has one server and its gateway on it: a rollout surges (a new server, then "
                "the old one goes), and the endpoint must outlive the old server",
                hint=f"give the gateway a server of its own: zenops up --cloud {dep.cloud} --deployment {dep.name} "
                f"--flavor {dep.flavor} --model ... --gateway-flavor SMALL_FLAVOR (same options as before); or pass "
                "--allow-downtime (the only server is replaced in place: clients are refused meanwhile)",
            )
        serving = sorted(str(s["name"]) for s in dep.servers)
        if serving != hosts:
            raise UsageError(
                f"deployment '{dep.name}' has the servers {', '.join(serving) or 'none'} and serves on "
                f"{', '.join(hosts)}: a surge starts from one server that serves",
                hint="a rollout left a surge's server (`zenops rollout --abort` deletes it), or `zenops up` did "
                "not finish (re-run it); a deployment of several servers rolls in place or blue-green "
                "(--strategy)",
            )
        host = hosts[0]
        room_for(
            servers,
            1,
            what="the surge's new server",
            hint="free resources (zenops status) or raise the project's quota, or pass --allow-downtime (the only "
            "server is replaced in place: clients are refused meanwhile)",
        )
        price = dep.price_per_hour
        d.note(
            f"one server: the rollout surges: a new {dep.flavor} server serves the new release, and {host} is "
            "deleted once it passed the gates" + (f" (${price}/h more meanwhile)" if price is not None else "")
        )
        return [BatchState(hosts=[host], strategy=self.name, strategy_state=SurgeState.new(host))]

    def run(self, i: int, batch: BatchState) -> None:
        """New server (up --count 2) -> the new release on it -> health gate -> performance gate -> into the
        gateway -> the old one drained and deleted."""
        d = self.d
        st = SurgeState.of(batch)
        old = st.old
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        d.note(f"surge: a new server for the new release, then {old} goes")
        servers = cloud_servers(d, "the surge")
        if not st.new_server:
            batch.status = "surging"
            d.save()
            with d.phase(batch, "new server"):
                ((name, address),) = servers.add([old], 1).items()
            st.made(name, address)
            d.save()
            d.event("surge server", batch=i + 1, server=name)
            d.note(f"new server {name} is up ({time.monotonic() - t0:.0f}s)")
        new = str(st.new_server)
        if not st.retiring:
            self._gates_and_switch(i, batch, st, new)
        if not st.old_retired:
            with d.phase(batch, "old server deleted"):
                servers.retire(old)
            st.old_retired = True
            d.state.retired = sorted(set(d.state.retired) | {old})
            d.state.drained = [n for n in d.state.drained if not n.startswith(f"{old}-")]
            d.save()
            d.event("surge retired", batch=i + 1, server=old)
            d.note(f"{old} drained and deleted")
        d.follow([])  # the gateway balances what is left: the new server's
        batch_done(d, i, batch, t0=t0, hosts=[new])
        d.note(f"surge done in {batch.wall_s:.0f}s: {new} serves the new release in place of {old}")

    def _gates_and_switch(self, i: int, batch: BatchState, st: SurgeState, new: str) -> None:
        """The new release on the new server, its gates, then the new server in rotation and the old one drained."""
        d = self.d
        old = st.old
        batch.status = "replacing"
        d.save()
        with d.phase(batch, "replace"):
            d.serve(i, batch, [new])
        perf_gate(d, i, batch, against={new: old}, ready_on_pause=[])
        batch.status = "switching"
        d.save()
        with d.phase(batch, "switch"):
            d.ready(d.follow([new]))  # in rotation once its health checks pass
            d.drain(d.names_on([old]))
        st.retiring = True  # from here on the old server goes, whatever happens: no way back to it
        # ... and it stays drained: an interrupted run must not put a server that is being deleted back in rotation
        d.state.drained = [n for n in d.state.drained if not n.startswith(f"{old}-")]
        d.save()

    def revert(self, batch: BatchState) -> None:
        """The old server serves on (it was never drained before the new one passed, or is put back first); the new
        one is drained if it was in rotation, taken out of the gateway and deleted: every serving server of the
        deployment but the old one, as the cloud, the ledger and the state know them. Refused once the old server's
        deletion began: the surge can only finish then."""
        d = self.d
        st = SurgeState.of(batch)
        old = st.old
        if st.retiring or st.old_retired:
            raise UsageError(
                f"the surge is deleting or has deleted {old}: there is no previous server to go back to",
                hint="re-run the same `zenops rollout` to finish it; then roll the previous release out with "
                "`zenops rollout` (it surges again)",
            )
        servers = cloud_servers(d, "the surge")
        extra = set(servers.in_cloud())
        if st.new_server:
            extra.add(st.new_server)
        extra.discard(old)
        gone = sorted(extra)
        d.note(f"reverting the surge: {old} serves on; {', '.join(gone) or 'no new server'} goes")
        retire_new(d, servers, batch, keep=[old], gone=gone)

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        return [
            f"surge: a new server serves the new release and passes the gates, then {batch.hosts[0]} is drained and "
            "deleted"
        ]

    @staticmethod
    def addresses(batch: BatchState) -> dict[str, str]:
        st = SurgeState.of(batch)
        return {st.new_server: st.new_address} if st.new_server and st.new_address else {}

    @staticmethod
    def creates(batch: BatchState) -> int:
        return 0 if SurgeState.of(batch).new_server else 1


STRATEGY = Surge
