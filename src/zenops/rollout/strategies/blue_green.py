"""Blue/green: a cloud deployment (`zenops up --cloud`, its gateway on a server of its own) gets a whole new set of
servers, as many as it has; the new release goes on them and passes the gates (each new server against an old one's
baseline, the old one measured at the same time as its control) while the old set serves on. Then the gateway
switches at once: the new set in rotation, the whole old set drained in one step (its in-flight requests finish),
the gateway's backends the new set only; then the old set is deleted. Each step is recorded before it starts
(``BlueGreenState``): a re-run goes on from the first step not done; once the switch began it only finishes (no way
back: the old set is being deleted)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from zenops.deployment.rollouts import BatchState, now
from zenops.errors import UsageError
from zenops.rollout.strategies._shared import batch_done, cloud_servers, perf_gate, retire_new, room_for

if TYPE_CHECKING:
    from zenops.rollout.steps import BatchSteps


class BlueGreenState:
    """A blue/green batch's state, typed, over the dict the ledger keeps under "blue-green"
    (``BatchState.strategy_state``): every change is in the state the driver saves next."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._d = data

    @classmethod
    def initial(cls, old: list[str]) -> dict[str, Any]:
        return {"old": sorted(old), "new": {}, "retiring": False, "deleted": []}

    @classmethod
    def of(cls, batch: BatchState) -> BlueGreenState:
        return cls(batch.strategy_state)

    @property
    def old(self) -> list[str]:
        """The old set (blue): the servers that served when the rollout began."""
        return [str(h) for h in self._d["old"]]

    @property
    def new(self) -> dict[str, str | None]:
        """The new set (green): server -> its fixed address; {} until made."""
        return {str(k): (str(v) if v else None) for k, v in (self._d.get("new") or {}).items()}

    @new.setter
    def new(self, value: dict[str, str | None]) -> None:
        self._d["new"] = dict(value)

    @property
    def retiring(self) -> bool:
        """The gateway switched to the new set: from here on the old set goes, whatever happens."""
        return bool(self._d.get("retiring"))

    @retiring.setter
    def retiring(self, value: bool) -> None:
        self._d["retiring"] = value

    @property
    def deleted(self) -> list[str]:
        """The old servers deleted so far."""
        return [str(h) for h in self._d.get("deleted") or []]

    def delete(self, name: str) -> None:
        self._d["deleted"] = sorted({*self.deleted, name})


class BlueGreen:
    name: ClassVar[str] = "blue-green"

    def __init__(self, steps: BatchSteps) -> None:
        self.d = steps

    def plan(self, hosts: list[str]) -> list[BatchState]:
        """Only a cloud deployment whose gateway has a server of its own (the endpoint outlives the old set), every
        server of it changing, with room for as many servers more. Otherwise refused, naming the way out. One batch:
        the whole fleet."""
        d = self.d
        servers = d.servers()
        if servers is None:
            raise UsageError(
                "a blue/green rollout makes a new set of cloud servers: this deployment is not a cloud deployment of "
                "this controller (`zenops up --cloud`)",
                hint="roll it in place (--strategy in-place, the default for several hosts)",
            )
        dep = servers.entry
        if not dep.gateway_servers:
            raise UsageError(
                f"deployment '{dep.name}' has its gateway on one of its servers: a blue/green rollout deletes every "
                "server it has, and the endpoint must outlive them",
                hint=f"give the gateway a server of its own: zenops up --cloud {dep.cloud} --deployment {dep.name} "
                f"--flavor {dep.flavor} --model ... --gateway-flavor SMALL_FLAVOR (same options as before); or roll "
                "in place (--strategy in-place)",
            )
        serving = sorted(str(s["name"]) for s in dep.servers)
        if sorted(hosts) != serving:
            raise UsageError(
                f"deployment '{dep.name}' has the servers {', '.join(serving) or 'none'} and the rollout changes "
                f"{', '.join(sorted(hosts)) or 'none'}: blue/green replaces the whole set of servers at once",
                hint="a rollout left new servers (`zenops rollout --abort` deletes them), `zenops up` did not "
                "finish (re-run it), or roll in place (--strategy in-place)",
            )
        room_for(
            servers,
            len(serving),
            what=f"the blue/green rollout's {len(serving)} new server(s)",
            hint="free resources (zenops status) or raise the project's quota, or roll in place (--strategy in-place)",
        )
        price = dep.price_per_hour
        d.note(
            f"blue/green: {len(serving)} new {dep.flavor} server(s) serve the new release; once they passed the "
            f"gates the gateway switches to them and {', '.join(serving)} are deleted"
            + (f" (${price * len(serving):g}/h more meanwhile)" if price is not None else "")
        )
        return [BatchState(hosts=serving, strategy=self.name, strategy_state=BlueGreenState.initial(serving))]

    def run(self, i: int, batch: BatchState) -> None:
        """The new set (up --count 2N) -> the new release on it -> health gate -> performance gate -> the switch
        -> the old set deleted."""
        d = self.d
        st = BlueGreenState.of(batch)
        old = st.old
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        d.note(f"blue/green: a new set of {len(old)} server(s) for the new release, then {', '.join(old)} go")
        servers = cloud_servers(d, "the blue/green rollout")
        if not st.new:
            batch.status = "provisioning"
            d.save()
            with d.phase(batch, "new servers"):
                st.new = servers.add(old, len(old))
            d.save()
            d.event("blue-green servers", batch=i + 1, servers=sorted(st.new))
            d.note(f"new servers {', '.join(sorted(st.new))} are up ({time.monotonic() - t0:.0f}s)")
        new = sorted(st.new)
        if not st.retiring:
            self._gates_and_switch(i, batch, st, new)
        for name in old:
            if name in st.deleted:
                continue
            with d.phase(batch, "old servers deleted"):
                servers.retire(name)
            st.delete(name)
            d.save()
            d.event("blue-green retired", batch=i + 1, server=name)
        d.follow([])  # the gateway balances the new set (done at the switch, unless an interruption came between)
        d.note(f"{', '.join(old)} drained and deleted")
        batch_done(d, i, batch, t0=t0, hosts=new)
        d.note(f"blue/green done in {batch.wall_s:.0f}s: {', '.join(new)} serve the new release")

    def _gates_and_switch(self, i: int, batch: BatchState, st: BlueGreenState, new: list[str]) -> None:
        """The new release on the new set, its gates, then the switch: the new set in rotation, the old set drained
        at once and out of the gateway."""
        d = self.d
        old = st.old
        batch.status = "replacing"
        d.save()
        with d.phase(batch, "replace"):
            d.serve(i, batch, new)
        perf_gate(d, i, batch, against=dict(zip(new, old, strict=True)), ready_on_pause=[])
        batch.status = "switching"
        d.save()
        with d.phase(batch, "switch"):
            d.ready(d.follow(new))  # the new set in the gateway, in rotation once its health checks pass
            d.drain(d.names_on(old))  # the whole old set at once: every new request goes to the new set
            st.retiring = True  # from here on the old set goes, whatever happens: no way back to it
            state = d.state
            state.retired = sorted(set(state.retired) | set(old))
            # ... and it stays out: an interrupted run must not put a server that is being deleted back in rotation
            state.drained = [n for n in state.drained if not any(n.startswith(f"{h}-") for h in old)]
            d.save()
            d.follow([])  # the gateway's backends: the new set only
        d.event("blue-green switched", batch=i + 1, to=new)

    def revert(self, batch: BatchState) -> None:
        """The old set serves on (it was never drained before the new one passed, or is put back first); the new
        set is drained if it was in rotation, taken out of the gateway and deleted: every serving server of the
        deployment but the old set, as the cloud, the ledger and the state know them. Refused once the switch
        began: the rollout can only finish then."""
        d = self.d
        st = BlueGreenState.of(batch)
        old = st.old
        if st.retiring:
            raise UsageError(
                f"the blue/green rollout switched to the new set and is deleting {', '.join(old)}: there is no "
                "previous set to go back to",
                hint="re-run the same `zenops rollout` to finish it; then roll the previous release out with "
                "`zenops rollout --strategy blue-green`",
            )
        servers = cloud_servers(d, "the blue/green rollout")
        gone = sorted((set(servers.in_cloud()) | set(st.new)) - set(old))
        d.note(f"reverting the blue/green rollout: {', '.join(old)} serve on; {', '.join(gone) or 'no new server'} go")
        retire_new(d, servers, batch, keep=old, gone=gone)

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        return [
            f"blue/green: {len(batch.hosts)} new server(s) serve the new release and pass the gates, then the gateway "
            f"switches to them at once and {', '.join(batch.hosts)} are drained and deleted"
        ]

    @staticmethod
    def addresses(batch: BatchState) -> dict[str, str]:
        return {k: v for k, v in BlueGreenState.of(batch).new.items() if v}

    @staticmethod
    def creates(batch: BatchState) -> int:
        st = BlueGreenState.of(batch)
        return 0 if st.new else len(st.old)


STRATEGY = BlueGreen
