"""zenops against llama.cpp's server, as a markdown table, from a campaign report's rows (`zenops --json campaign
report ID`, a campaign with ``variants: engines``): per host and model architecture, one line per engine and format
with its kernel, and per concurrency the output tok/s (mean and repeat spread), its ratio to zenops's bf16 plan and
its % of the ceiling; then the two engines paired at equal bytes per weight with the verdict (zenops.llamacpp.pairs).

    python -m zenops.llamacpp_table REPORT.json      (``-``: standard input; the last line of `zenops --json ...`)

A row's engine and format are its ``engine`` and ``weights`` fields; without them they come from the variant
(``zenops``; ``llamacpp-<gguf format>``) and, for zenops, the plan's weights the report carries (``metadata.weights``)
or the model directory's name. The quantized twins of one model (directories named by their format, as
scripts/bench-quant and scripts/bench-engines make them: ``.../bf16``, ``.../w8a8``, ``.../w4a16``) are one
architecture. Pure, but for :func:`main`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from zenops import llamacpp, quant
from zenops.errors import UsageError, ZenopsError
from zenops.measured import BASELINE, LLAMA_CPP
from zenops.peers import ZENOPS

VARIANT_ZENOPS = ZENOPS  # the engines preset's variant names: zenops, llamacpp-bf16, llamacpp-q8_0, llamacpp-q4_k_m
VARIANT_LLAMACPP = "llamacpp-"
# a model directory named by its format is one twin of an architecture (the parent directory)
_TWIN_NAMES = {"bf16": BASELINE, BASELINE: BASELINE, **{f: f for f in quant.FORMATS}}
# the kernel that serves bf16 on each platform (guide: "Performance, measured on this project's machine")
_BF16_KERNEL = {"zen": "zentorch / oneDNN GEMM"}


@dataclass(frozen=True)
class Cell:
    """One report row, read: an engine serving one format of one architecture at one concurrency."""

    host: str
    arch: str
    engine: str
    weights: str  # zenops: Plan.weights (bfloat16, w8a8, ...); llama.cpp: the GGUF format (bf16, q8_0, q4_k_m)
    kernel: str
    concurrency: int
    tok_s: float
    spread: float | None
    repeats: int
    ttft_ms: float | None
    tpot_ms: float | None
    ceiling_pct: float | None
    problems: tuple[str, ...]
    from_twin: bool  # a llama.cpp row whose GGUF came from a quantized twin rather than the bf16 weights


def _str(row: Mapping[str, Any], key: str) -> str:
    v = row.get(key)
    return str(v) if v not in (None, "") else ""


def _float(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _arch(model: str) -> tuple[str, str | None]:
    """(architecture, twin's format): ``/w/bf16`` -> (``/w``, bfloat16); ``Qwen/Qwen3-0.6B`` -> (itself, None)."""
    p = PurePosixPath(model)
    twin = _TWIN_NAMES.get(p.name.lower())
    if twin is None or str(p.parent) in ("", "."):
        return model, None
    return str(p.parent), twin


def _engine(row: Mapping[str, Any]) -> str | None:
    engine = _str(row, "engine")
    if engine:
        if engine not in (ZENOPS, LLAMA_CPP):
            raise UsageError(f"report row {row.get('variant')!r}: unknown engine {engine!r}",
                             hint=f"the engines are {ZENOPS} and {LLAMA_CPP}")  # fmt: skip
        return engine
    variant = _str(row, "variant")
    if variant == VARIANT_ZENOPS:
        return ZENOPS
    if variant.startswith(VARIANT_LLAMACPP):
        return LLAMA_CPP
    return None  # another variant (a peer's layout, ...): not part of this table


def _weights(row: Mapping[str, Any], engine: str, twin: str | None) -> str:
    given = _str(row, "weights")
    if engine == LLAMA_CPP:
        return llamacpp.gguf_format(given or _str(row, "variant").removeprefix(VARIANT_LLAMACPP)).name
    meta = row.get("metadata")
    planned = str(meta.get("weights") or "") if isinstance(meta, Mapping) else ""
    weights = given or planned or twin
    if not weights:
        raise UsageError(
            f"report row of model {row.get('model')!r}: its weights' format is not known (no weights field, no plan "
            "weights in its metadata, and the model directory is not named by a format)",
            hint="report a campaign of scripts/bench-engines, or name the model directories bf16, w8a8, w4a16",
        )
    return "bfloat16" if weights == "bf16" else weights


def _kernel(row: Mapping[str, Any], engine: str, weights: str) -> str:
    given = _str(row, "kernel")
    if given:
        return given
    platform = _str(row, "platform")
    if engine == LLAMA_CPP:
        return f"llama.cpp CPU (ggml), {llamacpp.gguf_format(weights).llama_type}"
    k = quant.KERNELS.get((weights, platform))
    if k is not None:
        name = re.match(r"\w+", k.kernel)  # the class name the entry starts with
        return name.group() if name else k.kernel
    if weights == BASELINE and platform in _BF16_KERNEL:
        return _BF16_KERNEL[platform]
    return f"{platform} platform" if platform else "-"


def read_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[list[Cell], int]:
    """The report rows of the two engines as cells, and how many rows of other variants were left out. A llama.cpp
    cell served from a quantized twin's weights gives way to the same cell from the bf16 weights. Raises UsageError
    for a row without the figures the table needs, or two rows of one cell."""
    cells: dict[tuple[str, str, str, str, int], Cell] = {}
    other = 0
    for row in rows:
        if not isinstance(row, Mapping):
            raise UsageError("a report row is not an object", hint="give the JSON of `zenops --json campaign report`")
        engine = _engine(row)
        if engine is None:
            other += 1
            continue
        tok_s, conc = _float(row, "output_throughput"), row.get("concurrency") or row.get("max_concurrency")
        if tok_s is None or not isinstance(conc, int):
            raise UsageError(f"report row {row.get('variant')!r} of {row.get('model')!r}: no output_throughput or "
                             "concurrency", hint="give the JSON of `zenops --json campaign report`")  # fmt: skip
        arch, twin = _arch(_str(row, "model"))
        weights = _weights(row, engine, twin)
        pct = _float(row, "% of ceiling")
        cell = Cell(
            host=_str(row, "flavor"),
            arch=arch,
            engine=engine,
            weights=weights,
            kernel=_kernel(row, engine, weights),
            concurrency=conc,
            tok_s=tok_s,
            spread=_float(row, "output_throughput_spread"),
            repeats=int(row.get("repeats") or 1),
            ttft_ms=_float(row, "median_ttft_ms"),
            tpot_ms=_float(row, "median_tpot_ms"),
            ceiling_pct=pct if pct is not None else _float(row, "roofline_pct"),
            problems=tuple(str(p) for p in row.get("problems") or ()),
            from_twin=engine == LLAMA_CPP and twin not in (None, BASELINE),
        )
        key = (cell.host, cell.arch, engine, weights, conc)
        held = cells.get(key)
        if held is not None and held.from_twin == cell.from_twin:
            raise UsageError(
                f"two {engine} {weights} rows for {cell.arch} on {cell.host or '-'} at concurrency {conc}",
                hint="give one campaign's report (its repeats are folded into each row)",
            )
        if held is None or held.from_twin:
            cells[key] = cell
    return list(cells.values()), other


def _order(c: Cell) -> tuple[int, float, str]:
    if c.engine == ZENOPS:
        bits = 16.0 if c.weights == BASELINE else float(quant.FORMATS[c.weights].weight_bits if c.weights in
                                                         quant.FORMATS else 32)  # fmt: skip
        return 0, -bits, c.weights
    return 1, -llamacpp.gguf_format(c.weights).bits_per_weight, c.weights


def _tok_cell(c: Cell) -> str:
    text = f"{c.tok_s:.1f}"
    if c.spread is not None:
        text += f" (spread {c.spread:.0%})"
    elif c.repeats < 2:
        text += " (1 run)"
    if c.problems:
        text += f" ({'; '.join(c.problems)})"
    return text


_LEGEND = ("tok/s: the mean of the repeats and their spread ((max - min) / mean); x zenops bf16: against zenops's bf16 "
           "plan at the same concurrency; % of ceiling: of each plan's decode roofline.")  # fmt: skip


def _md(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def markdown(rows: Iterable[Mapping[str, Any]]) -> str:
    """The table of each (host, architecture) of ``rows`` (a campaign report's), then the pairs and their verdicts."""
    cells, other = read_rows(rows)
    if not cells:
        raise UsageError("the report has no zenops or llama.cpp rows",
                         hint="report a campaign whose variants are `engines` (scripts/bench-engines)")  # fmt: skip
    out: list[str] = []
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.host, c.arch), []).append(c)
    for (host, arch), group in sorted(groups.items()):
        levels = sorted({c.concurrency for c in group})
        base = {c.concurrency: c.tok_s for c in group if c.engine == ZENOPS and c.weights == BASELINE}
        lines: dict[tuple[str, str, str], dict[int, Cell]] = {}
        for c in sorted(group, key=_order):
            lines.setdefault((c.engine, c.weights, c.kernel), {})[c.concurrency] = c
        out.append(f"### {arch}" + (f" on {host}" if host else ""))
        out.append("")
        head = ["engine", "format", "kernel"]
        for n in levels:
            head += [f"C={n} tok/s", f"C={n} x zenops bf16", f"C={n} % of ceiling"]
        out.append(_md(head))
        out.append("|" + "---|" * len(head))
        for (engine, weights, kernel), by_c in lines.items():
            line = [engine, weights, kernel]
            for n in levels:
                at = by_c.get(n)
                if at is None:
                    line += ["-", "-", "-"]
                    continue
                b = base.get(n)
                pct = "-" if at.ceiling_pct is None else f"{at.ceiling_pct:.0f}%"
                line += [_tok_cell(at), _x(at.tok_s / b if b else None), pct]
            out.append(_md(line))
        out.append("")
        out.append(_LEGEND)
        out.append("")
        found = llamacpp.pairs(
            llamacpp.Row(c.engine, c.weights, c.concurrency, c.tok_s, c.ttft_ms, c.tpot_ms, c.spread, c.host, c.arch,
                         not c.problems)
            for c in group
        )  # fmt: skip
        if found:
            out.append("At equal bytes per weight (llama.cpp / zenops; TTFT and TPOT above 1x: llama.cpp slower):")
            out.append("")
            out.append(_md(["pair", "C", "tok/s", "TTFT", "TPOT", "verdict"]))
            out.append("|---|---|---|---|---|---|")
            for p in found:
                verdict = p.verdict + (f" ({p.noise:.0%})" if p.noise is not None else "")
                out.append(_md([f"zenops {p.vllm} / llama.cpp {p.gguf}", str(p.concurrency), _x(p.tok_s),
                                _x(p.ttft), _x(p.tpot), verdict]))  # fmt: skip
            out.append("")
    if other:
        out.append(f"({other} row(s) of other variants left out.)")
    return "\n".join(out).rstrip() + "\n"


def load(text: str) -> list[Mapping[str, Any]]:
    """The rows of a report's JSON: the document, or its last line (`zenops --json` prints one result per line); a
    list of rows is taken as it is. Raises UsageError for anything else."""
    doc: Any = None
    lines = [line for line in text.splitlines() if line.strip()]
    for candidate in (text, *lines[-1:]):
        try:
            doc = json.loads(candidate)
            break
        except ValueError:
            continue
    rows = doc.get("rows") if isinstance(doc, Mapping) else doc
    if not isinstance(rows, list):
        raise UsageError("not a campaign report: no JSON object with `rows`",
                         hint="give the output of `zenops --json campaign report ID`")  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zenops.llamacpp_table REPORT.json``: print the markdown; 2 on bad input (the message on stderr)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) != 1 or args[0] in ("-h", "--help"):
            if args and args[0] in ("-h", "--help"):
                print(__doc__)
                return 0
            raise UsageError("give one report file (or - for standard input)",
                             hint="python -m zenops.llamacpp_table REPORT.json")  # fmt: skip
        try:
            text = sys.stdin.read() if args[0] == "-" else Path(args[0]).read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read {args[0]}: {e.strerror}", hint="give the report's JSON file") from e
        print(markdown(load(text)), end="")
    except ZenopsError as e:
        print(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return int(e.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
