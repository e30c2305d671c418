"""The hosts' own up and down, the two ends of every deployment: `zenops up` waits until the hosts answer and are ready,
then installs the Docker engine (playbooks/up.yml); `zenops down --inventory` stops and removes the servers zenops
started there, and with --images / --data their images and models (playbooks/down.yml)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.record import ServingRecord
from zenops.deployment.store import Store
from zenops.runner import HostStats, RunResult, RunSpec


@dataclass(frozen=True)
class HostSummary:
    host: str
    address: str
    os: str
    cpus: int | None
    memory_mb: int | None
    docker: str
    stats: HostStats

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UpResult:
    run: RunResult
    hosts: list[HostSummary]

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run.to_dict(), "hosts": [h.to_dict() for h in self.hosts]}


def summarize(run: RunResult) -> list[HostSummary]:
    """One line per host from the playbook's ``zenops_host_summary`` fact and the run's stats."""
    out = []
    for host in sorted(run.stats):
        facts = run.host_facts.get(host, {}).get("zenops_host_summary") or {}
        st = run.stats[host]
        if not facts and not (st.failed or st.unreachable):
            continue  # e.g. the controller's own provisioning play: not a target
        out.append(
            HostSummary(
                host=host,
                address=str(facts.get("address", "")),
                os=str(facts.get("os", "")),
                cpus=facts.get("cpus"),
                memory_mb=facts.get("memory_mb"),
                docker=str(facts.get("docker", "")),
                stats=run.stats[host],
            )
        )
    return out


def up_inventory(ctx: RunContext, inventory: Path, *, limit: str | None = None, check: bool = False) -> UpResult:
    spec = RunSpec(
        playbook="up",
        inventory=inventory,
        extravars=ctx.config.docker.role_vars(),
        limit=limit,
        check=check,
        verbosity=ctx.verbosity,
    )
    run = ctx.run(spec)
    return UpResult(run=run, hosts=summarize(run))


@dataclass(frozen=True)
class DownHost:
    host: str
    docker: bool
    containers: list[str]
    images: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def down_inventory(
    ctx: RunContext,
    inventory: Path,
    *,
    images: bool = False,
    data: bool = False,
    limit: str | None = None,
    keep_secrets: bool = False,
) -> tuple[RunResult, list[DownHost]]:
    """Remove zenops's servers from the hosts of ``inventory``, the deployment's services (zenops.deployment.services:
    the gateway...) first. Without ``limit`` the whole deployment is gone: its serving record, and its API key file
    unless ``keep_secrets``."""
    spec = RunSpec(
        playbook="down",
        inventory=inventory,
        extravars={"zenops_remove_images": images, "zenops_remove_data": data},
        limit=limit,
        verbosity=ctx.verbosity,
    )
    store = Store(ctx.config, inventory)
    record = _record_for_down(store) if limit is None else None
    if record is not None:  # the services first (the fleet endpoint: clients get refused, not half-served)
        services.remove(ctx, inventory, record.services)
    run = ctx.run(spec)
    if limit is None:  # every host's servers are gone: nothing left to benchmark or restart
        store.remove_record()
        if not keep_secrets:
            store.forget_secrets(ctx.note)
    hosts = []
    for host in sorted(run.stats):
        fact = run.host_facts.get(host, {}).get("zenops_down") or {}
        hosts.append(
            DownHost(
                host=host,
                docker=bool(fact.get("docker", False)),
                containers=list(fact.get("containers") or []),
                images=[str(i) for i in fact.get("images") or []],
            )
        )
    return run, hosts


def _record_for_down(store: Store) -> ServingRecord | None:
    """The serving record, for finding the services to remove first; a damaged one is warned about and the servers
    are removed all the same."""
    try:
        return store.record()
    except statefile.DamagedStateError as e:
        hint = "the servers are removed anyway; the services zenops set up (the gateway: HAProxy) are not"
        statefile.warn_damaged(statefile.DamagedStateError(e.path, e.reason, hint=hint))
        return None
