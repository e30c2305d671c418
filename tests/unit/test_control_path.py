"""ssh's connection sockets stay within a Unix socket's path limit however deep the home directory is (the README's
quickstart run under a pytest home of 80 characters failed every connection: "unix_listener: path ... too long for
Unix domain socket")."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from zenops import runner
from zenops.errors import UsageError


def test_a_home_that_fits_keeps_ansibles_default(tmp_path):
    assert runner.control_path_dir(Path("/home/debian")) is None


def test_a_deep_home_gets_a_short_private_directory_whose_socket_binds(monkeypatch):
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    # a short temp dir of the test's own (pytest's tmp_path under xdist is itself too deep to bind a socket in)
    tmp_path = Path(tempfile.mkdtemp(prefix="zc", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    try:
        _deep_home_gets_a_short_directory(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _deep_home_gets_a_short_directory(tmp_path: Path) -> None:
    deep = Path("/tmp/pytest-of-root/pytest-1008/test_the_readme_quickstart_run0/home")  # the failing run's
    short = runner.control_path_dir(deep)
    assert short is not None
    assert short.parent == tmp_path / "t"
    assert short.stat().st_mode & 0o777 == 0o700
    # what ssh binds there: <dir>/<10-char hash>.<16 chars>; the default dir's path would not bind
    name = "a1c8e65a26.xnrQ4iVdqDGHJZS8"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(short / name))
    too_long = str(deep / ".ansible" / "cp" / name)
    assert len(too_long) > runner.SOCKET_PATH_MAX
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError, match="too long"):
        s.bind(too_long)
    assert runner.control_path_dir(deep) == short  # again: the same directory


def test_a_short_directory_others_can_enter_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile  # noqa: PLC0415

    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / f"zenops-cp-{os.getuid()}").mkdir(mode=0o777)
    (tmp_path / f"zenops-cp-{os.getuid()}").chmod(0o777)
    with pytest.raises(UsageError, match="not a private directory of yours"):
        runner.control_path_dir(Path("/" + "d" * 90))


def test_every_runs_ansible_cfg_points_ssh_at_the_short_directory_under_a_deep_home(tmp_path, monkeypatch):
    import tempfile  # noqa: PLC0415

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    settings = runner.RunnerSettings(state_dir=tmp_path / "state")
    monkeypatch.setenv("HOME", "/home/debian")
    assert "control_path_dir" not in runner._ansible_cfg(settings, tmp_path)
    monkeypatch.setenv("HOME", "/" + "d" * 90)
    cfg = runner._ansible_cfg(settings, tmp_path)
    assert f"control_path_dir = {tmp_path / f'zenops-cp-{os.getuid()}'}" in cfg.split("[ssh_connection]")[1]
