"""TEST DOUBLE of what a rollout that adds cloud servers (surge, blue/green) needs of a cloud, Ansible and HAProxy:
zenops.deployment.surge's retire_server and serving_server_names, the rollout's serve and bench steps, the gateway's
update, ready and drain. It records the calls in order and keeps the ledger as the real ones do; each strategy's
tests add how servers are added (test_rollout_surge.py, test_rollout_bluegreen.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_rollout_cli import Fleet
from zenops.cloud import ledger
from zenops.deployment import surge as deploy
from zenops.deployment.record import load_serving_record
from zenops.deployment.services import gateway as gw_lib
from zenops.rollout import gates
from zenops.rollout import run as rollout_run
from zenops.rollout.plan import Sample


class AddingCloud:
    """``calls``: what happened, in order; ``tok_s``: output tok/s each host's servers measure; ``fail``: a step name
    -> the exception it raises once; ``in_cloud``: the deployment's serving servers as the cloud has them (``old`` at
    first); ``quota_ok``: whether the preflight finds room."""

    def __init__(self, fleet: Fleet, monkeypatch: pytest.MonkeyPatch, *, old: list[str], new: list[str]) -> None:
        self.fleet = fleet
        self.first = old[0]  # whose plan the new servers serve
        self.calls: list[str] = []
        self.tok_s = dict.fromkeys(old + new, 100.0)
        self.fail: dict[str, BaseException] = {}
        self.quota_ok = True
        self.in_cloud = set(old)
        m = monkeypatch
        m.setattr(deploy, "retire_server", self.retire_server)
        m.setattr(deploy, "serving_server_names", lambda dep: sorted(self.in_cloud))
        m.setattr(
            rollout_run.Rollout, "serve_hosts", lambda r, request, hosts, *, min_healthy: self.serve(request, hosts)
        )
        m.setattr(gates.PerfGate, "measure", lambda g, hosts, label, prompts=None: self.bench(hosts))
        m.setattr(gw_lib, "update", self.update)
        m.setattr(gw_lib, "ready", lambda ctx, inv, gw, names, timeout=60: self.step("ready", names))
        m.setattr(gw_lib, "drain", lambda ctx, inv, gw, names, timeout: self.step("drain", names))

    def step(self, name: str, names: list[str]) -> list[Any]:
        self.calls.append(f"{name} {','.join(names)}")
        if name in self.fail:
            raise self.fail.pop(name)
        return []

    def retire_server(self, ctx: Any, dep: ledger.Deployment, name: str) -> ledger.Deployment:
        self.step("retire", [name])
        self.in_cloud.discard(name)
        dep.servers = [s for s in dep.servers if s["name"] != name]
        dep.count = len(dep.servers)
        ledger.save(self.fleet.config.state_dir, dep)
        return dep

    def serve(self, request: dict[str, Any], hosts: list[str]) -> Any:
        self.step("serve", [*hosts, Path(str(request["model"])).name])
        record = load_serving_record(self.fleet.config, self.fleet.inventory)
        assert record is not None
        plan = dict(record.plans[self.first], model=str(request["model"]))
        return SimpleNamespace(
            plans={h: SimpleNamespace(to_dict=lambda plan=plan: plan) for h in hosts},
            endpoints={h: [{"instance": 0, "port": 8000, "url": f"http://{h}.example:8000/v1"}] for h in hosts},
            images={h: {"ref": "zenops/vllm:new"} for h in hosts},
        )

    def bench(self, hosts: list[str]) -> dict[str, Sample]:
        self.step("bench", sorted(hosts))
        return {f"{h}-8000": Sample(self.measured(h), 50.0) for h in hosts}

    def measured(self, host: str) -> float:
        """The output tok/s ``host``'s servers measure in this gate run."""
        return self.tok_s[host]

    def update(self, ctx: Any, inventory: Path, gw: gw_lib.Gateway, backends: Any) -> gw_lib.Gateway:
        backends = tuple(backends)
        self.calls.append("gateway " + ",".join(f"{b.name}@{b.address}" for b in backends))
        return dataclasses.replace(gw, backends=backends)
