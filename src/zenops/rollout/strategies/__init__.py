"""How a batch of hosts goes from the old release to the new one: one module per strategy.

A strategy sees the rollout through zenops.rollout.steps.BatchSteps only (drain, serve, ready, gate, decide, save...):
the driver (zenops.rollout.run.Rollout) owns the batches, the state and the history, and decides what a gate's
verdict means. A strategy plans its batches (checked before anything changes), runs and reverts one, and keeps what
it needs in a typed state of its own, kept in the ledger under its name (``BatchState.strategy_state``).

* in-place    drain the batch's servers in the gateway, replace them, gates, back in rotation
* surge       a one-server cloud deployment: a new server, its gates, into the gateway, the old one drained and deleted
* blue-green  a cloud deployment: a whole new set of servers, gated, then the gateway switches to it at once, the old
  set drained and deleted

A new strategy is one module here (a class with the :class:`Strategy` members, its ``STRATEGY = TheClass``) and one
line in ``_MODULES``; `zenops rollout --strategy NAME` picks it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, cast

from zenops.errors import UsageError

if TYPE_CHECKING:
    from zenops.deployment.rollouts import BatchState
    from zenops.rollout.steps import BatchSteps

AUTO = "auto"

# strategy name -> its module here (imported when first asked for)
_MODULES: Mapping[str, str] = {
    "in-place": "in_place",
    "surge": "surge",
    "blue-green": "blue_green",
}


class Strategy(Protocol):
    name: ClassVar[str]

    def __init__(self, steps: BatchSteps) -> None: ...

    def plan(self, hosts: list[str]) -> list[BatchState]:
        """The batches that take ``hosts`` (the hosts whose servers change) to the new release, checked before
        anything changes (a refusal names the way out)."""

    def run(self, i: int, batch: BatchState) -> None:
        """Take the batch to the new release through its gates (raises what the driver decided on a verdict)."""

    def revert(self, batch: BatchState) -> None:
        """Send the batch back to the previous release."""

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        """What this strategy does to the batch, for the dry run (lines under the batch's own)."""

    @staticmethod
    def addresses(batch: BatchState) -> dict[str, str]:
        """The fixed address of each server the batch made (the serving record has them once the rollout ends)."""

    @staticmethod
    def creates(batch: BatchState) -> int:
        """How many cloud servers the batch still has to create (what the rollout asks the operator about)."""


def names() -> list[str]:
    """Every strategy's name (what --strategy takes, besides auto)."""
    return list(_MODULES)


def get(name: str) -> type[Strategy]:
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    return cast("type[Strategy]", module.STRATEGY)


class _Registry(Mapping[str, "type[Strategy]"]):
    """Name -> strategy class, each module imported when first asked for."""

    def __getitem__(self, name: str) -> type[Strategy]:
        return get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)


STRATEGIES: Mapping[str, type[Strategy]] = _Registry()


def choose(asked: str, hosts: list[str], fleet: int, *, allow_downtime: bool) -> str:
    """The strategy of a rollout: the one asked for, or (auto) a one-server deployment surges unless downtime is
    allowed, any other goes in place."""
    if asked != AUTO:
        if asked not in _MODULES:
            raise UsageError(f"no rollout strategy '{asked}'", hint=f"one of: {', '.join([AUTO, *_MODULES])}")
        return asked
    return "surge" if not allow_downtime and len(hosts) == fleet == 1 else "in-place"


def strategy_for(steps: BatchSteps, batch: BatchState) -> Strategy:
    return get(batch.strategy)(steps)


def addresses(batches: list[BatchState]) -> dict[str, str]:
    """The fixed address of every server the batches' strategies made."""
    out: dict[str, str] = {}
    for b in batches:
        out.update(get(b.strategy).addresses(b))
    return out


def creates(batches: list[BatchState]) -> int:
    return sum(get(b.strategy).creates(b) for b in batches)


def describe(batch: BatchState) -> list[str]:
    return get(batch.strategy).describe(batch)


__all__ = [
    "AUTO",
    "STRATEGIES",
    "Strategy",
    "addresses",
    "choose",
    "creates",
    "describe",
    "get",
    "names",
    "strategy_for",
]
