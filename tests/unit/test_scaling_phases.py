"""A scale-out's phases (zenops.scaling.phases) and how the loop's state keeps and shows them (zenops.scaling.state)."""

from __future__ import annotations

from zenops.scaling.decide import Decision
from zenops.scaling.phases import line, ordered, serve_phases
from zenops.scaling.replicas import Replicas
from zenops.scaling.state import ScalingState, decision_line


def test_with_several_new_servers_a_phase_ends_when_its_last_host_is_done() -> None:
    marks = {
        "web-2": {"began": 100.0, "image": 160.0, "model": 161.0, "healthy": 200.0},
        "web-3": {"began": 101.0, "image": 170.0, "model": 175.0, "healthy": 230.0},
    }
    assert serve_phases(marks) == {"image": 70.0, "model": 5.0, "vllm": 55.0}


def test_a_host_without_a_mark_leaves_the_serve_unsplit() -> None:
    assert serve_phases({"web-2": {"began": 100.0, "image": 160.0, "model": "", "healthy": 200.0}}) is None
    assert serve_phases({"web-2": {"began": 100.0, "image": "nan", "model": 1.0, "healthy": 200.0}}) is None
    assert serve_phases({}) is None


def test_phases_are_shown_in_their_order_with_the_total_last() -> None:
    got = {"total": 246.0, "rotation": 6.0, "provision": 61.0, "image": 92.4, "docker": 38.0}
    assert list(ordered(got)) == ["provision", "docker", "image", "rotation", "total"]
    assert line(got) == "provision 61s, docker 38s, image 92s, rotation 6s; total 246s"


def test_the_state_keeps_the_phases_with_their_decision_and_reads_files_without_them() -> None:
    st = ScalingState("fleet", Replicas(1, 3))
    st.record(Decision("out", "waiting/replica 5 > 2", 1, 2), at=60.0, result="in flight")
    st.timed({"provision": 61.0, "total": 246.0})
    st.finish("done: web-2")
    again = ScalingState.from_dict(st.to_dict())
    assert again.decisions[-1]["phases"] == {"provision": 61.0, "total": 246.0}
    assert decision_line(again.decisions[-1]).endswith("done: web-2 [provision 61s; total 246s]")
    old = st.to_dict()
    for d in old["decisions"]:
        d.pop("phases", None)
    old["last"].pop("phases", None)
    assert "[" not in decision_line(ScalingState.from_dict(old).decisions[-1])
