"""Click options from the one option table (zenops.option_table: every option a row, declared once, with a
command's own variant). Config values under ``defaults.<command>`` become their defaults; flags win.

* ``options(command, *entries)``: a command's options in --help order: a row by name (``"cloud"``), or a group of
  rows the command receives as one argument (:class:`Rows`: the rows filling a request, e.g. ``BenchRequest``, or
  a section of the table, e.g. the serving rows); ``option(name, command)``: one row
* ``request_options(command)``: the serving rows (`plan`, `up`, `rollout`) as one ``request: RowValues``;
  ``Rows("gateway", group="gateway", build=GatewayFlags)``: the gateway service's rows on `up` as one
  ``gateway: GatewayFlags``
* tuned    ``tuned_options``: a campaign's best configuration per model (`plan`, `up`, `rollout`)
* types    ``DurationType``, ``InstancesType``, ``LazyChoice``; ``OldSpellingOption``: an option's old spellings
* config   ``to_default_map``, ``check_defaults``: the ``defaults:`` of the config file, checked as the flags are
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from zenops import durations, schema
from zenops.cli.context import get_app
from zenops.errors import ConfigError, UsageError
from zenops.option_table import request_from_rows, row, rows_for
from zenops.request_options import BY_FIELD, CHANGEABLE, Option, for_command

if TYPE_CHECKING:
    from zenops.campaign.tuned import TunedConfig

F = TypeVar("F", bound=Callable[..., Any])


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


# --- serving ------------------------------------------------------------------------------------------------------


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


def tuned_fields(command: str) -> dict[str, str | None]:
    """The options a tuned file may set on ``command`` (field -> its parameter there; None: the command has no flag
    for it, yet a rollout may change it)."""
    if command == "rollout":
        return {f: (f if BY_FIELD[f].takes(command) else None) for f in CHANGEABLE if f != "model"}
    return {r.field: r.param for r in for_command(command) if r.field not in ("model", "api_key_file", "hf_token_file")}


# --- tuned --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TunedOptions:
    """What :func:`tuned_options` takes from a tuned file for one command."""

    config: TunedConfig  # the model's entry (its ``reason`` goes into the plans)
    values: dict[str, Any]  # option (a ServeRequest field) -> value: what the command uses
    overridden: list[str] = field(default_factory=list)  # options of the file a flag given wins over
    ignored: list[str] = field(default_factory=list)  # options of the file the command cannot use

    @property
    def reason(self) -> str:
        return self.config.reason

    def describe(self, command: str) -> str:
        """One line for the operator: the entry, what is used, what a flag won over, what was left out."""
        used = ", ".join(f"{k}={_shown(v)}" for k, v in self.values.items()) or "nothing"
        text = f"--tuned {self.config.source}: {self.config.model} {self.reason}; using {used}"
        if self.overridden:
            text += f"; your flags win over {', '.join(self.overridden)}"
        if self.ignored:
            text += f"; ignored ({command} does not take them): {', '.join(self.ignored)}"
        return text


def _shown(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, tuple | list):
        return " ".join(map(str, value)) or "(none)"
    return str(value)


def tuned_entry(path: Path, model: str) -> TunedConfig:
    """``model``'s entry in the tuned file at ``path``, matched as the campaign named it: a catalogue id (any case,
    as the catalogue matches), or a local model directory compared as a resolved path. Raises UsageError (exit 2)
    naming the file's models and the fix when it has none; ConfigError for a file that is not a tuned file."""
    from zenops.campaign.tuned import load_tuned  # noqa: PLC0415

    tuned = load_tuned(path)
    local = Path(model).expanduser()
    shown = model
    if local.is_dir():
        wanted = local.resolve()
        for name, entry in tuned.items():
            if Path(name).is_absolute() and Path(name).resolve() == wanted:
                return entry
        shown = model if str(wanted) == model else f"{wanted} (--model {model})"
    else:
        for name, entry in tuned.items():
            if name.lower() == model.lower():
                return entry
    raise UsageError(
        f"--tuned {path}: no tuned configuration for {shown}",
        hint=f"the file has {', '.join(sorted(tuned))}: pass one of them with --model, or leave out --tuned for "
        f"{model} (or run a campaign that measures it)",
    )


def tuned_options(ctx: click.Context, path: Path, model: str, accepted: Mapping[str, str | None]) -> TunedOptions:
    """The options ``model``'s entry in the tuned file supplies to this command. ``accepted``: the options the
    command can use (ServeRequest field -> the command's parameter, None when no flag sets it); the rest are
    ``ignored``. A flag given on the command line (or its environment variable) wins over the file: those are
    ``overridden``; config defaults (``defaults.<command>``) and built-in defaults do not."""
    entry = tuned_entry(path, model)
    values: dict[str, Any] = {}
    overridden: list[str] = []
    ignored: list[str] = []
    for option, value in entry.options.items():
        if option not in accepted:
            ignored.append(option)
            continue
        param = accepted[option]
        if param is not None and ctx.get_parameter_source(param) in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            overridden.append(option)
            continue
        values[option] = value
    return TunedOptions(entry, values, overridden, ignored)


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


def one_deployment(ctx: click.Context, positional: str | None, flag: str | None) -> str | None:
    """The deployment a command names, as ``zenops down demo`` or ``zenops down --deployment demo`` (the same); both
    given and different: UsageError. A config default (``defaults.<command>.deployment``) gives way to the
    positional name."""
    if positional is None:
        return flag
    source = ctx.get_parameter_source("deployment")
    from_user = source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    if flag is not None and from_user and flag != positional:
        raise UsageError(
            f"deployment {positional!r} and --deployment {flag}: name one deployment",
            hint=f"zenops {ctx.command.name} {positional} (or --deployment {positional})",
        )
    return positional


def deployment_argument(f: F) -> F:
    """An optional positional DEPLOYMENT, the same as --deployment NAME (`zenops down demo`), for a command that
    already declares --deployment (:data:`deployment_option`, :func:`deployment_name_option`): the command receives
    the one name as ``deployment``."""

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        kwargs["deployment"] = one_deployment(ctx, kwargs.pop("deployment_name"), kwargs.get("deployment"))
        return f(*args, **kwargs)

    return cast(F, click.argument("deployment_name", required=False, metavar="[DEPLOYMENT]")(command))


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


# --- the table's rows as click options ------------------------------------------------------------------------------


def _levels(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """`bench --concurrency 1,2,4`: the levels (zenops.bench.parse_levels, loaded only when given)."""
    from zenops.bench import parse_levels  # noqa: PLC0415

    return parse_levels(value) if value else None


def _profile_names() -> list[str]:
    """The profiles of zenops/catalog/bench.yaml by name (what zenops.bench.profiles() reads), for --profile."""
    from zenops import catalog  # noqa: PLC0415

    return sorted(catalog.load_resource("bench.yaml", "profiles")[1])


class TableOption(OldSpellingOption):
    """A click option made from a row of the option table (zenops.option_table): ``row`` is the row; ``old_keys``:
    earlier names of its config key (``defaults.plan.vllm_version``), still taken."""

    def __init__(self, *args: Any, row: Option, old_keys: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.row = row
        self.old_keys = old_keys


def _click_type(row: Option) -> dict[str, Any]:
    """The click keywords of ``row``'s kind (its type, or a callback)."""
    low = row.minimum
    kinds: dict[str, Callable[[], dict[str, Any]]] = {
        "choice": lambda: {"type": click.Choice(row.choices)},
        "int": lambda: {"type": click.IntRange(min=low, max=row.maximum)},
        "float": lambda: {"type": click.FloatRange(min=low, max=row.maximum)},
        "positive": lambda: {"type": click.FloatRange(min=0, min_open=True)},
        "duration": lambda: {"type": DurationType(low or 0)},
        "path": lambda: {"type": click.Path(exists=True, dir_okay=False, path_type=Path)},
        "dir": lambda: {"type": click.Path(file_okay=False, path_type=Path)},
        "instances": lambda: {"type": InstancesType()},
        "levels": lambda: {"callback": _levels},
        "profile": lambda: {"type": LazyChoice(_profile_names)},
        "bool": lambda: {"is_flag": True},
        "args": lambda: {"multiple": True},
    }
    return kinds[row.kind]() if row.kind in kinds else {}


def table_option(row: Option, command: str, *, required: bool = False) -> Callable[[F], F]:
    """The click option of ``row`` on ``command``, with the command's variant (its help, old spellings, ...). On
    `rollout` no serving option has a default: what is deployed stays unless an option is given."""
    if not row.takes(command):
        raise ValueError(f"option table: `{command}` is not among the commands of row {row.name}")  # a typo in cli/
    variant = dict(row.variants.get(command, {}))
    old = tuple(variant.pop("old", row.old_flags))
    decls = [row.flag, *([row.short] if row.short else []), *old, row.param]
    kw: dict[str, Any] = {"help": row.help, "metavar": row.metavar, "required": required, **_click_type(row)}
    kw.update(cls=TableOption, row=row, old_keys=row.old_keys, old=old, **variant)
    stays = command == "rollout" and row.group == "serve"
    default = None if stays else row.default
    if row.kind == "instances":
        default = None if stays else "auto"
    elif row.kind == "bool":
        default = None if stays else bool(row.default)
    elif row.kind == "args":
        default = None
    if default is not None:
        kw["default"] = default
        shown = not isinstance(default, bool) and default != ()
        kw["show_default"] = shown if row.show_default is None else row.show_default
    return click.option(*decls, **kw)


def option(name: str, command: str) -> Callable[[F], F]:
    """The click option of the table's row ``name`` on ``command`` (the command's path below `zenops`: `bench`,
    `config init`)."""
    return table_option(row(name), command)


@dataclass(frozen=True)
class RowValues:
    """What a group of rows (:class:`Rows`) hands the command as one argument: every option of the group, by its
    row's field (for the serving rows, a ServeRequest field), and which were given."""

    values: Mapping[str, Any]  # field -> value (the default when not given)
    given: frozenset[str]  # fields set by a flag, its environment variable or a config default

    @property
    def model(self) -> str | None:
        return cast("str | None", self.values.get("model"))

    def changes(self) -> dict[str, Any]:
        """Only what was given (a rollout changes nothing else; a value may be None: --instances auto)."""
        return {f: self.values[f] for f in self.values if f in self.given}


RequestFlags = RowValues  # the serving rows' group (`plan`, `up`, `rollout`: ``request``)


@dataclass(frozen=True)
class Rows:
    """A group of rows a command receives as one argument, ``argument``: the rows of ``command`` that fill the
    request ``request`` (a class name: zenops.option_table.request_from_rows), or of the table's ``group``. A row
    added to the table for the command and the request (or group) is in it. ``build``: the command receives
    ``request_from_rows(build, values)``, else a :class:`RowValues` (for a request that needs more than its rows,
    built in the command's body). ``order``: these rows first, in this order (the --help order), then the rest in
    the table's order. ``required``: rows required here."""

    argument: str
    request: str | None = None
    group: str | None = None
    build: type[Any] | None = None
    order: tuple[str, ...] = ()
    required: tuple[str, ...] = ()

    def rows(self, command: str) -> list[Option]:
        found = rows_for(command, request=self.request, group=self.group)
        rank = {name: i for i, name in enumerate(self.order)}
        return sorted(found, key=lambda r: rank.get(r.name, len(rank)))


def options(command: str, *entries: str | Rows) -> Callable[[F], F]:
    """Declare ``command``'s options from the table, in this order (its --help order): a row by name, or a group of
    rows (:class:`Rows`) that the command receives as one argument. Config values under ``defaults.<command>`` are
    their defaults (each row is still its own click option); flags win."""
    decorators: list[Callable[[F], F]] = []
    groups: list[tuple[Rows, list[Option]]] = []
    for entry in entries:
        if isinstance(entry, str):
            decorators.append(option(entry, command))
            continue
        rows = entry.rows(command)
        decorators += [table_option(r, command, required=r.name in entry.required) for r in rows]
        groups.append((entry, rows))

    def apply(f: F) -> F:
        decorated = f
        if groups:

            @functools.wraps(f)
            def command_with_groups(*args: Any, **kwargs: Any) -> Any:
                ctx = click.get_current_context()
                for group, rows in groups:
                    values = {r.field: kwargs.pop(r.param) for r in rows}
                    for r in rows:
                        if r.kind == "args":
                            values[r.field] = tuple(values[r.field] or ())
                    given = frozenset(
                        r.field
                        for r in rows
                        if ctx.get_parameter_source(r.param) not in (None, ParameterSource.DEFAULT)
                    )
                    built = request_from_rows(group.build, values) if group.build else RowValues(values, given)
                    kwargs[group.argument] = built
                return f(*args, **kwargs)

            decorated = cast(F, command_with_groups)
        for decorator in reversed(decorators):
            decorated = decorator(decorated)
        return decorated

    return apply


def request_options(command: str, *, model_required: bool = False) -> Callable[[F], F]:
    """Every serving and engine option ``command`` takes (the table's serving rows), as one argument ``request:
    RowValues``."""
    return options(command, Rows("request", group="serve", required=("model",) if model_required else ()))


@dataclass(frozen=True)
class GatewayFlags:
    """The gateway's rows on `up` (its service's options: zenops.deployment.services.gateway), as one ``gateway``
    argument; the fields are the rows' (ServeRequest's, but for the flavor of its own server)."""

    gateway: str  # auto | on | off
    gateway_host: str | None
    gateway_port: int
    gateway_tls_cert_file: Path | None
    gateway_flavor: str | None = None

    @property
    def mode(self) -> str:
        return self.gateway

    @property
    def host(self) -> str | None:
        return self.gateway_host

    @property
    def port(self) -> int:
        return self.gateway_port

    @property
    def tls_cert_file(self) -> Path | None:
        return self.gateway_tls_cert_file

    @property
    def flavor(self) -> str | None:
        return self.gateway_flavor


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
