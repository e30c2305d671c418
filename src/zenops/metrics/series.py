"""The arithmetic of live figures from two snapshots: rates from counters, percentiles from histogram buckets, CPU
from /proc/stat. Pure: each function takes what was read and the seconds between.

Counters can go back (the server restarted: a rollout, a crash): a counter lower than before counts from zero, as
Prometheus's rate() does. Percentiles follow Prometheus's histogram_quantile(): the bucket holding the rank, with
linear interpolation inside it; a rank in the +Inf bucket answers the highest finite bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def increase(before: float | None, after: float | None) -> float | None:
    """How much a counter grew; after a reset (lower than before) its whole new value. None: not read both times."""
    if before is None or after is None:
        return None
    return after if after < before else after - before


def rate(before: float | None, after: float | None, seconds: float) -> float | None:
    grew = increase(before, after)
    if grew is None or seconds <= 0:
        return None
    return grew / seconds


def bucket_increase(before: Mapping[float, float], after: Mapping[float, float]) -> dict[float, float]:
    """Each cumulative bucket's growth between two snapshots (a reset: the whole new histogram)."""
    if not before or any(after.get(le, 0.0) < n for le, n in before.items()):
        return dict(after)
    return {le: after[le] - before.get(le, 0.0) for le in after}


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """The ``q`` quantile (0..1) of a histogram's cumulative buckets (upper bound -> count); None with no
    observations."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    bounds = sorted(cumulative)
    if not bounds:
        return None
    count = cumulative[bounds[-1]]
    if count <= 0:
        return None
    rank = q * count
    prev_bound, prev_count = 0.0, 0.0
    finite = [b for b in bounds if math.isfinite(b)]
    for b in bounds:
        c = cumulative[b]
        if c >= rank:
            if not math.isfinite(b):
                return finite[-1] if finite else None
            if c == prev_count:
                return b
            return prev_bound + (b - prev_bound) * (rank - prev_count) / (c - prev_count)
        prev_bound, prev_count = b, c
    return finite[-1] if finite else None


def cpu_busy(before: Sequence[int], after: Sequence[int]) -> float | None:
    """The share of CPU time busy between two reads of /proc/stat's ``cpu`` line (user nice system idle iowait irq
    softirq steal ...): 1 - (idle + iowait) growth / total growth. None when no time passed."""
    if len(before) < 4 or len(after) < 4:
        return None
    total = sum(after) - sum(before)
    if total <= 0:
        return None
    idle = (after[3] + (after[4] if len(after) > 4 else 0)) - (before[3] + (before[4] if len(before) > 4 else 0))
    return max(0.0, min(1.0, 1.0 - idle / total))
