"""What a command says before it spends or stops spending cloud money (zenops.spend), and the one function that
then goes on, asks or refuses (zenops.cli.confirm.agree)."""

from __future__ import annotations

from typing import Any

import pytest

from zenops.cli.confirm import agree
from zenops.cli.context import App
from zenops.cloud.ledger import Deployment
from zenops.config import load
from zenops.errors import ExitCode, UsageError
from zenops.spend import of_campaign, of_surge, of_teardown, of_up


def _dep(**extra: Any) -> Deployment:
    base: dict[str, Any] = {"name": "demo", "cloud": "flex", "flavor": "gp.5.24.96", "image": "debian-12", "count": 1}
    return Deployment(**{**base, "network_mode": "provider", "price_per_hour": 0.79, **extra})


def test_up_says_the_servers_it_creates_per_hour_and_month_and_warns_without_an_expiry():
    s = of_up(_dep(), new_servers=1, new_gateway=False, expiry=None)
    text = "\n".join(s.lines())
    assert "zenops up --cloud will create on cloud flex, deployment demo:" in text
    assert "server gp.5.24.96 ($0.79/h)" in text
    assert "$0.79/h, $576.70/month (730 h) until `zenops down`: no expiry" in text
    assert s.asks
    assert s.question() == "create 1 server(s) ($0.79/h)?"
    warning = s.warning()
    assert warning is not None
    assert "$576.70 a month" in warning
    assert "--ttl" in warning
    assert "defaults.up.ttl" in warning


def test_up_with_an_expiry_says_when_and_does_not_warn():
    s = of_up(_dep(), new_servers=1, new_gateway=False, expiry="in 2h (2026-12-01T12:00:00Z)")
    assert "until it expires in 2h" in s.cost()
    assert s.warning() is None


def test_up_counts_only_what_it_creates_and_the_deployment_cost_with_its_gateway_server():
    dep = _dep(count=3, gateway_flavor="gp.1.2.4", gateway_price_per_hour=0.05)
    s = of_up(dep, new_servers=2, new_gateway=True, expiry=None)  # one server adopted
    lines = s.lines()
    assert "  2 x server gp.5.24.96 ($0.79/h each)" in lines
    assert "  server gp.1.2.4 (the gateway's own, $0.05/h)" in lines
    assert s.per_hour == round(3 * 0.79 + 0.05, 4)  # the whole deployment once created
    assert s.servers == 3
    assert s.cost().startswith("$2.42/h, $1,766.60/month")


def test_up_that_adopts_everything_has_nothing_to_ask():
    s = of_up(_dep(), new_servers=0, new_gateway=False, expiry=None)
    assert not s.asks
    assert s.warning() is not None  # it still runs, billed, without an expiry


def test_an_unknown_price_is_said_not_guessed():
    s = of_up(_dep(price_per_hour=None), new_servers=1, new_gateway=False, expiry=None)
    assert s.per_hour is None
    assert "cost unknown: no price per hour for gp.5.24.96" in s.cost()


def test_down_lists_what_it_deletes_and_what_that_stops():
    plan = [
        {"kind": "server", "name": "zenops-demo-1", "deployment": "demo"},
        {"kind": "network", "name": "zenops-demo", "deployment": "demo"},
        {"kind": "server", "name": "zenops-other-1", "deployment": "other"},  # another controller's: no price
    ]
    s = of_teardown("zenops down", "flex", plan, [_dep()])
    lines = s.lines()
    assert lines[0] == "zenops down will delete on cloud flex:"
    assert "  server zenops-demo-1 (deployment demo)" in lines
    assert "  network zenops-demo (deployment demo)" in lines
    assert s.per_hour == 0.79
    assert s.unpriced == ("other",)
    assert "stops $0.79/h, $576.70/month (730 h) and what other cost (no price known)" in s.cost()
    assert s.summary() == "2 server(s) and 1 other resource(s)"
    assert s.question() == "delete 2 server(s) and 1 other resource(s) ($0.79/h)?"


def test_down_of_leftovers_without_a_server_says_nothing_hourly_stops():
    s = of_teardown("zenops down", "flex", [{"kind": "network", "name": "n", "deployment": "demo"}], [_dep()])
    assert s.cost() == "no server among them: nothing billed by the hour stops"


def test_campaign_says_its_projected_total_against_its_cap_and_the_servers_up_at_once():
    groups = [("gp.5.2.8", 1.0), ("gp.5.4.16", 2.0), ("gp.5.8.32", 4.0)]
    s = of_campaign("sandbox", groups, parallel=2, projected_usd=1.1427, cap_usd=5.0, ttl="2h")
    cost = s.cost()
    assert "projected $1.14 in all, budget.max_usd $5.00" in cost
    assert "at most $6.00/h, $4,380.00/month while its servers are up" in cost  # the 2 dearest at once
    assert "every server expires after 2h" in cost
    assert s.question() == "create 3 server(s) (projected $1.14)?"
    no_cap = of_campaign("sandbox", groups[:1], parallel=1, projected_usd=0.5, cap_usd=None, ttl="4h")
    assert "no budget cap (budget.max_usd)" in no_cap.cost()
    assert "at most $1.00/h, $730.00/month" in no_cap.cost()


def test_a_surge_costs_one_more_server_while_both_run():
    s = of_surge(_dep(price_per_hour=0.1))
    assert s.summary() == "1 server(s)"
    assert "$0.10/h, $73.00/month (730 h) more while both servers run" in s.cost()
    assert s.warning() is None


@pytest.fixture
def app() -> App:
    return App(config=load())


def test_agree_without_a_terminal_refuses_with_exit_2_naming_yes(app, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    spend = of_up(_dep(), new_servers=1, new_gateway=False, expiry=None)
    with pytest.raises(UsageError) as e:
        agree(app, spend, yes=False)
    assert e.value.exit_code == ExitCode.USAGE
    assert "would create 1 server(s)" in e.value.message
    assert "$576.70/month" in e.value.message
    assert "--yes" in (e.value.hint or "")


def test_agree_goes_on_with_yes_a_dry_run_or_nothing_to_agree_to(app, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    monkeypatch.setattr("click.confirm", lambda *a, **k: pytest.fail("asked"))
    spend = of_up(_dep(), new_servers=1, new_gateway=False, expiry=None)
    assert agree(app, spend, yes=True)
    assert agree(app, spend, yes=False, dry_run=True)
    assert agree(app, of_up(_dep(), new_servers=0, new_gateway=False, expiry=None), yes=False)


def test_agree_with_json_never_asks_even_on_a_terminal(app, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("click.confirm", lambda *a, **k: pytest.fail("asked"))
    app.json = True
    with pytest.raises(UsageError, match="--json does not ask"):
        agree(app, of_surge(_dep()), yes=False)


@pytest.mark.parametrize("answer", [True, False])
def test_agree_on_a_terminal_asks_default_no_and_returns_the_answer(app, monkeypatch, answer):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    asked: list[tuple[str, object]] = []

    def confirm(text: str, default: object = None, **_k: object) -> bool:
        asked.append((text, default))
        return answer

    monkeypatch.setattr("click.confirm", confirm)
    assert agree(app, of_surge(_dep()), yes=False) is answer
    assert asked == [("create 1 server(s) ($0.79/h)?", False)]
