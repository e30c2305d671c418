"""Live progress for Ansible runs: a rich spinner for people, JSON lines for scripts."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from zenops.runner import RunEvent, RunResult

_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "red",
    "unreachable": "red",
    "skipped": "cyan",
    "retry": "magenta",
    "rescued": "blue",
}


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


class _Status:
    """What the spinner line shows; rendered on every refresh so the elapsed time ticks."""

    def __init__(self) -> None:
        self.play = ""
        self.task = ""
        self.task_started = time.monotonic()
        self.run_started = time.monotonic()
        self.counts: Counter[str] = Counter()
        self.note = ""
        self.spinner = Spinner("dots")

    def __rich__(self) -> RenderableType:
        now = time.monotonic()
        line = Text()
        line.append(f"{self.task or 'starting'}", style="bold")
        line.append(f"  {_elapsed(now - self.task_started)}", style="dim")
        if self.note:
            line.append(f"  {self.note}", style="magenta")
        counts = "  ".join(
            f"{k}={self.counts[k]}" for k in ("ok", "changed", "failed", "unreachable") if self.counts[k]
        )
        if counts:
            line.append(f"   [{counts}]", style="dim")
        line.append(f"   total {_elapsed(now - self.run_started)}", style="dim")
        self.spinner.text = line
        return self.spinner


class RichProgress:
    """Human progress on stderr: play headers, changed/failed lines, a spinner with the running task and timers.

    verbose=0: plays, changes, failures, warnings; verbose>=1: every host result too.
    On a non-terminal (CI logs) each task start is printed as a line instead of a spinner.
    quiet (a read-only command: `status`, `facts`, `plan`): no play or task lines unless verbose, only failures and
    warnings (the spinner still shows the running task on a terminal).
    """

    def __init__(self, console: Console | None = None, verbose: int = 0, *, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.verbose = verbose
        self.quiet = quiet and not verbose
        self.status = _Status()
        self.live: Live | None = None

    def __enter__(self) -> RichProgress:
        if self.console.is_terminal:
            self.live = Live(self.status, console=self.console, refresh_per_second=8, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The spinner stopped while the operator reads and answers a question (under a live display the question
        would be redrawn over, and the terminal's input echoed into the spinner), then started again."""
        live = self.live
        if live is None:
            yield
            return
        live.stop()
        try:
            yield
        finally:
            live.start()

    def event(self, e: RunEvent) -> None:
        st = self.status
        if e.kind == "play":
            st.play = e.play
            if not self.quiet:
                self.console.print(Text.assemble(("PLAY ", "bold blue"), (e.play, "bold")))
        elif e.kind == "task":
            st.task, st.task_started, st.note = e.task, time.monotonic(), ""
            if self.live is None and not self.quiet:
                self.console.print(Text.assemble(("  task ", "dim"), e.task))
        elif e.kind == "retry":
            st.note = f"{e.host}: waiting, attempt {e.attempt}/{e.retries}"
            if self.live is None and self.verbose:
                self.console.print(Text(f"    {st.note}", style="magenta"))
        elif e.kind == "warning":
            self.console.print(Text(f"  warning: {e.message}", style="yellow"))
        else:
            if e.kind == "failed" and e.ignored:
                st.counts["ignored"] += 1
            else:
                st.counts[e.kind] += 1
            loud = e.kind in ("changed", "failed", "unreachable") and not e.ignored
            if loud or self.verbose:
                label = f"{e.kind} (ignored)" if e.ignored else e.kind
                text = Text.assemble(
                    ("  ", ""), (f"{label:<11}", _STYLE.get(e.kind, "")), (f"{e.host}", "bold"), (f"  {e.task}", "")
                )
                if e.message and (e.kind in ("failed", "unreachable") or self.verbose > 1):
                    text.append(f"\n      {e.message}", style="red" if not e.ignored else "dim")
                self.console.print(text)

    def finished(self, result: RunResult) -> None:
        self.__exit__()


class JsonProgress:
    """One JSON object per line on ``stream`` for each event: {"type": "event", "kind": ..., ...}."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def __enter__(self) -> JsonProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @contextmanager
    def paused(self) -> Iterator[None]:
        yield  # nothing live to stop

    def emit(self, obj: dict[str, Any]) -> None:
        self.stream.write(json.dumps(obj, default=str) + "\n")
        self.stream.flush()

    def event(self, e: RunEvent) -> None:
        self.emit({"type": "event", **e.to_dict()})

    def finished(self, result: RunResult) -> None:
        pass
