"""The question before cloud money is spent, asked of a real terminal: a real `zenops` process on a pseudo-terminal
(os.openpty) answers "n" (nothing created, exit 130) or "y" (it goes on); without a terminal and without --yes it
refuses with exit 2 naming --yes, before anything is created.

`up --cloud` runs against a stand-in cloud (the driver below replaces openstacksdk's calls: preflight passes) and stops
at its first playbook run (exit 42 = it went on to create); `campaign run` plans offline and fails at the cloud it
cannot reach once it went on."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zenops.campaign.state import Store
from zenops.config import load
from zenops.errors import ExitCode
from zenops.tinymodel import generate

SRC = Path(__file__).resolve().parents[2] / "src"
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")

# `zenops` with openstacksdk replaced by a cloud whose preflight passes; the first playbook run stops it (exit 42)
DRIVER = """
import sys, types
from zenops.cloud import ops
from zenops.deployment import provision
ops.connect = lambda cloud: object()
ops.list_owned = lambda *a, **k: types.SimpleNamespace(servers=[])
ops.preflight = lambda *a, **k: types.SimpleNamespace(flavor={"vcpus": 24, "ram_mib": 98304})
provision.ensure_key = lambda *a: (__import__("pathlib").Path("/nonexistent"), __import__("pathlib").Path(""))
provision.operator_cidr = lambda conn: "192.0.2.1/32"
from zenops.context import RunContext
def run(self, spec):
    print("PLAYBOOK", spec.playbook, "STARTED", flush=True)
    sys.exit(42)
RunContext.run = run
from zenops.cli.main import main
main()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200", NO_COLOR="1")
    env.pop("OS_CLOUD", None)
    return env


def on_terminal(argv: list[str], answer: str | None, cwd: Path, timeout: float = 120) -> tuple[int, str, bool]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal; type ``answer`` at the [y/N] question.
    Returns the exit code, what the terminal showed (without colours) and whether the question was asked."""
    master, slave = os.openpty()
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_env(), cwd=cwd, close_fds=True)
    os.close(slave)
    out, asked = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                if not asked and b"[y/N]" in out:
                    asked = True
                    if answer is not None:
                        os.write(master, answer.encode() + b"\n")
            elif p.poll() is not None:
                break
        else:
            pytest.fail(f"{argv} still running after {timeout}s:\n{out.decode(errors='replace')}")
        code = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return code, " ".join(ANSI.sub("", out.decode(errors="replace")).split()), asked


def no_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    r = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120, check=False
    )
    return r.returncode, " ".join((r.stdout + r.stderr).split())


UP = [sys.executable, "-c", DRIVER, "up", "--cloud", "flex", "--flavor", "gp.5.24.96", "--deployment", "demo"]


def _ledger(home: Path) -> Path:
    return home / "state" / "zenops" / "deployments" / "flex" / "demo.json"


def test_up_cloud_asks_on_a_terminal_and_no_creates_nothing(isolated_home, tmp_path):
    code, out, asked = on_terminal(UP, "n", tmp_path)
    assert asked, out
    assert code == ExitCode.CANCELED, out
    assert "zenops up --cloud will create on cloud flex, deployment demo" in out
    assert "server gp.5.24.96 ($0.79/h)" in out
    assert "$0.79/h, $576.70/month (730 h) until `zenops down`: no expiry" in out
    assert "create 1 server(s) ($0.79/h)? [y/N]" in out
    assert "nothing was created" in out
    assert "PLAYBOOK" not in out
    assert not _ledger(isolated_home).exists()  # not even the ledger entry


def test_up_cloud_answered_yes_goes_on_to_create(isolated_home, tmp_path):
    code, out, asked = on_terminal(UP, "y", tmp_path)
    assert asked, out
    assert "PLAYBOOK up STARTED" in out
    assert code == 42, out
    assert _ledger(isolated_home).exists()


def test_up_cloud_without_a_terminal_needs_yes(isolated_home, tmp_path):
    code, out = no_terminal(UP, tmp_path)
    assert code == ExitCode.USAGE, out
    assert "zenops up --cloud would create 1 server(s)" in out
    assert "$576.70/month" in out
    assert "stdin is not a terminal" in out
    assert "--yes" in out
    assert "PLAYBOOK" not in out
    assert not _ledger(isolated_home).exists()
    code, out = no_terminal([*UP, "--json"], tmp_path)  # a script reading JSON must say --yes too
    assert code == ExitCode.USAGE, out
    assert "--json does not ask" in out
    code, out = no_terminal([*UP, "--yes"], tmp_path)
    assert code == 42, out
    assert "PLAYBOOK up STARTED" in out
    assert "warning: no expiry: the deployment costs $576.70 a month" in out


def test_a_ttl_from_the_config_defaults_is_the_expiry_and_silences_the_warning(isolated_home, tmp_path):
    (tmp_path / "zenops.yaml").write_text("defaults:\n  up:\n    ttl: 2h\n")
    code, out = no_terminal([*UP, "--yes"], tmp_path)
    assert code == 42, out
    assert "until it expires in 2h" in out
    assert "no expiry" not in out


def test_up_dry_run_never_asks(isolated_home, tmp_path):
    code, out, asked = on_terminal([*UP, "--dry-run"], None, tmp_path)
    assert not asked, out
    assert "zenops up --cloud will create on cloud flex" in out  # said all the same
    assert code == 42, out  # the check-mode playbook run


@pytest.fixture
def campaign_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    generate(tmp_path / "tiny-a", seed=0)
    f = tmp_path / "sweep.yaml"
    f.write_text(
        "name: sweep\ncloud: nowhere\nflavors: [gp.5.2.8, gp.5.4.16]\nmodels: [./tiny-a]\n"
        "engine: {image_source: pip}\nbench: {concurrency: [1], prompts: 8, output_len: 32}\n"
        "budget: {max_usd: 1000, ttl: 1h}\nprices: {gp.5.2.8: 1.0, gp.5.4.16: 2.0}\n"
    )
    (tmp_path / "clouds.yaml").write_text("clouds: {}\n")
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(tmp_path / "clouds.yaml"))  # no cloud `nowhere` anywhere
    return f


CAMPAIGN = [sys.executable, "-c", "from zenops.cli.main import main; main()", "campaign", "run"]


def test_campaign_run_asks_with_its_projection_and_cap_and_no_records_nothing(campaign_file, tmp_path):
    code, out, asked = on_terminal([*CAMPAIGN, str(campaign_file)], "n", tmp_path)
    assert asked, out
    assert code == ExitCode.CANCELED, out
    assert "zenops campaign run will create on cloud nowhere" in out
    assert "server gp.5.2.8 (torn down after its cells, $1.00/h)" in out
    assert "budget.max_usd $1,000.00" in out
    assert "at most $2.00/h, $1,460.00/month while its servers are up" in out
    assert "every server expires after 1h" in out
    assert Store(load()).all() == []  # no campaign recorded, nothing to tear down


def test_campaign_run_answered_yes_starts_it(campaign_file, tmp_path):
    code, out, asked = on_terminal([*CAMPAIGN, str(campaign_file)], "y", tmp_path)
    assert asked, out
    assert code != 0, out  # the cloud `nowhere` does not exist: it fails there, after it started
    assert [s.name for s in Store(load()).all()] == ["sweep"]


def test_campaign_run_without_a_terminal_needs_yes(campaign_file, tmp_path):
    code, out = no_terminal([*CAMPAIGN, str(campaign_file)], tmp_path)
    assert code == ExitCode.USAGE, out
    assert "zenops campaign run would create 2 server(s)" in out
    assert "--yes" in out
    assert Store(load()).all() == []
