"""The campaign file: read, checked through zenops.schema (errors name the file, the key and the fix, like
zenops.yaml's), turned into a :class:`CampaignSpec`. ``zenops campaign example`` prints a commented one.

Everything a cell needs later is checked here, before a server is created and billed: the names, the types, the
`zenops up` options of every variant, the local paths (relative to the campaign file, resolved). What only the cloud
or the catalogue can tell (does the flavor exist, what does it cost) is checked when the campaign is planned.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zenops import durations, request_options, schema
from zenops.cloud.marks import check_name
from zenops.errors import ConfigError, UsageError
from zenops.peers import NAMES as PEERS
from zenops.schema import Entries, Field, Issue, ListOf, Problem, Schema, Section

REFERENCE = "`zenops campaign example`"


@dataclass(frozen=True)
class BenchSpec:
    concurrency: tuple[int, ...] = (1, 4)
    input_len: int = 128
    output_len: int = 64
    prompts: int = 16
    repeats: int = 1


@dataclass(frozen=True)
class Budget:
    max_usd: float | None = None
    ttl_s: int = 4 * 3600


@dataclass(frozen=True)
class Variant:
    name: str
    options: Mapping[str, Any]  # ServeRequest field -> value (engine_args as a tuple)


@dataclass(frozen=True)
class CampaignSpec:
    name: str
    path: Path  # the file, resolved
    cloud: str | None
    inventory: Path | None  # resolved
    flavors: tuple[str, ...]  # () with an inventory
    models: tuple[str, ...]  # local dirs resolved to absolute paths, catalogue ids as given
    variants: tuple[Variant, ...]
    engine: Mapping[str, Any]  # ServeRequest fields (paths resolved; engine_args a tuple)
    bench: BenchSpec
    budget: Budget
    prices: Mapping[str, float]
    parallel: int = 1


DEFAULT_VARIANTS = (Variant("default", {}),)


# --- checkers ---------------------------------------------------------------------------------------------------


def _campaign_name(v: Any) -> str | Problem | None:
    """The name ends up in the campaign id, resource names and tags: the same rules as a deployment's."""
    if not isinstance(v, str):
        return "must be a name like qwen-sweep"
    try:
        check_name(v, "campaign")
    except UsageError as e:
        return Problem(e.message, e.hint)
    return None


def _duration(v: Any) -> str | None:
    try:
        durations.parse(v)
    except ValueError:
        return f"must be a duration: {durations.EXAMPLES}"
    return None


def _instances(v: Any) -> str | None:
    return None if v == "auto" or schema.positive_int(v) is None else "must be a positive integer or auto"


_VARIANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _variant_name(v: Any) -> str | None:
    """A variant's name labels its results in reports, tables and plots."""
    ok = isinstance(v, str) and _VARIANT_NAME.match(v)
    return None if ok else "a variant name is letters, digits, '.', '_' and '-' (up to 64, e.g. zen-latency)"


def _resolve(base: Path, text: str) -> Path:
    """A path from the campaign file: ``~`` expanded, relative to the file's directory, absolute."""
    return (base / Path(text).expanduser()).resolve()


def _looks_local(text: str) -> bool:
    return text.startswith((".", "/", "~"))


def _model_dir(base: Path, text: str) -> Path | None:
    """The local model directory ``text`` names (relative to the campaign file), or None for a catalogue id."""
    path = _resolve(base, text)
    return path if path.is_dir() else None


def _model(base: Path) -> schema.Checker:
    def check_model(v: Any) -> str | Problem | None:
        if not isinstance(v, str) or not v.strip():
            return "must be a catalogue id or a local model directory"
        local = _model_dir(base, v)
        fix = "give a directory holding the model's config.json (relative to the campaign file), or a catalogue id"
        if local is None and _looks_local(v):
            return Problem(f"no model directory {_resolve(base, v)}", hint=fix)
        if local is not None and not (local / "config.json").is_file():
            return Problem(f"model directory {local} has no config.json", hint=fix)
        return None

    return check_model


def _existing_file(base: Path, what: str, example: str) -> schema.Checker:
    def check_file(v: Any) -> str | Problem | None:
        if not isinstance(v, str) or not v.strip():
            return "must be a path"
        path = _resolve(base, v)
        if not path.exists():
            fix = f"give a path relative to the campaign file: {example}"
            return Problem(f"{what} {path} does not exist", hint=fix)
        return None

    return check_file


# --- schema -----------------------------------------------------------------------------------------------------


def _engine_arg(v: Any) -> str | Problem | None:
    """A `vllm serve` argument that sets nothing zenops sets: `zenops up`'s own guard, here when the file is read
    (`campaign plan`, before anything is provisioned), not when a cell's servers are already paid for."""
    from zenops.serve import engine_arg_refusal  # noqa: PLC0415  (the serving stack: not for --help)

    problem = schema.non_empty_str(v)
    if problem is not None:
        return problem
    refused = engine_arg_refusal(v)
    return Problem(*refused) if refused is not None else None


_ENGINE_ARGS = ListOf(
    Field(_engine_arg, "--enforce-eager"), example="engine_args: [--enforce-eager]  (more `vllm serve` args)"
)


def _int_at_least(n: int, most: int | None = None) -> schema.Checker:
    def check(v: Any) -> str | None:
        problem = schema.positive_int(v)
        if problem is None and v < n:
            return f"must be an integer of at least {n}"
        if problem is None and most is not None and v > most:
            return f"must be an integer from {n} to {most}"
        return problem

    return check


def _field(option: request_options.Option, base: Path | None) -> schema.Node:
    """The campaign file's check of one option of the table (zenops.request_options): from its kind."""
    if option.kind == "args":
        return _ENGINE_ARGS
    check: schema.Checker
    if option.kind == "choice":
        check = schema.choice(*option.choices)
    elif option.kind == "int":
        check = _int_at_least(option.minimum or 1, option.maximum)
    elif option.kind == "instances":
        check = _instances
    elif option.kind == "duration":  # the grammar and the least value of the flag (zenops.request_options)
        check = schema.duration(option.minimum if option.minimum is not None else 1)
    elif option.kind == "path":
        assert base is not None, "a path option is an engine key: its file is relative to the campaign file"
        check = _existing_file(base, option.field.replace("_", " "), option.example)
    elif option.kind == "bool":
        check = schema.boolean
    else:
        check = schema.non_empty_str
    return Field(check, option.example)


# variants.<name>: `zenops up` options (ServeRequest fields) that change from one cell to the next: the table's
VARIANT_OPTIONS: dict[str, schema.Node] = {o.field: _field(o, None) for o in request_options.campaign_keys("variant")}

VARIANT_SCHEMA = Section(VARIANT_OPTIONS, example="{platform: zen}", problem="must be a mapping of option: value")

BENCH_SCHEMA = Section(
    {
        "concurrency": ListOf(
            Field(_int_at_least(1, request_options.MAX_CONCURRENCY), "4"),
            example=f"concurrency: [1, 4]  (each from 1 to {request_options.MAX_CONCURRENCY})",
            min_items=1,
            unique=True,
        ),
        "input_len": Field(schema.positive_int, "input_len: 128  (prompt tokens)"),
        "output_len": Field(schema.positive_int, "output_len: 64  (generated tokens)"),
        "prompts": Field(schema.positive_int, "prompts: 16  (requests per concurrency level)"),
        "repeats": Field(schema.positive_int, "repeats: 1"),
    },
    example="{concurrency: [1, 4], prompts: 16}",
)

BUDGET_SCHEMA = Section(
    {
        "max_usd": Field(schema.positive_number, "max_usd: 5.0  (no cap when absent)"),
        "ttl": Field(_duration, "ttl: 2h  (every server's expiry: 90m, 1h30m, 2h, 7200 (seconds))"),
    },
    example="{max_usd: 5.0, ttl: 2h}",
)


def _engine_schema(base: Path) -> Section:
    """engine: the `zenops up` options every cell shares (the image route, the engine pair, its arguments)."""
    return Section(
        {o.field: _field(o, base) for o in request_options.campaign_keys("engine")},
        example="{image_source: pip}",
    )


def _cloud_or_inventory(doc: Mapping[str, Any]) -> Issue | None:
    """Servers come from the cloud (one per flavor) or are the inventory's hosts: exactly one of the two."""
    if "cloud" in doc and "inventory" in doc:
        return Issue("inventory", "give cloud or inventory, not both", hint="remove one of them")
    if "cloud" not in doc and "inventory" not in doc:
        return Issue(
            "cloud",
            "is required (or inventory)",
            hint="e.g. cloud: sandbox  (a clouds.yaml entry), or inventory: hosts.yml  (hosts that exist)",
        )
    return None


def _flavors_with_cloud(doc: Mapping[str, Any]) -> Issue | None:
    if "cloud" in doc and "flavors" not in doc:
        return Issue("flavors", "is required with cloud", hint="e.g. flavors: [gp.5.24.96]  (one server per flavor)")
    if "inventory" in doc and "flavors" in doc:
        return Issue(
            "flavors",
            "not allowed with inventory (the inventory's hosts are the servers)",
            hint="remove flavors, or use cloud instead of inventory",
        )
    return None


def campaign_schema(base: Path) -> Schema:
    """The campaign file's schema; ``base`` is the file's directory (relative paths are checked there)."""
    return Schema(
        Section(
            {
                "name": Field(_campaign_name, "name: qwen-sweep"),
                "cloud": Field(schema.non_empty_str, "cloud: sandbox  (a clouds.yaml entry)"),
                "flavors": ListOf(
                    Field(schema.non_empty_str, "gp.5.24.96"),
                    example="flavors: [gp.5.24.96, gp.5.48.192]",
                    min_items=1,
                    unique=True,
                ),
                "inventory": Field(
                    _existing_file(base, "inventory", "inventory: hosts.yml"),
                    "inventory: hosts.yml  (relative to this file)",
                ),
                "models": ListOf(
                    Field(_model(base), "Qwen/Qwen3-4B  (a catalogue id) or ./my-model  (a directory)"),
                    example="models: [Qwen/Qwen3-0.6B, ./tiny-model]",
                    min_items=1,
                    unique=True,
                ),
                "variants": Entries(
                    VARIANT_SCHEMA,
                    example="variants: {zen: {platform: zen}, cpu: {platform: cpu}}",
                    name=_variant_name,
                    min_entries=1,
                ),
                "engine": _engine_schema(base),
                "bench": BENCH_SCHEMA,
                "budget": BUDGET_SCHEMA,
                "prices": Entries(
                    Field(schema.non_negative_number, "0.79  ($ per server and hour)"),
                    example="prices: {gp.5.24.96: 0.79}",
                    name=schema.non_empty_str,
                ),
                "parallel": Field(schema.positive_int, "parallel: 2  (flavors provisioned at the same time)"),
            },
            problem="the top level must be a mapping of keys",
            hint=f"see {REFERENCE}",
            required=("name", "models"),
            rules=(_cloud_or_inventory, _flavors_with_cloud),
        ),
        reference=REFERENCE,
    )


# --- loading ----------------------------------------------------------------------------------------------------


def load_spec(path: Path) -> CampaignSpec:
    """Read and check a campaign file. Raises ConfigError naming the file (as given), the key and the fix."""
    resolved = Path(path).expanduser().resolve()
    base = resolved.parent
    data = campaign_schema(base).validate(_presets(schema.read_yaml(Path(path)), str(path)), str(path))
    inventory = data.get("inventory")
    variants = data.get("variants")
    budget = data.get("budget", {})
    return CampaignSpec(
        name=data["name"],
        path=resolved,
        cloud=data.get("cloud"),
        inventory=_resolve(base, inventory) if inventory is not None else None,
        flavors=tuple(data.get("flavors", ())),
        models=tuple(_model_path(base, m) for m in data["models"]),
        variants=tuple(Variant(n, _options(o, base)) for n, o in variants.items()) if variants else DEFAULT_VARIANTS,
        engine=_options(data.get("engine", {}), base),
        bench=_bench(data.get("bench", {})),
        budget=Budget(
            max_usd=float(budget["max_usd"]) if "max_usd" in budget else None,
            ttl_s=durations.parse(budget["ttl"]) if "ttl" in budget else Budget().ttl_s,
        ),
        prices={name: float(price) for name, price in data.get("prices", {}).items()},
        parallel=data.get("parallel", 1),
    )


# named variant sets: `variants: peers` is zenops's plan and each peer's settings on the same host (zenops.peers);
# `variants: engines` is zenops's plan in vLLM and llama.cpp's server in each GGUF format on the same host, cores and
# seats (the `llamacpp` variant key), one engine at a time
VARIANT_PRESETS: dict[str, dict[str, dict[str, str]]] = {
    "peers": {name: {"layout": name} for name in PEERS},
    "engines": {"zenops": {}, **{f"llamacpp-{fmt}": {"llamacpp": fmt} for fmt in request_options.LLAMACPP_FORMATS}},
}


def _presets(raw: Any, path: str) -> Any:
    """The file with ``variants: <preset name>`` spelled out as its variants."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("variants"), str):
        return raw
    preset = VARIANT_PRESETS.get(raw["variants"])
    if preset is None:
        raise ConfigError(
            path, "variants", f"{raw['variants']!r} is no variant set",
            hint=f"a mapping (variants: {{zen: {{platform: zen}}}}) or one of: {', '.join(VARIANT_PRESETS)}",
        )  # fmt: skip
    return {**raw, "variants": preset}


def _model_path(base: Path, text: str) -> str:
    local = _model_dir(base, text)
    return str(local) if local is not None else text


def _options(raw: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """Checked options as ServeRequest values: engine_args a tuple, instances auto -> None, paths resolved."""
    return {key: _option(key, value, base) for key, value in raw.items()}


def _option(key: str, value: Any, base: Path) -> Any:
    option = request_options.BY_FIELD[key]
    kind = option.kind
    if kind == "args":
        return tuple(value)
    if kind == "instances" and value == "auto":
        return None
    if kind == "path":
        return _resolve(base, value)
    if kind == "duration":
        return durations.parse(value, minimum=option.minimum if option.minimum is not None else 1)
    return value


def _bench(raw: Mapping[str, Any]) -> BenchSpec:
    values = dict(raw)
    if "concurrency" in values:
        values["concurrency"] = tuple(values["concurrency"])
    return BenchSpec(**values)
