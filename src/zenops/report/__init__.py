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

The package, by seam (each module imports only the ones listed before it):

* ``cells``       the one escaping function of every output: control characters, CSV formulas
* ``results``     the normalized BenchResult, its cost, pricing and order, the input errors
* ``parsing``     text summaries and --save-result JSON -> BenchResults
* ``loading``     files and run directories -> a Report (manifests price and label, plan.json gives the ceiling)
* ``comparison``  two sets of results matched up, deltas; a host's instances summed
* ``rendering``   Markdown and CSV
* ``plotting``    the PNG

``zenops.report`` re-exports the public names of all of them: ``from zenops import report; report.load(...)``.
"""

from __future__ import annotations

from zenops.cost import cost_per_million
from zenops.errors import NoBenchResultError
from zenops.report.cells import clean, csv_cell
from zenops.report.comparison import Comparison, Delta, compare, host_totals, pct_change
from zenops.report.loading import PLAN, Report, ceiling, load, parse_file, read_manifest, with_roofline
from zenops.report.parsing import LABEL_KEYS, is_bench_json, parse_json_result, parse_text
from zenops.report.plotting import plot
from zenops.report.rendering import (
    COMPARISON_CSV_FIELDS,
    COMPARISON_HEADER,
    CSV_FIELDS,
    SERVER_HEADER,
    comparison_csv,
    comparison_markdown,
    comparison_rows,
    cost_header,
    fmt,
    fmt_pct,
    fmt_price,
    markdown,
    model_cell,
    roofline_cell,
    server_markdown,
    server_rows,
    to_csv,
)
from zenops.report.results import (
    MANIFEST,
    BenchInputError,
    BenchPathNotFoundError,
    BenchResult,
    MalformedBenchResultError,
    PriceLookup,
    ordered,
    with_price,
)

__all__ = [
    "COMPARISON_CSV_FIELDS",
    "COMPARISON_HEADER",
    "CSV_FIELDS",
    "LABEL_KEYS",
    "MANIFEST",
    "PLAN",
    "SERVER_HEADER",
    "BenchInputError",
    "BenchPathNotFoundError",
    "BenchResult",
    "Comparison",
    "Delta",
    "MalformedBenchResultError",
    "NoBenchResultError",
    "PriceLookup",
    "Report",
    "ceiling",
    "clean",
    "compare",
    "comparison_csv",
    "comparison_markdown",
    "comparison_rows",
    "cost_header",
    "cost_per_million",
    "csv_cell",
    "fmt",
    "fmt_pct",
    "fmt_price",
    "host_totals",
    "is_bench_json",
    "load",
    "markdown",
    "model_cell",
    "ordered",
    "parse_file",
    "parse_json_result",
    "parse_text",
    "pct_change",
    "plot",
    "read_manifest",
    "roofline_cell",
    "server_markdown",
    "server_rows",
    "to_csv",
    "with_price",
    "with_roofline",
]
