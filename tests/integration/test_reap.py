"""`zenops up --ttl` and `zenops reap` against the sandbox cloud: an expired deployment is removed by a second
controller that has no ledger of it (the one that made it might be gone); one without an expiry, then one whose
expiry has not passed, is left alone."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.conftest import SMALL, Zenops, no_leaks_of, ours
from zenops.cloud import marks as m
from zenops.errors import ExitCode

pytestmark = pytest.mark.integration


def up_both(zenops: Zenops) -> tuple[dict, dict]:
    """itreap (--ttl 1s) and itkeep (no expiry), side by side: one small server each, no model."""
    procs = {
        "itreap": zenops.popen(
            "up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itreap", "--ttl", "1s"
        ),
        "itkeep": zenops.popen("up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itkeep"),
    }
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{name}: {stderr[-3000:]}"
        out[name] = json.loads(stdout.splitlines()[-1])["deployment"]
    return out["itreap"], out["itkeep"]


def reap_from(other: Zenops, admin, expires: datetime, keep_id: str) -> float:
    """The second controller reaps: --dry-run removes nothing, then itreap goes entirely and itkeep stays."""
    code, lines, err = other("reap", "--cloud", "sandbox", "--dry-run")
    assert code == 0, err
    res = lines[-1]
    assert res["dry_run"] is True
    assert [d["deployment"] for d in res["reaped"]] == ["itreap"]
    assert ours(admin, "itreap")

    started = time.monotonic()
    code, lines, err = other("reap", "--cloud", "sandbox", "--yes")
    reap_s = time.monotonic() - started
    assert code == 0, err
    res = lines[-1]
    (reaped,) = res["reaped"]
    assert reaped["deployment"] == "itreap"
    assert reaped["expires_at"] == m.format_expiry(expires)
    # everything of it, its keypair too, although this controller's ledger never knew it
    assert sorted(r["kind"] for r in reaped["removed"]) == ["keypair", "security_group", "server"]
    assert res["failed"] == []
    assert ours(admin, "itreap") == []
    code, lines, _ = other("leaks", "--cloud", "sandbox")
    found = next(line for line in lines if line.get("type") == "result")["leaks"]  # an error line follows (exit 10)
    assert [r for r in found if r["deployment"] == "itreap"] == []
    assert code == ExitCode.LEAKS  # itkeep's resources, which this controller does not know: not reaped
    assert admin.compute.get_server(keep_id).status == "ACTIVE"

    # nothing has expired now: exit 0, nothing removed
    code, lines, err = other("reap", "--cloud", "sandbox", "--yes")
    assert code == 0, err
    assert lines[-1]["reaped"] == []
    return reap_s


def test_reap_removes_the_expired_deployment_from_another_controller_and_nothing_else(zenops, other, admin):
    t0 = datetime.now(UTC).replace(microsecond=0)
    started = time.monotonic()
    reap_dep, keep_dep = up_both(zenops)
    up_s = time.monotonic() - started
    reap_server = admin.compute.get_server(reap_dep["servers"][0]["id"])
    keep_id = keep_dep["servers"][0]["id"]
    expires = m.parse_expiry(reap_server.metadata[m.EXPIRES_KEY])
    assert expires is not None
    assert t0 <= expires <= datetime.now(UTC) + timedelta(seconds=1)
    assert m.EXPIRES_KEY not in admin.compute.get_server(keep_id).metadata
    while datetime.now(UTC) <= expires:
        time.sleep(0.5)

    reap_s = reap_from(other, admin, expires, keep_id)

    # a new --ttl on a re-run reaches the adopted server; an expiry not yet passed is kept
    rerun_started = datetime.now(UTC).replace(microsecond=0)
    code, lines, err = zenops(
        "up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itkeep", "--ttl", "2h"
    )
    rerun_ended = datetime.now(UTC)
    assert code == 0, err[-3000:]
    # the new --ttl 2h counts from that re-run's start (its provisioning's clock), not from the first `up`: the expiry
    # written on the server is 2h after a moment within the re-run, however long it took under load
    new_expiry = m.parse_expiry(admin.compute.get_server(keep_id).metadata.get(m.EXPIRES_KEY))
    assert new_expiry is not None
    assert rerun_started + timedelta(hours=2) <= new_expiry <= rerun_ended + timedelta(hours=2), (
        rerun_started, new_expiry, rerun_ended
    )  # fmt: skip
    code, lines, err = other("reap", "--cloud", "sandbox", "--yes")
    assert code == 0, err
    # this test's deployments: the sandbox may hold other lanes' at the same time (the campaign's servers, with their
    # own expiry not passed), which reap keeps too
    (kept,) = [k for k in lines[-1]["kept"] if k["deployment"] in ("itkeep", "itreap")]
    assert kept["deployment"] == "itkeep"
    assert kept["expires_at"] == m.format_expiry(new_expiry)
    # what reap says is left: that expiry less reap's own clock (its result's `now`, to the second; the clock it read
    # was up to 1 s later), in whole minutes, whatever time the re-run and this reap took under load
    reap_now = m.parse_expiry(lines[-1]["now"])
    assert reap_now is not None
    left_s = int((new_expiry - reap_now).total_seconds())
    assert 0 < left_s <= 2 * 3600, (lines[-1]["now"], kept)
    left = re.fullmatch(r"expires in (\d+)h(?:(\d+)m)?|expires in (\d+)m(?:\d+s)?", kept["reason"])
    assert left, kept["reason"]
    shown_min = int(left[1]) * 60 + int(left[2] or 0) if left[1] else int(left[3])
    assert (left_s - 1) // 60 <= shown_min <= left_s // 60, (kept["reason"], left_s)
    assert lines[-1]["reaped"] == []
    assert admin.compute.get_server(keep_id).status == "ACTIVE"

    # the first controller: its ledger entry of itreap goes with a `down` that finds nothing left; then no leaks
    code, lines, err = zenops("down", "--deployment", "itreap", "--yes")
    assert code == 0, err
    assert lines[-1]["removed"] == []
    code, _, err = zenops("down", "--deployment", "itkeep", "--yes")
    assert code == 0, err
    no_leaks_of(zenops, "itreap", "itkeep")
    print(f"\nup 2 x 1 server in parallel: {up_s:.0f}s, reap of one: {reap_s:.0f}s")
