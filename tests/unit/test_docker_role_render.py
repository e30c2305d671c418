"""Render the templates of the role zenops.inference.docker the way the role does, through Ansible.

Every case is one play of a single ``ansible-playbook`` run (a module-scoped fixture) on a local host whose facts are
the case's fixture facts: the role's own preflight tasks run first (``include_role`` with ``tasks_from:
preflight.yml``, its defaults and vars made public), then Ansible's template lookup renders the role's templates with
them (the engine and template variables of the ``ansible.builtin.template`` tasks of tasks/configure.yml and
tasks/install-upstream.yml, without writing to /etc). Ansible resolves the defaults and vars and provides the filters
(combine, to_nice_json): a change in the role shows here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.ansible_play import RESULT_FACT, run_cases, shared_by_workers

ROLE = Path(__file__).resolve().parents[2] / "roles" / "docker"
TEMPLATES = ["docker.sources.j2", "daemon.json.j2"]
RECORDED = ["_docker_upstream_gpg_url", "_docker_packages", "_docker_daemon_config"]


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROLE / name).read_text())
    assert isinstance(data, dict), f"{name} is not a mapping"
    return data


def parse_deb822(text: str) -> list[dict[str, str]]:
    """Stanzas of a deb822 file (comments dropped, no continuation lines expected in a sources file)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
                current = {}
            continue
        assert not line[0].isspace(), f"unexpected continuation line: {line!r}"
        key, sep, value = line.partition(":")
        assert sep, f"not a 'Field: value' line: {line!r}"
        assert key not in current, f"field {key} repeated"
        current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


DEBIAN_BOOKWORM_AMD64 = {"distribution": "Debian", "distribution_release": "bookworm", "architecture": "x86_64"}
UBUNTU_NOBLE_ARM64 = {"distribution": "Ubuntu", "distribution_release": "noble", "architecture": "aarch64"}

CASES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "debian-bookworm-amd64": (DEBIAN_BOOKWORM_AMD64, {}),
    "ubuntu-noble-arm64": (UBUNTU_NOBLE_ARM64, {}),
    "debian-mirror": (
        DEBIAN_BOOKWORM_AMD64,
        {"docker_upstream_base_url": "https://mirror.example/docker/", "docker_upstream_channel": "test"},
    ),
    "ubuntu-upstream": (UBUNTU_NOBLE_ARM64, {"docker_source": "upstream"}),
    "debian-daemon-options": (
        DEBIAN_BOOKWORM_AMD64,
        {
            "docker_log_max_size": "50m",
            "docker_log_max_file": 5,  # an int from an inventory must still reach dockerd as "5"
            "docker_daemon_options": {"storage-driver": "vfs", "log-opts": {"labels": "zenops"}},
        },
    ),
    "debian-journald": (DEBIAN_BOOKWORM_AMD64, {"docker_daemon_options": {"log-driver": "journald"}}),
    # the uplink's MTU (network facts): an OpenStack VXLAN network's 1450, Ethernet's 1500
    "uplink-1450": ({**DEBIAN_BOOKWORM_AMD64, "default_ipv4": {"interface": "ens3", "mtu": 1450}}, {}),
    "uplink-1500": ({**DEBIAN_BOOKWORM_AMD64, "default_ipv4": {"interface": "eth0", "mtu": 1500}}, {}),
    "uplink-none": ({**DEBIAN_BOOKWORM_AMD64, "default_ipv4": {}}, {}),  # no default route
    "mtu-explicit": ({**DEBIAN_BOOKWORM_AMD64, "default_ipv4": {"mtu": 1500}}, {"docker_mtu": 1400}),
    "mtu-daemon-option": (
        {**DEBIAN_BOOKWORM_AMD64, "default_ipv4": {"mtu": 1450}},
        {"docker_daemon_options": {"mtu": 1300}},
    ),
}


def _play(facts: dict[str, str], overrides: dict[str, Any]) -> dict[str, Any]:
    rendered = {
        template.removesuffix(".j2"): f"{{{{ lookup('ansible.builtin.template', '{ROLE / 'templates' / template}') }}}}"
        for template in TEMPLATES
    }
    return {
        # the host's facts as gathered (play vars win over the fact cache), and the caller's variables
        "vars": {"ansible_facts": facts, "docker_cloud_init_wait": False, **overrides},
        "tasks": [
            {
                "name": "Run the role's preflight (its defaults and vars public for the task below)",
                "ansible.builtin.include_role": {
                    "name": "zenops.inference.docker",
                    "tasks_from": "preflight.yml",
                    "public": True,
                },
            },
            {
                "name": "Render the role's templates and record its variables",
                "ansible.builtin.set_fact": {
                    RESULT_FACT: {**{name: f"{{{{ {name} }}}}" for name in RECORDED}, **rendered}
                },
            },
        ],
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Case name -> the role's recorded variables and its rendered templates (by file name without .j2)."""
    work = tmp_path_factory.mktemp("docker-render")
    plays = {name.replace("-", "_"): _play(facts, overrides) for name, (facts, overrides) in CASES.items()}
    results = shared_by_workers(tmp_path_factory.getbasetemp(), "docker-render", plays, lambda: run_cases(work, plays))
    return {name: results[name.replace("-", "_")] for name in CASES}


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(
            "debian-bookworm-amd64",
            {
                "Types": "deb",
                "URIs": "https://download.docker.com/linux/debian",
                "Suites": "bookworm",
                "Components": "stable",
                "Architectures": "amd64",
                "Signed-By": "/etc/apt/keyrings/docker.asc",
            },
            id="debian-bookworm-amd64",
        ),
        pytest.param(
            "ubuntu-noble-arm64",
            {
                "Types": "deb",
                "URIs": "https://download.docker.com/linux/ubuntu",
                "Suites": "noble",
                "Components": "stable",
                "Architectures": "arm64",
                "Signed-By": "/etc/apt/keyrings/docker.asc",
            },
            id="ubuntu-noble-arm64",
        ),
    ],
)
def test_docker_sources_deb822(rendered, facts: str, expected: dict[str, str]) -> None:
    text = rendered[facts]["docker.sources"]
    assert parse_deb822(text) == [expected]
    assert text.startswith("# Ansible managed\n")


def test_docker_sources_follow_overrides(rendered) -> None:
    ctx = rendered["debian-mirror"]
    (stanza,) = parse_deb822(ctx["docker.sources"])
    assert stanza["URIs"] == "https://mirror.example/docker/debian"
    assert stanza["Components"] == "test"
    assert ctx["_docker_upstream_gpg_url"] == "https://mirror.example/docker/debian/gpg"


def test_upstream_key_url_and_packages(rendered) -> None:
    ctx = rendered["ubuntu-upstream"]
    assert ctx["_docker_upstream_gpg_url"] == "https://download.docker.com/linux/ubuntu/gpg"
    assert ctx["_docker_packages"] == [
        "docker-ce",
        "docker-ce-cli",
        "containerd.io",
        "docker-buildx-plugin",
        "docker-compose-plugin",
    ]
    assert rendered["ubuntu-noble-arm64"]["_docker_packages"] == ["docker.io"]


def test_daemon_json_defaults_rotate_logs_with_string_values(rendered) -> None:
    daemon = json.loads(rendered["debian-bookworm-amd64"]["daemon.json"])
    assert daemon == {"log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "3"}}


def test_daemon_json_merges_options_recursively_and_stringifies_rotation(rendered) -> None:
    daemon = json.loads(rendered["debian-daemon-options"]["daemon.json"])
    assert daemon == {
        "log-driver": "json-file",
        "log-opts": {"max-size": "50m", "max-file": "5", "labels": "zenops"},
        "storage-driver": "vfs",
    }


def test_daemon_options_can_replace_the_log_driver(rendered) -> None:
    assert json.loads(rendered["debian-journald"]["daemon.json"])["log-driver"] == "journald"


@pytest.mark.parametrize(
    ("case", "mtu"),
    [
        ("uplink-1450", 1450),  # below Ethernet's: the bridge follows, or large answers never reach a container
        ("uplink-1500", None),  # Docker's default is right
        ("uplink-none", None),
        ("debian-bookworm-amd64", None),  # no network facts
        ("mtu-explicit", 1400),
        ("mtu-daemon-option", 1300),  # docker_daemon_options wins
    ],
)
def test_daemon_json_bridge_mtu_follows_the_uplink(rendered, case: str, mtu: int | None) -> None:
    daemon = json.loads(rendered[case]["daemon.json"])
    assert daemon.get("mtu") == mtu, daemon
    assert daemon["log-opts"] == {"max-size": "10m", "max-file": "3"}


def test_argument_specs_document_every_public_default() -> None:
    defaults = _load("defaults/main.yml")
    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert "{{" not in str(defaults[name]), f"{name}: argument validation would template it before facts exist"
        assert spec["default"] == defaults[name], f"{name}: argument_specs default differs from defaults/main.yml"
        assert "choices" not in spec or defaults[name] in spec["choices"], name
