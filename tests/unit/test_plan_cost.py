"""What a plan costs (zenops.planner.plan_cost over zenops.cost): $/h, $/month and $ per 1M output tokens at the
plan's decode ceiling, the ceiling being its instances' summed."""

from __future__ import annotations

import pytest

from tests.unit.test_planner import fixture
from zenops import catalog
from zenops.cost import HOURS_PER_MONTH, cost_per_million, cost_per_month
from zenops.planner import Topology, plan, plan_cost


def test_the_formulas():
    assert HOURS_PER_MONTH == 730
    assert cost_per_month(0.79) == pytest.approx(576.70)
    assert cost_per_month(None) is None
    # 1 $/h serving 1000 tok/s: 3.6M tokens an hour -> $0.2778 per 1M
    assert cost_per_million(1.0, 1000.0) == pytest.approx(0.27778, rel=1e-4)
    assert cost_per_million(1.0, 0.0) is None
    assert cost_per_million(None, 10.0) is None


def test_a_two_instance_plan_is_priced_at_the_sum_of_its_ceilings():
    p = plan(Topology.from_facts(fixture("epyc-7763-2s")), catalog.get_model("Qwen/Qwen3-4B"))
    ceilings = [i.roofline["ceiling_tok_s"] for i in p.instances if i.roofline]
    assert len(ceilings) == 2
    cost = plan_cost(p, 2.0)
    assert cost is not None
    assert cost.per_hour == 2.0
    assert cost.per_month == pytest.approx(1460.0)
    assert cost.ceiling_tok_s == pytest.approx(sum(ceilings), abs=0.01)
    assert cost.per_million_tokens == pytest.approx(2.0 / (cost.ceiling_tok_s * 3600) * 1e6)
    assert cost.theoretical  # the catalogue's figures: no bandwidth measured in this fixture
    d = cost.to_dict()
    assert d["per_month"] == 1460.0
    assert d["hours_per_month"] == 730


def test_no_price_no_cost_and_no_ceiling_no_token_price():
    p = plan(Topology.from_facts(fixture("zen4-vm-hotplug")), catalog.get_model("Qwen/Qwen3-0.6B"))
    assert plan_cost(p, None) is None
    assert all(i.roofline is None for i in p.instances)  # a CPU the catalogue does not know, nothing measured
    cost = plan_cost(p, 0.1)
    assert cost is not None
    assert cost.per_month == pytest.approx(73.0)
    assert cost.ceiling_tok_s is None
    assert cost.per_million_tokens is None
