"""Benchmark results of `vllm bench serve`: read them, price them, compare two sets, print and plot them.

Inputs, in any mix:

* the text summary `vllm bench serve` prints (the "Serving Benchmark Result" block), several per file. Both
  spellings are read: vLLM 0.11 prints ``Total Token throughput (tok/s):`` and no ``Failed requests:`` line (failed
  is then unknown, ``None``), newer releases ``Total token throughput (tok/s):`` and ``Failed requests:``. The model
  of a block is a ``Model:`` line inside it, else the nearest line before it (after the previous block) that names
  one: ``Results <model>`` / ``Model: <model>`` (the seed write-up's layout), vLLM's printed
  ``Namespace(... model='<model>' ...)``, or ``First model name: ..., first model id: <model>``; else the file's
  name labels it.
* the JSON ``--save-result`` writes (keys differ by release: 0.11 lacks ``failed``, 0.33 adds ``latencies`` and
  ``queue_times``), one object per file or, with ``--append-result``, one per line.
* a run directory: every ``*.json`` bench result below it. A ``run.json`` there (or in a directory between it and the
  result) is the run's manifest, never a result: its ``price_per_hour`` (or its ``flavor``, priced from the
  catalogue) is the default price of the results under it, its ``flavor``, ``platform``, ``label`` and other
  scalar keys label them. Keys a result carries itself (``vllm bench serve --metadata flavor=... price_per_hour=...``)
  win over the manifest's. Other JSON files that are not bench results are skipped (and listed).

Cost: $ per million output tokens = price per hour / (output tok/s x 3600) x 1e6; no price, no cost (never a guess).

Everything here is pure (files in, values or text out) except :func:`plot`, which writes a PNG with matplotlib.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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


class NoBenchResultError(BenchInputError):
    pass


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
        }


def cost_per_million(price_per_hour: float | None, output_tok_s: float | None) -> float | None:
    """$ per 1M output tokens = price per hour / (output tok/s x 3600) x 1e6; None without a price or throughput."""
    if price_per_hour is None or output_tok_s is None or output_tok_s <= 0:
        return None
    return price_per_hour / (output_tok_s * 3600) * 1e6


# --- text summaries ---------------------------------------------------------------------------------------------

_BLOCK_START = re.compile(r"^=+\s*Serving Benchmark Result\s*=+$")
_BLOCK_END = re.compile(r"^={10,}$")
_LINE = re.compile(r"^(?P<label>[^:]+?):\s+(?P<value>\S.*?)\s*$")
_HEADER = re.compile(
    r"^\s*(?:#+\s*)?(?:results?|model)(?:\s+(?:for|of))?(?:\s*[:=]\s*|\s+)[`'\"]?(?P<model>[A-Za-z0-9][\w.\-/:+]*?)[`'\"]?"
    r"\s*:?\s*$",
    re.IGNORECASE,
)
_NAMESPACE = re.compile(r"\bmodel=['\"](?P<model>[^'\"]+)['\"]")
_FIRST_MODEL = re.compile(r"first model id:\s*(?P<model>\S+)", re.IGNORECASE)

# label (lower case, single spaces) -> field; "Total Token throughput" (0.11) and "Total token throughput" both fit.
_TEXT_FIELDS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "maximum request concurrency": "max_concurrency",
    "benchmark duration (s)": "duration_s",
    "request throughput (req/s)": "request_s",
    "output token throughput (tok/s)": "output_tok_s",
    "total token throughput (tok/s)": "total_tok_s",
    **{
        f"{stat} {metric} (ms)": f"{stat}_{metric}_ms"
        for stat in ("mean", "median", "p99")
        for metric in ("ttft", "tpot", "itl")
    },
}
_INT_FIELDS = {"completed", "failed", "max_concurrency"}


def _model_from_preamble(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        for pattern in (_HEADER, _NAMESPACE, _FIRST_MODEL):
            m = pattern.search(line)
            if m:
                return m.group("model")
    return None


def _number(where: str, label: str, value: str, as_int: bool) -> float | int:
    try:
        number = float(value)
    except ValueError:
        raise MalformedBenchResultError(where, f"'{label}': '{value}' is not a number") from None
    if as_int:
        if not number.is_integer() or number < 0:
            raise MalformedBenchResultError(where, f"'{label}': '{value}' is not a count")
        return int(number)
    return number


def parse_text(text: str, source: str) -> list[BenchResult]:
    """Every "Serving Benchmark Result" block of ``text`` (printed by `vllm bench serve`), in order."""
    lines = text.splitlines()
    blocks: list[tuple[int, int, str | None]] = []  # (start, end, model from the lines before it)
    last_end = 0
    i = 0
    while i < len(lines):
        if _BLOCK_START.match(lines[i].strip()):
            start = i
            i += 1
            while i < len(lines) and not _BLOCK_END.match(lines[i].strip()):
                if _BLOCK_START.match(lines[i].strip()):
                    break
                i += 1
            if i >= len(lines) or not _BLOCK_END.match(lines[i].strip()):
                raise MalformedBenchResultError(
                    f"{source}:{start + 1}", "the Serving Benchmark Result block does not end (no '=====' line)"
                )
            blocks.append((start, i, _model_from_preamble(lines[last_end:start])))
            last_end = i + 1
        i += 1
    stem = Path(source).stem
    results = []
    for n, (start, end, header_model) in enumerate(blocks):
        where = f"{source}:{start + 1}"
        values: dict[str, float | int] = {}
        model = header_model
        for lineno in range(start + 1, end):
            m = _LINE.match(lines[lineno].strip())
            if not m:
                continue
            label = " ".join(m.group("label").split()).lower()
            if label == "model":
                model = m.group("value")
                continue
            key = _TEXT_FIELDS.get(label)
            if key is not None:
                values[key] = _number(f"{source}:{lineno + 1}", m.group("label"), m.group("value"), key in _INT_FIELDS)
        for required, label in (("completed", "Successful requests:"), ("output_tok_s", "Output token throughput")):
            if required not in values:
                raise MalformedBenchResultError(where, f"the block has no '{label}' line")
        if model is None:
            model = stem if len(blocks) == 1 else f"{stem}#{n + 1}"
        completed = int(values["completed"])
        failed = _opt_int(values.get("failed"))
        results.append(
            BenchResult(
                model=model,
                output_tok_s=float(values["output_tok_s"]),
                total_tok_s=_opt_float(values.get("total_tok_s")),
                request_s=_opt_float(values.get("request_s")),
                median_ttft_ms=_opt_float(values.get("median_ttft_ms")),
                mean_ttft_ms=_opt_float(values.get("mean_ttft_ms")),
                p99_ttft_ms=_opt_float(values.get("p99_ttft_ms")),
                median_tpot_ms=_opt_float(values.get("median_tpot_ms")),
                mean_tpot_ms=_opt_float(values.get("mean_tpot_ms")),
                p99_tpot_ms=_opt_float(values.get("p99_tpot_ms")),
                median_itl_ms=_opt_float(values.get("median_itl_ms")),
                mean_itl_ms=_opt_float(values.get("mean_itl_ms")),
                p99_itl_ms=_opt_float(values.get("p99_itl_ms")),
                completed=completed,
                failed=failed,
                max_concurrency=_opt_int(values.get("max_concurrency")),
                num_prompts=completed + failed if failed is not None else None,
                duration_s=_opt_float(values.get("duration_s")),
                source=where,
            )
        )
    return results


def _opt_float(v: float | int | None) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: float | int | None) -> int | None:
    return None if v is None else int(v)


# --- JSON (--save-result) ---------------------------------------------------------------------------------------


def is_bench_json(obj: object) -> bool:
    """Whether ``obj`` looks like what `vllm bench serve --save-result` writes (any release)."""
    return isinstance(obj, dict) and "completed" in obj and ("output_throughput" in obj or "duration" in obj)


def _json_number(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> float | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise MalformedBenchResultError(where, f"no '{key}'")
        return None
    if isinstance(v, str):  # --metadata values and request_rate "inf" are strings
        try:
            return float(v)
        except ValueError:
            raise MalformedBenchResultError(where, f"'{key}': '{v}' is not a number") from None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise MalformedBenchResultError(where, f"'{key}': {v!r} is not a number")
    return float(v)


def _json_count(obj: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> int | None:
    v = _json_number(obj, key, where, required=required)
    if v is None:
        return None
    if not v.is_integer() or v < 0:
        raise MalformedBenchResultError(where, f"'{key}': {obj[key]!r} is not a count")
    return int(v)


def _str_or_none(v: object) -> str | None:
    return None if v is None or isinstance(v, dict | list) else str(v)


def parse_json_result(obj: Mapping[str, Any], source: str) -> BenchResult:
    """One result object of `vllm bench serve --save-result` (0.11 to 0.33 key sets)."""
    if "output_throughput" not in obj:
        raise MalformedBenchResultError(
            source,
            "a bench result without 'output_throughput' (a pooling/embedding benchmark, or run without a tokenizer)",
            hint="zenops reports generation benchmarks: run `vllm bench serve` against a generating model",
        )
    model = obj.get("model_id") or obj.get("model") or obj.get("tokenizer_id")
    if not isinstance(model, str) or not model:
        model = Path(source.split(":", 1)[0]).stem
    output = _json_number(obj, "output_throughput", source, required=True)
    assert output is not None
    completed = _json_count(obj, "completed", source, required=True)
    assert completed is not None
    meta = {k: str(v) for k, v in obj.items() if k in _LABEL_KEYS and v is not None}
    total_in = _json_number(obj, "total_input_tokens", source)
    total_out = _json_number(obj, "total_output_tokens", source)
    instance = obj.get("instance")
    return BenchResult(
        model=model,
        output_tok_s=output,
        total_tok_s=_json_number(obj, "total_token_throughput", source),
        request_s=_json_number(obj, "request_throughput", source),
        median_ttft_ms=_json_number(obj, "median_ttft_ms", source),
        mean_ttft_ms=_json_number(obj, "mean_ttft_ms", source),
        p99_ttft_ms=_json_number(obj, "p99_ttft_ms", source),
        median_tpot_ms=_json_number(obj, "median_tpot_ms", source),
        mean_tpot_ms=_json_number(obj, "mean_tpot_ms", source),
        p99_tpot_ms=_json_number(obj, "p99_tpot_ms", source),
        median_itl_ms=_json_number(obj, "median_itl_ms", source),
        mean_itl_ms=_json_number(obj, "mean_itl_ms", source),
        p99_itl_ms=_json_number(obj, "p99_itl_ms", source),
        completed=completed,
        failed=_json_count(obj, "failed", source),
        max_concurrency=_json_count(obj, "max_concurrency", source),
        num_prompts=_json_count(obj, "num_prompts", source),
        duration_s=_json_number(obj, "duration", source),
        source=source,
        price_per_hour=_price(obj, source),
        flavor=_str_or_none(obj.get("flavor")),
        platform=_str_or_none(obj.get("platform")),
        label=_str_or_none(obj.get("label")),
        metadata=meta,
        input_len=total_in / completed if total_in is not None and completed else None,
        output_len=total_out / completed if total_out is not None and completed else None,
        instance=int(instance) if isinstance(instance, int | str) and str(instance).isdigit() else None,
    )


# keys of a result or a manifest that label results (besides flavor/platform/label, which have their own fields)
_LABEL_KEYS = (
    "flavor", "platform", "label", "vllm", "vllm_version", "zentorch", "image", "host", "run_id", "campaign", "cloud",
)  # fmt: skip


def _price(obj: Mapping[str, Any], where: str) -> float | None:
    price = _json_number(obj, "price_per_hour", where)
    if price is not None and price <= 0:
        raise MalformedBenchResultError(where, f"'price_per_hour': {obj['price_per_hour']!r} is not above 0")
    return price


def _load_json_text(text: str, source: str) -> list[tuple[str, object]]:
    """Objects of a JSON file: one document, a list of them, or one per line (--append-result)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as whole:
        out: list[tuple[str, object]] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((f"{source}:{n}", json.loads(line)))
            except json.JSONDecodeError:
                raise MalformedBenchResultError(
                    f"{source}:{whole.lineno}", f"not valid JSON ({whole.msg}, column {whole.colno})"
                ) from None
        if not out:
            raise MalformedBenchResultError(source, "empty JSON file") from None
        return out
    if isinstance(doc, list):
        return [(f"{source}[{n}]", item) for n, item in enumerate(doc)]
    return [(source, doc)]


# --- reading paths ----------------------------------------------------------------------------------------------


@dataclass
class Report:
    """The results read from some paths, and what was passed over (with why)."""

    results: list[BenchResult]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason)

    @property
    def flagged(self) -> list[BenchResult]:
        return [r for r in self.results if r.flagged]


@dataclass(frozen=True)
class _Defaults:
    price_per_hour: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MalformedBenchResultError(str(path), "not a text file") from None
    except OSError as e:
        raise BenchInputError(f"{path}: cannot read: {e.strerror or e}") from e


def read_manifest(path: Path, price_of: PriceLookup | None = None) -> _Defaults:
    """A run directory's run.json: the price (its own, else its flavor's) and labels for the results under it."""
    text = _read(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise MalformedBenchResultError(
            f"{path}:{e.lineno}", f"run manifest is not valid JSON ({e.msg})", hint="fix or remove the run.json"
        ) from None
    if not isinstance(doc, dict):
        raise MalformedBenchResultError(str(path), "run manifest is not a JSON object", hint="fix or remove run.json")
    flavor = doc.get("flavor")
    if isinstance(flavor, dict):  # {"flavor": {"name": ..., "price_per_hour": ...}}
        nested = flavor
        flavor = nested.get("name")
        doc = {**doc, "flavor": flavor}
        if "price_per_hour" not in doc and "price_per_hour" in nested:
            doc["price_per_hour"] = nested["price_per_hour"]
    price = _price(doc, str(path))
    if price is None and isinstance(flavor, str) and price_of is not None:
        price = price_of(flavor)
    labels = {k: str(v) for k, v in doc.items() if k in _LABEL_KEYS and isinstance(v, str | int | float)}
    return _Defaults(price, labels)


def _apply(result: BenchResult, defaults: _Defaults, price_of: PriceLookup | None) -> BenchResult:
    price = result.price_per_hour
    if price is None:
        price = defaults.price_per_hour
    flavor = result.flavor or defaults.labels.get("flavor")
    if price is None and flavor and price_of is not None:
        price = price_of(flavor)
    return replace(
        result,
        price_per_hour=price,
        flavor=flavor,
        platform=result.platform or defaults.labels.get("platform"),
        label=result.label or defaults.labels.get("label"),
        metadata={**defaults.labels, **result.metadata},
    )


def parse_file(path: Path, *, in_directory: bool = False) -> tuple[list[BenchResult], str | None]:
    """The results of one file, and why it holds none if it is a JSON file that is not a bench result.

    A file named on the command line must hold results; inside a run directory other JSON files are passed over.
    """
    text = _read(path)
    if not text.strip():
        raise MalformedBenchResultError(str(path), "empty file")
    if text.lstrip()[:1] in ("{", "["):
        objects = _load_json_text(text, str(path))
        results = [
            parse_json_result(obj, where) for where, obj in objects if isinstance(obj, dict) and is_bench_json(obj)
        ]
        if not results:
            reason = "JSON that is not a `vllm bench serve --save-result` result"
            if not in_directory:
                raise NoBenchResultError(
                    f"{path}: {reason} (no 'completed'/'output_throughput' keys)",
                    hint="pass the JSON `vllm bench serve --save-result` writes, or its text summary",
                )
            return [], reason
        return results, None
    results = parse_text(text, str(path))
    if not results:
        raise NoBenchResultError(
            f"{path}: no '== Serving Benchmark Result ==' block",
            hint="pass the output of `vllm bench serve` (text summary or --save-result JSON)",
        )
    return results, None


def _manifest_for(file: Path, root: Path, cache: dict[Path, _Defaults], price_of: PriceLookup | None) -> _Defaults:
    """The nearest run.json between ``file`` and ``root`` (inclusive); nearer manifests' keys win."""
    chain: list[Path] = []
    d = file.parent
    while True:
        chain.append(d)
        if d in (root, d.parent):
            break
        d = d.parent
    merged = _Defaults()
    for directory in reversed(chain):  # root first, the file's own directory last
        m = directory / MANIFEST
        if not m.is_file():
            continue
        if directory not in cache:
            cache[directory] = read_manifest(m, price_of)
        found = cache[directory]
        merged = _Defaults(
            found.price_per_hour if found.price_per_hour is not None else merged.price_per_hour,
            {**merged.labels, **found.labels},
        )
    return merged


def _walk(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*.json")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or p.name == MANIFEST or not p.is_file():
            continue
        yield p


def load(paths: Iterable[Path], *, price_of: PriceLookup | None = None) -> Report:
    """Read every result under ``paths`` (files or run directories), with the prices and labels of their manifests.

    Raises BenchPathNotFoundError, NoBenchResultError (a path holds no result) or MalformedBenchResultError.
    """
    report = Report(results=[])
    for path in paths:
        if not path.exists():
            raise BenchPathNotFoundError(path)
        cache: dict[Path, _Defaults] = {}
        plans: dict[Path, Mapping[str, Any] | None] = {}
        if path.is_dir():
            root = path.resolve()
            found: list[BenchResult] = []
            for file in _walk(root):
                if file.name == PLAN:
                    continue
                results, why_not = parse_file(file, in_directory=True)
                if why_not:
                    report.skipped.append((str(file), why_not))
                defaults = _manifest_for(file, root, cache, price_of)
                plan = _plan_for(file, root, plans)
                by_dir = int(file.parent.name) if file.parent.name.isdigit() else None
                found.extend(with_roofline(_apply(r, defaults, price_of), plan, by_dir) for r in results)
            if not found:
                others = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".txt", ".log"))
                hint = "a run directory holds the JSON files `vllm bench serve --save-result` writes"
                if others:
                    hint += f"; for text summaries pass the files themselves (e.g. {path / others[0]})"
                raise NoBenchResultError(f"{path}: no bench result (*.json) in this directory", hint=hint)
            report.results.extend(found)
        else:
            results, _ = parse_file(path)
            directory = path.resolve().parent
            defaults = _manifest_for(path.resolve(), directory, cache, price_of)
            # a result of a zenops bench run directory: the host's plan.json is one level up
            plan = _plan_for(path.resolve(), directory.parent, plans)
            by_dir = int(directory.name) if directory.name.isdigit() else None
            report.results.extend(with_roofline(_apply(r, defaults, price_of), plan, by_dir) for r in results)
    return report


# --- the roofline -----------------------------------------------------------------------------------------------

PLAN = "plan.json"  # zenops bench: runs/<id>/<host>/plan.json, the serving plan of the host's servers


def ceiling(plan: Mapping[str, Any], instance: int, *, concurrency: int, context_tokens: int) -> dict[str, Any] | None:
    """The plan's decode roofline of ``instance`` (zenops.planner.roofline, with the figures and model inputs the
    plan recorded) evaluated at a bench's concurrency (at most the plan's max-num-seqs: more requests queue) and
    context (input + output tokens); None when the plan has no ceiling for it."""
    from zenops.planner import roofline  # noqa: PLC0415

    instances = plan.get("instances") or []
    inst = next((i for i in instances if isinstance(i, Mapping) and i.get("index") == instance), None)
    roof = inst.get("roofline") if inst else None
    if not isinstance(roof, Mapping) or not roof.get("weight_bytes") or not roof.get("bandwidth_gbps"):
        return None
    seats = plan.get("max_num_seqs")
    c = max(1, min(concurrency, int(seats))) if isinstance(seats, int) and seats > 0 else max(1, concurrency)
    r = roofline(
        bandwidth_gbps=float(roof["bandwidth_gbps"]),
        gflops=None if roof.get("gflops") is None else float(roof["gflops"]),
        weight_bytes=int(roof["weight_bytes"]),
        kv_bytes_per_token=int(roof.get("kv_bytes_per_token_of_context") or 0),
        context_tokens=max(0, int(context_tokens)),
        params=float(roof.get("params") or 0),
        concurrency=c,
        attention_flops_per_context_token=int(roof.get("attention_flops_per_token_of_context") or 0),
        source=str(roof.get("source") or ""),
    )
    return r.to_dict()


def _plan_for(file: Path, root: Path, cache: dict[Path, Mapping[str, Any] | None]) -> Mapping[str, Any] | None:
    """The nearest plan.json between ``file`` and ``root`` (the host's, in a zenops bench run directory)."""
    d = file.parent
    while True:
        if d not in cache:
            path = d / PLAN
            try:
                doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            except (OSError, ValueError):
                doc = None
            cache[d] = doc if isinstance(doc, dict) and isinstance(doc.get("instances"), list) else None
        if cache[d] is not None or d in (root, d.parent):
            return cache[d]
        d = d.parent


def with_roofline(result: BenchResult, plan: Mapping[str, Any] | None, instance: int | None = None) -> BenchResult:
    """``result`` with the plan's ceiling at its concurrency (max concurrency, else every prompt at once) and its
    context (mean input + output tokens per request, else the plan's own context); unchanged without a plan."""
    if plan is None:
        return result
    index = result.instance if result.instance is not None else instance
    if index is None:
        index = 0 if len(plan.get("instances") or []) == 1 else None
    concurrency = result.max_concurrency or result.num_prompts
    if index is None or not concurrency:
        return result
    if result.input_len is not None and result.output_len is not None:
        context = round(result.input_len + result.output_len)
    else:
        inst: Mapping[str, Any] = next((i for i in plan.get("instances") or [] if i.get("index") == index), {})
        context = int((inst.get("roofline") or {}).get("context_tokens") or 0)
    return replace(result, roofline=ceiling(plan, index, concurrency=concurrency, context_tokens=context))


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


def host_totals(results: Iterable[BenchResult]) -> list[BenchResult]:
    """One row per host and run where several instances served side by side (the planner's throughput objective):
    their output, total and request throughput and their requests summed, so the host's $ per 1M output tokens is
    the server's price over everything it served (each instance's own row prices it as if it had the server alone).
    Latencies are per request, not additive: the row keeps the worst instance's medians. Hosts with one instance
    get no row. Grouped by run, host, model, flavor, platform, label and concurrency."""
    groups: dict[tuple[Any, ...], list[BenchResult]] = defaultdict(list)
    for r in results:
        host = r.metadata.get("host")
        if host is None or r.instance is None:
            continue
        key = (r.metadata.get("run_id"), host, r.model, r.flavor, r.platform, r.label, r.max_concurrency)
        groups[key].append(r)
    out = []
    for (_run, host, *_), rs in groups.items():
        instances = sorted({r.instance for r in rs if r.instance is not None})
        if len(instances) < 2:
            continue

        def total(values: Iterable[float | None]) -> float | None:
            vs = list(values)
            return None if any(v is None for v in vs) else sum(v for v in vs if v is not None)

        def worst(values: Iterable[float | None]) -> float | None:
            vs = [v for v in values if v is not None]
            return max(vs) if vs else None

        first = rs[0]
        failed = [r.failed for r in rs]
        out.append(
            replace(
                first,
                output_tok_s=sum(r.output_tok_s for r in rs),
                total_tok_s=total(r.total_tok_s for r in rs),
                request_s=total(r.request_s for r in rs),
                median_ttft_ms=worst(r.median_ttft_ms for r in rs),
                mean_ttft_ms=None,
                p99_ttft_ms=worst(r.p99_ttft_ms for r in rs),
                median_tpot_ms=worst(r.median_tpot_ms for r in rs),
                mean_tpot_ms=None,
                p99_tpot_ms=worst(r.p99_tpot_ms for r in rs),
                median_itl_ms=worst(r.median_itl_ms for r in rs),
                mean_itl_ms=None,
                p99_itl_ms=worst(r.p99_itl_ms for r in rs),
                completed=sum(r.completed for r in rs),
                failed=None if any(f is None for f in failed) else sum(f for f in failed if f is not None),
                num_prompts=None
                if any(r.num_prompts is None for r in rs)
                else sum(r.num_prompts for r in rs if r.num_prompts is not None),
                duration_s=worst(r.duration_s for r in rs),
                source=f"{host}: instances {', '.join(map(str, instances))} summed",
                label=f"{host} total ({len(instances)} instances)",
                instance=None,
                roofline=None,
            )
        )
    return ordered(out)


# --- comparison -------------------------------------------------------------------------------------------------


def pct_change(new: float | None, old: float | None) -> float | None:
    """(new - old) / old in percent; None when either is unknown or old is 0."""
    if new is None or old is None or old == 0:
        return None
    return (new - old) / old * 100


@dataclass(frozen=True)
class Delta:
    """One model at one concurrency in two reports: ``current`` (the report) against ``baseline`` (--compare)."""

    current: BenchResult
    baseline: BenchResult

    @property
    def model(self) -> str:
        return self.current.model

    @property
    def max_concurrency(self) -> int | None:
        return self.current.max_concurrency

    @property
    def output_tok_s_pct(self) -> float | None:
        return pct_change(self.current.output_tok_s, self.baseline.output_tok_s)

    @property
    def median_ttft_pct(self) -> float | None:
        return pct_change(self.current.median_ttft_ms, self.baseline.median_ttft_ms)

    @property
    def median_tpot_pct(self) -> float | None:
        return pct_change(self.current.median_tpot_ms, self.baseline.median_tpot_ms)

    @property
    def cost_pct(self) -> float | None:
        return pct_change(self.current.cost_per_million_output_tokens, self.baseline.cost_per_million_output_tokens)

    def to_dict(self) -> dict[str, Any]:
        cur, base = self.current, self.baseline
        return {
            "model": self.model,
            "max_concurrency": self.max_concurrency,
            "output_throughput": cur.output_tok_s,
            "baseline_output_throughput": base.output_tok_s,
            "output_throughput_pct": self.output_tok_s_pct,
            "median_ttft_ms": cur.median_ttft_ms,
            "baseline_median_ttft_ms": base.median_ttft_ms,
            "median_ttft_pct": self.median_ttft_pct,
            "median_tpot_ms": cur.median_tpot_ms,
            "baseline_median_tpot_ms": base.median_tpot_ms,
            "median_tpot_pct": self.median_tpot_pct,
            "cost_per_million_output_tokens": cur.cost_per_million_output_tokens,
            "baseline_cost_per_million_output_tokens": base.cost_per_million_output_tokens,
            "cost_pct": self.cost_pct,
            "source": cur.source,
            "baseline_source": base.source,
        }


@dataclass(frozen=True)
class Comparison:
    deltas: list[Delta]
    only_current: list[BenchResult]
    only_baseline: list[BenchResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "deltas": [d.to_dict() for d in self.deltas],
            "only_in_report": [_key_dict(r) for r in self.only_current],
            "only_in_baseline": [_key_dict(r) for r in self.only_baseline],
        }


def _key_dict(r: BenchResult) -> dict[str, Any]:
    return {"model": r.model, "max_concurrency": r.max_concurrency, "source": r.source}


def compare(current: Sequence[BenchResult], baseline: Sequence[BenchResult]) -> Comparison:
    """Pair results by (model, max concurrency); repeated runs of a pair are matched in the order they were read."""
    base: dict[tuple[str, int | None], list[BenchResult]] = defaultdict(list)
    for r in baseline:
        base[(r.model, r.max_concurrency)].append(r)
    deltas: list[Delta] = []
    only_current: list[BenchResult] = []
    for r in ordered(current):
        candidates = base.get((r.model, r.max_concurrency))
        if candidates:
            deltas.append(Delta(r, candidates.pop(0)))
        else:
            only_current.append(r)
    return Comparison(deltas, only_current, ordered(r for rs in base.values() for r in rs))


# --- text output ------------------------------------------------------------------------------------------------


def fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def fmt_price(p: float) -> str:
    """0.79 -> "0.79", 1.5 -> "1.50", 0.1234 -> "0.1234"."""
    two = f"{p:.2f}"
    return two if math.isclose(float(two), p, rel_tol=0, abs_tol=1e-9) else f"{p:.6f}".rstrip("0")


def cost_header(results: Sequence[BenchResult]) -> tuple[str, bool]:
    """The cost column's title, and whether a per-row price column is needed (the results differ in price)."""
    prices = {r.price_per_hour for r in results if r.price_per_hour is not None}
    if len(prices) == 1 and all(r.price_per_hour is not None for r in results):
        return f"$ per 1M output tokens at ${fmt_price(prices.pop())}/h", False
    return "$ per 1M output tokens", bool(prices)


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [_md_row(header), "|" + "---|" * len(header)]
    lines.extend(_md_row(r) for r in rows)
    return "\n".join(lines) + "\n"


def roofline_cell(r: BenchResult) -> str:
    """``"41.2% of 152.3 (memory)"``: measured output tok/s against the plan's ceiling and the binding roof."""
    if r.roofline_pct is None or not r.roofline:
        return "-"
    return f"{r.roofline_pct:.1f}% of {fmt(float(r.roofline['ceiling_tok_s']), 1)} ({r.roofline.get('binding')})"


def _failed_cell(r: BenchResult) -> str:
    if r.failed is None:
        return "?" if not r.flagged else f"? ({'; '.join(r.problems)})"
    return f"{r.failed} FAILED" if r.flagged else str(r.failed)


def markdown(results: Sequence[BenchResult], *, label_column: bool = False) -> str:
    """A Markdown table in the layout of the seed write-up (Model | Output tok/s | Median TTFT ms | Median TPOT ms |
    $ per 1M output tokens at $P/h). Columns appear only when they say something: Concurrency when the results
    differ in it, Flavor when they differ in flavor, $/h when they differ in price, Failed when any result failed;
    with ``label_column`` each row's label first (the host of :func:`host_totals` rows)."""
    rows = ordered(results)
    show_conc = len({r.max_concurrency for r in rows}) > 1
    show_flavor = len({r.flavor for r in rows}) > 1
    show_platform = len({r.platform for r in rows}) > 1
    show_failed = any(r.flagged for r in rows)
    show_roof = any(r.roofline_pct is not None for r in rows)
    cost_title, show_price = cost_header(rows)
    header = ["Label"] if label_column else []
    header += ["Model"]
    header += ["Flavor"] if show_flavor else []
    header += ["Platform"] if show_platform else []
    header += ["Concurrency"] if show_conc else []
    header += ["Output tok/s", "Median TTFT ms", "Median TPOT ms"]
    header += ["Failed"] if show_failed else []
    header += ["$/h"] if show_price else []
    header += ["Of the plan's ceiling (roof)"] if show_roof else []
    header.append(cost_title)
    body = []
    for r in rows:
        cells = [r.label or "-"] if label_column else []
        cells += [r.model]
        cells += [r.flavor or "-"] if show_flavor else []
        cells += [r.platform or "-"] if show_platform else []
        cells += [str(r.max_concurrency or "-")] if show_conc else []
        cells += [fmt(r.output_tok_s), fmt(r.median_ttft_ms), fmt(r.median_tpot_ms)]
        cells += [_failed_cell(r)] if show_failed else []
        cells += [fmt_price(r.price_per_hour) if r.price_per_hour is not None else "-"] if show_price else []
        cells += [roofline_cell(r)] if show_roof else []
        cells.append(fmt(r.cost_per_million_output_tokens))
        body.append(cells)
    return _md_table(header, body)


COMPARISON_HEADER = (
    "Model",
    "Concurrency",
    "Output tok/s",
    "Baseline tok/s",
    "Δ tok/s",
    "Median TTFT ms",
    "Baseline TTFT ms",
    "Δ TTFT",
    "Median TPOT ms",
    "Baseline TPOT ms",
    "Δ TPOT",
    "$ per 1M output tokens",
    "Baseline $",
    "Δ $",
)


def comparison_rows(comp: Comparison) -> list[list[str]]:
    rows = []
    for d in comp.deltas:
        c, b = d.current, d.baseline
        rows.append(
            [
                d.model,
                str(d.max_concurrency or "-"),
                fmt(c.output_tok_s),
                fmt(b.output_tok_s),
                fmt_pct(d.output_tok_s_pct),
                fmt(c.median_ttft_ms),
                fmt(b.median_ttft_ms),
                fmt_pct(d.median_ttft_pct),
                fmt(c.median_tpot_ms),
                fmt(b.median_tpot_ms),
                fmt_pct(d.median_tpot_pct),
                fmt(c.cost_per_million_output_tokens),
                fmt(b.cost_per_million_output_tokens),
                fmt_pct(d.cost_pct),
            ]
        )
    return rows


def comparison_markdown(comp: Comparison) -> str:
    out = _md_table(COMPARISON_HEADER, comparison_rows(comp))
    for title, rs in (("Only in the report", comp.only_current), ("Only in the baseline", comp.only_baseline)):
        if rs:
            out += f"\n{title}: " + ", ".join(f"{r.model} (concurrency {r.max_concurrency or '-'})" for r in rs) + "\n"
    return out


CSV_FIELDS = (
    "model",
    "max_concurrency",
    "num_prompts",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "median_ttft_ms",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "price_per_hour",
    "cost_per_million_output_tokens",
    "roofline_pct",
    "ceiling_tok_s",
    "roofline_binding",
    "flavor",
    "platform",
    "label",
    "source",
    "problems",
)


def _csv(fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in fields})
    return buf.getvalue()


def to_csv(results: Sequence[BenchResult]) -> str:
    """One row per result, full precision (numbers unrounded), empty cells for unknowns; problems joined by '; '."""
    rows = []
    for r in ordered(results):
        d = r.to_dict()
        d["problems"] = "; ".join(r.problems)
        rows.append(d)
    return _csv(CSV_FIELDS, rows)


COMPARISON_CSV_FIELDS = (
    "model",
    "max_concurrency",
    "output_throughput",
    "baseline_output_throughput",
    "output_throughput_pct",
    "median_ttft_ms",
    "baseline_median_ttft_ms",
    "median_ttft_pct",
    "median_tpot_ms",
    "baseline_median_tpot_ms",
    "median_tpot_pct",
    "cost_per_million_output_tokens",
    "baseline_cost_per_million_output_tokens",
    "cost_pct",
    "source",
    "baseline_source",
)


def comparison_csv(comp: Comparison) -> str:
    """One row per matched (model, concurrency): both values and the change in percent of the report's numbers."""
    return _csv(COMPARISON_CSV_FIELDS, (d.to_dict() for d in comp.deltas))


# --- plot -------------------------------------------------------------------------------------------------------


def _series(results: Sequence[BenchResult]) -> dict[str, list[BenchResult]]:
    several_flavors = len({r.flavor for r in results}) > 1
    several_platforms = len({r.platform for r in results}) > 1
    series: dict[str, list[BenchResult]] = defaultdict(list)
    for r in ordered(results):
        if r.max_concurrency is None:
            continue
        tags = ([r.flavor or "-"] if several_flavors else []) + ([r.platform or "-"] if several_platforms else [])
        name = f"{r.model} ({', '.join(tags)})" if tags else r.model
        series[name].append(r)
    return series


def plot(results: Sequence[BenchResult], path: Path, *, baseline: Sequence[BenchResult] = ()) -> int:
    """PNG at ``path``: output tok/s, median TTFT and median TPOT against max concurrency, one line per model (the
    baseline's dashed). Results without a max concurrency cannot be placed and are left out. Returns the number of
    results plotted."""
    # matplotlib is imported here, not at the top: only --plot pays for it. Agg renders without a display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    current = _series(results)
    base = _series(baseline)
    plotted = sum(len(rs) for rs in current.values()) + sum(len(rs) for rs in base.values())
    if not plotted:
        raise UsageError(
            "nothing to plot: no result names its max concurrency",
            hint="benchmark with `vllm bench serve --max-concurrency N`",
        )
    fig = Figure(figsize=(16, 5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    panels: list[tuple[str, Callable[[BenchResult], float | None]]] = [
        ("Output tok/s", lambda r: r.output_tok_s),
        ("Median TTFT (ms)", lambda r: r.median_ttft_ms),
        ("Median TPOT (ms)", lambda r: r.median_tpot_ms),
    ]
    style_of: dict[str, tuple[str, str]] = {}  # colour and marker; a model keeps both in the baseline
    for name in [*current, *base]:
        n = len(style_of)
        style_of.setdefault(name, (f"C{n % 10}", "os^Dv"[n // 10 % 5]))
    concurrencies = sorted(
        {c for rs in (*current.values(), *base.values()) for r in rs if (c := r.max_concurrency) is not None}
    )
    for ax, (title, metric) in zip(axes, panels, strict=True):
        for series, style, suffix in ((current, "-", ""), (base, "--", " (baseline)")):
            for name, rs in series.items():
                points = [(r.max_concurrency, metric(r)) for r in rs if metric(r) is not None]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                color, marker = style_of[name]
                ax.plot(xs, ys, style, marker=marker, color=color, label=name + suffix)
        ax.set_title(title)
        ax.set_xlabel("max concurrency")
        ax.set_xticks(concurrencies)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    fig.suptitle("vllm bench serve: throughput and latency against max concurrency")
    fig.savefig(path, format="png", dpi=100)
    return plotted
