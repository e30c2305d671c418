"""`zenops rollout`: change a deployment's model, engine or serving settings host by host behind its gateway.

Library: zenops.rollout (plan: batches and gate verdicts; run: the state machine; state: the ledger). Playbooks:
playbooks/gateway.yml (drain, ready), playbooks/serve.yml (replace, health gate), playbooks/bench.yml (the
performance gate). Plain Ansible users: playbooks/rollout.yml.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import (
    RequestFlags,
    Rows,
    RowValues,
    deployment_argument,
    json_option,
    options,
    tuned_fields,
    tuned_options,
)
from zenops.option_table import request_from_rows

if TYPE_CHECKING:
    from zenops.cli.options import TunedOptions
    from zenops.deployment.rollouts import RolloutState
    from zenops.rollout import RolloutResult


@click.command()
@deployment_argument
@options(
    "rollout",
    "inventory",
    "deployment",
    "cloud",
    Rows("request", group="serve"),
    "tuned_file",
    Rows("settings", request="RolloutRequest"),  # the batches, the gates, --runs-dir, --dry-run
    "abort",
    "yes",
)
@json_option
@click.pass_context
def rollout(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    request: RequestFlags,
    tuned_file: Path | None,
    settings: RowValues,
    abort: bool,
    yes: bool,
) -> None:
    """Change a deployment's model, engine or settings host by host, behind its gateway, without a failed request.

    \b
      zenops rollout -i fleet.yml --model ./tiny-b --dry-run     the batches and what changes on each host
      zenops rollout -i fleet.yml --model ./tiny-b               one host at a time, the first as the canary
      zenops rollout -i fleet.yml --max-num-seqs 8 --batch 25%
      zenops rollout -i fleet.yml --tuned tuned.yaml --dry-run   what a campaign measured best for its model
      zenops rollout -i fleet.yml --abort                        send the changed hosts back

    Only what you pass changes; everything else stays as `zenops up` left it (the serving record); with --tuned
    FILE, the options of the model's entry (the deployment's model, or --model) count as passed. Before
    anything changes: the new pair and plans are checked on every host's saved facts, and (--perf-gate) `vllm
    bench serve` measures every server (each run after --gate-warmups unmeasured requests): a first run of
    --gate-prompts gives the pace, the runs after it last at least --gate-seconds and repeat until the last two
    agree within --max-spread (5 runs, or 300 s per server of those measured in turn, at most): the baseline and
    its run-to-run spread. Servers too busy to answer within --gate-answer-timeout (live traffic saturates them):
    the rollout pauses (exit 16).

    \b
    Each batch: drain its servers in the gateway (in-flight requests finish, --drain-timeout) -> replace them
    (health gate: /health, /v1/models, a completion, the platform, then --min-healthy seconds of health)
    -> performance gate: the new servers and an untouched control server measured at the same time (one after
    another when their facts show one kernel: containers on one machine would measure each other); fail on
    output tok/s lower by more than --max-tps-drop, or median TTFT higher by more than --max-ttft-rise, beyond
    the spread (the control's drift is taken out); too noisy: pause -> back in rotation.

    \b
    One host: a cloud deployment (`zenops up --cloud`) whose gateway has a server of its own (--gateway-flavor)
    surges: a new server serves the new release and passes the gates (the old one, measured at the same time, is
    the control), joins the gateway, then the old one is drained and deleted; no room for it in the quota: refused
    before anything changes. The new server costs money: the rollout says what and asks first (default No); without
    a terminal (scripts, CI) it needs --yes (an in-place rollout creates nothing and does not ask). Elsewhere one
    host needs --allow-downtime (replaced in place, clients refused).

    \b
    A failed gate sends the failed batch and every batch before it back to the previous release through the
    same drain and stops (exit 15, naming the gate, host and figures; --no-revert leaves them). Ctrl-C or a lost
    controller: re-run the same command, it resumes; no server stays drained. One mutating command per
    deployment at a time (exit 14 names the holder). Exit codes: 14 locked, 15 gate failed, 16 paused (too
    noisy, or too busy to measure). History: `zenops status -i fleet.yml`; gate artifacts: <runs-dir>/<rollout id>/.
    """
    from zenops.cli.confirm import agree  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415
    from zenops.rollout import RolloutRequest  # noqa: PLC0415
    from zenops.rollout import rollout as run_rollout  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="rollout")
    changes = request.changes()  # only what was given (--instances auto: back to the planner's choice)
    tuned = None
    if tuned_file is not None:
        tuned = _tuned(ctx, app, tuned_file, request.model, target.hosts)
        if tuned is not None:
            changes.update(tuned.values)
    reason = tuned.reason if tuned is not None else None
    req = request_from_rows(RolloutRequest, settings.values, changes=changes, tuned_reason=reason)
    from zenops.deployment import services  # noqa: PLC0415
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

    with app.run_context() as run_ctx, Deployment.open(run_ctx, target, check=req.dry_run):
        # a scaling loop paused, its replicas taken in (services.loops_paused); a dry run changes nothing
        paused = services.loops_paused(run_ctx, app.config, target.hosts, by="zenops rollout", reason="a rollout")
        with nullcontext() if req.dry_run else paused:
            result = run_rollout(
                run_ctx, target.hosts, req, abort=abort, on_plan=None if app.json else lambda s: _print_plan(app, s),
                confirm=lambda spend: agree(app, spend, yes=yes),
            )  # fmt: skip
    _report(app, result, abort, tuned)


def _tuned(ctx: click.Context, app: App, path: Path, model: str | None, inventory: Path) -> TunedOptions | None:
    """The changes a tuned file brings: the entry of --model, else of the model the deployment serves (None: no
    serving record, the rollout refuses with its own error). What no rollout can change is left out, with a note."""
    from zenops.deployment.store import Store  # noqa: PLC0415

    if model is None:
        record = Store(app.config, inventory).record()
        if record is None:
            return None
        model = str(record.request.get("model") or record.model_spec)
    tuned = tuned_options(ctx, path, model, tuned_fields("rollout"))
    app.note(tuned.describe("zenops rollout"))
    return tuned


def _print_plan(app: App, state: RolloutState) -> None:
    from zenops.rollout.run import describe_changes  # noqa: PLC0415
    from zenops.rollout.strategies import STRATEGIES  # noqa: PLC0415

    app.err.print(f"{state.id}: {escape(describe_changes(state.from_request, state.to_request))}")
    for i, b in enumerate(state.batches):
        marks = {"done": "done", "pending": "", "reverted": "reverted"}.get(b.status, b.status)
        hosts = ", ".join(
            f"{h} ({state.changes.get(h, {}).get('kind', '?')}: {'; '.join(state.changes.get(h, {}).get('diffs', []))})"
            for h in b.hosts
        )
        app.err.print(f"  batch {i + 1}{' (canary)' if i == 0 and len(state.batches) > 1 else ''}: {escape(hosts)}"
                      + (f" [{marks}]" if marks else ""))  # fmt: skip
        for line in STRATEGIES[b.strategy].describe(b):
            app.err.print(f"    {escape(line)}")


def _report(app: App, result: RolloutResult, abort: bool, tuned: TunedOptions | None = None) -> None:
    state = result.state
    if app.json:
        extra = {"tuned": tuned.config.to_dict()} if tuned else {}
        app.emit_json({"type": "result", "command": "rollout", "ok": True, "abort": abort, **result.to_dict(), **extra})
        return
    if result.dry_run:
        app.out.print("dry run: nothing changed (args: a container restart; image: another engine image; model)")
        return
    if abort:
        app.out.print(f"{state.id} aborted: the changed hosts serve the previous release again")
        return
    walls = ", ".join(f"batch {i + 1} {b.wall_s:.0f}s" for i, b in enumerate(state.batches) if b.wall_s is not None)
    app.out.print(f"{state.id} done: {len(state.batches)} batch(es) ({walls}); gate artifacts in {state.run_dir}")
