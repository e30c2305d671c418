"""The Prometheus text exposition format (version 0.0.4), as vLLM's /metrics answers it, into samples.

Only what zenops reads: ``name{label="value",...} value`` lines; comments (``# HELP``, ``# TYPE``) and timestamps are
skipped. Label values may hold escaped quotes, backslashes and newlines. A line that does not parse is skipped (a
metric zenops does not read must not break the ones it does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def _value(text: str) -> float:
    t = text.strip()
    if t in ("+Inf", "Inf"):
        return math.inf
    if t == "-Inf":
        return -math.inf
    return float(t)


def parse(text: str) -> list[Sample]:
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if not m:
            continue
        name, rest = m.group(0), line[m.end() :]
        labels: list[tuple[str, str]] = []
        if rest.startswith("{"):
            end = rest.find("}")
            inner = rest[1:end] if end > 0 else ""
            pos = 0
            while pos < len(inner):
                lm = _LABEL.match(inner, pos)
                if not lm:
                    break
                labels.append((lm.group(1), _unescape(lm.group(2))))
                pos = lm.end()
            rest = rest[end + 1 :] if end > 0 else ""
        parts = rest.split()
        if not parts:
            continue
        try:
            value = _value(parts[0])
        except ValueError:
            continue
        out.append(Sample(name, tuple(sorted(labels)), value))
    return out


def total(samples: Iterable[Sample], name: str, where: Mapping[str, str] | None = None) -> float | None:
    """The sum of ``name``'s samples (across label sets, e.g. vLLM's per-model series), None when there is none."""
    found = [s.value for s in samples if s.name == name and all(s.label(k) == v for k, v in (where or {}).items())]
    return sum(found) if found else None


def counter(samples: Iterable[Sample], name: str) -> float | None:
    """A counter by its name, with or without the ``_total`` suffix the exposition may add."""
    samples = list(samples)
    value = total(samples, f"{name}_total")
    return value if value is not None else total(samples, name)


def first_total(samples: Iterable[Sample], names: Iterable[str]) -> float | None:
    """The :func:`total` of the first of ``names`` the samples have (a metric renamed between engine versions: an
    engine exporting both must not count twice)."""
    samples = list(samples)
    return next((v for n in names if (v := total(samples, n)) is not None), None)


def buckets(samples: Iterable[Sample], name: str) -> dict[float, float]:
    """A histogram's cumulative buckets (upper bound -> count; +Inf included), summed across label sets."""
    out: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket":
            le = s.label("le")
            if le is None:
                continue
            bound = _value(le)
            out[bound] = out.get(bound, 0.0) + s.value
    return dict(sorted(out.items()))
