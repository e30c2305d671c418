"""What serving costs: the one place of the formulas that turn a price per hour into $ a month and $ per 1M tokens.

``zenops plan`` prices a plan at its decode ceiling, ``zenops report`` and ``bench`` price measured results, a
campaign's report adds the break-even against an API: each of them calls these.
"""

from __future__ import annotations

HOURS_PER_MONTH = 730  # 365 x 24 / 12: a server billed around the clock


def cost_per_million(price_per_hour: float | None, output_tok_s: float | None) -> float | None:
    """$ per 1M output tokens = price per hour / (output tok/s x 3600) x 1e6; None without a price or throughput."""
    if price_per_hour is None or output_tok_s is None or output_tok_s <= 0:
        return None
    return price_per_hour / (output_tok_s * 3600) * 1e6


def cost_per_month(price_per_hour: float | None) -> float | None:
    """$ a month = price per hour x HOURS_PER_MONTH (kept up around the clock), to the cent; None
    without a price."""
    return None if price_per_hour is None else round(price_per_hour * HOURS_PER_MONTH, 2)
