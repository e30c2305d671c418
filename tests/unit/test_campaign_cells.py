"""A campaign's cells: the status rules the state keeps (zenops.campaign.state.CampaignState), and a group on your
own hosts run through the deployment's lifecycle with its steps replaced (TEST DOUBLES for serve and bench: nothing
runs), so the sequencing (zenops.campaign.run.Campaign) is seen marking each cell."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.test_campaign_plan import make_spec
from tests.unit.test_campaign_run import failed_run
from zenops import lock
from zenops.campaign import plan as plan_lib
from zenops.campaign.run import Campaign
from zenops.campaign.state import CampaignState, CellState, ServerState, Store
from zenops.config import Config
from zenops.context import RunContext
from zenops.deployment.lifecycle import Deployment
from zenops.errors import BenchFailedError


def _state(*statuses: str) -> CampaignState:
    state = CampaignState(id="s-1", name="s", spec_path="/f", spec_digest="d", created_at="2026-01-01T00:00:00+00:00")
    for i, status in enumerate(statuses):
        state.cells[f"k{i}"] = CellState(f"k{i}", "g", "m", "v", status=status)
    return state


# --- the rules -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "interrupted", "status"),
    [
        (("done", "done"), False, "done"),
        (("done", "failed"), False, "partial"),
        (("failed", "failed"), False, "failed"),
        (("done", "skipped", "failed"), False, "over-budget"),
        (("done", "pending"), False, "interrupted"),
        (("done", "running"), False, "interrupted"),
        (("done", "done"), True, "interrupted"),
    ],
)
def test_a_campaign_ends_with_the_status_its_cells_say(statuses, interrupted, status):
    state = _state(*statuses)
    state.finish(interrupted=interrupted)
    assert state.status == status
    assert state.finished_at is not None


def test_a_resumed_campaign_runs_again_what_was_running_skipped_or_failed_for_a_transient_reason():
    state = _state("running", "skipped", "failed", "failed", "done")
    state.cells["k2"].failure, state.cells["k3"].failure = "transient", "health-gate"
    state.track([("k0", "g", "m", "v"), ("k1", "g", "m", "v"), ("k2", "g", "m", "v"), ("k3", "g", "m", "v"),
                 ("k4", "g", "m", "v"), ("new", "g2", "m2", "v2")])  # fmt: skip
    assert {k: c.status for k, c in state.cells.items()} == {
        "k0": "pending", "k1": "pending", "k2": "pending", "k3": "failed", "k4": "done", "new": "pending",
    }  # fmt: skip
    assert state.cells["new"].group == "g2"


def test_a_cell_s_attempts_failures_and_durations_are_recorded():
    state = _state("pending", "pending")
    cs = state.start("k0")
    assert (cs.status, cs.attempts, cs.failure, cs.reason) == ("running", 1, None, None)
    state.fail(["k0"], "transient", "x" * 3000)
    assert (cs.status, cs.failure, len(cs.reason or ""), cs.attempts) == ("failed", "transient", 2000, 1)
    state.start("k0")
    assert (cs.attempts, cs.failure, cs.reason) == (2, None, None)
    state.done("k0", ["r1"], 12.34, 5.66, first=True)
    assert (cs.status, cs.run_dirs, cs.serve_s, cs.bench_s) == ("done", ["r1"], 12.3, 5.7)
    assert state.samples == {"first_serve_s": [12.3], "bench_s": [5.7]}
    state.fail(["k1"], "cloud-quota", "no room", attempt=True)  # its server never came: an attempt of the cell
    assert state.cells["k1"].attempts == 1
    state.skip(["k1"], "budget")
    state.interrupt("k0")
    assert [(c.status, c.reason) for c in state.cells.values()] == [("pending", "interrupted"), ("skipped", "budget")]


def test_campaign_down_closes_every_server_and_a_running_campaign():
    state = _state("done")
    state.servers["a"] = ServerState("a", "g", "c", "g", 1.0, created_at="2026-01-01T00:00:00+00:00")
    state.torn_down()
    assert state.servers["a"].deleted_at is not None
    assert state.status == "torn-down"
    state.status = "done"
    state.torn_down()
    assert state.status == "done"  # an ended campaign keeps its status


# --- a group run through the lifecycle -------------------------------------------------------------------------------


@pytest.fixture
def own_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Campaign, Path, list[Any]]:
    monkeypatch.delenv(lock.ENV, raising=False)
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "bench-hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n")
    spec = make_spec(cloud=None, inventory=inv, flavors=(), variants=make_spec().variants[:1], models=("/m/a", "/m/b"))
    campaign = Campaign(RunContext(config), spec, Store(config), retries=1)
    campaign.state = CampaignState(id="s-1", name="s", spec_path="/f", spec_digest="d", created_at="2026-01-01")
    campaign.state.track((c.key, c.group, c.model, c.variant) for c in plan_lib.cells(spec))
    benched: list[Any] = []
    monkeypatch.setattr(Deployment, "serve_engine", lambda self, request: None)
    monkeypatch.setattr(Deployment, "stop_servers", lambda self, **kw: benched.append("stopped"))
    return campaign, inv, benched


def test_a_group_marks_each_cell_and_retries_only_a_transient_failure(own_hosts, monkeypatch):
    campaign, _inv, benched = own_hosts
    cells = plan_lib.cells(campaign.spec)
    answers: list[Any] = [
        failed_run("Failed to connect to the host via ssh", unreachable=True),  # the first cell: transient, again
        None,  # ... then measured
        BenchFailedError("2 requests failed"),  # the second: deterministic, not again
    ]

    def bench(self: Deployment, request: Any, **_kw: Any) -> Any:
        benched.append(request)
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return SimpleNamespace(run_dir=Path("/runs/x"), report=SimpleNamespace(results=[]))

    monkeypatch.setattr(Deployment, "bench", bench)
    campaign._group(cells[0].group, cells)
    first, second = (campaign.state.cells[c.key] for c in cells)
    assert (first.status, first.attempts, first.run_dirs) == ("done", 2, ["/runs/x"])
    assert (second.status, second.failure, second.attempts) == ("failed", "bench-failed", 1)
    requests = [r for r in benched if r != "stopped"]
    assert {r.deployment for r in requests} == {"bench-hosts"}  # the hosts' label, as before: the inventory's stem
    assert {(r.campaign, r.label, r.run_id) for r in requests[1:]} == {
        ("s-1", cells[0].variant, f"{cells[0].key}-r1"), ("s-1", cells[1].variant, f"{cells[1].key}-r1"),
    }  # fmt: skip
    assert benched[-1] == "stopped"  # own hosts stay; the servers the campaign started go
    assert answers == []
