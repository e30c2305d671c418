"""`zenops campaign` through the CLI without any cloud or Ansible run: plan (exit 17 over budget, nothing recorded),
status, report (+ the tuned file) over a campaign state written into the test's own state dir, pointing at the
hand-made bench runs of tests/fixtures/campaign."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zenops.campaign.state import CampaignState, CellState, ServerState, Store
from zenops.campaign.tuned import load_tuned
from zenops.cli.main import main
from zenops.config import load
from zenops.errors import ExitCode, HostFailure, RunFailedError
from zenops.tinymodel import generate

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "campaign" / "bench"


def result_of(output: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith("{") and json.loads(line).get("type") == "result":
            return json.loads(line)
    raise AssertionError(f"no JSON result in:\n{output}")


@pytest.fixture
def campaign_file(tmp_path: Path) -> Path:
    generate(tmp_path / "tiny-a", seed=0)
    f = tmp_path / "sweep.yaml"
    f.write_text(
        "name: sweep\ncloud: sandbox\nflavors: [gp.5.2.8, gp.5.4.16]\nmodels: [./tiny-a]\n"
        "variants: {a: {max_num_seqs: 2}, b: {max_num_seqs: 4}}\nengine: {image_source: pip}\n"
        "bench: {concurrency: [1, 4], prompts: 8, output_len: 32}\nbudget: {max_usd: 0.01}\n"
        "prices: {gp.5.2.8: 1.0, gp.5.4.16: 2.0}\n"
    )
    return f


def test_plan_over_budget_exits_17_and_records_nothing(run, campaign_file):
    r = run(["--json", "campaign", "plan", str(campaign_file)])
    assert r.exit_code == ExitCode.OVER_BUDGET, r.output
    data = result_of(r.output)
    assert len(data["cells"]) == 4
    assert {c["status"] for c in data["cells"]} == {"pending"}
    assert data["projection"]["projected_usd"] > 0.01
    assert "over budget.max_usd $0.01" in r.output
    assert Store(load()).all() == []


def test_plan_within_budget_exits_0_and_run_refuses_before_creating_anything(run, campaign_file):
    campaign_file.write_text(campaign_file.read_text().replace("max_usd: 0.01", "max_usd: 1000"))
    r = run(["campaign", "plan", str(campaign_file)])
    assert r.exit_code == 0, r.output
    assert "4 cell(s), 4 to run" in r.output
    assert "group gp.5.4.16: 2 cell(s)" in r.output
    # dollars as every command writes them (zenops.spend): $2.00/h, not $2.0/h; $1,000.00
    assert " at $2.00/h: $" in r.output
    assert "of budget $1,000.00" in r.output
    campaign_file.write_text(campaign_file.read_text().replace("max_usd: 1000", "max_usd: 0.01"))
    r = run(["campaign", "run", str(campaign_file)])
    assert r.exit_code == ExitCode.OVER_BUDGET, r.output
    assert Store(load()).all() == []  # nothing started, nothing recorded, nothing to tear down


def test_campaign_plan_prints_its_table_on_stdout(campaign_file, capsys, monkeypatch):
    """The cells and the projection are `campaign plan`'s answer: stdout, so `> plan.txt` and a pipe keep them."""
    monkeypatch.setenv("COLUMNS", "200")
    campaign_file.write_text(campaign_file.read_text().replace("max_usd: 0.01", "max_usd: 1000"))
    with pytest.raises(SystemExit) as info:
        main(["campaign", "plan", str(campaign_file)])
    assert info.value.code == 0
    captured = capsys.readouterr()
    assert "4 cell(s), 4 to run" in captured.out
    assert "group gp.5.4.16: 2 cell(s)" in captured.out
    assert "projected $" in captured.out
    assert "cell(s)" not in captured.err


def test_a_bad_file_names_the_key_and_exits_3(run, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: sweep\ncloud: sandbox\nflavors: [gp.5.2.8]\nmodels: [Qwen/Qwen3-0.6B]\nbudgett: {}\n")
    r = run(["campaign", "plan", str(f)])
    assert r.exit_code == ExitCode.CONFIG, r.output
    assert "budgett" in r.output
    assert "budget" in r.output


def fixture_campaign() -> CampaignState:
    """The state a campaign leaves: cells aaaa (variant zen, two repeats) and bbbb (cpu) done, one failed."""
    state = CampaignState(
        id="demo-2611211200", name="demo", spec_path="/x/demo.yaml", spec_digest="d",
        created_at="2026-11-21T12:00:00+00:00", status="partial", max_usd=5.0,
        variants={"zen": {"platform": "zen"}, "cpu": {"platform": "cpu"}, "big": {"max_num_seqs": 64}},
        engine={"image_source": "pip"},
    )  # fmt: skip
    runs = {"aaaaaaaaaaaa": ["aaaaaaaaaaaa-r1", "aaaaaaaaaaaa-r2"], "bbbbbbbbbbbb": ["bbbbbbbbbbbb-r1"]}
    for key, variant in (("aaaaaaaaaaaa", "zen"), ("bbbbbbbbbbbb", "cpu")):
        state.cells[key] = CellState(
            key, "gp.small", "/models/tiny-a", variant, status="done", run_dirs=[str(BENCH / d) for d in runs[key]]
        )
    state.cells["cccccccccccc"] = CellState(
        "cccccccccccc", "gp.small", "/models/tiny-a", "big", status="failed", failure="kv-cache",
        reason="To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is needed",
    )  # fmt: skip
    state.servers["demo-gp-small-1a2b"] = ServerState(
        "demo-gp-small-1a2b", "gp.small", "sandbox", "gp.small", 0.5,
        created_at="2026-11-21T12:00:00+00:00", deleted_at="2026-11-21T12:30:00+00:00",
    )  # fmt: skip
    Store(load()).save(state)
    return state


def test_status_shows_cells_reasons_and_spend(run):
    state = fixture_campaign()
    r = run(["--json", "campaign", "status", state.id])
    assert r.exit_code == 0, r.output
    data = result_of(r.output)
    assert data["cells"] == {"done": 2, "failed": 1}
    assert data["spent_usd"] == pytest.approx(0.25)  # 30 min at $0.50/h, deleted: no longer grows
    assert data["servers_running"] == []
    r = run(["campaign", "status"])
    assert state.id in r.output
    assert "partial" in r.output


def test_a_failed_cell_keeps_its_cause_in_status_and_report(run, tmp_path):
    """The cause of a failed run (the task and its message, as `up` prints them) is in `campaign status` and the
    report, not only in the live log: here the base image a pip build could not pull on an offline machine."""
    state = fixture_campaign()
    cause = "failed to resolve source metadata for docker.io/library/debian:bookworm-slim: dial tcp: lookup failed"
    error = RunFailedError(
        "serve.yml", [HostFailure("demo-gp-small-1a2b-1", "Build the engine image (pip)", cause)], rc=2
    )
    state.cells["cccccccccccc"].failure = "run-failed"
    state.cells["cccccccccccc"].reason = error.message[:2000]  # what the run records (campaign.run._fail_cells)
    Store(load()).save(state)
    r = run(["campaign", "status", state.id])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "cccccccccccc" in x)
    assert "Build the engine image (pip)" in line
    assert "debian:bookworm-slim" in line
    out = tmp_path / "report"
    r = run(["campaign", "report", state.id, "--out", str(out)])
    assert r.exit_code == 0, r.output
    row = next(
        x for x in (out / "report.md").read_text().splitlines() if x.startswith("| gp.small") and "| failed |" in x
    )
    assert "Build the engine image (pip)" in row
    assert "debian:bookworm-slim" in row


def test_report_names_the_best_per_model_lists_the_failed_cell_and_writes_a_tuned_file(run, tmp_path):
    state = fixture_campaign()
    tuned = tmp_path / "tuned.yaml"
    out = tmp_path / "report"
    r = run(["--json", "campaign", "report", state.id, "--tuned", str(tuned), "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = result_of(r.output)
    assert data["campaign"] == state.id
    assert {row["variant"] for row in data["rows"]} == {"zen", "cpu"}
    best = data["best"]["/models/tiny-a"]
    assert best is not None
    assert best["variant"] in ("zen", "cpu")
    assert [c["key"] for c in data["not_measured"]] == ["cccccccccccc"]
    configs = load_tuned(tuned)
    assert configs["/models/tiny-a"].campaign == state.id
    assert configs["/models/tiny-a"].options["platform"] == best["variant"]  # zen or cpu: the variant's options
    assert configs["/models/tiny-a"].options["image_source"] == "pip"  # and the engine's
    assert {p.name for p in out.iterdir()} == {"report.md", "report.csv", "report.json", "pareto.png"}
    assert "kv-cache" in (out / "report.md").read_text() or "KV cache" in (out / "report.md").read_text()


def test_report_of_an_unknown_campaign_names_the_known_ones(run):
    state = fixture_campaign()
    r = run(["campaign", "report", "nope-1"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "no campaign 'nope-1'" in r.output
    assert state.id in r.output


def test_example_is_a_valid_campaign_file(run, tmp_path):
    from zenops.campaign.spec import load_spec  # noqa: PLC0415

    r = run(["campaign", "example"])
    assert r.exit_code == 0
    f = tmp_path / "example.yaml"
    f.write_text(r.output)
    spec = load_spec(f)
    assert spec.name == "sweep"
    assert spec.budget.max_usd == 5.0
    # the repository's copy (README's example file) is the same text: regenerate it with
    # `zenops campaign example > inventories/examples/campaign.yml`
    assert (Path(__file__).resolve().parents[2] / "inventories" / "examples" / "campaign.yml").read_text() == r.output


def test_run_within_budget_starts_over_the_projection_and_skips_what_the_budget_cannot_cover(run, campaign_file):
    # $0.01 covers no group's server (the estimates: minutes at $1/h and $2/h): every cell is skipped before any
    # server is asked for, the campaign is recorded as stopped at its budget, exit 17
    r = run(["--json", "campaign", "run", str(campaign_file), "--within-budget", "--yes"])
    assert r.exit_code == ExitCode.OVER_BUDGET, r.output
    assert "--within-budget runs the cells the budget covers" in r.output
    assert "stopped at its budget: 0 cell(s) done, 4 skipped" in r.output
    [state] = Store(load()).all()
    assert state.status == "over-budget"
    assert {c.status for c in state.cells.values()} == {"skipped"}
    assert all(c.reason and c.reason.startswith("budget: $0.00 spent of $0.01") for c in state.cells.values())
    assert state.servers == {}  # nothing was created
