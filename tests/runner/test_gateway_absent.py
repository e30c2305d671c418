"""The gateway role's ``absent`` entry point (what `zenops down` and `up --gateway off` run on the gateway's host)
removes what the role wrote, the API key file included, run by real Ansible on this machine (connection local).

The role's paths are its vars (roles/gateway/vars/main.yml); here each points into a temporary directory (extra vars
win over role vars), so the real tasks run without touching /etc. HAProxy itself is not there: its configuration
is absent, so the steps that stop it are skipped as on a host where someone else's HAProxy runs. Molecule's gateway
scenario checks the same on a real HAProxy (molecule/gateway/verify.yml)."""

from __future__ import annotations

from pathlib import Path

from tests.runner import ansible_json_env, json_of, run_playbook
from zenops.paths import venv_bin

PLAYBOOK = """\
- name: Remove the gateway as `zenops down` does
  hosts: gateway
  gather_facts: false
  tasks:
    - name: The role's absent entry point
      ansible.builtin.include_role:
        name: zenops.inference.gateway
        tasks_from: absent
"""


def test_absent_removes_the_api_key_file_and_the_roles_other_files(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    paths = {
        "_gateway_config_path": etc / "haproxy" / "haproxy.cfg",  # not there: someone else's HAProxy, or none
        "_gateway_key_path": etc / "haproxy" / "zenops-api-keys",
        "_gateway_tls_dir": etc / "haproxy" / "zenops-tls",
        "_gateway_dropin_dir": etc / "systemd" / "haproxy.service.d",
        "_gateway_dropin_path": etc / "systemd" / "haproxy.service.d" / "zenops-gateway.conf",
        "_gateway_save_state_path": tmp_path / "sbin" / "zenops-gateway-save-state",
        "_gateway_tmpfiles_path": etc / "tmpfiles.d" / "zenops-gateway.conf",
        "gateway_runtime_socket": tmp_path / "run" / "zenops-gateway" / "admin.sock",
    }
    key = paths["_gateway_key_path"]
    key.parent.mkdir(parents=True)
    key.write_text("Bearer not-a-real-key\n")
    key.chmod(0o600)
    (paths["_gateway_tls_dir"]).mkdir()
    (paths["_gateway_tls_dir"] / "gateway.pem").write_text("pem\n")
    paths["_gateway_save_state_path"].parent.mkdir()
    paths["_gateway_save_state_path"].write_text("#!/bin/sh\n")
    paths["gateway_runtime_socket"].parent.mkdir(parents=True)
    other = etc / "haproxy" / "errors.http"  # not the role's: stays
    other.write_text("x\n")

    playbook = tmp_path / "absent.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"gateway ansible_connection=local ansible_python_interpreter={venv_bin() / 'python'}\n")
    extra = {**{k: str(v) for k, v in paths.items()}, "ansible_become": False}
    json_of(run_playbook(playbook, inventory, ansible_json_env(tmp_path / "ansible-tmp"), extra=extra, timeout=300))
    left = [name for name, p in paths.items() if name != "gateway_runtime_socket" and p.exists()]
    assert not key.exists(), "absent left the gateway's API key file on the host"
    assert left == []
    assert not paths["gateway_runtime_socket"].parent.exists()
    assert other.exists()
