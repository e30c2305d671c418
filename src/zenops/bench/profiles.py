"""The benchmark profiles of zenops/catalog/bench.yaml and the runs they make (one per concurrency level); flags
that are set win over a profile's values. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from zenops import catalog
from zenops.errors import ConfigError, UsageError
from zenops.request_options import MAX_CONCURRENCY

# --- profiles -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRun:
    """One `vllm bench serve` invocation against one server."""

    max_concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    temperature: float
    ignore_eos: bool = True
    dataset: str = "random"
    # requests sent (at max_concurrency) before the measured ones and left out of the figures: a server just started
    # answers its first requests slower (its first run measured 828 tok/s and 256 ms median TTFT, the next one 1514
    # and 16 ms, on the same devhost)
    num_warmups: int = 0

    @property
    def name(self) -> str:
        return f"c{self.max_concurrency}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    dataset: str
    input_len: int
    output_len: int
    num_prompts: int
    concurrency: tuple[int, ...]
    temperature: float
    ignore_eos: bool


def _pos_int(where: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(where, key, f"{value!r} is not a whole number above 0")
    return value


def profiles() -> dict[str, Profile]:
    """The profiles of zenops/catalog/bench.yaml."""
    where, entries = catalog.load_resource("bench.yaml", "profiles")
    out = {}
    for name, e in entries.items():
        levels = e.get("concurrency")
        if not isinstance(levels, list) or not levels:
            raise ConfigError(where, f"{name}.concurrency", "must be a non-empty list")
        out[name] = Profile(
            name=name,
            description=str(e.get("description", "")),
            dataset=str(e.get("dataset", "random")),
            input_len=_pos_int(where, f"{name}.input_len", e.get("input_len")),
            output_len=_pos_int(where, f"{name}.output_len", e.get("output_len")),
            num_prompts=_pos_int(where, f"{name}.num_prompts", e.get("num_prompts")),
            concurrency=tuple(_pos_int(where, f"{name}.concurrency", c) for c in levels),
            temperature=float(e.get("temperature", 0.0)),
            ignore_eos=bool(e.get("ignore_eos", True)),
        )
    return out


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> ``(1, 2, 4, 8)``: concurrency levels, each a whole number above 0, in the order given."""
    levels: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"--concurrency {text}: {part!r} is not a whole number above 0", hint="e.g. 1,2,4,8")
        if int(part) > MAX_CONCURRENCY:
            raise UsageError(
                f"--concurrency {text}: {part} is more than {MAX_CONCURRENCY} concurrent requests",
                hint=f"levels from 1 to {MAX_CONCURRENCY}, e.g. 1,2,4,8",
            )
        if int(part) not in levels:
            levels.append(int(part))
    if not levels:
        raise UsageError("--concurrency is empty", hint="e.g. --concurrency 1,2,4,8")
    return tuple(levels)


def runs_for(
    profile: str,
    *,
    concurrency: Sequence[int] | None = None,
    num_prompts: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    num_warmups: int | None = None,
) -> list[BenchRun]:
    """The runs of ``profile``, one per concurrency level; flags that are set win over the profile's values."""
    known = profiles()
    if profile not in known:
        raise UsageError(f"unknown profile {profile!r}", hint=f"use one of: {', '.join(sorted(known))}")
    p = known[profile]
    for flag, value in (("--num-prompts", num_prompts), ("--input-len", input_len), ("--output-len", output_len)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: must be above 0")
    if num_warmups is not None and num_warmups < 0:
        raise UsageError(f"--warmups {num_warmups}: must be 0 or more")
    return [
        BenchRun(
            max_concurrency=level,
            num_prompts=num_prompts or p.num_prompts,
            input_len=input_len or p.input_len,
            output_len=output_len or p.output_len,
            temperature=p.temperature,
            ignore_eos=p.ignore_eos,
            dataset=p.dataset,
            num_warmups=num_warmups or 0,
        )
        for level in (concurrency or p.concurrency)
    ]
