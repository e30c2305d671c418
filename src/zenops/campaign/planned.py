"""What a campaign would run before it runs: its cells (the ones left to run of a campaign going on), the engine
they run, the projection of their time and cost against the budget, and what a campaign on a cloud creates."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops import catalog, spend
from zenops.campaign import engines
from zenops.campaign import plan as plan_lib
from zenops.campaign.spec import CampaignSpec
from zenops.campaign.state import CampaignState, Store, new_id, now_iso
from zenops.context import RunContext

if TYPE_CHECKING:
    from zenops import compat
    from zenops.spend import Spend


@dataclass(frozen=True)
class Planned:
    """What `campaign plan` shows and `campaign run` checks before creating anything."""

    spec: CampaignSpec
    cells: list[plan_lib.Cell]
    todo: list[plan_lib.Cell]
    projection: plan_lib.Projection
    engine: compat.Engine  # the pair and image route every cell runs (a variant may name another pair)
    state: CampaignState | None  # the campaign a run would continue (None: a new one)
    left_out: tuple[str, ...] = ()  # cells of the file that are no measurement, each with why (campaign.engines)

    @property
    def engine_pair(self) -> str:
        return self.engine.combo.id

    def to_dict(self) -> dict[str, Any]:
        status = {k: c.status for k, c in (self.state.cells.items() if self.state else [])}
        return {
            "campaign": self.state.id if self.state else None,
            "name": self.spec.name,
            "resumes": self.state is not None,
            "engine_pair": self.engine_pair,
            "engine": self.engine.to_dict(),
            "max_usd": self.spec.budget.max_usd,
            "ttl_s": self.spec.budget.ttl_s,
            "cells": [
                {
                    "key": c.key,
                    "group": c.group,
                    "model": c.model,
                    "variant": c.variant,
                    "status": status.get(c.key, "pending"),
                }
                for c in self.cells
            ],
            "todo": len(self.todo),
            "left_out": list(self.left_out),
            "projection": self.projection.to_dict(),
        }


def spec_digest(spec: CampaignSpec) -> str:
    return hashlib.sha256(spec.path.read_bytes()).hexdigest()[:16]


def price_lookup(ctx: RunContext, spec: CampaignSpec) -> plan_lib.PriceOf:
    flavors = catalog.flavors(ctx.config.flavors)

    def price_of(name: str) -> float | None:
        if name in spec.prices:
            return spec.prices[name]
        f = flavors.get(name)
        return f.price_per_hour if f else None

    return price_of


def campaign_engine(ctx: RunContext, spec: CampaignSpec) -> compat.Engine:
    """The engine (vLLM/zentorch pair and image route) the file's ``engine:`` asks for, resolved as `up` and `plan`
    resolve it (zenops.serve.resolve_engine); its pair is part of each cell's key: another engine is another
    measurement."""
    from zenops import serve  # noqa: PLC0415

    req = serve.request_from_dict({**dict(spec.engine), "model": spec.models[0]})
    return serve.resolve_engine(req, ctx.warn)


def pinned_engine(engine: Mapping[str, Any], resolved: compat.Engine) -> dict[str, Any]:
    """The campaign's engine options with what the cells ran pinned: the vLLM/zentorch pair and the image route
    (``resolved``: from the table when the file named none), so a tuned file deploys what was measured, not the
    default of whatever zenops reads it later. A variant's own vllm/zentorch still wins over them."""
    pinned = {"image_source": resolved.image_source, **dict(engine)}
    pinned.setdefault("vllm", resolved.combo.vllm)
    pinned.setdefault("zentorch", resolved.combo.zentorch)
    return pinned


def _todo(cells: list[plan_lib.Cell], state: CampaignState | None) -> list[plan_lib.Cell]:
    """Cells to run: not done, not failed deterministically (a transient failure is tried again)."""
    if state is None:
        return list(cells)
    out = []
    for c in cells:
        cs = state.cells.get(c.key)
        again = cs is None or cs.status in ("pending", "running", "skipped")
        if again or (cs is not None and cs.status == "failed" and cs.failure == "transient"):
            out.append(c)
    return out


HISTORY = 5  # earlier campaigns whose measurements project a new one's durations, the latest first


def earlier_measurements(
    store: Store, spec: CampaignSpec, cells: list[plan_lib.Cell], route: str
) -> list[tuple[str, dict[str, list[float]]]]:
    """The measured phase durations of the latest earlier campaigns on this controller that ran the same image
    route (``route``: the image source this one runs) on the same kind of servers (a cloud campaign: a flavor of
    this one; own hosts: own hosts), newest first, at most HISTORY of them."""
    groups = {c.group for c in cells}
    out: list[tuple[str, dict[str, list[float]]]] = []
    for state in reversed(store.all()):
        if state.engine.get("image_source", "build") != route:  # campaigns from before the pin: build, then default
            continue
        ran = {c.group for c in state.cells.values()}
        if not ran & groups or not state.samples:
            continue
        out.append((state.id, state.samples))
        if len(out) == HISTORY:
            break
    return out


def plan_campaign(ctx: RunContext, spec: CampaignSpec, store: Store) -> Planned:
    from zenops import serve  # noqa: PLC0415

    for model in spec.models:  # an unknown catalogue id is refused now, not after its server is paid for
        serve.resolve_model(model)
    engine = campaign_engine(ctx, spec)
    pair = engine.combo.id
    cells, left_out = engines.leave_out(plan_lib.cells(spec, pair))
    state = store.resumable(spec.name)
    todo = _todo(cells, state)
    if state is not None:  # a campaign going on: what it measured itself
        durations = plan_lib.Durations.from_measurements(state.samples)
    else:  # a new one: what earlier campaigns of the same flavors and image route measured here
        durations = plan_lib.Durations.from_history(earlier_measurements(store, spec, cells, engine.image_source))
    started = frozenset(s.group for s in state.running_servers()) if state else frozenset()
    projection = plan_lib.project(
        spec,
        todo,
        price_lookup(ctx, spec),
        durations,
        spent_usd=state.spent() if state else 0.0,
        started_groups=started,
    )
    return Planned(spec, cells, todo, projection, engine, state, tuple(left_out))


def spend_of(planned: Planned) -> Spend:
    """What a campaign on a cloud creates: a server per flavor group still to run (not those already up), at most
    ``parallel`` at once; its projected total against budget.max_usd."""
    from zenops.cloud.marks import format_duration  # noqa: PLC0415

    spec = planned.spec
    up = {s.group for s in planned.state.running_servers()} if planned.state else set()
    return spend.of_campaign(
        str(spec.cloud),
        [(g.group, g.price_per_hour) for g in planned.projection.groups if g.group not in up],
        parallel=spec.parallel,
        projected_usd=planned.projection.usd,
        cap_usd=spec.budget.max_usd,
        ttl=format_duration(spec.budget.ttl_s),
    )


def state_to_run(spec: CampaignSpec, planned: Planned, store: Store, *, new: bool = False) -> CampaignState:
    """The state `campaign run` runs: the one in progress for this name (resumed: its cells to run again pending), or
    a new one (``new``, or none in progress), with the spec's budget, variants and pinned engine."""
    state = None if new else planned.state
    if state is None:
        state = CampaignState(
            id=new_id(spec.name, store.ids()),  # a damaged campaign's id too
            name=spec.name,
            spec_path=str(spec.path),
            spec_digest=spec_digest(spec),
            created_at=now_iso(),
        )
    else:
        state.status = "running"
        state.spec_digest = spec_digest(spec)
    state.max_usd = spec.budget.max_usd
    state.variants = {v.name: _jsonable(v.options) for v in spec.variants}
    state.engine = _jsonable(pinned_engine(spec.engine, planned.engine))
    state.track((c.key, c.group, c.model, c.variant) for c in planned.cells)
    return state


def _jsonable(options: Any) -> dict[str, Any]:
    """Options as the state file keeps them: tuples as lists, paths as strings."""
    return {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v) for k, v in options.items()}
