"""The catalogue's YAML files, shipped inside the package (read with importlib.resources, so they work from a
wheel). :func:`load_resource` is importable from :mod:`zenops.catalog` too."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from zenops.errors import ConfigError

PACKAGE = "zenops.catalog"  # the package whose files the catalogue's YAML files are


def load_resource(filename: str, top: str) -> tuple[str, dict[str, Any]]:
    """The mapping under ``top`` in the packaged catalogue file ``filename``, and where it is (for error messages)."""
    where = f"zenops/catalog/{filename}"
    data = yaml.safe_load(resources.files(PACKAGE).joinpath(filename).read_text(encoding="utf-8"))
    entries = data.get(top) if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise ConfigError(where, top, "missing or not a mapping", hint="the packaged catalogue is damaged; reinstall")
    return where, entries
