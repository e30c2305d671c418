"""Reusable click options, one definition each. Config values under ``defaults.<command>`` become their defaults;
flags win.

* target   ``inventory_option``, ``cloud_option``, ``deployment_option``, ``limit_option``: which hosts (from flags to
           hosts: zenops.target.resolve_target); ``cloud_option_for``: --cloud with a command's own help (required on
           `reap`, `leaks`, `config init`); ``os_image_option``: the OS image cloud servers boot (`up`, `config init`)
* request  ``request_options(command)``: what to serve and how, from zenops.request_options.OPTIONS (`plan`, `up`,
           `rollout`: one table of options)
* pricing  ``flavor_option``, ``price_option``: what a host costs (`plan`, `up`, `bench`, `report`)
* tuned    ``tuned_option``, ``tuned_options``: a campaign's best configuration per model (`plan`, `up`, `rollout`)
* gateway  ``gateway_options`` (the mode, on `up`), ``through_gateway_option`` (the flag, on `bench`/`logs`)
* consent  ``yes_option``: go on without asking before cloud money is spent or resources deleted (zenops.cli.confirm);
           ``dry_run_option``: say what would be done, do nothing (each command's help says what it reports)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from zenops import durations, schema
from zenops.cli.context import get_app
from zenops.errors import ConfigError, UsageError
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

inventory_option = click.option(
    "-i",
    "--inventory",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Ansible inventory (YAML or INI) of hosts you already have: bare metal or any SSH host.",
)


def cloud_option_for(help: str, *, required: bool = False, os_cloud: bool = False) -> Callable[[F], F]:
    """--cloud NAME, a clouds.yaml entry, with the command's own help. ``required``: the command works on one cloud
    that must be named (`reap`, `leaks`, `config init`); ``os_cloud``: $OS_CLOUD names it when the flag is not
    given (shown in --help), as the openstack CLI takes it."""
    env: dict[str, Any] = {"envvar": "OS_CLOUD", "show_envvar": True} if os_cloud else {}
    return click.option("--cloud", metavar="NAME", required=required, help=help, **env)


cloud_option = cloud_option_for(
    "clouds.yaml entry (e.g. flex, sandbox): where `up` creates servers (default with --flavor: $OS_CLOUD); "
    "for a deployment, the cloud it is in (default: where the ledger says)."
)


def os_image_option(help: str, *, old: tuple[str, ...] = ()) -> Callable[[F], F]:
    """--os-image IMAGE: the Glance image cloud servers boot (`up`, `config init`; not the engine image:
    --image-source/--image-ref); the command receives ``os_image``. ``old``: a command's earlier spellings
    (`up --image`), taken with a deprecation warning."""
    return click.option("--os-image", *old, "os_image", cls=OldSpellingOption, old=old, metavar="IMAGE", help=help)


deployment_option = click.option(
    "--deployment", metavar="NAME", help="A deployment `zenops up --cloud` made (its inventory, flavor, price)."
)

# --- pricing ------------------------------------------------------------------------------------------------------

flavor_option = click.option(
    "--flavor",
    metavar="FLAVOR",
    help="Flavor, e.g. gp.5.24.96 (catalogue or config `flavors:`): the servers --cloud creates, or the hosts' own; "
    "its price prices the results and labels them.",
)

price_option = click.option(
    "--price-per-hour",
    type=click.FloatRange(min=0, min_open=True),
    metavar="USD",
    help="Price of one host per hour (wins over the flavor's and run manifests').",
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


def option_group(argument: str, cls: type[Any], options: list[Callable[[F], F]]) -> Callable[[F], F]:
    """Declare ``options`` on a command that receives them as one argument, ``argument``: an instance of the
    dataclass ``cls``, whose fields are the options' parameter names."""
    names = [f.name for f in fields(cls)]

    def apply(f: F) -> F:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            return f(*args, **{argument: cls(**{n: kwargs.pop(n) for n in names})}, **kwargs)

        decorated = cast(F, command)
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return apply


class TableOption(click.Option):
    """A click option made from a row of zenops.request_options.OPTIONS. ``old_keys``: earlier names of its config
    key (``defaults.plan.vllm_version``), still taken."""

    def __init__(self, *args: Any, old_keys: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old_keys = old_keys


def table_option(row: Option, command: str, *, required: bool = False) -> Callable[[F], F]:
    """The click option of ``row`` on ``command``. `rollout` gives no option a default: what is deployed stays
    unless an option is given."""
    decls = [row.flag, *([row.short] if row.short else []), row.param]
    kw: dict[str, Any] = {"help": row.help, "metavar": row.metavar, "required": required, "old_keys": row.old_keys}
    default = None if command == "rollout" else row.default
    if row.kind == "choice":
        kw["type"] = click.Choice(row.choices)
    elif row.kind == "int":
        kw["type"] = click.IntRange(min=row.minimum, max=row.maximum)
    elif row.kind == "duration":
        kw["type"] = DurationType(row.minimum or 0)
    elif row.kind == "path":
        kw["type"] = click.Path(exists=True, dir_okay=False, path_type=Path)
    elif row.kind == "instances":
        kw["type"] = InstancesType()
        default = None if command == "rollout" else "auto"
    elif row.kind == "bool":
        kw["is_flag"] = True
        default = None if command == "rollout" else bool(row.default)
    elif row.kind == "args":
        kw["multiple"] = True
        default = None
    kw["cls"] = TableOption
    if default is not None:
        kw["default"] = default
        kw["show_default"] = not isinstance(default, bool) and default != ()
    return click.option(*decls, **kw)


@dataclass(frozen=True)
class RequestFlags:
    """What :func:`request_options` hands the command, as one ``request`` argument: every option of the table the
    command takes, by its field (a ServeRequest field)."""

    values: Mapping[str, Any]  # field -> value (the default when not given)
    given: frozenset[str]  # fields set by a flag, its environment variable or a config default

    @property
    def model(self) -> str | None:
        return cast("str | None", self.values.get("model"))

    def changes(self) -> dict[str, Any]:
        """Only what was given (a rollout changes nothing else; a value may be None: --instances auto)."""
        return {f: self.values[f] for f in self.values if f in self.given}


def request_options(command: str, *, model_required: bool = False) -> Callable[[F], F]:
    """Every serving and engine option ``command`` takes, from zenops.request_options.OPTIONS, in its order. The
    command receives them as one argument, ``request: RequestFlags`` (each is still its own option, for --help and
    ``defaults.<command>`` in the config)."""
    rows = for_command(command)
    options = [table_option(r, command, required=model_required and r.field == "model") for r in rows]
    names = [r.param for r in rows]

    def apply(f: F) -> F:
        @functools.wraps(f)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            values = {name: kwargs.pop(name) for name in names}
            if "engine_args" in values:
                values["engine_args"] = tuple(values["engine_args"] or ())
            given = frozenset(n for n in names if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT))
            return f(*args, request=RequestFlags(values, given), **kwargs)

        decorated = cast(F, wrapped)
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return apply


def tuned_fields(command: str) -> dict[str, str | None]:
    """The options a tuned file may set on ``command`` (field -> its parameter there; None: the command has no flag
    for it, yet a rollout may change it)."""
    if command == "rollout":
        return {f: (f if BY_FIELD[f].takes(command) else None) for f in CHANGEABLE if f != "model"}
    return {r.field: r.param for r in for_command(command) if r.field not in ("model", "api_key_file", "hf_token_file")}


# --- tuned --------------------------------------------------------------------------------------------------------

tuned_option = click.option(
    "--tuned",
    "tuned_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Deploy what a benchmark campaign measured: FILE is written by `zenops campaign report ID --write-tuned FILE` "
    "(the best configuration per model). The entry of --model supplies the options (platform, max-num-seqs, "
    "instances, engine pair and args, ...); flags you give win over it, it wins over config defaults. The "
    "plan's reasons name the campaign and its figures. A model the file does not have is refused (exit 2).",
)


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


# --- gateway ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatewayFlags:
    """What :func:`gateway_options` hands the command, as one ``gateway`` argument."""

    mode: str
    host: str | None
    port: int
    tls_cert_file: Path | None
    flavor: str | None = None


def gateway_options(f: F) -> F:
    """--gateway auto|on|off, --gateway-host, --gateway-port, --gateway-tls-cert, --gateway-flavor: the fleet
    endpoint (zenops.deployment.services.gateway). The command receives them as one argument,
    ``gateway: GatewayFlags``."""
    options = [
        click.option(
            "--gateway",
            "gateway_mode",
            type=click.Choice(["auto", "on", "off"]),
            default="auto",
            show_default=True,
            help="One endpoint for the deployment: HAProxy balancing every vLLM instance (least outstanding requests, "
            "/health checks; what `zenops rollout` drains). auto: on when there is more than one instance.",
        ),
        click.option("--gateway-host", metavar="HOST", help="Inventory host that runs it (default: the first)."),
        click.option(
            "--gateway-flavor",
            metavar="FLAVOR",
            help="With --cloud: run it on a small server of its own of this flavor (marked as the deployment's, "
            "removed by `down`), so the endpoint does not live on a serving server. Implies --gateway on.",
        ),
        click.option(
            "--gateway-port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Its port."
        ),
        click.option(
            "--gateway-tls-cert",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="PEM file (certificate chain + key, mode 0600): the endpoint speaks HTTPS only.",
        ),
    ]

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        gateway = GatewayFlags(
            kwargs.pop("gateway_mode"),
            kwargs.pop("gateway_host"),
            kwargs.pop("gateway_port"),
            kwargs.pop("gateway_tls_cert"),
            kwargs.pop("gateway_flavor"),
        )
        return f(*args, gateway=gateway, **kwargs)

    decorated = cast(F, command)
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


def through_gateway_option(help: str) -> Callable[[F], F]:
    """--through-gateway: a flag for the deployment's gateway rather than its servers (`bench`, `logs`); the command
    receives ``through_gateway``. --gateway is its old spelling there (on `up` and `plan`, --gateway is the mode:
    :func:`gateway_options`)."""
    return click.option(
        "--through-gateway",
        "--gateway",
        "through_gateway",
        cls=OldSpellingOption,
        old=("--gateway",),
        is_flag=True,
        help=help,
    )


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


def limit_option_for(help: str, *, old: tuple[str, ...] = (), metavar: str = "PATTERN") -> Callable[[F], F]:
    """--limit: the one spelling of host selection on every command (``old``: a command's earlier spellings, e.g.
    `plan --host`, `logs --host`, taken with a deprecation warning)."""
    return click.option("--limit", *old, "limit", cls=OldSpellingOption, old=old, metavar=metavar, help=help)


limit_option = limit_option_for("Only these hosts/groups of the inventory.")


def dry_run_option(help: str, *, old: tuple[str, ...] = ()) -> Callable[[F], F]:
    """--dry-run: say what the command would do and do none of it (``help``: what it says, on this command); the
    command receives ``dry_run``. ``old``: a command's earlier spellings (`up --check`), taken with a deprecation
    warning."""
    return click.option("--dry-run", *old, "dry_run", cls=OldSpellingOption, old=old, is_flag=True, help=help)


yes_option = click.option(
    "--yes",
    "-y",
    "yes",
    is_flag=True,
    help="Do not ask before creating or deleting cloud resources (needed without a terminal: scripts, CI, cron; "
    "as Terraform's -auto-approve). What is created or deleted, and its cost, is still said.",
)


def deployment_name_option(help: str) -> Callable[[F], F]:
    """--deployment NAME for a command that names the deployment it makes or removes (`up`, `down`); --name is its
    old spelling."""
    return click.option(
        "--deployment", "--name", "deployment", cls=OldSpellingOption, old=("--name",), metavar="NAME", help=help
    )


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
