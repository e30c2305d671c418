"""What `zenops campaign run` and `zenops campaign down` call: the checks before a campaign starts (its plan, the
budget, the operator's yes) and the errors it ends with; the removal of what a campaign left on its cloud.

The run itself (zenops.campaign.run.Campaign) sequences the cells; the steps are the deployment's lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.campaign import plan as plan_lib
from zenops.campaign.planned import Planned, plan_campaign, spend_of
from zenops.campaign.run import Campaign
from zenops.campaign.spec import CampaignSpec
from zenops.campaign.state import CampaignState, Store
from zenops.context import RunContext
from zenops.deployment.lifecycle import leak_proof
from zenops.errors import CanceledError, CellsFailedError, OverBudgetError, UsageError

if TYPE_CHECKING:
    from zenops.spend import Spend


def run_campaign(
    ctx: RunContext,
    spec: CampaignSpec,
    store: Store,
    *,
    new: bool = False,
    within_budget: bool = False,
    on_plan: Callable[[Planned], None] | None = None,
    confirm: Callable[[Spend], bool] | None = None,
) -> CampaignState:
    """Plan (refusing over budget before anything is created), then run or continue the campaign. Raises
    OverBudgetError (17) when the budget stopped it, CellsFailedError (18) when cells failed, after the teardown.
    ``within_budget``: a projection over the cap does not refuse the start; the checks before each step stop it.
    ``confirm``: asked what a campaign on a cloud will create and cost (:func:`spend_of`) before anything is
    created or recorded; False: nothing is (CanceledError)."""
    planned = plan_campaign(ctx, spec, store)
    if new:
        planned = replace(planned, state=None, todo=list(planned.cells))
    if planned.state is not None and not planned.todo:
        raise UsageError(
            f"campaign {planned.state.id} has nothing left to run (every cell is done or failed for good)",
            hint=f"`zenops campaign report {planned.state.id}`, or `zenops campaign run {spec.path} --new` to "
            "measure again",
        )
    if on_plan is not None:
        on_plan(planned)
    if within_budget:
        if spec.budget.max_usd is not None and planned.projection.usd > spec.budget.max_usd:
            ctx.note(
                f"projected ${planned.projection.usd:.2f} is over budget.max_usd ${spec.budget.max_usd:.2f}: "
                "--within-budget runs the cells the budget covers, in order, and skips the rest"
            )
    else:
        plan_lib.check_budget(planned.projection, spec.budget.max_usd)
    if confirm is not None and spec.cloud and not confirm(spend_of(planned)):
        raise CanceledError("nothing was created", hint="pass --yes to run the campaign without asking")
    campaign = Campaign(ctx, spec, store)
    campaign.open(planned, new=new)
    state = campaign.run(planned)
    counts = state.counts()
    if counts.get("skipped"):
        raise OverBudgetError(
            f"campaign {state.id} stopped at its budget: {counts.get('done', 0)} cell(s) done, "
            f"{counts['skipped']} skipped"
            + (f", {counts['failed']} failed (`zenops campaign status {state.id}`)" if counts.get("failed") else "")
            + f"; spent ${state.spent():.2f} of ${spec.budget.max_usd:.2f}; torn down",
            hint=f"`zenops campaign report {state.id}` reports what was measured (labelled partial); raise "
            "budget.max_usd and run again to measure the rest",
        )
    if counts.get("failed"):
        failed = [c for c in state.cells.values() if c.status == "failed"]
        raise CellsFailedError(
            f"campaign {state.id}: {len(failed)} cell(s) failed: "
            + "; ".join(f"{c.group}/{Path(c.model).name}/{c.variant}: {c.failure}" for c in failed[:6]),
            hint=f"`zenops campaign status {state.id}` shows each reason; the other cells are in the report",
        )
    return state


def down_campaign(
    ctx: RunContext, store: Store, campaign_id: str, *, confirm: Callable[[Spend], bool] | None = None
) -> list[dict[str, Any]]:
    """Remove whatever the campaign still has on its cloud (its mark), and close its servers in the state.
    ``confirm``: asked what is deleted before anything is (False: nothing is, CanceledError)."""
    from zenops.deployment.teardown import down_locked  # noqa: PLC0415

    state = store.load(campaign_id)
    cloud = next((s.cloud for s in state.servers.values() if s.cloud), None)
    if cloud is None:
        return []
    result = down_locked(
        ctx.config, cloud=cloud, campaign=campaign_id, note=ctx.note, confirm=confirm, command="zenops campaign down"
    )
    state.torn_down()
    state.leaks = len(leak_proof(ctx.config, cloud, campaign_id, (s.deployment for s in state.servers.values())))
    store.save(state)
    return result.removed
