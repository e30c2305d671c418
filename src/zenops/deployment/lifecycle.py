"""One deployment's lifecycle, the steps `zenops up`, `bench`, `down`, a campaign and a rollout's surge share: open it
by its identity (zenops.deployment.identity), which takes its lock (zenops.lock) for as long as it is open, then
provision (with its retries and failure classes), serve, bench, add or remove one server, down; and the leak proof
after a campaign's teardown.

Nothing here asks a caller for a lock key: a step is a method of an open :class:`Deployment`, and only
:meth:`Deployment.open` makes one, holding the deployment's lock (a dry run, which changes nothing, takes none). A
step run further down the same command (a rollout's surge adds a server to the deployment its command opened) finds
the open deployment with :meth:`Deployment.held`: there is no way to change a deployment this process has not locked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.deployment.identity import DeploymentId
from zenops.errors import BenchFailedError, ExitCode, RunFailedError, UsageError, ZenopsError

if TYPE_CHECKING:
    from zenops.bench.run import BenchOutcome, BenchRequest
    from zenops.cloud import ledger
    from zenops.cloud.preflight import Limits
    from zenops.context import RunContext
    from zenops.deployment.common import CloudRequest
    from zenops.deployment.record import ServingRecord
    from zenops.deployment.store import Store
    from zenops.deployment.teardown import DownResult
    from zenops.hosts import UpResult
    from zenops.scaling.phases import ScaledOut
    from zenops.serve import ServeRequest, ServeResult
    from zenops.spend import Spend


# --- failures ---------------------------------------------------------------------------------------------------


def classify(error: BaseException) -> tuple[str, bool]:
    """(the failure's class, whether it is transient). Words from the run's own messages decide, in this order."""
    from zenops.cloud.errors import CloudError  # noqa: PLC0415
    from zenops.planner import PlanRefusedError  # noqa: PLC0415

    text = str(getattr(error, "message", "") or error)
    if isinstance(error, PlanRefusedError):
        return "plan-refused", False
    if isinstance(error, BenchFailedError):
        return "bench-failed", False
    if getattr(error, "exit_code", None) == ExitCode.INCOMPATIBLE:
        return "engine-pair", False
    if isinstance(error, CloudError):  # its kind, in the collection's words: quota/auth/not_found stay so
        return ("transient", True) if error.kind in ("transient", "error") else (f"cloud-{error.kind}", False)
    if isinstance(error, RunFailedError):
        if error.exit_code == ExitCode.UNREACHABLE:
            return "transient", True
        if "went to ERROR" in text:  # the cloud profile's error_retries already replaced it: not again here
            return "server-error", False
        if "KV cache" in text or "serve at least one request" in text:
            return "kv-cache", False
        if any("healthy" in f.task or "health gate" in f.task for f in error.failures):
            return "health-gate", False
        return "run-failed", False
    return "error", False


# --- the deployment -----------------------------------------------------------------------------------------------

_open: dict[str, Deployment] = {}  # lock key -> the deployment this process holds open
_open_guard = threading.Lock()


@dataclass
class Deployment:
    """An open deployment: its identity, the run context its steps run in, and whether it is a dry run (no lock)."""

    ctx: RunContext
    id: DeploymentId
    check: bool = False

    @classmethod
    @contextmanager
    def open(cls, ctx: RunContext, dep: DeploymentId, *, check: bool = False) -> Iterator[Deployment]:
        """The deployment ``dep``, its lock held until the block ends (refused, LockedError, while another command
        holds it). ``check``: a dry run, which changes nothing and takes no lock."""
        from zenops.lock import deployment_lock  # noqa: PLC0415

        held: AbstractContextManager[Any] = (
            nullcontext() if check else deployment_lock(ctx.config, dep.key, note=ctx.note)
        )
        with held:
            opened = cls(ctx, dep, check=check)
            if check:
                yield opened
                return
            with _open_guard:
                _open[dep.key] = opened
            try:
                yield opened
            finally:
                with _open_guard:
                    _open.pop(dep.key, None)

    @classmethod
    def held(cls, dep: DeploymentId) -> Deployment:
        """The deployment ``dep`` as this process opened it (its lock held): for a step run inside a command that
        opened it. Raises when it is not open: nothing changes a deployment whose lock is not held."""
        with _open_guard:
            opened = _open.get(dep.key)
        if opened is None:
            raise ZenopsError(f"{dep.describe()} is not open here (its lock is not held): open it first")
        return opened

    @classmethod
    def of_entry(cls, ctx: RunContext, dep: ledger.Deployment) -> Deployment:
        """The open cloud deployment of the ledger entry ``dep`` (:meth:`held`), its steps run in ``ctx``."""
        return cls.held(DeploymentId(dep.name, dep.cloud)).with_ctx(ctx)

    @property
    def inventory(self) -> Path:
        """Its serving inventory (a cloud deployment's: once provisioned; DeploymentId.hosts)."""
        return self.id.hosts

    def with_ctx(self, ctx: RunContext) -> Deployment:
        """The same open deployment, its steps run in ``ctx`` (another cancel event, say)."""
        return replace(self, ctx=ctx)

    # --- provision --------------------------------------------------------------------------------------------

    def provision(
        self,
        request: CloudRequest,
        *,
        retries: int = 0,
        confirm: Callable[[Spend], bool] | None = None,
        on_retry: Callable[[str, ZenopsError], None] | None = None,
    ) -> tuple[UpResult, ledger.Deployment]:
        """Its servers on the cloud (`up --cloud`; zenops.deployment.provision.up_cloud), tried again up to
        ``retries`` times when the failure is transient (:func:`classify`; ``on_retry`` is told each time). The
        deployment's inventory is then the one `up` wrote."""
        from zenops.deployment import provision  # noqa: PLC0415
        from zenops.deployment.common import default_name  # noqa: PLC0415

        if (request.name or default_name(request.flavor), request.cloud) != (self.id.name, self.id.cloud):
            raise UsageError(f"a request for {request.cloud}/{request.name} does not provision {self.id.describe()}")
        for attempt in range(1 + retries):
            try:
                result, dep = provision.up_cloud(self.ctx, request, check=self.check, confirm=confirm)
                break
            except ZenopsError as e:
                failure, transient = classify(e)
                if not transient or attempt == retries:
                    raise
                if on_retry is not None:
                    on_retry(failure, e)
        if dep.inventory:
            self.id = replace(self.id, inventory=Path(dep.inventory))
        return result, dep

    def prepare(self, *, limit: str | None = None) -> UpResult:
        """Its own hosts brought to a serving state (`up -i`; zenops.hosts.up_inventory)."""
        from zenops import hosts  # noqa: PLC0415

        return hosts.up_inventory(self.ctx, self.inventory, limit=limit, check=self.check)

    # --- serve and bench --------------------------------------------------------------------------------------

    def serve(self, request: ServeRequest, *, limit: str | None = None, tuned: str | None = None) -> ServeResult:
        """``request`` served with vLLM on its hosts (zenops.serve.serve_inventory), the deployment's llama.cpp
        servers stopped first when its serving record says llama.cpp serves (:meth:`_stop_llamacpp`)."""
        from zenops import serve  # noqa: PLC0415

        self._stop_llamacpp()
        return serve.serve_inventory(self.ctx, self.inventory, request, limit=limit, check=self.check, tuned=tuned)

    def serve_engine(self, request: Mapping[str, Any]) -> None:
        """``request`` (serving options as a mapping) served with the engine it names: llama.cpp when it names a GGUF
        format (the vLLM servers go first), else zenops's plan in vLLM (the deployment's llama.cpp servers go first
        when its serving record says llama.cpp serves: they hold the plan's ports and cores)."""
        from zenops import llamacpp_serve, serve  # noqa: PLC0415

        if llamacpp_serve.gguf_of(request):
            llamacpp_serve.serve_llamacpp(self.ctx, self.inventory, request)
            return
        self._stop_llamacpp()
        serve.serve_inventory(self.ctx, self.inventory, serve.request_from_dict(request))

    def _stop_llamacpp(self) -> None:
        """Before vLLM serves: the deployment's llama.cpp servers stopped (on all its hosts: the record's llama.cpp
        cell served them all) when its serving record says llama.cpp serves (a campaign's llama.cpp cell that did not
        finish leaves such a record): they hold the plan's ports and cores, vLLM would not bind. A dry run only says
        it would."""
        from zenops import llamacpp_serve  # noqa: PLC0415

        if not llamacpp_serve.serving(self.ctx, self.inventory):
            return
        if self.check:
            self.ctx.note(f"llama.cpp serves {self.id.describe()} (its serving record): `up` would stop its "
                          "llama.cpp servers first, vLLM serves on the same ports")  # fmt: skip
            return
        self.ctx.note(f"llama.cpp serves {self.id.describe()} (its serving record): stopping its llama.cpp servers "
                      "first, vLLM serves on the same ports")  # fmt: skip
        llamacpp_serve.stop_llamacpp(self.ctx, self.inventory)

    def bench(self, request: BenchRequest, *, limit: str | None = None) -> BenchOutcome:
        """A benchmark of what it serves (zenops.bench.run.bench_inventory)."""
        from zenops.bench import run as bench_run  # noqa: PLC0415

        return bench_run.bench_inventory(self.ctx, self.inventory, request, limit=limit)

    # --- one server more or less (a cloud deployment) -----------------------------------------------------------

    def add_server(self, dep: ledger.Deployment, *, keep: str, gateway_port: int) -> tuple[str, ledger.Deployment]:
        """One more server of its flavor (zenops.deployment.surge.add_server)."""
        from zenops.deployment import surge  # noqa: PLC0415

        self._is(dep)
        return surge.add_server(self.ctx, dep, keep=keep, gateway_port=gateway_port)

    def add_servers(
        self, dep: ledger.Deployment, *, keep: list[str], more: int, gateway_port: int
    ) -> tuple[list[str], ledger.Deployment]:
        """``more`` servers of its flavor beside ``keep`` (zenops.deployment.surge.add_servers: a blue/green set)."""
        from zenops.deployment import surge  # noqa: PLC0415

        self._is(dep)
        return surge.add_servers(self.ctx, dep, keep=keep, more=more, gateway_port=gateway_port)

    def remove_server(self, dep: ledger.Deployment, name: str) -> ledger.Deployment:
        """Its server ``name`` deleted (zenops.deployment.surge.retire_server)."""
        from zenops.deployment import surge  # noqa: PLC0415

        self._is(dep)
        return surge.retire_server(self.ctx, dep, name)

    # --- replicas: the scaling loop's steps (zenops.scaling.fleet), composed of the ones above --------------------

    def scale_out(
        self, more: int, *, ready_timeout: int = 120, clock: Callable[[], float] = time.monotonic
    ) -> ScaledOut:
        """``more`` serving servers (:meth:`add_servers`), the serving record's request served on them through its
        health gate, then in the record and every service (the gateway balances them once UP). A server whose serve
        failed is deleted again: a failed step leaves nothing billing. Returns their names and how long each phase
        took (zenops.scaling.phases: ``clock`` times the steps, the serve run's marks split it)."""
        from zenops import serve  # noqa: PLC0415
        from zenops.deployment import services  # noqa: PLC0415
        from zenops.scaling import phases  # noqa: PLC0415

        t0 = clock()
        store, record, entry = self._replicas()
        keep = sorted(str(s["name"]) for s in entry.servers)
        port = services.server_port(record.services)
        made, entry = self.add_servers(entry, keep=keep, more=more, gateway_port=port)
        t_made = clock()
        try:
            served = serve.serve_inventory(self.ctx, self.inventory, serve.request_from_dict(record.request),
                                           limit=",".join(made), record=False, gateway=False)  # fmt: skip
        except BaseException:
            for name in made:
                entry = self.remove_server(entry, name)
            raise
        t_served = clock()
        self._follow(store, record, served=served, addresses=_addresses(entry, made), ready_timeout=ready_timeout)
        t_end = clock()
        took = {"provision": t_made - t0}
        docker = served.up.run.duration_s
        facts = served.serve.host_facts if served.serve is not None else {}
        split = phases.serve_phases({h: facts.get(h, {}).get("zenops_serve_marks") or {} for h in made})
        took |= {"docker": docker, **split} if split else {"docker": docker, "serve": t_served - t_made - docker}
        took |= {"rotation": t_end - t_served, "total": t_end - t0}
        return phases.ScaledOut(made, phases.ordered({k: round(v, 1) for k, v in took.items()}))

    def scale_in(self, names: list[str], *, drain_timeout: int = 600) -> None:
        """``names`` drained through the gateway (their in-flight requests finish), out of the record and every
        service, then deleted (:meth:`remove_server`)."""
        from zenops.deployment import services  # noqa: PLC0415

        store, record, entry = self._replicas()
        gw = services.drainable(record.services)
        if gw is not None and gw.names_on(names):
            gw.drain(self.ctx, self.inventory, gw.names_on(names), timeout=drain_timeout)
        self._follow(store, record, gone=names)
        for name in names:
            entry = self.remove_server(entry, name)

    def replace(self, name: str, *, ready_timeout: int = 120) -> ScaledOut:
        """The failed server ``name`` out of the record and every service, deleted, and one new one in its place
        (:meth:`scale_out`): a dead server serves nothing, there is nothing to drain."""
        store, record, entry = self._replicas()
        self._follow(store, record, gone=[name])
        self.remove_server(entry, name)
        return self.scale_out(1, ready_timeout=ready_timeout)

    def restart(self, host: str, *, ready_timeout: int = 120) -> None:
        """Own hosts' self-healing: the serving record's request served again on ``host`` (its vLLM restarted
        through the health gate), then back in the gateway."""
        from zenops import serve  # noqa: PLC0415

        store = self._store()
        record = self._record(store)
        served = serve.serve_inventory(self.ctx, self.inventory, serve.request_from_dict(record.request),
                                       limit=host, record=False, gateway=False)  # fmt: skip
        self._follow(store, record, served=served, ready_timeout=ready_timeout)

    def _store(self) -> Store:
        from zenops.deployment.store import Store  # noqa: PLC0415

        return Store(self.ctx.config, self.inventory)

    def _record(self, store: Store) -> ServingRecord:
        from zenops.errors import NoServerError  # noqa: PLC0415

        record = store.record()
        if record is None or not record.request:
            raise NoServerError(f"zenops has not served {self.id.describe()}: no serving record to scale from")
        return record

    def _replicas(self) -> tuple[Store, ServingRecord, ledger.Deployment]:
        store = self._store()
        record = self._record(store)
        entry = store.cloud_entry()
        if entry is None:
            raise UsageError(
                f"{self.id.describe()} is not a cloud deployment of this machine: its servers cannot be added or "
                "removed", hint="own hosts get self-healing only (a failed vLLM restarted)",
            )  # fmt: skip
        self._is(entry)
        return store, record, entry

    def _follow(
        self,
        store: Store,
        record: ServingRecord,
        *,
        served: ServeResult | None = None,
        gone: Iterable[str] = (),
        addresses: Mapping[str, str] | None = None,
        ready_timeout: int = 120,
    ) -> None:
        """The serving record and every service following the servers now (``served``'s hosts in, ``gone``'s
        out), then ``served``'s servers in rotation once their health checks pass."""
        from datetime import UTC, datetime  # noqa: PLC0415

        from zenops.deployment import services  # noqa: PLC0415

        plans, endpoints, images = dict(record.plans), dict(record.endpoints), dict(record.images)
        for host, plan in (served.plans if served else {}).items():
            plans[host], endpoints[host] = plan.to_dict(), list(served.endpoints.get(host, []) if served else [])
            images[host] = dict(served.images.get(host, {}) if served else {})
        for host in gone:
            for d in (plans, endpoints, images):
                d.pop(host, None)
        key = Path(record.api_key_file) if record.api_key_file else None
        view = services.View(self.inventory, endpoints, api_key_file=key, addresses=dict(addresses or {}))
        applied = services.update(self.ctx, view, record.services)
        store.save_record(replace(record, plans=plans, endpoints=endpoints, images=images, services=applied,
                                  updated_at=datetime.now(UTC).isoformat(timespec="seconds")))  # fmt: skip
        gw = services.drainable(applied, addresses or {})
        if gw is not None and served is not None and gw.names_on(served.plans):
            gw.ready(self.ctx, self.inventory, gw.names_on(served.plans), timeout=ready_timeout)

    def _is(self, dep: ledger.Deployment) -> None:
        if (dep.name, dep.cloud) != (self.id.name, self.id.cloud):
            raise ZenopsError(f"{dep.cloud}/{dep.name} is not {self.id.describe()}")

    # --- down ---------------------------------------------------------------------------------------------------

    def down(self, *, keep_secrets: bool = False) -> DownResult:
        """A cloud deployment removed, every resource of it, and proved gone (zenops.deployment.teardown.down)."""
        from zenops.deployment import teardown  # noqa: PLC0415

        if self.id.cloud is None:
            raise UsageError(f"{self.id.describe()} is your own hosts: stop its servers with stop_servers()")
        return teardown.down(
            self.ctx.config, cloud=self.id.cloud, name=self.id.name, dry_run=self.check, note=self.ctx.note,
            keep_secrets=keep_secrets,
        )  # fmt: skip

    def stop_servers(self, **kw: Any) -> Any:
        """What zenops started on its hosts stopped (`down -i`; zenops.hosts.down_inventory): the hosts stay."""
        from zenops import hosts  # noqa: PLC0415

        return hosts.down_inventory(self.ctx, self.inventory, **kw)


def _addresses(dep: ledger.Deployment, names: Iterable[str]) -> dict[str, str]:
    """Each of ``names``' fixed address, as the ledger has it (the gateway reaches a new server by it)."""
    wanted = set(names)
    return {
        str(s["name"]): str(s.get("fixed_ip") or s.get("address"))
        for s in dep.servers
        if s["name"] in wanted and (s.get("fixed_ip") or s.get("address"))
    }


# --- more than one deployment -----------------------------------------------------------------------------------


def leak_proof(config: Any, cloud: str, campaign: str, deployments: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Resources on ``cloud`` carrying the campaign's mark (what `zenops leaks` would find of it), and the expiry
    switches' application credentials of its ``deployments`` (credentials carry no tags: they go by name)."""
    from zenops.cloud import expiry_switch, ops, scaler_cred  # noqa: PLC0415

    conn = ops.connect(cloud)
    owned = ops.list_owned(conn, cloud, campaign=campaign)
    found = [ops.describe(k, r) for k, r in owned.items()]
    names = set(deployments)
    creds = [
        c
        for c in expiry_switch.listed(conn, cloud)
        if expiry_switch.deployment_of(c.name) in names or expiry_switch.campaign_of(c) == campaign
    ]
    loop = [
        c
        for c in scaler_cred.listed(conn, cloud)
        if scaler_cred.deployment_of(c.name) in names or scaler_cred.campaign_of(c) == campaign
    ]
    return found + [expiry_switch.describe(c) for c in creds] + [scaler_cred.describe(c) for c in loop]


def quota_room(ctx: RunContext, cloud: str, flavors: list[str]) -> tuple[Limits, list[tuple[int, int]], bool]:
    """What ``cloud``'s project holds: its absolute limits, each of ``flavors``' (vCPUs, RAM MiB) (unknown flavors
    left out: their own preflight names them), and whether its servers take floating IPs. Raises ZenopsError when
    the limits cannot be read."""
    from zenops.cloud import ops  # noqa: PLC0415

    limits, sizes = ops.room(ops.connect(cloud), cloud, flavors)
    return limits, list(sizes.values()), ctx.config.cloud_profile(cloud).network_mode == "floating"
