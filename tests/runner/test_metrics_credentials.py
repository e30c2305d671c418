"""The metrics role's credentials (roles/metrics/tasks/credentials.yml), run by real Ansible on this machine for a
deployment of two hosts (both connection local): ``prom`` runs Prometheus, ``node`` only node_exporter.

- The API key goes to the Prometheus host only; a copy an earlier version left on the other host is removed.
- node_exporter's basic auth is a password of its own: every host's web config holds a hash of it (never of the
  key), and only the Prometheus host has the password itself, which Prometheus's scrape configuration names.
- A second run changes nothing.

The role's paths are its vars (roles/metrics/vars/main.yml); here each host's point into a directory of its own
under a temporary one (extra vars win over role vars), and the files are owned by whoever runs the test. The role
hashes with python3-bcrypt on the host; this machine need not have it, so a TEST DOUBLE ``bcrypt`` module (a salted
SHA-256 in bcrypt's shape, :data:`FAKE_BCRYPT`) is put first on the path of the host's python3. Molecule's metrics
scenario checks the same with the real bcrypt and node_exporter (molecule/metrics/verify.yml)."""

from __future__ import annotations

import grp
import hashlib
import hmac
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from tests.runner import ansible_json_env, json_of, run_playbook
from zenops.paths import venv_bin

ROLE = Path(__file__).resolve().parents[2] / "roles" / "metrics"
API_KEY = "zk-not-a-real-api-key-0123456789abcdef"
PASSWORD = "zm-not-a-real-scrape-password-fedcba9876543210"

# TEST DOUBLE of python3-bcrypt: hashpw, checkpw and gensalt with bcrypt's shape, a salted SHA-256 inside
FAKE_BCRYPT = """\
import hashlib, hmac, secrets

def gensalt(rounds=12):
    return b"$2b$%02d$" % rounds + secrets.token_hex(11).encode()

def hashpw(password, salt):
    head = salt[:29]
    return head + hashlib.sha256(head + password).hexdigest().encode()

def checkpw(password, hashed):
    return hmac.compare_digest(hashpw(password, hashed[:29]), hashed)
"""

PLAYBOOK = """\
- name: The metrics credentials, as `zenops up --metrics on` writes them
  hosts: all
  gather_facts: false
  tasks:
    - name: The role's credential tasks
      ansible.builtin.include_role:
        name: zenops.inference.metrics
        tasks_from: credentials
        public: true

    - name: Prometheus's scrape configuration, as the role renders it
      ansible.builtin.template:
        src: {template}
        dest: "{{{{ _metrics_dir }}}}/prometheus.yml"
        mode: "0640"
      when: metrics_prometheus | bool

    # the role notified "Restart node_exporter": there is none here, so the play ends before the handlers
    - name: End the play
      ansible.builtin.meta: end_play
"""


def _checkpw(password: str, hashed: str) -> bool:
    """FAKE_BCRYPT's checkpw, here."""
    head = hashed[:29].encode()
    return hmac.compare_digest(head + hashlib.sha256(head + password.encode()).hexdigest().encode(), hashed.encode())


def _web_config_hashes(path: Path) -> dict[str, str]:
    """The web config's basic_auth_users (the role writes one "user": "hash" line per user, JSON values)."""
    users = {}
    for line in path.read_text().splitlines():
        if line.startswith("  "):
            user, _, hashed = line.strip().partition(": ")
            users[json.loads(user)] = json.loads(hashed)
    return users


def _files(root: Path) -> dict[Path, str]:
    return {p: p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


def _deployment(tmp_path: Path) -> tuple[tuple[Path, Path, dict[str, Any]], dict[str, str]]:
    """Two hosts as an earlier version left them, the controller's key and password files: the ansible-playbook
    run (playbook, inventory, extra vars) and its environment."""
    controller = tmp_path / "controller"
    controller.mkdir(mode=0o700)
    key_file, password_file = controller / "api-key", controller / "metrics-password"
    for path, value in ((key_file, API_KEY), (password_file, PASSWORD)):
        path.write_text(value + "\n")
        path.chmod(0o600)
    hosts = tmp_path / "hosts"
    for h in ("prom", "node"):
        (hosts / h / "etc" / "prometheus" / "zenops").mkdir(parents=True)  # the role's directory (install.yml's)
        (hosts / h / "sbin").mkdir()
    # what an earlier version left on the host without Prometheus: the key, and node_exporter's hash of it
    old = hosts / "node" / "etc" / "prometheus" / "zenops"
    (old / "api-key").write_text(API_KEY + "\n")
    salt = "$2b$10$0123456789abcdef012345"
    (old / "node-exporter-web.yml").write_text(
        f'# zenops metrics: managed by zenops.inference.metrics\nbasic_auth_users:\n  "zenops": '
        f'"{salt}{hashlib.sha256((salt + API_KEY).encode()).hexdigest()}"\n'
    )
    pylib = tmp_path / "pylib"
    pylib.mkdir()
    (pylib / "bcrypt.py").write_text(FAKE_BCRYPT)

    playbook = tmp_path / "credentials.yml"
    playbook.write_text(PLAYBOOK.format(template=ROLE / "templates" / "prometheus.yml.j2"))
    inventory = tmp_path / "hosts.ini"
    python = venv_bin() / "python"
    inventory.write_text(
        f"prom ansible_connection=local ansible_python_interpreter={python} metrics_prometheus=true\n"
        f"node ansible_connection=local ansible_python_interpreter={python}\n"
    )
    base = f"{hosts}/{{{{ inventory_hostname }}}}"
    extra = {
        "_metrics_dir": f"{base}/etc/prometheus/zenops",
        "_metrics_web_script": f"{base}/sbin/zenops-metrics-web-config",
        "_metrics_owner": pwd.getpwuid(os.getuid()).pw_name,
        "_metrics_user": grp.getgrgid(os.getgid()).gr_name,
        "metrics_api_key_file": str(key_file),
        "metrics_scrape_password_file": str(password_file),
    }
    return (playbook, inventory, extra), ansible_json_env(tmp_path / "ansible-tmp", PYTHONPATH=str(pylib))


def _run(run: tuple[Path, Path, dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """The play's stats per host; it must succeed and its output hold neither secret."""
    playbook, inventory, extra = run
    proc = run_playbook(playbook, inventory, env, extra=extra, timeout=300)
    for secret in (API_KEY, PASSWORD):
        assert secret not in proc.stdout + proc.stderr, "a secret reached Ansible's output"
    stats: dict[str, Any] = json_of(proc)["stats"]
    return stats


@pytest.mark.skipif(not Path("/usr/bin/python3").is_file(), reason="the role's script runs with /usr/bin/python3")
def test_the_api_key_only_where_prometheus_runs_and_node_exporter_has_a_password_of_its_own(tmp_path: Path) -> None:
    run, env = _deployment(tmp_path)
    _run(run, env)
    hosts = tmp_path / "hosts"
    dirs = {h: hosts / h / "etc" / "prometheus" / "zenops" for h in ("prom", "node")}
    prom, node = dirs["prom"], dirs["node"]
    # the Prometheus host: the key (vLLM's bearer token) and the scrape password, root's and prometheus's only
    assert (prom / "api-key").read_text().strip() == API_KEY
    assert (prom / "scrape-password").read_text().strip() == PASSWORD
    assert {(p.stat().st_mode & 0o777) for p in (prom / "api-key", prom / "scrape-password")} == {0o640}
    scrape = (prom / "prometheus.yml").read_text()
    node_job = scrape[scrape.index("job_name: node") : scrape.index("job_name: haproxy")]
    vllm_job = scrape[scrape.index("job_name: vllm") : scrape.index("job_name: node")]
    assert f"password_file: {json.dumps(str(prom / 'scrape-password'))}" in node_job
    assert "api-key" not in node_job, "Prometheus sends the API key to node_exporter"
    assert f"credentials_file: {json.dumps(str(prom / 'api-key'))}" in vllm_job
    # the host without Prometheus: neither the key (the stale copy is gone) nor the password, anywhere
    assert not (node / "api-key").exists(), "the API key is still on a host without Prometheus"
    assert not (node / "scrape-password").exists()
    assert [p for p, text in _files(hosts / "node").items() if API_KEY in text or PASSWORD in text] == []
    # every node_exporter: one user, whose hash verifies the scrape password and not the API key
    for host, d in dirs.items():
        users = _web_config_hashes(d / "node-exporter-web.yml")
        assert list(users) == ["zenops"], host
        assert _checkpw(PASSWORD, users["zenops"]), f"{host}: node_exporter's hash is not the scrape password's"
        assert not _checkpw(API_KEY, users["zenops"]), f"{host}: node_exporter's password is the API key"
        assert (d / "node-exporter-web.yml").stat().st_mode & 0o777 == 0o640

    # a second run changes nothing (the hash is kept while it verifies the password)
    before = _files(hosts)
    stats = _run(run, env)
    assert {h: s["changed"] for h, s in stats.items()} == {"prom": 0, "node": 0}
    assert _files(hosts) == before
