"""The e2e tests' time limit (tests/e2e/bounded.py): past it, the command is interrupted, then it and everything it
started are gone, even a process in a session of its own that ignores SIGINT (as ansible-runner's playbooks are)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.bounded import run_bounded
from zenops.lock import _running


def wait_gone(pid: int, within_s: float = 10) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _running(pid):  # gone, or a zombie: exited
            return True
        time.sleep(0.05)
    return False


def test_in_time_is_subprocess_run() -> None:
    done = run_bounded([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                       timeout=30)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_past_its_limit_an_interrupt_lets_it_clean_up_and_its_output_is_kept() -> None:
    code = (
        "import time\n"
        "try:\n    print('started', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n    print('cleaned up')\n"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_bounded([sys.executable, "-c", code], timeout=1, grace_s=30)
    assert time.monotonic() - t0 < 20  # it ended on SIGINT, not at the end of its grace
    assert e.value.output == "started\ncleaned up\n"


def test_past_its_grace_it_and_a_detached_child_that_ignores_sigint_are_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # the child: a session of its own (as pexpect gives ansible-playbook), SIGINT ignored; the parent ignores it too
    script = f"trap '' INT; setsid sleep 300 & echo $! > {pidfile}; sleep 300"
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded(["bash", "-c", script], timeout=1, grace_s=1)
    child = int(pidfile.read_text())
    assert wait_gone(child), f"the detached child {child} outlived the time limit"


def test_a_child_left_behind_by_a_clean_exit_on_sigint_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # the parent ends on SIGINT at once; its child, in a session of its own and off our pipes (as pexpect gives
    # ansible-playbook a pty), would be reparented to PID 1
    code = (
        "import subprocess, sys, time\n"
        "quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "child = subprocess.Popen(['sleep', '300'], start_new_session=True, **quiet)\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "try:\n    time.sleep(300)\nexcept KeyboardInterrupt:\n    sys.exit(130)\n"
    )
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded([sys.executable, "-c", code], timeout=2, grace_s=60)
    assert time.monotonic() - t0 < 30  # the parent ended on SIGINT, within its grace
    child = int(pidfile.read_text())
    assert wait_gone(child), f"the detached child {child} outlived its parent's clean end"
