"""What a CI run could not prove on its machine: every pytest run under scripts/test appends its skipped tests and
their reasons to $ZENOPS_SKIPS_FILE (tests/conftest.py), and scripts/ci-timings prints them by reason after the wall
times ("not proven on this machine")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

TESTS = """
import pytest

def test_proven():
    pass

@pytest.mark.parametrize("branch", ["zen", "cpu"])
def test_branch(branch):
    if branch == "cpu":
        pytest.skip("stock platform not served: this CPU takes zen;\\tthe --full sweep serves it")

@pytest.fixture
def cloud():
    pytest.skip("the sandbox cloud is not running")

def test_in_the_cloud(cloud):
    pass
"""


def pytest_with_skips_file(tmp_path: Path, skips: Path, lane: str | None, *args: str) -> None:
    (tmp_path / "test_some.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("ZENOPS_LANE", "PYTEST_ADDOPTS")}
    env |= {"ZENOPS_SKIPS_FILE": str(skips), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
    if lane:
        env["ZENOPS_LANE"] = lane
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider", *args,
         str(tmp_path / "test_some.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_skips_are_written_with_their_lane_and_reason_and_printed_by_reason(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    ci.mkdir()
    skips = ci / "skips.tsv"
    pytest_with_skips_file(tmp_path, skips, "serve lane")
    pytest_with_skips_file(tmp_path, skips, None, "-p", "no:xdist")  # the unit tier: no lane
    rows = [line.split("\t") for line in skips.read_text().splitlines()]
    reason = "stock platform not served: this CPU takes zen; the --full sweep serves it"  # the tab: a space
    assert sorted(r[0] for r in rows) == ["serve lane", "serve lane", "unit+runner", "unit+runner"]
    assert {(r[1].rsplit("::", 1)[-1], r[2]) for r in rows} == {
        ("test_branch[cpu]", reason),
        ("test_in_the_cloud", "the sandbox cloud is not running"),
    }

    timings = ci / "timings.tsv"
    timings.write_text("ruff\tok\t3\n")
    out = subprocess.run(["bash", str(REPO / "scripts" / "ci-timings"), str(timings)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    _, section = out.split("==> not proven on this machine")
    assert f"  2 x [serve lane, unit+runner] {reason}\n" in section
    assert "  2 x [serve lane, unit+runner] the sandbox cloud is not running\n" in section
    assert "test_branch[cpu]" in section

    skips.write_text("")  # nothing skipped: no section
    out = subprocess.run(["bash", str(REPO / "scripts" / "ci-timings"), str(timings)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "not proven" not in out
    assert "ruff" in out
