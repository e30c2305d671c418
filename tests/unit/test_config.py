from __future__ import annotations

from pathlib import Path

import pytest

from zenops.config import load, read_file
from zenops.errors import ConfigError, ExitCode


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_any_file(tmp_path, monkeypatch, isolated_home):
    monkeypatch.chdir(tmp_path)
    cfg = load()
    assert cfg.sources == ()
    assert cfg.docker.source == "distro"
    assert cfg.ssh.host_key_checking == "accept-new"
    assert cfg.state_dir == isolated_home / "state" / "zenops"


def test_project_file_wins_over_user_file_key_by_key(tmp_path, monkeypatch, isolated_home):
    user = write(
        isolated_home / "config" / "zenops" / "config.yaml",
        "docker: {source: upstream, users: [alice]}\nssh: {user: debian}\ndefaults: {up: {limit: web}}\n",
    )
    project = write(tmp_path / "zenops.yaml", "docker: {users: [bob]}\ndefaults: {up: {check: true}}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load()
    assert cfg.sources == (user, project)
    assert cfg.docker.source == "upstream"  # from the user file
    assert cfg.docker.users == ("bob",)  # the project file wins
    assert cfg.ssh.user == "debian"
    assert cfg.command_defaults == {"up": {"limit": "web", "check": True}}
    assert cfg.command_default_sources["up"]["check"] == str(project)


def test_explicit_file_replaces_the_search(tmp_path, monkeypatch):
    write(tmp_path / "zenops.yaml", "docker: {source: upstream}\n")
    other = write(tmp_path / "other.yaml", "keep_runs: 7\n")
    monkeypatch.chdir(tmp_path)
    cfg = load(other)
    assert cfg.sources == (other,)
    assert cfg.keep_runs == 7
    assert cfg.docker.source == "distro"


def test_explicit_file_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "key", "fragment", "hint"),
    [
        ("docker: {source: snap}\n", "docker.source", "must be one of distro, upstream", None),
        ("dokcer: {}\n", "dokcer", "unknown key", "did you mean 'docker'"),
        ("docker: {userz: [a]}\n", "docker.userz", "unknown key", "did you mean 'users'"),
        ("keep_runs: -1\n", "keep_runs", "positive integer", None),
        ("keep_runs: true\n", "keep_runs", "positive integer", None),
        ("docker: {log_max_size: big}\n", "docker.log_max_size", "size like 10m", None),
        ("docker: [a, b]\n", "docker", "must be a mapping", "valid keys"),
        ("- just\n- a list\n", "", "top level must be a mapping", None),
        ("ssh: {host_key_checking: maybe}\n", "ssh.host_key_checking", "accept-new, strict, off", None),
    ],
)
def test_invalid_values_name_file_key_and_fix(tmp_path, text, key, fragment, hint):
    path = write(tmp_path / "zenops.yaml", text)
    with pytest.raises(ConfigError) as info:
        read_file(path)
    err = info.value
    assert err.exit_code == ExitCode.CONFIG
    assert err.path == str(path)
    assert err.key == key
    assert fragment in err.message
    assert str(path) in err.message
    if hint:
        assert err.hint
        assert hint in err.hint


def test_malformed_yaml_names_line_and_column(tmp_path):
    path = write(tmp_path / "zenops.yaml", "docker:\n  source: distro\n users: [a\n")
    with pytest.raises(ConfigError) as info:
        read_file(path)
    assert "not valid YAML" in info.value.message
    assert info.value.key.startswith("line ")


def test_empty_file_is_fine(tmp_path):
    assert read_file(write(tmp_path / "zenops.yaml", "")) == {}


def test_docker_settings_become_role_vars(tmp_path):
    cfg = load(write(tmp_path / "c.yaml", "docker: {users: [ops], log_max_file: 5, daemon_options: {debug: true}}\n"))
    assert cfg.docker.role_vars() == {
        "docker_source": "distro",
        "docker_users": ["ops"],
        "docker_log_max_size": "10m",
        "docker_log_max_file": "5",
        "docker_daemon_options": {"debug": True},
    }
