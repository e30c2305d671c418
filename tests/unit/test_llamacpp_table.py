"""zenops.llamacpp_table: a campaign report's rows (tests/fixtures/engines/report.json, a hand-made report of a campaign
with `variants: engines`, see its README) as the issue's table: engine, format, kernel, tok/s per concurrency with its
spread, the ratio to zenops's bf16 plan, % of the ceiling; then the pairs at equal bytes per weight and verdicts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from zenops import llamacpp_table as table
from zenops.errors import ExitCode, UsageError
from zenops.llamacpp import LLAMA_FASTER, NO_SPREAD, WITHIN, ZENOPS_FASTER

REPORT = Path(__file__).parents[1] / "fixtures" / "engines" / "report.json"


@pytest.fixture
def rows() -> list[dict]:
    return json.loads(REPORT.read_text())["rows"]


def _line(md: str, start: str) -> list[str]:
    (found,) = [line for line in md.splitlines() if line.startswith(start)]
    return [c.strip() for c in found.strip("|").split("|")]


def test_the_twins_are_one_architecture_with_a_line_per_engine_and_format_and_its_kernel(rows):
    md = table.markdown(rows)
    assert md.count("### ") == 1
    assert "### /tmp/zenops-bench-engines.Xy12 on devhost" in md
    head = _line(md, "| engine |")
    assert head[:3] == ["engine", "format", "kernel"]
    assert head[3:] == [f"C={c} {w}" for c in (1, 4) for w in ("tok/s", "x zenops bf16", "% of ceiling")]
    assert _line(md, "| zenops | bfloat16 |")[2] == "zentorch / oneDNN GEMM"
    assert _line(md, "| zenops | w8a8 |")[2] == "ZentorchInt8ScaledMMLinearKernel"  # zenops.quant.KERNELS, zen
    assert _line(md, "| zenops | w4a16 |")[2] == "ZentorchWNA16LinearKernel"
    assert _line(md, "| llama.cpp | q4_k_m |")[2] == "llama.cpp CPU (ggml), Q4_K_M"
    engines = [line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| zenops |")
               or line.startswith("| llama.cpp |")]  # fmt: skip
    assert engines == ["zenops"] * 3 + ["llama.cpp"] * 3  # zenops first, each by bytes per weight


def test_each_concurrency_has_the_mean_and_spread_the_ratio_to_zenops_bf16_and_the_ceiling(rows):
    md = table.markdown(rows)
    bf16 = _line(md, "| llama.cpp | bf16 |")
    assert bf16[3:] == ["141.3 (spread 12%)", "2.02x", "91%", "281.8 (spread 17%)", "1.31x", "50%"]  # `% of ceiling`
    z = _line(md, "| zenops | bfloat16 |")
    assert z[3:6] == ["69.9 (spread 16%)", "1.00x", "45%"]  # roofline_pct where the newer field is absent
    assert _line(md, "| zenops | w4a16 |")[3] == "60.0 (1 run)"
    q4 = _line(md, "| llama.cpp | q4_k_m |")
    assert q4[6] == "300.0 (spread 5%) (1 of 32 requests failed)"
    assert _line(md, "| llama.cpp | q8_0 |")[5] == "-"  # no ceiling known
    assert "left out" in md.splitlines()[-1]  # the write-up variant


def test_the_pairs_at_equal_bytes_per_weight_carry_each_verdict(rows):
    md = table.markdown(rows)
    verdicts = {(p[0], p[1]): p[5] for p in (_line(md, f"| zenops {z} / llama.cpp {g} | {c} |")
                for z, g in (("bfloat16", "bf16"), ("w8a8", "q8_0"), ("w4a16", "q4_k_m")) for c in (1, 4))}  # fmt: skip
    assert verdicts == {
        ("zenops bfloat16 / llama.cpp bf16", "1"): f"{LLAMA_FASTER} (16%)",
        ("zenops bfloat16 / llama.cpp bf16", "4"): f"{LLAMA_FASTER} (17%)",
        ("zenops w8a8 / llama.cpp q8_0", "1"): f"{WITHIN} (10%)",
        ("zenops w8a8 / llama.cpp q8_0", "4"): f"{ZENOPS_FASTER} (28%)",
        ("zenops w4a16 / llama.cpp q4_k_m", "1"): NO_SPREAD,
        ("zenops w4a16 / llama.cpp q4_k_m", "4"): "not comparable: llama.cpp failed requests",
    }
    assert _line(md, "| zenops w8a8 / llama.cpp q8_0 | 4 |")[2:5] == ["0.55x", "0.80x", "1.82x"]


def test_a_gguf_made_from_a_quantized_twin_gives_way_to_the_one_from_bf16_weights(rows):
    assert "999" not in table.markdown(rows)
    assert "999" not in table.markdown(rows[::-1])  # whichever comes first
    alone = [r for r in rows if not (r["variant"] == "llamacpp-q8_0" and r["model"].endswith("/bf16"))]
    assert "999.0" in _line(table.markdown(alone), "| llama.cpp | q8_0 |")[3]


def test_engine_and_weights_fields_and_their_derivation_agree(rows):
    derived = copy.deepcopy(rows)
    for r in derived:
        r.pop("engine", None)
        r.pop("weights", None)
    given = copy.deepcopy(rows)
    for r in given:
        r["engine"] = "zenops" if r["variant"] == "zenops" else "llama.cpp" if r["variant"] != "write-up" else None
        r["weights"] = r["metadata"].get("weights") or r["variant"].removeprefix("llamacpp-")
        r["variant"] = "renamed"  # the fields win over the variant
    given = [r for r in given if r["engine"]]
    assert table.read_rows(given)[0] == table.read_rows(derived)[0]


def test_zenops_rows_without_plan_weights_take_the_model_directorys_name(rows):
    for r in rows:
        r["metadata"] = {}
    assert _line(table.markdown(rows), "| zenops | w8a8 |")[2] == "ZentorchInt8ScaledMMLinearKernel"
    rows[0]["model"] = "Qwen/Qwen3-0.6B"  # not named by a format: nothing says its weights
    with pytest.raises(UsageError, match="weights' format is not known"):
        table.markdown(rows)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda rs: rs[6].update(variant="llamacpp-q4_0", engine=None), "unknown GGUF format 'q4_0'"),
        (lambda rs: rs.append(dict(rs[0])), "two zenops bfloat16 rows"),
        (lambda rs: rs[0].update(engine="ollama"), "unknown engine 'ollama'"),
        (lambda rs: rs[0].update(output_throughput=None), "no output_throughput"),
        (lambda rs: rs.clear(), "no zenops or llama.cpp rows"),
    ],
)
def test_bad_rows_are_refused_naming_the_fix(rows, change, match):
    change(rows)
    with pytest.raises(UsageError, match=match) as e:
        table.markdown(rows)
    assert e.value.hint


def test_main_prints_the_table_from_the_last_line_of_zenops_json_or_exits_2(tmp_path, capsys):
    out = tmp_path / "report.json"
    out.write_text("==> zenops campaign report\n" + json.dumps(json.loads(REPORT.read_text())) + "\n")
    assert table.main([str(out)]) == 0
    assert "| zenops w8a8 / llama.cpp q8_0 | 4 |" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text('{"campaigns": []}\n')
    assert table.main([str(bad)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "not a campaign report" in err
    assert "hint: give the output of `zenops --json campaign report ID`" in err
    assert table.main([str(tmp_path / "missing.json")]) == ExitCode.USAGE
    assert table.main([]) == ExitCode.USAGE
