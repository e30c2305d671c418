"""The only module that knows ansible-runner.

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
import re
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from zenops import paths
from zenops.config import Config, SshSettings
from zenops.errors import CanceledError, HostFailure, RunFailedError, UsageError, ZenopsError

# a name that IS a secret (hf_token, api_key, db_password), not one that counts something (kv_tokens, max_tokens)
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|password|passwd|secrets?|api_?keys?|private_keys?|credentials?)$", re.IGNORECASE
)
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY-----|sk-[A-Za-z0-9]{20,}"
    r"|://[^/\s:@]+:[^/\s@]+@)"  # credentials in a URL (an index URL with user:password@)
)
# ansible facts a play may return to zenops: set_fact zenops_<name> in a task and it lands in RunResult.host_facts
_FACT_PREFIX = "zenops_"
# secrets an operator may have in the environment: ansible-runner copies os.environ into the run's artifacts
# (artifacts/<id>/command), so these are taken out of the environment while a run is prepared. zenops hands them to
# Ansible as files instead; Ansible itself never needs them.
SECRET_ENV_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY")
# an environment variable whose value is a secret (OS_PASSWORD, OS_APPLICATION_CREDENTIAL_SECRET, GITHUB_TOKEN, ...)
_SECRET_ENV = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY", re.IGNORECASE)
# a value shorter than this is never scrubbed: a secret-named variable set to "1" must not hide every "1" in the logs
_SECRET_MIN_LEN = 8
_SECRET_FILE_MAX = 64 * 1024
_HIDDEN = "<hidden>"
_MESSAGE_LIMIT = 600


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable holds a secret that no artifact may keep (``*PASSWORD*``, ``*SECRET*``,
    ``*TOKEN*``, ``*API_KEY*``, and :data:`SECRET_ENV_NAMES`)."""
    return name in SECRET_ENV_NAMES or bool(_SECRET_ENV.search(name))


def check_no_secrets(extravars: Mapping[str, Any], where: str = "extravars") -> None:
    """Refuse values that look secret: they would be written to disk in plain text by ansible-runner."""

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
            return
        if isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")
            return
        leaf = re.sub(r"(\[\d+\])+$", "", key.rsplit(".", 1)[-1])  # api_keys[0] is an api key too
        if _SECRET_KEY.search(leaf) and value not in (None, "", False):
            raise ZenopsError(
                f"refusing to pass '{key}' to Ansible in {where}: it would be written to disk in plain text",
                hint=f"pass a file instead: put the secret in a file with mode 0600 and pass '{leaf}_file'",
            )
        if isinstance(value, str) and _SECRET_VALUE.search(value):
            raise ZenopsError(
                f"refusing to pass '{key}' to Ansible in {where}: its value looks like a token or a private key",
                hint="pass the path of a file holding the secret (mode 0600), never the secret itself",
            )

    walk(extravars, "")


def _ordered(secrets: Iterable[str]) -> list[str]:
    """The values worth hiding, longest first (a secret that contains another is hidden whole)."""
    return sorted({s for s in secrets if len(s) >= _SECRET_MIN_LEN}, key=len, reverse=True)


def _hide(text: str, values: list[str]) -> str:
    for v in values:
        text = text.replace(v, _HIDDEN)
    return text


def scrub(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Replace every secret value in the files under ``root`` by ``<hidden>`` (values shorter than 8 characters are
    left); a binary file holding one is removed. Returns the files that held one."""
    values = _ordered(secrets)
    if not values:
        return []
    hit = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            if any(v.encode() in path.read_bytes() for v in values):
                path.unlink()  # a binary file holding a secret: not worth keeping
                hit.append(path)
            continue
        except OSError:
            continue
        new = _hide(text, values)
        if new != text:
            path.write_text(new, encoding="utf-8")
            hit.append(path)
    return hit


def _escaped(values: Iterable[str]) -> set[str]:
    """The values, and each as it appears inside a JSON string (a multi-line key, a quote)."""
    return {form for v in values for form in (v, json.dumps(v, ensure_ascii=False)[1:-1])}


def secret_values(extravars: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
    """What no artifact of a run may hold: the values of secret-named environment variables, and the contents of
    the secret files the extra vars name (``<secret name>_file`` keys, as :func:`check_no_secrets` asks for)."""
    out = {v for k, v in environ.items() if is_secret_env_name(k) and v}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, key)
        elif isinstance(value, str) and value and key.endswith("_file") and _SECRET_KEY.search(key[: -len("_file")]):
            try:
                path = Path(value).expanduser()
                if path.is_file() and path.stat().st_size <= _SECRET_FILE_MAX:
                    out.add(path.read_text(encoding="utf-8", errors="replace").strip())
            except OSError:
                pass

    walk(extravars, "")
    return _escaped(v for v in out if v)


def _scrub_command(artifact: Path, secrets: Iterable[str]) -> None:
    """ansible-runner's record of the run's command and environment (``artifacts/<id>/command``) without
    secret-named variables or secret values, replaced whole (the old file goes with its inode)."""
    try:
        record = json.loads(artifact.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and isinstance(record.get("env"), dict):
        record["env"] = {k: v for k, v in record["env"].items() if not is_secret_env_name(str(k))}
    tmp = artifact.with_name(artifact.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_hide(json.dumps(record, ensure_ascii=False), _ordered(secrets)))
    os.replace(tmp, artifact)


class _Unsafe(dict[str, Any]):
    """The extra vars' top-level mapping, written with the ``!unsafe`` tag."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(_Unsafe, lambda dumper, value: dumper.represent_mapping("!unsafe", value))


def write_extravars(path: Path, extravars: Mapping[str, Any]) -> None:
    """Write ``extravars`` for ``ansible-playbook -e @path`` (file mode 0600): JSON values, as ansible-runner would
    have passed them, in one mapping tagged ``!unsafe``. ansible-core 2.19 trusts the strings of an extra-vars file
    as templates; under ``!unsafe`` none is, at any depth, keys included. The tag goes on the mapping, not on each
    string: a string tagged ``!unsafe`` is resolved again as a plain scalar ('' becomes null, '2' an int)."""
    plain = json.loads(json.dumps(extravars))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("# written by zenops: everything below is data (!unsafe), never a template\n")
        yaml.dump(_Unsafe(plain), f, Dumper=_UnsafeDumper, allow_unicode=True, sort_keys=False)


# --- events -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run, reduced to what an operator or a script needs."""

    kind: str  # play | task | ok | changed | failed | unreachable | skipped | retry | rescued | warning
    play: str = ""
    task: str = ""
    host: str = ""
    message: str = ""
    ignored: bool = False
    attempt: int | None = None
    retries: int | None = None
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", None, False)}


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class RunResult:
    run_id: str
    playbook: str
    status: str  # successful | failed | canceled | timeout
    rc: int
    run_dir: Path
    started: str
    duration_s: float
    stats: dict[str, HostStats] = field(default_factory=dict)
    host_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[HostFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.stats.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "run_dir": str(self.run_dir),
            "started": self.started,
            "duration_s": round(self.duration_s, 2),
            "stats": {h: asdict(s) for h, s in self.stats.items()},
            "host_facts": self.host_facts,
            "failures": [asdict(f) for f in self.failures],
        }


class ProgressSink(Protocol):
    def event(self, event: RunEvent) -> None: ...

    def finished(self, result: RunResult) -> None: ...


class NullSink:
    def event(self, event: RunEvent) -> None:
        pass

    def finished(self, result: RunResult) -> None:
        pass


def _message(res: Mapping[str, Any]) -> str:
    """The most useful one-line-ish explanation of a task result; for a loop, its first failed item's (Ansible's
    own "One or more items failed" says nothing: e.g. which server of the health gate, and why)."""
    items = res.get("results")
    if isinstance(items, list):
        failed = [r for r in items if isinstance(r, Mapping) and r.get("failed")]
        if failed:
            label = failed[0].get("_ansible_item_label", failed[0].get("item"))
            more = f" (and {len(failed) - 1} more item(s))" if len(failed) > 1 else ""
            text = f"item {label}: {_message(failed[0])}{more}" if label is not None else _message(failed[0]) + more
            return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
    for key in ("msg", "reason", "module_stderr", "stderr", "exception", "stdout"):
        value = res.get(key)
        if value:
            text = str(value).strip()
            if key == "module_stderr" and res.get("msg"):
                continue
            return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
    if res.get("censored"):
        return str(res["censored"])
    if "rc" in res:
        return f"command exited with rc={res['rc']}"
    return "no message"


class _EventTranslator:
    """Turns raw ansible-runner events into RunEvents and keeps what the result needs."""

    def __init__(self, sink: ProgressSink) -> None:
        self.sink = sink
        self.play = ""
        self.task = ""
        self.stats: dict[str, HostStats] = {}
        self.host_facts: dict[str, dict[str, Any]] = {}
        self.last_failure: dict[str, HostFailure] = {}
        self.lock = threading.Lock()

    def __call__(self, raw: dict[str, Any]) -> bool:
        with self.lock:
            try:
                self._handle(raw)
            except Exception as e:  # never let a display bug kill the run
                self.sink.event(RunEvent("warning", message=f"zenops could not read an event: {e!r}"))
        return True  # keep the event on disk for post-mortems

    def _emit(self, kind: str, data: Mapping[str, Any], **kw: Any) -> None:
        host = str(data.get("host") or data.get("remote_addr") or "")
        self.sink.event(RunEvent(kind, play=self.play, task=str(data.get("task") or self.task), host=host, **kw))

    def _handle(self, raw: dict[str, Any]) -> None:
        name = raw.get("event", "")
        data: dict[str, Any] = raw.get("event_data") or {}
        res: dict[str, Any] = data.get("res") or {}
        if name == "playbook_on_play_start":
            self.play = str(data.get("play") or data.get("play_pattern") or "")
            self.sink.event(RunEvent("play", play=self.play))
        elif name in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self.task = str(data.get("task") or data.get("task_action") or "")
            self.sink.event(RunEvent("task", play=self.play, task=self.task))
        elif name == "runner_on_ok":
            facts = res.get("ansible_facts") or {}
            mine = {k: v for k, v in facts.items() if k.startswith(_FACT_PREFIX)}
            if mine:
                self.host_facts.setdefault(str(data.get("host")), {}).update(mine)
            self._emit("changed" if res.get("changed") else "ok", data)
        elif name == "runner_on_failed":
            ignored = bool(data.get("ignore_errors"))
            msg = _message(res)
            if not ignored:
                host = str(data.get("host"))
                self.last_failure[host] = HostFailure(host, str(data.get("task") or self.task), msg)
            self._emit("failed", data, message=msg, ignored=ignored)
        elif name == "runner_on_unreachable":
            host = str(data.get("host"))
            msg = _message(res)
            self.last_failure[host] = HostFailure(host, str(data.get("task") or self.task), msg, unreachable=True)
            self._emit("unreachable", data, message=msg)
        elif name == "runner_on_skipped":
            self._emit("skipped", data)
        elif name == "runner_retry":
            self._emit("retry", data, attempt=res.get("attempts"), retries=res.get("retries"))
        elif name in {"warning", "deprecated"}:
            text = str(raw.get("stdout") or "").strip()
            if text:
                self.sink.event(RunEvent("warning", message=text))
        elif name == "playbook_on_stats":
            keys = {
                "ok": "ok",
                "changed": "changed",
                "failures": "failed",
                "dark": "unreachable",
                "skipped": "skipped",
                "rescued": "rescued",
                "ignored": "ignored",
            }
            for src, dst in keys.items():
                for host, count in (data.get(src) or {}).items():
                    setattr(self.stats.setdefault(host, HostStats()), dst, int(count))
            for host in data.get("processed") or {}:
                self.stats.setdefault(host, HostStats())

    def failures(self) -> list[HostFailure]:
        """Failures that stood: hosts whose final stats show a failure or unreachability (rescued ones drop out)."""
        out = []
        for host, failure in self.last_failure.items():
            s = self.stats.get(host)
            if s is None or s.failed or s.unreachable:
                out.append(failure)
        return out


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
    check_no_secrets(spec.extravars)
    check_no_secrets(spec.envvars, where="the environment")
    if spec.inventory is not None and not spec.inventory.is_file():
        raise UsageError(f"inventory {spec.inventory} not found", hint="pass an existing inventory file")
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
        from zenops.lock import processes_with, stop_processes  # noqa: PLC0415

        for _pass in range(2):  # twice: a child forked between the first look and the signal is caught the second
            left += stop_processes(processes_with(RUN_ENV, run_dir.name), grace=5.0)
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
    if status == "canceled" or interrupted:
        stopped = f"; stopped {len(left)} process(es) of it still running here" if left else ""
        raise CanceledError(
            f"{playbook.name} canceled after {result.duration_s:.0f}s{stopped}; commands already started on remote "
            "hosts may still be running there",
            hint="re-run the same command to resume: the playbooks are idempotent",
        )
    if not result.stats and not result.failures and _no_hosts_matched(run_dir, result.ok):
        where = f"inventory {spec.inventory}" if spec.inventory else "the implicit localhost inventory"
        raise UsageError(
            f"{where} has no hosts {f'matching --limit {spec.limit}' if spec.limit else 'in it'}: nothing was done",
            hint="list hosts under `all:` (YAML) or in a group (INI); check with `ansible-inventory -i FILE --graph`",
        )
    if not result.ok:
        raise RunFailedError(playbook.name, result.failures, status=status, rc=rc, run_dir=str(run_dir))
    return result


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
