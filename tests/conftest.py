from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own XDG dirs: no test reads or writes the operator's real config or state."""
    home = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.delenv("ZENOPS_CONFIG", raising=False)
    monkeypatch.delenv("ZENOPS_COLLECTION_ROOT", raising=False)
    return home


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """localhost over the local connection, with this venv's Python."""
    inv = tmp_path / "local.ini"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return inv
