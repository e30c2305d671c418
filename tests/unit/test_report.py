"""`zenops report` and zenops.report: bench text and JSON of several vLLM releases, cost, deltas, failures, outputs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from zenops import catalog
from zenops import report as lib
from zenops.cli.main import main
from zenops.errors import ExitCode
from zenops.planner import PlanOptions, Topology, plan, roofline

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed"
SEED_TXT = SEED / "results.optimized.txt"


class Split:
    def __init__(self, exit_code: int, out: str, err: str) -> None:
        self.exit_code = exit_code
        self.out = out
        self.err = err


@pytest.fixture
def run_split(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Like the `run` fixture, with stdout and stderr apart (scripts read stdout; warnings go to stderr)."""
    monkeypatch.setenv("COLUMNS", "200")

    def _run(args: list[str]) -> Split:
        with pytest.raises(SystemExit) as info:
            main(args)
        captured = capsys.readouterr()
        code = info.value.code
        return Split(code if isinstance(code, int) else 1, captured.out, captured.err)

    return _run


# --- fixtures built from the reference's key lists ----------------------------------------------------------------


def _latencies(scale: float = 1.0) -> dict[str, float]:
    base = {"ttft": 400.0, "tpot": 27.5, "itl": 27.0}
    out = {}
    for metric, v in base.items():
        for stat, factor in (("mean", 1.1), ("median", 1.0), ("std", 0.2), ("p99", 3.0)):
            out[f"{stat}_{metric}_ms"] = v * factor * scale
    return out


def bench_json(version: str, **overrides: Any) -> dict[str, Any]:
    """A `vllm bench serve --save-result` object with the keys of that release (reference: vllm-zentorch.md)."""
    d: dict[str, Any] = {
        "date": "20261121-120000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "Qwen/Qwen3-0.6B",
        "tokenizer_id": "Qwen/Qwen3-0.6B",
        "num_prompts": 20,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 4,
        "duration": 20.51,
        "completed": 20,
        "failed": 0,
        "total_input_tokens": 2560,
        "total_output_tokens": 2560,
        "request_throughput": 0.98,
        "request_goodput": None,
        "output_throughput": 124.81,
        "total_token_throughput": 249.62,
        "max_output_tokens_per_s": 148.0,
        "max_concurrent_requests": 8,
        "rtfx": 0.0,
        **_latencies(),
    }
    if version == "0.11":
        del d["failed"], d["rtfx"]
    elif version == "0.33":
        d["latencies"] = [2.5] * 20
        d["queue_times"] = [0.01] * 20
    else:
        assert version == "0.25.1"
    d.update(overrides)
    return d


NEW_BLOCK = """\
============ Serving Benchmark Result ============
Successful requests:                     20
Failed requests:                         {failed}
Maximum request concurrency:             4
Benchmark duration (s):                  20.51
Total input tokens:                      2560
Total generated tokens:                  2560
Request throughput (req/s):              0.98
Output token throughput (tok/s):         124.81
Peak output token throughput (tok/s):    148.00
Peak concurrent requests:                8.00
Total token throughput (tok/s):          249.62
---------------Time to First Token----------------
Mean TTFT (ms):                          495.14
Median TTFT (ms):                        403.64
P99 TTFT (ms):                           1452.09
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          28.39
Median TPOT (ms):                        27.57
P99 TPOT (ms):                           36.38
---------------Inter-token Latency----------------
Mean ITL (ms):                           28.39
Median ITL (ms):                         27.24
P99 ITL (ms):                            31.03
==================================================
"""

OLD_BLOCK = """\
============ Serving Benchmark Result ============
Successful requests:                     20
Maximum request concurrency:             2
Benchmark duration (s):                  30.00
Total input tokens:                      2560
Total generated tokens:                  2560
Request throughput (req/s):              0.67
Output token throughput (tok/s):         85.33
Total Token throughput (tok/s):          170.67
---------------Time to First Token----------------
Mean TTFT (ms):                          300.00
Median TTFT (ms):                        290.50
P99 TTFT (ms):                           600.00
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          22.00
Median TPOT (ms):                        21.75
P99 TPOT (ms):                           30.00
---------------Inter-token Latency----------------
Mean ITL (ms):                           22.00
Median ITL (ms):                         21.50
P99 ITL (ms):                            29.00
==================================================
"""


def _md_rows(text: str) -> list[list[str]]:
    """The cells of a Markdown table's rows (header first, the |---| line left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


# --- the seed write-up -------------------------------------------------------------------------------------------


def test_seed_file_reproduces_the_readme_table(run):
    expected = _md_rows((SEED / "README.md").read_text())
    header, body = expected[0], expected[1:]
    assert len(body) == 11

    r = run(["report", str(SEED_TXT), "--price-per-hour", "0.79", "--format", "md"])
    assert r.exit_code == 0, r.output
    got = _md_rows(r.output)
    assert got[0] == header
    by_model = {row[0]: row for row in got[1:]}
    assert len(by_model) == 11
    for row in body:
        model, tok_s, ttft, tpot, cost = row
        assert by_model[model] == [model, tok_s, ttft, tpot, cost], model
    # same order (highest throughput first) and the same text, line for line
    readme_table = [line for line in (SEED / "README.md").read_text().splitlines() if line.startswith("|")]
    assert r.output.splitlines() == readme_table


def test_seed_costs_follow_the_formula():
    (results, _) = lib.parse_file(SEED_TXT)
    for res in lib.with_price(results, 0.79):
        assert res.cost_per_million_output_tokens == pytest.approx(0.79 / (res.output_tok_s * 3600) * 1e6)
    assert {r.max_concurrency for r in results} == {4}
    assert all(r.failed == 0 and r.completed == 20 and r.num_prompts == 20 for r in results)


# --- text summaries ----------------------------------------------------------------------------------------------


def test_new_spelling_with_failed_requests(tmp_path):
    f = tmp_path / "bench.txt"
    f.write_text("Results Qwen/Qwen3-0.6B\n\n" + NEW_BLOCK.format(failed=0))
    (res,) = lib.parse_text(f.read_text(), str(f))
    assert res.model == "Qwen/Qwen3-0.6B"
    assert (res.completed, res.failed, res.num_prompts, res.max_concurrency) == (20, 0, 20, 4)
    assert (res.output_tok_s, res.total_tok_s, res.request_s, res.duration_s) == (124.81, 249.62, 0.98, 20.51)
    assert (res.median_ttft_ms, res.mean_ttft_ms, res.p99_ttft_ms) == (403.64, 495.14, 1452.09)
    assert (res.median_tpot_ms, res.mean_tpot_ms, res.p99_tpot_ms) == (27.57, 28.39, 36.38)
    assert (res.median_itl_ms, res.mean_itl_ms, res.p99_itl_ms) == (27.24, 28.39, 31.03)
    assert res.source == f"{f}:3"
    assert not res.flagged


def test_old_spelling_without_failed_requests():
    text = "Namespace(backend='vllm', model='meta-llama/Llama-3.2-1B', served_model_name=None)\n" + OLD_BLOCK
    (res,) = lib.parse_text(text, "old.txt")
    assert res.model == "meta-llama/Llama-3.2-1B"
    assert res.total_tok_s == 170.67  # "Total Token throughput" (capital T)
    assert res.failed is None  # 0.11 does not say
    assert res.num_prompts is None
    assert (res.max_concurrency, res.median_ttft_ms, res.median_tpot_ms) == (2, 290.5, 21.75)
    assert not res.flagged


def test_many_blocks_each_with_its_own_model_header_and_model_line_forms():
    text = (
        "Model: Qwen/Qwen3-4B\n"
        + NEW_BLOCK.format(failed=0)
        + "some log line\nFirst model name: x, first model id: google/gemma-3-1b-it\n"
        + OLD_BLOCK
        + "\n"
        + NEW_BLOCK.format(failed=0).replace("Successful requests:", "Model: microsoft/phi-4\nSuccessful requests:")
    )
    results = lib.parse_text(text, "runs.txt")
    assert [r.model for r in results] == ["Qwen/Qwen3-4B", "google/gemma-3-1b-it", "microsoft/phi-4"]


def test_a_block_without_any_model_is_labelled_by_its_file(tmp_path):
    (only,) = lib.parse_text(OLD_BLOCK, str(tmp_path / "qwen-c2.txt"))
    assert only.model == "qwen-c2"
    two = lib.parse_text(OLD_BLOCK + NEW_BLOCK.format(failed=0), "x/mixed.log")
    assert [r.model for r in two] == ["mixed#1", "mixed#2"]


# --- JSON of --save-result ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.11", "0.25.1", "0.33"])
def test_bench_json_of_each_release(tmp_path, version):
    f = tmp_path / f"vllm-infqps-concurrency4-Qwen3-0.6B-{version}.json"
    f.write_text(json.dumps(bench_json(version)))
    (results, skipped) = lib.parse_file(f)
    assert skipped is None
    (res,) = results
    assert res.model == "Qwen/Qwen3-0.6B"
    assert (res.output_tok_s, res.total_tok_s, res.request_s) == (124.81, 249.62, 0.98)
    assert (res.median_ttft_ms, res.median_tpot_ms, res.median_itl_ms) == (400.0, 27.5, 27.0)
    assert res.p99_ttft_ms == pytest.approx(1200.0)
    assert res.mean_tpot_ms == pytest.approx(30.25)
    assert (res.completed, res.max_concurrency, res.num_prompts, res.duration_s) == (20, 4, 20, 20.51)
    assert res.failed == (None if version == "0.11" else 0)
    assert not res.flagged


def test_bench_json_appended_lines_and_unlimited_concurrency(tmp_path):
    f = tmp_path / "appended.json"
    rows = [bench_json("0.25.1", max_concurrency=None), bench_json("0.25.1", model_id="Qwen/Qwen3-4B")]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    (results, _) = lib.parse_file(f)
    assert [(r.model, r.max_concurrency, r.source) for r in results] == [
        ("Qwen/Qwen3-0.6B", None, f"{f}:1"),
        ("Qwen/Qwen3-4B", 4, f"{f}:2"),
    ]


def test_metadata_of_a_result_prices_and_labels_it(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(bench_json("0.25.1", flavor="gp.5.24.96", price_per_hour="0.79", platform="zen")))
    report = lib.load([f])
    (res,) = report.results
    assert (res.flavor, res.platform, res.price_per_hour) == ("gp.5.24.96", "zen", 0.79)
    assert res.cost_per_million_output_tokens == pytest.approx(1.7582, abs=1e-4)


# --- cost --------------------------------------------------------------------------------------------------------


def test_cost_formula():
    assert lib.cost_per_million(0.79, 124.81) == pytest.approx(0.79 / (124.81 * 3600) * 1e6)
    assert f"{lib.cost_per_million(0.79, 124.81):.2f}" == "1.76"
    assert f"{lib.cost_per_million(0.79, 23.83):.2f}" == "9.21"
    assert lib.cost_per_million(None, 124.81) is None  # no price: no cost, never a guess
    assert lib.cost_per_million(0.79, 0.0) is None


def test_no_price_shows_a_dash(run):
    r = run(["report", str(SEED_TXT), "--format", "md"])
    assert r.exit_code == 0, r.output
    rows = _md_rows(r.output)
    assert rows[0][-1] == "$ per 1M output tokens"
    assert all(row[-1] == "-" for row in rows[1:])


# --- run directories ---------------------------------------------------------------------------------------------


def _run_dir(root: Path, manifest: dict[str, Any] | None, concurrencies: tuple[int, ...] = (1, 4)) -> Path:
    root.mkdir(parents=True)
    if manifest is not None:
        (root / "run.json").write_text(json.dumps(manifest))
    for model, speed in (("Qwen/Qwen3-0.6B", 1.0), ("meta-llama/Llama-3.2-1B", 0.8)):
        for c in concurrencies:
            d = bench_json(
                "0.25.1",
                model_id=model,
                max_concurrency=c,
                output_throughput=40.0 * c * speed,
                total_token_throughput=80.0 * c * speed,
                **_latencies(scale=c / speed),
            )
            name = f"vllm-infqps-concurrency{c}-{model.split('/')[1]}-20261121-120000.json"
            (root / model.split("/")[0]).mkdir(exist_ok=True)
            (root / model.split("/")[0] / name).write_text(json.dumps(d))
    return root


def test_run_directory_with_manifest_price_and_a_skipped_json(run_split, tmp_path):
    root = _run_dir(tmp_path / "run", {"flavor": "my.flavor", "price_per_hour": 1.2, "platform": "zen"})
    (root / "Qwen" / "notes.json").write_text('{"hello": "world"}')
    r = run_split(["report", str(root), "--format", "md"])
    assert r.exit_code == 0, r.err
    rows = _md_rows(r.out)
    assert rows[0] == [
        "Model",
        "Concurrency",
        "Output tok/s",
        "Median TTFT ms",
        "Median TPOT ms",
        "$ per 1M output tokens at $1.20/h",
    ]
    assert [row[:3] for row in rows[1:]] == [
        ["Qwen/Qwen3-0.6B", "1", "40.00"],
        ["Qwen/Qwen3-0.6B", "4", "160.00"],
        ["meta-llama/Llama-3.2-1B", "1", "32.00"],
        ["meta-llama/Llama-3.2-1B", "4", "128.00"],
    ]
    assert rows[1][-1] == f"{1.2 / (40 * 3600) * 1e6:.2f}"
    assert "skipped" in r.err
    assert "notes.json" in r.err


def test_manifest_flavor_is_priced_from_the_catalogue_and_flag_wins(run_split, tmp_path):
    root = _run_dir(tmp_path / "run", {"flavor": "gp.5.24.96"}, concurrencies=(4,))
    r = run_split(["report", str(root), "--format", "json"])
    assert r.exit_code == 0, r.err
    data = json.loads(r.out)
    assert {x["price_per_hour"] for x in data["results"]} == {0.79}
    assert {x["flavor"] for x in data["results"]} == {"gp.5.24.96"}
    r = run_split(["report", str(root), "--format", "json", "--price-per-hour", "2"])
    assert {x["price_per_hour"] for x in json.loads(r.out)["results"]} == {2.0}


# --- comparison --------------------------------------------------------------------------------------------------


def _result(model: str, conc: int | None, tok_s: float, ttft: float, tpot: float, price: float | None = 1.0):
    d = bench_json("0.25.1", model_id=model, max_concurrency=conc, output_throughput=tok_s)
    d.update(median_ttft_ms=ttft, median_tpot_ms=tpot, price_per_hour=price)
    return lib.parse_json_result(d, f"{model}-{conc}")


def test_deltas_match_model_and_concurrency():
    current = [_result("a", 4, 110.0, 90.0, 20.0), _result("a", 8, 200.0, 100.0, 30.0), _result("b", 4, 50.0, 1, 1)]
    baseline = [_result("a", 4, 100.0, 100.0, 25.0), _result("a", 8, 250.0, 80.0, 30.0), _result("c", 4, 1, 1, 1)]
    comp = lib.compare(current, baseline)
    by_key = {(d.model, d.max_concurrency): d for d in comp.deltas}
    assert set(by_key) == {("a", 4), ("a", 8)}
    d4 = by_key[("a", 4)]
    assert d4.output_tok_s_pct == pytest.approx(10.0)
    assert d4.median_ttft_pct == pytest.approx(-10.0)
    assert d4.median_tpot_pct == pytest.approx(-20.0)
    assert d4.cost_pct == pytest.approx((100 / 110 - 1) * 100)  # cost goes with 1 / throughput
    d8 = by_key[("a", 8)]
    assert d8.output_tok_s_pct == pytest.approx(-20.0)
    assert d8.median_tpot_pct == pytest.approx(0.0)
    assert [r.model for r in comp.only_current] == ["b"]
    assert [r.model for r in comp.only_baseline] == ["c"]
    assert lib.pct_change(1.0, None) is None
    assert lib.pct_change(1.0, 0.0) is None
    unpriced = lib.compare([_result("a", 4, 1, 1, 1, price=None)], [_result("a", 4, 2, 1, 1)])
    assert unpriced.deltas[0].cost_pct is None


def test_compare_on_the_command_line(run_split, tmp_path):
    new = _run_dir(tmp_path / "new", {"price_per_hour": 0.79})
    old = tmp_path / "old.txt"
    old.write_text(
        "Results Qwen/Qwen3-0.6B\n"
        + NEW_BLOCK.format(failed=0).replace(
            "Maximum request concurrency:             4", "Maximum request concurrency:             1"
        )
    )
    r = run_split(["report", str(new), "--compare", str(old), "--format", "csv"])
    assert r.exit_code == 0, r.err
    (row,) = list(csv.DictReader(io.StringIO(r.out)))
    assert (row["model"], row["max_concurrency"]) == ("Qwen/Qwen3-0.6B", "1")
    assert float(row["output_throughput_pct"]) == pytest.approx((40.0 - 124.81) / 124.81 * 100)
    assert row["cost_pct"] == ""  # the baseline has no price
    r = run_split(["report", str(new), "--compare", str(old), "--format", "md"])
    assert r.exit_code == 0, r.err
    assert f"Compared with {old}" in r.out
    assert "Only in the report" in r.out
    r = run_split(["report", str(new), "--compare", str(old)])
    assert r.exit_code == 0, r.err
    assert "compared with" in r.out
    data = json.loads(run_split(["report", str(new), "--compare", str(old), "--json"]).out)
    assert len(data["comparison"]["deltas"]) == 1
    assert len(data["comparison"]["only_in_report"]) == 3


# --- failed requests ---------------------------------------------------------------------------------------------


def test_failed_requests_are_flagged_and_fail_the_command(run_split, tmp_path):
    f = tmp_path / "failed.json"
    f.write_text(json.dumps(bench_json("0.25.1", completed=17, failed=3)))
    r = run_split(["report", str(f)])
    assert r.exit_code == ExitCode.BENCH_FAILED == 12
    assert "3 of 20 requests failed" in r.err
    assert "FAILED" in r.out  # the row says so too
    assert "--allow-failed" in r.err
    r = run_split(["report", str(f), "--allow-failed", "--format", "md"])
    assert r.exit_code == 0
    assert "3 of 20 requests failed" in r.err
    rows = _md_rows(r.out)
    assert "Failed" in rows[0]
    assert rows[1][rows[0].index("Failed")] == "3 FAILED"


def test_every_request_failed_is_flagged(run_split, tmp_path):
    zero = bench_json("0.25.1", completed=0, failed=20, output_throughput=0.0, total_token_throughput=0.0)
    (tmp_path / "zero.json").write_text(json.dumps(zero))
    r = run_split(["report", str(tmp_path), "--price-per-hour", "0.79", "--json"])
    assert r.exit_code == ExitCode.BENCH_FAILED
    lines = [json.loads(line) for line in r.out.splitlines()]
    result = next(x for x in lines if x["type"] == "result")
    (res,) = result["results"]
    assert res["problems"] == ["no request completed", "20 of 20 requests failed"]
    assert res["cost_per_million_output_tokens"] is None
    assert lines[-1]["type"] == "error"
    assert lines[-1]["exit_code"] == 12


def test_old_releases_without_failed_are_flagged_when_prompts_went_missing():
    res = lib.parse_json_result(bench_json("0.11", completed=15), "old.json")
    assert res.failed is None
    assert res.problems == ["only 15 of 20 prompts completed"]
    (text_res,) = lib.parse_text(
        OLD_BLOCK.replace("Successful requests:                     20", "Successful requests: 0"), "t"
    )
    assert text_res.problems == ["no request completed"]


# --- machine-readable outputs ------------------------------------------------------------------------------------


def test_csv_and_json_parse_back(run_split):
    r = run_split(["report", str(SEED_TXT), "--price-per-hour", "0.79", "--format", "csv"])
    assert r.exit_code == 0, r.err
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert len(rows) == 11
    qwen = next(row for row in rows if row["model"] == "Qwen/Qwen3-0.6B")
    assert float(qwen["output_throughput"]) == 124.81
    assert float(qwen["median_ttft_ms"]) == 403.64
    assert float(qwen["cost_per_million_output_tokens"]) == pytest.approx(0.79 / (124.81 * 3600) * 1e6)
    assert qwen["failed"] == "0"
    assert qwen["max_concurrency"] == "4"

    for args in (["--format", "json"], ["--json"]):
        r = run_split(["report", str(SEED_TXT), "--price-per-hour", "0.79", *args])
        assert r.exit_code == 0, r.err
        data = json.loads(r.out)
        assert data["command"] == "report"
        assert len(data["results"]) == 11
        phi = next(x for x in data["results"] if x["model"] == "microsoft/phi-4")
        assert phi["median_tpot_ms"] == 129.8
        assert round(phi["cost_per_million_output_tokens"], 2) == 9.21
        assert data["flagged"] == 0


def test_default_table_has_the_columns(run):
    r = run(["report", str(SEED_TXT), "--price-per-hour", "0.79"])
    assert r.exit_code == 0, r.output
    for col in ("model", "concurrency", "output tok/s", "median TTFT ms", "median TPOT ms", "failed", "$/1M output"):
        assert col in r.output
    assert "microsoft/phi-4" in r.output
    assert "9.21" in r.output


def test_plot_writes_a_png(run_split, tmp_path):
    root = _run_dir(tmp_path / "run", {"price_per_hour": 0.79}, concurrencies=(1, 4))
    png = tmp_path / "plot.png"
    r = run_split(["report", str(root), "--plot", str(png), "--compare", str(root)])
    assert r.exit_code == 0, r.err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # three panels with lines, not an empty canvas
    assert f"wrote {png}" in r.err


def test_plot_refuses_a_missing_directory(run, tmp_path):
    r = run(["report", str(SEED_TXT), "--plot", str(tmp_path / "no" / "p.png")])
    assert r.exit_code == ExitCode.USAGE
    assert "does not exist" in r.output


# --- errors ------------------------------------------------------------------------------------------------------


def test_missing_path(run, tmp_path):
    r = run(["report", str(tmp_path / "nope.txt")])
    assert r.exit_code == ExitCode.USAGE
    assert "no such file or directory" in r.output
    assert "fix:" in r.output


def test_empty_directory(run, tmp_path):
    (tmp_path / "bench.txt").write_text(NEW_BLOCK.format(failed=0))
    r = run(["report", str(tmp_path)])
    assert r.exit_code == ExitCode.USAGE
    assert "no bench result" in r.output
    assert "bench.txt" in r.output  # the hint names the text summary to pass instead


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("truncated.json", '{"completed": 20, "output_throughput": 12', "not valid JSON"),
        ("wrong.json", json.dumps(bench_json("0.25.1", output_throughput="fast")), "'output_throughput'"),
        ("other.json", '{"hello": "world"}', "not a `vllm bench serve --save-result` result"),
        ("cut.txt", NEW_BLOCK.format(failed=0).rsplit("=====", 1)[0].rstrip("=\n"), "does not end"),
        ("bad.txt", NEW_BLOCK.format(failed="many"), "'many' is not a number"),
        ("none.txt", "just some log\n", "no '== Serving Benchmark Result ==' block"),
        ("empty.txt", "", "empty file"),
        ("pooling.json", json.dumps({"completed": 5, "duration": 1.0, "request_throughput": 5}), "output_throughput"),
    ],
)
def test_malformed_inputs(run, tmp_path, name, content, fragment):
    f = tmp_path / name
    f.write_text(content)
    r = run(["report", str(f)])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert fragment in r.output.replace("\n", " ")


def test_malformed_manifest(run, tmp_path):
    root = _run_dir(tmp_path / "run", None, concurrencies=(4,))
    (root / "run.json").write_text("{oops")
    r = run(["report", str(root)])
    assert r.exit_code == ExitCode.USAGE
    assert "run manifest is not valid JSON" in r.output


# --- the roofline: measured tok/s against the plan's ceiling ---------------------------------------------------

FACTS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def measured_plan(gbps: float = 40.0, gflops: float | None = 900.0, **opts: Any) -> dict[str, Any]:
    """A real plan (zenops.planner) of Qwen3-0.6B on gp.5.24.96's facts with a measured node 0, as plan.json holds
    it (through JSON)."""
    facts = json.loads((FACTS_DIR / "gp-5-24-96.json").read_text())
    facts["bandwidth"] = {"nodes": {"0": {"gbps": gbps, "gflops": gflops, "method": "test", "cores": 23}}}
    p = plan(Topology.from_facts(facts), catalog.get_model("Qwen/Qwen3-0.6B"), PlanOptions(**opts))
    return json.loads(json.dumps(p.to_dict()))


def test_ceiling_at_the_plans_own_concurrency_and_context_is_the_plans_roofline():
    p = measured_plan()
    roof = p["instances"][0]["roofline"]
    again = lib.ceiling(p, 0, concurrency=roof["concurrency"], context_tokens=roof["context_tokens"])
    assert again == roof


def test_ceiling_follows_the_bench_with_the_models_own_numbers():
    """At C=2 and 512 tokens of context: bytes = weights + 2 x KV/token x 512, FLOPs = 2 x (2 x params + attention
    x 512), the figures of the model's spec (not of the plan's arithmetic)."""
    m = catalog.get_model("Qwen/Qwen3-0.6B")
    p = measured_plan(gbps=40.0, gflops=900.0)
    got = lib.ceiling(p, 0, concurrency=2, context_tokens=512)
    assert got is not None
    assert got["bytes_per_step"] == m.weight_bytes("bfloat16") + 2 * m.kv_bytes_per_token("bfloat16") * 512
    assert got["flops_per_step"] == 2 * (2 * m.params_b * 1e9 + m.attention_flops_per_context_token() * 512)
    assert got["bandwidth_gbps"] == 40.0  # the node's one instance gets all of it
    step_ms = max(got["bytes_per_step"] / 40e9, got["flops_per_step"] / (got["gflops"] * 1e9)) * 1000
    assert got["ceiling_tok_s"] == pytest.approx(2 / (step_ms / 1000), rel=1e-3)
    assert got["binding"] == "memory"
    assert got == roofline(
        bandwidth_gbps=40.0, gflops=got["gflops"], weight_bytes=m.weight_bytes("bfloat16"),
        kv_bytes_per_token=m.kv_bytes_per_token("bfloat16"), context_tokens=512, params=m.params_b * 1e9,
        concurrency=2, attention_flops_per_context_token=m.attention_flops_per_context_token(),
        source=got["source"],
    ).to_dict()  # fmt: skip


def test_ceiling_caps_concurrency_at_the_plans_seats_and_binds_on_compute_when_flops_are_scarce():
    p = measured_plan(gflops=1.0, concurrency=4)  # max_num_seqs 5
    assert p["max_num_seqs"] == 5
    at_5 = lib.ceiling(p, 0, concurrency=5, context_tokens=256)
    at_64 = lib.ceiling(p, 0, concurrency=64, context_tokens=256)
    assert at_5 is not None
    assert at_64 == at_5  # requests beyond the seats queue: no more tokens per step
    assert at_5["binding"] == "compute"


def test_no_ceiling_without_a_roofline_or_its_inputs():
    p = measured_plan()
    assert lib.ceiling(p, 7, concurrency=1, context_tokens=10) is None  # no such instance
    old = json.loads(json.dumps(p))
    del old["instances"][0]["roofline"]["weight_bytes"]  # a plan of an older zenops
    assert lib.ceiling(old, 0, concurrency=1, context_tokens=10) is None
    old["instances"][0]["roofline"] = None
    assert lib.ceiling(old, 0, concurrency=1, context_tokens=10) is None


def write_bench_run(root: Path, plan: dict[str, Any] | None) -> Path:
    """runs/<id> as zenops bench writes it: run.json, <host>/plan.json, <host>/<instance>/<platform>-c<N>.json."""
    run = root / "r1"
    (run / "web-1" / "0").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "r1", "price_per_hour": 0.79}))
    if plan is not None:
        (run / "web-1" / "plan.json").write_text(json.dumps(plan))
    for c in (1, 4):
        (run / "web-1" / "0" / f"zen-c{c}.json").write_text(
            json.dumps(bench_json("0.25.1", max_concurrency=c, instance=0, output_throughput=10.0 * c))
        )
    return run


def test_a_bench_run_reports_each_result_against_its_ceiling(tmp_path):
    p = measured_plan()
    run = write_bench_run(tmp_path, p)
    rep = lib.load([run])
    assert [s for s, _ in rep.skipped if s.endswith("plan.json")] == []  # the plan is read, not skipped
    by_c = {r.max_concurrency: r for r in rep.results}
    for c, r in by_c.items():
        # bench_json: 2560 input and 2560 output tokens over 20 requests -> 128 + 128 tokens of context
        expected = lib.ceiling(p, 0, concurrency=c, context_tokens=256)
        assert expected is not None
        assert r.roofline == expected
        assert r.roofline_pct == pytest.approx(10.0 * c / expected["ceiling_tok_s"] * 100)
        d = r.to_dict()
        assert d["roofline_pct"] == r.roofline_pct
        assert d["ceiling_tok_s"] == expected["ceiling_tok_s"]
        assert d["roofline_binding"] == "memory"
    assert by_c[4].roofline["ceiling_tok_s"] > by_c[1].roofline["ceiling_tok_s"]
    md = lib.markdown(rep.results)
    assert "Of the plan's ceiling (roof)" in md
    assert lib.roofline_cell(by_c[4]) in md
    assert lib.roofline_cell(by_c[4]).endswith("(memory)")
    assert "roofline_pct" in lib.to_csv(rep.results).splitlines()[0]
    # one result file given by itself finds its host's plan too
    single = lib.load([run / "web-1" / "0" / "zen-c4.json"])
    assert single.results[0].roofline == by_c[4].roofline


def test_without_a_plan_or_a_ceiling_roofline_pct_is_none(tmp_path):
    rep = lib.load([write_bench_run(tmp_path / "a", None)])
    assert all(r.roofline_pct is None for r in rep.results)
    assert all(r.to_dict()["roofline_pct"] is None for r in rep.results)
    assert "ceiling" not in lib.markdown(rep.results)
    no_roof = measured_plan()
    no_roof["instances"][0]["roofline"] = None
    rep = lib.load([write_bench_run(tmp_path / "b", no_roof)])
    assert all(r.roofline_pct is None for r in rep.results)


def test_report_cli_prints_the_percentage_of_the_ceiling(run, tmp_path):
    bench_run = write_bench_run(tmp_path, measured_plan())
    r = run(["report", str(bench_run)])
    assert r.exit_code == 0, r.output
    assert "of the plan's ceiling" in r.output
    rep = lib.load([bench_run])
    c4 = next(x for x in rep.results if x.max_concurrency == 4)
    assert lib.roofline_cell(c4) in r.output


# --- several instances on one host -------------------------------------------------------------------------------


def write_multi_instance_run(root: Path, run_id: str, tok_s: dict[int, float], host: str = "big-1") -> Path:
    """A run of zenops bench on a host with one server per instance (the throughput objective), c4 each."""
    run = root / run_id
    (run / "run.json").parent.mkdir(parents=True, exist_ok=True)
    (run / "run.json").write_text(json.dumps({"run_id": run_id, "price_per_hour": 3.6}))
    for instance, out in tok_s.items():
        d = run / host / str(instance)
        d.mkdir(parents=True)
        result = bench_json("0.25.1", instance=instance, host=host, run_id=run_id, output_throughput=out,
                            median_ttft_ms=100.0 * (instance + 1), completed=20, failed=0)  # fmt: skip
        (d / "zen-c4.json").write_text(json.dumps(result))
    return run


def test_host_totals_sum_the_instances_and_price_the_whole_server(tmp_path):
    run = write_multi_instance_run(tmp_path, "r1", {0: 100.0, 1: 150.0, 2: 50.0})
    rep = lib.load([run])
    assert len(rep.results) == 3
    (total,) = lib.host_totals(rep.results)
    assert total.output_tok_s == pytest.approx(300.0)
    assert total.completed == 60
    assert total.failed == 0
    assert total.median_ttft_ms == pytest.approx(300.0)  # the worst instance's, not a sum
    assert total.label == "big-1 total (3 instances)"
    # the server costs 3.6 $/h whatever it runs: priced over everything it served
    assert total.cost_per_million_output_tokens == pytest.approx(3.6 / (300.0 * 3600) * 1e6)
    assert all(r.cost_per_million_output_tokens > total.cost_per_million_output_tokens for r in rep.results)


def test_host_totals_keep_runs_and_single_instance_hosts_apart(tmp_path):
    a = write_multi_instance_run(tmp_path, "r1", {0: 100.0, 1: 100.0})
    b = write_multi_instance_run(tmp_path, "r2", {0: 10.0, 1: 10.0})
    single = write_multi_instance_run(tmp_path, "r3", {0: 70.0}, host="small-1")
    totals = lib.host_totals(lib.load([a, b, single]).results)
    assert sorted(t.output_tok_s for t in totals) == [pytest.approx(20.0), pytest.approx(200.0)]
    assert all("big-1" in (t.label or "") for t in totals)


def test_report_cli_shows_host_totals_in_json_and_markdown(run_split, tmp_path):
    run = write_multi_instance_run(tmp_path, "r1", {0: 100.0, 1: 150.0})
    r = run_split(["--json", "report", str(run)])
    assert r.exit_code == 0, r.err
    doc = json.loads(r.out.strip().splitlines()[-1])
    assert [t["output_throughput"] for t in doc["host_totals"]] == [pytest.approx(250.0)]
    assert len(doc["results"]) == 2
    md = run_split(["report", str(run), "--format", "md"])
    assert md.exit_code == 0, md.err
    md = md.out
    assert "Per host, its instances summed" in md
    assert "| big-1 total (2 instances) |" in md
    single = write_multi_instance_run(tmp_path, "r2", {0: 100.0}, host="small-1")
    assert "Per host" not in run_split(["report", str(single), "--format", "md"]).out
