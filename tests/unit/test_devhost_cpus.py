"""`zenops devhost up --cpus`: the CPU list is checked against the CPUs this machine lets us use before any container
starts (a bad one would make Docker fail after the first host was created)."""

from __future__ import annotations

import os

import pytest

from zenops import devhost
from zenops.errors import UsageError


def test_cpus_this_process_may_use_are_accepted():
    cpus = sorted(os.sched_getaffinity(0))
    assert devhost.cpus_ok(str(cpus[-1]))
    assert devhost.cpus_ok(f"{cpus[0]}-{cpus[-1]}") is (cpus == list(range(cpus[0], cpus[-1] + 1)))


@pytest.mark.parametrize("spec", ["", "abc", "99999", "1-", "0-99999"])
def test_other_lists_are_refused(spec):
    assert not devhost.cpus_ok(spec)


def test_up_refuses_a_bad_list_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(devhost, "_preflight", lambda: pytest.fail("nothing may start"))
    with pytest.raises(UsageError, match="--cpus 99999: use CPU ids this machine has"):
        devhost.up(tmp_path, "t", 1, cpus="99999")
