"""`zenops rollout`: change a deployment's model, engine or serving settings host by host behind its gateway.

Library: zenops.rollout (plan: batches and gate verdicts; run: the state machine; state: the ledger). Playbooks:
playbooks/gateway.yml (drain, ready), playbooks/serve.yml (replace, health gate), playbooks/bench.yml (the
performance gate). Plain Ansible users: playbooks/rollout.yml.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import (
    DurationType,
    RequestFlags,
    cloud_option,
    deployment_argument,
    deployment_option,
    dry_run_option,
    inventory_option,
    json_option,
    option_group,
    request_options,
    tuned_fields,
    tuned_option,
    tuned_options,
    yes_option,
)

if TYPE_CHECKING:
    from zenops.cli.options import TunedOptions
    from zenops.deployment.rollouts import RolloutState
    from zenops.rollout import RolloutResult


@dataclass(frozen=True)
class BatchFlags:
    """How the fleet is cut into batches (one ``batch`` argument)."""

    batch: str
    canary: int
    max_unavailable: int | None
    allow_downtime: bool
    revert: bool


@dataclass(frozen=True)
class GateFlags:
    """The drain and the gates of each batch (one ``gate`` argument)."""

    drain_timeout: int
    min_healthy: int
    perf_gate: bool
    max_tps_drop: float
    max_ttft_rise: float
    max_spread: float
    gate_concurrency: int
    gate_prompts: int
    gate_seconds: int
    gate_answer_timeout: int
    gate_output_len: int
    gate_warmups: int
    gate_runs: int
    runs_dir: Path


_batch_options = option_group(
    "batch",
    BatchFlags,
    [
        click.option(
            "--batch",
            default="1",
            show_default=True,
            metavar="N|P%",
            help="Hosts per batch, or a percentage of the fleet.",
        ),
        click.option(
            "--canary",
            type=click.IntRange(min=0),
            default=1,
            show_default=True,
            help="Hosts of the first batch (0: none).",
        ),
        click.option(
            "--max-unavailable",
            type=click.IntRange(min=1),
            metavar="N",
            help="Instances out of rotation at once, at most (cuts batches). The last serving instance is never "
            "drained.",
        ),
        click.option(
            "--allow-downtime",
            is_flag=True,
            help="Allow a batch that takes every instance out (a one-host fleet that cannot surge: replaced in place).",
        ),
        click.option(
            "--revert/--no-revert", default=True, show_default=True, help="Send changed hosts back when a gate fails."
        ),
    ],
)
_gate_options = option_group(
    "gate",
    GateFlags,
    [
        click.option(
            "--drain-timeout",
            type=DurationType(0),
            default=600,
            show_default=True,
            help="The longest expected request: how long a drained server's in-flight requests may take to finish.",
        ),
        click.option(
            "--min-healthy",
            type=DurationType(0),
            default=10,
            show_default=True,
            help="How long a new server must stay healthy after its first good answer.",
        ),
        click.option(
            "--perf-gate/--no-perf-gate",
            default=True,
            show_default=True,
            help="Benchmark new servers against the baseline.",
        ),
        click.option(
            "--max-tps-drop",
            type=click.FloatRange(0, 1),
            default=0.10,
            show_default=True,
            help="Fail on output tok/s lower by more than this (fraction) beyond the measured spread.",
        ),
        click.option(
            "--max-ttft-rise",
            type=click.FloatRange(min=0),
            default=0.25,
            show_default=True,
            help="Fail on median TTFT higher by more than this (fraction) beyond the measured spread.",
        ),
        click.option(
            "--max-spread",
            type=click.FloatRange(min=0),
            default=0.25,
            show_default=True,
            help="Run-to-run spread above which the gate cannot tell: the rollout pauses (exit 16).",
        ),
        click.option(
            "--gate-concurrency",
            type=click.IntRange(min=1),
            default=4,
            show_default=True,
            help="The gate's concurrency.",
        ),
        click.option(
            "--gate-seconds",
            type=DurationType(1),
            default=10,
            show_default=True,
            help="Each measured gate run lasts at least this long: its prompts are sized from a first run's pace "
            "(a fixed count lasts 1 s on a tiny model, too short to tell a change from noise).",
        ),
        click.option(
            "--gate-prompts",
            type=click.IntRange(min=1),
            default=32,
            show_default=True,
            help="Prompts of the first gate run, which measures the servers' pace (the least any run has).",
        ),
        click.option(
            "--gate-answer-timeout",
            type=DurationType(1),
            default=120,
            show_default=True,
            help="How long a server may take to answer the gate's first completion; longer: the fleet is too busy "
            "to measure and the rollout pauses (exit 16), nothing drained.",
        ),
        click.option(
            "--gate-output-len", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens per reply."
        ),
        click.option(
            "--gate-warmups",
            type=click.IntRange(min=0),
            default=8,
            show_default=True,
            help="Unmeasured requests before each gate run: a server just started answers its first requests slower.",
        ),
        click.option(
            "--gate-runs",
            type=click.IntRange(min=1),
            default=3,
            show_default=True,
            help="A batch's gate that fails on its figures alone (every request answered) measures again, up to this "
            "many runs in all, and judges their means: one run's noise is not a regression, a slower release stays "
            "slower in every run.",
        ),
        click.option(
            "--runs-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("runs"),
            show_default=True,
            help="Where the gates' bench artifacts go (<runs-dir>/<rollout id>/).",
        ),
    ],
)


@click.command()
@deployment_argument
@inventory_option
@deployment_option
@cloud_option
@request_options("rollout")
@tuned_option
@_batch_options
@_gate_options
@dry_run_option("Print the batches and what changes on each host; change nothing.")
@click.option("--abort", is_flag=True, help="Send the hosts the rollout in progress changed back, and stop it.")
@yes_option
@json_option
@click.pass_context
def rollout(
    ctx: click.Context,
    inventory: Path | None,
    deployment: str | None,
    cloud: str | None,
    request: RequestFlags,
    tuned_file: Path | None,
    batch: BatchFlags,
    gate: GateFlags,
    dry_run: bool,
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
    from zenops.rollout import GateLimits, RolloutRequest  # noqa: PLC0415
    from zenops.rollout import rollout as run_rollout  # noqa: PLC0415

    app = get_app(ctx)
    target = resolve_target(app.config, inventory=inventory, deployment=deployment, cloud=cloud, command="rollout")
    changes = request.changes()  # only what was given (--instances auto: back to the planner's choice)
    tuned = None
    if tuned_file is not None:
        tuned = _tuned(ctx, app, tuned_file, request.model, target.hosts)
        if tuned is not None:
            changes.update(tuned.values)
    req = RolloutRequest(
        changes=changes,
        batch=batch.batch,
        canary=batch.canary,
        max_unavailable=batch.max_unavailable,
        allow_downtime=batch.allow_downtime,
        revert=batch.revert,
        drain_timeout=gate.drain_timeout,
        min_healthy=gate.min_healthy,
        perf_gate=gate.perf_gate,
        limits=GateLimits(max_tps_drop=gate.max_tps_drop, max_ttft_rise=gate.max_ttft_rise, max_spread=gate.max_spread),
        gate_concurrency=gate.gate_concurrency,
        gate_prompts=gate.gate_prompts,
        gate_seconds=gate.gate_seconds,
        answer_timeout=gate.gate_answer_timeout,
        gate_output_len=gate.gate_output_len,
        gate_warmups=gate.gate_warmups,
        gate_runs=gate.gate_runs,
        dry_run=dry_run,
        runs_dir=gate.runs_dir,
        tuned_reason=tuned.reason if tuned is not None else None,
    )
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

    with app.run_context() as run_ctx, Deployment.open(run_ctx, target, check=dry_run):
        result = run_rollout(
            run_ctx,
            target.hosts,
            req,
            abort=abort,
            on_plan=None if app.json else lambda s: _print_plan(app, s),
            confirm=lambda spend: agree(app, spend, yes=yes),
        )
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
