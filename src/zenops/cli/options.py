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
  (zenops.cli.option_types, importable from here)
* config   ``to_default_map``, ``check_defaults``: the ``defaults:`` of the config file, checked as the flags are
  (zenops.cli.option_defaults, importable from here)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from zenops.cli.context import get_app
from zenops.cli.option_defaults import check_defaults, to_default_map
from zenops.cli.option_types import DurationType, InstancesType, LazyChoice, OldSpellingOption
from zenops.errors import UsageError
from zenops.option_table import request_from_rows, row, rows_for
from zenops.request_options import BY_FIELD, CHANGEABLE, Option, for_command

if TYPE_CHECKING:
    from zenops.campaign.tuned import TunedConfig

__all__ = [  # what cli/ imports from here, the types and the config defaults (option_types, option_defaults) too
    "DurationType",
    "GatewayFlags",
    "InstancesType",
    "LazyChoice",
    "OldSpellingOption",
    "RequestFlags",
    "RowValues",
    "Rows",
    "TableOption",
    "TunedOptions",
    "check_defaults",
    "deployment_argument",
    "json_option",
    "one_deployment",
    "option",
    "options",
    "plot_option",
    "png_target",
    "request_options",
    "table_option",
    "to_default_map",
    "tuned_entry",
    "tuned_fields",
    "tuned_options",
]

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


def plot_option(help_text: str) -> Callable[[F], F]:
    """``--plot FILE.png`` (parameter ``plot_file``), its help the command's: what the PNG shows."""
    return click.option(
        "--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.png", help=help_text
    )


def png_target(path: Path) -> Path:
    """A ``--plot`` file checked before anything is drawn: a .png, in a directory that exists (UsageError)."""
    if path.suffix.lower() != ".png":
        raise UsageError(f"--plot {path}: the plot is a PNG", hint="name the file with .png")
    if not path.parent.is_dir():
        raise UsageError(f"--plot {path}: directory {path.parent} does not exist", hint="create it, or pick another")
    return path


# --- serving ------------------------------------------------------------------------------------------------------


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
