"""What a strategy and the gates see of the rollout: narrow protocols that the driver (zenops.rollout.run.Rollout)
implements. A strategy (zenops.rollout.strategies) imports this module and pure types only, never the driver: the
driver owns the batches, the state, the history and what a gate's verdict means; a strategy only orders the steps.

* :class:`BatchSteps`  the steps of a batch: drain, serve, ready, gate, decide, save (and the few around them)
* :class:`Servers`     a cloud deployment's serving servers, for a strategy that adds and removes them:
  preflight, add, retire
* :class:`GateDriver`  what the performance gate (zenops.rollout.gates.PerfGate) reads of the rollout
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from zenops.cloud.ledger import Deployment
    from zenops.context import RunContext
    from zenops.deployment.record import ServingRecord
    from zenops.deployment.rollouts import BatchState, Ledger, RolloutState
    from zenops.rollout.plan import GateLimits, GateSizing, Verdict


class Servers(Protocol):
    """A cloud deployment's serving servers (`zenops up --cloud`), as a strategy that adds or removes some sees them.
    The gateway's own server is not one of them."""

    @property
    def entry(self) -> Deployment:
        """The deployment as the cloud ledger of this controller has it now (refused, naming the way out, when it
        is no longer there)."""

    def preflight(self, more: int) -> None:
        """Room for ``more`` servers of the deployment's flavor (QuotaExceededError, or the cloud's error, before
        anything changes)."""

    def add(self, keep: list[str], more: int) -> dict[str, str | None]:
        """``more`` serving servers beside ``keep`` (provisioned, Docker ready, in the deployment's inventory and
        ledger). Idempotent: servers an interrupted call made are adopted. Returns each new one's fixed address."""

    def in_cloud(self) -> list[str]:
        """The deployment's serving servers as the cloud and the ledger know them (one `up` made and did not
        record, too)."""

    def retire(self, name: str) -> None:
        """Delete one serving server (and its floating IP), out of the ledger and the inventory; gone already: only
        the records."""


class BatchSteps(Protocol):
    """All a strategy sees of the rollout: its state (the ledger's, saved by :meth:`save`) and the steps of a batch.
    A step that fails on a verdict (the health gate in :meth:`serve`, the performance gate through :meth:`decide`)
    raises what the driver decided (revert, pause): a strategy never decides on a verdict itself."""

    @property
    def state(self) -> RolloutState:
        """The rollout's state: the batches, the requests (from, to), the servers drained, served and retired."""

    @property
    def perf_gate(self) -> bool:
        """Whether the performance gate runs (--perf-gate)."""

    def label(self, i: int) -> str:
        """How the notes name batch ``i`` ("canary batch", "batch 2/3")."""

    def note(self, text: str) -> None: ...

    def event(self, kind: str, **data: Any) -> None:
        """A line of the rollout's history (zenops status)."""

    def phase(self, batch: BatchState, name: str) -> AbstractContextManager[None]:
        """Time a phase of the batch into its state."""

    def save(self) -> None:
        """The state into the ledger: every change a step makes is saved before the next one starts."""

    def cut(self, hosts: list[str]) -> list[list[str]]:
        """The hosts in batches as the operator asked (--batch, --canary, --max-unavailable, --allow-downtime)."""

    def servers(self) -> Servers | None:
        """The deployment's cloud servers (None: not a cloud deployment of this controller)."""

    # --- traffic (the gateway) --------------------------------------------------------------------------------

    def names_on(self, hosts: list[str]) -> list[str]:
        """The gateway's server names on these hosts ([]: no gateway)."""

    def drain(self, names: list[str]) -> None:
        """Out of rotation; returns once their in-flight requests finished. Kept in the state until put back."""

    def ready(self, names: list[str]) -> None:
        """Back in rotation, once their health checks pass."""

    def follow(self, hosts: list[str]) -> list[str]:
        """The deployment's services follow its servers as the rollout sees them now (the record's, the ones it
        served, not the retired ones); returns the gateway's server names on ``hosts``."""

    # --- servers and gates ------------------------------------------------------------------------------------

    def serve(self, i: int, batch: BatchState, hosts: list[str]) -> None:
        """The new release on ``hosts`` (replaces what they serve) through its health gate (a failure: decided,
        raises), kept as served."""

    def serve_previous(self, hosts: list[str]) -> None:
        """The previous release back on ``hosts`` (a revert), no longer counted as served."""

    def gate(self, i: int, batch: BatchState, against: Mapping[str, str] | None = None) -> list[Verdict]:
        """The performance gate's verdicts: the batch's hosts against their baseline with an untouched control host
        measured with them; or, ``against`` new host -> old host, each new host against the old one's baseline,
        the old one measured at the same time as its control."""

    def decide(
        self, i: int, batch: BatchState, verdicts: list[Verdict], *, ready_on_pause: list[str] | None = None
    ) -> None:
        """What the verdicts mean: go on (returns), revert (raises), pause with ``ready_on_pause`` back in rotation
        (raises)."""


class GateSettings(Protocol):
    """The gate's settings of the rollout's request (zenops.rollout.run.RolloutRequest)."""

    @property
    def gate_concurrency(self) -> int: ...
    @property
    def gate_prompts(self) -> int: ...
    @property
    def gate_input_len(self) -> int: ...
    @property
    def gate_output_len(self) -> int: ...
    @property
    def gate_warmups(self) -> int: ...
    @property
    def answer_timeout(self) -> int: ...
    @property
    def limits(self) -> GateLimits: ...
    @property
    def sizing(self) -> GateSizing: ...


class GateDriver(Protocol):
    """What the performance gate reads of the rollout (and writes: the baseline, into the state)."""

    @property
    def req(self) -> GateSettings: ...
    @property
    def state(self) -> RolloutState: ...
    @property
    def record(self) -> ServingRecord: ...
    @property
    def ctx(self) -> RunContext: ...
    @property
    def inventory(self) -> Path: ...
    @property
    def ledger(self) -> Ledger: ...

    def note(self, text: str) -> None: ...

    def save(self) -> None: ...

    def platforms_now(self, hosts: list[str]) -> dict[str, str]: ...

    def port_of(self, host: str, instance: int | None) -> int: ...
