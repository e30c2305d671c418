"""``--replicas MIN..MAX`` (a plain ``N``: fixed, MIN = MAX = N) and the price cap in $/h that bounds MAX.

Pure: the CLI passes the flag's text and the deployment's prices (zenops.cloud.ledger.Deployment's flavor,
price_per_hour, gateway_flavor, gateway_price_per_hour); a bad value is a UsageError that names the fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from zenops import option_table
from zenops.errors import UsageError
from zenops.spend import hourly

REPLICAS_FLAG = "--replicas"
CAP_FLAG = "--max-price-per-hour"
EXAMPLES = "2 (fixed) or 1..4 (between 1 and 4)"
_RANGE = re.compile(r"^(\d+)\s*\.\.\s*(\d+)$")


def most_replicas() -> int:
    """The most servers a deployment takes: `up --count`'s maximum (zenops.option_table), the one figure of it."""
    top = option_table.row("count").maximum
    assert top is not None, "the --count row has a maximum"
    return top


@dataclass(frozen=True)
class Replicas:
    """Between ``min`` and ``max`` serving servers (replicas); ``min == max``: a fixed fleet."""

    min: int
    max: int

    @property
    def fixed(self) -> bool:
        return self.min == self.max

    def __str__(self) -> str:
        return str(self.min) if self.fixed else f"{self.min}..{self.max}"

    def to_dict(self) -> dict[str, int]:
        return {"min": self.min, "max": self.max}


def parse(text: str | int, *, flag: str = REPLICAS_FLAG) -> Replicas:
    """``N`` or ``MIN..MAX`` into Replicas: whole numbers, MIN >= 1, MAX >= MIN, MAX at most :func:`most_replicas`.
    Anything else is a UsageError naming ``flag``, what was wrong and a value that works."""
    said = f"{flag} {text!r}"
    if isinstance(text, bool):
        raise UsageError(f"{said} is not a replica count", hint=f"use {flag} {EXAMPLES}")
    raw = str(text).strip()
    if raw.isdigit():
        low = high = int(raw)
    elif m := _RANGE.match(raw):
        low, high = int(m[1]), int(m[2])
    else:
        raise UsageError(
            f"{said} is not a replica count or range", hint=f"use {flag} {EXAMPLES}: whole numbers, MIN..MAX"
        )
    if low < 1:
        raise UsageError(
            f"{said}: MIN is {low}; a deployment keeps at least one replica",
            hint=f"use {flag} 1..{max(high, 1)}, or `zenops down` to remove the deployment",
        )
    if high < low:
        raise UsageError(f"{said}: MAX {high} is below MIN {low}", hint=f"use {flag} {high}..{low}")
    top = most_replicas()
    if high > top:
        raise UsageError(f"{said}: MAX {high} is over {top}, the most servers a deployment takes", hint=f"MAX <= {top}")
    return Replicas(low, high)


@dataclass(frozen=True)
class Capped:
    """Replicas after the price cap: ``replicas.max`` lowered to what ``cap_per_hour`` pays for (``asked_max``: MAX
    as asked). ``note``: one line saying the cap lowered MAX and why, "" when it did not."""

    replicas: Replicas
    asked_max: int
    cap_per_hour: float | None
    note: str = ""


def cap(
    replicas: Replicas,
    cap_per_hour: float | None,
    *,
    flavor: str,
    price_per_hour: float | None,
    gateway_flavor: str | None = None,
    gateway_price_per_hour: float | None = None,
    flag: str = CAP_FLAG,
) -> Capped:
    """The replicas ``cap_per_hour`` ($/h, every server of the deployment) pays for: MAX lowered to the most servers of
    ``flavor`` at ``price_per_hour`` each, beside the gateway's own server (``gateway_flavor``) at its price. None: no
    cap. Refused (UsageError, with the figures) when the cap is not positive, when a price it needs is unknown, and
    when MIN alone costs more than the cap."""
    if cap_per_hour is None:
        return Capped(replicas, replicas.max, None)
    if not math.isfinite(cap_per_hour) or cap_per_hour <= 0:
        raise UsageError(f"{flag} {cap_per_hour}: a price cap is a positive $/h", hint=f"e.g. {flag} 2.50, or leave it")
    unknown = [f for f, p in ((flavor, price_per_hour), (gateway_flavor, gateway_price_per_hour)) if f and p is None]
    if unknown:
        raise UsageError(
            f"{flag} {hourly(cap_per_hour)} needs the price of {' and '.join(unknown)}, which is unknown",
            hint="set price_per_hour of the flavor in zenops.yaml (flavors:), or leave the cap out",
        )
    assert price_per_hour is not None
    gateway = gateway_price_per_hour if gateway_flavor and gateway_price_per_hour is not None else 0.0
    beside = f" + {hourly(gateway)} (the gateway's own {gateway_flavor})" if gateway_flavor else ""
    least = round(replicas.min * price_per_hour + gateway, 6)
    if least > cap_per_hour + 1e-9:
        raise UsageError(
            f"{flag} {hourly(cap_per_hour)} is below what MIN costs: {replicas.min} x {hourly(price_per_hour)} "
            f"({flavor}){beside} = {hourly(least)}",
            hint=f"raise {flag} to at least {hourly(least)}, or lower MIN of {REPLICAS_FLAG} {replicas}",
        )
    if price_per_hour <= 0:  # free servers (own hardware priced at 0): the cap bounds nothing
        return Capped(replicas, replicas.max, cap_per_hour)
    # the epsilon: 3 x $0.10 must fit a $0.30 cap despite binary fractions
    affordable = math.floor((cap_per_hour - gateway) / price_per_hour + 1e-9)
    if affordable >= replicas.max:
        return Capped(replicas, replicas.max, cap_per_hour)
    note = (
        f"MAX {replicas.max} lowered to {affordable}: {flag} {hourly(cap_per_hour)} pays for {affordable} x "
        f"{hourly(price_per_hour)} ({flavor}){beside} = {hourly(round(affordable * price_per_hour + gateway, 6))}"
    )
    return Capped(Replicas(replicas.min, affordable), replicas.max, cap_per_hour, note)
