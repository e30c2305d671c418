"""A deployment's lifecycle (zenops.deployment.lifecycle): opening one takes its lock, a step inside the same command
finds it open, a dry run takes no lock, and provisioning retries a transient failure only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from zenops import lock
from zenops.cloud import ledger
from zenops.cloud.errors import CloudTransientError, QuotaExceededError
from zenops.config import Config, load
from zenops.context import RunContext
from zenops.deployment import provision
from zenops.deployment.common import CloudRequest
from zenops.deployment.identity import DeploymentId
from zenops.deployment.lifecycle import Deployment
from zenops.errors import LockedError, UsageError, ZenopsError
from zenops.lock import lock_path

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

DEP = DeploymentId("fle", "c")


@pytest.fixture
def config(isolated_home, monkeypatch) -> Config:
    monkeypatch.delenv(lock.ENV, raising=False)
    return load()


def _holder(config: Config, key: str) -> int | None:
    holder = lock.read_holder(lock_path(config, key))
    return holder.pid if holder else None


def test_open_holds_the_lock_and_a_step_finds_the_open_deployment(config):
    ctx = RunContext(config)
    with pytest.raises(ZenopsError, match="is not open here"):
        Deployment.held(DEP)  # nothing opened it: no step can change it
    with Deployment.open(ctx, DEP) as opened:
        assert _holder(config, DEP.key) == os.getpid()
        assert Deployment.held(DeploymentId("fle", "c", Path("x.yml"))) is opened  # however it is named
        with pytest.raises(LockedError), Deployment.open(ctx, DEP):
            pass  # a second open of the same deployment is refused, not nested
    assert not lock_path(config, DEP.key).exists()
    with pytest.raises(ZenopsError, match="is not open here"):
        Deployment.held(DEP)


def test_a_dry_run_takes_no_lock_and_is_not_open_for_changes(config):
    with Deployment.open(RunContext(config), DEP, check=True):
        assert not lock_path(config, DEP.key).exists()
        with pytest.raises(ZenopsError, match="is not open here"):
            Deployment.held(DEP)


def _dep(inv: str) -> ledger.Deployment:
    return ledger.Deployment(
        name="fle", cloud="c", flavor="f", image="i", count=1, network_mode="provider", price_per_hour=0.1,
        status="ready", inventory=inv,
    )  # fmt: skip


def test_provision_retries_a_transient_failure_and_takes_up_s_inventory(config, monkeypatch):
    errors = [CloudTransientError("the API did not answer")]
    calls: list[str] = []

    def up_cloud(_ctx: Any, req: CloudRequest, **_kw: Any) -> tuple[None, ledger.Deployment]:
        calls.append(str(req.name))
        if errors:
            raise errors.pop()
        return None, _dep("/state/fle.yml")

    monkeypatch.setattr(provision, "up_cloud", up_cloud)
    retried: list[str] = []
    with Deployment.open(RunContext(config), DEP) as d:
        d.provision(
            CloudRequest(cloud="c", flavor="f", name="fle"), retries=1, on_retry=lambda f, _e: retried.append(f)
        )
        assert d.inventory == Path("/state/fle.yml")
    assert calls == ["fle", "fle"]
    assert retried == ["transient"]


def test_provision_does_not_retry_a_deterministic_failure_nor_provision_another_deployment(config, monkeypatch):
    calls: list[int] = []

    def up_cloud(*_a: Any, **_kw: Any) -> Any:
        calls.append(1)
        raise QuotaExceededError("quota exceeded")

    monkeypatch.setattr(provision, "up_cloud", up_cloud)
    with Deployment.open(RunContext(config), DEP) as d:
        with pytest.raises(QuotaExceededError, match="quota"):
            d.provision(CloudRequest(cloud="c", flavor="f", name="fle"), retries=3)
        assert calls == [1]
        with pytest.raises(UsageError, match="does not provision"):
            d.provision(CloudRequest(cloud="c", flavor="f", name="other"))
    assert calls == [1]
