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


def test_sigterm_cancels_the_run_like_ctrl_c_and_exits_143(tmp_path, local_inventory):
    """kill / systemctl stop: the playbook is canceled (not left running), zenops says so, exit 128 + SIGTERM."""
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
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("kind") == "task" and event.get("task") == "Sleep for a long time":
            break
    time.sleep(1)
    t0 = time.monotonic()
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30  # the 20 s sleep did not run to its end
    assert proc.returncode == 143, err
    assert json.loads(out.strip().splitlines()[-1])["error"] == "CanceledError"
    assert "canceled" in err


def test_failed_run_exits_non_zero_naming_host_task_and_message(tmp_path, local_inventory):
    refuse = "    - name: Refuse\n      ansible.builtin.fail:\n        msg: nope on purpose\n"
    root = fake_collection(tmp_path / "coll", refuse)
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root), "COLUMNS": "200"}
    proc = subprocess.run(
        [ZENOPS, "up", "-i", str(local_inventory)], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == ExitCode.RUN_FAILED
    assert "localhost: failed at task 'Refuse': nope on purpose" in proc.stderr


def test_a_failed_loop_names_its_failed_item_and_why(tmp_path, local_inventory):
    """Ansible says only "One or more items failed" for a loop; zenops names the item and its message (the health
    gate loops over a host's servers: which one failed, and why, is the whole point)."""
    loop = (
        "    - name: Check each server\n      ansible.builtin.fail:\n        msg: 'server {{ item }} is down'\n"
        "      when: item == 'b'\n      loop: [a, b, c]\n"
    )
    root = fake_collection(tmp_path / "coll", loop)
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root), "COLUMNS": "200"}
    proc = subprocess.run(
        [ZENOPS, "up", "-i", str(local_inventory)], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == ExitCode.RUN_FAILED
    assert "failed at task 'Check each server': item b: server b is down" in proc.stderr, proc.stderr


def _playbooks_of(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (``ZENOPS_LOCK=<token>``: a lock holder's playbooks)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in env:
            out.append(int(entry.name))
    return out


def _running(pids: list[int]) -> list[int]:
    """Those of ``pids`` still alive (not zombies waiting for their parent)."""
    out = []
    for p in pids:
        try:
            if Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(p)
        except OSError:
            pass
    return out


def test_kill_9_of_up_leaves_a_dead_lock_whose_orphaned_playbook_the_next_up_stops(tmp_path, local_inventory):
    """The issue's case: `kill -9` of a `zenops up` leaves its ansible-playbook running; the next `up` of the same
    inventory finds the dead holder, stops that orphan (found by the lock token in its environment) and takes over,
    instead of running beside it."""
    sleep = "    - name: Sleep for a long time\n      ansible.builtin.command: sleep 120\n"
    root = fake_collection(tmp_path / "coll", sleep)
    state = tmp_path / "state"
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root), "XDG_STATE_HOME": str(state)}
    first = subprocess.Popen(
        [ZENOPS, "--json", "up", "-i", str(local_inventory)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert first.stdout is not None
    for line in first.stdout:
        if json.loads(line).get("task") == "Sleep for a long time":
            break
    time.sleep(1)
    lock = json.loads(next((state / "zenops" / "locks").glob("*.lock")).read_text())
    assert lock["pid"] == first.pid
    token = f"ZENOPS_LOCK={lock['token']}"
    orphans = _playbooks_of(token)
    assert orphans, "the playbook does not carry the lock's token"
    first.kill()  # kill -9: no cleanup at all
    first.wait(timeout=10)
    assert _running(orphans), "nothing was left running: no orphan to test"

    # a second `up` of the same inventory: the holder is dead, its playbook is stopped, then it runs
    quick = fake_collection(tmp_path / "coll2", "    - name: Quick\n      ansible.builtin.command: 'true'\n")
    second = subprocess.run(
        [ZENOPS, "up", "-i", str(local_inventory)], capture_output=True, text=True, timeout=120, check=False,
        env={**env, "ZENOPS_COLLECTION_ROOT": str(quick)},
    )  # fmt: skip
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"pid {first.pid}" in second.stderr, second.stderr
    assert "orphaned process" in second.stderr, second.stderr
    time.sleep(0.5)
    assert not _running(_playbooks_of(token)), "the orphaned playbook still runs"
    assert not list((state / "zenops" / "locks").glob("*.lock")), "the lock was not released"


def test_a_live_holder_makes_a_second_up_refuse_naming_it(tmp_path, local_inventory):
    sleep = "    - name: Sleep for a long time\n      ansible.builtin.command: sleep 60\n"
    root = fake_collection(tmp_path / "coll", sleep)
    env = {**os.environ, "ZENOPS_COLLECTION_ROOT": str(root), "XDG_STATE_HOME": str(tmp_path / "state")}
    first = subprocess.Popen(
        [ZENOPS, "--json", "up", "-i", str(local_inventory)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if json.loads(line).get("task") == "Sleep for a long time":
                break
        second = subprocess.run(
            [ZENOPS, "up", "-i", str(local_inventory)], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert second.returncode == ExitCode.LOCKED, second.stderr
        assert f"pid {first.pid}" in second.stderr
        assert "zenops --json up" in second.stderr  # the holder's command
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
