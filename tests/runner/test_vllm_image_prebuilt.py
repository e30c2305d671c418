"""The vllm_image role's prebuilt route (--image-source prebuilt), run by real Ansible on this machine against its
Docker engine: the whole role (preflight, plan, inspect, build, keep in the cache, facts), from a local stand-in for
a published engine image.

The stand-in is a test double, named as such: a busybox image whose ``python3`` is a shell script that records its
arguments and succeeds. It carries no vLLM, torch or zentorch, so the zentorch layer's ``pip install`` and its
``import torch, zentorch`` check run against that script: this verifies the route's mechanics (the image the role
starts from, the layer's pinned requirements, zenops's labels, the tag, the facts), not that AMD's image serves.
Seconds, no network (the stand-in is present, so "Pull the prebuilt image" pulls nothing).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runner import ansible_json_env, json_of, run_playbook
from zenops import compat
from zenops.paths import venv_bin

BASE = "zenops/busybox:latest"  # scripts/build-images makes it; a runner test needs the local Docker engine anyway
STANDIN_DOCKERFILE = f"""\
FROM {BASE}
RUN printf '#!/bin/sh\\necho "python3 $*" >> /standin-python3.log\\n' > /bin/python3 && chmod 0755 /bin/python3
LABEL io.zenops.test="prebuilt stand-in: python3 records its arguments; no vLLM, torch or zentorch"
"""

PLAYBOOK = """\
- name: Make the engine image by the prebuilt route
  hosts: builder
  gather_facts: false
  roles:
    - role: zenops.inference.vllm_image
"""


def _docker(*args: str) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(the stand-in "prebuilt" image, the tag the role makes): both removed afterwards."""
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"{BASE} is not on this machine's Docker engine (scripts/build-images makes it)")
    run = secrets.token_hex(4)
    ref, tag = f"zenops/prebuilt-standin:{run}", f"zenops/vllm-zen-standin-test:{run}"
    context = tmp_path / "standin"
    context.mkdir()
    (context / "Dockerfile").write_text(STANDIN_DOCKERFILE)
    _docker("build", "--quiet", "--tag", ref, str(context))
    try:
        yield ref, tag
    finally:
        subprocess.run(["docker", "image", "rm", "--force", tag, ref], capture_output=True, check=False, timeout=120)


def test_the_prebuilt_route_relabels_the_image_and_layers_the_pairs_zentorch_on_it(tmp_path, standin):
    ref, tag = standin
    combo = compat.table().default
    inventory = tmp_path / "hosts.ini"
    # root already (become: true in the role): no sudo on a test machine
    inventory.write_text(
        f"builder ansible_connection=local ansible_python_interpreter={venv_bin() / 'python'} ansible_become=false\n"
    )
    playbook = tmp_path / "prebuilt.yml"
    playbook.write_text(PLAYBOOK)
    extra = {
        "vllm_image_source": "prebuilt",
        "vllm_image_combo": combo.to_dict(),
        "vllm_image_prebuilt_ref": ref,  # no "zentorch" in the name: the role adds the layer (its default)
        "vllm_image_tag": tag,
        "vllm_image_build_dir": str(tmp_path / "build"),
        "vllm_image_controller_cache": str(tmp_path / "cache"),
    }
    out = json_of(run_playbook(playbook, inventory, ansible_json_env(tmp_path / "ansible-tmp"), extra=extra))
    ran = [t for play in out["plays"] for t in play["tasks"]]
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"].get("builder", {}) for t in ran}
    assert "Pull the prebuilt image" in tasks, sorted(tasks)
    assert not tasks["Pull the prebuilt image"].get("changed"), "the stand-in is local: nothing to pull"
    assert tasks[f"Build {tag}"].get("changed")  # the layer on top of it

    image = json.loads(_docker("image", "inspect", tag))[0]
    labels = image["Config"]["Labels"]
    # relabelled as zenops's engine image of the pair, by the prebuilt route
    assert labels["io.zenops.managed"] == "true"
    assert labels["io.zenops.compat-id"] == combo.id
    assert labels["io.zenops.source"] == "prebuilt"
    assert labels.get("io.zenops.inputs")  # the inputs digest the role finds the image by next time
    assert labels["io.zenops.test"].startswith("prebuilt stand-in")  # built on the stand-in, not on anything else
    # the zentorch layer ran: pip installed the pair's zentorch (torch pinned to the pair's), then the import check
    calls = _docker("run", "--rm", "--entrypoint", "cat", tag, "/standin-python3.log").splitlines()
    (install,) = [c for c in calls if " -m pip install " in c]
    assert f"zentorch=={combo.zentorch}" in install
    assert f"torch=={combo.torch}" in install
    assert any("import torch, zentorch" in c for c in calls)
