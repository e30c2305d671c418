"""zenops.lock: one mutating command per deployment. Real processes (sleepers) stand for holders and orphaned
playbooks; /proc is this machine's (Linux only). Every process a test starts is stopped and reaped by the test."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from zenops import lock
from zenops.config import load
from zenops.errors import ExitCode, LockedError
from zenops.lock import Holder, deployment_lock, describe_lock, lock_path

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

KEY = "fleet-12345678"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def config(isolated_home, monkeypatch):
    monkeypatch.delenv(lock.ENV, raising=False)
    return load()


class Procs:
    """Processes a test starts: each is reaped by a thread as soon as it dies (as init reaps a real orphan), so a
    killed one disappears from /proc instead of lingering as our zombie; all are killed at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.started.append(p)
        threading.Thread(target=p.wait, daemon=True).start()
        return p

    def stop(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.stop()


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.proc_start(pid) is None:
            return True
        time.sleep(0.02)
    return False


def _write_lock(config, holder: Holder) -> Path:
    """The lock file of ``holder``, put in place whole (a reader polling it never sees it half-written)."""
    path = lock_path(config, KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.test-tmp")
    tmp.write_text(json.dumps(asdict(holder)))
    tmp.replace(path)
    return path


def _holder(pid: int, pid_start: int | None, *, token: str = "deadbeefdeadbeef", host: str | None = None) -> Holder:
    return Holder(
        pid=pid,
        pid_start=pid_start,
        host=host or socket.gethostname(),
        command="zenops rollout -i fleet.yml --model ./tiny-b",
        started_at="2026-01-01T00:00:00+00:00",
        token=token,
    )


def _dead_pid(procs: Procs) -> tuple[int, int]:
    """A pid and its start time, of a process that has exited and been reaped."""
    p = procs.start([sys.executable, "-c", "pass"])
    start = lock.proc_start(p.pid)
    p.wait(timeout=30)
    assert _wait_gone(p.pid)
    return p.pid, start or 1


# --- acquire and release --------------------------------------------------------------------------------------------


def test_acquire_writes_the_holder_sets_the_env_and_releases(config):
    path = lock_path(config, KEY)
    assert path == config.state_dir / "locks" / f"{KEY}.lock"
    assert describe_lock(config, KEY) is None
    with deployment_lock(config, KEY, command="zenops up -i fleet.yml") as me:
        data = json.loads(path.read_text())
        assert data["pid"] == os.getpid()
        assert data["pid_start"] == lock.proc_start(os.getpid()) is not None
        assert data["host"] == socket.gethostname()
        assert data["command"] == "zenops up -i fleet.yml"
        assert data["token"] == me.token
        assert len(me.token) == 16
        assert os.environ[lock.ENV] == me.token
        assert (path.stat().st_mode & 0o777) == 0o600
        assert (path.parent.stat().st_mode & 0o777) == 0o700
        described = describe_lock(config, KEY)
        assert described is not None
        assert described["alive"] is True
        assert described["pid"] == os.getpid()
        assert described["command"] == "zenops up -i fleet.yml"
    assert not path.exists()
    assert lock.ENV not in os.environ
    assert describe_lock(config, KEY) is None


def test_release_restores_an_outer_env_value_and_happens_on_errors(config, monkeypatch):
    monkeypatch.setenv(lock.ENV, "outer")
    seen: list[str] = []

    def fail_inside() -> None:
        with deployment_lock(config, KEY, command="x") as me:
            seen.extend([os.environ[lock.ENV], me.token])
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_inside()
    assert seen[0] == f"outer,{seen[1]}"  # held inside another lock: both tokens, so either finds the orphans
    assert os.environ[lock.ENV] == "outer"
    assert not lock_path(config, KEY).exists()


def test_the_lock_is_taken_again_after_release(config):
    with deployment_lock(config, KEY, command="first") as first:
        pass
    with deployment_lock(config, KEY, command="second") as second:
        assert json.loads(lock_path(config, KEY).read_text())["command"] == "second"
    assert first.token != second.token


def test_locks_of_other_deployments_are_independent(config):
    with deployment_lock(config, KEY, command="a"), deployment_lock(config, "other-00000000", command="b"):
        assert lock_path(config, KEY).exists()
        assert lock_path(config, "other-00000000").exists()


def test_the_same_process_cannot_take_its_own_lock_twice(config):
    with deployment_lock(config, KEY, command="outer"):
        with pytest.raises(LockedError, match="already locked by this command"), deployment_lock(config, KEY):
            pass
        assert lock_path(config, KEY).exists()  # the inner failure did not remove the outer lock
    assert not lock_path(config, KEY).exists()


def test_release_leaves_a_lock_file_that_is_no_longer_ours(config):
    path = lock_path(config, KEY)
    with deployment_lock(config, KEY, command="mine"):
        other = _holder(1, None, token="0123456789abcdef")
        path.write_text(json.dumps(asdict(other)))  # taken over meanwhile (e.g. we were thought dead)
    assert json.loads(path.read_text())["token"] == "0123456789abcdef"


# --- a live holder ----------------------------------------------------------------------------------------------


def test_a_live_holder_on_this_machine_refuses_with_exit_14(config, procs):
    holder_proc = procs.start(SLEEPER)
    holder = _holder(holder_proc.pid, lock.proc_start(holder_proc.pid))
    path = _write_lock(config, holder)
    with pytest.raises(LockedError) as info, deployment_lock(config, KEY, command="zenops down -i fleet.yml"):
        pytest.fail("the lock was taken from a live holder")
    err = info.value
    assert err.exit_code == ExitCode.LOCKED == 14
    assert f"pid {holder_proc.pid}" in err.message
    assert "`zenops rollout -i fleet.yml --model ./tiny-b`" in err.message
    assert KEY in err.message
    assert f"kill {holder_proc.pid}" in (err.hint or "")
    assert json.loads(path.read_text()) == asdict(holder)  # untouched
    assert holder_proc.poll() is None  # and the holder still runs
    assert lock.ENV not in os.environ
    described = describe_lock(config, KEY)
    assert described is not None
    assert described["alive"] is True
    assert described["pid"] == holder_proc.pid


def test_a_live_holder_without_a_recorded_start_time_counts_as_alive(config, procs):
    holder_proc = procs.start(SLEEPER)
    _write_lock(config, _holder(holder_proc.pid, None))
    with pytest.raises(LockedError), deployment_lock(config, KEY, command="x"):
        pass


def test_a_holder_on_another_host_is_refused(config, procs):
    pid, start = _dead_pid(procs)  # dead here, but that says nothing about the other machine
    holder = _holder(pid, start, host="elsewhere.example")
    path = _write_lock(config, holder)
    with pytest.raises(LockedError) as info, deployment_lock(config, KEY, command="x"):
        pass
    assert info.value.exit_code == 14
    assert "elsewhere.example" in info.value.message
    assert f"pid {pid}" in info.value.message
    assert "another machine" in (info.value.hint or "")
    assert str(path) in (info.value.hint or "")
    assert json.loads(path.read_text()) == asdict(holder)


# --- a dead holder ----------------------------------------------------------------------------------------------


def test_a_dead_holder_is_taken_over_and_its_orphans_stopped(config, procs):
    pid, start = _dead_pid(procs)
    token = "feedfacefeedface"
    orphan = procs.start(["sleep", "60"], env={**os.environ, lock.ENV: token})
    bystander = procs.start(["sleep", "60"], env={**os.environ, lock.ENV: "0000000000000000"})
    unrelated = procs.start(SLEEPER, env={k: v for k, v in os.environ.items() if k != lock.ENV})
    _write_lock(config, _holder(pid, start, token=token))
    assert lock.orphans(token) == [orphan.pid]
    described = describe_lock(config, KEY)
    assert described is not None
    assert described["alive"] is False
    assert described["token"] == token

    notes: list[str] = []
    with deployment_lock(config, KEY, command="zenops rollout", note=notes.append) as me:
        assert json.loads(lock_path(config, KEY).read_text())["token"] == me.token
        assert me.token != token
    assert _wait_gone(orphan.pid), "the orphaned playbook still runs"
    assert orphan.wait(timeout=5) != 0  # signalled
    assert bystander.poll() is None  # another lock's process: untouched
    assert unrelated.poll() is None
    assert lock.orphans(token) == []
    assert lock.orphans("0000000000000000") == [bystander.pid]
    (note,) = notes
    assert f"pid {pid}" in note
    assert "stopped 1 orphaned process(es)" in note
    assert str(orphan.pid) in note
    assert "taking it over" in note


def test_a_dead_holder_without_orphans_is_taken_over_quietly(config, procs):
    pid, start = _dead_pid(procs)
    _write_lock(config, _holder(pid, start, token="aaaaaaaaaaaaaaaa"))
    notes: list[str] = []
    with deployment_lock(config, KEY, command="x", note=notes.append):
        pass
    assert len(notes) == 1
    assert "left no process running" in notes[0]
    assert not lock_path(config, KEY).exists()


def test_a_reused_pid_is_not_the_holder(config, procs):
    # the pid runs, but it started at another time than the holder did: another process reusing the pid
    other = procs.start(SLEEPER)
    real_start = lock.proc_start(other.pid)
    assert real_start is not None
    holder = _holder(other.pid, real_start + 12345, token="bbbbbbbbbbbbbbbb")
    assert not lock.alive(holder)
    assert lock.alive(_holder(other.pid, real_start))
    assert lock.alive(_holder(other.pid, None))
    _write_lock(config, holder)
    assert describe_lock(config, KEY)["alive"] is False
    notes: list[str] = []
    with deployment_lock(config, KEY, command="x", note=notes.append):
        pass
    assert "is gone" in notes[0]
    assert other.poll() is None  # the process that reused the pid is left alone (it carries no token)


# --- commands racing for one lock (real processes) ----------------------------------------------------------------

RACERS = 4
ROUNDS = 20


def _race_taker(config, start, release, results) -> None:
    """A command taking the lock: reports ("won", pid, "") and holds the lock until released, or ("refused", pid,
    message); anything else is ("error", pid, repr)."""
    start.wait(30)
    try:
        with deployment_lock(config, KEY, command=f"taker {os.getpid()}"):
            results.put(("won", os.getpid(), ""))
            release.wait(30)
    except LockedError as e:
        results.put(("refused", os.getpid(), e.message))
    except BaseException as e:
        results.put(("error", os.getpid(), repr(e)))


def _poll_lock(path: str, stop, seen) -> None:
    """Reads the lock file as fast as it can until ``stop``: every read that is not a whole holder record goes to
    ``seen`` as bytes, then the number of reads."""
    reads = 0
    while not stop.is_set():
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            continue
        reads += 1
        try:
            Holder(**json.loads(data))
        except (ValueError, TypeError):
            seen.put(data[:200])
    seen.put(reads)


Outcome = tuple[str, int, str]  # ("won" | "refused" | "error", pid, message)


def _race(config, procs: Procs) -> tuple[list[list[Outcome]], list[bytes], int]:
    """ROUNDS times, RACERS processes take over one dead holder's lock at once (the winner holds it until every
    taker has had its answer), while another process polls the lock file: each round's outcomes, sorted; what the
    reader read that was not a whole holder record; how many reads it made."""
    mp = multiprocessing.get_context("fork")
    path = lock_path(config, KEY)
    dead, dead_start = _dead_pid(procs)
    stop, seen = mp.Event(), mp.Queue()
    reader = mp.Process(target=_poll_lock, args=(str(path), stop, seen))
    reader.start()
    rounds = []
    try:
        for round_ in range(ROUNDS):
            _write_lock(config, _holder(dead, dead_start, token=f"{round_:016x}"))
            start, release, results = mp.Event(), mp.Event(), mp.Queue()
            takers = [mp.Process(target=_race_taker, args=(config, start, release, results)) for _ in range(RACERS)]
            for t in takers:
                t.start()
            start.set()
            rounds.append(sorted(results.get(timeout=60) for _ in takers))
            release.set()
            for t in takers:
                t.join(30)
            path.unlink(missing_ok=True)  # released by the winner (by every winner, if there were several)
    finally:
        stop.set()
        reader.join(30)
    bad: list[bytes] = []
    while not isinstance(item := seen.get(timeout=10), int):
        bad.append(item)
    return rounds, bad, item


def test_racing_takers_of_a_dead_holders_lock_leave_exactly_one_winner(config, procs):
    rounds, _bad, _reads = _race(config, procs)
    for n, outcomes in enumerate(rounds, 1):
        winners = [pid for kind, pid, _message in outcomes if kind == "won"]
        assert len(winners) == 1, f"round {n}: {outcomes}"
        for kind, _pid, message in outcomes:
            if kind != "won":  # refused, naming the winner (never "pid 0 on ?": a lock read before it was written)
                assert kind == "refused", f"round {n}: {outcomes}"
                assert f"locked by pid {winners[0]} on {socket.gethostname()}" in message, f"round {n}: {outcomes}"
    assert not lock_path(config, KEY).exists()


def test_a_reader_never_sees_a_lock_file_empty_or_half_written_while_takers_race(config, procs):
    _rounds, bad, reads = _race(config, procs)
    assert bad == [], f"the reader saw {len(bad)} incomplete lock file(s) in {reads} reads: {bad[:5]}"
    assert reads > 0


# --- the helpers ------------------------------------------------------------------------------------------------


def test_proc_start_of_this_process_and_a_missing_one(procs):
    assert isinstance(lock.proc_start(os.getpid()), int)
    pid, _start = _dead_pid(procs)
    assert lock.proc_start(pid) is None


def test_proc_start_reads_field_22_past_a_command_name_with_spaces_and_parens(tmp_path):
    fields = ["S", *[str(n) for n in range(4, 22)], "424242", "99"]  # fields 3.. of /proc/PID/stat; 22 = starttime
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text(f"77 (a (b) c) {' '.join(fields)}\n")
    assert lock.proc_start(77, tmp_path) == 424242
    assert lock.proc_start(78, tmp_path) is None


def test_orphans_reads_environ_entries_exactly(tmp_path):
    for pid, env in (
        ("10", b"A=1\0ZENOPS_LOCK=abc\0B=2\0"),
        ("11", b"ZENOPS_LOCK=abcd\0"),  # another token that starts the same
        ("12", b"XZENOPS_LOCK=abc\0"),
        ("13", b"ZENOPS_LOCK=abc"),
        ("15", b"ZENOPS_LOCK=outer,abc\0"),  # held inside another lock
        ("16", b"ZENOPS_LOCK=abc,inner\0"),  # holding another lock inside
        ("17", b"ZENOPS_LOCK=outer,abcd\0"),
    ):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "environ").write_bytes(env)
        (tmp_path / pid / "cmdline").write_bytes(b"ansible-playbook\0-i\0hosts.yml\0")
    # an SSH connection master a run started: shared by every run to that host, so never stopped
    (tmp_path / "18").mkdir()
    (tmp_path / "18" / "environ").write_bytes(b"ZENOPS_LOCK=abc\0")
    (tmp_path / "18" / "cmdline").write_bytes(b"ssh: /root/.ansible/cp/0123abcd [mux]\0")
    (tmp_path / "self").mkdir()
    (tmp_path / "14").mkdir()  # no environ (gone meanwhile)
    assert lock.orphans("abc", tmp_path) == [10, 13, 15, 16]


def test_read_holder_of_an_unreadable_lock_file(tmp_path):
    path = tmp_path / "x.lock"
    assert lock.read_holder(path) is None
    path.write_text("{not json")
    h = lock.read_holder(path)
    assert h is not None
    assert h.pid == 0
    assert "unreadable" in h.command


def test_a_zombie_is_not_running(tmp_path):
    # stop_processes waits only for what still runs: an exited process nobody reaped yet is done
    for pid, state in (("20", "S"), ("21", "Z"), ("22", "R")):
        (tmp_path / pid).mkdir()
        fields = f"{state} 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99"
        (tmp_path / pid / "stat").write_text(f"{pid} (a (b) c) {fields}\n")
    assert [lock._running(p, tmp_path) for p in (20, 21, 22, 23)] == [True, False, True, False]
