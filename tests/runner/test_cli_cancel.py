"""Ctrl-C on the real `zenops` process: the run is canceled cleanly and the exit code is 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zenops.errors import ExitCode

ZENOPS = str(Path(sys.executable).parent / "zenops")


def fake_collection(root: Path, tasks: str) -> Path:
    """A throwaway collection whose up.yml is ours: lets the real CLI run a controlled playbook."""
    (root / "roles").mkdir(parents=True)
    (root / "playbooks").mkdir()
    (root / "galaxy.yml").write_text("namespace: zenops\nname: inference\nversion: 0.0.1\n")
    (root / "playbooks" / "up.yml").write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    return root


def test_sigint_cancels_the_run_and_exits_130(tmp_path, local_inventory):
    sleep = "    - name: Sleep for a long time\n      ansible.builtin.command: sleep 20\n"
    root = fake_collection(tmp_path / "coll", sleep)
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root)}
    proc = subprocess.Popen(
        [ZENOPS, "--json", "up", "-i", str(local_inventory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("kind") == "task" and event.get("task") == "Sleep for a long time":
            break
        assert time.monotonic() < deadline, "the task never started"
    time.sleep(1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == ExitCode.CANCELED, err
    error = json.loads(out.strip().splitlines()[-1])
    assert error["error"] == "CanceledError"
    assert "canceled" in err
    # the sleep on the "host" was stopped along with ansible-playbook or is left, but zenops is gone and said so
    assert "re-run the same command" in err


def test_failed_run_exits_non_zero_naming_host_task_and_message(tmp_path, local_inventory):
    refuse = "    - name: Refuse\n      ansible.builtin.fail:\n        msg: nope on purpose\n"
    root = fake_collection(tmp_path / "coll", refuse)
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root), "COLUMNS": "200"}
    proc = subprocess.run(
        [ZENOPS, "up", "-i", str(local_inventory)], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == ExitCode.RUN_FAILED
    assert "localhost: failed at task 'Refuse': nope on purpose" in proc.stderr
