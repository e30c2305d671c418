"""Checks of the plan's decode ceiling that can fail (issue 46, item 2), for the e2e tests that serve a model.

`measured tok/s <= ceiling` alone passes with any inflated ceiling: the landing run's 0.8M-parameter model serves ~2%
of its ceiling (framework overhead, not memory, sets its step). So the e2e tests check the ceiling itself:

* :func:`independent_ceiling`: the same roofline derived again from what is on disk, not from the planner's code or
  its parameter count: the bytes a step reads are the model's ``*.safetensors`` file sizes (header included) plus
  each sequence's KV cache from ``config.json`` (layers x KV heads x head dim x 2 x dtype bytes per token of
  context); the FLOPs are 2 per weight (file bytes / dtype bytes) plus q.k and p.v over the context, per sequence;
  the step is the slower of bytes / measured GB/s and FLOPs / measured GFLOP/s. :func:`check_ceiling` then holds
  the plan's ceiling to :data:`BAND` of it. A ceiling off by 2x either way fails (the unit tests prove it).
* :func:`check_share`: where the ceiling binds (the 200M model at C=1), measured tok/s at least the floor of
  :data:`FLOORS` for the CPU kind and the condition (alone or beside the lanes), and at most 100%, of the ceiling.
* :func:`bandwidth_falls`: the probe's scaling points, GB/s that falls as threads rise by more than the noise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zenops.cpulist import parse_cpulist

# The plan's ceiling must lie within [0.8, 1.25] x the independent one. The two derivations agree to well under 1%
# on a bf16 checkpoint (the 0.8M model: file 1,617,344 bytes against the planner's 1,615,104, the safetensors
# header; figures rounded to 0.01 GB/s and 0.1 GFLOP/s); the rest of the band leaves room for accounting the
# planner may legitimately change (tied embeddings, a sliding window it starts to count, a second rounding) without
# this test being the one to edit. It is symmetric in ratio (1/1.25 = 0.8) and far from 2x and 1/2: a ceiling
# doubled or halved (bytes counted at the wrong dtype, a concurrency or a GB/s off by two) fails with margin. A
# GiB-for-GB slip (7%) passes: that is below what this check can tell from accounting noise.
BAND = (0.8, 1.25)

# bytes per value of the dtypes a plan serves in (the same fact as the planner's table, written out here on purpose)
WIDTH = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class DiskModel:
    """What a served model directory says about its decode step, read from its files."""

    path: Path
    file_bytes: int  # the *.safetensors files' sizes on disk
    stored_width: int  # bytes per value in those files (config.json torch_dtype)
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int


def read_model(directory: Path | str) -> DiskModel:
    """A served model directory: its safetensors files' sizes and config.json's shape. Quantized checkpoints (bytes
    per weight unknown from the files' size alone) and directories without safetensors are refused, saying so."""
    d = Path(directory)
    config = json.loads((d / "config.json").read_text())
    text = config.get("text_config") or config
    if "quantization_config" in config or "quantization_config" in text:
        raise ValueError(f"{d}: a quantized checkpoint; this check derives FLOPs from bf16/fp16/fp32 file bytes")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{d}: no *.safetensors files to size the weights by")
    heads = int(text["num_attention_heads"])
    dtype = str(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or "bfloat16")
    return DiskModel(
        path=d,
        file_bytes=sum(f.stat().st_size for f in files),
        stored_width=WIDTH[dtype],
        layers=int(text["num_hidden_layers"]),
        attention_heads=heads,
        kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // heads),
    )


@dataclass(frozen=True)
class Bound:
    """The independent step time and ceiling at one concurrency and context."""

    seconds_per_step: float
    tok_s: float
    step_bytes: float
    step_flops: float

    def __str__(self) -> str:
        return (
            f"{self.step_bytes / 1e6:.3f} MB and {self.step_flops / 1e6:.2f} MFLOP a step -> "
            f"{self.seconds_per_step * 1e3:.4f} ms, {self.tok_s:.2f} tok/s"
        )


def independent_ceiling(
    model: DiskModel,
    *,
    gbps: float,
    gflops: float | None,
    concurrency: int,
    context_tokens: int,
    dtype: str = "bfloat16",
    tensor_parallel: int = 1,
) -> Bound:
    """The decode ceiling of ``concurrency`` sequences of ``context_tokens`` each, from the files and the measured
    figures (one rank's share of a tensor-parallel model: its weights / TP, its KV heads). Per generated token a
    sequence needs each weight once (read once per step for all sequences) and its own KV cache; 2 FLOPs per weight
    and 2 x 2 per head dimension per token of context (q.k, then p.v)."""
    served = WIDTH[dtype]
    weights = model.file_bytes * served / model.stored_width / tensor_parallel  # on disk in another dtype: converted
    kv_heads = max(1, model.kv_heads // tensor_parallel)
    kv_per_token = model.layers * 2 * kv_heads * model.head_dim * served  # K and V, every layer
    step_bytes = weights + concurrency * context_tokens * kv_per_token
    values = weights / served
    attention = 2 * 2 * model.layers * model.attention_heads // tensor_parallel * model.head_dim * context_tokens
    step_flops = concurrency * (2 * values + attention)
    seconds = max(step_bytes / (gbps * 1e9), 0.0 if gflops is None else step_flops / (gflops * 1e9))
    return Bound(seconds_per_step=seconds, tok_s=concurrency / seconds, step_bytes=step_bytes, step_flops=step_flops)


def check_ceiling(claimed: float, bound: Bound, what: str = "the plan's ceiling", band: tuple[float, float] = BAND):
    """AssertionError unless ``claimed`` tok/s is within ``band`` x the independent ceiling; returns the ratio."""
    ratio = claimed / bound.tok_s
    lo, hi = band
    assert lo <= ratio <= hi, (
        f"{what} {claimed:g} tok/s is {ratio:.2f}x the ceiling derived from the model's files and the measured "
        f"figures ({bound}); allowed {lo}-{hi}x"
    )
    return ratio


def probe_figures(bandwidth: Mapping[str, Any], node: int, threads: int) -> tuple[float, float | None] | None:
    """(GB/s, GFLOP/s) the probe measured on ``node`` with exactly ``threads`` threads (the node's own figure, or a
    scaling point), read from the facts' ``bandwidth``; None when it measured no such count (the caller then uses
    the plan's figures and says so)."""
    m = (bandwidth.get("nodes") or {}).get(str(node))
    if not m:
        return None
    if m.get("cores") == threads:
        return float(m["gbps"]), None if m.get("gflops") is None else float(m["gflops"])
    for p in m.get("scaling") or ():
        if p["threads"] == threads:
            return float(p["gbps"]), None if p.get("gflops") is None else float(p["gflops"])
    return None


def check_roofline(
    roof: Mapping[str, Any], model: DiskModel, figures: tuple[float, float | None], dtype: str, what: str, tp: int = 1
) -> float:
    """A roofline dict (the plan's per instance, or a bench result's at its own concurrency and context) against the
    independent ceiling at its concurrency and context; returns the ratio."""
    bound = independent_ceiling(
        model,
        gbps=figures[0],
        gflops=figures[1],
        concurrency=int(roof["concurrency"]),
        context_tokens=int(roof["context_tokens"]),
        dtype=dtype,
        tensor_parallel=tp,
    )
    return check_ceiling(float(roof["ceiling_tok_s"]), bound, what)


def check_plan_and_runs(
    plan: Mapping[str, Any], bandwidth: Mapping[str, Any] | None, model_dir: Path | str, results: Sequence[Mapping]
) -> list[str]:
    """The plan's ceiling of every instance, and each bench result's (``results``: `zenops bench --json`'s, each with
    its ``roofline`` at its concurrency and context), within :data:`BAND` of the independent ceiling; each measured
    tok/s at most the independent ceiling too. The figures are the probe's for the instance's thread count (from the
    facts) where it measured that count and the instance has its node alone, else the plan's (said in the notes
    returned, for the test to print)."""
    model = read_model(model_dir)
    notes: list[str] = []
    figures_of: dict[int, tuple[tuple[float, float | None], int]] = {}
    nodes = [inst["numa_nodes"][0] for inst in plan["instances"]]
    for inst in plan["instances"]:
        roof = inst["roofline"]
        tp = int(inst.get("tensor_parallel_size") or 1)
        node = inst["numa_nodes"][0]
        threads = len(parse_cpulist(inst["omp_threads_bind"].split("|")[0]))
        probe = probe_figures(bandwidth or {}, node, threads) if nodes.count(node) == 1 and tp == 1 else None
        figures = probe or (float(roof["bandwidth_gbps"]), None if roof["gflops"] is None else float(roof["gflops"]))
        figures_of[inst["index"]] = (figures, tp)
        ratio = check_roofline(roof, model, figures, plan["dtype"], f"instance {inst['index']}'s plan ceiling", tp)
        notes.append(
            f"instance {inst['index']}: plan ceiling {roof['ceiling_tok_s']:g} tok/s = {ratio:.3f}x the independent "
            f"one ({'the probe' if probe else 'the plan'}'s {figures[0]:g} GB/s, {figures[1]} GFLOP/s)"
        )
    distinct = set(figures_of.values())
    for r in results:
        index = r.get("instance", (r.get("metadata") or {}).get("instance"))
        if index is None and len(distinct) > 1:
            notes.append(f"C={r['max_concurrency']}: not checked, the result names no instance and theirs differ")
            continue
        figures, tp = figures_of[int(index)] if index is not None else next(iter(distinct))
        roof = r["roofline"]
        assert roof, f"a bench result without a ceiling: {r}"
        what = f"the C={r['max_concurrency']} bench ceiling"
        ratio = check_roofline(roof, model, figures, plan["dtype"], what, tp)
        bound = independent_ceiling(
            model, gbps=figures[0], gflops=figures[1], concurrency=int(roof["concurrency"]),
            context_tokens=int(roof["context_tokens"]), dtype=plan["dtype"], tensor_parallel=tp,
        )  # fmt: skip
        assert 0 < r["output_throughput"] <= bound.tok_s, (r["output_throughput"], str(bound))
        notes.append(
            f"C={r['max_concurrency']}: ceiling {roof['ceiling_tok_s']:g} tok/s = {ratio:.3f}x the independent "
            f"{bound.tok_s:.2f}; measured {r['output_throughput']:g} tok/s"
        )
    return notes


# --- where the ceiling binds: a floor under the measured share of it ---------------------------------------------


@dataclass(frozen=True)
class Floor:
    """The least share of the C=1 ceiling the 200M model's bench must reach on a CPU kind, and what it rests on."""

    pct: float
    source: str


# measure_roofline's conditions: the 200M bf16 model, --enforce-eager, 4 prompts of 64 tokens in and 24 out at C=1
# (output tok/s counts the prefill), either on the serving e2e's 1-vCPU host BESIDE the other lanes of scripts/test
# --full, where the share is mostly the scheduler's (2 vCPUs under four lanes: CPU pressure ~97%), or ALONE on the
# whole machine (test_roofline_devhost's alone stage). Each condition has floors of its own: a floor measured alone
# said nothing of the lanes (stop 53: 5.9% beside the lanes against a 25% floor measured alone). Each floor is below
# the figure it rests on by the margin a second run may need; the figures elsewhere (docs/guide.md) were measured
# alone, on 2 vCPUs, with torch.compile, longer runs: they bound these conditions from above only, so the floors of
# kinds never measured here are a guess, labelled so.
#
# What a floor can catch: a ceiling inflated 2x halves the measured share, so only a floor above half the measured
# share catches it. Intel's 6% (of 9.5%) beside the lanes and AMD AVX-512's 25% (of 45.4%) alone do: 2x inflated
# reads 4.7% and 22.7%. The other floors are far below half of their figure, so there a 2x inflated ceiling is caught
# by the independent bound (check_plan_and_runs), not by the floor. A ceiling deflated 2x is caught by no floor and,
# at these shares (measured <= 50% of the ceiling), by no upper bound either: only by the independent bound.
ALONE, BESIDE = "alone", "beside the lanes"
FLOORS: dict[str, dict[str, Floor]] = {
    ALONE: {
        "intel-avx512-no-amx": Floor(
            6.0,
            "unmeasured on this kind alone; beside the lanes (which leave it less of the CPU): Intel Xeon, AVX-512 "
            "with VNNI, no AVX-512 BF16, no AMX, 1 vCPU: 1.13 tok/s = 9.5% of its 11.94 ceiling at C=1 (scripts/test "
            "--full, stop 43; one run)",
        ),
        "amd-avx512": Floor(
            25.0,
            "measured: AMD EPYC Zen 5 (family 26), 2 vCPUs, AVX-512 BF16, no AMX, alone (this stage of scripts/test "
            "--full, 2026-11-29): 55.7 tok/s = 45.4% of its 122.6 ceiling at C=1, the 200M model; AMD EPYC Zen 4 VM, "
            "2 vCPUs, alone (docs/guide.md): 59% (scripts/bench-serving) and 45% (scripts/bench-quant). 25% is about "
            "half the lowest: a ceiling inflated 2x (45.4% -> 22.7%) fails it",
        ),
        "amd-avx2": Floor(
            2.0,
            "unmeasured on this kind in these conditions; elsewhere (docs/guide.md): AMD EPYC Zen 3 VM, 2 vCPUs, AVX2 "
            "only, alone: 18% at C=1 (scripts/bench-quant)",
        ),
        "other": Floor(1.0, "unmeasured on this kind"),
    },
    BESIDE: {
        "intel-avx512-no-amx": Floor(
            6.0,
            "measured: Intel Xeon, AVX-512 with VNNI, no AVX-512 BF16, no AMX, 1 vCPU beside the lanes: 1.13 tok/s = "
            "9.5% of its 11.94 ceiling at C=1 (scripts/test --full, stop 43; one run)",
        ),
        "amd-avx512": Floor(
            2.0,
            "measured: AMD EPYC Zen 5 (family 26), AVX-512 BF16, no AMX, 1 vCPU beside the lanes (scripts/test --full, "
            "stop 53, with other work on the machine): 2.86 tok/s = 5.9% of its 48.27 ceiling at C=1, the 200M model; "
            "one run. A third of it: the scheduler's share varies run to run",
        ),
        "amd-avx2": Floor(
            2.0,
            "unmeasured on this kind in these conditions; the CI3 run beside the lanes decoded ~2 tok/s",
        ),
        "other": Floor(1.0, "unmeasured on this kind"),
    },
}


def cpu_kind(facts: Mapping[str, Any]) -> str:
    """The key of a condition's :data:`FLOORS` for a host's facts (vendor and flags)."""
    flags = set(facts.get("flags") or ())
    vendor = facts.get("vendor")
    if vendor == "GenuineIntel" and "avx512f" in flags and not flags & {"amx_tile", "amx_bf16", "amx_int8"}:
        return "intel-avx512-no-amx"
    if vendor == "AuthenticAMD" and "avx512f" in flags:
        return "amd-avx512"
    if vendor == "AuthenticAMD" and "avx2" in flags:
        return "amd-avx2"
    return "other"


def check_share(measured: float, ceiling: float, floor: Floor) -> float:
    """AssertionError unless ``measured`` tok/s is between the floor's percentage of ``ceiling`` and all of it;
    returns the percentage."""
    pct = measured / ceiling * 100
    assert floor.pct <= pct <= 100, (
        f"measured {measured:g} tok/s is {pct:.1f}% of the ceiling {ceiling:g}: allowed {floor.pct:g}-100% "
        f"(the floor: {floor.source})"
    )
    return pct


# --- the probe's scaling points ------------------------------------------------------------------------------------

# A point may read less than one with fewer threads (the memory saturates; noise): up to 40% less. The 2-vCPU Zen 4
# VM of docs/guide.md read 28 to 45 GB/s with the same 2 threads from one probe run to the next (0.62x); within one
# run the points are measured back to back, so a fall past 0.6x is a probe that did not run the threads it names.
FALL_TOLERANCE = 0.6


def bandwidth_falls(node: Mapping[str, Any], tolerance: float = FALL_TOLERANCE) -> list[str]:
    """The points of a node's probe (its scaling points and its own all-threads figure) whose GB/s is below
    ``tolerance`` x the best of fewer threads; empty when none."""
    points = sorted([(int(p["threads"]), float(p["gbps"])) for p in node.get("scaling") or ()])
    points.append((int(node["cores"]), float(node["gbps"])))
    out = []
    best: tuple[int, float] | None = None
    for threads, gbps in points:
        if best is not None and gbps < tolerance * best[1]:
            out.append(f"{threads} thread(s): {gbps:g} GB/s, below {tolerance} x {best[1]:g} with {best[0]}")
        if best is None or gbps > best[1]:
            best = (threads, gbps)
    return out
