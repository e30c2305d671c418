"""zenops.cpulist, the controller's cpulist notation, and the copy the cpu_topology module carries to the hosts
(plugins/module_utils/cpu_topology.py, where zenops is not installed): one table of cases through both."""

from __future__ import annotations

import pytest

from tests.fixtures import sysfs
from zenops.cpulist import display_cpulist, format_cpulist, parse_cpulist

topo = sysfs.load_cpu_topology()

PARSERS = [pytest.param(parse_cpulist, id="zenops.cpulist"), pytest.param(topo.parse_cpulist, id="module_utils")]

CASES = [
    ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
    ("0", [0]),
    ("", []),
    ("\n", []),
    ("0-13,28-41\n", [*range(14), *range(28, 42)]),
    ("5,1-2,2", [1, 2, 5]),
    ("0-7:2/4", [0, 1, 4, 5]),
    (" 1 , 3 ", [1, 3]),
]
BAD = ["3-1", "a-b", "0-x", "1-", "-1", "x", "0-7:2"]


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize(("text", "cpus"), CASES)
def test_both_parsers_read_the_same_lists(parse, text, cpus):
    assert parse(text) == cpus


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("text", BAD)
def test_both_parsers_refuse_the_same_garbage(parse, text):
    with pytest.raises(ValueError, match=r"not a cpu list|invalid"):
        parse(text)


def test_cpulist():
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([5]) == "5"
    assert format_cpulist([]) == ""


@pytest.mark.parametrize("cpus", [[], [0], [0, 1, 2, 3, 8, 10, 11], [*range(14), *range(28, 42)], [3, 5, 7]])
def test_format_and_parse_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus
    assert display_cpulist(cpus) == (format_cpulist(cpus) or "-")
