"""No secret from the environment in any artifact (issue 23, item 5), with a real ansible-playbook run.

ansible-runner records the whole environment of a run (``artifacts/<id>/command``); the operator's shell may hold
OpenStack credentials, tokens and keys. The playbook below needs the OpenStack ones (an ``OS_*`` cloud) and reads
the API key file it is given; it also does its worst: it prints every secret it can see, and it reads the run's own
environment record while it runs. Afterwards no file under the state dir holds any of the sentinels.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from zenops.runner import RunnerSettings, RunSpec, is_secret_env_name, run_playbook

SENTINELS = {
    "OS_PASSWORD": "sentinel-os-password-5c1b",
    "OS_APPLICATION_CREDENTIAL_SECRET": "sentinel-app-cred-secret-77e0",
    "HF_TOKEN": "sentinel-hf-token-93fa",
    "MY_SERVICE_TOKEN": "sentinel-service-token-1d42",
}
API_KEY = "sentinel-api-key-zk-4e2c9a"

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Print every secret in sight (a careless task)
      ansible.builtin.debug:
        msg: >-
          {{ lookup('env', 'OS_PASSWORD') }} {{ lookup('env', 'OS_APPLICATION_CREDENTIAL_SECRET') }}
          {{ lookup('env', 'MY_SERVICE_TOKEN') }} {{ lookup('env', 'HF_TOKEN') }}
          {{ lookup('file', vllm_server_api_key_file) }}

    - name: Read the run's own record of its environment, now that the playbook runs
      ansible.builtin.set_fact:
        _record: "{{ lookup('file', state_dir ~ '/runs/' ~ lookup('env', 'ZENOPS_RUN') ~ '/artifacts/run/command') }}"

    - name: Tell zenops what the playbook saw (digests only)
      ansible.builtin.set_fact:
        zenops_seen:
          os_password: "{{ lookup('env', 'OS_PASSWORD') | hash('sha256') }}"
          app_credential: "{{ lookup('env', 'OS_APPLICATION_CREDENTIAL_SECRET') | hash('sha256') }}"
          hf_token: "{{ lookup('env', 'HF_TOKEN') }}"
          api_key: "{{ lookup('file', vllm_server_api_key_file) | hash('sha256') }}"
          record_has_path: "{{ 'PATH' in (_record | from_json).env }}"
          record_holds_a_secret: >-
            {{ lookup('env', 'OS_PASSWORD') in _record or lookup('env', 'OS_APPLICATION_CREDENTIAL_SECRET') in _record
               or lookup('env', 'MY_SERVICE_TOKEN') in _record or 'OS_PASSWORD' in _record }}
"""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_no_sentinel_anywhere_in_the_state_dir_and_the_playbook_sees_what_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_inventory: Path
) -> None:
    for name, value in SENTINELS.items():
        monkeypatch.setenv(name, value)
    key = tmp_path / "api-key"  # as --api-key-file: outside the state dir
    key.write_text(API_KEY + "\n")
    key.chmod(0o600)
    playbook = tmp_path / "pb.yml"
    playbook.write_text(PLAYBOOK)
    state = tmp_path / "state"
    extravars = {"vllm_server_api_key_file": str(key), "state_dir": str(state)}

    result = run_playbook(
        RunSpec(playbook=playbook, inventory=local_inventory, extravars=extravars), RunnerSettings(state_dir=state)
    )

    seen = result.host_facts["localhost"]["zenops_seen"]
    assert seen["os_password"] == sha256(SENTINELS["OS_PASSWORD"])  # an OS_* cloud still authenticates
    assert seen["app_credential"] == sha256(SENTINELS["OS_APPLICATION_CREDENTIAL_SECRET"])
    assert seen["api_key"] == sha256(API_KEY)
    assert seen["hf_token"] == ""  # never needed by Ansible: zenops hands it over as a file
    assert seen["record_has_path"] is True, "the environment record was found and read during the run"
    assert seen["record_holds_a_secret"] is False, "the environment record held a secret while the playbook ran"

    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files)
    assert any(p.parent.name == "job_events" for p in files)
    leaks = {
        str(p.relative_to(state)): [n for n, v in [*SENTINELS.items(), ("API key", API_KEY)] if v.encode() in data]
        for p in files
        if (data := p.read_bytes())
    }
    assert {p: names for p, names in leaks.items() if names} == {}
    record = json.loads((result.run_dir / "artifacts" / "run" / "command").read_text())
    assert not [n for n in record["env"] if is_secret_env_name(n)]
    assert record["env"]["PATH"]


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("OS_PASSWORD", True),
        ("OS_APPLICATION_CREDENTIAL_SECRET", True),
        ("HF_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("VLLM_API_KEY", True),
        ("my_db_password", True),
        ("OS_AUTH_URL", False),
        ("OS_CLOUD", False),
        ("PATH", False),
        ("ANSIBLE_CONFIG", False),
    ],
)
def test_which_environment_variables_are_secrets(name: str, secret: bool) -> None:
    assert is_secret_env_name(name) is secret
