"""The bench entry point brings its artifacts home to paths built from the file list the host reports
(roles/vllm_server/tasks/bench_home.yml), run by real Ansible on this machine (connection local).

A compromised server can report any list: ansible.builtin.fetch's own traversal check does not apply with
``flat: true``, so a forged ``../../../../`` path once wrote four levels above the run's results, where it could
rewrite another deployment's inventory in the state directory. Only the host's report is forged here (the
registered result of "Find the artifacts"); the fetch, the check and the files are real.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.runner import ansible_json_env, run_playbook, tail
from zenops.paths import venv_bin

PLAYBOOK = """\
- name: Bring a host's bench artifacts home as the role does
  hosts: server
  gather_facts: false
  tasks:
    - name: The artifacts home
      ansible.builtin.include_role:
        name: zenops.inference.vllm_server
        tasks_from: bench_home.yml
      vars:
        _vllm_server_bench_files: "{{ reported }}"
"""


def bring_home(tmp_path: Path, reported: list[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run bench_home.yml with ``reported`` as the host's list; returns the run and the controller's dest."""
    data = tmp_path / "host" / "data"
    run_dir = data / "bench" / "r1"
    (run_dir / "0").mkdir(parents=True)
    (run_dir / "0" / "zen-c1.json").write_text('{"ok": true}\n')
    # what the compromised host serves under the forged name (four levels above its result directory)
    (tmp_path / "d2").mkdir()
    (tmp_path / "d2" / "hosts.yml").write_text(EVIL)
    dest = tmp_path / "state" / "deployments" / "d1" / "bench" / "r1"
    dest.mkdir(parents=True)
    playbook = tmp_path / "home.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"server ansible_connection=local ansible_python_interpreter={venv_bin() / 'python'}\n")
    extra: dict[str, Any] = {
        "reported": {"files": [{"path": p.format(run_dir=run_dir, tmp=tmp_path)} for p in reported]},
        "vllm_server_data_dir": str(data),
        "vllm_server_bench_run_id": "r1",
        "vllm_server_bench_dest": str(dest),
    }
    proc = run_playbook(playbook, inventory, ansible_json_env(tmp_path / "ansible-tmp"), extra=extra, timeout=300)
    return proc, dest


EVIL = "all: {vars: {ansible_ssh_common_args: -o ProxyCommand=pwned}}\n"


def written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_the_artifacts_a_host_lists_come_home_under_its_name(tmp_path):
    proc, dest = bring_home(tmp_path, ["{run_dir}/0/zen-c1.json"])
    assert proc.returncode == 0, tail(proc)
    assert written(dest) == ["server/0/zen-c1.json"]


def test_a_forged_path_out_of_the_results_is_refused_and_nothing_is_written(tmp_path):
    # four levels up from <dest>/<host>/ is the state directory's deployments/: another deployment's inventory
    forged = "{run_dir}/../../../../d2/hosts.yml"
    before = written(tmp_path / "state")
    proc, _ = bring_home(tmp_path, ["{run_dir}/0/zen-c1.json", forged])
    assert proc.returncode != 0, "a forged artifact path was accepted"
    assert written(tmp_path / "state") == before, "a forged artifact path wrote on the controller"
    out = json.loads(proc.stdout)
    msgs = [t["hosts"]["server"].get("msg", "") for p in out["plays"] for t in p["tasks"] if "server" in t["hosts"]]
    assert any("../" in m and "refus" in m for m in msgs), msgs


def test_an_absolute_path_outside_the_results_is_refused(tmp_path):
    before = written(tmp_path / "state")
    proc, _ = bring_home(tmp_path, ["{tmp}/d2/hosts.yml"])
    assert proc.returncode != 0, "a path outside the result directory was accepted"
    assert written(tmp_path / "state") == before, "a path outside the result directory was fetched"
