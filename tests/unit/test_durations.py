"""zenops.durations, the one duration grammar (--ttl, budget.ttl, every timeout option and key): what it reads and
what it refuses. Each caller's own wrapping of the refusal (a click BadParameter naming the flag, a config problem
naming the key) is tested with that caller (test_reap, test_campaign_spec, test_cli_keeps_its_word)."""

from __future__ import annotations

import pytest

from zenops import durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1),
        ("90s", 90),
        ("30m", 1800),
        ("90m", 5400),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("2w", 14 * 86400),
        ("1h30m", 5400),
        (" 2H ", 7200),
        ("45", 45),
        ("7200", 7200),
        ("7200s", 7200),
        (600, 600),
    ],  # a bare number (or a YAML int) is seconds
)
def test_the_grammar(text, seconds):
    assert durations.parse(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "abc", "2 hours", "90 min", "1.5h", "-1h", "2h-", "1y", True, None, 1.5])
def test_what_is_no_duration_is_refused_showing_the_grammar(text):
    with pytest.raises(ValueError, match="not a duration") as info:
        durations.parse(text)
    assert durations.EXAMPLES in str(info.value)


@pytest.mark.parametrize(
    ("text", "said"), [("0s", "is zero"), ("0m", "is zero"), (0, "is zero"), (-5, "is negative"), ("3651d", "ten")]
)
def test_zero_and_over_ten_years_are_refused(text, said):
    with pytest.raises(ValueError, match=said):
        durations.parse(text)


def test_a_minimum():
    assert durations.parse("10s", minimum=10) == 10
    with pytest.raises(ValueError, match="under 10s"):
        durations.parse("9s", minimum=10)
