"""The rollout ledger of a deployment (one of its stores: zenops.deployment.store): ``<state_dir>/rollouts/<name>/``

* ``state.json``: the rollout in progress (or the last one): from and to (the serve requests), the batches and how
  far each got, the baseline figures, which gateway servers zenops drained and has not put back. Written (atomically)
  before and after every step, so a re-run after Ctrl-C or a lost controller continues where it stopped.
* ``history.jsonl``: one line per event (started, batch done, gate verdicts, reverted, finished), kept for good;
  `zenops status` shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.config import Config


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def ledger_dir(config: Config, key: str) -> Path:
    return config.state_dir / "rollouts" / key


@dataclass
class BatchState:
    hosts: list[str]
    strategy: str = "in-place"  # how the batch goes to the new release: zenops.rollout.strategies
    # pending | surging | provisioning | draining | replacing | gating | switching | done | reverted
    status: str = "pending"
    started_at: str | None = None
    finished_at: str | None = None
    wall_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds (drain, replace, gate, ready)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    # what the batch's strategy keeps of its own (its typed state reads it: zenops.rollout.strategies), kept in the
    # ledger under the strategy's name (``"surge": {...}``); {}: nothing
    strategy_state: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        own = out.pop("strategy_state")
        return {**out, self.strategy: own} if own else out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchState:
        # a state written before strategies were named: a batch with a surge's state surges
        strategy = str(data.get("strategy") or ("surge" if data.get("surge") else "in-place"))
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "strategy_state"}
        return cls(**{**values, "strategy": strategy, "strategy_state": dict(data.get(strategy) or {})})


@dataclass
class RolloutState:
    id: str
    deployment: str
    inventory: str
    from_request: dict[str, Any]
    to_request: dict[str, Any]
    from_record: dict[str, Any]  # the serving record before the rollout (plans, endpoints, images, gateway)
    batches: list[BatchState]
    status: str = "running"  # running | paused | done | reverted | failed
    started_at: str = field(default_factory=now)
    finished_at: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)  # host -> {kind, diffs}
    baseline: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # server -> samples
    baseline_spread: float | None = None
    baseline_all: dict[str, list[float]] = field(default_factory=dict)  # server -> every baseline run's tok/s
    gate_prompts: int | None = None  # prompts per gate run, sized by time at the baseline (kept for a resume)
    # the last batch whose performance gate passed: one of its servers, its figures at that gate and the machine's
    # drift then ({} none yet): the control of a batch with no untouched host left (zenops.rollout.gates)
    gate_reference: dict[str, Any] = field(default_factory=dict)
    baseline_s: float | None = None  # the baseline's wall time (each batch keeps its own phases)
    drained: list[str] = field(default_factory=list)  # gateway servers zenops drained and has not put back
    served: dict[str, Any] = field(default_factory=dict)  # host -> {plan, endpoints, image} after its batch
    retired: list[str] = field(default_factory=list)  # hosts a strategy replaced by new servers (deleted)
    # the deployment's services as the rollout applied them ({}: as recorded): zenops.deployment.services
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_dir: str = ""
    message: str = ""

    @property
    def active(self) -> bool:
        return self.status in ("running", "paused")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "batches": [b.to_dict() for b in self.batches]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutState:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if data.get("gateway") and not data.get("services"):  # a state written before services existed
            values["services"] = {"gateway": data["gateway"]}
        values["batches"] = [BatchState.from_dict(b) for b in data.get("batches", [])]
        return cls(**values)


class Ledger:
    def __init__(self, config: Config, key: str) -> None:
        self.dir = ledger_dir(config, key)
        self.state_path = self.dir / "state.json"
        self.history_path = self.dir / "history.jsonl"

    def load(self) -> RolloutState | None:
        """The rollout in progress or the last one (None: none); DamagedStateError naming the file and what to
        check when it cannot be read (where the rollout stopped is then unknown: servers may be drained)."""
        hint = (
            "where that rollout stopped is unknown: `zenops status -i INVENTORY` shows each backend (DRAIN: put it "
            "back with `zenops up -i INVENTORY --model ...`); remove the file to start the next rollout afresh"
        )
        try:
            data = statefile.read_json_object(self.state_path)
            return RolloutState.from_dict(data) if data is not None else None
        except statefile.DamagedStateError as e:
            raise statefile.DamagedStateError(self.state_path, e.reason, hint=hint) from e
        except (TypeError, KeyError) as e:  # JSON, but not a rollout's state
            raise statefile.DamagedStateError(self.state_path, f"not a rollout state: {e}", hint=hint) from e

    def save(self, state: RolloutState) -> None:
        statefile.write_json(self.state_path, state.to_dict())

    def event(self, rollout_id: str, kind: str, **data: Any) -> dict[str, Any]:
        line = {"at": now(), "rollout": rollout_id, "event": kind, **data}
        statefile.append_json_line(self.history_path, line)
        return line

    def history(self, last: int | None = None) -> list[dict[str, Any]]:
        """The events, oldest first (the ``last`` ones); a line a crash cut short is skipped with a warning."""
        out = [x for x in statefile.read_json_lines(self.history_path) if isinstance(x, dict)]
        return out[-last:] if last else out
