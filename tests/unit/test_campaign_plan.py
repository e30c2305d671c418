"""Campaign cells, keys, cost projection and budget arithmetic (zenops.campaign.plan), and the state's cost counting
and ids (zenops.campaign.state): pure, with hand-computed figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from zenops.campaign import plan as plan_lib
from zenops.campaign.spec import BenchSpec, Budget, CampaignSpec, Variant
from zenops.campaign.state import CampaignState, ServerState, Store, deployment_name, new_id
from zenops.cloud.marks import check_name
from zenops.config import Config
from zenops.errors import ExitCode, OverBudgetError


def make_spec(**kw) -> CampaignSpec:
    base: dict = {
        "name": "sweep",
        "path": Path("/tmp/sweep.yaml"),
        "cloud": "sandbox",
        "inventory": None,
        "flavors": ("f.small", "f.big"),
        "models": ("/m/tiny-a", "Qwen/Qwen3-0.6B"),
        "variants": (Variant("zen", {"platform": "zen"}), Variant("cpu", {"platform": "cpu"})),
        "engine": {"image_source": "pip"},
        "bench": BenchSpec(concurrency=(1, 4), input_len=128, output_len=64, prompts=16, repeats=1),
        "budget": Budget(max_usd=None, ttl_s=7200),
        "prices": {},
        "parallel": 1,
    }
    base.update(kw)
    return CampaignSpec(**base)


PRICES = {"f.small": 0.5, "f.big": 2.0}


def test_cells_are_the_full_matrix_grouped_by_flavor_in_file_order():
    cells = plan_lib.cells(make_spec())
    assert len(cells) == 2 * 2 * 2
    assert [c.group for c in cells] == ["f.small"] * 4 + ["f.big"] * 4
    assert [(c.model_name, c.variant) for c in cells[:4]] == [
        ("tiny-a", "zen"), ("tiny-a", "cpu"), ("Qwen/Qwen3-0.6B", "zen"), ("Qwen/Qwen3-0.6B", "cpu"),
    ]  # fmt: skip
    assert cells[0].request == {"image_source": "pip", "platform": "zen", "model": "/m/tiny-a"}
    assert len({c.key for c in cells}) == 8


def test_a_variant_option_wins_over_the_engine_default():
    spec = make_spec(engine={"image_source": "pip", "platform": "cpu"}, variants=(Variant("zen", {"platform": "zen"}),))
    assert {c.request["platform"] for c in plan_lib.cells(spec)} == {"zen"}


def test_keys_are_stable_and_change_with_any_parameter():
    a = plan_lib.cells(make_spec(), "pair-1")
    assert [c.key for c in a] == [c.key for c in plan_lib.cells(make_spec(), "pair-1")]
    other_pair = plan_lib.cells(make_spec(), "pair-2")
    assert not {c.key for c in a} & {c.key for c in other_pair}
    longer = plan_lib.cells(make_spec(bench=BenchSpec(concurrency=(1, 4), output_len=128)), "pair-1")
    assert not {c.key for c in a} & {c.key for c in longer}
    # a cell that stays the same keeps its key when the matrix grows (a resumed campaign keeps its results)
    grown = plan_lib.cells(make_spec(flavors=("f.small", "f.big", "f.huge")), "pair-1")
    assert {c.key for c in a} <= {c.key for c in grown}


def test_inventory_campaign_has_one_group_named_after_the_inventory():
    spec = make_spec(cloud=None, flavors=(), inventory=Path("/x/lab.yml"))
    cells = plan_lib.cells(spec)
    assert {c.group for c in cells} == {"lab"}
    assert {c.flavor for c in cells} == {None}


def test_bench_seconds_hand_computed():
    b = BenchSpec(concurrency=(1, 4), output_len=64, prompts=16, repeats=2)
    # per level: 16 x 64 / 20 tok/s = 51.2 s + 30 s overhead; 2 levels x 2 repeats
    assert plan_lib.bench_seconds(b) == pytest.approx((51.2 + 30) * 4)


def test_projection_hand_computed_with_estimates():
    spec = make_spec()
    proj = plan_lib.project(spec, plan_lib.cells(spec), PRICES.get)
    bench = plan_lib.bench_seconds(spec.bench)
    # a group: provision 300 + first cell (600 + bench) + 3 cells (240 + bench) + teardown 60
    seconds = 300 + 600 + bench + 3 * (240 + bench) + 60
    assert [g.group for g in proj.groups] == ["f.small", "f.big"]
    assert proj.groups[0].hours == pytest.approx(seconds / 3600)
    assert proj.usd == pytest.approx(seconds / 3600 * (0.5 + 2.0))
    assert proj.unknown_prices == []


def test_prices_in_the_file_win_and_unknown_prices_are_listed_and_counted_zero():
    spec = make_spec(prices={"f.small": 1.0})
    proj = plan_lib.project(spec, plan_lib.cells(spec), lambda _f: None)
    assert proj.groups[0].price_per_hour == 1.0
    assert proj.groups[1].usd is None
    assert proj.unknown_prices == ["f.big"]
    assert proj.usd == pytest.approx(proj.groups[0].hours * 1.0)


def test_measured_durations_replace_the_estimates_slowest_sample_counts():
    d = plan_lib.Durations.from_measurements({"serve_s": [100, 130], "bench_s": [50], "provision_s": []})
    assert (d.serve_s, d.bench_s, d.provision_s) == (130, 50, plan_lib.PROVISION_S)
    assert d.measured == ("bench_s", "serve_s")
    assert d.cell_s(BenchSpec(), first=False) == 180


def test_a_started_group_pays_no_provisioning_again():
    spec = make_spec(flavors=("f.small",))
    todo = plan_lib.cells(spec)[2:]  # two cells left on a server that is up
    fresh = plan_lib.project(spec, todo, PRICES.get)
    resumed = plan_lib.project(spec, todo, PRICES.get, started_groups=frozenset({"f.small"}))
    saved = (plan_lib.PROVISION_S + plan_lib.FIRST_SERVE_S - plan_lib.SERVE_S) / 3600 * 0.5
    assert fresh.usd - resumed.usd == pytest.approx(saved)


def test_over_budget_is_refused_with_exit_17_naming_the_figures():
    spec = make_spec()
    proj = plan_lib.project(spec, plan_lib.cells(spec), PRICES.get, spent_usd=0.25)
    plan_lib.check_budget(proj, None)
    plan_lib.check_budget(proj, proj.usd)  # exactly at the cap is allowed
    with pytest.raises(OverBudgetError) as e:
        plan_lib.check_budget(proj, 1.0)
    assert e.value.exit_code == ExitCode.OVER_BUDGET == 17
    assert f"${proj.usd:.2f}" in e.value.message
    assert "$1.00" in e.value.message
    assert "spent so far $0.25" in e.value.message
    assert "f.big" in e.value.message  # the most expensive group
    assert "budget.max_usd" in (e.value.hint or "")


def test_affordable():
    assert plan_lib.affordable(1.0, 2.0, None)
    assert plan_lib.affordable(1.0, 2.0, 3.0)
    assert not plan_lib.affordable(1.0, 2.01, 3.0)


# --- state ------------------------------------------------------------------------------------------------------


def test_server_cost_runs_from_creation_to_confirmed_deletion():
    t0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    s = ServerState("d", "f.big", "sandbox", "f.big", 2.0, created_at=t0.isoformat())
    assert s.cost(t0 + timedelta(minutes=30)) == pytest.approx(1.0)  # still running: counted up to now
    s.deleted_at = (t0 + timedelta(minutes=90)).isoformat()
    assert s.cost(t0 + timedelta(days=3)) == pytest.approx(3.0)  # deleted: no longer grows
    unknown = ServerState("d2", "g", "sandbox", "g", None, created_at=t0.isoformat())
    assert unknown.cost(t0 + timedelta(hours=5)) == 0.0


def test_ids_and_deployment_names_follow_the_naming_rules():
    now = datetime(2026, 11, 24, 13, 5, tzinfo=UTC)
    assert new_id("sweep", [], now) == "sweep-2611241305"
    assert new_id("sweep", ["sweep-2611241305"], now) == "sweep-2611241305-2"
    long = new_id("a-very-long-campaign-name-indeed", [], now)
    check_name(long, "campaign")
    names = {deployment_name(long, g) for g in ("gp.5.24.96", "gp.5.48.192", "x" * 40)}
    assert len(names) == 3
    for n in names:
        check_name(n)


def test_store_round_trip_and_resumable(tmp_path):
    store = Store(Config(state_dir=tmp_path))
    s = CampaignState(
        id="sweep-1", name="sweep", spec_path="/f", spec_digest="d", created_at="2026-01-01T00:00:00+00:00"
    )
    s.servers["d"] = ServerState("d", "g", "sandbox", "g", 1.0, created_at="2026-01-01T00:00:00+00:00")
    store.save(s)
    back = store.load("sweep-1")
    assert back == s
    assert store.resumable("sweep") == s
    s.status = "done"
    store.save(s)
    assert store.resumable("sweep") is None
    s.status = "over-budget"  # raise the budget and run again: it continues
    store.save(s)
    assert store.resumable("sweep").id == "sweep-1"
    assert store.resumable("other") is None


def test_engine_args_of_the_engine_and_of_a_variant_add_up():
    spec = make_spec(
        engine={"image_source": "pip", "engine_args": ("--enforce-eager",)},
        variants=(Variant("pc", {"engine_args": ("--enable-prefix-caching",)}), Variant("plain", {})),
    )
    by_variant = {c.variant: c.request.get("engine_args") for c in plan_lib.cells(spec)}
    assert by_variant == {"pc": ("--enforce-eager", "--enable-prefix-caching"), "plain": ("--enforce-eager",)}


def test_fitting_parallel_keeps_the_biggest_servers_inside_the_quota():
    from zenops.cloud.preflight import Limits  # noqa: PLC0415

    sizes = [(2, 8192), (4, 16384), (8, 32768)]
    roomy = Limits(max_cores=100, cores_used=0, max_ram_mib=10**6, ram_used_mib=0, max_instances=10, instances_used=0)
    assert plan_lib.fitting_parallel(3, sizes, roomy) == 3
    assert plan_lib.fitting_parallel(2, sizes, roomy) == 2  # never above what was asked
    # 12 cores free: the two biggest (8 + 4) fit, all three (14) do not
    tight = Limits(max_cores=20, cores_used=8, max_ram_mib=10**6, ram_used_mib=0, max_instances=10, instances_used=0)
    assert plan_lib.fitting_parallel(3, sizes, tight) == 2
    # RAM: 40000 MiB free holds 32768 + ... only the biggest alone
    ram = Limits(max_cores=100, cores_used=0, max_ram_mib=40000, ram_used_mib=0, max_instances=10, instances_used=0)
    assert plan_lib.fitting_parallel(3, sizes, ram) == 1
    # instances: one slot left
    one = Limits(max_cores=100, cores_used=0, max_ram_mib=10**6, ram_used_mib=0, max_instances=5, instances_used=4)
    assert plan_lib.fitting_parallel(3, sizes, one) == 1
    # not even the biggest fits: 0 (its own preflight names the limit)
    none = Limits(max_cores=4, cores_used=0, max_ram_mib=10**6, ram_used_mib=0, max_instances=10, instances_used=0)
    assert plan_lib.fitting_parallel(3, sizes, none) == 0


# --- a new campaign projected from what earlier ones measured here ---------------------------------------------


def test_durations_from_earlier_campaigns_are_the_median_and_say_whose():
    d = plan_lib.Durations.from_history(
        [("c-2", {"provision_s": [100.0, 120.0], "bench_s": [30.0]}), ("c-1", {"provision_s": [200.0]}), ("c-0", {})]
    )
    assert d.provision_s == 120.0  # the median of 100, 120 and 200: neither the slowest nor the fastest
    assert d.bench_s == 30.0
    assert d.serve_s == plan_lib.SERVE_S  # measured by none: the estimate
    assert d.measured == ("bench_s", "provision_s")
    assert d.source == "c-2, c-1"  # c-0 measured nothing
    spec = make_spec()
    cells = plan_lib.cells(spec)
    assert plan_lib.project(spec, cells, PRICES.get, d).usd < plan_lib.project(spec, cells, PRICES.get).usd
    assert plan_lib.project(spec, cells, PRICES.get, d).to_dict()["durations_from"] == "c-2, c-1"
    assert plan_lib.project(spec, cells, PRICES.get).to_dict()["durations_from"] == "estimates"


def test_only_earlier_campaigns_of_the_same_flavors_and_image_route_count():
    from zenops.campaign.planned import earlier_measurements  # noqa: PLC0415
    from zenops.campaign.state import CellState  # noqa: PLC0415

    store = Store(Config())
    spec = make_spec(engine={"image_source": "pip"})
    cells = plan_lib.cells(spec)

    def earlier(cid: str, group: str, route: str, samples: dict) -> None:
        state = CampaignState(cid, cid, "/x.yaml", "d", "2026-11-21T12:00:00+00:00", status="done")
        state.cells["k"] = CellState("k", group, "/m/tiny-a", "zen", status="done")
        state.engine, state.samples = {"image_source": route}, samples
        store.save(state)

    earlier("a-1", "f.small", "pip", {"provision_s": [90.0]})
    earlier("b-1", "f.other", "pip", {"provision_s": [900.0]})  # another flavor
    earlier("c-1", "f.big", "build", {"provision_s": [800.0]})  # another image route
    earlier("d-1", "f.big", "pip", {})  # measured nothing
    earlier("e-1", "f.big", "pip", {"provision_s": [110.0]})
    assert [cid for cid, _ in earlier_measurements(store, spec, cells, "pip")] == ["e-1", "a-1"]
