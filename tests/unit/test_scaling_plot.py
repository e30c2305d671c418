"""The replica plot's data (zenops.scaling.plot.prepare) from a state the loop's own schema wrote, and `zenops scale
status --plot` (the PNG written, bad targets refused before anything is read). The pixels are not checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from zenops.cli.main import cli, main
from zenops.errors import ExitCode, UsageError
from zenops.scaling.decide import Decision
from zenops.scaling.plot import REASON_CHARS, prepare
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import ScalingState, state_path

T0 = 1_700_000_000.0


def scenario() -> ScalingState:
    """1..3: a hold, out 1 -> 2 at +60 s, a failed out at +180 s, heal at +240 s, in 2 -> 1 at +600 s; a tick every
    30 s from T0 (actual and target as the loop writes them)."""
    st = ScalingState("fleet", Replicas(1, 3), cloud="sandbox")
    st.record(Decision("out", "before the series", 1, 1), at=T0 - 3600, result="done: old-9")  # trimmed away
    events = {
        0: (Decision("hold", "at MIN 1", 1), ""),
        60: (Decision("out", "waiting/replica 3.5 > 0.5 over 60 s", 1, 1), "done: web-2"),
        180: (Decision("out", "waiting/replica 2 > 0.5 over 60 s", 2, 1), "failed: quota exceeded"),
        240: (Decision("heal", "web-1: server MISSING for 60 s", 2, 1, ("web-1",)), "done: web-1 replaced by web-3"),
        600: (Decision("in", "running+waiting/replica 0 < 0.4 over 300 s", 2, 1, ("web-2",)), "done: web-2 deleted"),
    }
    actual = target = 1
    for s in range(0, 660, 30):
        if s in events:
            d, result = events[s]
            st.record(d, at=T0 + s, result=result)
            target = d.target
        st.actual, st.target = actual, target
        st.tick(T0 + s)
        actual = target if not (s in events and events[s][1].startswith("failed")) else actual
        target = actual
    return st


def test_the_series_is_minutes_since_the_first_tick_with_actual_and_target() -> None:
    data = prepare(scenario())
    assert data.start == "2023-11-14T22:13:20+00:00"
    assert data.minutes[:3] == (0.0, 0.5, 1.0)
    assert data.minutes[-1] == 10.5
    assert data.actual[:4] == (1, 1, 1, 2)  # decided out at +60 s: the next tick counts 2
    assert data.target[2] == 2  # the tick of the decision: its target
    assert data.bounds == Replicas(1, 3)
    assert data.top == 3


def test_markers_are_the_decisions_that_acted_numbered_at_the_count_they_aimed_at() -> None:
    data = prepare(scenario())
    got = [(m.n, m.minute, m.action, m.replicas, m.failed) for m in data.markers]
    assert got == [
        (1, 1.0, "out", 2, False),
        (2, 3.0, "out", 3, True),  # failed: red on the plot
        (3, 4.0, "heal", 2, False),  # heal: at the count then
        (4, 10.0, "in", 1, False),
    ]  # the hold left out (the line shows it); the decision before the series' first tick too
    line = data.markers[0].line()
    assert line == "1. 22:14:20 out: waiting/replica 3.5 > 0.5 over 60 s => done: web-2"
    assert data.markers[2].line().endswith("=> done: web-1 replaced by web-3")


def test_a_long_reason_is_cut_and_a_stop_is_marked_failed() -> None:
    st = ScalingState("fleet", Replicas(1, 2))
    st.tick(T0)
    st.record(Decision("stop", "x" * 300, 1), at=T0 + 10, result="stopped")
    (m,) = prepare(st).markers
    assert m.failed
    assert len(m.line()) < REASON_CHARS + 40
    assert "x" * (REASON_CHARS - 3) + "..." in m.line()


def test_nothing_to_plot_before_the_first_tick() -> None:
    with pytest.raises(UsageError, match="has recorded no tick yet"):
        prepare(ScalingState("fleet", Replicas(1, 2)))


def test_a_decision_whose_time_cannot_be_read_is_left_out() -> None:
    st = scenario()
    (first,) = [d for d in st.decisions if d["result"] == "done: web-2"]
    first["at"] = "yesterday"
    assert [m.action for m in prepare(st).markers] == ["out", "heal", "in"]


# --- zenops scale status --plot -----------------------------------------------------------------------------------


@pytest.fixture
def state_dir(isolated_home: Path) -> Path:
    d = isolated_home / "state" / "zenops"
    scenario().save(state_path(d, "fleet"))
    return d


def test_status_plot_writes_a_png_and_says_so(state_dir: Path, tmp_path: Path) -> None:
    png = tmp_path / "replicas.png"
    result = CliRunner().invoke(cli, ["--json", "scale", "status", "fleet", "--plot", str(png)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(x) for x in result.output.splitlines() if x.startswith("{")]
    assert any("22 ticks over 10.5 min, 4 decisions" in str(x.get("message")) for x in lines), lines
    assert lines[-1]["plot"] == str(png)


@pytest.mark.parametrize(
    ("name", "said"),
    [("replicas.svg", "the plot is a PNG"), ("missing/replicas.png", "does not exist")],
)
def test_status_plot_refuses_a_target_it_cannot_write(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, said: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["scale", "status", "fleet", "--plot", str(tmp_path / name)])
    assert info.value.code == ExitCode.USAGE
    assert said in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / name).exists()
