"""Render the templates of the role zenops.inference.docker with plain Jinja2, no Ansible run.

Variables come from the role's defaults/main.yml and vars/main.yml, resolved in file order the way Ansible would
(a value that is one ``{{ expression }}`` keeps its type, anything else renders to a string). The two Ansible-only
filters the role's templates use (combine, to_nice_json) get minimal equivalents here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "docker"
_SINGLE_EXPRESSION = re.compile(r"\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}", re.DOTALL)


def _combine(base: dict[str, Any], *others: dict[str, Any], recursive: bool = False) -> dict[str, Any]:
    result = dict(base)
    for other in others:
        for key, value in other.items():
            if recursive and isinstance(result.get(key), dict) and isinstance(value, dict):
                result[key] = _combine(result[key], value, recursive=True)
            else:
                result[key] = value
    return result


def _to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True) -> str:
    return json.dumps(value, indent=indent, sort_keys=sort_keys, separators=(",", ": "), ensure_ascii=False)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["combine"] = _combine
    env.filters["to_nice_json"] = _to_nice_json
    return env


def _resolve(env: jinja2.Environment, value: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {key: _resolve(env, item, ctx) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(env, item, ctx) for item in value]
    if isinstance(value, str) and "{{" in value:
        single = _SINGLE_EXPRESSION.fullmatch(value.strip())
        if single:
            return env.compile_expression(single.group("expr"), undefined_to_none=False)(**ctx)
        return env.from_string(value).render(**ctx)
    return value


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROLE / name).read_text())
    assert isinstance(data, dict), f"{name} is not a mapping"
    return data


def role_vars(facts: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Facts + defaults + vars, overrides (inventory or play vars) winning over defaults."""
    env = _environment()
    ctx: dict[str, Any] = {"ansible_facts": facts, "ansible_managed": "Ansible managed", **overrides}
    for name, raw in [*_load("defaults/main.yml").items(), *_load("vars/main.yml").items()]:
        if name in overrides and not name.startswith("_"):
            continue
        ctx[name] = _resolve(env, raw, ctx)
    return ctx


def render(template: str, ctx: dict[str, Any]) -> str:
    return _environment().get_template(template).render(**ctx)


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


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(
            DEBIAN_BOOKWORM_AMD64,
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
            UBUNTU_NOBLE_ARM64,
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
def test_docker_sources_deb822(facts: dict[str, Any], expected: dict[str, str]) -> None:
    text = render("docker.sources.j2", role_vars(facts))
    assert parse_deb822(text) == [expected]
    assert text.startswith("# Ansible managed\n")


def test_docker_sources_follow_overrides() -> None:
    ctx = role_vars(
        DEBIAN_BOOKWORM_AMD64, docker_upstream_base_url="https://mirror.example/docker/", docker_upstream_channel="test"
    )
    (stanza,) = parse_deb822(render("docker.sources.j2", ctx))
    assert stanza["URIs"] == "https://mirror.example/docker/debian"
    assert stanza["Components"] == "test"
    assert ctx["_docker_upstream_gpg_url"] == "https://mirror.example/docker/debian/gpg"


def test_upstream_key_url_and_packages() -> None:
    ctx = role_vars(UBUNTU_NOBLE_ARM64, docker_source="upstream")
    assert ctx["_docker_upstream_gpg_url"] == "https://download.docker.com/linux/ubuntu/gpg"
    assert ctx["_docker_packages"] == [
        "docker-ce",
        "docker-ce-cli",
        "containerd.io",
        "docker-buildx-plugin",
        "docker-compose-plugin",
    ]
    assert role_vars(UBUNTU_NOBLE_ARM64)["_docker_packages"] == ["docker.io"]


def test_daemon_json_defaults_rotate_logs_with_string_values() -> None:
    daemon = json.loads(render("daemon.json.j2", role_vars(DEBIAN_BOOKWORM_AMD64)))
    assert daemon == {"log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "3"}}


def test_daemon_json_merges_options_recursively_and_stringifies_rotation() -> None:
    ctx = role_vars(
        DEBIAN_BOOKWORM_AMD64,
        docker_log_max_size="50m",
        docker_log_max_file=5,  # an int from an inventory must still reach dockerd as "5"
        docker_daemon_options={"storage-driver": "vfs", "log-opts": {"labels": "zenops"}},
    )
    daemon = json.loads(render("daemon.json.j2", ctx))
    assert daemon == {
        "log-driver": "json-file",
        "log-opts": {"max-size": "50m", "max-file": "5", "labels": "zenops"},
        "storage-driver": "vfs",
    }


def test_daemon_options_can_replace_the_log_driver() -> None:
    ctx = role_vars(DEBIAN_BOOKWORM_AMD64, docker_daemon_options={"log-driver": "journald"})
    assert json.loads(render("daemon.json.j2", ctx))["log-driver"] == "journald"


def test_argument_specs_document_every_public_default() -> None:
    defaults = _load("defaults/main.yml")
    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert "{{" not in str(defaults[name]), f"{name}: argument validation would template it before facts exist"
        assert spec["default"] == defaults[name], f"{name}: argument_specs default differs from defaults/main.yml"
        assert "choices" not in spec or defaults[name] in spec["choices"], name
