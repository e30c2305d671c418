"""One mutating operation per deployment at a time (Terraform's state lock): `up`, `down`, `rollout`, `bench`,
`reap` and `campaign run|down` hold ``<state_dir>/locks/<key>.lock`` while they change a deployment.

One key per deployment, however a command names it: zenops.deployment.identity derives it (``DeploymentId.key``) from
the deployment's one identity, whether it is named by cloud and name (`up --cloud`, `down --deployment`, `reap`,
`bench`/`rollout --deployment`) or by its inventory (`up -i`, `bench -i`, `rollout -i`).

The lock file names its holder (pid, the pid's start time, host, command, start, a token). It appears whole: the
record is written to a temp file first and linked into place (link() fails when a lock exists), so a reader never
sees it empty or half-written. Every process a holder starts inherits ``ZENOPS_LOCK=<token>`` in its environment,
ansible-playbook and its workers included, so when the holder is gone (``kill -9``, a lost session) its orphaned
playbooks can still be found and stopped. A later command:
- holder alive on this machine: refuses (exit 14), naming it;
- holder dead: stops the processes carrying its token (SIGTERM, then SIGKILL), says so, and takes the lock over;
- holder on another machine (a shared state dir): refuses; after checking there, remove the lock file by hand.
Deciding on a holder and replacing (or releasing) its lock happen under ``flock`` on ``<key>.guard`` beside it, the
holder read again there: of several commands taking over one dead holder's lock exactly one does, the others refuse
naming it, and a release never removes a lock that was taken over meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops.config import Config
from zenops.errors import LockedError

ENV = "ZENOPS_LOCK"
_env_guard = threading.Lock()  # threads of one command (a campaign's groups) hold locks of their own


@dataclass(frozen=True)
class Holder:
    pid: int
    pid_start: int | None  # the process's start time (clock ticks since boot): a reused pid is not the holder
    host: str
    command: str
    started_at: str
    token: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, `{self.command}`, since {self.started_at}"


def lock_path(config: Config, key: str) -> Path:
    return config.state_dir / "locks" / f"{key}.lock"


def _stat(pid: int, proc: Path = Path("/proc")) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None when there is no such process."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its closing one
    return stat.rsplit(")", 1)[1].split()


def proc_start(pid: int, proc: Path = Path("/proc")) -> int | None:
    fields = _stat(pid, proc)
    return int(fields[19]) if fields else None


def alive(holder: Holder, proc: Path = Path("/proc")) -> bool:
    """Whether the holder process still runs (same pid and start time)."""
    start = proc_start(holder.pid, proc)
    return start is not None and (holder.pid_start is None or start == holder.pid_start)


def orphans(token: str, proc: Path = Path("/proc")) -> list[int]:
    """Processes whose environment carries this lock's token (a dead holder's playbooks and their workers). Locks
    held inside one another (a campaign holds its own and its servers') list their tokens comma-separated, outermost
    first: either lock finds the processes."""
    return processes_with(ENV, token, proc, listed=True)


def processes_with(name: str, value: str, proc: Path = Path("/proc"), *, listed: bool = False) -> list[int]:
    """Processes (other than this one) whose environment has ``name=value`` (``listed``: ``value`` among the
    comma-separated values of ``name``). SSH connection masters are left out: a run's master (ControlPersist) is
    shared by every Ansible run of this user to that host, and ends by itself once idle."""
    prefix = f"{name}=".encode()
    want = value.encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            if b"[mux]" in (entry / "cmdline").read_bytes():  # ssh renames its master "ssh: <socket> [mux]"
                continue
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(prefix):
                got = item[len(prefix) :]
                if got == want or (listed and want in got.split(b",")):
                    found.append(int(entry.name))
                break
    return sorted(found)


def _running(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether the process exists and has not exited (a zombie, exited but not yet reaped by its parent, has not
    got anything left to stop)."""
    fields = _stat(pid, proc)
    return fields is not None and fields[0] != "Z"


def stop_processes(pids: list[int], grace: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL what is left after ``grace`` seconds; returns the pids that were signalled."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p) for p in signalled):
        time.sleep(0.2)
    for pid in signalled:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return signalled


def read_holder(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError):
        return Holder(0, None, "?", "(unreadable lock file)", "?", "")
    return Holder(**{k: data.get(k) for k in Holder.__dataclass_fields__})


def _command() -> str:
    return " ".join(["zenops", *sys.argv[1:]])[:300]


@contextmanager
def deployment_lock(
    config: Config, key: str, *, command: str | None = None, note: Callable[[str], None] = lambda _t: None
) -> Iterator[Holder]:
    """Hold the lock of deployment ``key`` for the block; see the module docstring for what a taken lock does."""
    path = lock_path(config, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    me = Holder(
        pid=os.getpid(),
        pid_start=proc_start(os.getpid()),
        host=socket.gethostname(),
        command=command or _command(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        token=secrets.token_hex(8),
    )
    _acquire(path, me, key, note)
    _add_token(me.token)
    try:
        yield me
    finally:
        _remove_token(me.token)
        _release(path, me)


@contextmanager
def deployment_locks(
    config: Config, keys: Iterable[str], *, note: Callable[[str], None] = lambda _t: None
) -> Iterator[list[Holder]]:
    """Hold the locks of several deployments (in key order) for the block; one refused releases those taken."""
    with ExitStack() as stack:
        yield [stack.enter_context(deployment_lock(config, key, note=note)) for key in sorted(set(keys))]


def _acquire(path: Path, me: Holder, key: str, note: Callable[[str], None]) -> None:
    """Put the complete record of ``me`` at ``path``: linked when there is no lock, or, under the guard, in place
    of a dead holder's. Raises LockedError when the holder is alive, elsewhere, or this process."""
    tmp = path.with_name(f".{path.name}.{me.token}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(me), f)
    try:
        for _attempt in range(3):
            try:
                os.link(tmp, path)
                return
            except FileExistsError:
                pass
            with _guard(path):
                holder = read_holder(path)
                if holder is None:
                    continue  # released meanwhile: link again
                _take_over(path, holder, key, note)
                os.replace(tmp, path)  # the lock is never absent: no link() of another command slips in
                return
        raise LockedError(f"could not take the lock of deployment {key} ({path})", hint="try again")
    finally:
        tmp.unlink(missing_ok=True)


def _release(path: Path, me: Holder) -> None:
    with _guard(path):
        current = read_holder(path)
        if current is not None and current.token == me.token:
            path.unlink(missing_ok=True)


@contextmanager
def _guard(path: Path) -> Iterator[None]:
    """Mutual exclusion (between processes and threads) around reading the lock's holder and replacing or removing
    the lock: flock on ``<key>.guard`` beside it, a file never removed (a flock on a removed file guards nothing)."""
    fd = os.open(path.with_suffix(".guard"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _add_token(token: str) -> None:
    """Into ZENOPS_LOCK after the tokens of the locks held already (an outer one's stays: see orphans())."""
    with _env_guard:
        before = os.environ.get(ENV)
        os.environ[ENV] = f"{before},{token}" if before else token


def _remove_token(token: str) -> None:
    with _env_guard:
        rest = [t for t in os.environ.get(ENV, "").split(",") if t and t != token]
        if rest:
            os.environ[ENV] = ",".join(rest)
        else:
            os.environ.pop(ENV, None)


def _take_over(path: Path, holder: Holder, key: str, note: Callable[[str], None]) -> None:
    """Called under the guard with the lock's current holder: refuses (LockedError) unless the holder is dead, else
    stops its orphans and says so; the caller then puts its own record in place."""
    if holder.host != socket.gethostname():
        raise LockedError(
            f"deployment {key} is locked by {holder.describe()}",
            hint=f"it runs on another machine: wait for it, or check there and remove {path}",
        )
    if holder.pid == os.getpid():
        raise LockedError(f"deployment {key} is already locked by this command ({holder.describe()})")
    if holder.pid and alive(holder):
        raise LockedError(
            f"deployment {key} is locked by {holder.describe()}",
            hint=f"wait for it to finish, or stop it (kill {holder.pid}); a dead holder's lock is taken over",
        )
    stopped = stop_processes(orphans(holder.token)) if holder.token else []
    note(
        f"the lock of deployment {key} was held by a command that is gone ({holder.describe()}); "
        + (f"stopped {len(stopped)} orphaned process(es) it left running ({', '.join(map(str, stopped))}); "
           if stopped else "it left no process running; ")
        + "taking it over"
    )  # fmt: skip


def describe_lock(config: Config, key: str) -> dict[str, Any] | None:
    """The lock's holder as a dict with ``alive``, or None when the deployment is not locked (for `zenops status`)."""
    holder = read_holder(lock_path(config, key))
    if holder is None:
        return None
    return {**asdict(holder), "alive": bool(holder.pid) and alive(holder)}
