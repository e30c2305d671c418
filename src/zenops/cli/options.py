"""Reusable click options. Config values under ``defaults.<command>`` become their defaults; flags win."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from zenops.cli.context import get_app
from zenops.errors import ConfigError


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        get_app(ctx).json = True


json_option = click.option(
    "--json",
    "json_output",
    is_flag=True,
    expose_value=False,
    callback=_set_json,
    is_eager=True,
    help="Machine-readable output: JSON lines of events, then one result object (same as `zenops --json`).",
)

inventory_option = click.option(
    "-i",
    "--inventory",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Ansible inventory (YAML or INI) of hosts you already have: bare metal or any SSH host.",
)

limit_option = click.option("--limit", metavar="PATTERN", help="Only these hosts/groups of the inventory.")

check_option = click.option(
    "--check", is_flag=True, help="Dry run: report what would change on the hosts, change nothing."
)


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


class LazyDefaultOption(click.Option):
    """An option whose ``default`` is a function called when the default is needed (help, parsing), not when the
    command is defined. Unlike a plain callable default, --help shows the value it returns, not "(dynamic)"."""

    def get_default(self, ctx: click.Context, call: bool = True) -> Any:
        value = super().get_default(ctx, call=call)
        return value() if callable(value) else value


def command_option_names(command: click.Command) -> dict[str, click.Parameter]:
    """Option names a config file may set for ``command`` (both my-flag and my_flag spellings)."""
    names: dict[str, click.Parameter] = {}
    for p in command.params:
        if isinstance(p, click.Option) and p.expose_value and p.name:
            names[p.name] = p
            names[p.name.replace("_", "-")] = p
    return names


def to_default_map(
    group: click.Group, ctx: click.Context, defaults: dict[str, dict[str, Any]], sources: dict[str, dict[str, str]]
) -> dict[str, dict[str, Any]]:
    """Validate ``defaults:`` sections of the config against the commands and convert them to a click default_map."""
    out: dict[str, dict[str, Any]] = {}
    for name, section in defaults.items():
        src = next(iter(sources.get(name, {}).values()), "config")
        command = group.get_command(ctx, name)
        if command is None:
            raise ConfigError(
                src,
                f"defaults.{name}",
                "no such command",
                hint=f"commands with options: {', '.join(sorted(group.list_commands(ctx)))}",
            )
        options = command_option_names(command)
        for key, value in section.items():
            where = sources.get(name, {}).get(key, src)
            param = options.get(str(key))
            if param is None:
                valid = sorted({p.name for p in options.values() if p.name})
                raise ConfigError(
                    where,
                    f"defaults.{name}.{key}",
                    f"`zenops {name}` has no such option",
                    hint=f"valid keys: {', '.join(valid)}",
                )
            try:
                param.type.convert(value, param, ctx)
            except click.BadParameter as e:
                raise ConfigError(
                    where, f"defaults.{name}.{key}", e.format_message(), hint=f"see `zenops {name} --help`"
                ) from e
            assert param.name is not None
            out.setdefault(name, {})[param.name] = value
    return out
