"""Expiry and `zenops reap`: --ttl, the expiry mark in server metadata, what `up` does with an existing
expiry, and which deployments are expired at a given moment. Removing them is tests/integration/test_reap.py (the
sandbox cloud); nothing here is a test double: the servers below are plain records of what the cloud lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from zenops.cloud import marks as m
from zenops.deployment.provision import decide_expiry
from zenops.deployment.reaping import select_expired
from zenops.errors import ExitCode

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


# --- --ttl (its grammar: tests/unit/test_durations.py) ---------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"), [(42, "42s"), (90, "1m30s"), (5400, "1h30m"), (7200, "2h"), (90061, "1d1h1m"), (-90, "1m30s")]
)
def test_durations_in_messages(seconds, text):
    assert m.format_duration(seconds) == text


def test_up_refuses_a_bad_ttl_before_touching_any_cloud(run):
    r = run(["up", "--cloud", "no-such-cloud", "--flavor", "f", "--ttl", "2 days"])
    assert r.exit_code == ExitCode.USAGE
    assert "'--ttl': not a duration: '2 days'" in r.output  # zenops.cli.options.DurationType, as every duration
    assert "2h, 1d, 1h30m" in r.output  # the fix: the grammar by examples


def test_ttl_goes_with_cloud(run, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 192.0.2.1\n")
    r = run(["up", "--inventory", str(inv), "--ttl", "2h"])
    assert r.exit_code == ExitCode.USAGE
    assert "--ttl goes with --cloud" in r.output


# --- the expiry in the marks ---------------------------------------------------------------------------------


def test_expiry_is_iso_utc_to_the_second():
    assert m.expiry_after(5400, NOW) == "2026-03-01T13:30:00Z"
    assert m.format_expiry(datetime(2026, 3, 1, 14, 0, 0, 999, tzinfo=UTC)) == "2026-03-01T14:00:00Z"
    berlin = datetime(2026, 3, 1, 13, 0, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=1)))
    assert m.format_expiry(berlin) == "2026-03-01T13:00:00Z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-03-01T13:30:00Z", datetime(2026, 3, 1, 13, 30, tzinfo=UTC)),
        ("2026-03-01T14:30:00+01:00", datetime(2026, 3, 1, 13, 30, tzinfo=UTC)),
        ("2026-03-01T13:30:00", datetime(2026, 3, 1, 13, 30, tzinfo=UTC)),  # no zone: UTC
        ("tomorrow", None),
        ("", None),
        (None, None),
    ],
)
def test_reading_expiries(value, expected):
    assert m.parse_expiry(value) == expected


def test_marks_write_the_expiry_in_server_metadata_only():
    mk = m.Marks("demo", "sweep-1", "2026-03-01T13:30:00Z")
    meta = mk.server_metadata("ops@box")
    assert meta[m.EXPIRES_KEY] == "2026-03-01T13:30:00Z"
    assert m.EXPIRES_KEY == "zenops:expires_at"
    assert mk.tags() == ["zenops", "zenops:deployment=demo", "zenops:campaign=sweep-1"]  # Neutron: no expiry
    assert m.from_server(meta, None) == mk
    assert m.from_server(meta, mk.tags()) == mk  # tagged servers: the expiry still comes from the metadata
    assert all(len(k) <= 255 and len(v) <= 255 for k, v in meta.items())  # Nova's metadata limits


def test_no_expiry_no_metadata_key():
    meta = m.Marks("demo").server_metadata("ops@box")
    assert m.EXPIRES_KEY not in meta
    assert m.from_server(meta, None) == m.Marks("demo")


# --- what `up` does with an expiry ---------------------------------------------------------------------------


def test_up_without_ttl_and_without_expiry_sets_none():
    assert decide_expiry(None, [], NOW) == (None, None)
    assert decide_expiry(None, [None, None], NOW) == (None, None)


def test_up_with_ttl_sets_now_plus_ttl():
    expires, note = decide_expiry(3600, [], NOW)
    assert expires == "2026-03-01T13:00:00Z"
    assert note is not None
    assert "2026-03-01T13:00:00Z" in note
    assert "1h" in note


def test_rerun_with_ttl_moves_the_expiry_and_says_so():
    expires, note = decide_expiry(7200, ["2026-03-01T12:30:00Z"], NOW)
    assert expires == "2026-03-01T14:00:00Z"
    assert note is not None
    assert "moved from 2026-03-01T12:30:00Z" in note


def test_rerun_with_ttl_on_servers_without_expiry_says_so():
    _, note = decide_expiry(7200, [None], NOW)
    assert note is not None
    assert "had no expiry" in note


def test_rerun_without_ttl_keeps_the_existing_expiry():
    expires, note = decide_expiry(None, ["2026-03-01T13:00:00Z", "2026-03-01T13:05:00Z"], NOW)
    assert expires == "2026-03-01T13:05:00Z"  # the latest: new servers never expire before the others
    assert note is not None
    assert "keeps its expiry" in note
    assert "--ttl" in note


def test_rerun_without_ttl_past_its_expiry_warns_that_reap_will_remove_it():
    expires, note = decide_expiry(None, ["2026-03-01T11:00:00Z"], NOW)
    assert expires == "2026-03-01T11:00:00Z"
    assert note is not None
    assert "passed 1h ago" in note
    assert "zenops reap" in note


# --- which deployments have expired --------------------------------------------------------------------------


def server(name: str, deployment: str | None, expires_at: str | None = None, campaign: str | None = None):
    """A server as openstacksdk lists it (name, metadata, tags): plain data."""
    meta = m.Marks(deployment, campaign, expires_at).server_metadata("ops@box") if deployment else {"role": "web"}
    return SimpleNamespace(id=f"id-{name}", name=name, metadata=meta, tags=[])


def by_name(found):
    return {e.deployment: e for e in found}


def test_expired_and_unexpired_at_a_given_moment():
    servers = [
        server("old-1", "old", "2026-03-01T11:59:59Z"),
        server("new-1", "new", "2026-03-01T12:00:01Z"),
        server("edge-1", "edge", "2026-03-01T12:00:00Z"),
    ]
    found = by_name(select_expired(servers, NOW))
    assert found["old"].expired
    assert found["old"].reason == "expired 1s ago"
    assert not found["new"].expired
    assert found["new"].reason == "expires in 1s"
    assert found["edge"].expired  # at the second it names
    later = by_name(select_expired(servers, NOW + timedelta(seconds=2)))
    assert all(e.expired for e in later.values())


def test_servers_without_an_expiry_are_never_selected():
    servers = [server("plain-1", "plain"), server("web", None), server("x-1", "x", "2000-01-01T00:00:00Z")]
    found = select_expired(servers, NOW)
    assert [e.deployment for e in found] == ["x"]  # not even listed: they have nothing to say about expiry


def test_a_deployment_with_one_server_without_expiry_is_left_alone():
    servers = [server("mix-1", "mix", "2000-01-01T00:00:00Z"), server("mix-2", "mix")]
    (e,) = select_expired(servers, NOW)
    assert not e.expired
    assert e.expires_at is None
    assert "mix-2 (none)" in e.reason


def test_an_unreadable_expiry_never_expires():
    (e,) = select_expired([server("bad-1", "bad", "next tuesday")], NOW)
    assert not e.expired
    assert "unreadable" in e.reason
    assert "next tuesday" in e.reason


def test_a_deployment_expires_when_its_last_server_does():
    servers = [
        server("d-1", "d", "2026-03-01T11:00:00Z", campaign="c1"),
        server("d-2", "d", "2026-03-01T13:00:00Z", campaign="c1"),
    ]
    (e,) = select_expired(servers, NOW)
    assert not e.expired
    assert e.expires_at == "2026-03-01T13:00:00Z"
    assert e.reason == "expires in 1h (1 of 2 server(s) expired)"
    assert e.servers == ("d-1", "d-2")
    assert e.campaign == "c1"
    (e,) = select_expired(servers, NOW + timedelta(hours=2))
    assert e.expired
    assert e.to_dict()["servers"] == ["d-1", "d-2"]


# --- the command ---------------------------------------------------------------------------------------------


def test_reap_help_teaches_cron_and_systemd(run):
    r = run(["reap", "--help"])
    assert r.exit_code == 0
    for text in ("--cloud", "--dry-run", "--yes", "--json", "*/10 * * * *", "OnCalendar", "zenops-reap.timer"):
        assert text in r.output
    assert "--ttl" in run(["up", "--help"]).output
