"""`zenops rollout`: change the model, engine or serving settings of a deployment host by host behind its gateway.

For each batch (the canary first): drain its servers in the gateway (in-flight requests finish), replace them
(playbooks/serve.yml on those hosts only, with the health gate and a minimum healthy time), run the performance gate
(a short `vllm bench serve` on the new servers and an untouched control server at the same time, against the
baseline the rollout measured before it changed anything; hosts whose facts show one kernel share a machine and are
measured one after another instead), then put them back. A failed gate sends the failed batch
and every batch already changed back to the previous request through the same drain. The state is in the
deployment's ledger (zenops.deployment.rollouts): a re-run continues; whatever happens, no server stays drained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from zenops import request_options
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.rollouts import BatchState, RolloutState, now
from zenops.deployment.services import gateway as gw_lib
from zenops.deployment.store import Store
from zenops.errors import (
    CanceledError,
    NoServerError,
    RolloutGateError,
    RolloutPausedError,
    RunFailedError,
    UsageError,
    ZenopsError,
)
from zenops.rollout.plan import (
    GateLimits,
    GateSizing,
    Sample,
    Verdict,
    host_change,
    make_batches,
    more_baseline_runs,
    sized_prompts,
    spread,
    verdict,
    window,
)

# ServeRequest fields a rollout may change (the same model/engine/plan options as `zenops up`)
# what a rollout may change: the table's changeable options (zenops.request_options, one declaration each)
CHANGEABLE = request_options.CHANGEABLE


STOP = "stop"  # not a gate: the old container could not be stopped (what replace_failure tells from the health gate)
# what Docker says when a container cannot be stopped (a zombie PID 1: a container started without an init)
_STOP_FAILURES = ("cannot stop container", "can not be killed", "is zombie")


def replace_failure(error: RunFailedError) -> str:
    """Why replacing a batch's servers failed: STOP when the old container could not be stopped (reported as that,
    with the host and the container Docker names, not as a failed health gate), else "health"."""
    text = " ".join(f.message for f in error.failures) or error.message
    return STOP if any(s in text for s in _STOP_FAILURES) else "health"


# the gate's bench run could not measure because the servers were too busy: its answer check ran out of time
_BUSY_TASK = "answers"
_BUSY_MESSAGES = ("timed out", "did not answer 200 within")


def busy_failure(error: RunFailedError) -> str | None:
    """When a gate's bench run failed because the servers did not answer its check in time (a fleet saturated by
    live traffic): the host and what timed out; None for any other failure (a server down, a wrong key, a broken
    image)."""
    for f in error.failures:
        if not f.unreachable and _BUSY_TASK in f.task and any(m in f.message for m in _BUSY_MESSAGES):
            return f"{f.host}: {' '.join(f.message.split())[:300]}"
    return None


@dataclass(frozen=True)
class RolloutRequest:
    changes: Mapping[str, Any]  # ServeRequest field -> new value (only what the operator asked to change)
    batch: str = "1"
    canary: int = 1
    max_unavailable: int | None = None
    allow_downtime: bool = False
    revert: bool = True
    drain_timeout: int = 600  # the longest expected request, seconds
    min_healthy: int = 10
    perf_gate: bool = True
    limits: GateLimits = field(default_factory=GateLimits)
    gate_concurrency: int = 4
    gate_prompts: int = 32  # the first (sizing) run's prompts; the measured runs last at least gate_seconds
    gate_seconds: float = 10.0
    gate_input_len: int = 64
    gate_output_len: int = 64
    # unmeasured requests before each gate run: a server just started (the new ones, and every server of a fleet
    # whose `up` just ended) answers its first requests slower, which read as a regression or as run-to-run spread
    gate_warmups: int = 8
    baseline_repeats: int = 2  # the baseline is the last this many runs, once they agree within --max-spread
    baseline_max_repeats: int = 5
    baseline_time_limit: float = 300.0
    # how long a server may take to answer the gate's first check: longer and the fleet is too busy to measure
    answer_timeout: int = 120
    dry_run: bool = False
    runs_dir: Path = Path("runs")
    tuned_reason: str | None = None  # --tuned: the campaign and figures behind the changes (the new plans' reason)

    @property
    def sizing(self) -> GateSizing:
        return GateSizing(
            first_prompts=self.gate_prompts,
            min_seconds=self.gate_seconds,
            repeats=self.baseline_repeats,
            max_repeats=max(self.baseline_repeats, self.baseline_max_repeats),
            time_limit_s=self.baseline_time_limit,
        )


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
            "batch_states": [dataclasses.asdict(b) for b in self.state.batches],
        }


def _rollout_id() -> str:
    return "rollout-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


class Rollout:
    """One `zenops rollout` invocation (a new rollout or the resumption of one)."""

    def __init__(self, ctx: RunContext, inventory: Path, req: RolloutRequest) -> None:
        from zenops import serve  # noqa: PLC0415

        self.serve_lib = serve
        self.ctx = ctx
        self.inventory = inventory
        self.req = req
        self.store = Store(ctx.config, inventory)
        self.key = self.store.name
        self.ledger = self.store.rollouts
        self._told_apart = False  # the note on hosts that share a machine, once per invocation
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

    def _gateway(self) -> gw_lib.Gateway | None:
        """The gateway as the serving record keeps it, with the address of a surge's new server (the record is
        written at the end)."""
        data = self._services().get("gateway")
        return gw_lib.with_addresses(gw_lib.Gateway.from_dict(data), self._surge_addresses()) if data else None

    def _services(self) -> dict[str, dict[str, Any]]:
        """The deployment's services (zenops.deployment.services) as the rollout applied them, else as recorded."""
        state = getattr(self, "state", None)
        return {k: dict(v) for k, v in ((state.services if state else None) or self.record.services).items()}

    def _surge_addresses(self) -> dict[str, str]:
        """The fixed address of each surge's new server (the record has them once the rollout finished)."""
        state = getattr(self, "state", None)
        return {
            str(b.surge["new"]): str(b.surge["new_address"])
            for b in (state.batches if state else [])
            if b.surge and b.surge.get("new") and b.surge.get("new_address")
        }

    def prepare(self) -> RolloutState:
        """The state to run: the one in progress (same target: resumed), or a new one, checked and planned before
        any host is touched (refusals: unknown pair, plan refused, no gateway, a batch that would take all)."""
        current = self.ledger.load()
        old = {"engine_args": [], **self.record.request}  # a record from before --engine-arg had none
        if current is not None and current.active:
            wanted = {**current.from_request, **self._changes_dict()}
            if self.req.changes and wanted != current.to_request:
                raise UsageError(
                    f"rollout {current.id} to another target is {current.status} on this deployment "
                    f"({describe_changes(current.from_request, current.to_request)})",
                    hint="re-run it with the same options to finish it, or `zenops rollout --abort` to send the "
                    "changed hosts back first",
                )
            self.ctx.note(
                f"resuming {current.id} ({current.status}): batch "
                f"{next((i + 1 for i, b in enumerate(current.batches) if b.status != 'done'), len(current.batches))}"
                f" of {len(current.batches)}"
            )
            return current
        new = {**old, **self._changes_dict()}
        if new == old:
            raise UsageError(
                "nothing to roll out: the options ask for what the deployment already serves",
                hint="pass what should change, e.g. --model DIR, --max-num-seqs N, --vllm VERSION",
            )
        new_req = self.serve_lib.request_from_dict(new)
        # refused here, before anything: an unknown or broken pair, a model the hosts cannot serve
        combo = self.serve_lib.resolve_combo(new_req, self.ctx.warn)
        model, _dir = self.serve_lib.resolve_model(new_req.model)
        new_plans = self._plans_from_facts(new_req, model, combo.vllm)
        changes = {
            h: dict(zip(("kind", "diffs"), host_change(self.record.plans.get(h), p, old, new), strict=True))
            for h, p in new_plans.items()
        }
        hosts = [h for h in sorted(self.record.plans) if changes.get(h, {}).get("kind") != "none"]
        if not hosts:
            raise UsageError(
                "nothing to roll out: every host's plan for the new options is the one it serves "
                f"({describe_changes(old, new)} changes no container)",
                hint="pass a change that reaches the servers, e.g. --model DIR or --max-num-seqs N",
            )
        gw = self._gateway()
        if gw is None and not self.req.allow_downtime:
            raise UsageError(
                f"{self.inventory}'s deployment has no gateway: a rollout drains servers through it so that no "
                "request fails",
                hint=f"add it with `zenops up -i {self.inventory} --model ... --gateway on` (same options as before), "
                "or pass --allow-downtime",
            )
        surge = None
        if not self.req.allow_downtime and len(hosts) == len(self.record.plans) == 1:
            surge = self._surge_plan(hosts[0])
        instances = {h: len(self.record.plans[h].get("instances") or []) for h in hosts}
        batches = make_batches(
            hosts,
            batch=self.req.batch,
            canary=min(self.req.canary, max(len(hosts) - 1, 0)) if len(hosts) > 1 else self.req.canary,
            instances=instances,
            max_unavailable=self.req.max_unavailable,
            allow_downtime=self.req.allow_downtime or surge is not None or len(hosts) < len(self.record.plans),
        )
        rid = _rollout_id()
        return RolloutState(
            id=rid,
            deployment=self.key,
            inventory=str(self.inventory.resolve()),
            from_request=old,
            to_request=new,
            from_record=self.record.to_dict(),
            batches=[BatchState(hosts=b, surge=dict(surge) if surge else None) for b in batches],
            changes=changes,
            run_dir=str((self.req.runs_dir / rid).resolve()),
        )

    def _surge_plan(self, host: str) -> dict[str, Any]:
        """A one-host deployment rolls by surging: a new server serves the new release, passes the gates, joins the
        gateway, then the old one is drained and deleted. Only a cloud deployment (`zenops up --cloud`) whose gateway
        has a server of its own (it outlives the old server) can; with room for one more server (checked here, before
        anything changes). Otherwise refused, naming the way out."""
        from zenops import deploy  # noqa: PLC0415
        from zenops.cloud.errors import QuotaExceededError  # noqa: PLC0415

        dep = self.store.cloud_entry()
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
            deploy.surge_preflight(self.ctx, dep)
        except QuotaExceededError as e:
            raise QuotaExceededError(
                f"no room for the surge's new server: {e.message}",
                hint="free resources (zenops status) or raise the project's quota, or pass --allow-downtime (the "
                "only server is replaced in place: clients are refused meanwhile)",
            ) from e
        price = dep.price_per_hour
        self.ctx.note(
            f"one server: the rollout surges: a new {dep.flavor} server serves the new release, and {host} is "
            "deleted once it passed the gates" + (f" (${price}/h more meanwhile)" if price is not None else "")
        )
        return {"old": host, "new": None, "new_address": None, "old_retired": False}

    def _set_services(self, applied: dict[str, dict[str, Any]]) -> None:
        """The services as applied now: in memory (the serving record written at the end) and in the state, so that
        a re-run or `--abort` after an interruption knows what they follow (what HAProxy balances)."""
        self.record = self.record.with_services(applied)
        self.state.services = {k: dict(v) for k, v in self.record.services.items()}
        self._save()

    def _changes_dict(self) -> dict[str, Any]:
        """The changes as the serving record keeps them: paths absolute (a model directory too), as `up` records."""
        out = {}
        for k, given in self.req.changes.items():
            value = given
            if isinstance(given, Path):
                value = str(given.resolve())
            elif isinstance(given, tuple):
                value = list(given)  # as the record keeps it (JSON)
            elif k == "model" and isinstance(given, str) and Path(given).expanduser().is_dir():
                value = str(Path(given).expanduser().resolve())
            out[k] = value
        return out

    def _plans_from_facts(self, new_req: Any, model: Any, vllm: str) -> dict[str, dict[str, Any]]:
        from zenops.facts import facts_path, load_facts_file  # noqa: PLC0415

        topologies = {}
        for host in sorted(self.record.plans):
            path = facts_path(self.ctx.config, host)
            if not path.is_file():
                raise ZenopsError(
                    f"no saved facts for {host} ({path}): the rollout plans before it changes anything",
                    hint=f"gather them: zenops facts -i {self.inventory}",
                )
            topologies[host] = load_facts_file(path, host)
        opts = self.serve_lib.plan_options(new_req, vllm, tuned=self.req.tuned_reason)
        plans = {h: p.to_dict() for h, p in self.serve_lib.make_plans(topologies, model, opts, self.ctx.config).items()}
        self.serve_lib.check_engine_args(new_req.engine_args, plans)
        return plans

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
            self._baseline()
        for i, batch in enumerate(state.batches):
            if batch.status == "done":
                continue
            self._batch(i, batch)
        self._finish()

    def _note(self, text: str) -> None:
        self.ctx.note(f"rollout: {text}")

    @contextlib.contextmanager
    def _phase(self, batch: BatchState, name: str) -> Iterator[None]:
        """Time a phase of a batch into its state (what a rollout's time goes on: `zenops status`, the note)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            batch.phases[name] = round(batch.phases.get(name, 0.0) + time.monotonic() - t0, 1)

    def _save(self) -> None:
        """The ledger's state, and a copy beside the gates' bench artifacts (<runs-dir>/<rollout id>/rollout.json)
        once that directory exists."""
        self.ledger.save(self.state)
        run_dir = Path(self.state.run_dir)
        if run_dir.is_dir():
            (run_dir / "rollout.json").write_text(json.dumps(self.state.to_dict(), indent=2, sort_keys=True))

    def _serve(self, request: Mapping[str, Any], hosts: list[str], *, min_healthy: int) -> Any:
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

    def _drain(self, names: list[str]) -> None:
        gw = self._gateway()
        if gw is None or not names:
            return
        self.state.drained = sorted(set(self.state.drained) | set(names))
        self._save()
        t0 = time.monotonic()
        gw_lib.drain(self.ctx.quiet(), self.inventory, gw, names, timeout=self.req.drain_timeout)
        self._note(f"drained {', '.join(names)} in {time.monotonic() - t0:.0f}s (in-flight requests finished)")

    def _ready(self, names: list[str], *, wait: int = 60, ctx: RunContext | None = None) -> None:
        gw = self._gateway()
        if gw is None or not names:
            return
        gw_lib.ready(ctx or self.ctx.quiet(), self.inventory, gw, names, timeout=wait)
        self.state.drained = sorted(set(self.state.drained) - set(names))
        self._save()

    def _undrain_leftovers(self) -> None:
        """A re-run first puts back what an interrupted run left drained (its batch is then redone from the top)."""
        if self.state.drained:
            self._note(f"putting back {', '.join(self.state.drained)} (left drained by an interrupted run)")
            self._ready(list(self.state.drained), wait=0)

    def _reconcile_drained(self) -> None:
        """On every way out (a gate failed, Ctrl-C, an error): servers zenops drained go back in rotation. HAProxy
        sends them requests only while their health checks pass, so a server that is down takes none."""
        if not self.state.drained:
            return
        try:
            self._ready(list(self.state.drained), wait=0, ctx=self.ctx.quiet(cancel=threading.Event()))
            self._note("no server is left drained")
        except (ZenopsError, KeyboardInterrupt) as e:
            self.ctx.warn(
                f"could not put {', '.join(self.state.drained)} back in rotation ({e}); re-run `zenops rollout` "
                "to continue (it puts them back first)"
            )

    # --- gates ------------------------------------------------------------------------------------------------

    def _sharing(self, hosts: list[str]) -> list[list[str]]:
        """The groups of these hosts that run on one kernel (the same boot id in their saved facts): containers on
        one machine, whose servers compete for its CPUs. Hosts without a boot id (facts from before it, or a kernel
        without one) are taken to be machines of their own."""
        by_boot: dict[str, list[str]] = {}
        for host, boot in self._boot_ids(hosts).items():
            if boot:
                by_boot.setdefault(boot, []).append(host)
        return [sorted(g) for g in by_boot.values() if len(g) > 1]

    def _note_unknown_boot_ids(self, hosts: list[str]) -> None:
        unknown = sorted(h for h, boot in self._boot_ids(hosts).items() if not boot)
        if unknown and len(hosts) > 1:
            self._note(
                f"the saved facts of {', '.join(unknown)} have no kernel boot id (gathered by an older zenops): if "
                f"hosts share a machine they are measured at once, and measure each other (`zenops facts -i "
                f"{self.inventory}` reads them again)"
            )

    def _boot_ids(self, hosts: list[str]) -> dict[str, str]:
        """Host -> the kernel boot id in its saved facts ("" when they have none)."""
        from zenops.facts import saved_facts  # noqa: PLC0415

        return {h: str((saved_facts(self.ctx.config, h) or {}).get("boot_id") or "") for h in hosts}

    def _bench(self, hosts: list[str], label: str, prompts: int | None = None) -> dict[str, Sample]:
        """One short `vllm bench serve` per server of these hosts: all at once (the control measured under the same
        conditions as the changed servers), or one host after another when some of them share a machine: measured
        at once they would measure each other (two servers on one core halve each other's figures, at random)."""
        from zenops.bench.run import BenchRequest, bench_inventory  # noqa: PLC0415

        sharing = self._sharing(hosts)
        if sharing and not self._told_apart:
            self._told_apart = True
            groups = "; ".join(", ".join(g) for g in sharing)
            self._note(f"{groups}: one machine (the same kernel): measured one after another, not at the same time")

        req = BenchRequest(
            profile="seed",
            concurrency=(self.req.gate_concurrency,),
            num_prompts=prompts or self.state.gate_prompts or self.req.gate_prompts,
            input_len=self.req.gate_input_len,
            output_len=self.req.gate_output_len,
            num_warmups=self.req.gate_warmups,
            runs_dir=Path(self.state.run_dir),
            run_id=f"{label}-{time.strftime('%H%M%S')}",
            timeout=600,
            one_at_a_time=bool(sharing),
            answer_timeout=self.req.answer_timeout,
        )
        try:
            outcome = bench_inventory(self.ctx.quiet(), self.inventory, req, limit=",".join(hosts))
        except RunFailedError as e:
            busy = busy_failure(e)
            if busy is None:
                raise
            raise _TooBusyError(busy) from e
        out: dict[str, Sample] = {}
        for r in outcome.report.results:
            host = str(r.metadata.get("host") or "")
            port = _port_of(self.state, host, r.instance)
            out[gw_lib.backend_name(host, port)] = Sample(
                r.output_tok_s, r.median_ttft_ms, r.failed or 0, dict(r.server) if r.server else None, r.duration_s
            )
        return out

    def _baseline(self) -> None:
        """Measure every server before anything changes, sized by time: a first run of --gate-prompts gives each
        server's pace, the measured runs have as many prompts as last --gate-seconds at the slowest pace, and they
        repeat until the last --baseline-repeats agree within --max-spread (or the time limit). A fleet too busy to
        answer pauses the rollout (exit 16) with nothing changed."""
        hosts = sorted(self.record.plans)
        sizing = self.req.sizing
        c = self.req.gate_concurrency
        self._note(
            f"measuring the baseline of {len(hosts)} host(s) before changing anything (C={c}, runs of at least "
            f"{sizing.min_seconds:g} s after {self.req.gate_warmups} warm-up requests, until the last "
            f"{sizing.repeats} agree within {self.req.limits.max_spread:.0%}; at most {sizing.max_repeats} runs or "
            f"{sizing.time_limit_s:g} s)"
        )
        self._note_unknown_boot_ids(hosts)
        t0 = time.monotonic()
        try:
            first = self._bench(hosts, "baseline-sizing", sizing.first_prompts)
            prompts = max(
                (sized_prompts(sizing.first_prompts, x.duration_s, sizing, concurrency=c) for x in first.values()),
                default=sizing.first_prompts,
            )
            self.state.gate_prompts = prompts
            pace = ", ".join(f"{s} {x.duration_s:.1f} s" for s, x in sorted(first.items()) if x.duration_s)
            runs: dict[str, list[Sample]] = {}
            if prompts == sizing.first_prompts:  # long enough already: it counts
                runs = {server: [x] for server, x in first.items()}
                self._note(f"a run of {prompts} prompts lasts at least {sizing.min_seconds:g} s ({pace}): it counts")
            else:
                self._note(f"{sizing.first_prompts} prompts took {pace}: each gate run has {prompts} prompts")
            t_runs = time.monotonic()
            k = len(next(iter(runs.values()), []))
            while more_baseline_runs(runs, sizing, self.req.limits, elapsed_s=time.monotonic() - t_runs):
                k += 1
                for server, x in self._bench(hosts, f"baseline{k}", prompts).items():
                    runs.setdefault(server, []).append(x)
        except _TooBusyError as e:
            self._pause_busy("the baseline", str(e), ready=[])
        kept = window(runs, sizing.repeats)
        self.state.baseline = {server: [dataclasses.asdict(x) for x in v] for server, v in kept.items()}
        self.state.baseline_spread = max((spread([x.output_tok_s for x in v]) for v in kept.values()), default=0.0)
        self.state.baseline_all = {server: [round(x.output_tok_s, 2) for x in v] for server, v in runs.items()}
        self.state.phases["baseline"] = round(time.monotonic() - t0, 1)
        self._save()
        figures = ", ".join(
            f"{s} {statistics.fmean(x.output_tok_s for x in v):.1f} tok/s" for s, v in sorted(kept.items())
        )
        n_runs = max((len(v) for v in runs.values()), default=0)
        self._note(
            f"baseline: {figures}; the last {sizing.repeats} of {n_runs} runs of {prompts} prompts, run-to-run "
            f"spread {self.state.baseline_spread:.0%} ({self.state.phases['baseline']:.0f} s)"
        )
        self.ledger.event(
            self.state.id, "baseline", servers=self.state.baseline, spread=self.state.baseline_spread,
            prompts=prompts, runs=self.state.baseline_all,
        )  # fmt: skip

    def _pause_busy(self, what: str, detail: str, *, ready: list[str]) -> NoReturn:
        """The servers did not answer the gate's check in time: live traffic saturates them. Pause (exit 16) with
        ``ready`` back in rotation, rather than fail a rollout that cannot measure."""
        if ready:
            self._ready(ready)
        self.state.status = "paused"
        self.state.message = f"too busy to measure {what}: {detail}"
        self._save()
        self.ledger.event(self.state.id, "paused", reason=self.state.message)
        raise RolloutPausedError(
            f"the fleet is too busy to measure {what}: {detail}",
            hint="nothing was drained; re-run the same `zenops rollout` when the load is lower (it resumes), give "
            "the servers longer with --gate-answer-timeout, or roll out without the gate (--no-perf-gate)",
        )

    def _control_host(self, batch_index: int) -> str | None:
        """An untouched host: one of a later batch (or not rolled at all)."""
        changed = {h for b in self.state.batches[: batch_index + 1] for h in b.hosts}
        untouched = [h for h in sorted(self.record.plans) if h not in changed]
        return untouched[0] if untouched else None

    def _perf_gate(self, i: int, batch: BatchState, *, ready_on_pause: list[str]) -> list[Verdict]:
        control = self._control_host(i)
        hosts = batch.hosts + ([control] if control else [])
        try:
            now_samples = self._bench(hosts, f"gate-batch{i + 1}")
        except _TooBusyError as e:
            self._pause_busy(f"batch {i + 1}'s new servers", str(e), ready=ready_on_pause)
        control_servers = [s for s in now_samples if control and s.startswith(f"{control}-")]
        limits = self.req.limits
        verdicts = []
        base = {s: [Sample(**x) for x in v] for s, v in self.state.baseline.items()}
        for server, sample in sorted(now_samples.items()):
            if server in control_servers:
                continue
            baseline = base.get(server)
            if not baseline:
                self.ctx.warn(f"{server}: no baseline (a new server): the performance gate only checks it answered")
                continue
            cs = control_servers[0] if control_servers else None
            verdicts.append(
                verdict(
                    server,
                    baseline,
                    sample,
                    limits,
                    fleet_spread=self.state.baseline_spread or 0.0,
                    control_baseline=base.get(cs, []) if cs else [],
                    control_now=now_samples.get(cs) if cs else None,
                )
            )
        return verdicts

    # --- a batch ----------------------------------------------------------------------------------------------

    def _batch(self, i: int, batch: BatchState) -> None:
        if batch.surge:
            self._surge_batch(i, batch)
            return
        n = len(self.state.batches)
        what = "canary batch" if i == 0 and self.req.canary and n > 1 else f"batch {i + 1}/{n}"
        self._note(f"{what}: {', '.join(batch.hosts)}")
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        gw = self._gateway()
        names = gw.names_on(batch.hosts) if gw else []
        batch.status = "draining"
        self._save()
        with self._phase(batch, "drain"):
            self._drain(names)
        batch.status = "replacing"
        self._save()
        try:
            with self._phase(batch, "replace"):  # stop the old container, start the new, its health gate
                served = self._serve(self.state.to_request, batch.hosts, min_healthy=self.req.min_healthy)
        except RunFailedError as e:
            self._gate_failed(
                i, batch, replace_failure(e), e.failures[0].host if e.failures else batch.hosts[0], e.message
            )
        self._keep_served(served)
        with self._phase(batch, "services"):
            new_names = self._update_services(batch.hosts)
        if self.req.perf_gate:
            batch.status = "gating"
            self._save()
            with self._phase(batch, "perf gate"):
                verdicts = self._perf_gate(i, batch, ready_on_pause=new_names)
            self._gate_verdicts(i, batch, verdicts, ready_on_pause=new_names)
        with self._phase(batch, "ready"):
            self._ready(new_names)
        batch.status = "done"
        batch.finished_at = now()
        batch.wall_s = round(time.monotonic() - t0, 1)
        self._save()
        self.ledger.event(self.state.id, "batch done", batch=i + 1, hosts=batch.hosts, wall_s=batch.wall_s)
        phases = ", ".join(f"{k} {v:.0f}s" for k, v in batch.phases.items())
        self._note(f"{what} done in {batch.wall_s:.0f}s ({phases}): {', '.join(batch.hosts)} serve the new release")

    # --- a surge (one-server cloud deployment) -----------------------------------------------------------------

    def _cloud_deployment(self) -> Any:

        dep = self.store.cloud_entry()
        if dep is None:
            raise ZenopsError(
                f"the cloud deployment of {self.inventory} is no longer in this controller's ledger: the surge "
                "cannot go on",
                hint="`zenops status` lists the deployments; `zenops rollout --abort` sends the fleet back",
            )
        return dep

    def _surge_batch(self, i: int, batch: BatchState) -> None:
        """New server (up --count 2) -> the new release on it -> health gate -> performance gate (new against the
        old server's baseline, the old one measured at the same time as the control) -> into the gateway -> the old
        one drained and deleted. Each step is recorded before it starts: a re-run goes on from the first one not
        done, and once the old server's deletion began it only finishes it."""
        from zenops import deploy  # noqa: PLC0415

        surge = batch.surge or {}
        old = str(surge["old"])
        t0 = time.monotonic()
        batch.started_at = batch.started_at or now()
        self._note(f"surge: a new server for the new release, then {old} goes")
        dep = self._cloud_deployment()
        if not surge.get("new"):
            batch.status = "surging"
            self._save()
            port = int((self.record.gateway or {}).get("port") or 8080)
            new, dep = deploy.add_server(self.ctx.quiet(), dep, keep=old, gateway_port=port)
            surge["new"] = new
            surge["new_address"] = next(
                (s.get("fixed_ip") or s.get("address") for s in dep.servers if s["name"] == new), None
            )
            self._save()
            self.ledger.event(self.state.id, "surge server", batch=i + 1, server=new)
            self._note(f"new server {new} is up ({time.monotonic() - t0:.0f}s)")
        new = str(surge["new"])
        if not surge.get("retiring"):
            self._surge_gates_and_switch(i, batch, old, new)
        if not surge.get("old_retired"):
            deploy.retire_server(self.ctx.quiet(), self._cloud_deployment(), old)
            surge["old_retired"] = True
            self.state.retired = sorted(set(self.state.retired) | {old})
            self.state.drained = [d for d in self.state.drained if not d.startswith(f"{old}-")]
            self._save()
            self.ledger.event(self.state.id, "surge retired", batch=i + 1, server=old)
            self._note(f"{old} drained and deleted")
        self._update_services([])  # the gateway balances what is left: the new server's
        batch.status = "done"
        batch.finished_at = now()
        batch.wall_s = round(time.monotonic() - t0, 1)
        self._save()
        self.ledger.event(self.state.id, "batch done", batch=i + 1, hosts=[new], wall_s=batch.wall_s)
        self._note(f"surge done in {batch.wall_s:.0f}s: {new} serves the new release in place of {old}")

    def _surge_gates_and_switch(self, i: int, batch: BatchState, old: str, new: str) -> None:
        """The new release on the new server, its gates, then the new server in rotation and the old one drained."""
        surge = batch.surge or {}
        batch.status = "replacing"
        self._save()
        try:
            served = self._serve(self.state.to_request, [new], min_healthy=self.req.min_healthy)
        except RunFailedError as e:
            self._gate_failed(i, batch, replace_failure(e), new, e.message)
        self._keep_served(served)
        if self.req.perf_gate:
            batch.status = "gating"
            self._save()
            self._gate_verdicts(i, batch, self._surge_gate(i, old, new), ready_on_pause=[])
        batch.status = "switching"
        self._save()
        self._ready(self._update_services([new]))  # in rotation once its health checks pass
        gw = self._gateway()
        self._drain(gw.names_on([old]) if gw else [])
        surge["retiring"] = True  # from here on the old server goes, whatever happens: no way back to it
        # ... and it stays drained: an interrupted run must not put a server that is being deleted back in rotation
        self.state.drained = [d for d in self.state.drained if not d.startswith(f"{old}-")]
        self._save()

    def _surge_gate(self, i: int, old: str, new: str) -> list[Verdict]:
        """The new server against the old one's baseline; the old one, measured at the same time, is the control
        (their instances paired in port order)."""
        try:
            now_samples = self._bench([new, old], f"gate-batch{i + 1}")
        except _TooBusyError as e:
            self._pause_busy(f"the surge's new server {new}", str(e), ready=[])
        base = {s: [Sample(**x) for x in v] for s, v in self.state.baseline.items()}
        olds = sorted((s for s in base if s.startswith(f"{old}-")), key=_port_key)
        news = sorted((s for s in now_samples if s.startswith(f"{new}-")), key=_port_key)
        verdicts = []
        for k, server in enumerate(news):
            if not olds:
                self.ctx.warn(f"{server}: no baseline of {old}: the performance gate only checks it answered")
                continue
            ref = olds[min(k, len(olds) - 1)]
            verdicts.append(
                verdict(
                    server,
                    base[ref],
                    now_samples[server],
                    self.req.limits,
                    fleet_spread=self.state.baseline_spread or 0.0,
                    control_baseline=base[ref],
                    control_now=now_samples.get(ref),
                )
            )
        return verdicts

    def _revert_surge(self, b: BatchState) -> None:
        """The old server serves on (it was never drained before the new one passed, or is put back first); the new
        one is drained if it was in rotation, taken out of the gateway and deleted: every serving server of the
        deployment but the old one, as the cloud, the ledger and the state know them. Refused once the old server's
        deletion began: the surge can only finish then."""
        from zenops import deploy  # noqa: PLC0415

        surge = b.surge or {}
        old = str(surge["old"])
        if surge.get("retiring") or surge.get("old_retired"):
            raise UsageError(
                f"the surge is deleting or has deleted {old}: there is no previous server to go back to",
                hint="re-run the same `zenops rollout` to finish it; then roll the previous release out with "
                "`zenops rollout` (it surges again)",
            )
        dep = self._cloud_deployment()
        extra = set(deploy.serving_server_names(dep)) | {str(s["name"]) for s in dep.servers}
        if surge.get("new"):
            extra.add(str(surge["new"]))
        extra.discard(old)
        gone = sorted(extra)
        self._note(f"reverting the surge: {old} serves on; {', '.join(gone) or 'no new server'} goes")
        gw = self._gateway()
        drained_old = set(gw.names_on([old])) & set(self.state.drained) if gw else set()
        if drained_old:
            self._ready(sorted(drained_old))
        in_rotation = [n for n in (gw.names_on(gone) if gw else []) if n not in self.state.drained]
        if in_rotation:
            self._drain(in_rotation)  # its in-flight requests finish first
        for name in gone:
            self.state.served.pop(name, None)
        self._update_services([])
        self.state.drained = [d for d in self.state.drained if not any(d.startswith(f"{n}-") for n in gone)]
        self._save()
        for name in gone:
            dep = deploy.retire_server(self.ctx.quiet(), dep, name)
        b.status = "reverted"
        self._save()

    def _gate_verdicts(self, i: int, batch: BatchState, verdicts: list[Verdict], *, ready_on_pause: list[str]) -> None:
        """Record and say the performance gate's verdicts; a failure reverts (raises), an inconclusive one pauses
        the rollout (raises) with ``ready_on_pause`` back in rotation."""
        batch.verdicts = [v.to_dict() for v in verdicts]
        self._save()
        for v in verdicts:
            self._note(f"performance gate {v.line()}")
        self.ledger.event(self.state.id, "gate", batch=i + 1, hosts=batch.hosts, verdicts=batch.verdicts)
        failed = [v for v in verdicts if v.outcome == "fail"]
        if failed:
            host = failed[0].server.rsplit("-", 1)[0]
            self._gate_failed(i, batch, "performance", host, "; ".join(v.line() for v in failed))
        unsure = [v for v in verdicts if v.outcome == "inconclusive"]
        if unsure:
            self._ready(ready_on_pause)
            self.state.status = "paused"
            self.state.message = "; ".join(v.line() for v in unsure)
            self._save()
            self.ledger.event(self.state.id, "paused", batch=i + 1, reason=self.state.message)
            raise RolloutPausedError(
                f"the performance gate cannot tell on {', '.join(v.server for v in unsure)}: " + self.state.message,
                hint="the batch serves the new release; re-run the same `zenops rollout` to measure again and "
                "go on (a quieter machine, or more --gate-prompts), or raise --max-spread",
            )

    def _keep_served(self, served: Any) -> None:
        for host, plan in served.plans.items():
            self.state.served[host] = {
                "plan": plan.to_dict(),
                "endpoints": served.endpoints.get(host, []),
                "image": served.images.get(host, {}),
            }
        self._save()

    def _endpoints_now(self) -> dict[str, list[dict[str, Any]]]:
        out = {h: list(v) for h, v in self.record.endpoints.items()}
        for host, s in self.state.served.items():
            out[host] = list(s["endpoints"])
        for host in self.state.retired:
            out.pop(host, None)
        return out

    def _update_services(self, hosts: list[str]) -> list[str]:
        """Every service of the deployment (the gateway...) following the servers of the rollout's view (the
        record's, the served ones, not the retired ones): a service changes what it must, e.g. the gateway's
        backends when a batch's hosts serve on other ports or a surge's server joins or goes. Returns the gateway's
        server names on ``hosts`` now."""
        had = self._services()
        view = services.View(self.inventory, self._endpoints_now(), addresses=self._surge_addresses())
        applied = services.update(self.ctx.quiet(), view, had)
        if applied != had:
            self._set_services(applied)
        gw = self._gateway()
        return gw.names_on(hosts) if gw else []

    # --- the end ----------------------------------------------------------------------------------------------

    def _finish(self) -> None:
        rec = self.record
        plans = dict(rec.plans)
        endpoints = dict(rec.endpoints)
        images = dict(rec.images)
        for host, s in self.state.served.items():
            plans[host], endpoints[host], images[host] = s["plan"], s["endpoints"], s["image"]
        for host in self.state.retired:  # a surge's old server: deleted
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
        self._save()
        walls = [b.wall_s for b in self.state.batches if b.wall_s is not None]
        self.ledger.event(self.state.id, "finished", batches=len(self.state.batches), wall_s=walls)
        self._note(f"{self.state.id} finished: {len(self.state.served)} host(s) on the new release")

    def _gate_failed(self, i: int, batch: BatchState, gate: str, host: str, detail: str) -> NoReturn:
        """Record the failure, send the changed batches back (unless --no-revert) and raise the gate's error."""
        self.ledger.event(self.state.id, "gate failed", gate=gate, batch=i + 1, host=host, detail=detail)
        changed = [b for b in self.state.batches[: i + 1] if b.status != "pending"]
        what = "stopping the old server failed" if gate == STOP else f"{gate} gate failed"
        where = f"{what} on {host} (batch {i + 1} of {len(self.state.batches)})"
        if not self.req.revert:
            self.state.status = "failed"
            self.state.message = f"{where}: {detail}"
            self._save()
            raise RolloutGateError(
                f"{where}: {detail}; the fleet is left as it is (--no-revert): "
                f"{', '.join(h for b in changed for h in b.hosts)} on the new release or failed",
                hint="re-run `zenops rollout --abort` to send them back",
            )
        reverted = self._revert(changed)
        self.state.status = "reverted"
        self.state.message = f"{where}: {detail}"
        self.state.finished_at = now()
        self._save()
        self.ledger.event(self.state.id, "reverted", hosts=reverted, gate=gate)
        raise RolloutGateError(
            f"{where}: {detail}. Reverted {', '.join(reverted)} to the previous release "
            f"({describe_changes(self.state.to_request, self.state.from_request)}); the rollout stopped",
            hint=f"the gate's figures and logs are in {self.state.run_dir} and the run logs; "
            "`zenops status` shows the history",
        )

    def _revert(self, batches: list[BatchState]) -> list[str]:
        hosts: list[str] = []
        for b in reversed(batches):
            if b.surge:
                self._revert_surge(b)
                hosts.extend(b.hosts)
                continue
            gw = self._gateway()
            names = gw.names_on(b.hosts) if gw else []
            self._note(f"reverting {', '.join(b.hosts)} to the previous release")
            drained_already = set(names) <= set(self.state.drained)
            if not drained_already:
                self._drain(names)
            self._serve(self.state.from_request, b.hosts, min_healthy=0)
            for host in b.hosts:
                self.state.served.pop(host, None)
            self._ready(self._update_services(b.hosts))  # the services follow the old servers; back in rotation
            b.status = "reverted"
            self._save()
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
            self._save()
            self.ledger.event(state.id, "aborted", hosts=hosts)
            return hosts
        finally:
            self._reconcile_drained()


class _TooBusyError(Exception):
    """A gate's bench run found the servers too busy to answer in time (busy_failure's detail)."""


def _port_of(state: RolloutState, host: str, instance: int | None) -> int:
    """The port of a host's instance: the new plan's once the host was served in this rollout, else the old."""
    plan = (state.served.get(host) or {}).get("plan") or state.from_record.get("plans", {}).get(host) or {}
    for inst in plan.get("instances") or []:
        if instance is None or inst.get("index") == instance:
            return int(inst["port"])
    return 0


def _port_key(server: str) -> int:
    """A gateway server name's port (``<host>-<port>``), for ordering."""
    tail = server.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def describe_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    diffs = [f"{k}: {old.get(k)} -> {new.get(k)}" for k in CHANGEABLE if old.get(k) != new.get(k)]
    return "; ".join(diffs) or "no change"


def rollout(
    ctx: RunContext,
    inventory: Path,
    req: RolloutRequest,
    *,
    abort: bool = False,
    on_plan: Callable[..., None] | None = None,
) -> RolloutResult:
    """Plan, then run (or with ``dry_run`` only plan) a rollout; ``abort``: revert the one in progress."""
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
    try:
        r.run(state)
    except KeyboardInterrupt as e:
        raise CanceledError("rollout interrupted: re-run the same command to resume") from e
    return RolloutResult(state, batches)
