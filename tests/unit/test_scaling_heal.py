"""zenops.scaling.heal: a replica failed for its window is replaced (one at a time); failed attempts back off
exponentially and the loop stops after repeated failures (a broken image, a full quota)."""

from __future__ import annotations

import pytest

from zenops.errors import UsageError
from zenops.scaling.heal import Attempt, Backoff, Health, failed, failures_in_a_row, gate, heal


def _recorded(pattern: str, *, step: int = 10) -> list[Health]:
    """A recorded replica's health, one letter every ``step`` s: ``.`` healthy, ``E`` server ERROR, ``S`` SHUTOFF,
    ``M`` gone from the cloud, ``D`` backend DOWN (vLLM not answering), ``B`` booting (BUILD, backend DOWN)."""
    kinds = {
        ".": ("ACTIVE", "UP", True),
        "E": ("ERROR", "DOWN", False),
        "S": ("SHUTOFF", "DOWN", False),
        "M": ("MISSING", "DOWN", False),
        "D": ("ACTIVE", "DOWN", False),
        "B": ("BUILD", "MAINT", None),
        "V": ("ACTIVE", "UP", False),
    }
    return [Health(float(i * step), *kinds[c]) for i, c in enumerate(pattern)]


# web-2's server went to ERROR at t=100 s (the hypervisor died under it); web-1 and web-3 serve
DEAD = {
    "web-1": _recorded("....................."),
    "web-2": _recorded("..........EEEEEEEEEEE"),
    "web-3": _recorded("....................."),
}
NOW = 200.0


def _dead(until: float) -> dict[str, list[Health]]:
    """DEAD, looked at until ``until``: web-2 still in ERROR."""
    n = int(until // 10) + 1
    return {"web-1": _recorded("." * n), "web-2": _recorded("." * 10 + "E" * (n - 10)), "web-3": _recorded("." * n)}


def test_a_dead_server_is_replaced_after_its_window() -> None:
    got = heal(DEAD, now=NOW, current=3)
    assert (got.action, got.count, got.replicas) == ("heal", 1, ("web-2",))
    assert got.reason == "replace web-2: server ERROR for 100 s (window 60 s)"
    assert got.target == 3


def test_a_dead_server_within_its_window_is_not_yet_replaced() -> None:
    got = heal(DEAD, now=150.0, current=3)  # ERROR since 100 s: 50 s < 60 s
    assert got.action == "hold"
    assert got.reason == "no replica failed for its window (3 watched)"


def test_the_window_is_reached_exactly() -> None:
    assert heal(DEAD, now=160.0, current=3).action == "heal"


@pytest.mark.parametrize(("letter", "what"), [("S", "server SHUTOFF"), ("M", "server MISSING")])
def test_a_shut_off_or_deleted_server_is_replaced(letter: str, what: str) -> None:
    got = heal({"web-1": _recorded("......" + letter * 8)}, now=130.0, current=1)
    assert got.reason == f"replace web-1: {what} for 70 s (window 60 s)"


def test_a_backend_down_gets_the_longer_window_to_restart() -> None:
    looks = {"web-1": _recorded("." * 10 + "D" * 25)}  # DOWN from 100 s
    assert heal(looks, now=340.0, current=1).action == "hold"  # 240 s: vLLM may still be loading the model
    got = heal(looks, now=400.0, current=1)
    assert got.reason == "replace web-1: backend DOWN for 300 s (window 300 s)"


def test_vllm_not_answering_is_a_failure() -> None:
    got = heal({"web-1": _recorded("V" * 31)}, now=300.0, current=1)
    assert got.reason == "replace web-1: vLLM not answering for 300 s (window 300 s)"


def test_a_break_in_the_failure_restarts_the_window() -> None:
    looks = {"web-1": _recorded("EEEEEEEEEE.EEEE")}  # ERROR, back ACTIVE at 100 s, ERROR again from 110 s
    assert heal(looks, now=150.0, current=1).action == "hold"


def test_a_break_in_a_backend_down_restarts_its_window() -> None:
    looks = {"web-1": _recorded("D" * 31 + "." + "D" * 9)}  # DOWN 0..300 s, UP at 310 s, DOWN again from 320 s
    assert heal(looks, now=400.0, current=1).action == "hold"


def test_a_booting_server_is_not_failed() -> None:
    assert heal({"web-4": _recorded("B" * 40)}, now=390.0, current=1).action == "hold"


def test_a_replica_not_looked_at_lately_is_not_called_dead() -> None:
    assert heal(DEAD, now=NOW + 61, current=3).action == "hold"  # the newest look is 61 s old


def test_own_hosts_restart_vllm() -> None:
    got = heal({"host-1": [Health(float(t), None, "DOWN", False) for t in range(0, 310, 10)]}, now=300.0, current=1,
               can_replace=False)  # fmt: skip
    assert got.reason == "restart vLLM on host-1: backend DOWN for 300 s (window 300 s)"


def test_one_replacement_at_a_time_the_longest_failing_first() -> None:
    looks = {**DEAD, "web-3": _recorded("..............EEEEEEE"), "web-1": _recorded("............EEEEEEEEE")}
    got = heal(looks, now=NOW, current=3)
    assert got.replicas == ("web-2",)
    assert got.reason.endswith("(2 more failing: web-1, web-3)")
    assert [f.replica for f in failed(looks, now=NOW)] == ["web-2", "web-1", "web-3"]


# ---- a broken image: every replacement fails ------------------------------------------------------------------

BROKEN = "server went to ERROR at boot: image zenops-baked-7 is not bootable"


def _tries(*outcomes: str, first: float = 200.0) -> list[Attempt]:
    return [
        Attempt(first + 300 * i, o, "replace web-2", BROKEN if o == "failed" else "")  # type: ignore[arg-type]
        for i, o in enumerate(outcomes)
    ]


def test_after_a_failed_replacement_the_next_waits() -> None:
    got = heal(DEAD, now=230.0, current=3, attempts=_tries("failed"))
    assert got.action == "hold"
    assert got.reason == (f"backing off: try 2 of 3 in 30 s (1 failed in a row, the last: replace web-2: {BROKEN})")
    assert heal(DEAD, now=260.0, current=3, attempts=_tries("failed")).action == "heal"


def test_the_backoff_doubles() -> None:
    attempts = _tries("failed", "failed", first=0.0)  # the second ended at 300 s: wait 120 s
    assert heal(_dead(419.0), now=419.0, current=3, attempts=attempts).action == "hold"
    assert heal(_dead(420.0), now=420.0, current=3, attempts=attempts).action == "heal"


def test_repeated_failures_stop_the_loop_and_say_why() -> None:
    got = heal(_dead(5000.0), now=5000.0, current=3, attempts=_tries("failed", "failed", "failed"))
    assert got.action == "stop"
    assert got.reason == (
        f"3 attempts failed in a row (the last: replace web-2: {BROKEN}); the loop stopped: fix the cause "
        "(the image, the quota) and resume it"
    )


def test_stop_is_reported_even_when_nothing_fails_now() -> None:
    looks = {"web-1": _recorded("." * 21)}
    assert heal(looks, now=NOW, current=1, attempts=_tries("failed", "failed", "failed")).action == "stop"


def test_a_success_or_a_reset_clears_the_failures() -> None:
    for clear in ("ok", "reset"):
        attempts = _tries("failed", "failed", clear, "failed")
        assert [a.t for a in failures_in_a_row(attempts)] == [1100.0]
        assert heal(_dead(5000.0), now=5000.0, current=3, attempts=attempts).action == "heal"


def test_the_gate_holds_a_scale_out_after_a_failed_one() -> None:
    out = [Attempt(200.0, "failed", "out 2 -> 3", "quota exceeded: cores")]
    got = gate(out, now=210.0, current=2, backoff=Backoff())
    assert got is not None
    assert (
        got.reason == "backing off: try 2 of 3 in 50 s (1 failed in a row, the last: out 2 -> 3: quota exceeded: cores)"
    )
    assert gate(out, now=260.0, current=2, backoff=Backoff()) is None
    assert gate([], now=0.0, current=2, backoff=Backoff()) is None


@pytest.mark.parametrize(("failures", "wait"), [(0, 0.0), (1, 60.0), (2, 120.0), (3, 240.0), (5, 900.0), (9, 900.0)])
def test_backoff_waits(failures: int, wait: float) -> None:
    assert Backoff(give_up_after=10).wait_s(failures) == wait


@pytest.mark.parametrize(
    "kw", [{"first_s": 0.0}, {"factor": 0.5}, {"most_s": 10.0}, {"give_up_after": 0}]
)  # fmt: skip
def test_backoff_refuses_what_cannot_wait(kw: dict[str, float]) -> None:
    with pytest.raises(UsageError, match="backoff"):
        Backoff(**kw)  # type: ignore[arg-type]
