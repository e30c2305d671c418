"""The normalized benchmark result, whichever release and format it came from, its cost, and the errors of reading
results."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zenops.cost import cost_per_million
from zenops.errors import UsageError

MANIFEST = "run.json"

PriceLookup = Callable[[str], float | None]
"""A flavor's price per hour, or None when the flavor or its price is unknown."""


# --- errors -----------------------------------------------------------------------------------------------------


class BenchInputError(UsageError):
    """A path given to the report cannot be read as benchmark results."""


class BenchPathNotFoundError(BenchInputError):
    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: no such file or directory", hint="pass a bench result file or a run directory")


class MalformedBenchResultError(BenchInputError):
    def __init__(self, where: str, problem: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"{where}: {problem}",
            hint=hint or "pass the unedited output of `vllm bench serve` (its text summary or its --save-result JSON)",
        )
        self.where = where


# --- the normalized result --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchResult:
    """One `vllm bench serve` run, whichever release and format it came from. Unknown numbers are None."""

    model: str
    output_tok_s: float
    total_tok_s: float | None
    request_s: float | None
    median_ttft_ms: float | None
    mean_ttft_ms: float | None
    p99_ttft_ms: float | None
    median_tpot_ms: float | None
    mean_tpot_ms: float | None
    p99_tpot_ms: float | None
    median_itl_ms: float | None
    mean_itl_ms: float | None
    p99_itl_ms: float | None
    completed: int
    failed: int | None  # None: the release did not report it (vLLM 0.11)
    max_concurrency: int | None  # None: no limit was set
    num_prompts: int | None
    duration_s: float | None
    source: str  # file, with ":<line>" for a text block or a JSON line
    price_per_hour: float | None = None
    flavor: str | None = None
    platform: str | None = None
    label: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    input_len: float | None = None  # mean prompt tokens per completed request
    output_len: float | None = None  # mean output tokens per completed request
    instance: int | None = None  # the server instance (zenops bench's metadata), None when unknown
    roofline: Mapping[str, Any] | None = None  # the plan's decode ceiling at this run's concurrency and context
    server: Mapping[str, Any] | None = None  # the server's own figures of the run (zenops.metrics.server), if read
    num_warmups: int | None = None  # requests sent before the measured ones (zenops bench records it), None: unknown

    @property
    def cost_per_million_output_tokens(self) -> float | None:
        return cost_per_million(self.price_per_hour, self.output_tok_s)

    @property
    def roofline_pct(self) -> float | None:
        """Measured output tok/s as a percentage of the plan's ceiling; None without a ceiling."""
        if not self.roofline or not self.roofline.get("ceiling_tok_s"):
            return None
        return self.output_tok_s / float(self.roofline["ceiling_tok_s"]) * 100

    @property
    def problems(self) -> list[str]:
        """Why these numbers do not measure serving: failed requests, nothing completed. Empty when fine."""
        out: list[str] = []
        if self.completed == 0:
            out.append("no request completed")
        if self.failed:
            total = self.completed + self.failed
            out.append(f"{self.failed} of {total} requests failed")
        elif self.failed is None and self.num_prompts is not None and 0 < self.completed < self.num_prompts:
            out.append(f"only {self.completed} of {self.num_prompts} prompts completed")
        return out

    @property
    def flagged(self) -> bool:
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_concurrency": self.max_concurrency,
            "num_prompts": self.num_prompts,
            "completed": self.completed,
            "failed": self.failed,
            "duration_s": self.duration_s,
            "request_throughput": self.request_s,
            "output_throughput": self.output_tok_s,
            "total_token_throughput": self.total_tok_s,
            "median_ttft_ms": self.median_ttft_ms,
            "mean_ttft_ms": self.mean_ttft_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
            "median_tpot_ms": self.median_tpot_ms,
            "mean_tpot_ms": self.mean_tpot_ms,
            "p99_tpot_ms": self.p99_tpot_ms,
            "median_itl_ms": self.median_itl_ms,
            "mean_itl_ms": self.mean_itl_ms,
            "p99_itl_ms": self.p99_itl_ms,
            "price_per_hour": self.price_per_hour,
            "cost_per_million_output_tokens": self.cost_per_million_output_tokens,
            "roofline_pct": self.roofline_pct,
            "ceiling_tok_s": self.roofline.get("ceiling_tok_s") if self.roofline else None,
            "roofline_binding": self.roofline.get("binding") if self.roofline else None,
            "roofline": dict(self.roofline) if self.roofline else None,
            "flavor": self.flavor,
            "platform": self.platform,
            "label": self.label,
            "metadata": dict(self.metadata),
            "source": self.source,
            "problems": self.problems,
            "server": dict(self.server) if self.server else None,
        }


def with_price(results: Iterable[BenchResult], price_per_hour: float | None) -> list[BenchResult]:
    """The results priced at ``price_per_hour`` (an operator's flag wins over manifests); unchanged when None."""
    if price_per_hour is None:
        return list(results)
    return [replace(r, price_per_hour=price_per_hour) for r in results]


def ordered(results: Iterable[BenchResult]) -> list[BenchResult]:
    """Models by their best output throughput, highest first; a model's runs by concurrency, then flavor."""
    by_model: dict[str, list[BenchResult]] = defaultdict(list)
    for r in results:
        by_model[r.model].append(r)
    groups = sorted(by_model.values(), key=lambda rs: (-max(r.output_tok_s for r in rs), rs[0].model))
    return [
        r
        for rs in groups
        for r in sorted(
            rs, key=lambda r: (r.max_concurrency is None, r.max_concurrency or 0, r.flavor or "", r.platform or "")
        )
    ]
