"""The llamacpp_server role's image through the controller's image cache (roles/llamacpp_server/tasks/image.yml), run
by real Ansible against this machine's Docker (connection local), without compiling llama.cpp.

The image here is a STAND-IN: zenops/busybox re-tagged with the name the role computes (<repo>:<version>-<digest12>)
and the io.zenops.inputs label of its inputs, so the role takes it for its llama.cpp build. The runs skip the tag
llamacpp_server_image_build (the compile); where the role would build, the test checks the build's condition (the
host has no image of these inputs) and that nothing was saved. The cache is a temporary XDG_CACHE_HOME.

Paths: nothing anywhere -> the build; the host has it -> saved into the cache (the repository bounded to
llamacpp_server_image_cache_keep); the host lacks it and the cache has it -> loaded; a cached tarball that does not
load, or gives another inputs label -> dropped, and the build.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runner import ansible_json_env, json_of, run_playbook
from zenops.paths import venv_bin

STANDIN_BASE = "zenops/busybox:latest"
VERSION = "11434.0.0"
SAVE = "Save the image on the builder"  # roles/vllm_image/tasks/save.yml's docker save, run for this image

PLAYBOOK = """\
- name: The llamacpp_server image step on this machine
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role's image task file
      ansible.builtin.include_role:
        name: zenops.inference.llamacpp_server
        tasks_from: image.yml

    - name: Report what the role decided
      ansible.builtin.debug:
        msg:
          how: "{{ llamacpp_server_image_how }}"
          current: "{{ _llamacpp_server_image_current | bool }}"
          ref: "{{ _llamacpp_server_image_ref }}"
          digest: "{{ _llamacpp_server_image_digest }}"
          archive: "{{ _llamacpp_server_image_archive }}"
"""


def _docker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nice", "-n", "19", "docker", *args], input=stdin, capture_output=True, text=True, timeout=300, check=False
    )


def _docker_ok(*args: str, stdin: str | None = None) -> str:
    proc = _docker(*args, stdin=stdin)
    assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture
def repo() -> Iterator[str]:
    """A repository of this test's own; its images are removed afterwards."""
    if _docker("image", "inspect", STANDIN_BASE).returncode != 0:
        pytest.skip(f"{STANDIN_BASE} is not in this machine's Docker (the stand-in is built from it)")
    name = f"zenops-test/llamacpp-standin-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        refs = _docker("images", "--filter", f"reference={name}*", "--format", "{{.Repository}}:{{.Tag}}").stdout
        ids = refs.split()
        if ids:
            _docker("rmi", "--force", *ids)


def _standin(ref: str, label: str) -> None:
    """The stand-in image: busybox under the role's name, with an inputs label."""
    labels = [f"--label=io.zenops.inputs={label}", "--label=io.zenops.test=llamacpp-image-cache-standin"]
    _docker_ok("build", "--quiet", "--tag", ref, *labels, "-", stdin=f"FROM {STANDIN_BASE}\n")


def _run(tmp_path: Path, repo: str, keep: int = 2, **extra: Any) -> dict[str, Any]:
    """One run of the image step; returns the role's decision (how, current, ref, digest, archive)."""
    tasks = _play(tmp_path, {"host": repo}, keep, **extra)["plays"][0]["tasks"]
    report = tasks[-1]["hosts"]["host"]["msg"]
    report["tasks"] = {t["task"]["name"].split(" : ")[-1]: t["hosts"]["host"] for t in tasks if "host" in t["hosts"]}
    return dict(report)


def _play(tmp_path: Path, repos: dict[str, str], keep: int = 2, **more: Any) -> dict[str, Any]:
    """One run of the image step on the hosts of ``repos`` (each this machine, with its repository); the play's
    JSON."""
    work = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    (work / "play.yml").write_text(PLAYBOOK)
    python = venv_bin() / "python"
    (work / "hosts.ini").write_text(
        "".join(
            f"{host} ansible_connection=local ansible_python_interpreter={python} llamacpp_server_image_repo={repo}\n"
            for host, repo in repos.items()
        )
    )
    extra = {
        "llamacpp_server_image_version": VERSION,
        "llamacpp_server_image_base_image": STANDIN_BASE,  # on the host: no pull; its id is an input like any base's
        "llamacpp_server_image_build_dir": str(tmp_path / "build"),
        "llamacpp_server_image_cache_keep": keep,
        **more,
    }
    env = ansible_json_env(work / "ansible-tmp", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("ZENOPS_IMAGE_CACHE", None)
    args = ["--skip-tags", "llamacpp_server_image_build"]
    return json_of(run_playbook(work / "play.yml", work / "hosts.ini", env, extra=extra, args=args))


def _cache(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "zenops" / "images"


def _label(ref: str) -> str:
    proc = _docker("image", "inspect", "--format", '{{index .Config.Labels "io.zenops.inputs"}}', ref)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def test_image_goes_through_the_controller_cache(tmp_path: Path, repo: str):
    cache = _cache(tmp_path)

    # nothing on the host, no cache: the role would build (and saves nothing)
    first = _run(tmp_path, repo)
    ref, digest, archive = first["ref"], first["digest"], first["archive"]
    assert ref == f"{repo}:{VERSION}-{digest[:12]}"
    assert archive == f"{repo.replace('/', '_')}_{VERSION}-{digest}.tar"
    assert first["current"] is False
    assert first["how"] == ""
    assert not cache.exists() or not list(cache.iterdir())

    # older tarballs of this repository (another version, another CPU kind) and another repository's
    cache.mkdir(parents=True, exist_ok=True)
    slug = repo.replace("/", "_")
    older = {
        f"{slug}_11000.0.0-{'1' * 64}.tar": time.time() - 3 * 86400,
        f"{slug}_{VERSION}-{'2' * 64}.tar": time.time() - 86400,
        f"zenops_vllm-zen_x-{'3' * 64}.tar": time.time() - 9 * 86400,
    }
    for name, mtime in older.items():
        (cache / name).write_bytes(b"older")
        os.utime(cache / name, (mtime, mtime))

    # the host has it, the cache lacks it: kept in the cache, the repository bounded to two tarballs
    _standin(ref, digest)
    second = _run(tmp_path, repo)
    assert second["current"] is True
    assert second["how"] == "present"
    tarball = cache / archive
    assert tarball.stat().st_size > 100_000  # a docker save of busybox, not a stub
    names = sorted(p.name for p in cache.iterdir())
    assert names == sorted([archive, f"{slug}_{VERSION}-{'2' * 64}.tar", f"zenops_vllm-zen_x-{'3' * 64}.tar"])
    saved = tarball.read_bytes()

    # the host lacks it, the cache has it: loaded, labelled; the tarball stays and is marked as used
    _docker_ok("rmi", ref)
    os.utime(tarball, (1, 1))
    third = _run(tmp_path, repo)
    assert third["current"] is True
    assert third["how"] == "cache"
    assert _label(ref) == digest
    assert tarball.read_bytes() == saved
    assert tarball.stat().st_mtime > time.time() - 600
    assert SAVE in second["tasks"]
    assert SAVE not in third["tasks"]
    assert not any(p.name.endswith(".partial") for p in cache.iterdir())

    # the host has it and the cache too: nothing changes (Molecule's idempotence), the tarball is not touched
    os.utime(tarball, (1, 1))
    fourth = _run(tmp_path, repo)
    assert fourth["how"] == "present"
    assert [name for name, result in fourth["tasks"].items() if result.get("changed")] == []
    assert tarball.stat().st_mtime == 1


@pytest.mark.parametrize("bad", ["garbage", "wrong-label"])
def test_a_bad_cached_tarball_is_dropped_and_the_host_builds(tmp_path: Path, repo: str, bad: str):
    first = _run(tmp_path, repo)
    ref, digest, archive = first["ref"], first["digest"], first["archive"]
    cache = _cache(tmp_path)
    cache.mkdir(parents=True)
    tarball = cache / archive
    if bad == "garbage":
        tarball.write_bytes(b"not a docker save tarball\n" * 1000)
    else:
        # a real tarball under this digest's name whose image carries another inputs label
        _standin(ref, "0" * 64)
        _docker_ok("save", "--output", str(tarball), ref)
        _docker_ok("rmi", ref)

    run = _run(tmp_path, repo)

    assert run["current"] is False
    assert run["how"] == ""
    assert not tarball.exists()
    assert not list(cache.iterdir())  # nothing saved (nothing built), no partial file
    assert _label(ref) != digest


def test_each_hosts_image_is_kept_once_per_tarball(tmp_path: Path, repo: str):
    # three hosts (all this machine): a and c share a repository, so one digest and one tarball; b has its own, as
    # a host of another CPU kind would. The save runs once per tarball, from a host that has it.
    repos = {"a": f"{repo}-a", "b": f"{repo}-b", "c": f"{repo}-a"}
    reports = {h: r["msg"] for h, r in _play(tmp_path, repos)["plays"][0]["tasks"][-1]["hosts"].items()}
    for host in ("a", "b"):
        _standin(reports[host]["ref"], reports[host]["digest"])

    tasks = _play(tmp_path, repos)["plays"][0]["tasks"]

    assert sorted(p.name for p in _cache(tmp_path).iterdir()) == sorted({reports[h]["archive"] for h in repos})
    saves = [t for t in tasks if t["task"]["name"].endswith(" : " + SAVE)]
    assert len(saves) == 2  # a's (or c's) and b's, not the shared one twice
    assert {tasks[-1]["hosts"][h]["msg"]["how"] for h in repos} == {"present"}


def test_a_host_without_the_base_image_loads_it_from_the_controllers_archive(tmp_path: Path, repo: str):
    """No registry here (as on this project's CI machine): the base image comes from a `docker save` tarball on the
    controller, the engine's base_image_archive, and the image's key is the same as where the base was present."""
    base = f"{repo}-base:{uuid.uuid4().hex[:6]}"  # a STAND-IN base: busybox under a name no registry has
    _docker_ok("tag", STANDIN_BASE, base)
    present = _run(tmp_path, repo, llamacpp_server_image_base_image=base)
    archive = tmp_path / "base.tar"
    _docker_ok("save", "--output", str(archive), base)
    _docker_ok("rmi", base)
    try:
        loaded = _run(tmp_path, repo, llamacpp_server_image_base_image=base,
                      llamacpp_server_image_base_archive=str(archive))  # fmt: skip
        assert loaded["tasks"]["Load the base image"].get("changed") is True
        assert _docker("image", "inspect", base).returncode == 0  # on the host now
        assert loaded["digest"] == present["digest"]  # the same base id: the same key, the cached build serves
        assert not (tmp_path / "build-base.tar").exists()  # the archive's copy is removed from the host
    finally:
        _docker("rmi", base)
