"""zenops.scaling.state: the loop's state file (schema, version, bounded lists, atomic write) and the pause file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zenops.errors import ZenopsError
from zenops.scaling.decide import Decision, default_policy
from zenops.scaling.heal import Attempt
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import (
    MAX_ATTEMPTS,
    MAX_DECISIONS,
    MAX_SERIES,
    ScalingState,
    load_state,
    pause_path,
    policy_from_dict,
    read_pause,
    remove_pause,
    state_path,
    write_pause,
)
from zenops.statefile import DamagedStateError


def sample_state() -> ScalingState:
    st = ScalingState("fleet", Replicas(1, 3), cloud="sandbox", cap_per_hour=2.5,
                      policy=default_policy(8).to_dict(), target=2, actual=2)  # fmt: skip
    st.record(Decision("out", "waiting/replica 5.5 > 4", 1, 1), at=1_700_000_000, result="done: web-2")
    st.tick(1_700_000_010)
    st.attempt(Attempt(1_700_000_005, "ok", "out 1 -> 2"))
    st.last_action_t = 1_700_000_005
    return st


def test_round_trip_through_the_file_keeps_every_field(tmp_path: Path) -> None:
    path = state_path(tmp_path, "fleet")
    st = sample_state()
    st.save(path)
    assert path == tmp_path / "scaling" / "fleet.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["replicas"] == {"min": 1, "max": 3}
    assert data["phase"] == "idle"
    assert data["decisions"][0] | {} == {**Decision("out", "waiting/replica 5.5 > 4", 1, 1).to_dict(),
                                          "at": "2023-11-14T22:13:20+00:00", "result": "done: web-2"}  # fmt: skip
    assert data["series"] == [[1_700_000_010, 2, 2]]
    again = load_state(path)
    assert again == st
    assert again.attempts_typed() == [Attempt(1_700_000_005, "ok", "out 1 -> 2")]


def test_no_file_is_none_and_a_damaged_one_is_named(tmp_path: Path) -> None:
    path = state_path(tmp_path, "fleet")
    assert load_state(path) is None
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "deployment": "fleet"}')
    with pytest.raises(DamagedStateError, match=r"fleet\.json.*not a scaling state"):
        load_state(path)
    path.write_text('{"version": 1, "deployment": "fleet", "replicas": {"min": 1, "max": 2}, "phase": "dancing"}')
    with pytest.raises(DamagedStateError, match="phase 'dancing'"):
        load_state(path)


def test_a_newer_version_asks_for_an_upgrade_and_an_unknown_one_is_damaged(tmp_path: Path) -> None:
    path = state_path(tmp_path, "fleet")
    data = sample_state().to_dict()
    with pytest.raises(ZenopsError, match="version 2, this zenops reads version 1") as e:
        ScalingState.from_dict({**data, "version": 2}, path=path)
    assert not isinstance(e.value, DamagedStateError)
    assert "upgrade zenops" in (e.value.hint or "")
    with pytest.raises(DamagedStateError, match="version None"):
        ScalingState.from_dict({k: v for k, v in data.items() if k != "version"}, path=path)


def test_the_lists_are_bounded_and_repeated_holds_are_kept_once() -> None:
    st = ScalingState("fleet", Replicas(1, 3))
    for i in range(MAX_SERIES + 10):
        st.tick(float(i))
    for i in range(MAX_DECISIONS + 5):
        st.record(Decision("out", f"r{i}", 1, 1), at=float(i), result="done")
    for i in range(MAX_ATTEMPTS + 3):
        st.attempt(Attempt(float(i), "failed", "out", "quota"))
    assert len(st.series) == MAX_SERIES
    assert st.series[0][0] == 10.0
    assert len(st.decisions) == MAX_DECISIONS
    assert st.decisions[-1]["reason"] == f"r{MAX_DECISIONS + 4}"
    assert len(st.attempts) == MAX_ATTEMPTS
    st.record(Decision("hold", "cooling down", 2), at=1e4)
    st.record(Decision("hold", "cooling down more", 2), at=1e4 + 10)
    assert [d["reason"] for d in st.decisions[-2:]] == [f"r{MAX_DECISIONS + 4}", "cooling down"]
    assert st.last is not None
    assert st.last["reason"] == "cooling down more"
    big = {**st.to_dict(), "series": [[float(i), 1, 1] for i in range(MAX_SERIES * 2)]}
    assert len(ScalingState.from_dict(big).series) == MAX_SERIES


def test_finish_sets_the_result_of_the_step_in_flight() -> None:
    st = ScalingState("fleet", Replicas(1, 3))
    st.record(Decision("out", "busy", 1, 1), at=5.0, result="in flight")
    st.finish("failed: quota")
    assert st.decisions[-1]["result"] == "failed: quota"
    assert st.last is not None
    assert st.last["result"] == "failed: quota"


def test_the_policy_comes_back_from_its_dict() -> None:
    policy = default_policy(8, cooldown_s=30.0, step_out=2)
    assert policy_from_dict(policy.to_dict()).to_dict() == policy.to_dict()


def test_pause_file_write_read_remove(tmp_path: Path) -> None:
    path = pause_path(tmp_path, "fleet")
    assert read_pause(path) is None
    assert remove_pause(path) is False
    pause = write_pause(path, by="rollout", reason="rolling out r2", at=1_700_000_000)
    assert json.loads(path.read_text()) == {
        "by": "rollout",
        "reason": "rolling out r2",
        "at": "2023-11-14T22:13:20+00:00",
    }
    assert read_pause(path) == pause
    assert pause.line() == "paused by rollout at 2023-11-14T22:13:20+00:00: rolling out r2"
    assert remove_pause(path) is True
    assert read_pause(path) is None


def test_a_damaged_pause_file_still_pauses(tmp_path: Path) -> None:
    path = pause_path(tmp_path, "fleet")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    pause = read_pause(path)
    assert pause is not None
    assert "damaged" in pause.reason
