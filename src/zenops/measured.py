"""Measured serving speed: one table of output tok/s per (engine, format, CPU kind, concurrency), each as a ratio to
zenops's bf16 plan on the same host, model and concurrency, with where it came from; and what the planner says of it.

:data:`MEASURED` is the project's one table of measured serving ratios: the vLLM formats against bf16 (read by
zenops.quant: the plan's ratio reason, its warning for a format slower than bf16, the AVX2 refusal's list of what
runs) and llama.cpp's server against zenops (:func:`faster_warning`: ``zenops plan`` says when something else
measured faster on this CPU kind; it never switches by itself). Adding a measurement is one line: :func:`runs` with
the tok/s of each repeat, or :func:`ratio` where only the ratio was kept.

The CPU kind is zenops's platform (``zen``: AMD with AVX-512 and zentorch; ``cpu``: the stock CPU platform, every
other x86 or AMD with ``--platform cpu``) and the instruction set the kernels pick their code path by
(:func:`isa`: ``amx``, ``avx512`` or ``avx2``); the platform is where the vendor shows (zenops.planner.choose_platform).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

from zenops.peers import ZENOPS

LLAMA_CPP = "llama.cpp"  # llama.cpp's server (zenops.llamacpp); zenops's own plan is zenops.peers.ZENOPS
ENGINES = (ZENOPS, LLAMA_CPP)
BASELINE = "bfloat16"  # zenops's format every ratio is against (Plan.weights of a bf16 model)
ISAS = ("amx", "avx512", "avx2")
PLATFORMS = ("zen", "cpu")


def isa(flags: Iterable[str]) -> str:
    """The instruction set a measurement holds for (the kernels pick their code path by it): ``amx`` (AMX tiles),
    ``avx512`` or ``avx2``."""
    f = set(flags)
    if "amx_tile" in f:
        return "amx"
    return "avx512" if "avx512f" in f else "avx2"


@dataclass(frozen=True)
class Measurement:
    """``engine`` serving ``fmt`` at ``concurrency`` measured ``ratio`` x the output tok/s of zenops's bf16 plan on
    the same host, model and concurrency."""

    engine: str  # ZENOPS or LLAMA_CPP
    fmt: str  # zenops: Plan.weights (bfloat16, w8a8, w4a16, gptq-int4, ...); llama.cpp: a GGUF format (bf16, q8_0, ...)
    platform: str  # zenops's platform of the bf16 plan it is measured against: zen | cpu
    isa: str  # amx | avx512 | avx2
    concurrency: int
    ratio: float
    spread: float | None  # the larger (max - min) / mean of tok/s of the two sides' repeats; None: not known
    repeats: int  # runs per side (1: a single run, no spread)
    params_b: float  # the model's parameters, billions (the table is per model size)
    source: str  # the command, machine, model and date
    note: str = ""  # what else the reader must know (failed requests, figures borrowed from another format)

    @property
    def kind(self) -> str:
        return f"{self.platform} platform, {self.isa}"

    def qualifier(self) -> str:
        """How far to trust the figure: its spread, or that there is none to tell."""
        if self.repeats < 2:
            text = "one run"
        elif self.spread is None:
            text = f"{self.repeats} runs, spread not recorded"
        else:
            text = f"{self.repeats} runs, spread {self.spread:.0%}"
        return f"{text}; {self.note}" if self.note else text


def spread_of(values: Sequence[float]) -> float | None:
    """(max - min) / mean of the repeats' tok/s; None with fewer than two (the campaign report's spread too)."""
    if len(values) < 2:
        return None
    mean = fmean(values)
    return (max(values) - min(values)) / mean if mean > 0 else None


def beyond_spread(ratio: float, spread_a: float | None, spread_b: float | None) -> tuple[float | None, int | None]:
    """The one rule for telling two engines or settings apart (the campaign's peers table, the llama.cpp table, the
    plan's warning): the noise is the larger of the two rows' run-to-run spreads (:func:`spread_of`); a ratio above
    1 + noise is 1 (the first one faster), below 1 - noise -1, in between 0 (within the spread). A row of one run
    has no spread and nothing can be told: (None, None). Returns (noise, sign)."""
    if spread_a is None or spread_b is None:
        return None, None
    noise = max(spread_a, spread_b)
    if ratio > 1 + noise:
        return noise, 1
    if ratio < 1 - noise:
        return noise, -1
    return noise, 0


def runs(
    engine: str,
    fmt: str,
    kind: tuple[str, str],
    concurrency: int,
    tok_s: Sequence[float],
    bf16_tok_s: Sequence[float],
    params_b: float,
    source: str,
    note: str = "",
) -> Measurement:
    """A measurement from the tok/s of each repeat of both sides (``kind``: (platform, isa)): the ratio of the means,
    the larger of the two spreads (None unless both sides ran twice or more)."""
    a, b = spread_of(tok_s), spread_of(bf16_tok_s)
    spread = max(a, b) if a is not None and b is not None else None
    return Measurement(engine, fmt, kind[0], kind[1], concurrency, fmean(tok_s) / fmean(bf16_tok_s), spread,
                       min(len(tok_s), len(bf16_tok_s)), params_b, source, note)  # fmt: skip


def ratio(
    engine: str,
    fmt: str,
    kind: tuple[str, str],
    concurrency: int,
    value: float,
    params_b: float,
    source: str,
    *,
    repeats: int,
    spread: float | None = None,
    note: str = "",
) -> Measurement:
    """A measurement of which only the ratio (and maybe the spread) was kept."""
    return Measurement(engine, fmt, kind[0], kind[1], concurrency, value, spread, repeats, params_b, source, note)


ZEN = ("zen", "avx512")  # AMD with AVX-512: zentorch (vLLM's ZenCpuPlatform)
CPU_AVX2 = ("cpu", "avx2")  # the stock CPU platform without AVX-512
TINY = 0.196  # `zenops tiny-model --params 200M`: a random Llama of 196M parameters
ONE_B = 1.013  # `zenops tiny-model --params 1B`: a random Llama of 1.013B parameters (hidden 2304, 18 layers)
# Before 2026-11-29 every `vllm bench serve` ran with its default seed 0: the same random prompts in every run and
# level, which the servers' prefix caches (vLLM's; llama.cpp's slots) could answer partly from memory. Figures of that
# time say so in their source; zenops.bench.client.run_seed gives each run and level its own prompts since.
_SEED0 = "; vllm bench's seed 0: the same prompts every run, partly served from prefix caches"

_BENCH_QUANT = ("scripts/bench-quant (campaign, 2 repeats, 128 in / 64 out) on an AMD EPYC Zen 4 VM with 2 vCPUs "
                "(AVX-512 BF16, no AMX), a 196M-parameter Llama, 2026-11-27"
                + _SEED0)  # fmt: skip
_BENCH_QUANT_AVX2 = ("scripts/bench-quant --formats w4a16,w8a8 (campaign, 2 repeats, 128 in / 64 out) on an AMD "
                     "EPYC Zen 3 VM with 2 vCPUs (AVX2 only: no AVX-512, no AMX), a 196M-parameter Llama, "
                     "2026-11-27"
                     + _SEED0)  # fmt: skip
_LLAMA_ZEN3 = ("by hand (issue 47): zenops's plan (vLLM 0.32.0) and llama-server (AVX2 build, 2 threads, 4 slots) "
               "on the same 2 cores, bf16 and Q8_0 GGUF converted from the same weights, the same `vllm bench serve` "
               "(128 in / 64 out, 8 prompts per seat, one run each), AMD EPYC Zen 3 VM with 2 vCPUs (AVX2 only), "
               "a 196M-parameter Llama"
               + _SEED0)  # fmt: skip
_UNCOUNTED = ("tok/s as vllm bench 0.32 counted llama.cpp's text by re-tokenizing it, about 1.2x the tokens "
              "generated (measured on a Zen 5); not corrected")  # fmt: skip
_BENCH_ENGINES = ("scripts/bench-engines --params {size} --concurrency 1,4,8,16 --repeats 2 (campaign `variants: "
                  "engines`: zenops's plan, vLLM 0.32.0 + zentorch 2.13.0.1, the bf16 model and its w8a8/w4a16 twins; "
                  "llama-server b11434 built GGML_NATIVE for the host, bf16/Q8_0/Q4_K_M GGUF of the same weights; the "
                  "same 2 cores, one engine at a time, the same `vllm bench serve`: 128 in / 64 out, 32 prompts per "
                  "level, a seed per run and level; llama.cpp's output tokens by its server's count) on an AMD EPYC "
                  "Zen 5 VM (family 26 model 2) with 2 vCPUs (AVX-512 BF16, no AMX), a {params} Llama, "
                  "2026-11-30")  # fmt: skip
_BENCH_ENGINES_200M = _BENCH_ENGINES.format(size="200M", params="196M-parameter")
_BENCH_ENGINES_1B = _BENCH_ENGINES.format(size="1B", params="1.013B-parameter")
# zenops's bf16 plan, tok/s per concurrency (each repeat), the side every llama.cpp figure of that source is against
_ZEN3_BF16 = {1: (13.3,), 4: (15.4,)}
_FAILED_1_OF_32 = "1 of 32 requests failed; "
_AS_GPTQ = "as gptq-int4: the same kernel after AWQ -> GPTQ repacking, gptq-int4's figures"

# The one table. Measured: on the zen platform, every engine and format of scripts/bench-engines on a Zen 5 VM at 196M
# and 1.013B parameters (GPTQ/AWQ int4 on a Zen 4 VM with scripts/bench-quant); on the cpu platform with AVX2 (Zen 3
# VMs) vLLM's w8a8 (int4 does not run there, zenops.quant.NEEDS_AVX512) and llama.cpp by hand (issue 47's runs). Not
# measured yet: the cpu platform with AVX-512 or AMX. The Zen 4 rows of vLLM's w8a8/w4a16 (2026-11-27, seed 0:
# 1.68x/1.51x and 0.94x/1.20x at C=1/4) gave way to the Zen 5 rows of the same CPU kind (2026-11-30, a seed per run).
MEASURED: tuple[Measurement, ...] = (
    ratio(ZENOPS, "w8a8", CPU_AVX2, 1, 0.56, TINY, _BENCH_QUANT_AVX2, repeats=2),
    ratio(ZENOPS, "w8a8", CPU_AVX2, 4, 0.90, TINY, _BENCH_QUANT_AVX2, repeats=2),
    ratio(ZENOPS, "gptq-int4", ZEN, 1, 0.75, TINY, _BENCH_QUANT, repeats=2),
    ratio(ZENOPS, "gptq-int4", ZEN, 4, 0.66, TINY, _BENCH_QUANT, repeats=2),
    ratio(ZENOPS, "awq-int4", ZEN, 1, 0.75, TINY, _BENCH_QUANT, repeats=2, note=_AS_GPTQ),
    ratio(ZENOPS, "awq-int4", ZEN, 4, 0.66, TINY, _BENCH_QUANT, repeats=2, note=_AS_GPTQ),
    runs(LLAMA_CPP, "bf16", CPU_AVX2, 1, (37.6,), _ZEN3_BF16[1], TINY, _LLAMA_ZEN3, _UNCOUNTED),
    runs(LLAMA_CPP, "bf16", CPU_AVX2, 4, (56.3,), _ZEN3_BF16[4], TINY, _LLAMA_ZEN3, _FAILED_1_OF_32 + _UNCOUNTED),
    runs(LLAMA_CPP, "q8_0", CPU_AVX2, 1, (71.0,), _ZEN3_BF16[1], TINY, _LLAMA_ZEN3, _UNCOUNTED),
    runs(ZENOPS, "w4a16", ZEN, 1, (65.6, 64.0), (63.0, 62.0), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w4a16", ZEN, 4, (257.5, 255.7), (198.6, 189.4), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w4a16", ZEN, 8, (290.3, 289.4), (207.5, 203.2), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w4a16", ZEN, 16, (294.5, 277.3), (210.8, 209.4), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w8a8", ZEN, 1, (99.5, 95.5), (63.0, 62.0), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w8a8", ZEN, 4, (305.2, 288.4), (198.6, 189.4), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w8a8", ZEN, 8, (333.7, 312.4), (207.5, 203.2), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w8a8", ZEN, 16, (312.6, 278.0), (210.8, 209.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "bf16", ZEN, 1, (108.9, 92.0), (63.0, 62.0), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "bf16", ZEN, 4, (173.7, 169.3), (198.6, 189.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "bf16", ZEN, 8, (215.0, 212.1), (207.5, 203.2), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "bf16", ZEN, 16, (216.2, 209.4), (210.8, 209.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 1, (167.3, 166.6), (63.0, 62.0), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 4, (195.2, 182.6), (198.6, 189.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 8, (188.3, 178.3), (207.5, 203.2), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 16, (184.1, 177.8), (210.8, 209.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q8_0", ZEN, 1, (111.6, 111.1), (63.0, 62.0), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q8_0", ZEN, 4, (105.8, 104.2), (198.6, 189.4), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q8_0", ZEN, 8, (122.0, 119.3), (207.5, 203.2), TINY, _BENCH_ENGINES_200M),
    runs(LLAMA_CPP, "q8_0", ZEN, 16, (121.6, 119.4), (210.8, 209.4), TINY, _BENCH_ENGINES_200M),
    runs(ZENOPS, "w4a16", ZEN, 1, (12.6, 10.3), (23.2, 19.3), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w4a16", ZEN, 4, (75.0, 73.6), (51.6, 49.9), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w4a16", ZEN, 8, (81.7, 81.5), (64.4, 55.4), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w4a16", ZEN, 16, (81.5, 81.1), (67.8, 55.8), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w8a8", ZEN, 1, (30.7, 29.3), (23.2, 19.3), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w8a8", ZEN, 4, (89.9, 87.9), (51.6, 49.9), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w8a8", ZEN, 8, (107.4, 97.5), (64.4, 55.4), ONE_B, _BENCH_ENGINES_1B),
    runs(ZENOPS, "w8a8", ZEN, 16, (98.8, 98.4), (67.8, 55.8), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "bf16", ZEN, 1, (20.9, 18.1), (23.2, 19.3), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "bf16", ZEN, 4, (38.5, 36.4), (51.6, 49.9), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "bf16", ZEN, 8, (48.3, 46.5), (64.4, 55.4), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "bf16", ZEN, 16, (50.1, 49.6), (67.8, 55.8), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 1, (41.4, 38.9), (23.2, 19.3), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 4, (49.9, 47.8), (51.6, 49.9), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 8, (50.6, 49.8), (64.4, 55.4), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q4_k_m", ZEN, 16, (51.5, 51.2), (67.8, 55.8), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q8_0", ZEN, 1, (21.6, 21.3), (23.2, 19.3), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q8_0", ZEN, 4, (26.9, 23.4), (51.6, 49.9), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q8_0", ZEN, 8, (28.1, 24.7), (64.4, 55.4), ONE_B, _BENCH_ENGINES_1B),
    runs(LLAMA_CPP, "q8_0", ZEN, 16, (27.2, 26.0), (67.8, 55.8), ONE_B, _BENCH_ENGINES_1B),
)


def _model_sizes(table: Iterable[Measurement], platform: str, which: str) -> set[float]:
    return {m.params_b for m in table if m.platform == platform and m.isa == which}


def nearest_model(params_b: float | None, sizes: Iterable[float]) -> float | None:
    """The measured model size closest to ``params_b`` by ratio (the larger on a tie); with ``params_b`` None, the
    smallest measured."""
    known = sorted(sizes)
    if not known:
        return None
    if params_b is None or params_b <= 0:
        return known[0]
    return min(known, key=lambda s: (abs(math.log(s / params_b)), -s))


def of_kind(
    platform: str, flags: Iterable[str], params_b: float | None = None, table: Sequence[Measurement] = MEASURED
) -> list[Measurement]:
    """The measurements of this CPU kind (platform and :func:`isa` of ``flags``), of the measured model size nearest
    ``params_b``."""
    which = isa(flags)
    size = nearest_model(params_b, _model_sizes(table, platform, which))
    return [m for m in table if m.platform == platform and m.isa == which and m.params_b == size]


def lookup(
    engine: str,
    fmt: str,
    platform: str,
    flags: Iterable[str],
    concurrency: int,
    params_b: float | None = None,
    table: Sequence[Measurement] = MEASURED,
) -> Measurement | None:
    """The measurement of ``engine`` serving ``fmt`` at exactly ``concurrency`` on this CPU kind, if there is one."""
    return next(
        (m for m in of_kind(platform, flags, params_b, table)
         if m.engine == engine and m.fmt == fmt and m.concurrency == concurrency),
        None,
    )  # fmt: skip


def _vs_planned(m: Measurement, planned: Measurement | None) -> tuple[float, float | None]:
    """``m`` against the planned cell: (ratio, noise); the noise is the larger of the two spreads, None unless both
    are known (the baseline, zenops's bf16, brings none of its own: its spread is in each measurement's)."""
    if planned is None:  # the plan is zenops's bf16: every ratio is against it already
        return m.ratio, m.spread
    noise = max(m.spread, planned.spread) if m.spread is not None and planned.spread is not None else None
    return m.ratio / planned.ratio, noise


def faster_warning(
    weights: str,
    platform: str,
    flags: Iterable[str],
    concurrency: int,
    params_b: float | None = None,
    table: Sequence[Measurement] = MEASURED,
) -> str | None:
    """The plan's warning when another engine or format measured faster than zenops serving ``weights`` (Plan.weights)
    on this CPU kind, at the measured concurrency nearest the planned one from below; None when nothing did (or
    nothing comparable was measured). A figure with a known spread counts only beyond it; one without says so."""
    cells = of_kind(platform, flags, params_b, table)
    planned_is_base = weights == BASELINE
    concurrencies = {
        m.concurrency for m in cells if planned_is_base or (m.engine == ZENOPS and m.fmt == weights)
    }  # fmt: skip
    below = [c for c in concurrencies if c <= concurrency]
    if not below:
        return None
    at = max(below)
    planned = None if planned_is_base else next(m for m in cells if (m.engine, m.fmt, m.concurrency) ==
                                                  (ZENOPS, weights, at))  # fmt: skip
    faster: list[tuple[float, str, str, str]] = []  # (ratio to the plan, what, how far to trust it, source)
    if planned is not None and planned.ratio < 1:  # bf16, the baseline, is an option of its own
        noise = planned.spread
        if noise is None or 1 / planned.ratio > 1 + noise:
            qual = planned.qualifier() + ("" if noise is None else ": beyond it")
            faster.append((1 / planned.ratio, f"zenops {BASELINE}", qual, planned.source))
    for m in cells:
        if m.concurrency != at or (m.engine, m.fmt) == (ZENOPS, weights):
            continue
        value, noise = _vs_planned(m, planned)
        if value <= 1 or (noise is not None and value <= 1 + noise):
            continue
        qual = m.qualifier()
        if noise is not None:
            qual += ": beyond it" if planned is None else f"; beyond the {noise:.0%} spread of the two"
        faster.append((value, f"{m.engine} {m.fmt}", qual, m.source))
    if not faster:
        return None
    faster.sort(key=lambda f: (-f[0], f[1]))
    where = f"at concurrency {at}" + (" (as planned)" if at == concurrency else
                                      f" (the nearest measured at or below the planned {concurrency})")  # fmt: skip
    sources = list(dict.fromkeys([*(f[3] for f in faster), *([planned.source] if planned else [])]))
    size = cells[0].params_b
    model = f"{size * 1000:.0f}M" if size < 1 else f"{size:g}B"
    return (
        f"Measured faster than zenops serving {weights} on this CPU kind ({platform} platform, {isa(flags)}) {where}, "
        f"on a {model}-parameter model, each as a ratio to zenops serving {weights}: "
        + ", ".join(f"{name} {value:.2f}x ({qual})" for value, name, qual, _ in faster)
        + f". Sources: {' | '.join(sources)}. zenops does not switch engines or formats by itself: measure on this "
        "host (scripts/bench-engines, scripts/bench-quant) before choosing"
    )
