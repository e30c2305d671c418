"""The scaling loop's real observer and fleet (zenops.scaling.loop's Observer and Fleet), on the deployment's gateway
host, from the deployment's files there (its serving record, its cloud ledger entry, its inventory).

* :class:`FleetObserver` looks at the fleet: the replicas (the ledger's servers; own hosts: the record's hosts), each
  one's metrics from the local Prometheus (zenops.metrics.prom's queries and rows, asked on the loopback: the loop
  runs where Prometheus runs), its server's status in the cloud (zenops.cloud.ops: ERROR, SHUTOFF, gone), and its
  gateway backends' states (the gateway service's status). vLLM's own /health is HAProxy's health check: a vLLM that
  died is a backend DOWN.
* :class:`DeploymentFleet` acts through zenops.deployment.lifecycle.Deployment, opened (its lock taken) for each
  step: scale_out, scale_in (drained first), replace; own hosts: restart.
* :func:`settings_of` reads what the loop keeps the fleet within from the serving record's scaler service
  (``services.scaler``: replicas, cap_per_hour, policy), else the loop's state file.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zenops.errors import UsageError
from zenops.scaling import decide, request
from zenops.scaling.decide import Sample
from zenops.scaling.heal import Health
from zenops.scaling.loop import Observation, Settings
from zenops.scaling.phases import ScaledOut
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import load_state, policy_from_dict, state_path

if TYPE_CHECKING:
    from zenops.context import RunContext
    from zenops.deployment.identity import DeploymentId
    from zenops.deployment.record import ServingRecord
    from zenops.metrics.top import Row

WINDOW_S = 60  # the TTFT percentile's window in Prometheus (the gauges are instant)
PROM_TIMEOUT_S = 10.0


def _record(ctx: RunContext, dep: DeploymentId) -> ServingRecord:
    from zenops.deployment.store import Store  # noqa: PLC0415
    from zenops.errors import NoServerError  # noqa: PLC0415

    record = Store(ctx.config, dep.hosts).record()
    if record is None:
        raise NoServerError(f"zenops has not served {dep.describe()} here: no serving record for the loop")
    return record


def settings_of(ctx: RunContext, dep: DeploymentId) -> Settings:
    """The loop's settings: bounds, cap and policy as the scaler service recorded them (or as the loop's state file
    has them), the host the gateway shares protected, own hosts healed by a restart."""
    from zenops.deployment.services.gateway import Gateway  # noqa: PLC0415

    record = _record(ctx, dep)
    scaler = dict(record.services.get("scaler") or {})
    kept = load_state(state_path(ctx.config.state_dir, dep.name))
    bounds = scaler.get("replicas") or (kept.replicas.to_dict() if kept else None)
    overrides = scaler.get("overrides")
    if not bounds:
        raise UsageError(
            f"{dep.describe()} has no replica range for the loop",
            hint="give it one with `zenops up ... --replicas MIN..MAX` (it installs the loop on the gateway host)",
        )
    replicas = Replicas(int(bounds["min"]), int(bounds["max"]))
    seats = min((_seats(p) for p in record.plans.values()), default=0) or 1
    gw = record.services.get("gateway")
    protected = frozenset() if not gw or Gateway.from_dict(gw).own_server else {Gateway.from_dict(gw).host}
    cap = scaler.get("cap_per_hour", kept.cap_per_hour if kept else None)
    return Settings(
        deployment=dep.name,
        bounds=replicas,
        # the service records the overrides `up` was given; a state file alone (no record) keeps the policy it ran
        policy=(
            request.policy(seats=seats, overrides=overrides or {})
            if overrides is not None or not kept or not kept.policy
            else policy_from_dict(kept.policy)
        ),
        cloud=dep.cloud,
        cap_per_hour=float(cap) if cap is not None else None,
        protected=frozenset(protected),
        can_replace=dep.cloud is not None,
    )


def _seats(plan: Mapping[str, Any]) -> int:
    """A recorded plan's (Plan.to_dict) seats, as zenops.scaling.decide.seats counts a Plan's."""
    return sum(int(i.get("max_num_seqs") or plan.get("max_num_seqs") or 0) for i in plan.get("instances") or [])


# --- looking -----------------------------------------------------------------------------------------------------


def ask_prometheus(url: str, queries: Mapping[str, str], *, timeout: float = PROM_TIMEOUT_S) -> dict[str, Any]:
    """Each query's instant vector from the Prometheus at ``url`` (on this host's loopback), or {"error": why}:
    the answers zenops.metrics.prom.rows_from_answers reads."""
    out: dict[str, Any] = {}
    for name, query in queries.items():
        target = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            with urllib.request.urlopen(target, timeout=timeout) as answer:
                data = json.load(answer)
            out[name] = data["data"]["result"] if data.get("status") == "success" else {"error": data.get("error")}
        except Exception as e:
            out[name] = {"error": str(e)}
    return out


def samples_of(now: float, rows: Sequence[Row]) -> dict[str, Sample]:
    """One Sample per host (a replica) from its instances' rows."""
    by_host: dict[str, list[Row]] = {}
    for row in rows:
        by_host.setdefault(row.host, []).append(row)
    return {host: decide.sample_of(now, got) for host, got in by_host.items()}


def backend_states(gateway_state: Mapping[str, Any] | None, live: Mapping[str, Any] | None) -> dict[str, str]:
    """Host -> its gateway backends' state (HAProxy's: the worst of its instances', DOWN first), from the gateway
    service's recorded state (which backend is which host) and its live status."""
    if not gateway_state or not live:
        return {}
    host_of = {str(b["name"]): str(b["host"]) for b in gateway_state.get("backends") or []}
    out: dict[str, str] = {}
    for b in live.get("backends") or []:
        host = host_of.get(str(b.get("name")))
        status = str(b.get("status") or "")
        if host is None:
            continue
        if status.upper().startswith("DOWN") or host not in out:
            out[host] = "DOWN" if status.upper().startswith("DOWN") else status
    return out


@dataclass
class FleetObserver:
    """The loop's eyes on the deployment ``dep`` (see the module's text)."""

    ctx: RunContext
    dep: DeploymentId

    def observe(self, now: float) -> Observation:
        from zenops.deployment import services  # noqa: PLC0415
        from zenops.deployment.store import Store  # noqa: PLC0415

        record = _record(self.ctx, self.dep)
        entry = Store(self.ctx.config, self.dep.hosts).cloud_entry() if self.dep.cloud else None
        replicas = tuple(sorted(str(s["name"]) for s in entry.servers) if entry else sorted(record.endpoints))
        samples = self._samples(now, record)
        gw = record.services.get("gateway")
        live = services.status(self.ctx, self.dep.hosts, {"gateway": gw}).get("gateway", {}) if gw else {}
        backends = backend_states(gw, live.get("live"))
        statuses = self._servers(entry.name) if entry else {}
        health = {
            r: Health(now, server=statuses.get(r, "MISSING") if entry else None, backend=backends.get(r))
            for r in replicas
        }
        return Observation(now, replicas, {r: s for r, s in samples.items() if r in replicas}, health)

    def _samples(self, now: float, record: ServingRecord) -> dict[str, Sample]:
        from zenops.deployment.services.metrics import Metrics  # noqa: PLC0415
        from zenops.metrics import probe, prom  # noqa: PLC0415

        state = record.services.get("metrics")
        if not state:
            return {}
        instances = probe.instances_of(record.endpoints)
        answers = ask_prometheus(Metrics.from_dict(state).url, prom.queries(WINDOW_S))
        return samples_of(now, prom.rows_from_answers(answers, instances, WINDOW_S))

    def _servers(self, name: str) -> dict[str, str]:
        from zenops.cloud import ops  # noqa: PLC0415

        assert self.dep.cloud is not None
        conn = ops.connect(self.dep.cloud)
        return {str(s.name): str(s.status) for s in ops.owned_servers(conn, self.dep.cloud, deployment=name)}


# --- acting ------------------------------------------------------------------------------------------------------


@dataclass
class DeploymentFleet:
    """The loop's hands: each step opens the deployment (its lock: LockedError while an operator command holds it)
    and runs the lifecycle's step."""

    ctx: RunContext
    dep: DeploymentId
    drain_timeout: int = 600

    def scale_out(self, count: int) -> ScaledOut:
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        with Deployment.open(self.ctx, self.dep) as d:
            return d.scale_out(count)

    def scale_in(self, replicas: Sequence[str]) -> None:
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        with Deployment.open(self.ctx, self.dep) as d:
            d.scale_in(list(replicas), drain_timeout=self.drain_timeout)

    def heal(self, replica: str) -> str:
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        with Deployment.open(self.ctx, self.dep) as d:
            if self.dep.cloud is None:
                d.restart(replica)
                return f"vLLM restarted on {replica}"
            return f"{replica} replaced by {', '.join(d.replace(replica).names)}"
