"""`zenops rollout`: change the model, engine or serving settings of a deployment host by host behind its gateway.

For each batch (the canary first): drain its servers in the gateway (in-flight requests finish), replace them
(playbooks/serve.yml on those hosts only, with the health gate and a minimum healthy time), run the performance gate
(a short run of the load client, zenops.bench.loadgen, on the new servers and an untouched control server at the same
time, against the baseline the rollout measured before it changed anything; hosts whose facts show one kernel share a
machine and are measured one after another instead), then put them back. A failed gate sends the failed batch
and every batch already changed back to the previous request through the same drain. The state is in the
deployment's ledger (zenops.deployment.rollouts): a re-run continues; whatever happens, no server stays drained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from zenops import spend
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.identity import inventory_label
from zenops.deployment.rollouts import BatchState, RolloutState, now
from zenops.deployment.store import Store
from zenops.errors import (
    CanceledError,
    NoServerError,
    RolloutGateError,
    RolloutPausedError,
    RunFailedError,
    UsageError,
    ZenopsError,
    in_one_line,
)
from zenops.rollout import strategies
from zenops.rollout.gates import STOP, UNSETTLED, PerfGate, health_verdict
from zenops.rollout.plan import Verdict, make_batches
from zenops.rollout.prepare import (
    CHANGEABLE,
    RolloutRequest,
    changes_dict,
    describe_changes,
    host_changes,
    new_plans,
    new_rollout_id,
    old_request,
    refuse_peer,
    refuse_without_gateway,
    resumed,
    target_request,
)
from zenops.rollout.servers import CloudServers
from zenops.rollout.strategies import strategy_for

if TYPE_CHECKING:
    from zenops.spend import Spend

# the planning's names that others import from here (zenops.rollout, the CLI)
__all__ = ["CHANGEABLE", "Rollout", "RolloutRequest", "RolloutResult", "describe_changes", "old_request", "rollout"]


@dataclass
class RolloutResult:
    state: RolloutState
    batches_planned: list[list[str]]
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The state (without its bulky snapshots), ``batches``: the planned host lists, ``batch_states``: how far
        each got (status, wall time, gate verdicts)."""
        state = {k: v for k, v in self.state.to_dict().items() if k not in ("from_record", "batches")}
        return {
            **state,
            "dry_run": self.dry_run,
            "batches": self.batches_planned,
            "batch_states": [b.to_dict() for b in self.state.batches],
        }


class Rollout:
    """One `zenops rollout` invocation (a new rollout or the resumption of one)."""

    def __init__(self, ctx: RunContext, inventory: Path, req: RolloutRequest) -> None:
        from zenops import serve  # noqa: PLC0415

        self.serve_lib = serve
        self.ctx = ctx
        self.inventory = inventory
        self.req = req
        self.store = Store(ctx.config, inventory)
        # the name the deployment's containers, metrics and results carry (DeploymentId.label of the deployment
        # serving on this inventory), not the name its files are kept under (Store.name)
        self.deployment_label = inventory_label(inventory)
        self.ledger = self.store.rollouts
        self.perf = PerfGate(self)
        record = self.store.record()
        if record is None:
            raise NoServerError(
                f"zenops has not started servers for {inventory}: nothing to roll out",
                hint=f"start them with `zenops up --inventory {inventory} --model MODEL`",
            )
        self.record = record
        unknown = sorted(set(req.changes) - set(CHANGEABLE))
        if unknown:
            raise UsageError(f"a rollout cannot change {', '.join(unknown)}")

    # --- planning (nothing changes) ---------------------------------------------------------------------------

    def gateway(self) -> services.Drainable | None:
        """The service the servers are drained through (the gateway), as the serving record keeps it, with the
        addresses of the servers a strategy made (the record is written at the end)."""
        return services.drainable(self._services(), self._new_addresses())

    def _services(self) -> dict[str, dict[str, Any]]:
        """The deployment's services (zenops.deployment.services) as the rollout applied them, else as recorded."""
        state = getattr(self, "state", None)
        return {k: dict(v) for k, v in ((state.services if state else None) or self.record.services).items()}

    def _new_addresses(self) -> dict[str, str]:
        """The fixed address of each server the strategies made (the record has them once the rollout finished)."""
        state = getattr(self, "state", None)
        return strategies.addresses(state.batches if state else [])

    def prepare(self) -> RolloutState:
        """The state to run: the one in progress (same target: resumed), or a new one, checked and planned before
        any host is touched (refusals: unknown pair, plan refused, no gateway, a batch that would take all)."""
        refuse_peer(self.record.request, self.inventory)
        current = self.ledger.load()
        old = old_request(self.record.request, self.record.compat)
        given = changes_dict(self.req.changes)
        if current is not None and current.active:
            return resumed(self.ctx, current, given, asked=bool(self.req.changes))
        new = target_request(old, given)
        plans = new_plans(self.ctx, self.inventory, sorted(self.record.plans), new, tuned=self.req.tuned_reason)
        changes, hosts = host_changes(self.record.plans, plans, old, new)
        refuse_without_gateway(self.gateway(), self.inventory, allow_downtime=self.req.allow_downtime)
        name = strategies.choose(
            self.req.strategy, hosts, len(self.record.plans), allow_downtime=self.req.allow_downtime
        )
        batches = strategies.get(name)(self).plan(hosts)
        rid = new_rollout_id()
        return RolloutState(
            id=rid,
            deployment=self.deployment_label,
            inventory=str(self.inventory.resolve()),
            from_request=old,
            to_request=new,
            from_record=self.record.to_dict(),
            batches=batches,
            changes=changes,
            run_dir=str((self.req.runs_dir / rid).resolve()),
        )

    def _set_services(self, applied: dict[str, dict[str, Any]]) -> None:
        """The services as applied now: in memory (the serving record written at the end) and in the state, so that
        a re-run or `--abort` after an interruption knows what they follow (what HAProxy balances)."""
        self.record = self.record.with_services(applied)
        self.state.services = {k: dict(v) for k, v in self.record.services.items()}
        self.save()

    # --- the run ----------------------------------------------------------------------------------------------

    def run(self, state: RolloutState) -> RolloutState:
        """The caller holds the deployment's lock (zenops.deployment.identity: a cloud deployment's is the one
        `zenops up --cloud` and `down` take)."""
        self.state = state
        self.ledger.save(state)
        if not any(b.started_at for b in state.batches) and state.status == "running":
            self.ledger.event(
                state.id, "started", to=describe_changes(state.from_request, state.to_request),
                batches=[b.hosts for b in state.batches],
            )  # fmt: skip
        state.status = "running"
        try:
            self._run_batches(state)
        finally:
            self._reconcile_drained()
        return state

    def _run_batches(self, state: RolloutState) -> None:
        self._undrain_leftovers()
        if self.req.perf_gate and not state.baseline:
            busy = self.perf.baseline()
            if busy is not None:
                self._pause_busy(busy, ready=[])
        for i, batch in enumerate(state.batches):
            if batch.status == "done":
                continue
            strategy_for(self, batch).run(i, batch)
        self._finish()

    def note(self, text: str) -> None:
        self.ctx.note(f"rollout: {text}")

    # --- the steps a strategy sees (zenops.rollout.steps.BatchSteps) ---------------------------------------------

    @property
    def perf_gate(self) -> bool:
        return self.req.perf_gate

    def label(self, i: int) -> str:
        n = len(self.state.batches)
        return "canary batch" if i == 0 and self.req.canary and n > 1 else f"batch {i + 1}/{n}"

    def event(self, kind: str, **data: Any) -> None:
        self.ledger.event(self.state.id, kind, **data)

    def cut(self, hosts: list[str]) -> list[list[str]]:
        return make_batches(
            hosts,
            batch=self.req.batch,
            canary=min(self.req.canary, max(len(hosts) - 1, 0)) if len(hosts) > 1 else self.req.canary,
            instances={h: len(self.record.plans[h].get("instances") or []) for h in hosts},
            max_unavailable=self.req.max_unavailable,
            allow_downtime=self.req.allow_downtime or len(hosts) < len(self.record.plans),
        )

    def servers(self) -> CloudServers | None:
        if self.store.cloud_entry() is None:
            return None
        return CloudServers(self.ctx, self.store, gateway_port=services.server_port(self._services()))

    def names_on(self, hosts: list[str]) -> list[str]:
        gw = self.gateway()
        return gw.names_on(hosts) if gw else []

    def serve(self, i: int, batch: BatchState, hosts: list[str]) -> None:
        try:
            served = self.serve_hosts(self.state.to_request, hosts, min_healthy=self.req.min_healthy)
        except RunFailedError as e:
            self.decide(i, batch, [health_verdict(e, hosts[0])])
        self.keep_served(served)

    def serve_previous(self, hosts: list[str]) -> None:
        self.serve_hosts(self.state.from_request, hosts, min_healthy=0)
        for host in hosts:
            self.state.served.pop(host, None)

    def gate(self, i: int, batch: BatchState, against: Mapping[str, str] | None = None) -> list[Verdict]:
        return self.perf.pairs(i, against) if against else self.perf.batch(i, batch)

    @contextlib.contextmanager
    def phase(self, batch: BatchState, name: str) -> Iterator[None]:
        """Time a phase of a batch into its state (what a rollout's time goes on: `zenops status`, the note)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            batch.phases[name] = round(batch.phases.get(name, 0.0) + time.monotonic() - t0, 1)

    def save(self) -> None:
        """The ledger's state, and a copy beside the gates' bench artifacts (<runs-dir>/<rollout id>/rollout.json)
        once that directory exists."""
        self.ledger.save(self.state)
        run_dir = Path(self.state.run_dir)
        if run_dir.is_dir():
            (run_dir / "rollout.json").write_text(json.dumps(self.state.to_dict(), indent=2, sort_keys=True))

    def serve_hosts(self, request: Mapping[str, Any], hosts: list[str], *, min_healthy: int) -> Any:
        """playbooks/serve.yml with ``request`` on these hosts (their health gate), the serving record unchanged."""
        req = self.serve_lib.request_from_dict(request)
        return self.serve_lib.serve_inventory(
            self.ctx.quiet(),
            self.inventory,
            req,
            limit=",".join(hosts),
            record=False,
            gateway=False,
            min_healthy=min_healthy,
            tuned=self.req.tuned_reason if dict(request) == dict(self.state.to_request) else None,  # not a revert
        )

    def drain(self, names: list[str]) -> None:
        gw = self.gateway()
        if gw is None or not names:
            return
        self.state.drained = sorted(set(self.state.drained) | set(names))
        self.save()
        t0 = time.monotonic()
        gw.drain(self.ctx.quiet(), self.inventory, names, timeout=self.req.drain_timeout)
        self.note(f"drained {', '.join(names)} in {time.monotonic() - t0:.0f}s (in-flight requests finished)")

    def ready(self, names: list[str], *, wait: int = 60, ctx: RunContext | None = None) -> None:
        gw = self.gateway()
        if gw is None or not names:
            return
        gw.ready(ctx or self.ctx.quiet(), self.inventory, names, timeout=wait)
        self.state.drained = sorted(set(self.state.drained) - set(names))
        self.save()

    def _undrain_leftovers(self) -> None:
        """A re-run first puts back what an interrupted run left drained (its batch is then redone from the top)."""
        if self.state.drained:
            self.note(f"putting back {', '.join(self.state.drained)} (left drained by an interrupted run)")
            self.ready(list(self.state.drained), wait=0)

    def _reconcile_drained(self) -> None:
        """On every way out (a gate failed, Ctrl-C, an error): servers zenops drained go back in rotation. HAProxy
        sends them requests only while their health checks pass, so a server that is down takes none."""
        if not self.state.drained:
            return
        try:
            self.ready(list(self.state.drained), wait=0, ctx=self.ctx.quiet(cancel=threading.Event()))
            self.note("no server is left drained")
        except (ZenopsError, KeyboardInterrupt) as e:
            self.ctx.warn(
                f"could not put {', '.join(self.state.drained)} back in rotation ({e}); re-run `zenops rollout` "
                "to continue (it puts them back first)"
            )

    def _pause(self, message: str, error: str, hint: str, *, ready: list[str], **event: Any) -> NoReturn:
        """Pause the rollout (exit 16): ``ready`` back in rotation, the state and history say why, a re-run resumes."""
        self.ready(ready)
        self.state.status = "paused"
        self.state.message = message
        self.save()
        self.ledger.event(self.state.id, "paused", **event, reason=message)
        raise RolloutPausedError(error, hint=hint)

    def _pause_busy(self, v: Verdict, *, ready: list[str]) -> NoReturn:
        """The servers did not answer the gate's check in time: live traffic saturates them. Pause with ``ready``
        back in rotation, rather than fail a rollout that cannot measure."""
        detail = "; ".join(v.reasons)
        longer = (
            "raise --max-spread"
            if v.figures.get("gate") == UNSETTLED
            else "give the servers longer with --gate-answer-timeout"
        )
        self._pause(
            f"too busy to measure {v.server}: {detail}",
            f"the fleet is too busy to measure {v.server}: {detail}",
            ("nothing was drained; " if not ready else "the batch serves the new release; ")
            + f"re-run the same `zenops rollout` when the load is lower (it resumes), {longer}, or roll out "
            "without the gate (--no-perf-gate)",
            ready=ready,
            **({"figures": dict(v.figures)} if v.figures else {}),
        )

    def decide(
        self, i: int, batch: BatchState, verdicts: list[Verdict], *, ready_on_pause: list[str] | None = None
    ) -> None:
        """What the gates' verdicts mean for the rollout: the health gate failed (or the old server could not be
        stopped) or the performance gate failed: revert (raises); too busy or too noisy to tell: pause (raises)
        with ``ready_on_pause`` back in rotation; every verdict a pass: go on. The performance gate's verdicts are
        recorded and said."""
        health = [v for v in verdicts if v.figures.get("gate") in ("health", STOP)]
        if health:
            v = health[0]
            self._gate_failed(i, batch, str(v.figures["gate"]), v.server, "; ".join(v.reasons))
        busy = [v for v in verdicts if v.outcome == "busy"]
        if busy:
            self._pause_busy(busy[0], ready=ready_on_pause or [])
        batch.verdicts = [v.to_dict() for v in verdicts]
        self.save()
        for v in verdicts:
            self.note(f"performance gate {v.line()}")
        self.ledger.event(self.state.id, "gate", batch=i + 1, hosts=batch.hosts, verdicts=batch.verdicts)
        failed = [v for v in verdicts if v.outcome == "fail"]
        if failed:
            host = failed[0].server.rsplit("-", 1)[0]
            self._gate_failed(i, batch, "performance", host, "; ".join(v.line() for v in failed))
        unsure = [v for v in verdicts if v.outcome == "inconclusive"]
        if unsure:
            message = "; ".join(v.line() for v in unsure)
            self._pause(
                message,
                f"the performance gate cannot tell on {', '.join(v.server for v in unsure)}: {message}",
                "the batch serves the new release; re-run the same `zenops rollout` to measure again and go on (a "
                "quieter machine, or longer --gate-seconds), or raise --max-spread",
                ready=ready_on_pause or [],
                batch=i + 1,
            )

    def keep_served(self, served: Any) -> None:
        for host, plan in served.plans.items():
            self.state.served[host] = {
                "plan": plan.to_dict(),
                "endpoints": served.endpoints.get(host, []),
                "image": served.images.get(host, {}),
            }
        self.save()

    def _endpoints_now(self) -> dict[str, list[dict[str, Any]]]:
        out = {h: list(v) for h, v in self.record.endpoints.items()}
        for host, s in self.state.served.items():
            out[host] = list(s["endpoints"])
        for host in self.state.retired:
            out.pop(host, None)
        return out

    def platforms_now(self, hosts: list[str]) -> dict[str, str]:
        """Host -> the platform its servers' health gate verified at their start (the record's endpoints, or those
        this rollout served), where all of a host's servers agree on a known one."""
        now = self._endpoints_now()
        out = {}
        for host in hosts:
            seen = {str(ep.get("platform") or "") for ep in now.get(host, [])}
            if len(seen) == 1 and seen <= {"zen", "cpu"}:
                out[host] = seen.pop()
        return out

    def follow(self, hosts: list[str]) -> list[str]:
        """Every service of the deployment (the gateway...) following the servers of the rollout's view (the
        record's, the served ones, not the retired ones): a service changes what it must, e.g. the gateway's
        backends when a batch's hosts serve on other ports or a strategy's new server joins or an old one goes.
        Returns the gateway's server names on ``hosts`` now."""
        had = self._services()
        view = services.View(self.inventory, self._endpoints_now(), addresses=self._new_addresses())
        applied = services.update(self.ctx.quiet(), view, had)
        if applied != had:
            self._set_services(applied)
        gw = self.gateway()
        return gw.names_on(hosts) if gw else []

    # --- the end ----------------------------------------------------------------------------------------------

    def port_of(self, host: str, instance: int | None) -> int:
        """The port of a host's instance: the new plan's once the host was served in this rollout, else the old."""
        state = self.state
        plan = (state.served.get(host) or {}).get("plan") or state.from_record.get("plans", {}).get(host) or {}
        for inst in plan.get("instances") or []:
            if instance is None or inst.get("index") == instance:
                return int(inst["port"])
        return 0

    def _finish(self) -> None:
        rec = self.record
        plans = dict(rec.plans)
        endpoints = dict(rec.endpoints)
        images = dict(rec.images)
        for host, s in self.state.served.items():
            plans[host], endpoints[host], images[host] = s["plan"], s["endpoints"], s["image"]
        for host in self.state.retired:  # an old server a strategy replaced: deleted
            for d in (plans, endpoints, images):
                d.pop(host, None)
        target = str(self.state.to_request["model"])
        model = self.state.to_request.get("served_model_name") or (
            Path(target).name if Path(target).is_dir() else target
        )
        self.store.save_record(
            dataclasses.replace(
                rec,
                request=self.state.to_request,
                plans=plans,
                endpoints=endpoints,
                images=images,
                model=model,
                services=self._services(),  # as the rollout applied them (a re-run read the record)
                updated_at=now(),
            ),
        )
        self.state.status = "done"
        self.state.finished_at = now()
        self.save()
        walls = [b.wall_s for b in self.state.batches if b.wall_s is not None]
        self.ledger.event(self.state.id, "finished", batches=len(self.state.batches), wall_s=walls)
        self.note(f"{self.state.id} finished: {len(self.state.served)} host(s) on the new release")

    def _gate_failed(self, i: int, batch: BatchState, gate: str, host: str, detail: str) -> NoReturn:
        """Record the failure, send the changed batches back (unless --no-revert) and raise the gate's error."""
        self.ledger.event(self.state.id, "gate failed", gate=gate, batch=i + 1, host=host, detail=detail)
        changed = [b for b in self.state.batches[: i + 1] if b.status != "pending"]
        what = "stopping the old server failed" if gate == STOP else f"{gate} gate failed"
        where = f"{what} on {host} (batch {i + 1} of {len(self.state.batches)})"
        if not self.req.revert:
            self.state.status = "failed"
            self.state.message = f"{where}: {detail}"
            self.save()
            raise RolloutGateError(
                f"{where}: {detail}; the fleet is left as it is (--no-revert): "
                f"{', '.join(h for b in changed for h in b.hosts)} on the new release or failed",
                hint="re-run `zenops rollout --abort` to send them back",
            )
        try:
            reverted = self._revert(changed)
        except ZenopsError as e:  # the cause stays the error (its code); the message says the gate failed first
            back = ", ".join(h for b in changed for h in b.hosts)
            self.state.message = f"{where}: {detail}; sending {back} back failed: {in_one_line(e.message)}"
            self.save()
            e.message = f"{where}: {detail}. Sending {back} back to the previous release failed too: {e.message}"
            e.hint = f"fix that, then `zenops rollout --abort` sends them back (rollout {self.state.id} stays open)" + (
                f"; {e.hint}" if e.hint else ""
            )
            raise
        self.state.status = "reverted"
        self.state.message = f"{where}: {detail}"
        self.state.finished_at = now()
        self.save()
        self.ledger.event(self.state.id, "reverted", hosts=reverted, gate=gate)
        raise RolloutGateError(
            f"{where}: {detail}. Reverted {', '.join(reverted)} to the previous release "
            f"({describe_changes(self.state.to_request, self.state.from_request)}); the rollout stopped",
            hint=f"the gate's figures and logs are in {self.state.run_dir} and the run logs; "
            "`zenops status` shows the history",
        )

    def _revert(self, batches: list[BatchState]) -> list[str]:
        """Each batch back to the previous release, the last changed first, by its own strategy."""
        hosts: list[str] = []
        for b in reversed(batches):
            strategy_for(self, b).revert(b)
            hosts.extend(b.hosts)
        return hosts

    def abort(self, state: RolloutState) -> list[str]:
        """`zenops rollout --abort`: send every host the rollout changed back to the previous release."""
        self.state = state
        try:
            self._undrain_leftovers()
            changed = [b for b in state.batches if b.status not in ("pending", "reverted")]
            hosts = self._revert(changed)
            state.status = "reverted"
            state.finished_at = now()
            state.message = "aborted by the operator"
            self.save()
            self.ledger.event(state.id, "aborted", hosts=hosts)
            return hosts
        finally:
            self._reconcile_drained()


def rollout(
    ctx: RunContext,
    inventory: Path,
    req: RolloutRequest,
    *,
    abort: bool = False,
    on_plan: Callable[..., None] | None = None,
    confirm: Callable[[Spend], bool] | None = None,
) -> RolloutResult:
    """Plan, then run (or with ``dry_run`` only plan) a rollout; ``abort``: revert the one in progress.
    ``confirm``: asked, before anything changes, what the strategies create (new cloud servers: a surge's, a
    blue/green set; an in-place rollout creates nothing and is not asked about); False: nothing changes
    (CanceledError)."""
    r = Rollout(ctx, inventory, req)
    if abort:
        current = r.ledger.load()
        if current is None or (not current.active and current.status != "failed"):
            raise UsageError("no rollout is in progress on this deployment: nothing to abort")
        r.abort(current)
        return RolloutResult(current, [b.hosts for b in current.batches])
    state = r.prepare()
    batches = [b.hosts for b in state.batches]
    if on_plan is not None:
        on_plan(state)
    if req.dry_run:
        return RolloutResult(state, batches, dry_run=True)
    creating = strategies.creates(state.batches)
    dep = r.store.cloud_entry() if confirm is not None and creating else None
    if confirm is not None and dep is not None and not confirm(spend.of_surge(dep, count=creating)):
        raise CanceledError("nothing was changed", hint="pass --yes to roll out without asking")
    try:
        r.run(state)
    except KeyboardInterrupt as e:
        raise CanceledError("rollout interrupted: re-run the same command to resume") from e
    return RolloutResult(state, batches)
