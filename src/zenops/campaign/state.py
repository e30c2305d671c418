"""A campaign's state on disk: its cells (done, failed with a reason, skipped, pending), its servers (created,
deleted: what they cost) and the durations it measured. One JSON file per campaign, written atomically after every
change, so `campaign run` again continues where a crash, a Ctrl-C or a lost controller left it.

Layout: ``<state_dir>/campaigns/<id>/state.json``; the cells' bench artifacts under ``<id>/runs/<cell key>-r<n>/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.config import Config
from zenops.errors import UsageError

# running | interrupted | over-budget | partial | torn-down: `campaign run` continues it; done | failed: it ended


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


@dataclass
class CellState:
    key: str
    group: str
    model: str
    variant: str
    status: str = "pending"  # pending | running | done | failed | skipped
    reason: str | None = None  # failed / skipped: why, in words
    failure: str | None = None  # failed: the class (plan-refused, health-gate, bench-failed, kv-cache, transient...)
    attempts: int = 0
    run_dirs: list[str] = field(default_factory=list)
    serve_s: float | None = None
    bench_s: float | None = None
    started_at: str | None = None
    finished_at: str | None = None


@dataclass
class ServerState:
    deployment: str
    group: str
    cloud: str | None
    flavor: str | None
    price_per_hour: float | None
    created_at: str
    deleted_at: str | None = None  # set once the deletion is confirmed (down, then leaks for it is empty)
    inventory: str | None = None

    def hours(self, now: datetime | None = None) -> float:
        end = _parse(self.deleted_at) if self.deleted_at else (now or datetime.now(UTC))
        return max(0.0, (end - _parse(self.created_at)).total_seconds() / 3600)

    def cost(self, now: datetime | None = None) -> float:
        return (self.price_per_hour or 0.0) * self.hours(now)


@dataclass
class CampaignState:
    id: str
    name: str
    spec_path: str
    spec_digest: str
    created_at: str
    status: str = "running"
    cells: dict[str, CellState] = field(default_factory=dict)
    servers: dict[str, ServerState] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # Durations field -> measured seconds
    max_usd: float | None = None
    finished_at: str | None = None
    leaks: int | None = None  # resources with the campaign's mark left after the last teardown (cloud only)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> `up` options (for the tuned file)
    engine: dict[str, Any] = field(default_factory=dict)  # the shared engine options

    def spent(self, now: datetime | None = None) -> float:
        return sum(s.cost(now) for s in self.servers.values())

    def running_servers(self) -> list[ServerState]:
        return [s for s in self.servers.values() if s.deleted_at is None]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cells.values():
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def sample(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(round(seconds, 1))

    # --- the rules of a cell's status: the run says what happened, these say what the state records ----------------

    def track(self, cells: Iterable[tuple[str, str, str, str]]) -> None:
        """The plan's cells ``(key, group, model, variant)`` in the state; one left running (a crash), skipped (the
        budget) or failed for a transient reason runs again: pending."""
        for key, group, model, variant in cells:
            cs = self.cells.get(key)
            if cs is None:
                self.cells[key] = CellState(key, group, model, variant)
            elif cs.status in ("running", "skipped") or (cs.status == "failed" and cs.failure == "transient"):
                cs.status, cs.reason = "pending", None

    def start(self, key: str) -> CellState:
        """Cell ``key`` running: one attempt more, its last failure cleared."""
        cs = self.cells[key]
        cs.status, cs.attempts, cs.started_at, cs.reason, cs.failure = "running", cs.attempts + 1, now_iso(), None, None
        return cs

    def fail(self, keys: Iterable[str], failure: str, reason: str, *, attempt: bool = False) -> None:
        """Cells ``keys`` failed, with the failure's class and its words (``attempt``: the failure was an attempt of
        theirs, as their server that never came is)."""
        for key in keys:
            cs = self.cells[key]
            cs.status, cs.failure, cs.reason, cs.finished_at = "failed", failure, reason[:2000], now_iso()
            cs.attempts += 1 if attempt else 0

    def skip(self, keys: Iterable[str], why: str) -> None:
        for key in keys:
            self.cells[key].status, self.cells[key].reason = "skipped", why

    def interrupt(self, key: str) -> None:
        """Cell ``key`` stopped by Ctrl-C: pending again (the next `campaign run` runs it)."""
        self.cells[key].status, self.cells[key].reason = "pending", "interrupted"

    def done(self, key: str, run_dirs: list[str], serve_s: float, bench_s: float, *, first: bool) -> None:
        """Cell ``key`` measured; its durations sampled for the budget's next projections (``first``: the group's
        first serve, which pulls the image and the model)."""
        cs = self.cells[key]
        cs.status, cs.finished_at, cs.run_dirs = "done", now_iso(), run_dirs
        cs.serve_s, cs.bench_s = round(serve_s, 1), round(bench_s, 1)
        self.sample("first_serve_s" if first else "serve_s", serve_s)
        self.sample("bench_s", bench_s)

    def finish(self, *, interrupted: bool) -> None:
        """The campaign's status at its end: interrupted (Ctrl-C, or cells left), over-budget (cells skipped),
        partial or failed (cells failed, some done or none), else done."""
        counts = self.counts()
        if interrupted:
            self.status = "interrupted"
        elif counts.get("skipped"):
            self.status = "over-budget"
        elif counts.get("pending") or counts.get("running"):
            self.status = "interrupted"
        elif counts.get("failed"):
            self.status = "partial" if counts.get("done") else "failed"
        else:
            self.status = "done"
        self.finished_at = now_iso()

    def torn_down(self) -> None:
        """`campaign down` removed what it had on its cloud: every server deleted, a running campaign torn down."""
        for s in self.servers.values():
            if s.deleted_at is None:
                s.deleted_at = now_iso()
        if self.status == "running":
            self.status = "torn-down"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CampaignState:
        data = dict(data)
        data["cells"] = {k: CellState(**v) for k, v in (data.get("cells") or {}).items()}
        data["servers"] = {k: ServerState(**v) for k, v in (data.get("servers") or {}).items()}
        return cls(**data)


class Store:
    """The campaigns under one state dir."""

    def __init__(self, config: Config) -> None:
        self.root = config.state_dir / "campaigns"

    def dir(self, campaign_id: str) -> Path:
        return self.root / campaign_id

    def save(self, state: CampaignState) -> None:
        statefile.write_json(self.dir(state.id) / "state.json", state.to_dict())

    def load(self, campaign_id: str) -> CampaignState:
        path = self.dir(campaign_id) / "state.json"
        if not path.is_file():
            known = ", ".join(s.id for s in self.all()[-5:]) or "none"
            raise UsageError(
                f"no campaign {campaign_id!r} in {self.root}",
                hint=f"`zenops campaign status` lists them (latest: {known})",
            )
        return self._read(path)

    def _read(self, path: Path) -> CampaignState:
        """The state in ``path``; DamagedStateError (naming it, and how to find and remove its servers) when it
        cannot be read."""
        campaign_id = path.parent.name
        try:
            data = statefile.read_json_object(path)
            if data is None:
                raise FileNotFoundError(path)
            return CampaignState.from_dict(data)
        except statefile.DamagedStateError as e:
            raise statefile.DamagedStateError(path, e.reason, hint=damaged_hint(campaign_id)) from e
        except (TypeError, KeyError, AttributeError) as e:  # JSON, but not a campaign's state
            raise statefile.DamagedStateError(path, f"not a campaign state: {e}", hint=damaged_hint(campaign_id)) from e

    def ids(self) -> list[str]:
        """Every campaign directory's id, readable or not (a new campaign's id must not take a damaged one's)."""
        return sorted(d.name for d in self.root.iterdir() if d.is_dir()) if self.root.is_dir() else []

    def scan(self) -> tuple[list[CampaignState], list[statefile.DamagedStateError]]:
        """The campaigns, oldest first, and the damaged ones: each warned about (naming its file), never hidden: its
        servers may still be running."""
        good, damaged = [], []
        for campaign_id in self.ids():
            path = self.dir(campaign_id) / "state.json"
            if not path.is_file():
                continue
            try:
                good.append(self._read(path))
            except statefile.DamagedStateError as e:
                statefile.warn_damaged(e)
                damaged.append(e)
        return sorted(good, key=lambda s: s.created_at), damaged

    def all(self) -> list[CampaignState]:
        """The campaigns that can be read, oldest first (the damaged ones are warned about: see :meth:`scan`)."""
        return self.scan()[0]

    def resumable(self, name: str) -> CampaignState | None:
        """The latest campaign of this name, unless it ended with every cell done or failed for good (``done``,
        ``failed``). An edited file continues it too: cells are keyed by their parameters, so the cells it still
        has keep their results and new ones are added."""
        latest = self.latest(name)
        return latest if latest is not None and latest.status not in ("done", "failed") else None

    def latest(self, name: str | None = None) -> CampaignState | None:
        states = [s for s in self.all() if name is None or s.name == name]
        return states[-1] if states else None


def damaged_hint(campaign_id: str) -> str:
    """What to do about a campaign whose state cannot be read: its servers may still be running."""
    return (
        "its servers may still be running: `zenops status` lists this machine's deployments (a campaign's are "
        f"named after it); `zenops down --campaign {campaign_id} --cloud CLOUD --yes` removes whatever carries its "
        "mark (own hosts: `zenops down --inventory FILE`); then move the file away"
    )


def new_id(name: str, existing: Iterable[str], now: datetime | None = None) -> str:
    """``<name>-<yymmddHHMM>`` (``-2``... when that minute is taken), the name cut to 19 characters: the id is the
    campaign mark on every cloud resource, held to the deployment-name rules (32 characters at most)."""
    base = f"{name[:19].rstrip('-')}-{(now or datetime.now(UTC)):%y%m%d%H%M}"
    taken = set(existing)
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def deployment_name(campaign_id: str, group: str) -> str:
    """The deployment of a campaign's group: readable (the campaign's name and the flavor) and unique (a hash of
    both), within the 32-character deployment-name rules."""
    import hashlib  # noqa: PLC0415

    slug = "".join(ch if ch.isalnum() else "-" for ch in group.lower()).strip("-")[:10].rstrip("-")
    head = campaign_id.rsplit("-", 1)[0][:14].rstrip("-") if "-" in campaign_id else campaign_id[:14]
    digest = hashlib.sha256(f"{campaign_id}/{group}".encode()).hexdigest()[:4]
    return "-".join(x for x in (head, slug, digest) if x)
