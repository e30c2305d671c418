"""How a batch of hosts goes from the old release to the new one: one module per strategy.

The driver (zenops.rollout.run.Rollout) owns the batches, the state and the history; it asks each batch's strategy to
``run`` it, to ``revert`` it, and for its ``describe`` lines in a dry run. A strategy keeps what it needs in its
batch's state (``BatchState``; a surge's typed state over ``BatchState.surge``), calls the gates through the driver
and hands their verdicts to ``driver.decide`` (go on, revert, pause): it never decides on a verdict itself.

* in_place  drain the batch's servers in the gateway, replace them, gates, back in rotation
* surge     a one-server cloud deployment: a new server, its gates, into the gateway, the old one drained and deleted

A new strategy (blue/green, say) is one module here with a class like these and one line in ``STRATEGIES``; the
planner's choice of it goes in ``Rollout.prepare``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from zenops.rollout.strategies.in_place import InPlace
from zenops.rollout.strategies.surge import Surge

if TYPE_CHECKING:
    from zenops.deployment.rollouts import BatchState
    from zenops.rollout.run import Rollout


class Strategy(Protocol):
    name: ClassVar[str]

    def __init__(self, driver: Rollout) -> None: ...

    def run(self, i: int, batch: BatchState) -> None:
        """Take the batch to the new release through its gates (raises what the driver decided on a verdict)."""

    def revert(self, batch: BatchState) -> None:
        """Send the batch back to the previous release."""

    @staticmethod
    def describe(batch: BatchState) -> list[str]:
        """What this strategy does to the batch, for the dry run (lines under the batch's own)."""


STRATEGIES: dict[str, type[Strategy]] = {InPlace.name: InPlace, Surge.name: Surge}


def strategy_for(driver: Rollout, batch: BatchState) -> Strategy:
    return STRATEGIES[batch.strategy](driver)


__all__ = ["STRATEGIES", "InPlace", "Strategy", "Surge", "strategy_for"]
