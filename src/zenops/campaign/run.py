"""Running a campaign: provision a server per flavor, serve and benchmark its cells one after another, tear it down;
inside the budget, resumable, and torn down on every path (success, a failed cell, Ctrl-C, the budget reached).

The steps are the ones `zenops up`, `zenops bench` and `zenops down` take, the deployment's lifecycle
(zenops.deployment.lifecycle: open and lock, provision, serve, bench, down, the leak proof): a campaign sequences
them per cell, with a ledger and a budget, and holds no copy of them.

* Health: every cell starts with `up`'s host checks (reachable, Docker, facts) and ends its start with the serving
  health gate; a host that does not answer is a transient failure.
* Failures are classified. Deterministic ones (the plan refused, the server never became healthy, a KV cache too
  small, failed bench requests, an unknown engine pair) are recorded and not retried; transient ones (a host or the
  cloud API not answering, a server in ERROR) are retried up to ``retries`` times, then recorded.
* Cost: each server from its creation (the request) until its deletion is confirmed. Before provisioning a group
  and before each cell, the rest of the budget must cover the next step; when it does not, no new cell starts, the
  rest is marked skipped (budget) and everything is torn down.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from zenops.campaign import plan as plan_lib
from zenops.campaign.planned import Planned, price_lookup, state_to_run
from zenops.campaign.results import progress_line
from zenops.campaign.spec import CampaignSpec
from zenops.campaign.state import CampaignState, ServerState, Store, deployment_name, now_iso
from zenops.context import RunContext
from zenops.deployment.identity import DeploymentId
from zenops.deployment.lifecycle import Deployment, classify, leak_proof, quota_room
from zenops.deployment.target import resolve_target
from zenops.errors import BenchFailedError, CanceledError, ZenopsError

__all__ = ["Campaign"]

TRANSIENT_RETRIES = 2


# --- the run ------------------------------------------------------------------------------------------------------


class Campaign:
    def __init__(self, ctx: RunContext, spec: CampaignSpec, store: Store, *, retries: int = TRANSIENT_RETRIES) -> None:
        self.ctx = ctx
        self.spec = spec
        self.store = store
        self.retries = retries
        self.price_of = price_lookup(ctx, spec)
        self._lock = threading.RLock()
        self.cancel = ctx.cancel or threading.Event()
        self.state: CampaignState

    # --- state --------------------------------------------------------------------------------------------------

    def _save(self) -> None:
        with self._lock:
            self.store.save(self.state)

    def _note(self, text: str) -> None:
        self.ctx.note(f"campaign {self.state.id}: {text}")

    def open(self, planned: Planned, *, new: bool = False) -> CampaignState:
        """The state to run: the one in progress for this name (resumed), or a new one (campaign.planned)."""
        self.state = state_to_run(self.spec, planned, self.store, new=new)
        self._save()
        return self.state

    # --- budget -------------------------------------------------------------------------------------------------

    def _durations(self) -> plan_lib.Durations:
        with self._lock:
            return plan_lib.Durations.from_measurements(self.state.samples)

    def _affordable(self, price: float | None, seconds: float) -> tuple[bool, str]:
        with self._lock:
            spent = self.state.spent()
        need = (price or 0.0) * seconds / 3600
        ok = plan_lib.affordable(spent, need, self.spec.budget.max_usd)
        why = (
            f"budget: ${spent:.2f} spent of ${self.spec.budget.max_usd:.2f}, the next step needs about ${need:.2f}"
            if self.spec.budget.max_usd is not None
            else ""
        )
        return ok, why

    # --- one group: a server, its cells, its teardown -----------------------------------------------------------

    def run(self, planned: Planned) -> CampaignState:
        groups: dict[str, list[plan_lib.Cell]] = {}
        for c in planned.todo:
            groups.setdefault(c.group, []).append(c)
        self._note(
            f"{len(planned.todo)} cell(s) to run in {len(groups)} group(s)"
            + (
                f" (of {len(planned.cells)}; the others are done or failed for good)"
                if planned.todo != planned.cells
                else ""
            )
            + (f"; projected ${planned.projection.usd:.2f}" if not planned.projection.unknown_prices else "")
            + (f" of ${self.spec.budget.max_usd:.2f}" if self.spec.budget.max_usd is not None else "")
        )
        interrupted = False
        try:
            parallel = self._parallel(list(groups)) if self.spec.parallel > 1 and len(groups) > 1 else 1
            if parallel > 1:
                self._run_parallel(groups, parallel)
            else:
                for group, cells in groups.items():
                    if self.cancel.is_set():
                        break
                    self._group(group, cells)
        except (KeyboardInterrupt, CanceledError):
            interrupted = True
            self.cancel.set()
            raise
        finally:
            self._teardown_all()  # whatever happened above: no server stays
            self._finish(interrupted)
        return self.state

    def _parallel(self, groups: list[str]) -> int:
        """``parallel`` as the quota allows it (cloud): never more servers at once than the project can hold."""
        if not self.spec.cloud:
            return self.spec.parallel
        cloud = str(self.spec.cloud)
        try:
            limits, sizes, floating = quota_room(self.ctx, cloud, groups)
        except ZenopsError as e:  # the limits could not be read: each group's own preflight still checks its room
            self.ctx.warn(f"could not read the quota of {cloud} ({e.message}): running {self.spec.parallel} at once")
            return self.spec.parallel
        k = plan_lib.fitting_parallel(self.spec.parallel, sizes, limits, floating=floating)
        if k < min(self.spec.parallel, len(groups)):
            self._note(
                f"parallel {self.spec.parallel} -> {max(k, 1)}: the project's quota holds {k} of these servers at once"
            )
        return max(k, 1)

    def _run_parallel(self, groups: dict[str, list[plan_lib.Cell]], parallel: int) -> None:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="campaign") as pool:
            futures = [pool.submit(self._group, g, cells) for g, cells in groups.items()]
            try:
                while not all(f.done() for f in futures):
                    time.sleep(0.5)
            except KeyboardInterrupt:
                self.cancel.set()  # the playbooks of every group stop; their teardown follows
                for f in futures:
                    f.cancel()
                raise
            for f in futures:
                exc = f.exception()
                if exc is not None:
                    raise exc

    def _group(self, group: str, cells: list[plan_lib.Cell]) -> None:
        price = self.spec.prices.get(group, self.price_of(group) if self.spec.cloud else None)
        d = self._durations()
        first_s = d.cell_s(self.spec.bench, first=True)
        server = self._server_of(group)
        if self.spec.cloud and server is None:
            ok, why = self._affordable(price, d.provision_s + first_s + d.teardown_s)
            if not ok:
                self._skip(cells, why)
                return
        with Deployment.open(self._ctx(), self._identity(group)):  # held from its provisioning to its teardown
            try:
                try:
                    inventory = self._provision(group, price) if self.spec.cloud else Path(str(self.spec.inventory))
                except ZenopsError as e:  # CanceledError goes on up; a server that never came: its cells, not the rest
                    if isinstance(e, CanceledError):
                        raise
                    self._fail_cells(cells, e)
                    return
                for i, cell in enumerate(cells):
                    if self.cancel.is_set():
                        raise CanceledError("campaign interrupted: `zenops campaign run FILE` again continues it")
                    ok, why = self._affordable(price, d.cell_s(self.spec.bench, first=i == 0) + d.teardown_s)
                    if not ok:
                        self._skip(cells[i:], why)
                        break
                    self._cell(cell, inventory, price, first=i == 0)
                    d = self._durations()
            finally:
                if self.spec.cloud:
                    self._teardown(group)
                else:
                    self._stop_servers(group)

    def _identity(self, group: str) -> DeploymentId:
        """The group's deployment: its server on the cloud, or the inventory's hosts."""
        if self.spec.cloud:
            return DeploymentId(deployment_name(self.state.id, group), str(self.spec.cloud))
        return resolve_target(self.ctx.config, inventory=Path(str(self.spec.inventory)), command="campaign run")

    def _stop_servers(self, group: str) -> None:
        """Own hosts stay; the servers the campaign started on them go (`zenops down -i`), images kept."""
        inventory = self.spec.inventory
        try:
            hosts: Deployment = Deployment.held(self._identity(group))
            hosts.with_ctx(self._ctx_uncancelled()).stop_servers()
        except ZenopsError as e:
            self.ctx.warn(
                f"could not stop the campaign's servers on {inventory}: {e} (run `zenops down -i {inventory}`)"
            )

    def _server_of(self, group: str) -> ServerState | None:
        with self._lock:
            return next((s for s in self.state.running_servers() if s.group == group), None)

    def _ctx(self) -> RunContext:
        return replace(self.ctx, cancel=self.cancel)

    def _ctx_uncancelled(self) -> RunContext:
        """For the clean-up after a Ctrl-C: its own cancel event (a second Ctrl-C still stops it)."""
        return replace(self.ctx, cancel=threading.Event())

    def _provision(self, group: str, price: float | None) -> Path:
        from zenops.deployment.common import CloudRequest  # noqa: PLC0415

        name = deployment_name(self.state.id, group)
        with self._lock:
            server = self.state.servers.get(name)
            if server is None or server.deleted_at is not None:
                server = ServerState(name, group, self.spec.cloud, group, price, created_at=now_iso())
                self.state.servers[name] = server
        self._save()
        self._note(f"{group}: provisioning {name}")
        t0 = time.monotonic()
        request = CloudRequest(
            cloud=str(self.spec.cloud), flavor=group, count=1, name=name, campaign=self.state.id,
            ttl_s=self.spec.budget.ttl_s,
        )  # fmt: skip

        def again(failure: str, e: ZenopsError) -> None:
            self._note(f"{group}: provisioning failed ({failure}: {e.message}); trying again")

        deployment: Deployment = Deployment.held(self._identity(group))
        _up, dep = deployment.provision(request, retries=self.retries, on_retry=again)
        with self._lock:
            server.inventory = dep.inventory
            self.state.sample("provision_s", time.monotonic() - t0)
        self._save()
        return Path(dep.inventory)

    def _teardown(self, group: str) -> None:
        server = self._server_of(group)
        if server is None:
            return
        self._note(f"{group}: tearing down {server.deployment}")
        t0 = time.monotonic()
        deployment: Deployment = Deployment.held(self._identity(group))
        deployment.down()
        with self._lock:
            server.deleted_at = now_iso()  # down raised if anything was left: only a confirmed deletion gets here
            self.state.sample("teardown_s", time.monotonic() - t0)
        self._save()

    def _teardown_all(self) -> None:
        """Every server of the campaign still standing (a group that raised, Ctrl-C): removed, or said loudly."""
        for server in list(self.state.running_servers()):
            try:
                with Deployment.open(self.ctx, self._identity(server.group)):
                    self._teardown(server.group)
            except (ZenopsError, KeyboardInterrupt) as e:
                self.ctx.warn(
                    f"could not remove {server.deployment} ({e}): run `zenops campaign down {self.state.id}` "
                    f"(or `zenops down --campaign {self.state.id} --cloud {self.spec.cloud}`)"
                )

    def _fail_cells(self, cells: list[plan_lib.Cell], error: ZenopsError) -> None:
        """The group's server could not be had: each of its cells failed, with the class and the cloud's words
        (a transient class is tried again by the next `run`; the provisioning itself was already retried)."""
        failure, _transient = classify(error)
        with self._lock:
            self.state.fail([c.key for c in cells], failure, error.message, attempt=True)
        self._save()
        self._note(
            f"{cells[0].group}: no server ({failure}): {error.message.splitlines()[0][:300]}; "
            f"{len(cells)} cell(s) failed, the other groups go on"
        )
        self._note(self.progress())

    def _skip(self, cells: list[plan_lib.Cell], why: str) -> None:
        with self._lock:
            self.state.skip([c.key for c in cells], why)
        self._save()
        self._note(f"{len(cells)} cell(s) skipped: {why}")

    # --- one cell -----------------------------------------------------------------------------------------------

    def _cell(self, cell: plan_lib.Cell, inventory: Path, price: float | None, *, first: bool) -> None:
        deployment: Deployment = Deployment.held(self._identity(cell.group))
        runs_dir = self.store.dir(self.state.id) / "runs"
        for attempt in range(1 + self.retries):
            with self._lock:
                self.state.start(cell.key)
            self._save()
            self._note(f"{cell.label()}: serving" + (f" (attempt {attempt + 1})" if attempt else ""))
            try:
                t0 = time.monotonic()
                request = {**dict(cell.request), "gateway": "off"}
                deployment.serve_engine(request)
                serve_s = time.monotonic() - t0
                run_dirs = []
                t1 = time.monotonic()
                for r in range(self.spec.bench.repeats):
                    run_id = f"{cell.key}-r{r + 1}"
                    shutil.rmtree(runs_dir / run_id, ignore_errors=True)  # a partial run of an interrupted attempt
                    self._note(f"{cell.label()}: bench {r + 1}/{self.spec.bench.repeats}")
                    outcome = deployment.bench(
                        plan_lib.bench_request(
                            self.spec, cell, run_id, runs_dir, price=price, deployment=deployment.id.label,
                            campaign=self.state.id,
                        )
                    )  # fmt: skip
                    run_dirs.append(str(outcome.run_dir))
                    bad = [p for res in outcome.report.results for p in res.problems]
                    if bad:
                        raise BenchFailedError(f"{cell.label()}: {'; '.join(sorted(set(bad)))} ({outcome.run_dir})")
                bench_s = time.monotonic() - t1
            except (KeyboardInterrupt, CanceledError):
                with self._lock:
                    self.state.interrupt(cell.key)
                self._save()
                raise
            except ZenopsError as e:
                failure, transient = classify(e)
                with self._lock:
                    self.state.fail([cell.key], failure, e.message)
                self._save()
                if transient and attempt < self.retries:
                    self._note(f"{cell.label()}: {failure} ({e.message.splitlines()[0][:200]}); trying again")
                    continue
                self._note(f"{cell.label()}: FAILED ({failure}): {e.message.splitlines()[0][:300]}")
                return
            with self._lock:
                self.state.done(cell.key, run_dirs, serve_s, bench_s, first=first)
            self._save()
            self._note(f"{cell.label()}: done (serve {serve_s:.0f}s, bench {bench_s:.0f}s)")
            self._note(self.progress())
            return

    def progress(self) -> str:
        """``[######..............] 3/8 cells (1 failed), $0.42 of $5.00``: said after every cell."""
        with self._lock:
            return progress_line(self.state)

    # --- the end ------------------------------------------------------------------------------------------------

    def _finish(self, interrupted: bool) -> None:
        if self.spec.cloud:
            try:
                deployments = [s.deployment for s in self.state.servers.values()]
                self.state.leaks = len(leak_proof(self.ctx.config, str(self.spec.cloud), self.state.id, deployments))
            except ZenopsError as e:
                self.ctx.warn(f"could not check for leftovers of {self.state.id}: {e}")
        self.state.finish(interrupted=interrupted)
        self._save()
        if self.state.leaks is not None:
            self._note(
                f"{self.state.leaks} resource(s) with its mark left on {self.spec.cloud}"
                + (" (nothing leaked)" if self.state.leaks == 0 else f": `zenops campaign down {self.state.id}`")
            )
