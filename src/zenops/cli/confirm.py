"""Asking before cloud money is spent or resources are deleted: `up --cloud`, `campaign run`, a surging `rollout`,
`down`, `campaign down` and `reap` say what they will create or delete and what it costs (zenops.spend), then go on
with --yes, ask on a terminal (default No), or refuse without one (exit 2, before anything is created or deleted)."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from zenops.cli.context import App
from zenops.errors import UsageError
from zenops.spend import Spend


def interactive(app: App) -> bool:
    """Whether the operator can be asked: stdin is a terminal and the output is not JSON (a script reads it)."""
    return sys.stdin.isatty() and not app.json


def agree(app: App, spend: Spend, *, yes: bool, dry_run: bool = False, hint: str | None = None) -> bool:
    """Say what ``spend`` creates or deletes and its cost (and warn of a deployment without an expiry); then True
    to go on (--yes, a dry run, nothing to agree to), the operator's answer on a terminal (default No), or a
    UsageError (exit 2) naming --yes when no one can be asked: stdin is not a terminal, or --json. ``hint``: how to
    go on, where the command has its own words for it."""
    if app.json:
        app.emit_json({"type": "spend", "command": spend.command, **spend.to_dict()})
    warning = spend.warning()
    if dry_run or not spend.asks or yes:
        if not app.json and spend.asks:
            for line in spend.lines():
                app.note(line)
        if warning:
            app.warn(warning)
        return True
    if not interactive(app):
        why = "--json does not ask" if app.json else "stdin is not a terminal to ask on"
        raise UsageError(
            f"{spend.command} would {spend.action} {spend.summary()} ({spend.cost()}); {why}",
            hint=hint or "pass --yes (-y) to go on without asking, or --dry-run to see what it would do",
        )
    with app.asking():  # the spinner of the open run, if any, stopped meanwhile
        for i, line in enumerate(spend.lines()):
            app.err.print(escape(line) if i else f"[bold]{escape(line)}[/]", highlight=False)
        if warning:
            app.warn(warning)
        return click.confirm(spend.question(), default=False, err=True)
