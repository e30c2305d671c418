"""A campaign's cells and what they should cost, before anything is created. Pure: no I/O, no clock.

A cell is one (flavor, model, variant): one server configuration, benchmarked at every concurrency level of the
campaign's bench profile, ``repeats`` times. Cells on the same flavor share one server (a "group"): provisioned once,
the models and variants served one after another on it, torn down after the group's last cell.

Cost is counted per server, from its creation until its deletion is confirmed, at the flavor's price per hour.
Durations come from what this campaign already measured (cells done, provisioning, teardown) and, until there is a
measurement, from the estimates below (a small model on a CPU flavor: a server start of a few minutes, a bench of
``prompts`` requests per level at a conservative rate). The projection is deliberately pessimistic: a budget should
stop a campaign before its money runs out, not after.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from zenops.campaign.spec import BenchSpec, CampaignSpec
from zenops.cloud.preflight import Limits, shortfalls
from zenops.deployment.identity import inventory_label
from zenops.errors import OverBudgetError, UsageError

if TYPE_CHECKING:
    from zenops.bench.run import BenchRequest

# estimates used until the campaign has measured its own (seconds)
PROVISION_S = 300.0  # server ACTIVE + SSH + Docker (the sandbox: ~2 min; a public cloud: 2-5 min)
TEARDOWN_S = 60.0
FIRST_SERVE_S = 600.0  # the first cell of a group: the engine image built or loaded, then a server start
SERVE_S = 240.0  # later cells: a server start (model load, torch.compile, health gate)
BENCH_TOK_S = 20.0  # a conservative output rate (one small model on a small flavor) for the bench estimate
BENCH_OVERHEAD_S = 30.0  # per bench run: the client container, warm-up, fetching results


@dataclass(frozen=True)
class Cell:
    key: str
    group: str  # the flavor (cloud) or the inventory's name (own hosts): the cells sharing one server
    flavor: str | None
    model: str
    variant: str
    request: Mapping[str, Any]  # ServeRequest fields: the engine's, then the variant's (the variant wins)

    def label(self) -> str:
        return f"{self.group} / {self.model_name} / {self.variant}"

    @property
    def model_name(self) -> str:
        return self.model.rstrip("/").rsplit("/", 1)[-1] if self.model.startswith("/") else self.model


def cell_key(params: Mapping[str, Any]) -> str:
    """12 hex of the sha256 of the cell's resolved parameters: the same cell in a re-run has the same key."""
    blob = json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cells(spec: CampaignSpec, engine_pair: str = "") -> list[Cell]:
    """Every cell, grouped by flavor (the order of the file: flavors, then models, then variants)."""
    groups = list(spec.flavors) if spec.cloud else [_inventory_group(spec)]
    out: list[Cell] = []
    for group in groups:
        for model in spec.models:
            for variant in spec.variants:
                request = {**dict(spec.engine), **dict(variant.options), "model": model}
                if "engine_args" in spec.engine and "engine_args" in variant.options:  # both: the engine's, then its
                    request["engine_args"] = (*spec.engine["engine_args"], *variant.options["engine_args"])
                params = {
                    "group": group,
                    "cloud": spec.cloud,
                    "request": request,
                    "bench": _bench_dict(spec.bench),
                    "engine_pair": engine_pair,
                }
                out.append(
                    Cell(
                        key=cell_key(params),
                        group=group,
                        flavor=group if spec.cloud else None,
                        model=model,
                        variant=variant.name,
                        request=request,
                    )
                )
    return out


def _inventory_group(spec: CampaignSpec) -> str:
    return inventory_label(spec.inventory) if spec.inventory is not None else "hosts"


def bench_request(
    spec: CampaignSpec, cell: Cell, run_id: str, runs_dir: Path, *, price: float | None, deployment: str, campaign: str
) -> BenchRequest:
    """What one bench run of ``cell`` asks (`zenops bench`'s request): the spec's bench, labelled with the cell's
    flavor, price, cloud, deployment (its label), variant and campaign."""
    from zenops.bench.run import BenchRequest  # noqa: PLC0415

    b = spec.bench
    return BenchRequest(
        profile="seed", concurrency=b.concurrency, num_prompts=b.prompts, input_len=b.input_len,
        output_len=b.output_len, runs_dir=runs_dir, run_id=run_id, flavor=cell.flavor, price_per_hour=price,
        cloud=spec.cloud, deployment=deployment, label=cell.variant, campaign=campaign,
    )  # fmt: skip


def _bench_dict(b: BenchSpec) -> dict[str, Any]:
    return {
        "concurrency": list(b.concurrency),
        "input_len": b.input_len,
        "output_len": b.output_len,
        "prompts": b.prompts,
        "repeats": b.repeats,
    }


def bench_seconds(b: BenchSpec, tok_s: float = BENCH_TOK_S) -> float:
    """One cell's bench: every level x repeats, each ``prompts`` requests of ``output_len`` tokens at ``tok_s``."""
    per_level = b.prompts * b.output_len / tok_s + BENCH_OVERHEAD_S
    return per_level * len(b.concurrency) * b.repeats


PHASES = ("provision_s", "teardown_s", "first_serve_s", "serve_s", "bench_s")  # Durations' measured fields


@dataclass(frozen=True)
class Durations:
    """Seconds per phase: measured by this campaign where it has measured them, else the estimates."""

    provision_s: float = PROVISION_S
    teardown_s: float = TEARDOWN_S
    first_serve_s: float = FIRST_SERVE_S
    serve_s: float = SERVE_S
    bench_s: float | None = None  # None: bench_seconds(spec.bench)
    measured: tuple[str, ...] = ()  # which of them are measurements
    source: str = ""  # whose measurements: "this campaign", or the earlier campaigns' ids ("": the estimates)

    @classmethod
    def from_measurements(cls, samples: Mapping[str, Sequence[float]]) -> Durations:
        """``samples``: phase name (a field above) -> the seconds measured so far; the slowest one counts."""
        values: dict[str, float] = {}
        for name in PHASES:
            got = [s for s in samples.get(name, ()) if s >= 0]
            if got:
                values[name] = max(got)
        return cls(**values, measured=tuple(sorted(values)), source="this campaign" if values else "")

    @classmethod
    def from_history(cls, campaigns: Sequence[tuple[str, Mapping[str, Sequence[float]]]]) -> Durations:
        """What earlier campaigns on this controller measured (``campaigns``: id, samples), for a new campaign of
        the same flavors and image route: the median of each phase over all of them (a projection close to what
        the run will spend, not the slowest case), the estimates for a phase none measured."""
        pooled: dict[str, list[float]] = {}
        used: list[str] = []
        for campaign_id, samples in campaigns:
            got = False
            for name in PHASES:
                seconds = [s for s in samples.get(name, ()) if s >= 0]
                pooled.setdefault(name, []).extend(seconds)
                got = got or bool(seconds)
            if got:
                used.append(campaign_id)
        values = {name: float(median(v)) for name, v in pooled.items() if v}
        return cls(**values, measured=tuple(sorted(values)), source=", ".join(used))

    def cell_s(self, bench: BenchSpec, *, first: bool) -> float:
        serve = self.first_serve_s if first else self.serve_s
        return serve + (self.bench_s if self.bench_s is not None else bench_seconds(bench))


@dataclass(frozen=True)
class GroupCost:
    group: str
    flavor: str | None
    price_per_hour: float | None
    cells: int
    hours: float
    usd: float | None  # None: the price is unknown

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hours": round(self.hours, 3), "usd": None if self.usd is None else round(self.usd, 4)}


@dataclass(frozen=True)
class Projection:
    groups: list[GroupCost]
    durations: Durations
    spent_usd: float = 0.0  # already spent (a resumed campaign)
    unknown_prices: list[str] = field(default_factory=list)

    @property
    def usd(self) -> float:
        """Spent + projected for what is left, counting unknown prices as 0 (they are listed)."""
        return self.spent_usd + sum(g.usd or 0.0 for g in self.groups)

    @property
    def hours(self) -> float:
        return sum(g.hours for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": [g.to_dict() for g in self.groups],
            "spent_usd": round(self.spent_usd, 4),
            "projected_usd": round(self.usd, 4),
            "server_hours": round(self.hours, 3),
            "unknown_prices": self.unknown_prices,
            "measured": list(self.durations.measured),
            "durations_from": self.durations.source or "estimates",
        }


PriceOf = Callable[[str], float | None]


def group_hours(n_cells: int, bench: BenchSpec, d: Durations, *, cloud: bool) -> float:
    """A group's server time: provisioning, its cells (the first one builds or loads the image), teardown."""
    if n_cells == 0:
        return 0.0
    seconds = sum(d.cell_s(bench, first=i == 0) for i in range(n_cells))
    if cloud:
        seconds += d.provision_s + d.teardown_s
    return seconds / 3600


def project(
    spec: CampaignSpec,
    todo: Sequence[Cell],
    price_of: PriceOf,
    durations: Durations | None = None,
    *,
    spent_usd: float = 0.0,
    started_groups: frozenset[str] = frozenset(),
) -> Projection:
    """What the cells still to run should cost. A group already provisioned (``started_groups``) pays no new
    provisioning and no image build again."""
    d = durations or Durations()
    by_group: dict[str, list[Cell]] = {}
    for c in todo:
        by_group.setdefault(c.group, []).append(c)
    groups: list[GroupCost] = []
    unknown: list[str] = []
    for group, group_cells in by_group.items():
        flavor = group_cells[0].flavor
        price = spec.prices.get(group, price_of(group) if flavor else None)
        hours = group_hours(len(group_cells), spec.bench, d, cloud=spec.cloud is not None)
        if group in started_groups:  # no provisioning; its first remaining cell starts a server only
            first_extra = d.first_serve_s - d.serve_s
            hours -= (d.provision_s + first_extra) / 3600 if spec.cloud else first_extra / 3600
        if price is None:
            unknown.append(group)
        groups.append(
            GroupCost(group, flavor, price, len(group_cells), hours, None if price is None else price * hours)
        )
    return Projection(groups, d, spent_usd, unknown)


def check_budget(projection: Projection, max_usd: float | None) -> None:
    """Refuse a campaign projected over its cap (exit 17), naming the figures and the ways out; and one with a cap
    and a group whose price is unknown (exit 2): its cost would count as $0, so the cap would mean nothing."""
    if max_usd is None:
        return
    if projection.unknown_prices:
        raise UsageError(
            f"budget.max_usd ${max_usd:.2f} cannot cap this campaign: no price per hour is known for "
            f"{', '.join(projection.unknown_prices)}",
            hint="give each its price under `prices:` in the campaign file (e.g. prices: {"
            + ", ".join(f"{g}: 0.79" for g in projection.unknown_prices)
            + "}), or remove budget.max_usd to run without a cap",
        )
    if projection.usd <= max_usd:
        return
    worst = max(projection.groups, key=lambda g: g.usd or 0.0, default=None)
    raise OverBudgetError(
        f"projected cost ${projection.usd:.2f} is over budget.max_usd ${max_usd:.2f} "
        f"({projection.hours:.1f} server-hours"
        + (f"; spent so far ${projection.spent_usd:.2f}" if projection.spent_usd else "")
        + (f"; the most expensive group: {worst.group} ${worst.usd:.2f}" if worst and worst.usd else "")
        + ")",
        hint="raise budget.max_usd, or make the matrix smaller (fewer flavors, models, variants, concurrency "
        "levels, repeats or prompts), or `zenops campaign run FILE --within-budget` to measure what the budget "
        "buys; `zenops campaign plan FILE` shows the projection",
    )


def affordable(spent_usd: float, next_usd: float, max_usd: float | None) -> bool:
    """Whether the rest of the budget covers the next step: ``spent_usd`` (servers counted up to now, running ones
    included) plus ``next_usd`` (the next cell on its server, and that server's teardown)."""
    return max_usd is None or spent_usd + next_usd <= max_usd + 1e-9


def fitting_parallel(parallel: int, sizes: Sequence[tuple[int, int]], limits: Limits, *, floating: bool = False) -> int:
    """How many flavor groups may run at once inside the project's quota: the largest k <= ``parallel`` for which
    the k biggest servers (vCPUs, then RAM) fit together, since any k groups may be up at the same time. 0: not even
    the biggest one fits (its own preflight then refuses it, naming the limit)."""
    biggest = sorted(sizes, reverse=True)
    k = min(parallel, len(biggest))
    while k > 0:
        cores = sum(v for v, _r in biggest[:k])
        ram = sum(r for _v, r in biggest[:k])
        # shortfalls() takes one flavor x count: k servers of the summed size as one "server" each of count 1
        if not shortfalls(limits, cores, ram, 1, k if floating else 0) and not shortfalls(limits, 0, 0, k):
            return k
        k -= 1
    return 0
