from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from zenops.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def load_file_module(name: str, path: Path) -> ModuleType:
    """A Python file of the repository that is no importable package module (a role's file, a plugin), loaded by
    its path under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True, scope="session")
def sigint_reaches_children() -> None:
    """Tests that press Ctrl-C on a real `zenops` (SIGINT) need it to start with SIGINT's default action. A command
    run in the background by a non-interactive shell (scripts/test runs its stages so) starts with SIGINT ignored,
    and exec passes "ignored" on: zenops, rightly, keeps ignoring it (as under nohup), and the test waits for an
    interruption that never comes. A Python handler here is reset to the default by exec, so children get it."""
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set a handler
    if main_thread and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # scripts/test stops a lane that runs beside a failed tier with SIGTERM: an interruption, so the fixtures still
    # take their hosts and deployments down (by default SIGTERM ends pytest without its teardown)
    if main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own XDG dirs: no test reads or writes the operator's real config or state.

    $ZENOPS_IMAGE_CACHE is let through on purpose: the machine's image cache (tarballs keyed by their inputs digest,
    see roles/vllm_image) is shared by the e2e tests, Molecule and the demo; without it the role would use this
    test's empty XDG_CACHE_HOME and build the engine image again."""
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


class Result:
    def __init__(self, exit_code: int, output: str) -> None:
        self.exit_code = exit_code
        self.output = output


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Call the console entry point zenops.cli.main.main as the installed script does; capture exit code and output."""
    monkeypatch.setenv("COLUMNS", "200")

    def _run(args: list[str]) -> Result:
        with pytest.raises(SystemExit) as info:
            main(args)
        captured = capsys.readouterr()
        code = info.value.code
        return Result(code if isinstance(code, int) else 1, captured.out + captured.err)

    return _run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `full` (repeats and variants of scenarios the landing run covers) run only with
    `scripts/test --full`, which sets ZENOPS_E2E_FULL=1: the landing CI keeps one real e2e per feature in its budget."""
    if os.environ.get("ZENOPS_E2E_FULL") == "1":
        return
    skip = pytest.mark.skip(reason="a variant for `scripts/test --full` (ZENOPS_E2E_FULL=1)")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


def skip_rows(reports: list[pytest.TestReport], lane: str) -> list[str]:
    """One line per skipped test: lane, test id, reason (tab-separated; tabs and newlines in a reason made spaces)."""
    rows = []
    for rep in reports:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = " ".join(reason.removeprefix("Skipped: ").split())
        rows.append(f"{lane}\t{rep.nodeid}\t{reason}\n")
    return rows


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    """With $ZENOPS_SKIPS_FILE (scripts/test sets it): append this run's skipped tests and their reasons to it, for
    scripts/ci-timings' "not proven on this machine" (a CPU branch this machine cannot serve, a --full variant...).
    The xdist controller writes them all; its workers write nothing."""
    out = os.environ.get("ZENOPS_SKIPS_FILE")
    if not out or hasattr(config, "workerinput"):
        return
    rows = skip_rows(terminalreporter.stats.get("skipped", []), os.environ.get("ZENOPS_LANE") or "unit+runner")
    if rows:
        with open(out, "a", encoding="utf-8") as f:  # one write: the lanes append side by side
            f.write("".join(rows))


def lane_cpus() -> str | None:
    """The CPUs of the test hosts of the e2e modules that run beside the other lanes of scripts/test (the rollout
    fleet, the serving e2e): this machine's last CPU, as a 1-vCPU host (`zenops devhost up --cpus`; their facts show
    that one CPU, so their plans bind it). On a 2-core machine, servers that bind both cores busy-poll them while
    the other lanes' work waits; confined to one, they leave the others to the lanes. None on a 1-CPU machine.
    The roofline e2e keeps the whole machine: it measures it, alone."""
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1]) if len(cpus) > 1 else None


def wait_for_a_quiet_machine(limit_s: float = 3 * 3600) -> float:
    """Before a measurement that needs a quiet machine (the rollout's performance gates): wait until every other lane
    of scripts/test has ended, so that no vLLM workload of theirs runs beside it (ZENOPS_QUIET_AFTER: their end marks,
    space-separated). Outside scripts/test: no wait. Past ``limit_s`` it goes on (the verdict may then be noisy; the
    lanes' own timeouts end them long before). Returns the seconds waited."""
    marks = [Path(m) for m in os.environ.get("ZENOPS_QUIET_AFTER", "").split()]
    t0 = time.monotonic()
    while any(not m.exists() for m in marks) and time.monotonic() - t0 < limit_s:
        time.sleep(5)
    waited = time.monotonic() - t0
    if marks:
        left = [m.name for m in marks if not m.exists()]
        print(f"\nwaited {waited:.0f}s for the other lanes to end" + (f" (still running: {left})" if left else ""))
    return waited
