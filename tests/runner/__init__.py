"""Tests that run real ansible-playbook against this machine."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zenops.paths import collections_path, venv_bin


def ansible_json_env(local_temp: Path, *, collections: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of an ansible-playbook run whose stdout is one JSON document (ansible.posix.json): this
    process's, the zenops collection (``collections``, when given, searched first), no colour, Ansible's local
    temporary files under ``local_temp``, then ``extra``."""
    paths = f"{collections}{os.pathsep}{collections_path()}" if collections else str(collections_path())
    return {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": paths,
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(local_temp),
        **extra,
    }


def run_playbook(
    playbook: Path | str,
    inventory: Path | str,
    env: Mapping[str, str],
    *,
    extra: Mapping[str, Any] | str | None = None,
    args: Sequence[str] = (),
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """The venv's ansible-playbook on ``playbook`` with ``inventory`` (a path or an inline host list), ``extra``
    vars (a mapping as JSON, or a string as given: ``@file``) and more ``args`` first (``--check``); never raises
    on a failed run: the caller asserts what it expects (:func:`json_of` for a run that must pass)."""
    argv = [str(venv_bin() / "ansible-playbook"), *args, "-i", str(inventory)]
    if extra is not None:
        argv += ["-e", extra if isinstance(extra, str) else json.dumps(extra)]
    argv.append(str(playbook))
    return subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=timeout, check=False)


def tail(proc: subprocess.CompletedProcess[str]) -> str:
    """The end of a run's stdout and stderr, for an assertion's message."""
    return proc.stdout[-6000:] + proc.stderr[-3000:]


def json_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON document (ansible.posix.json) of a run that must have passed; fails the test with the run's tail."""
    assert proc.returncode == 0, tail(proc)
    return dict(json.loads(proc.stdout))
