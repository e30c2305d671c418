"""The runner wrapper against real ansible-playbook runs (local connection): events, results, failures, cancel."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from zenops.errors import CanceledError, ExitCode, RunFailedError, ZenopsError
from zenops.lock import processes_with
from zenops.runner import RUN_ENV, RunEvent, RunnerSettings, RunResult, RunSpec, check_no_secrets, run_playbook


class Collect:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []
        self.results: list[RunResult] = []

    def event(self, event: RunEvent) -> None:
        self.events.append(event)

    def finished(self, result: RunResult) -> None:
        self.results.append(result)

    def kinds(self, kind: str) -> list[RunEvent]:
        return [e for e in self.events if e.kind == kind]


def write(tmp_path: Path, body: str) -> Path:
    pb = tmp_path / "pb.yml"
    pb.write_text(body)
    return pb


@pytest.fixture
def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(state_dir=tmp_path / "state", keep_runs=3)


OK_PLAYBOOK = """
- name: Demo play
  hosts: all
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.command: echo hello
      changed_when: false
    - name: Touch a file
      ansible.builtin.file:
        path: "{{ target }}"
        state: touch
    - name: Report to zenops
      ansible.builtin.set_fact:
        zenops_report: {answer: 42}
        not_for_zenops: 1
"""


def test_successful_run_reports_events_stats_and_facts(tmp_path, settings, local_inventory):
    sink = Collect()
    target = tmp_path / "touched"
    result = run_playbook(
        RunSpec(playbook=write(tmp_path, OK_PLAYBOOK), inventory=local_inventory, extravars={"target": str(target)}),
        settings,
        sink,
    )
    assert target.exists()
    assert result.ok
    assert result.status == "successful"
    assert result.rc == 0
    assert [e.play for e in sink.kinds("play")] == ["Demo play"]
    assert [e.task for e in sink.kinds("task")] == ["Say hello", "Touch a file", "Report to zenops"]
    assert [e.task for e in sink.kinds("changed")] == ["Touch a file"]
    assert {e.host for e in sink.kinds("ok")} == {"localhost"}
    assert result.stats["localhost"].changed == 1
    assert result.stats["localhost"].ok == 3
    assert result.host_facts == {"localhost": {"zenops_report": {"answer": 42}}}
    assert sink.results == [result]
    # private data dir: 0700, with a result.json and the per-run ansible.cfg
    mode = stat.S_IMODE(result.run_dir.stat().st_mode)
    assert mode == 0o700
    assert (result.run_dir / "result.json").is_file()
    assert "collections_path" in (result.run_dir / "ansible.cfg").read_text()


def test_failed_task_names_host_task_and_message(tmp_path, settings, local_inventory):
    pb = write(
        tmp_path,
        """
- hosts: all
  gather_facts: false
  tasks:
    - name: Ignored failure
      ansible.builtin.command: /bin/false
      ignore_errors: true
    - name: Rescued failure
      block:
        - name: Fails inside a block
          ansible.builtin.fail: {msg: will be rescued}
      rescue:
        - name: Rescue it
          ansible.builtin.debug: {msg: rescued}
    - name: Break on purpose
      ansible.builtin.fail:
        msg: the disk is full on purpose
    - name: Never reached
      ansible.builtin.debug: {msg: unreachable}
""",
    )
    sink = Collect()
    with pytest.raises(RunFailedError) as info:
        run_playbook(RunSpec(playbook=pb, inventory=local_inventory), settings, sink)
    err = info.value
    assert err.exit_code == ExitCode.RUN_FAILED
    assert len(err.failures) == 1
    failure = err.failures[0]
    assert (failure.host, failure.task, failure.message) == (
        "localhost",
        "Break on purpose",
        "the disk is full on purpose",
    )
    assert "localhost: failed at task 'Break on purpose': the disk is full on purpose" in str(err)
    assert err.run_dir
    assert Path(err.run_dir).is_dir()
    assert "Never reached" not in [e.task for e in sink.kinds("task")]
    assert any(e.ignored for e in sink.kinds("failed"))


def test_unreachable_host_has_its_own_exit_code(tmp_path, settings):
    inv = tmp_path / "inv.ini"
    inv.write_text("nowhere ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n")
    pb = write(
        tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n      ansible.builtin.ping:\n"
    )
    with pytest.raises(RunFailedError) as info:
        run_playbook(RunSpec(playbook=pb, inventory=inv), settings)
    assert info.value.exit_code == ExitCode.UNREACHABLE
    assert info.value.failures[0].unreachable
    assert info.value.failures[0].host == "nowhere"


def test_ctrl_c_while_the_run_starts_cancels_it_instead_of_leaving_it_running(tmp_path, settings, local_inventory):
    """A Ctrl-C that lands while ansible-runner starts its thread (found by the fleet e2e: a rollout interrupted at
    that moment stayed alive for the whole playbook): the started run is canceled and the call raises CanceledError
    quickly. The real run_async runs; the wrapper only delivers the signal right after it returns."""
    import signal  # noqa: PLC0415

    import ansible_runner  # noqa: PLC0415

    pb = write(tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.command: sleep 120\n")
    real = ansible_runner.run_async

    def run_async_then_ctrl_c(**kwargs):
        started = real(**kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)  # the handler runs here
        return started

    assert threading.current_thread() is threading.main_thread()
    ansible_runner.run_async = run_async_then_ctrl_c
    t0 = time.monotonic()
    try:
        with pytest.raises(CanceledError):
            run_playbook(RunSpec(playbook=pb, inventory=local_inventory), settings, Collect())
    finally:
        ansible_runner.run_async = real
    assert time.monotonic() - t0 < 30


def test_cancel_stops_a_long_task_quickly(tmp_path, settings, local_inventory):
    pb = write(
        tmp_path,
        """
- hosts: all
  gather_facts: false
  tasks:
    - name: Sleep for a long time
      ansible.builtin.command: sleep 120
""",
    )
    cancel = threading.Event()

    class CancelOnTask(Collect):
        def event(self, event: RunEvent) -> None:
            super().event(event)
            if event.kind == "task":
                threading.Timer(1.0, cancel.set).start()

    t0 = time.monotonic()
    with pytest.raises(CanceledError) as info:
        run_playbook(RunSpec(playbook=pb, inventory=local_inventory), settings, CancelOnTask(), cancel)
    assert time.monotonic() - t0 < 30
    assert info.value.exit_code == ExitCode.CANCELED
    # nothing of the run is left on this machine: ansible-runner stops ansible-playbook only, and its forked worker
    # went on running the task (an orphan) until the task ended; the run's marker finds them
    (run_dir,) = (settings.state_dir / "runs").iterdir()
    assert processes_with(RUN_ENV, run_dir.name) == []
    assert "stopped" in info.value.message, info.value.message


def test_secrets_are_refused_before_anything_runs(tmp_path, settings, local_inventory):
    pb = write(tmp_path, OK_PLAYBOOK)
    with pytest.raises(ZenopsError, match="hf_token"):
        run_playbook(RunSpec(playbook=pb, inventory=local_inventory, extravars={"hf_token": "abc"}), settings)
    assert not (settings.state_dir / "runs").exists()


@pytest.mark.parametrize(
    "extravars",
    [
        {"vllm": {"api_key": "k"}},
        {"note": "hf_" + "a" * 34},
        {"keys": ["-----BEGIN OPENSSH " + "PRIVATE KEY-----"]},  # split: no key-shaped literal in the repo
        {"db_password": "x"},
        {"token": "x"},
        {"HF_TOKEN": "x"},
        {"openai-apikey": "x"},
        {"api_keys": ["x"]},
        {"vllm_image_pip_index_url": "https://deploy:s3cret@pypi.example/simple"},
    ],
)
def test_check_no_secrets_finds_nested_secrets(extravars):
    with pytest.raises(ZenopsError):
        check_no_secrets(extravars)


def test_check_no_secrets_allows_file_references_and_counts():
    check_no_secrets(
        {"hf_token_file": "/root/.zenops/hf_token", "api_key_file": "/x", "docker_users": ["a"], "hf_token": None}
    )
    # plans carry token counts: those are numbers, not secrets
    check_no_secrets({"plan": {"instances": [{"kv_tokens": 10240, "max_tokens": 8, "tokenizer": "/m"}]}})
    check_no_secrets({"vllm_image_pip_index_url": "https://pypi.example/simple", "url": "http://host:8000/v1"})


def test_old_run_dirs_are_pruned(tmp_path, settings, local_inventory):
    pb = write(tmp_path, OK_PLAYBOOK)
    dirs = []
    for _ in range(4):
        r = run_playbook(
            RunSpec(playbook=pb, inventory=local_inventory, extravars={"target": str(tmp_path / "t")}), settings
        )
        dirs.append(r.run_dir)
    kept = sorted(p.name for p in (settings.state_dir / "runs").iterdir())
    assert len(kept) == settings.keep_runs
    assert dirs[-1].name in kept
    assert dirs[0].name not in kept


def test_missing_inventory_is_a_usage_error(tmp_path, settings):
    with pytest.raises(ZenopsError, match=r"inventory .* not found") as info:
        run_playbook(RunSpec(playbook=write(tmp_path, OK_PLAYBOOK), inventory=tmp_path / "nope.yml"), settings)
    assert info.value.exit_code == ExitCode.USAGE


def test_limit_matching_no_host_is_a_usage_error(tmp_path, settings, local_inventory):
    with pytest.raises(ZenopsError, match="no hosts matching --limit nowhere") as info:
        run_playbook(
            RunSpec(playbook=write(tmp_path, OK_PLAYBOOK), inventory=local_inventory, limit="nowhere"), settings
        )
    assert info.value.exit_code == ExitCode.USAGE


def test_secrets_in_the_operators_environment_never_land_in_the_run_dir(
    tmp_path, settings, local_inventory, monkeypatch
):
    token = "hf_" + "Q" * 34
    key = "zk-operator-key-" + "9" * 20
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("VLLM_API_KEY", key)
    pb = write(
        tmp_path,
        """
- name: Look at the environment
  hosts: all
  gather_facts: false
  tasks:
    - name: Report what Ansible saw
      ansible.builtin.set_fact:
        zenops_seen: "{{ lookup('ansible.builtin.env', 'HF_TOKEN') | length }}"
""",
    )
    result = run_playbook(RunSpec(playbook=pb, inventory=local_inventory), settings)
    assert result.host_facts["localhost"]["zenops_seen"] in (0, "0")  # not even Ansible sees it
    leaked = [
        p
        for p in result.run_dir.rglob("*")
        if p.is_file() and (token in p.read_text(errors="replace") or key in p.read_text(errors="replace"))
    ]
    assert leaked == []
    assert (result.run_dir / "artifacts").is_dir()  # the artifacts were written, and searched
    assert os.environ["HF_TOKEN"] == token  # the operator's environment is restored
