"""The only package that knows ansible-runner: :mod:`zenops.runner.events` reads its events,
:mod:`zenops.runner.artifacts` keeps secrets and templates out of what it writes to disk, and this module runs it.

Each run gets its own private data dir ``<state_dir>/runs/<run-id>`` (mode 0700). The environment puts this venv's
bin first on PATH and points ANSIBLE_CONFIG / ANSIBLE_COLLECTIONS_PATH at a per-run ansible.cfg and at the zenops
collection, so ``zenops.inference.*`` and the collections bundled with the ``ansible`` package resolve from any
working directory. Runner events become :class:`RunEvent` objects handed to a :class:`ProgressSink`.

Secrets: ansible-runner writes extravars, envvars and the command line to disk in the data dir. Secrets therefore
never travel as extravars or envvars: pass the *path* of a file (mode 0600) instead. :func:`check_no_secrets`
enforces that before anything starts. The operator's own environment reaches ansible-playbook as it is (an
``OS_PASSWORD`` of an ``OS_*`` cloud is needed there) except :data:`SECRET_ENV_NAMES`, but no artifact keeps a
secret: ansible-runner's record of the environment (``artifacts/<id>/command``) loses every secret-named variable
(:func:`is_secret_env_name`) as soon as the process is spawned, and when the run ends every file of the run directory
loses every known secret value (those variables' values, and the contents of the secret files named by
``*_file`` extra vars such as ``vllm_server_api_key_file``): see :func:`scrub`.

Untrusted text: extra vars carry text zenops did not write (a host's CPU model name in the plans' reasons, a tuned
file's fields, a model directory's name), and ansible-core renders ``{{ }}`` in the strings of an extra-vars file.
zenops writes the extra vars itself (:func:`write_extravars`) as one mapping tagged ``!unsafe``: every string in it
is data for Ansible, never a template. Nothing zenops passes is meant to be templated.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops import paths
from zenops.config import Config, SshSettings
from zenops.errors import CanceledError, RunFailedError, UsageError
from zenops.runner.artifacts import (
    SECRET_ENV_NAMES,
    _scrub_command,
    check_no_secrets,
    is_secret_env_name,
    scrub,
    secret_values,
    write_extravars,
)
from zenops.runner.events import HostStats, NullSink, ProgressSink, RunEvent, RunResult, _EventTranslator

__all__ = [
    "RUN_ENV",
    "SECRET_ENV_NAMES",
    "HostStats",
    "NullSink",
    "ProgressSink",
    "RunEvent",
    "RunResult",
    "RunSpec",
    "RunnerSettings",
    "check_no_secrets",
    "is_secret_env_name",
    "new_run_id",
    "run_playbook",
    "scrub",
    "secret_values",
    "settings_from_config",
    "write_extravars",
]


# --- the run ----------------------------------------------------------------------------------------------------


@dataclass
class RunSpec:
    playbook: str | Path  # a name under the collection's playbooks/ (without .yml), or a path to a playbook
    inventory: Path | None = None  # None: implicit localhost
    extravars: dict[str, Any] = field(default_factory=dict)
    limit: str | None = None
    check: bool = False
    verbosity: int = 0
    envvars: dict[str, str] = field(default_factory=dict)  # extra environment, never secrets


@dataclass(frozen=True)
class RunnerSettings:
    state_dir: Path
    keep_runs: int = 50
    ssh_user: str | None = None
    ssh_private_key_file: Path | None = None
    host_key_checking: str = "accept-new"  # accept-new | strict | off


def settings_from_config(config: Config) -> RunnerSettings:
    return RunnerSettings(
        state_dir=config.state_dir,
        keep_runs=config.keep_runs,
        ssh_user=config.ssh.user,
        ssh_private_key_file=config.ssh.private_key_file,
        host_key_checking=config.ssh.host_key_checking,
    )


def new_run_id(playbook: str) -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{playbook}-{secrets.token_hex(3)}"


def _make_private(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)


# ssh's connection socket: Ansible names it <control_path_dir>/<10-char hash>, and ssh first binds it with a 17-char
# temporary suffix; a Unix socket's path holds at most 107 bytes (sun_path, 108 with its NUL)
SOCKET_PATH_MAX = 107
_SOCKET_NAME = 1 + 10 + 17


def control_path_dir(home: Path | None = None) -> Path | None:
    """Where ssh's connection sockets go when Ansible's default (~/.ansible/cp) would make their paths too long for a
    Unix socket (a deep home directory: ssh then fails every connection with "unix_listener: path ... too long for Unix
    domain socket"); None: the default fits. The short directory is this user's own, under the system's temporary
    directory, 0700; one that is not a directory of ours, or that others can enter, is refused."""
    default = (home or Path.home()) / ".ansible" / "cp"
    if len(str(default)) + _SOCKET_NAME <= SOCKET_PATH_MAX:
        return None
    import tempfile  # noqa: PLC0415

    short = Path(tempfile.gettempdir()) / f"zenops-cp-{os.getuid()}"
    with suppress(FileExistsError):
        short.mkdir(mode=0o700)
    st = short.lstat()
    import stat  # noqa: PLC0415

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise UsageError(
            f"{short} (where zenops puts ssh's connection sockets, your home directory being too deep for them) is "
            "not a private directory of yours",
            hint=f"remove it, or give it to your user with mode 0700: chmod 700 {short}",
        )
    return short


def _ansible_cfg(settings: RunnerSettings, collections: Path) -> str:
    checking = SshSettings(host_key_checking=settings.host_key_checking).ssh_options()
    ssh_args = " ".join(("-o", "ControlMaster=auto", "-o", "ControlPersist=60s", *checking))
    lines = [
        "# written by zenops for this run",
        "[defaults]",
        f"collections_path = {collections}",
        "host_key_checking = " + ("False" if settings.host_key_checking == "off" else "True"),
        "interpreter_python = auto_silent",
        "retry_files_enabled = False",
        "forks = 20",
        "timeout = 30",
        "stdout_callback = default",
        "",
        "[ssh_connection]",
        f"ssh_args = {ssh_args}",
        "pipelining = True",
        "",
    ]
    short = control_path_dir()
    if short is not None:
        lines.insert(lines.index("pipelining = True"), f"control_path_dir = {short}")
    if settings.ssh_user:
        lines.insert(3, f"remote_user = {settings.ssh_user}")
    if settings.ssh_private_key_file:
        lines.insert(3, f"private_key_file = {settings.ssh_private_key_file}")
    return "\n".join(lines)


def _prune(runs_dir: Path, keep: int) -> None:
    dirs = sorted((d for d in runs_dir.iterdir() if d.is_dir()), key=lambda d: d.name)
    for old in dirs[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def _prepare_run_dir(settings: RunnerSettings, playbook: Path, collections: Path) -> tuple[str, Path, Path]:
    """A fresh private data dir (0700) under state_dir/runs with its own ansible.cfg."""
    runs_dir = settings.state_dir / "runs"
    _make_private(settings.state_dir)
    _make_private(runs_dir)
    run_id = new_run_id(playbook.stem)
    run_dir = runs_dir / run_id
    _make_private(run_dir)
    cfg = run_dir / "ansible.cfg"
    cfg.write_text(_ansible_cfg(settings, collections))
    return run_id, run_dir, cfg


# every process of a run carries its id in this variable: after a cancel, what ansible-runner left running (it stops
# ansible-playbook, not the workers that process forked) is found and stopped by it
RUN_ENV = "ZENOPS_RUN"


def _environment(spec: RunSpec, run_dir: Path, cfg: Path, collections: Path) -> dict[str, str]:
    return {
        RUN_ENV: run_dir.name,
        "PATH": f"{paths.venv_bin()}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
        **spec.envvars,
    }


@contextmanager
def _deferred_interrupt() -> Iterator[list[int]]:
    """While the run starts: a Ctrl-C is noted, not raised. Raised inside ansible-runner's run_async it would leave
    its (non-daemon) thread running the whole playbook with nobody to cancel it, and the process could not exit
    until that playbook ended. The caller cancels the started run instead."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait(thread: threading.Thread, cancel: threading.Event, sink: ProgressSink, *, interrupted: bool = False) -> bool:
    """Wait for the run thread; Ctrl-C sets ``cancel``. Returns whether the operator interrupted (``interrupted``:
    already, while the run was starting)."""
    if interrupted:
        cancel.set()
    while thread.is_alive():
        try:
            thread.join(0.2)
        except KeyboardInterrupt:
            interrupted = True
            cancel.set()
            sink.event(
                RunEvent(
                    "warning",
                    message="canceling: waiting for ansible-playbook to stop "
                    "(Ctrl-C again to leave it running in the background)",
                )
            )
            try:
                thread.join(30)
            except KeyboardInterrupt:
                break
    return interrupted


_ENV_LOCK = threading.Lock()


@contextmanager
def _without_env(names: tuple[str, ...]) -> Iterator[None]:
    """Hide these environment variables while ansible-runner copies the environment (it happens synchronously
    inside run_async, before the run's thread starts); restore them afterwards."""
    with _ENV_LOCK:
        saved = {n: os.environ.pop(n) for n in names if n in os.environ}
        try:
            yield
        finally:
            os.environ.update(saved)


def _refuse_bad_spec(spec: RunSpec) -> None:
    """Before anything starts: no secret in the extra vars or the environment, an inventory that exists."""
    check_no_secrets(spec.extravars)
    check_no_secrets(spec.envvars, where="the environment")
    if spec.inventory is not None and not spec.inventory.is_file():
        raise UsageError(f"inventory {spec.inventory} not found", hint="pass an existing inventory file")


def run_playbook(
    spec: RunSpec,
    settings: RunnerSettings,
    sink: ProgressSink | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run one playbook of the zenops collection; return its result or raise RunFailedError / CanceledError.

    ``cancel`` may be set from another thread; Ctrl-C in the calling (main) thread cancels too.
    """
    sink = sink or NullSink()
    cancel = cancel or threading.Event()
    _refuse_bad_spec(spec)
    playbook = spec.playbook.resolve() if isinstance(spec.playbook, Path) else paths.playbook(spec.playbook)
    collections = paths.collections_path()
    run_id, run_dir, cfg = _prepare_run_dir(settings, playbook, collections)
    cmdline = (["--check"] if spec.check else []) + (["--limit", spec.limit] if spec.limit else [])
    import ansible_runner  # noqa: PLC0415  (not at the top: --help and commands without Ansible start fast)

    if spec.extravars:  # ansible-runner passes env/extravars as -e @file; written here, every string !unsafe
        _make_private(run_dir / "env")
        write_extravars(run_dir / "env" / "extravars", spec.extravars)
    hidden = secret_values(spec.extravars, os.environ)
    command_record = run_dir / "artifacts" / "run" / "command"

    def spawned(data: Mapping[str, Any], **_kw: Any) -> None:
        # ansible-runner has written the environment of the run to the artifacts and then copied it for the child:
        # the record loses its secrets now, before the playbook starts
        if data.get("status") == "running":
            with suppress(OSError):  # (a full disk: the run goes on, and the scrub after it tries again)
                _scrub_command(command_record, hidden)

    translator = _EventTranslator(sink)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    with _deferred_interrupt() as noted, _without_env(SECRET_ENV_NAMES):
        thread, runner = ansible_runner.run_async(
            private_data_dir=str(run_dir),
            ident="run",
            playbook=str(playbook),
            inventory=str(spec.inventory.resolve()) if spec.inventory is not None else None,
            envvars=_environment(spec, run_dir, cfg, collections),
            event_handler=translator,
            status_handler=spawned,
            cancel_callback=cancel.is_set,
            quiet=True,
            verbosity=spec.verbosity or None,
            cmdline=" ".join(cmdline) or None,
            settings={"suppress_ansible_output": True},
        )
    interrupted = _wait(thread, cancel, sink, interrupted=bool(noted))
    status = str(runner.status)
    left: list[int] = []
    if (status in ("canceled", "timeout") or interrupted) and not thread.is_alive():
        # (a run left in the background on purpose, a second Ctrl-C, keeps running: its thread is alive)
        left = _stop_left_running(run_dir)
    rc = runner.rc if isinstance(runner.rc, int) else 254
    result = RunResult(
        run_id=run_id,
        playbook=playbook.name,
        status=status,
        rc=rc,
        run_dir=run_dir,
        started=started,
        duration_s=time.monotonic() - t0,
        stats=translator.stats,
        host_facts=translator.host_facts,
        failures=translator.failures(),
    )
    (run_dir / "result.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
    if not thread.is_alive():  # (one left running in the background writes on; its command record is clean)
        _scrub_command(command_record, hidden)
        scrub(run_dir, hidden)
    _prune(run_dir.parent, settings.keep_runs)
    sink.finished(result)
    _raise_unless_ok(spec, result, interrupted=interrupted, left=left)
    return result


def _stop_left_running(run_dir: Path) -> list[int]:
    """Stop what a canceled run left running here (found by its :data:`RUN_ENV`); the pids stopped."""
    from zenops.lock import processes_with, stop_processes  # noqa: PLC0415

    left: list[int] = []
    for _pass in range(2):  # twice: a child forked between the first look and the signal is caught the second
        left += stop_processes(processes_with(RUN_ENV, run_dir.name), grace=5.0)
    return left


def _raise_unless_ok(spec: RunSpec, result: RunResult, *, interrupted: bool, left: list[int]) -> None:
    """CanceledError for a canceled (or interrupted) run, UsageError when no host matched, RunFailedError for a
    failed one. ``left``: the processes of the run that were stopped here."""
    if result.status == "canceled" or interrupted:
        stopped = f"; stopped {len(left)} process(es) of it still running here" if left else ""
        raise CanceledError(
            f"{result.playbook} canceled after {result.duration_s:.0f}s{stopped}; commands already started on remote "
            "hosts may still be running there",
            hint="re-run the same command to resume: the playbooks are idempotent",
        )
    if not result.stats and not result.failures and _no_hosts_matched(result.run_dir, result.ok):
        where = f"inventory {spec.inventory}" if spec.inventory else "the implicit localhost inventory"
        raise UsageError(
            f"{where} has no hosts {f'matching --limit {spec.limit}' if spec.limit else 'in it'}: nothing was done",
            hint="list hosts under `all:` (YAML) or in a group (INI); check with `ansible-inventory -i FILE --graph`",
        )
    if not result.ok:
        raise RunFailedError(
            result.playbook, result.failures, status=result.status, rc=result.rc, run_dir=str(result.run_dir)
        )


def _no_hosts_matched(run_dir: Path, ok: bool) -> bool:
    """An empty inventory ends successfully with no hosts; a --limit matching nothing ends with rc=1 (ansible-core
    2.19) and no task failure, saying so on stdout."""
    if ok:
        return True
    try:
        stdout = (run_dir / "artifacts" / "run" / "stdout").read_text(errors="replace")
    except OSError:
        return False
    return "no hosts to target" in stdout or "no hosts matched" in stdout
