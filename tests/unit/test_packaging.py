"""A wheel built from this tree carries the collection, and zenops finds it there from any working directory."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

SHIPPED = "zenops/_collection/ansible_collections/zenops/inference/"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (whl,) = out.glob("zenops-*.whl")
    return whl


def test_wheel_ships_the_collection(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "galaxy.yml",
        "meta/runtime.yml",
        "playbooks/up.yml",
        "roles/docker/tasks/main.yml",
        "roles/docker/meta/argument_specs.yml",
    ):
        assert SHIPPED + required in names, required
    assert not any("/molecule/" in n or n.startswith("tests/") for n in names)


def test_installed_wheel_resolves_its_shipped_collection(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = "from zenops import paths; print(paths.collection_root()); print(paths.collections_path())"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env={"PYTHONPATH": str(target), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    root, cpath = proc.stdout.split()
    assert Path(root) == target / SHIPPED.rstrip("/")
    assert (Path(root) / "playbooks" / "up.yml").is_file()
    assert Path(cpath) == target / "zenops" / "_collection"
