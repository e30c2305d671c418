"""`zenops up` for hosts you already have: wait until they answer and are ready, then install the Docker engine."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zenops.config import Config
from zenops.runner import HostStats, ProgressSink, RunResult, RunSpec, run_playbook, settings_from_config


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


def up_inventory(
    config: Config,
    inventory: Path,
    *,
    limit: str | None = None,
    check: bool = False,
    verbosity: int = 0,
    sink: ProgressSink | None = None,
    cancel: threading.Event | None = None,
) -> UpResult:
    spec = RunSpec(
        playbook="up",
        inventory=inventory,
        extravars=config.docker.role_vars(),
        limit=limit,
        check=check,
        verbosity=verbosity,
    )
    run = run_playbook(spec, settings_from_config(config), sink, cancel)
    return UpResult(run=run, hosts=summarize(run))
