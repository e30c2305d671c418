"""What every command receives: the loaded config and the output mode; and the run context it hands the library."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.text import Text

from zenops.cli.text import plain
from zenops.config import Config, load
from zenops.errors import ConfigError

if TYPE_CHECKING:  # zenops.progress imports ansible-runner: loaded by the commands that run Ansible, not by --help
    from zenops.context import RunContext
    from zenops.progress import JsonProgress, RichProgress


def make_console(stderr: bool) -> Console:
    """A console that does not squeeze tables and messages to 80 columns when the output is a file or a CI log."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, soft_wrap=True, width=width)


@dataclass
class App:
    config: Config
    json: bool = False
    verbose: int = 0
    # the searched config file's error, kept for `zenops config` (which must run to check or show it)
    config_error: ConfigError | None = None
    out: Console = field(default_factory=lambda: make_console(stderr=False))
    err: Console = field(default_factory=lambda: make_console(stderr=True))
    _progress: RichProgress | JsonProgress | None = field(default=None, repr=False)  # the open run context's

    def progress(self, *, quiet: bool = False) -> RichProgress | JsonProgress:
        from zenops.progress import JsonProgress, RichProgress  # noqa: PLC0415

        return JsonProgress() if self.json else RichProgress(self.err, self.verbose, quiet=quiet)

    @contextmanager
    def run_context(self, *, campaign: str | None = None, read_only: bool = False) -> Iterator[RunContext]:
        """The run context of this command (zenops.context.RunContext), built here once: the config, live progress
        while it is open, Ansible's verbosity (-v shows every host result, so Ansible gets the -v after the first),
        notes on stderr (or as JSON). ``campaign``: the campaign (its name) whose lock (zenops.lock, key
        ``campaign-<name>``) `campaign run` and `campaign down` hold while the context is open; a deployment's lock
        is its lifecycle's (zenops.deployment.lifecycle.Deployment.open). ``read_only``: a command that changes
        nothing prints no Ansible play or task lines unless -v (failures and warnings still)."""
        from contextlib import nullcontext  # noqa: PLC0415

        from zenops.context import RunContext  # noqa: PLC0415
        from zenops.lock import deployment_lock  # noqa: PLC0415

        held = deployment_lock(self.config, f"campaign-{campaign}", note=self.note) if campaign else nullcontext()
        with held, self.progress(quiet=read_only) as sink:
            self._progress = sink
            try:
                yield RunContext(self.config, sink=sink, verbosity=max(self.verbose - 1, 0), note=self.note)
            finally:
                self._progress = None

    @contextmanager
    def asking(self) -> Iterator[None]:
        """Around a question to the operator: the live progress display of the open run context, if any, paused."""
        progress = self._progress
        if progress is None:
            yield
            return
        with progress.paused():
            yield

    def note(self, text: str) -> None:
        """A line of progress outside an Ansible run: {"type": "note"} in JSON mode, else on stderr."""
        if self.json:
            self.emit_json({"type": "note", "message": text})
        else:
            self.err.print(Text(plain(text), style="cyan"))

    def warn(self, text: str) -> None:
        """A warning outside an Ansible run (e.g. a damaged state file): {"type": "warning"} in JSON mode, else a
        yellow ``warning:`` line on stderr."""
        if self.json:
            self.emit_json({"type": "warning", "message": text})
        else:
            self.err.print(Text.assemble(("warning: ", "yellow"), plain(text)))

    def emit_json(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj, default=str) + "\n")
        sys.stdout.flush()


def get_app(ctx: click.Context) -> App:
    app = ctx.find_object(App)
    if app is None:  # a command invoked on its own (tests): load the defaults
        app = App(config=load())
        ctx.obj = app
    return app


pass_app = click.make_pass_decorator(App, ensure=False)
