"""The platforms the rollout's performance gate passes to its benchmark runs (Rollout.platforms_now): what each host's
servers' health gate verified when they started, from the serving record or from this rollout's own serve of the
host, never a guess."""

from __future__ import annotations

from types import SimpleNamespace

from zenops.rollout.run import Rollout


def driver(record_endpoints: dict, served: dict | None = None, retired: list | None = None) -> Rollout:
    d = object.__new__(Rollout)  # only the record and the state are read: no context, inventory or runner needed
    d.record = SimpleNamespace(endpoints=record_endpoints)  # type: ignore[assignment]
    d.state = SimpleNamespace(served=served or {}, retired=retired or [])  # type: ignore[assignment]
    return d


def test_each_host_gets_the_platform_its_servers_health_gate_saw():
    d = driver({"h1": [{"platform": "zen"}, {"platform": "zen"}], "h2": [{"platform": "cpu"}]})
    assert d.platforms_now(["h1", "h2"]) == {"h1": "zen", "h2": "cpu"}
    assert d.platforms_now(["h2"]) == {"h2": "cpu"}


def test_a_host_this_rollout_served_again_gets_its_new_servers_platform():
    d = driver({"h1": [{"platform": "zen"}]}, served={"h1": {"endpoints": [{"platform": "cpu"}]}})
    assert d.platforms_now(["h1"]) == {"h1": "cpu"}


def test_no_platform_where_the_servers_disagree_or_it_is_unknown_or_missing():
    d = driver(
        {"mixed": [{"platform": "zen"}, {"platform": "cpu"}], "unknown": [{"platform": "unknown"}], "none": [{}]},
        retired=["gone"],
    )
    assert d.platforms_now(["mixed", "unknown", "none", "absent", "gone"]) == {}
