"""Runner events as zenops sees them: :class:`RunEvent` objects for a :class:`ProgressSink`, and the
:class:`RunResult` of a run (its hosts' stats, the facts its plays returned, the failures that stood)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zenops.errors import HostFailure

# ansible facts a play may return to zenops: set_fact zenops_<name> in a task and it lands in RunResult.host_facts
_FACT_PREFIX = "zenops_"
_MESSAGE_LIMIT = 600


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
        return {**asdict(self), "run_dir": str(self.run_dir), "duration_s": round(self.duration_s, 2)}


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
