"""The one duration grammar of zenops: ``--ttl``, a campaign's ``budget.ttl``, and every timeout option and field.

``90s``, ``30m``, ``2h``, ``1d``, ``1w``, combined (``1h30m``), or a bare whole number of seconds (``7200``, or an
int from YAML). Case and spaces around it do not matter. Pure: callers turn the ValueError into their own error
(a UsageError naming the flag, a config Problem naming the key, a click BadParameter).
"""

from __future__ import annotations

import re

UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+)([smhdw])")
MAX_S = 3650 * 86400  # ten years: beyond it, a typo (say "no expiry" instead)
EXAMPLES = "90s, 30m, 2h, 1d, 1h30m or a number of seconds"


def parse(value: str | int, *, minimum: int = 1) -> int:
    """Seconds in ``value``; ValueError (its message says what was wrong and shows the grammar) for anything else,
    for less than ``minimum`` and for more than ten years. A bool, a float or None is not a duration."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"not a duration: {value!r} (use {EXAMPLES})")
    if isinstance(value, int):
        seconds = value
    else:
        text = value.strip().lower()
        if text.isdigit():
            seconds = int(text)
        else:
            parts = _PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"not a duration: {value!r} (use {EXAMPLES})")
            seconds = sum(int(n) * UNITS_S[u] for n, u in parts)
    if seconds < minimum:
        said = "is negative" if seconds < 0 else f"is under {minimum}s" if minimum > 1 else "is zero"
        raise ValueError(f"the duration {value!r} {said}")
    if seconds > MAX_S:
        raise ValueError(f"the duration {value!r} is over ten years")
    return seconds
