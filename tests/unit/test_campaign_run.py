"""How a campaign classifies a failed cell (deterministic: recorded, not retried; transient: retried), on the real
error types the steps raise, and which cells a continued campaign runs again."""

from __future__ import annotations

import pytest

from tests.unit.test_campaign_plan import make_spec
from zenops.bench.run import BenchRequest
from zenops.campaign import plan as plan_lib
from zenops.campaign.planned import _todo
from zenops.campaign.state import CampaignState, CellState
from zenops.cloud.errors import CloudAuthError, CloudError, CloudTransientError, QuotaExceededError
from zenops.compat import IncompatiblePairError
from zenops.deployment.lifecycle import classify
from zenops.errors import BenchFailedError, HostFailure, RunFailedError, ZenopsError
from zenops.planner import PlanRefusedError

HEALTH_TASK = "Prove each server healthy (health, models, one completion, platform)"  # roles/vllm_server


def failed_run(message: str, *, unreachable: bool = False, task: str = HEALTH_TASK) -> RunFailedError:
    return RunFailedError("serve.yml", [HostFailure("h1", task, message, unreachable)], rc=2)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (PlanRefusedError("too-big", "the model does not fit", hint="a bigger flavor"), ("plan-refused", False)),
        (BenchFailedError("3 of 6 requests failed"), ("bench-failed", False)),
        (failed_run("ValueError: To serve at least one request with the model's max seq len"), ("kv-cache", False)),
        (
            failed_run("container zenops-vllm-0 stopped before the server was ready (not healthy)"),
            ("health-gate", False),
        ),
        (failed_run("Failed to connect to the host via ssh", unreachable=True), ("transient", True)),
        (failed_run("apt failed", task="Install the Docker engine"), ("run-failed", False)),
        (  # the provision module's words once the cloud profile's replacements are used up
            failed_run(
                "server zenops-c-1 went to ERROR 3 time(s); last fault: Build of instance aborted",
                task="Create the servers",
            ),
            ("server-error", False),
        ),
        (CloudTransientError("503 from nova"), ("transient", True)),
        (CloudError("server went to ERROR 3 times"), ("transient", True)),
        (QuotaExceededError("cores quota"), ("cloud-quota", False)),
        (CloudAuthError("401"), ("cloud-auth", False)),
        (ZenopsError("something else"), ("error", False)),
    ],
)
def test_classify(error, expected):
    assert classify(error) == expected


def test_classify_an_unknown_engine_pair():
    assert classify(IncompatiblePairError("vLLM 9.9 + zentorch 9.9 is not in the table")) == ("engine-pair", False)


def test_a_continued_campaign_runs_what_is_not_done_and_transient_failures_again():
    cells = plan_lib.cells(make_spec())
    state = CampaignState(id="c", name="sweep", spec_path="/f", spec_digest="d", created_at="2026-01-01T00:00:00+00:00")
    statuses = ["done", "failed", "failed", "skipped", "pending", "running", "done"]
    failures = [None, "health-gate", "transient", None, None, None, None]
    for c, st, fl in zip(cells, statuses, failures, strict=False):
        state.cells[c.key] = CellState(c.key, c.group, c.model, c.variant, status=st, failure=fl)
    todo = _todo(cells, state)
    # done and deterministically failed are not run again; transient, skipped, pending, running and new cells are
    assert [c.key for c in todo] == [cells[i].key for i in (2, 3, 4, 5, 7)]
    assert _todo(cells, None) == cells


def test_bench_request_carries_the_label_and_campaign_into_the_manifest_fields():
    req = BenchRequest(label="seqs2", campaign="sweep-2611241305")
    assert (req.label, req.campaign) == ("seqs2", "sweep-2611241305")


def test_progress_line_counts_ended_cells_and_spend():
    from zenops.campaign.results import progress_line  # noqa: PLC0415
    from zenops.campaign.state import ServerState  # noqa: PLC0415

    state = CampaignState(id="c", name="s", spec_path="/f", spec_digest="d", created_at="2026-01-01T00:00:00+00:00")
    state.max_usd = 5.0
    for i, st in enumerate(["done", "done", "failed", "pending"]):
        state.cells[str(i)] = CellState(str(i), "g", "m", "v", status=st)
    state.servers["d"] = ServerState(
        "d", "g", "sandbox", "g", 1.0, created_at="2026-01-01T00:00:00+00:00", deleted_at="2026-01-01T00:30:00+00:00"
    )
    assert progress_line(state, width=8) == "[######..] 2/4 cells done (1 failed), $0.50 of $5.00"
