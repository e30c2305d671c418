"""The ``defaults:`` of the config file as click defaults (zenops.cli.options re-exports these): ``to_default_map``
turns them into the group's default_map, raising the first mistake; ``check_defaults`` lists every mistake of a file
(``zenops config check``); each value checked as the command checks its flag."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from zenops import schema
from zenops.cli.option_types import OldSpellingOption, deprecated
from zenops.errors import ConfigError, UsageError


def _key_of(param: click.Parameter) -> str:
    """The key a config file writes for ``param``: its first long option, as my_flag (`gateway`, not `gateway_mode`)."""
    longs = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
    return (longs[0].lstrip("-") if longs else str(param.name)).replace("-", "_")


def command_option_names(command: click.Command) -> dict[str, click.Parameter]:
    """Option names a config file may set for ``command`` (both my-flag and my_flag spellings)."""
    names: dict[str, click.Parameter] = {}
    for p in command.params:
        if isinstance(p, click.Option) and p.expose_value and p.name:
            spellings = [p.name] + [o.lstrip("-") for o in p.opts if o.startswith("--")]  # old spellings too
            spellings += list(getattr(p, "old_keys", ()))
            for spelling in spellings:
                names[spelling] = p
                names[spelling.replace("_", "-")] = p
                names[spelling.replace("-", "_")] = p
    return names


def to_default_map(
    group: click.Group, ctx: click.Context, defaults: dict[str, dict[str, Any]], sources: dict[str, dict[str, str]]
) -> dict[str, dict[str, Any]]:
    """Validate ``defaults:`` sections of the config against the commands and convert them to a click default_map.
    Raises the first mistake (:func:`check_default`, which ``zenops config check`` runs on every value)."""
    out: dict[str, dict[str, Any]] = {}
    for name, section in defaults.items():
        src = next(iter(sources.get(name, {}).values()), "config")
        command = default_command(group, ctx, name, src)
        for key, value in section.items():
            where = sources.get(name, {}).get(key, src)
            param, converted = check_default(command, ctx, name, key, value, where)
            old_key = _old_key(command_option_names(command)[str(key)], str(key))
            if old_key:
                deprecated(f"defaults.{name}.{key} ({where})", f"defaults.{name}.{old_key}")
            out.setdefault(name, {})[param] = converted
    return out


def check_defaults(
    group: click.Group, ctx: click.Context, defaults: Mapping[Any, Any], path: str, broken: set[str]
) -> list[ConfigError]:
    """Every mistake in one file's ``defaults:`` (each value as :func:`to_default_map` checks it, and as the command
    reads it: a path that is not there, a tuned file that does not parse); sections in ``broken`` are skipped."""
    found: list[ConfigError] = []
    for name, section in defaults.items():
        if not isinstance(section, dict) or f"defaults.{name}" in broken:
            continue
        try:
            command = default_command(group, ctx, str(name), path)
        except ConfigError as e:
            found.append(e)
            continue
        for key, value in section.items():
            try:
                check_default(command, ctx, str(name), key, value, path, here=True)
            except ConfigError as e:
                found.append(e)
    return found


def default_command(group: click.Group, ctx: click.Context, name: str, src: str) -> click.Command:
    """The command ``defaults.<name>`` sets options of; ConfigError naming the commands otherwise."""
    command = group.get_command(ctx, name)
    if command is None:
        raise ConfigError(
            src,
            f"defaults.{name}",
            "no such command",
            hint=f"commands with options: {', '.join(sorted(group.list_commands(ctx)))}",
        )
    return command


def check_default(
    command: click.Command, ctx: click.Context, name: str, key: Any, value: Any, where: str, *, here: bool = False
) -> tuple[str, Any]:
    """Check ``defaults.<name>.<key>: value`` as the command checks the option: its name, its type (a YAML boolean
    taken as the mode word written, ``gateway: on``: zenops.schema.choice_problem), the engine-argument guard
    (zenops.serve.check_engine_args). ``here`` (``config check``): also what the command finds when it runs here: an
    absolute path that is not there, a tuned file that does not parse. Returns the option's parameter name and its
    value for click's default_map; ConfigError naming the key and the fix."""
    dotted = f"defaults.{name}.{key}"
    options = command_option_names(command)
    param = options.get(str(key))
    if param is None or param.name is None:
        valid = sorted({_key_of(p) for p in options.values()})
        raise ConfigError(where, dotted, f"`zenops {name}` has no such option", hint=f"valid keys: {', '.join(valid)}")
    kind = param.type
    if isinstance(kind, click.Choice) and isinstance(value, bool):
        choices = [str(c) for c in kind.choices]
        problem = schema.choice_problem(value, choices, key=str(key))
        if problem is not None:
            raise ConfigError(where, dotted, problem.text, hint=problem.hint)
        value = schema.yaml_word(value, choices)
    try:
        # a relative path is checked for its kind here, for its existence when the command runs (relative to where
        # it runs: `defaults.up.inventory: hosts.yml` must not break every command elsewhere)
        if isinstance(kind, click.Path) and kind.exists and not (here and _absolute(value)):
            kind = click.Path(file_okay=kind.file_okay, dir_okay=kind.dir_okay, path_type=kind.type)
        kind.convert(value, param, ctx)
    except click.BadParameter as e:
        raise ConfigError(where, dotted, e.format_message(), hint=f"see `zenops {name} --help`") from e
    if param.name == "engine_args" and value:
        from zenops.serve import check_engine_args  # noqa: PLC0415  (the serving stack: only for this key)

        try:
            check_engine_args([value] if isinstance(value, str) else list(value))
        except UsageError as e:
            raise ConfigError(where, dotted, e.message, hint=e.hint) from e
    if here and param.name == "tuned_file" and _absolute(value):
        from zenops.campaign.tuned import load_tuned  # noqa: PLC0415

        try:
            load_tuned(Path(str(value)).expanduser())
        except ConfigError as e:
            raise ConfigError(where, dotted, f"the tuned file does not read: {e.message}", hint=e.hint) from e
    return param.name, value


def _absolute(value: Any) -> bool:
    return isinstance(value, str) and Path(value).expanduser().is_absolute()


def _old_key(param: click.Parameter, key: str) -> str | None:
    """The key to write instead, when ``key`` (of ``defaults.<command>``) is an old spelling of ``param``'s."""

    def norm(text: str) -> str:
        return text.lstrip("-").replace("-", "_")

    old = {norm(o) for o in getattr(param, "old", ())} | {norm(k) for k in getattr(param, "old_keys", ())}
    if norm(key) not in old:
        return None
    assert param.name is not None
    new = param.new_spelling if isinstance(param, OldSpellingOption) else param.name
    return norm(new)
