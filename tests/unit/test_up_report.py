"""`zenops up --cloud`'s last line: a dry run says what it would be and that nothing was created (it named an empty
inventory and how to remove what did not exist); a real run names the inventory and the `down` that removes it."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from zenops.cli.context import App
from zenops.cli.up import _report
from zenops.cloud import ledger
from zenops.config import Config
from zenops.hosts import UpResult
from zenops.runner import RunResult


def _said(check: bool, tmp_path: Path) -> str:
    buf = io.StringIO()
    app = App(config=Config(), out=Console(file=buf, width=200), err=Console(file=io.StringIO()))
    run = RunResult("r1", "up", "successful", 0, tmp_path, "2026-11-29T00:00:00Z", 3.0)
    dep = ledger.Deployment(name="qwen", cloud="lab", flavor="gp.5.24.96", image="debian-12", count=1,
                            network_mode="provider", price_per_hour=0.79)  # fmt: skip
    if not check:
        dep.inventory = str(tmp_path / "qwen.yml")
    _report(app, UpResult(run=run, hosts=[]), check, dep)
    return buf.getvalue()


def test_a_dry_run_says_nothing_was_created(tmp_path):
    said = _said(True, tmp_path)
    assert "dry run: deployment qwen on lab would be 1 x gp.5.24.96, $0.79/h; nothing was created" in said, said
    assert "remove with" not in said
    assert "inventory" not in said


def test_a_real_run_names_its_inventory_and_how_to_remove_it(tmp_path):
    said = _said(False, tmp_path)
    assert f"inventory {tmp_path / 'qwen.yml'}" in said, said
    assert "remove with: zenops down qwen --cloud lab --yes" in said, said
