"""How the vllm_image role keeps a builder's tarball in the controller's image cache (roles/vllm_image/tasks/keep.yml),
run by real Ansible: several runs on one controller at once, as a campaign deploys its flavors side by side.

The builder here is this machine (connection local): keep.yml's fetch, link and eviction are the real tasks; only
`docker save` (save.yml, before keep.yml) is not run, the tarball is a file of random bytes. The whole cold path, with
a real image, is Molecule's vllm_image scenario and the campaign e2e.

A campaign's `--full` run failed here once: two `up`s fetched into one `<name>.tar.partial`, and one fetch ended in
"checksum mismatch". The first test fails on that code: the other run's partial file is rewritten and renamed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.runner import ansible_json_env
from zenops.paths import venv_bin

TAG = "zenops/vllm-keep-test:v1"
DIGEST = "ab" * 32
NAME = f"zenops_vllm-keep-test_v1-{DIGEST}.tar"

PLAYBOOK = """\
- name: Keep a builder's tarball in the controller's image cache
  hosts: builder
  gather_facts: false
  tasks:
    - name: Keep it as the role does after a build
      ansible.builtin.include_role:
        name: zenops.inference.vllm_image
        tasks_from: keep.yml
      vars:
        _vllm_image_keep_src: "{{ keep_src }}"
"""


def _start(tmp_path: Path, run: str, src: Path, cache: Path) -> subprocess.Popen[str]:
    work = tmp_path / run
    work.mkdir()
    playbook = work / "keep.yml"
    playbook.write_text(PLAYBOOK)
    inventory = work / "hosts.ini"
    inventory.write_text(f"builder ansible_connection=local ansible_python_interpreter={venv_bin() / 'python'}\n")
    extra = {
        "keep_src": str(src),
        "vllm_image_tag": TAG,
        "_vllm_image_digest": DIGEST,
        "vllm_image_controller_cache": str(cache),
        "vllm_image_builder": "builder",
        "vllm_image_cache_keep": 2,
    }
    env = ansible_json_env(work / "ansible-tmp")
    return subprocess.Popen(
        [
            str(venv_bin() / "ansible-playbook"),
            "-i",
            str(inventory),
            "-e",
            json.dumps(extra),
            str(playbook),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> None:
    """Wait for a run; it must pass and must have fetched (a play that matched no host passes too)."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:] + err[-2000:]
    tasks = [t for play in json.loads(out)["plays"] for t in play["tasks"]]
    fetched = [
        t["hosts"]["builder"]
        for t in tasks
        if t["task"]["name"].endswith(" : Fetch the image tarball into the controller's cache")
    ]
    assert len(fetched) == 1, out[-4000:]
    assert not fetched[0].get("skipped"), out[-4000:]


def _tarball(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def _partials(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.endswith(".partial"))


def test_keep_never_writes_another_runs_partial_file_and_drops_abandoned_ones(tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    # another run's fetches in flight: under the name every run used before, and under a run's own name
    theirs_old = cache / f"{NAME}.partial"
    theirs_old.write_bytes(b"another run's bytes, half-written")
    theirs = cache / f"{NAME}.q1w2e3r4.partial"
    theirs.write_bytes(b"a third run's bytes")
    # a killed run's partial file, two hours old
    abandoned = cache / f"{NAME}.zzzzzzzz.partial"
    abandoned.write_bytes(b"x")
    old = time.time() - 7200
    os.utime(abandoned, (old, old))
    ours = _tarball(tmp_path / "export.tar", 8 << 20)

    _finish(_start(tmp_path, "run", tmp_path / "export.tar", cache))

    assert (cache / NAME).read_bytes() == ours
    assert theirs_old.read_bytes() == b"another run's bytes, half-written"
    assert theirs.read_bytes() == b"a third run's bytes"
    assert _partials(cache) == sorted([theirs_old.name, theirs.name])  # ours removed, the abandoned one evicted


def test_keep_leaves_the_tarball_another_run_kept_first(tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / NAME).write_bytes(b"the first run's complete tarball")
    _tarball(tmp_path / "export.tar", 1 << 20)

    _finish(_start(tmp_path, "run", tmp_path / "export.tar", cache))

    assert (cache / NAME).read_bytes() == b"the first run's complete tarball"
    assert _partials(cache) == []


def test_two_runs_keep_one_image_at_once(tmp_path: Path):
    cache = tmp_path / "cache"  # absent: the first run on a fresh machine creates it (both try)
    data = {run: _tarball(tmp_path / f"{run}.tar", 64 << 20) for run in ("a", "b")}

    procs = [_start(tmp_path, run, tmp_path / f"{run}.tar", cache) for run in data]
    for proc in procs:
        _finish(proc)

    assert (cache / NAME).read_bytes() in data.values()
    assert _partials(cache) == []
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
