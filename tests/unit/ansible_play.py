"""Run a generated playbook against local hosts with this checkout's collection, as `zenops` and scripts/test do.

For tests that must see what Ansible itself makes of a role (its defaults and vars, its planning tasks, its
templates) instead of a re-implementation of it: one ``ansible-playbook`` run for many cases, one play per case
(run_once in a role applies to the whole play), each case's results collected as host facts and written once by a
last play on localhost.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# ansible-playbook itself (its main(), as the console script calls it), with the zenops modules the collection's filter
# plugins import loaded first: every task runs in a process forked from this one, and would import them again.
ANSIBLE_PLAYBOOK = [
    sys.executable,
    "-c",
    "import sys; import zenops.bench, zenops.planner; from ansible.cli.playbook import main;"
    " main(['ansible-playbook', *sys.argv[1:]])",
]
RESULT_FACT = "zenops_test_result"


def collections_path(cache_dir: Path) -> str:
    """ANSIBLE_COLLECTIONS_PATH as scripts/test gets it: `python -m zenops.paths` (its link kept under cache_dir)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir)}
    env.pop("ZENOPS_COLLECTION_ROOT", None)
    path = subprocess.run(
        [sys.executable, "-m", "zenops.paths"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (Path(path) / "ansible_collections" / "zenops" / "inference").resolve() == REPO
    return path


def shared_by_workers(basetemp: Path, name: str, key: object, produce: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``produce()`` once per test session, also under pytest-xdist: the first worker to get here runs it, the others
    wait for it and read its JSON result (the xdist workers of a session share the parent of their basetemp)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return produce()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = basetemp.parent / f"{name}-{digest}.json"
    with (basetemp.parent / f"{name}-{digest}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            shared: dict[str, Any] = json.loads(path.read_text())
            return shared
        result = produce()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
        return result


def run_cases(workdir: Path, plays: dict[str, dict[str, Any]], *, split: int = 1, timeout: int = 600) -> dict[str, Any]:
    """Run one play per case (the key is the case's host name) and return each case's ``zenops_test_result`` fact.

    Every play runs on its own local host (``ansible_connection=local``, this Python) without fact gathering; its
    tasks set the fact ``zenops_test_result``. The cases are shared out over ``split`` ansible-playbook processes run
    side by side. A case that leaves no such fact is reported, with the run's output.
    """
    names = list(plays)
    chunks = [names[i::split] for i in range(split) if names[i::split]]
    collections = collections_path(workdir / "cache")
    procs = [_start(workdir / f"run{i}", {n: plays[n] for n in chunk}, collections) for i, chunk in enumerate(chunks)]
    results: dict[str, Any] = {}
    for run_dir, proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise AssertionError(f"ansible-playbook took over {timeout} s:\n{stdout[-20000:]}\n{stderr}") from None
        assert proc.returncode == 0, f"ansible-playbook exited {proc.returncode}:\n{stdout[-20000:]}\n{stderr}"
        chunk_results = json.loads((run_dir / "results.json").read_text())
        missing = sorted(name for name in chunk_results if chunk_results[name] is None and name in plays)
        assert not missing, f"no result for {missing}:\n{stdout[-20000:]}"
        results.update(chunk_results)
    assert set(plays) <= set(results), f"no result for {sorted(set(plays) - set(results))}"
    return {name: results[name] for name in plays}


def _start(workdir: Path, plays: dict[str, dict[str, Any]], collections: str) -> tuple[Path, subprocess.Popen[str]]:
    workdir.mkdir(parents=True, exist_ok=True)
    inventory = {
        "all": {
            "hosts": {
                name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for name in plays
            }
        }
    }
    playbook: list[dict[str, Any]] = [
        {"name": name, "hosts": name, "gather_facts": False, **p} for name, p in plays.items()
    ]
    playbook.append(
        {
            "name": "Collect the results",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Write every case's result",
                    "ansible.builtin.copy": {
                        "dest": str(workdir / "results.json"),
                        "mode": "0644",
                        "content": (
                            "{{ dict(groups['all'] | zip(groups['all'] | map('extract', hostvars)"
                            f" | map(attribute='{RESULT_FACT}', default=none))) | to_json }}}}"
                        ),
                    },
                }
            ],
        }
    )
    (workdir / "inventory.json").write_text(json.dumps(inventory))
    (workdir / "playbook.json").write_text(json.dumps(playbook, indent=1))
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": collections,
        "ANSIBLE_HOME": str(workdir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }
    proc = subprocess.Popen(
        [*ANSIBLE_PLAYBOOK, "-i", str(workdir / "inventory.json"), str(workdir / "playbook.json")],
        env=env,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return workdir, proc
