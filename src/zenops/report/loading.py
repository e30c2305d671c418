"""Loading results from paths: files and run directories, their run.json manifests (price and labels) and the
plan.json whose roofline each result is measured against."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zenops.errors import NoBenchResultError
from zenops.metrics import server as server_metrics
from zenops.report.parsing import LABEL_KEYS, is_bench_json, load_json_text, parse_json_result, parse_text, price_field
from zenops.report.results import (
    MANIFEST,
    BenchInputError,
    BenchPathNotFoundError,
    BenchResult,
    MalformedBenchResultError,
    PriceLookup,
)

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
    price = price_field(doc, str(path))
    if price is None and isinstance(flavor, str) and price_of is not None:
        price = price_of(flavor)
    labels = {k: str(v) for k, v in doc.items() if k in LABEL_KEYS and isinstance(v, str | int | float)}
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
        objects = load_json_text(text, str(path))
        results = [
            parse_json_result(obj, where) for where, obj in objects if isinstance(obj, dict) and is_bench_json(obj)
        ]
        if not results:
            reason = "JSON that is not a `vllm bench serve --save-result` result"
            if not in_directory:
                raise NoBenchResultError(
                    f"{path}: {reason} (no 'completed'/'output_throughput' keys)",
                    hint="pass the JSON `vllm bench serve --save-result` writes, or its text summary",
                    usage=True,
                )
            return [], reason
        return results, None
    results = parse_text(text, str(path))
    if not results:
        raise NoBenchResultError(
            f"{path}: no '== Serving Benchmark Result ==' block",
            hint="pass the output of `vllm bench serve` (text summary or --save-result JSON)",
            usage=True,
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
        if p.name.endswith(server_metrics.SUFFIX):  # a run's server-side read (with_server), not a result
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
                found.extend(
                    with_roofline(with_server(_apply(r, defaults, price_of), file), plan, by_dir) for r in results
                )
            if not found:
                others = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".txt", ".log"))
                hint = "a run directory holds the JSON files `vllm bench serve --save-result` writes"
                if others:
                    hint += f"; for text summaries pass the files themselves (e.g. {path / others[0]})"
                raise NoBenchResultError(f"{path}: no bench result (*.json) in this directory", hint=hint, usage=True)
            report.results.extend(found)
        else:
            results, _ = parse_file(path)
            directory = path.resolve().parent
            defaults = _manifest_for(path.resolve(), directory, cache, price_of)
            # a result of a zenops bench run directory: the host's plan.json is one level up
            plan = _plan_for(path.resolve(), directory.parent, plans)
            by_dir = int(directory.name) if directory.name.isdigit() else None
            report.results.extend(
                with_roofline(with_server(_apply(r, defaults, price_of), path), plan, by_dir) for r in results
            )
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
    """``result`` with its plan's weights and layout (metadata ``weights``: bfloat16, awq-int4, ...; ``layout``:
    zenops or a peer's) and the plan's
    ceiling at its concurrency (max concurrency, else every prompt at once) and its
    context (mean input + output tokens per request, else the plan's own context); unchanged without a plan."""
    if plan is None:
        return result
    # the format the server's plan loaded, and whose settings it ran (zenops's plan or a peer's)
    labels = {k: str(plan[k]) for k in ("weights", "layout") if plan.get(k) and k not in result.metadata}
    if labels:
        result = replace(result, metadata={**result.metadata, **labels})
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


# --- the server's own figures ---------------------------------------------------------------------------------------


def with_server(result: BenchResult, file: Path) -> BenchResult:
    """The result with the server-side figures of its run (``<stem>.server.json`` beside its file, written by the
    benchmark client's sampler: zenops.bench.sampler), when there are some; a file that cannot be read is passed
    over (the client's figures stand without it)."""
    side = file.with_name(file.name.removesuffix(".json") + server_metrics.SUFFIX)
    if file.suffix != ".json" or not side.is_file():
        return result
    try:
        read = json.loads(side.read_text())
    except (OSError, json.JSONDecodeError):
        return result
    return (
        counted_by_server(replace(result, server=server_metrics.server_figures(read)))
        if isinstance(read, dict)
        else result
    )


COUNT_TOLERANCE = 0.01  # the client's and the server's token counts agree within this share: the client's stands


def counted_by_server(result: BenchResult) -> BenchResult:
    """The result with its output tokens as the server counted them, when the client counted otherwise.

    `vllm bench serve` (0.32) takes a request's output tokens from the usage the server streams in a chunk of its
    own; llama.cpp's server sends its usage inside the last chunk that still carries a choice, which the client
    passes over, and then counts by re-tokenizing the generated text: with a random-weight model 15-23% more tokens
    than were generated (2-vCPU Zen 5, 2026-11-30: 618 counted of 512 generated), which inflates llama.cpp's tok/s and
    shrinks its TPOT. The server's own counter over the run (``server["output_tokens"]``) is then the count: tok/s
    are scaled by it (exact), and TPOT ((latency - TTFT) / (tokens - 1) per request) by the mean tokens per request
    before and after: exact when the client counted every request alike, else an approximation of second order in the
    spread of its per-request counts (not kept in the result). ``metadata
    ["output_tokens"]`` says so. Left as the client counted: no server figure, warm-up requests (the server counted
    them too: the runs' tokens cannot be told apart), or counts within COUNT_TOLERANCE."""
    served = (result.server or {}).get("output_tokens")
    if served is None or result.output_len is None or not result.completed or result.num_warmups:
        return result
    counted = result.output_len * result.completed
    if counted <= 0 or served <= 0 or abs(served - counted) <= COUNT_TOLERANCE * counted:
        return result
    ratio = served / counted
    per_request = served / result.completed
    tpot = (result.output_len - 1) / (per_request - 1) if per_request > 1 and result.output_len > 1 else None

    def scaled(v: float | None, by: float | None) -> float | None:
        return None if v is None or by is None else v * by

    return replace(
        result,
        output_tok_s=result.output_tok_s * ratio,
        total_tok_s=None if result.total_tok_s is None else result.total_tok_s + result.output_tok_s * (ratio - 1),
        median_tpot_ms=scaled(result.median_tpot_ms, tpot),
        mean_tpot_ms=scaled(result.mean_tpot_ms, tpot),
        p99_tpot_ms=scaled(result.p99_tpot_ms, tpot),
        output_len=per_request,
        metadata={
            **result.metadata,
            "output_tokens": f"{served:.0f} by the server's count ({counted:.0f} counted by the client)",
        },
    )
