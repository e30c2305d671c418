#!/usr/bin/env python3
"""Small readers of zenops's JSON results for scripts/bench-serving and scripts/bench-quant (stdin: the result line).

python3 scripts/bench_figures.py last-campaign    `zenops --json campaign status`: the newest campaign's id
python3 scripts/bench_figures.py quant-reason     `zenops --json plan`: the plan's quantization reason
python3 scripts/bench_figures.py quant-ratios     `zenops --json campaign report`: each format vs bf16
python3 scripts/bench_figures.py bandwidth DIR    the facts in DIR: GB/s by OpenMP threads per NUMA node
python3 scripts/bench_figures.py measured-rows KIND SIZE SOURCE
                                                  `zenops --json campaign report` of scripts/bench-engines: one
                                                  zenops.measured.runs(...) line per engine, format and concurrency
                                                  (each repeat's tok/s against zenops's bf16 at the same level);
                                                  KIND, SIZE and SOURCE are the names the lines use
"""

from __future__ import annotations

import json
import math
import pathlib
import sys


def last_campaign(result: dict) -> str:
    return str(result["campaigns"][-1]["campaign"])


def quant_reason(result: dict) -> str:
    plan = result["plans"][0]
    why = [r["text"] for r in plan["reasons"] if r["topic"] == "quantization"]
    return why[0] if why else "bf16 (not quantized)"


def quant_ratios(result: dict) -> str:
    rows = {(pathlib.Path(r["model"]).name, r["concurrency"]): r for r in result["rows"]}
    head = ("format", "C", "tok/s", "x bf16", "TPOT ms", "x bf16", "% ceiling", "spread")
    out = [f"{head[0]:<10} " + " ".join(f"{h:>{w}}" for h, w in zip(head[1:], (3, 8, 7, 8, 7, 9, 7), strict=True))]
    for (model, c), r in sorted(rows.items()):
        base = rows.get(("bf16", c))
        tok = r["output_throughput"]
        ratio = tok / base["output_throughput"] if base and base["output_throughput"] else math.nan
        tpot = r.get("median_tpot_ms") or math.nan
        tpot_ratio = tpot / base["median_tpot_ms"] if base and base.get("median_tpot_ms") else math.nan
        pct = "-" if r.get("roofline_pct") is None else f"{r['roofline_pct']:.1f}"
        spread = "-" if r.get("output_throughput_spread") is None else f"{r['output_throughput_spread']:.0%}"
        out.append(
            f"{model:<10} {c:>3} {tok:>8.1f} {ratio:>6.2f}x {tpot:>8.1f} {tpot_ratio:>6.2f}x {pct:>9} {spread:>7}"
        )
    return "\n".join(out)


def bandwidth(facts_dir: str) -> str:
    out = []
    for f in sorted(pathlib.Path(facts_dir).glob("*.json")):
        for node, m in (json.loads(f.read_text()).get("bandwidth") or {}).get("nodes", {}).items():
            points = {p["threads"]: p["gbps"] for p in m.get("scaling", [])} | {m["cores"]: m["gbps"]}
            out.append(f"node {node}: " + ", ".join(f"{t} thread(s) {g:g} GB/s" for t, g in sorted(points.items())))
    return "\n".join(out)


def _runs(row: dict) -> list[float]:
    """Each repeat's tok/s; a report without them (before zenops kept them) gives two repeats back from their mean
    and spread ((max - min) / mean: exact for two)."""
    if row.get("output_throughput_runs"):
        return list(row["output_throughput_runs"])
    m, s = row["output_throughput"], row.get("output_throughput_spread")
    return [m * (1 + s / 2), m * (1 - s / 2)] if row.get("repeats") == 2 and s is not None else []


def _tuple(values: list[float]) -> str:
    inner = ", ".join(f"{v:.1f}" for v in values)
    return f"({inner},)" if len(values) == 1 else f"({inner})"


def measured_rows(result: dict, kind: str, size: str, source: str) -> str:
    rows = [{**r, "output_throughput_runs": _runs(r)} for r in result["rows"]]
    rows = [r for r in rows if r["output_throughput_runs"]]
    base = {r["concurrency"]: r for r in rows if r["engine"] == "zenops" and r.get("weights") == "bfloat16"}
    out = []
    for r in sorted(
        rows, key=lambda r: (r["engine"] != "zenops", r["engine"], str(r.get("weights")), r["concurrency"])
    ):
        b = base.get(r["concurrency"])
        if b is None or r is b or r["problems"]:
            continue
        engine = "ZENOPS" if r["engine"] == "zenops" else "LLAMA_CPP"
        mine, theirs = (_tuple(x["output_throughput_runs"]) for x in (r, b))
        out.append(
            f'    runs({engine}, "{r["weights"]}", {kind}, {r["concurrency"]}, {mine}, {theirs}, {size}, {source}),'
        )
    return "\n".join(out)


def main() -> int:
    what = sys.argv[1]
    if what == "bandwidth":
        print(bandwidth(sys.argv[2]))
        return 0
    if what == "measured-rows":
        print(measured_rows(json.loads(sys.stdin.read().strip().splitlines()[-1]), *sys.argv[2:5]))
        return 0
    result = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print({"last-campaign": last_campaign, "quant-reason": quant_reason, "quant-ratios": quant_ratios}[what](result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
