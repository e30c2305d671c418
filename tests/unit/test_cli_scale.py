"""`zenops scale run/status/pause/resume` through click (CliRunner), on the state file of this test's state dir."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from zenops.cli.main import cli, main
from zenops.deployment import target
from zenops.deployment.identity import DeploymentId
from zenops.errors import ExitCode
from zenops.scaling import fleet
from zenops.scaling.decide import Decision, Sample, default_policy
from zenops.scaling.heal import Health
from zenops.scaling.loop import Observation, Settings
from zenops.scaling.phases import ScaledOut
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import ScalingState, load_state, pause_path, read_pause, state_path, write_pause


@pytest.fixture
def state_dir(isolated_home: Path) -> Path:
    return isolated_home / "state" / "zenops"


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def failing(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Through the console entry point (its exit codes and messages): (exit code, stderr unwrapped)."""
    with pytest.raises(SystemExit) as info:
        main(args)
    code = info.value.code
    return (code if isinstance(code, int) else 1), " ".join(capsys.readouterr().err.split())


def saved(state_dir: Path, **kw: Any) -> ScalingState:
    st = ScalingState("fleet", Replicas(1, 3), cloud="sandbox", cap_per_hour=2.5, target=2, actual=2, **kw)
    st.record(Decision("out", "waiting/replica 5.5 > 4 over 60 s", 1, 1), at=1_700_000_000, result="done: web-2")
    st.save(state_path(state_dir, "fleet"))
    return st


def test_help_says_where_it_runs_what_installs_it_and_what_own_hosts_get() -> None:
    text = " ".join(invoke(["scale", "--help"]).output.split())
    assert "gateway host" in text
    assert "--replicas MIN..MAX" in text
    assert "self-healing only" in text
    for sub in ("run", "status", "pause", "resume"):
        assert invoke(["scale", sub, "--help"]).exit_code == 0


def test_status_without_a_loop_here_says_where_to_run_it(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = failing(["scale", "status", "fleet"], capsys)
    assert code == ExitCode.NO_SERVER
    assert "no scaling loop has run for fleet on this host" in err
    assert "gateway host" in err


def test_status_shows_the_replicas_the_phase_and_the_last_decisions(state_dir: Path) -> None:
    saved(state_dir)
    lines = invoke(["scale", "status", "fleet"]).output.splitlines()
    assert lines[0].startswith("scaling: 2 replicas (1..3, cap $2.50/h), target 2, idle; last: out 1 -> 2")
    assert "waiting/replica 5.5 > 4 over 60 s" in lines[1]
    data = json.loads(invoke(["scale", "status", "fleet", "--json"]).output)
    assert data["actual"] == 2
    assert data["pause"] is None
    assert data["decisions"][0]["result"] == "done: web-2"


def test_pause_returns_once_the_loop_says_paused(state_dir: Path) -> None:
    saved(state_dir, phase="paused")
    result = invoke(["scale", "pause", "fleet", "--reason", "rollout r-2"])
    assert result.exit_code == 0
    assert "is paused" in result.output
    pause = read_pause(pause_path(state_dir, "fleet"))
    assert pause is not None
    assert pause.reason == "rollout r-2"


def test_pause_times_out_naming_the_step_in_flight_and_keeps_the_pause_asked(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved(state_dir, phase="acting", step="out 2 -> 3: waiting/replica 6 > 4")
    code, text = failing(["scale", "pause", "fleet", "--timeout", "1s"], capsys)
    assert code == ExitCode.FAILURE
    assert "has not paused in 1 s: it is still acting: out 2 -> 3" in text
    assert read_pause(pause_path(state_dir, "fleet")) is not None


def test_resume_lifts_the_pause_or_says_there_was_none(state_dir: Path) -> None:
    saved(state_dir, phase="stopped", stopped="3 attempts failed in a row")
    write_pause(pause_path(state_dir, "fleet"), by="loop", reason="3 attempts failed", at=0)
    out = " ".join(invoke(["scale", "resume", "fleet"]).output.split())
    assert "resumes at its next tick (it had stopped: 3 attempts failed in a row)" in out
    assert not pause_path(state_dir, "fleet").exists()
    assert "was not paused" in invoke(["scale", "resume", "fleet"]).output


class FakeFleet:
    def __init__(self, *_: object) -> None:
        self.replicas = ["web-1"]

    def observe(self, now: float) -> Observation:
        return Observation(
            now,
            tuple(self.replicas),
            {"web-1": Sample(now, waiting=0, running=1)},
            {"web-1": Health(now, server="ACTIVE", backend="UP")},
        )

    def scale_out(self, count: int) -> ScaledOut:
        raise AssertionError("no action expected")

    def scale_in(self, replicas: Sequence[str]) -> None:
        raise AssertionError("no action expected")

    def heal(self, replica: str) -> str:
        raise AssertionError("no action expected")


def test_run_once_ticks_once_and_prints_its_decision(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dep = DeploymentId("fleet", "sandbox", Path("/nowhere/hosts.yml"))
    monkeypatch.setattr(target, "resolve_target", lambda *a, **k: dep)
    monkeypatch.setattr(fleet, "settings_of", lambda *a: Settings("fleet", Replicas(1, 3), default_policy(8)))
    monkeypatch.setattr(fleet, "FleetObserver", FakeFleet)
    monkeypatch.setattr(fleet, "DeploymentFleet", FakeFleet)
    result = invoke(["scale", "run", "fleet", "--once", "--json"])
    assert result.exit_code == 0
    tick = json.loads(result.output.splitlines()[-1])
    assert tick["action"] == "hold"
    assert tick["phase"] == "idle"
    st = load_state(state_path(state_dir, "fleet"))
    assert st is not None
    assert len(st.series) == 1
