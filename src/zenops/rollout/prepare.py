"""What a rollout is asked (:class:`RolloutRequest`), and its planning before any host is touched (nothing changes
here): the request it starts from and the one it goes to, the new plans from the hosts' saved facts, what changes on
each host, and the refusals (llama.cpp serving, another rollout in progress, nothing to change, no gateway).
zenops.rollout.run.Rollout.prepare puts them together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops import compat, request_options
from zenops.deployment.rollouts import RolloutState
from zenops.errors import UsageError, ZenopsError
from zenops.rollout import strategies
from zenops.rollout.plan import GateLimits, GateSizing, host_change

if TYPE_CHECKING:
    from zenops.context import RunContext
    from zenops.deployment import services

# ServeRequest fields a rollout may change (the same model/engine/plan options as `zenops up`)
# what a rollout may change: the table's changeable options (zenops.request_options, one declaration each)
CHANGEABLE = request_options.CHANGEABLE


@dataclass(frozen=True)
class RolloutRequest:
    changes: Mapping[str, Any]  # ServeRequest field -> new value (only what the operator asked to change)
    strategy: str = strategies.AUTO  # how the batches go to the new release: zenops.rollout.strategies
    batch: str = "1"
    canary: int = 1
    max_unavailable: int | None = None
    allow_downtime: bool = False
    revert: bool = True
    drain_timeout: int = 600  # the longest expected request, seconds
    min_healthy: int = 10
    perf_gate: bool = True
    limits: GateLimits = field(default_factory=GateLimits)
    gate_concurrency: int = 4
    gate_prompts: int = 32  # the first (sizing) run's prompts; the measured runs last at least gate_seconds
    gate_seconds: float = 10.0
    gate_input_len: int = 64
    gate_output_len: int = 64
    # unmeasured requests before each gate run: a server just started (the new ones, and every server of a fleet
    # whose `up` just ended) answers its first requests slower, which read as a regression or as run-to-run spread
    gate_warmups: int = 8
    baseline_repeats: int = 2  # the baseline is the last this many runs, once they agree within --max-spread
    baseline_max_repeats: int = 5
    baseline_time_limit: float = 300.0
    gate_runs: int = 3  # a batch's gate that fails on its figures alone measures again, up to this many runs in all
    # how long a server may take to answer the gate's first check: longer and the fleet is too busy to measure
    answer_timeout: int = 120
    dry_run: bool = False
    runs_dir: Path = Path("runs")
    tuned_reason: str | None = None  # --tuned: the campaign and figures behind the changes (the new plans' reason)

    @property
    def sizing(self) -> GateSizing:
        return GateSizing(
            first_prompts=self.gate_prompts,
            min_seconds=self.gate_seconds,
            repeats=self.baseline_repeats,
            max_repeats=max(self.baseline_repeats, self.baseline_max_repeats),
            time_limit_s=self.baseline_time_limit,
            gate_runs=max(1, self.gate_runs),
        )


def old_request(request: Mapping[str, Any], deployed: Mapping[str, Any]) -> dict[str, Any]:
    """The request a serving record holds, as a rollout starts from it (``deployed``: the record's pair). A record
    from before --engine-arg has none; one from before the default became the tested pair (no --vllm then meant
    another pair, built from source) gets the pair it deployed pinned, so a rollout of another setting keeps it."""
    old = {"engine_args": [], **request}
    if old.get("vllm") is None and deployed.get("vllm") and deployed.get("id") != compat.table().default.id:
        old["vllm"], old["zentorch"] = deployed["vllm"], deployed.get("zentorch")
    return old


def describe_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    diffs = [f"{k}: {old.get(k)} -> {new.get(k)}" for k in CHANGEABLE if old.get(k) != new.get(k)]
    return "; ".join(diffs) or "no change"


def new_rollout_id() -> str:
    return "rollout-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def changes_dict(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes as the serving record keeps them: paths absolute (a model directory too), as `up` records."""
    out = {}
    for k, given in changes.items():
        value = given
        if isinstance(given, Path):
            value = str(given.resolve())
        elif isinstance(given, tuple):
            value = list(given)  # as the record keeps it (JSON)
        elif k == "model" and isinstance(given, str) and Path(given).expanduser().is_dir():
            value = str(Path(given).expanduser().resolve())
        out[k] = value
    return out


def refuse_peer(request: Mapping[str, Any], inventory: Path) -> None:
    """A campaign's llama.cpp peer cell left serving: a rollout replaces zenops's vLLM servers only."""
    peer = request.get(request_options.LLAMACPP_KEY)
    if peer:  # the record's request would read as vLLM's (ServeRequest has no such field): vLLM on their ports
        raise UsageError(
            f"llama.cpp's server serves {inventory} ({peer}, a campaign's peer cell, left by a campaign that "
            "did not finish): a rollout replaces zenops's vLLM servers only",
            hint=f"remove it with `zenops down -i {inventory}`, then serve with `zenops up -i {inventory} --model ...`",
        )


def resumed(ctx: RunContext, current: RolloutState, changes: Mapping[str, Any], *, asked: bool) -> RolloutState:
    """The rollout in progress, to resume; refused when the options (``asked``: any given) ask for another target."""
    wanted = {**current.from_request, **changes}
    if asked and wanted != current.to_request:
        raise UsageError(
            f"rollout {current.id} to another target is {current.status} on this deployment "
            f"({describe_changes(current.from_request, current.to_request)})",
            hint="re-run it with the same options to finish it, or `zenops rollout --abort` to send the "
            "changed hosts back first",
        )
    ctx.note(
        f"resuming {current.id} ({current.status}): batch "
        f"{next((i + 1 for i, b in enumerate(current.batches) if b.status != 'done'), len(current.batches))}"
        f" of {len(current.batches)}"
    )
    return current


def target_request(old: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The request the rollout goes to: ``old`` with the changes; refused when it is ``old`` or names a bad image."""
    from zenops import serve  # noqa: PLC0415

    new = {**old, **changes}
    if "prebuilt_ref" in changes:  # the image source given, or the one deployed
        serve.check_image_ref(new.get("image_source"), new["prebuilt_ref"])
    if new == old:
        raise UsageError(
            "nothing to roll out: the options ask for what the deployment already serves",
            hint="pass what should change, e.g. --model DIR, --max-num-seqs N, --vllm VERSION",
        )
    return new


def new_plans(
    ctx: RunContext, inventory: Path, hosts: Iterable[str], new: Mapping[str, Any], *, tuned: str | None
) -> dict[str, dict[str, Any]]:
    """Each host's plan for the new request, from its saved facts (refused here, before anything: an unknown or
    broken pair, a model the hosts cannot serve, engine arguments the plans refuse)."""
    from zenops import serve  # noqa: PLC0415
    from zenops.facts import facts_path, load_facts_file  # noqa: PLC0415

    new_req = serve.request_from_dict(new)
    combo = serve.resolve_engine(new_req, ctx.warn).combo
    model, _dir = serve.resolve_model(new_req.model)
    topologies = {}
    for host in hosts:
        path = facts_path(ctx.config, host)
        if not path.is_file():
            raise ZenopsError(
                f"no saved facts for {host} ({path}): the rollout plans before it changes anything",
                hint=f"gather them: zenops facts -i {inventory}",
            )
        topologies[host] = load_facts_file(path, host)
    opts = serve.plan_options(new_req, combo.vllm, tuned=tuned)
    plans = {h: p.to_dict() for h, p in serve.make_plans(topologies, model, opts, ctx.config).items()}
    serve.check_engine_args(new_req.engine_args, plans)
    return plans


def host_changes(
    current: Mapping[str, Any], plans: Mapping[str, dict[str, Any]], old: Mapping[str, Any], new: Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """What changes on each host (``current``: the plans it serves, ``plans``: the new ones), and the hosts that
    change; refused when none does."""
    changes = {
        h: dict(zip(("kind", "diffs"), host_change(current.get(h), p, old, new), strict=True)) for h, p in plans.items()
    }
    hosts = [h for h in sorted(current) if changes.get(h, {}).get("kind") != "none"]
    if not hosts:
        raise UsageError(
            "nothing to roll out: every host's plan for the new options is the one it serves "
            f"({describe_changes(old, new)} changes no container)",
            hint="pass a change that reaches the servers, e.g. --model DIR or --max-num-seqs N",
        )
    return changes, hosts


def refuse_without_gateway(gw: services.Drainable | None, inventory: Path, *, allow_downtime: bool) -> None:
    if gw is None and not allow_downtime:
        raise UsageError(
            f"{inventory}'s deployment has no gateway: a rollout drains servers through it so that no request fails",
            hint=f"add it with `zenops up -i {inventory} --model ... --gateway on` (same options as before), "
            "or pass --allow-downtime",
        )
