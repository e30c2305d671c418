"""Tests that run real ansible-playbook against this machine."""

from __future__ import annotations

import os
from pathlib import Path

from zenops.paths import collections_path


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
