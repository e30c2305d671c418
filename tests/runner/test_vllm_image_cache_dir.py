"""Where the vllm_image role keeps its image cache, as real Ansible resolves the role's default on the controller:
$ZENOPS_IMAGE_CACHE, else $XDG_CACHE_HOME/zenops/images (what scripts/test, scripts/demo and the e2e rely on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.runner import ansible_json_env, json_of, run_playbook

PLAYBOOK = """\
- name: Resolve the role's cache directory
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the role defaults as the role does
      ansible.builtin.include_vars:
        file: {defaults}
    - name: Show where the cache is
      ansible.builtin.debug:
        msg: "CACHE={{{{ vllm_image_controller_cache }}}}"
"""


def _resolve(tmp_path: Path, env_overrides: dict[str, str | None]) -> str:
    playbook = tmp_path / "cache-dir.yml"
    playbook.write_text(PLAYBOOK.format(defaults=REPO / "roles" / "vllm_image" / "defaults" / "main.yml"))
    env: dict[str, str] = ansible_json_env(tmp_path / "ansible-tmp")
    for name, value in env_overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    tasks = json_of(run_playbook(playbook, "localhost,", env, args=["-c", "local"], timeout=120))["plays"][0]["tasks"]
    msg = tasks[-1]["hosts"]["localhost"]["msg"]
    assert msg.startswith("CACHE="), msg
    return str(msg.removeprefix("CACHE="))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ZENOPS_IMAGE_CACHE": "/srv/images", "XDG_CACHE_HOME": "/xdg"}, "/srv/images"),
        ({"ZENOPS_IMAGE_CACHE": None, "XDG_CACHE_HOME": "/xdg"}, "/xdg/zenops/images"),
        ({"ZENOPS_IMAGE_CACHE": "", "XDG_CACHE_HOME": None}, "~/.cache/zenops/images"),
    ],
    ids=["explicit", "xdg", "home"],
)
def test_role_default_cache_dir(tmp_path: Path, env: dict[str, str | None], expected: str):
    assert _resolve(tmp_path, env) == expected
