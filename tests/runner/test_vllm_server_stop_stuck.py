"""A container Docker cannot stop under a saturating load ("cannot stop container: ... tried to kill container, but
did not receive an exit event"): roles/vllm_server/tasks/stop_stuck.yml kills it and reads its state back until
Docker reports it exited, a bounded number of times, then the host fails in Docker's words. Real Ansible, on this
machine (connection local); Docker is a TEST DOUBLE: a stand-in ``docker`` executable first in PATH that answers
``kill`` with that error and ``inspect`` with a running state for a scripted number of calls (configure.yml's
start-again step after it is not run here: it needs a real Docker, Molecule's vllm_server scenario)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.runner import ansible_json_env, run_playbook, tail
from zenops.paths import venv_bin

ERROR = (
    "Error response from daemon: cannot stop container: zenops-vllm-0: tried to kill container, but did not receive "
    "an exit event"
)

PLAYBOOK = """\
- name: Kill and wait for a container Docker could not stop
  hosts: h1
  gather_facts: false
  tasks:
    - name: As configure.yml includes it for each stuck instance
      ansible.builtin.include_role:
        name: zenops.inference.vllm_server
        tasks_from: stop_stuck.yml
      vars:
        _vllm_server_stuck_instance: {index: 0, port: 8000}
"""


def stand_in_docker(bin_dir: Path, log: Path, *, running_for: int) -> None:
    """A ``docker`` that fails every kill with ERROR and says "running" to the first ``running_for`` inspects,
    "exited" after; each call logged."""
    bin_dir.mkdir()
    script = bin_dir / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case "$1" in\n'
        f"  kill) echo '{ERROR}' >&2; exit 1;;\n"
        "  inspect)\n"
        f"    n=$(grep -c '^inspect' {log})\n"
        f'    if [ "$n" -le {running_for} ]; then s=running; else s=exited; fi\n'
        '    printf \'[{"Name": "/zenops-vllm-0", "State": {"Status": "%s"}}]\\n\' "$s";;\n'
        "esac\n"
    )
    script.chmod(0o755)


def run(tmp_path: Path, *, running_for: int, retries: int) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = tmp_path / "docker.log"
    stand_in_docker(tmp_path / "bin", log, running_for=running_for)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text(
        f"h1 ansible_connection=local ansible_python_interpreter={venv_bin() / 'python'}\n"
    )
    env = ansible_json_env(tmp_path / "ansible-tmp")
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    extra = {"vllm_server_stop_retries": retries, "vllm_server_stop_retry_delay": 0}
    proc = run_playbook(tmp_path / "play.yml", tmp_path / "hosts.ini", env, extra=extra, timeout=300)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_a_container_that_exits_after_some_kills_is_waited_for(tmp_path):
    proc, calls = run(tmp_path, running_for=2, retries=5)
    assert proc.returncode == 0, tail(proc)
    # kill, read back; three times: the third read-back says exited
    assert calls == ["kill zenops-vllm-0", "inspect --type container zenops-vllm-0"] * 3


def test_a_container_that_never_exits_fails_the_host_within_its_bound(tmp_path):
    t0 = time.monotonic()
    proc, calls = run(tmp_path, running_for=1000, retries=3)
    assert time.monotonic() - t0 < 120
    assert proc.returncode != 0
    assert calls.count("kill zenops-vllm-0") == 4  # the first try and 3 retries, no more
    tasks = [t for play in json.loads(proc.stdout)["plays"] for t in play["tasks"]]
    failed = [t["hosts"]["h1"] for t in tasks if t["hosts"]["h1"].get("failed")]
    assert len(failed) == 1
    assert "cannot stop container zenops-vllm-0 on h1: still running after 4 kill(s)" in failed[0]["msg"]
