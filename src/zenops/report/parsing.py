"""Parsing `vllm bench serve` output: the text summary (several blocks per file, either spelling) and the JSON
``--save-result`` writes (one object per file or one per line). Text or objects in, BenchResults out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zenops.report.results import BenchResult, MalformedBenchResultError

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
    meta = {k: str(v) for k, v in obj.items() if k in LABEL_KEYS and v is not None}
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
        price_per_hour=price_field(obj, source),
        flavor=_str_or_none(obj.get("flavor")),
        platform=_str_or_none(obj.get("platform")),
        label=_str_or_none(obj.get("label")),
        metadata=meta,
        input_len=total_in / completed if total_in is not None and completed else None,
        output_len=total_out / completed if total_out is not None and completed else None,
        instance=int(instance) if isinstance(instance, int | str) and str(instance).isdigit() else None,
        num_warmups=_json_count(obj, "num_warmups", source),
    )


# keys of a result or a manifest that label results (besides flavor/platform/label, which have their own fields)
LABEL_KEYS = (
    "flavor", "platform", "label", "vllm", "vllm_version", "zentorch", "image", "host", "run_id", "campaign", "cloud",
    "engine", "weights",  # a campaign's llama.cpp cell: engine llama.cpp, weights its GGUF format (zenops.bench.run)
)  # fmt: skip


def price_field(obj: Mapping[str, Any], where: str) -> float | None:
    price = _json_number(obj, "price_per_hour", where)
    if price is not None and price <= 0:
        raise MalformedBenchResultError(where, f"'price_per_hour': {obj['price_per_hour']!r} is not above 0")
    return price


def load_json_text(text: str, source: str) -> list[tuple[str, object]]:
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
