"""zenops.scaling.replicas: `--replicas MIN..MAX` and the price cap that bounds MAX."""

from __future__ import annotations

import pytest

from zenops import option_table
from zenops.errors import ExitCode, UsageError
from zenops.scaling import replicas
from zenops.scaling.replicas import Replicas


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("3", 3, 3), (3, 3, 3), ("1..4", 1, 4), (" 2 .. 5 ", 2, 5), ("2..2", 2, 2), ("1..100", 1, 100)],
)
def test_parse_reads_a_count_or_a_range(text: str | int, low: int, high: int) -> None:
    got = replicas.parse(text)
    assert (got.min, got.max) == (low, high)
    assert got.fixed is (low == high)


def test_a_fixed_count_and_a_range_read_back_as_written() -> None:
    assert str(Replicas(2, 2)) == "2"
    assert str(Replicas(1, 4)) == "1..4"


@pytest.mark.parametrize(
    ("text", "said", "fix"),
    [
        ("", "not a replica count or range", "1..4"),
        ("two", "not a replica count or range", "1..4"),
        ("1-4", "not a replica count or range", "MIN..MAX"),
        ("1..", "not a replica count or range", "1..4"),
        ("-1..3", "not a replica count or range", "1..4"),
        ("1.5", "not a replica count or range", "1..4"),
        ("0", "MIN is 0", "--replicas 1..1"),
        ("0..3", "MIN is 0", "--replicas 1..3"),
        ("5..2", "MAX 2 is below MIN 5", "--replicas 2..5"),
        ("1..101", "MAX 101 is over 100", "MAX <= 100"),
    ],
)
def test_parse_refuses_naming_the_fix(text: str, said: str, fix: str) -> None:
    with pytest.raises(UsageError) as err:
        replicas.parse(text)
    assert said in err.value.message
    assert "--replicas" in err.value.message
    assert fix in str(err.value.hint)
    assert err.value.exit_code == ExitCode.USAGE


def test_parse_names_the_flag_it_was_given() -> None:
    with pytest.raises(UsageError, match="--fleet 'x'"):
        replicas.parse("x", flag="--fleet")


def test_most_replicas_is_up_count_maximum() -> None:
    assert replicas.most_replicas() == option_table.row("count").maximum


def _cap(r: Replicas, cap: float | None, **kw: object) -> replicas.Capped:
    args: dict[str, object] = {"flavor": "c8", "price_per_hour": 0.5, **kw}
    return replicas.cap(r, cap, **args)  # type: ignore[arg-type]


def test_no_cap_keeps_max() -> None:
    got = _cap(Replicas(1, 6), None, price_per_hour=None)
    assert got.replicas == Replicas(1, 6)
    assert got.note == ""


def test_the_cap_lowers_max_to_what_it_pays_for() -> None:
    got = _cap(Replicas(1, 6), 2.2)  # 4 x $0.50 = $2.00 <= $2.20 < 5 x $0.50
    assert got.replicas == Replicas(1, 4)
    assert got.asked_max == 6
    assert got.note == "MAX 6 lowered to 4: --max-price-per-hour $2.20/h pays for 4 x $0.50/h (c8) = $2.00/h"


def test_the_cap_counts_the_gateway_own_server() -> None:
    got = _cap(Replicas(1, 6), 2.2, gateway_flavor="g2", gateway_price_per_hour=0.4)
    assert got.replicas == Replicas(1, 3)  # $2.20 - $0.40 = $1.80: 3 x $0.50
    assert "+ $0.40/h (the gateway's own g2) = $1.90/h" in got.note


def test_a_cap_exactly_at_a_multiple_pays_for_it() -> None:
    # 3 x 0.1 is 0.30000000000000004 in binary: a $0.30 cap still pays for 3
    assert _cap(Replicas(1, 5), 0.3, price_per_hour=0.1).replicas.max == 3


def test_a_cap_above_max_changes_nothing() -> None:
    got = _cap(Replicas(2, 3), 100.0)
    assert got.replicas == Replicas(2, 3)
    assert got.note == ""


def test_a_cap_that_pays_exactly_for_max_changes_nothing() -> None:
    assert _cap(Replicas(2, 3), 1.5).replicas == Replicas(2, 3)


def test_a_cap_below_min_is_refused_with_the_figures() -> None:
    with pytest.raises(UsageError) as err:
        _cap(Replicas(3, 6), 1.0, gateway_flavor="g2", gateway_price_per_hour=0.25)
    assert err.value.message == (
        "--max-price-per-hour $1.00/h is below what MIN costs: 3 x $0.50/h (c8) + $0.25/h (the gateway's own g2) "
        "= $1.75/h"
    )
    assert err.value.hint == "raise --max-price-per-hour to at least $1.75/h, or lower MIN of --replicas 3..6"


def test_a_cap_exactly_at_min_cost_is_taken() -> None:
    assert _cap(Replicas(2, 6), 1.0).replicas == Replicas(2, 2)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_cap_must_be_a_positive_price(bad: float) -> None:
    with pytest.raises(UsageError, match="a price cap is a positive"):
        _cap(Replicas(1, 2), bad)


def test_a_cap_without_a_price_is_refused_naming_the_flavor() -> None:
    with pytest.raises(UsageError) as err:
        _cap(Replicas(1, 2), 3.0, price_per_hour=None, gateway_flavor="g2", gateway_price_per_hour=None)
    assert "needs the price of c8 and g2" in err.value.message
    assert "price_per_hour" in str(err.value.hint)


def test_free_servers_are_not_bounded_by_a_cap() -> None:
    assert _cap(Replicas(1, 8), 0.5, price_per_hour=0.0).replicas == Replicas(1, 8)
