"""Run a command with a time limit that leaves nothing behind.

``subprocess.run(timeout=...)`` SIGKILLs only the process it started. zenops cannot catch SIGKILL, and ansible-runner
starts ``ansible-playbook`` in a session of its own (pexpect), so a killed ``zenops`` leaves its playbooks running,
reparented to PID 1: in a `--full` run of 2026-11-28 a campaign's two playbooks ran on for 53 minutes after its
timeout, through the rollout fleet's quiet phase. Here a command past its limit gets SIGINT first (zenops then stops
its playbooks and tears down what it made, as on Ctrl-C), ``grace_s`` to end, and then it and every process it
started, found by parent PID before it dies, get SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from zenops.lock import _stat, proc_start


def descendants(pid: int) -> list[tuple[int, int]]:
    """(PID, start time) of every living process under ``pid``, from /proc: the start time tells a later process
    that got a reused PID from the one found here."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:  # state, parent PID, ...
            children.setdefault(int(fields[1]), []).append((int(entry.name), int(fields[19])))
    out: list[tuple[int, int]] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def kill_all(procs: list[tuple[int, int]]) -> None:
    """SIGKILL each (PID, start time) that is still that process."""
    for pid, started in procs:
        if proc_start(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_bounded(
    argv: list[str], *, timeout: float, grace_s: float = 300, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)``, but past its limit
    the command is interrupted (SIGINT, ``grace_s`` to end), then it and every process it had started are killed
    (those that outlived it too); the ``TimeoutExpired`` raised carries the output read so far."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            started = descendants(proc.pid)  # before the signal: once it ends, its orphans have PID 1 as parent
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=grace_s)
            except subprocess.TimeoutExpired:
                started += descendants(proc.pid)
                proc.kill()
                kill_all(started)  # before reading on: a descendant may hold its pipes open
                out, err = proc.communicate()
            else:
                kill_all(started)  # what it started and left behind even after a clean end on SIGINT
            raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err) from None
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)
