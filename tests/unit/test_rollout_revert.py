"""What a failed rollout sends back, and in what order: ``InPlace.revert`` and the health gate's revert path
(zenops.rollout.run.Rollout._gate_failed -> _revert), on a three-host fleet behind its gateway. A TEST DOUBLE
(``Steps``) stands for what needs hosts: the serve step (playbooks/serve.yml), the gateway's drain, ready and update.
It records the calls in order; the rollout's state, ledger and serving record are the real ones. The real path runs
in tests/e2e/test_rollout_fleet.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_rollout_cli import Fleet, models  # noqa: F401  (models: a fixture)
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.identity import DeploymentId
from zenops.deployment.record import load_serving_record
from zenops.deployment.rollouts import BatchState
from zenops.deployment.services import gateway as gw_lib
from zenops.errors import ExitCode, HostFailure, RolloutGateError, RunFailedError
from zenops.rollout import run as rollout_run
from zenops.rollout.strategies.in_place import InPlace


class Steps:
    """TEST DOUBLE of the serve step and the gateway. ``calls``: ``serve <hosts> <model dir name>``, ``drain <names>``,
    ``ready <names>``, ``services`` (the deployment's services follow the servers), in order; ``fail``: (step, model
    dir name or "") -> the exception it raises once."""

    def __init__(self, fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fleet = fleet
        self.calls: list[str] = []
        self.fail: dict[tuple[str, str], BaseException] = {}
        m = monkeypatch
        m.setattr(
            rollout_run.Rollout, "serve_hosts", lambda r, request, hosts, *, min_healthy: self.serve(request, hosts)
        )
        real_update = services.update
        m.setattr(services, "update", lambda ctx, view, had: self.services(real_update, ctx, view, had))
        m.setattr(gw_lib, "update", lambda *_a, **_k: pytest.fail("the gateway's backends do not change here"))
        m.setattr(gw_lib, "ready", lambda ctx, inv, gw, names, timeout=60: self.step("ready", names))
        m.setattr(gw_lib, "drain", lambda ctx, inv, gw, names, timeout: self.step("drain", names))

    def step(self, name: str, args: list[str], what: str = "") -> None:
        self.calls.append(f"{name} {','.join(args)}")
        if (name, what) in self.fail:
            raise self.fail.pop((name, what))

    def serve(self, request: dict[str, Any], hosts: list[str]) -> Any:
        model = Path(str(request["model"])).name
        self.step("serve", [*hosts, model], model)
        record = load_serving_record(self.fleet.config, self.fleet.inventory)
        assert record is not None
        return SimpleNamespace(
            plans={h: SimpleNamespace(to_dict=lambda h=h: dict(record.plans[h], model=model)) for h in hosts},
            endpoints={h: list(record.endpoints[h]) for h in hosts},
            images={h: {"ref": f"zenops/vllm:{model}"} for h in hosts},
        )

    def services(self, real: Any, ctx: Any, view: Any, had: Any) -> Any:
        self.calls.append("services")
        return real(ctx, view, had)


@pytest.fixture
def fleet(isolated_home, tmp_path, monkeypatch, models) -> Fleet:  # noqa: F811
    monkeypatch.chdir(tmp_path)
    f = Fleet(load(), tmp_path / "fleet.ini", models)
    f.serve()  # h1, h2, h3 serving tiny-a behind a gateway on h1
    return f


def names(fleet: Fleet, host: str) -> str:
    record = load_serving_record(fleet.config, fleet.inventory)
    assert record is not None
    assert record.gateway is not None
    return ",".join(gw_lib.Gateway.from_dict(record.gateway).names_on([host]))


def start(fleet: Fleet, notes: list[str] | None = None) -> rollout_run.Rollout:
    """A rollout of h1, h2, h3 one host at a time to tiny-b, without the performance gate."""
    req = rollout_run.RolloutRequest(
        changes={"model": str(fleet.models / "tiny-b")}, batch="1", min_healthy=0, perf_gate=False
    )
    ctx = RunContext(fleet.config, note=(notes if notes is not None else []).append)
    return rollout_run.Rollout(ctx, fleet.inventory, req)


def health_failure(host: str) -> RunFailedError:
    return RunFailedError("serve.yml", [HostFailure(host, "Wait for the server's health", "no answer in 600s")], rc=2)


def test_the_health_gate_sends_the_failed_batch_back_first_then_the_batches_before_it(fleet, monkeypatch):
    steps = Steps(fleet, monkeypatch)
    r = start(fleet)
    state = r.prepare()
    assert [b.hosts for b in state.batches] == [["h1"], ["h2"], ["h3"]]
    h1, h2 = names(fleet, "h1"), names(fleet, "h2")

    def serve_fails_on_h2(request: dict[str, Any], hosts: list[str]) -> Any:
        if hosts == ["h2"] and Path(str(request["model"])).name == "tiny-b":
            steps.calls.append("serve h2,tiny-b")
            raise health_failure("h2")
        return Steps.serve(steps, request, hosts)

    monkeypatch.setattr(steps, "serve", serve_fails_on_h2)
    with pytest.raises(RolloutGateError) as e:
        r.run(state)
    assert e.value.exit_code == ExitCode.ROLLOUT_GATE
    assert "health gate failed on h2 (batch 2 of 3)" in e.value.message
    assert "Reverted h2, h1 to the previous release" in e.value.message
    assert steps.calls == [
        # batch 1 goes through
        f"drain {h1}", "serve h1,tiny-b", "services", f"ready {h1}",
        # batch 2's replacement fails its health gate
        f"drain {h2}", "serve h2,tiny-b",
        # the failed batch first (already drained: not drained again), then batch 1, each drained, served the old
        # release, its services following, back in rotation
        "serve h2,tiny-a", "services", f"ready {h2}",
        f"drain {h1}", "serve h1,tiny-a", "services", f"ready {h1}",
    ]  # fmt: skip
    assert not any("h3" in c for c in steps.calls), "a batch not yet started was touched"
    saved = r.ledger.load()
    assert saved is not None
    assert saved.status == "reverted"
    assert [b.status for b in saved.batches] == ["reverted", "reverted", "pending"]
    assert saved.served == {}
    assert saved.drained == []
    record = load_serving_record(fleet.config, fleet.inventory)
    assert record is not None
    assert Path(str(record.request["model"])).name == "tiny-a"


def test_in_place_revert_drains_serves_the_old_release_and_puts_the_batch_back(fleet, monkeypatch):
    steps = Steps(fleet, monkeypatch)
    r = start(fleet)
    r.state = r.prepare()
    batch = r.state.batches[0]
    for host in ("h1", "h2"):  # h1 serves the new release, and so does h2 (another batch's: left alone)
        r.state.served[host] = {"plan": {}, "endpoints": r.record.endpoints[host], "image": {}}
    InPlace(r).revert(batch)
    h1 = names(fleet, "h1")
    assert steps.calls == [f"drain {h1}", "serve h1,tiny-a", "services", f"ready {h1}"]
    assert batch.status == "reverted"
    assert set(r.state.served) == {"h2"}
    assert r.state.drained == []
    saved = r.ledger.load()
    assert saved is not None
    assert saved.batches[0].status == "reverted"


def test_in_place_revert_of_a_drained_batch_does_not_drain_it_again(fleet, monkeypatch):
    steps = Steps(fleet, monkeypatch)
    r = start(fleet)
    r.state = r.prepare()
    h2 = names(fleet, "h2")
    r.state.drained = [h2]
    InPlace(r).revert(BatchState(hosts=["h2"], strategy=InPlace.name))
    assert steps.calls == ["serve h2,tiny-a", "services", f"ready {h2}"]
    assert r.state.drained == []


def test_a_revert_that_fails_leaves_the_rollout_to_abort_and_no_server_drained(fleet, monkeypatch):
    steps = Steps(fleet, monkeypatch)
    notes: list[str] = []
    r = start(fleet, notes)
    state = r.prepare()
    h1, h2 = names(fleet, "h1"), names(fleet, "h2")
    steps.fail[("serve", "tiny-b")] = health_failure("h1")  # the canary's replacement fails its health gate
    steps.fail[("serve", "tiny-a")] = health_failure("h1")  # and so does the old release, sent back
    with pytest.raises(RunFailedError) as e:
        r.run(state)
    assert e.value.failures[0].host == "h1"
    # the operator reads both failures and how to go on, not only the revert's serve error
    assert "health gate failed on h1 (batch 1 of" in e.value.message, e.value.message
    assert "back to the previous release failed too" in e.value.message, e.value.message
    assert "`zenops rollout --abort`" in (e.value.hint or ""), e.value.hint
    assert steps.calls == [
        f"drain {h1}", "serve h1,tiny-b",  # the gate fails
        "serve h1,tiny-a",  # the revert fails: nothing after it for this batch (no services, no ready of its own)
        f"ready {h1}",  # but on the way out the drained server goes back in rotation
    ]  # fmt: skip
    saved = r.ledger.load()
    assert saved is not None
    assert saved.active, "a rollout whose revert failed must stay open for `zenops rollout --abort`"
    assert saved.status != "reverted"
    assert saved.batches[0].status != "reverted"
    assert saved.drained == []
    assert any("no server is left drained" in n for n in notes), notes

    # `--abort` then sends the batch back (its serve passes now)
    steps.calls.clear()
    hosts = start(fleet).abort(saved)
    assert hosts == ["h1"]
    assert steps.calls == [f"drain {h1}", "serve h1,tiny-a", "services", f"ready {h1}"]
    assert h2 not in " ".join(steps.calls)
    again = r.ledger.load()
    assert again is not None
    assert again.status == "reverted"


def test_the_rollout_names_its_deployment_by_its_label_not_its_files_name(fleet):
    """The rollout's state (its JSON result, `zenops status`, the history) names the deployment as its containers,
    metrics and bench results do (DeploymentId.label), not by the name its files are kept under."""
    state = start(fleet).prepare()
    dep = DeploymentId("fleet", None, fleet.inventory)
    assert state.deployment == dep.label == "fleet"
    assert dep.files_name != "fleet"  # fleet-<hash>: what the rollout said before
