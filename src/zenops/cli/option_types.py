"""The click parameter types and the option class of zenops's options (zenops.cli.options builds the options; these
are what it builds them with, importable from there too):

* ``DurationType`` (90s, 30m, 1h30m), ``InstancesType`` (auto|N), ``LazyChoice`` (choices read when first needed)
* ``OldSpellingOption``: an option that also takes its old spellings, each with the one warning, :func:`deprecated`
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import click

from zenops import durations
from zenops.errors import UsageError


class DurationType(click.ParamType[int, Any]):
    """A duration option (zenops.durations: 90s, 30m, 1h30m, or a bare number of seconds) as whole seconds, at least
    ``minimum``."""

    name = "duration"

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return durations.parse(value, minimum=self.minimum)
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"


class InstancesType(click.ParamType[int | None, Any]):
    """``auto`` (None: the plan decides) or a whole number of server instances per host, at least 1."""

    name = "auto|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is None or value == "auto":
            return None
        if isinstance(value, bool):
            self.fail("use auto or a number, e.g. --instances 2", param, ctx)
        try:
            n = int(value)
        except (TypeError, ValueError):
            self.fail("use auto or a number, e.g. --instances 2", param, ctx)
        if n < 1:
            self.fail("must be at least 1", param, ctx)
        return n


def deprecated(old: str, new: str) -> None:
    """Say on stderr (never stdout: --json output stays parseable) that ``old`` is an old spelling of ``new``. The
    one warning of every deprecated option spelling and config key."""
    click.echo(f"warning: {old} is deprecated and goes in the next release: use {new}", err=True)


class _SpellingSeen:
    """The parser's entry for the spellings of an :class:`OldSpellingOption`: records which spelling gave which
    value (so the option can say an old one is deprecated, and refuse two spellings that disagree), then stores the
    value as click does."""

    def __init__(self, inner: Any, option: OldSpellingOption, opt: str, ctx: click.Context) -> None:
        self._inner, self._option, self._opt, self._ctx = inner, option, opt, ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def process(self, value: Any, state: Any) -> None:
        self._ctx.meta.setdefault(f"zenops.spellings.{self._option.name}", []).append((self._opt, value))
        self._inner.process(value, state)


class OldSpellingOption(click.Option):
    """An option that also takes its old spellings (``old``): accepted on the command line (with a warning on stderr
    naming the new spelling: :func:`deprecated`) and as config keys (likewise), not shown in --help. One name per
    concept; scripts written against the old name keep working for a release. Two spellings given with different
    values (``up --name a --deployment b``) are refused: nothing can mean both."""

    def __init__(self, *args: Any, old: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old = old

    @property
    def new_spelling(self) -> str:
        return next(o for o in self.opts if o not in self.old and o.startswith("--"))

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = self.opts
        self.opts = [o for o in shown if o not in self.old]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        if not self.old:  # one spelling (and a short one): click's own parsing, the last given wins
            return
        # click's parser keeps one entry per spelling (its _long_opt/_short_opt tables): wrap each to see which was
        # used; were those tables to change, the option still parses, only without the warning
        for table in (getattr(parser, "_long_opt", {}), getattr(parser, "_short_opt", {})):
            for opt in self.opts:
                if opt in table:
                    table[opt] = _SpellingSeen(table[opt], self, opt, ctx)

    def handle_parse_result(self, ctx: click.Context, opts: Mapping[str, Any], args: list[str]) -> Any:
        seen: list[tuple[str, Any]] = ctx.meta.get(f"zenops.spellings.{self.name}", [])
        for opt in dict.fromkeys(o for o, _ in seen if o in self.old):
            deprecated(opt, self.new_spelling)
        if len({o for o, _ in seen}) > 1 and len({repr(v) for _, v in seen}) > 1:
            given = " and ".join(f"{o} {v}" for o, v in seen)
            raise UsageError(
                f"{given}: spellings of one option, with different values",
                hint=f"give it once: {self.new_spelling} VALUE",
            )
        return super().handle_parse_result(ctx, opts, args)


class LazyChoice(click.Choice[str]):
    """A click.Choice whose choices come from ``load`` the first time they are needed (help, parsing, completion),
    not when the command is defined: the CLI starts without importing or reading what lists them."""

    def __init__(self, load: Callable[[], Iterable[str]], case_sensitive: bool = True) -> None:
        self._load = load
        self._choices: tuple[str, ...] | None = None
        self.case_sensitive = case_sensitive

    @property
    def choices(self) -> tuple[str, ...]:
        if self._choices is None:
            self._choices = tuple(self._load())
        return self._choices

    @choices.setter
    def choices(self, value: Iterable[str]) -> None:
        self._choices = tuple(value)
