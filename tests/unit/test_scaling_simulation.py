"""zenops.scaling.decide in a loop: a load profile (quiet, rising, plateau, falling, quiet) through a toy queue of
replicas, one decision every scrape (10 s). The replicas go from MIN to more and back to MIN, in one rise and one
fall: no flapping.

The toy: each replica seats 9 requests, a request takes 30 s once seated (a replica serves 0.3 requests/s), the rest
wait in the queue, spread evenly over the replicas (the gateway balances). Arrivals are noisy (a seeded generator).
A scale-out takes 120 s (a baked image booting) before the new replica serves; a scale-in drains in one scrape."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from zenops.scaling.decide import Policy, Sample, Target, decide, default_policy
from zenops.scaling.replicas import Replicas

SEATS = 9
SERVICE_S = 30.0
STEP_S = 10.0
BOOT_S = 120.0
BOUNDS = Replicas(1, 6)


def load(t: float) -> float:
    """Requests per second: quiet, rising over 10 min, a 20 min plateau needing 4 replicas, falling, quiet."""
    if t < 600:
        return 0.2
    if t < 1200:
        return 0.2 + 0.8 * (t - 600) / 600
    if t < 2400:
        return 1.0
    if t < 3000:
        return 1.0 - 0.95 * (t - 2400) / 600
    return 0.05


@dataclass
class Fleet:
    policy: Policy
    names: list[str] = field(default_factory=lambda: ["web-1"])
    series: dict[str, list[Sample]] = field(default_factory=lambda: {"web-1": []})
    in_system: float = 0.0
    last_action: float | None = None
    joining_at: float | None = None  # a scale-out's replica serves from then
    born: int = 1
    path: list[tuple[float, int]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def tick(self, t: float, rng: random.Random) -> None:
        """The queue over one scrape interval, then each replica's sample."""
        mean = load(t) * STEP_S
        self.in_system += max(0.0, round(rng.gauss(mean, math.sqrt(mean))))
        n = len(self.names)
        running = min(self.in_system, SEATS * n)
        self.in_system -= running * STEP_S / SERVICE_S
        running = min(self.in_system, SEATS * n)
        waiting = self.in_system - running
        for name in self.names:
            self.series[name].append(Sample(t, waiting=waiting / n, running=running / n))

    def act(self, t: float) -> None:
        if self.joining_at is not None:
            if t < self.joining_at:
                return  # the loop is busy with the scale-out
            self.born += 1
            self.names.append(f"web-{self.born}")
            self.series[self.names[-1]] = []
            self.joining_at, self.last_action = None, t
            self.path.append((t, len(self.names)))
            return
        d = decide(
            self.series,
            now=t,
            current=len(self.names),
            bounds=BOUNDS,
            last_action_t=self.last_action,
            policy=self.policy,
        )
        if d.action == "out":
            self.joining_at = t + BOOT_S
            self.reasons.append(f"{t:.0f} s {d.line()}")
        elif d.action == "in":
            for name in d.replicas:
                self.names.remove(name)
            self.last_action = t + STEP_S
            self.path.append((t + STEP_S, len(self.names)))
            self.reasons.append(f"{t:.0f} s {d.line()}")


def run(policy: Policy, until: float = 5400.0) -> Fleet:
    fleet, rng = Fleet(policy), random.Random(49)
    fleet.path.append((0.0, 1))
    t = 0.0
    while t <= until:
        fleet.tick(t, rng)
        fleet.act(t)
        t += STEP_S
    return fleet


def _reversals(counts: list[int]) -> int:
    steps = [b - a for a, b in itertools.pairwise(counts)]
    return sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0))


def test_the_fleet_grows_with_the_load_and_shrinks_back_without_flapping() -> None:
    fleet = run(default_policy(SEATS))
    counts = [c for _, c in fleet.path]
    assert counts[0] == BOUNDS.min
    assert max(counts) >= 4, fleet.reasons  # the plateau needs 1.0 x 30 s = 30 seats: 4 replicas of 9
    assert max(counts) <= BOUNDS.max
    assert counts[-1] == BOUNDS.min, fleet.reasons
    assert _reversals(counts) == 1, fleet.reasons  # one rise, one fall
    assert len(counts) - 1 <= 2 * (max(counts) - BOUNDS.min), fleet.reasons  # each replica added once, removed once


def test_the_fleet_serves_the_plateau_before_it_ends() -> None:
    fleet = run(default_policy(SEATS))
    at_plateau_end = [c for t, c in fleet.path if t <= 2400][-1]
    assert at_plateau_end >= 4, fleet.reasons
    waiting = [s.waiting for s in fleet.series[fleet.names[0]] if 2100 <= s.t <= 2400]
    assert max(w for w in waiting if w is not None) < SEATS, fleet.reasons  # the queue drained on the plateau


def test_scaling_in_waits_for_the_quiet() -> None:
    fleet = run(default_policy(SEATS))
    first_in = min(t for (t, c), (_, before) in zip(fleet.path[1:], fleet.path, strict=False) if c < before)
    assert first_in > 2400, fleet.reasons  # not on the plateau


def test_the_harness_sees_flapping() -> None:
    # the control: scale-in read over one minute's median, no cooldown, is too eager, and the path above says so
    eager = default_policy(SEATS, cooldown_s=0.0, scale_in=Target("load", 4.0, 60, 0.5))
    counts = [c for _, c in run(eager).path]
    assert _reversals(counts) > 1, counts
