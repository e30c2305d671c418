"""zenops.campaign.report: the campaign's table (repeats averaged), best configuration per model under a TPOT bound,
the non-dominated set, break-even against an API, failed and skipped cells, markdown/CSV/JSON, comparison, plot."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from zenops import report as lib
from zenops.campaign.report import (
    HOURS_PER_MONTH,
    CellOutcome,
    Row,
    break_even,
    build_report,
    compare_campaigns,
    pareto,
    plot_pareto,
    rows_of,
)
from zenops.errors import UsageError
from zenops.report.results import BenchResult

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "campaign" / "bench"
MODEL = "/work/models/tiny-a"  # the campaign's spelling; the fixture's results say /models/tiny-a


def res(
    tok_s: float,
    tpot: float | None,
    *,
    model: str = "m",
    flavor: str = "f1",
    variant: str = "v1",
    conc: int = 1,
    price: float | None = 1.0,
    failed: int = 0,
    ttft: float = 100.0,
    source: str = "x.json",
    **extra: Any,
) -> BenchResult:
    return BenchResult(
        model=model,
        output_tok_s=tok_s,
        total_tok_s=None,
        request_s=None,
        median_ttft_ms=ttft,
        mean_ttft_ms=None,
        p99_ttft_ms=None,
        median_tpot_ms=tpot,
        mean_tpot_ms=extra.pop("mean_tpot_ms", None),
        p99_tpot_ms=None,
        median_itl_ms=None,
        mean_itl_ms=None,
        p99_itl_ms=None,
        completed=10 - failed,
        failed=failed,
        max_concurrency=conc,
        num_prompts=10,
        duration_s=None,
        source=source,
        price_per_hour=price,
        flavor=flavor,
        label=variant,
        **extra,
    )


def cell(key: str, status: str = "done", *, model: str = "m", flavor: str = "f1", variant: str = "v1", **kw: Any):
    return CellOutcome(
        key=key,
        flavor=flavor,
        model=model,
        variant=variant,
        status=status,
        reason=kw.get("reason"),
        run_dir=kw.get("run_dir"),
    )


def report_of(results: list[BenchResult], cells: list[CellOutcome] = (), **kw: Any):  # type: ignore[assignment]
    return build_report(results, cells, max_tpot_ms=kw.get("max_tpot_ms"), api_price=kw.get("api_price"))


# --- the fixture campaign: load() of its run directories --------------------------------------------------------


def fixture_cells() -> list[CellOutcome]:
    return [
        cell("aaaaaaaaaaaa", model=MODEL, flavor="gp.small", variant="zen", run_dir=str(RUNS / "aaaaaaaaaaaa-r1")),
        cell("bbbbbbbbbbbb", model=MODEL, flavor="gp.small", variant="cpu", run_dir=str(RUNS / "bbbbbbbbbbbb-r1")),
        cell("cccccccccccc", "skipped", model=MODEL, flavor="gp.big", variant="zen", reason="budget: $0.40 left"),
        cell("dddddddddddd", "failed", model=MODEL, flavor="gp.big", variant="cpu", reason="health-gate: OOM"),
    ]


def fixture_report(**kw: Any):
    results = lib.load(sorted(RUNS.iterdir())).results
    return build_report(results, fixture_cells(), max_tpot_ms=kw.get("max_tpot_ms"), api_price=kw.get("api_price"))


def _row(rep, variant: str, conc: int) -> Row:
    (row,) = [r for r in rep.rows if r.variant == variant and r.concurrency == conc]
    return row


def test_fixture_rows_average_repeats_and_take_the_cells_model():
    rep = fixture_report()
    assert [(r.flavor, r.model, r.variant, r.concurrency) for r in rep.rows] == [
        ("gp.small", MODEL, "cpu", 1),
        ("gp.small", MODEL, "cpu", 4),
        ("gp.small", MODEL, "zen", 1),
        ("gp.small", MODEL, "zen", 4),
    ]
    zen1 = _row(rep, "zen", 1)
    assert len(zen1.runs) == 2
    assert zen1.result.output_tok_s == pytest.approx(21.0)  # (20 + 22) / 2
    assert zen1.result.median_tpot_ms == pytest.approx(39.0)  # (40 + 38) / 2
    assert zen1.result.median_ttft_ms == pytest.approx(105.0)
    assert zen1.spread == pytest.approx(2 / 21)
    assert zen1.result.completed == 16
    assert zen1.cost == pytest.approx(0.5 / (21 * 3600) * 1e6)  # 6.6138
    assert zen1.user_tok_s == pytest.approx(1000 / 39)
    assert _row(rep, "cpu", 1).spread is None  # one run
    cpu4 = _row(rep, "cpu", 4)
    assert not cpu4.ok
    assert cpu4.result.problems == ["2 of 8 requests failed"]
    assert rep.unmatched_cells == []


def test_fixture_best_pareto_partial_and_cells_not_measured():
    rep = fixture_report()
    assert rep.best[MODEL] is _row(rep, "zen", 4)  # 62 tok/s at $0.50/h: $2.24 per 1M
    assert rep.best[MODEL].cost == pytest.approx(0.5 / (62 * 3600) * 1e6)
    assert rep.front[MODEL] == [_row(rep, "zen", 4), _row(rep, "zen", 1)]  # cpu c1 is dominated by zen c1
    assert rep.partial  # a skipped cell
    assert rep.status_line() == "Partial campaign: 2 of 4 cells measured (1 failed, 1 skipped)."
    assert [(c.key, c.status, c.reason) for c in rep.not_measured] == [
        ("cccccccccccc", "skipped", "budget: $0.40 left"),
        ("dddddddddddd", "failed", "health-gate: OOM"),
    ]
    bounded = fixture_report(max_tpot_ms=50)
    assert bounded.best[MODEL] is _row(bounded, "zen", 1)  # zen c4's 61.25 ms is over the bound


def test_fixture_markdown_and_csv_contain_every_row():
    rep = fixture_report(max_tpot_ms=50, api_price=0.6)
    md = rep.markdown()
    assert md.startswith("Partial campaign: 2 of 4 cells measured")
    table = [line for line in md.splitlines() if line.startswith("| gp.small | /work/models/tiny-a |")]
    assert len(table) == 4
    zen1 = next(line for line in table if "| zen | 1 |" in line)
    assert "| 21.00 | 105.00 | 39.00 | 0 | 6.61 (best) |" in zen1
    assert "9.5% of 2" in zen1  # the repeat spread
    assert any("| cpu | 4 |" in line and "2 of 8 requests failed" in line for line in table)
    assert "median TPOT <= 50.0 ms" in md
    assert "| gp.big | /work/models/tiny-a | cpu | failed | health-gate: OOM |" in md
    assert "| gp.big | /work/models/tiny-a | zen | skipped | budget: $0.40 left |" in md
    assert "730 h a month" in md
    assert "## Non-dominated configurations" in md
    rows = list(csv.DictReader(io.StringIO(rep.csv())))
    assert len(rows) == 4
    zen1_csv = next(r for r in rows if r["variant"] == "zen" and r["concurrency"] == "1")
    assert float(zen1_csv["output_throughput"]) == pytest.approx(21.0)
    assert zen1_csv["best"] == "True"
    assert zen1_csv["repeats"] == "2"
    assert float(zen1_csv["breakeven_tokens_per_month"]) == pytest.approx(0.5 * 730 / 0.6 * 1e6)
    assert next(r for r in rows if r["variant"] == "cpu" and r["concurrency"] == "4")["problems"]
    doc = json.loads(json.dumps(rep.to_dict()))
    assert doc["partial"] is True
    assert doc["best"][MODEL]["variant"] == "zen"
    assert doc["cells"] == {"done": 2, "failed": 1, "skipped": 1}


def test_results_without_a_cell_keep_their_own_labels_and_a_done_cell_without_results_is_named():
    rep = report_of([res(10, 50)], [cell("eeeeeeeeeeee", run_dir="/nowhere")])
    assert rep.rows[0].model == "m"
    assert [c.key for c in rep.unmatched_cells] == ["eeeeeeeeeeee"]


def test_a_cell_dir_named_by_key_attributes_results_of_later_repeats():
    results = [
        res(10, 50, model="served", source="/s/runs/abcdefabcdef-r1/h/0/zen-c1.json"),
        res(12, 48, model="served", source="/s/runs/abcdefabcdef-r2/h/0/zen-c1.json:3"),
    ]
    rep = report_of(results, [cell("abcdefabcdef", model="Org/M", variant="zen", run_dir="/s/runs/abcdefabcdef-r1")])
    (row,) = rep.rows
    assert (row.model, row.variant, len(row.runs)) == ("Org/M", "zen", 2)


# --- best configuration per model -------------------------------------------------------------------------------


def test_best_is_the_cheapest_under_the_tpot_bound():
    results = [
        res(100, 80, conc=8),  # cheapest, but slow per user
        res(60, 40, conc=4),
        res(30, 20, conc=1),
    ]
    assert report_of(results).best["m"].concurrency == 8
    assert report_of(results, max_tpot_ms=50).best["m"].concurrency == 4
    assert report_of(results, max_tpot_ms=40).best["m"].concurrency == 4  # the bound is inclusive
    assert report_of(results, max_tpot_ms=39.9).best["m"].concurrency == 1


def test_rows_with_failed_requests_are_never_best():
    results = [res(500, 10, conc=8, failed=1), res(50, 30, conc=1)]
    rep = report_of(results)
    assert rep.best["m"].concurrency == 1
    assert "no failed requests" in rep.why["m"]


def test_price_decides_across_flavors():
    results = [res(100, 30, flavor="big", price=2.0), res(60, 30, flavor="small", price=0.9)]
    best = report_of(results).best["m"]
    assert best.flavor == "small"  # 0.9 / 60 < 2.0 / 100


def test_ties_go_to_more_throughput_then_lower_tpot_then_name():
    # the same $ per 1M output tokens: price / tok/s equal
    a = res(50, 40, flavor="a", price=1.0)
    b = res(100, 45, flavor="b", price=2.0)
    assert report_of([a, b]).best["m"].flavor == "b"  # more tok/s
    c = res(100, 30, flavor="c", price=2.0)
    assert report_of([a, b, c]).best["m"].flavor == "c"  # same cost and tok/s: lower TPOT
    d = res(100, 30, flavor="d", price=2.0)
    assert report_of([d, c]).best["m"].flavor == "c"  # everything equal: by name, whatever the order


@pytest.mark.parametrize(
    ("results", "bound", "fragment"),
    [
        ([res(10, 50, failed=2), res(20, 40, conc=4, failed=1)], None, "all 2 measurement(s) had failed requests"),
        ([res(10, 60), res(20, 75, conc=4)], 50, "no configuration has a median TPOT <= 50.0 ms (the lowest: 60.0"),
        ([res(10, 30, price=None)], 50, "no price is known"),
        ([res(10, None)], 50, "no measurement has a median TPOT"),
    ],
)
def test_none_qualifies_and_says_why(results, bound, fragment):
    rep = report_of(results, max_tpot_ms=bound)
    assert rep.best["m"] is None
    assert fragment in rep.why["m"]
    assert f"none: {rep.why['m']}" in rep.markdown()


def test_a_model_whose_cells_all_failed_has_no_best_and_names_them():
    rep = report_of(
        [res(10, 30)],
        [cell("k1"), cell("k2", "failed", model="other", flavor="f2", variant="zen", reason="kv-cache")],
    )
    assert rep.best["other"] is None
    assert rep.why["other"] == "no cell of it was measured: f2 / zen failed"
    assert not rep.partial  # failed is an outcome, not a cell left out
    assert rep.status_line() == "Campaign complete: 1 of 2 cells measured (1 failed)."


def test_bounds_must_be_positive():
    with pytest.raises(UsageError, match="max-tpot-ms"):
        report_of([res(10, 30)], max_tpot_ms=0)
    with pytest.raises(UsageError, match="api-price"):
        report_of([res(10, 30)], api_price=-1)


# --- Pareto -----------------------------------------------------------------------------------------------------


def test_pareto_on_a_hand_made_grid():
    grid = {
        "A": res(100, 50, conc=1),  # 100 tok/s, 20 tok/s per user
        "B": res(80, 25, conc=2),  # 80, 40
        "C": res(90, 40, conc=3),  # 90, 25
        "D": res(70, 30, conc=4),  # 70, 33.3: B has more of both
        "E": res(100, 100, conc=5),  # 100, 10: A has as much throughput and more speed
        "F": res(200, 10, conc=6, failed=1),  # would dominate everything, but requests failed
        "G": res(300, None, conc=7),  # no TPOT: not placeable
    }
    rows = rows_of(list(grid.values()))
    by_conc = {r.concurrency: name for name, r in zip(grid, sorted(rows, key=lambda r: r.concurrency), strict=True)}
    front = pareto(rows)
    assert [by_conc[r.concurrency] for r in front] == ["A", "C", "B"]  # by throughput, highest first


def test_pareto_keeps_equal_points_and_is_per_model():
    rows = rows_of([res(50, 20, conc=1), res(50, 20, flavor="f2"), res(10, 10, model="n")])
    assert len(pareto([r for r in rows if r.model == "m"])) == 2
    rep = report_of([res(50, 20, conc=1), res(500, 5, model="n")])
    assert [r.model for r in rep.front["m"]] == ["m"]  # n's faster, bigger row does not dominate m's


def test_a_bursty_stream_gives_no_per_user_speed():
    # measured in a CI campaign (tiny model, gp.5.4.16): median TPOT 0.003 ms, mean 0.82 ms; the tokens came in bursts
    bursty = res(250, 0.003, conc=1, mean_tpot_ms=0.82)
    steady = res(533, 2.95, conc=2, mean_tpot_ms=3.01)
    slow = res(300, 2.9, conc=4, mean_tpot_ms=3.0)
    rows = {r.concurrency: r for r in rows_of([bursty, steady, slow])}
    assert rows[1].bursty
    assert (rows[1].tpot_ms, rows[1].user_tok_s) == (None, None)  # not 1000 / 0.003 = 333,333 tok/s per user
    assert not rows[2].bursty
    assert rows[2].user_tok_s == pytest.approx(1000 / 2.95)
    assert [r.concurrency for r in pareto(list(rows.values()))] == [2, 4]  # it would have dominated on speed
    assert report_of([bursty, slow], max_tpot_ms=5).best["m"].concurrency == 4  # no TPOT to hold to the bound
    assert report_of([bursty], max_tpot_ms=5).best["m"] is None
    md = report_of([bursty, steady]).markdown()
    assert "| 0.00 (bursts) |" in md
    assert "(bursts): the tokens of a request arrived in a few chunks" in md
    assert "(bursts)" not in report_of([steady]).markdown()


def test_a_stream_whose_tokens_all_came_together_gives_no_per_user_speed():
    # measured in CI12's campaign (tiny model, gp.5.2.8): median 0.003 ms and mean 0.0031 ms: no spread to see
    together = res(397, 0.003, conc=1, mean_tpot_ms=0.0031)
    rows = rows_of([together, res(300, 0.1, conc=2, mean_tpot_ms=0.1)])
    assert rows[0].bursty
    assert (rows[0].tpot_ms, rows[0].user_tok_s) == (None, None)  # not 333,333 tok/s per user
    assert not rows[1].bursty  # 0.1 ms (10,000 tok/s per user) is the floor, not below it


# --- break-even -------------------------------------------------------------------------------------------------


def test_break_even_arithmetic():
    be = break_even(1.0, 1000.0, 0.6)
    assert be is not None
    assert be.monthly_cost == pytest.approx(730.0)
    assert be.tokens_per_month == pytest.approx(1_216_666_666.67)  # 730 / 0.6 x 1e6
    assert be.capacity_per_month == pytest.approx(2_628_000_000)  # 1000 x 3600 x 730
    assert be.utilisation == pytest.approx(0.462963, rel=1e-5)
    assert be.reachable
    slow = break_even(0.5, 62.0, 0.6)  # $2.24 per 1M at full use, above the API's 0.60
    assert slow is not None
    assert not slow.reachable
    assert slow.tokens_per_month == pytest.approx(608_333_333.33)
    assert break_even(None, 10.0, 0.6) is None
    assert HOURS_PER_MONTH == 730


def test_break_even_in_the_report_only_with_an_api_price():
    rep = report_of([res(1000, 30, price=1.0), res(10, 30, conc=4, failed=1)], api_price=0.6)
    md = rep.markdown()
    assert "## Break-even with an API at $0.60 per 1M output tokens" in md
    assert "| m | f1 | v1 | 1 | 730.00 | 1.22 B | 2.63 B | 46% |" in md
    assert "| m | f1 | v1 | 4 |" not in md.split("## Break-even")[1]  # failed rows have no break-even
    assert rep.row_dict(rep.rows[0])["breakeven_utilisation"] == pytest.approx(0.462963, rel=1e-5)
    plain = report_of([res(1000, 30)])
    assert "Break-even" not in plain.markdown()
    assert "breakeven_tokens_per_month" not in plain.row_dict(plain.rows[0])
    never = report_of([res(10, 30, price=1.0)], api_price=0.6).markdown()
    assert "never (costs more than the API at full use)" in never


# --- several instances, comparison, plot ------------------------------------------------------------------------


def test_a_servers_instances_are_summed_into_one_row_with_its_variant():
    meta = {"host": "h1", "run_id": "r1"}
    results = [
        res(40, 30, instance=0, metadata=meta, variant="zen"),
        res(50, 35, instance=1, metadata=meta, variant="zen"),
    ]
    (row,) = report_of(results).rows
    assert row.result.output_tok_s == pytest.approx(90)
    assert row.result.median_tpot_ms == pytest.approx(35)  # the worst instance's
    assert row.variant == "zen"
    assert len(row.runs) == 1


def test_compare_campaigns_pairs_model_flavor_variant_and_concurrency():
    now = report_of([res(110, 30, variant="zen"), res(50, 30, variant="cpu"), res(70, 30, variant="new")])
    then = report_of([res(100, 30, variant="zen"), res(40, 30, variant="cpu"), res(60, 30, variant="gone")])
    comp = compare_campaigns(now, then)
    by_model = {d.model: d for d in comp.deltas}
    assert set(by_model) == {"m (f1, zen)", "m (f1, cpu)"}
    assert by_model["m (f1, zen)"].output_tok_s_pct == pytest.approx(10.0)
    assert by_model["m (f1, cpu)"].output_tok_s_pct == pytest.approx(25.0)
    assert [r.model for r in comp.only_current] == ["m (f1, new)"]
    assert [r.model for r in comp.only_baseline] == ["m (f1, gone)"]
    assert "m (f1, zen)" in lib.comparison_markdown(comp)


def test_plot_pareto_writes_a_png(tmp_path):
    rep = report_of([res(100, 50), res(80, 25, conc=2, price=None), res(90, 40, conc=3, failed=1)])
    path = tmp_path / "pareto.png"
    assert plot_pareto(rep, path) == 2  # the failed row is left out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_pareto_with_nothing_to_plot(tmp_path):
    rep = report_of([res(100, None)])
    with pytest.raises(UsageError, match="nothing to plot"):
        plot_pareto(rep, tmp_path / "p.png")


def test_rows_are_benchresults_that_the_report_library_renders():
    rep = report_of([res(100, 50), replace(res(80, 25), max_concurrency=2)])
    assert "| m | 1 | 100.00 |" in lib.markdown([r.result for r in rep.rows])
