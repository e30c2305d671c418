"""Close the loop: a campaign's best configuration per model as a file `zenops plan`, `up` and `rollout` take
(``--tuned FILE``), so what was measured is what gets deployed, with the campaign id in the plan's reasons.

The file (YAML, written by :func:`write_tuned`, read and checked by :func:`load_tuned`)::

    # zenops tuned configurations: the best measured configuration per model
    zenops_tuned: 1                      # the format's version
    campaign: qwen-sweep-202611211200    # the campaign that measured them
    max_tpot_ms: 50                      # the latency bound they were chosen under (null: none)
    api_price: 0.6                       # the API price of the break-even figures (null: none)
    models:
      Qwen/Qwen3-4B:                     # the model as the campaign file named it (local dirs: resolved paths)
        flavor: gp.5.24.96               # the flavor it was measured on (null: an inventory's hosts)
        variant: zen                     # the campaign's variant
        options:                         # `zenops up` options: the campaign's engine options, then the variant's
          image_source: pip              #   (the same keys and checks as a campaign file's engine: and variants:)
          engine_args: [--enforce-eager]
          platform: zen
        figures:                         # what the choice rests on (the row of the campaign report)
          concurrency: 4                 #   the bench's max concurrency of that row
          output_tok_s: 123.4
          median_ttft_ms: 410.2
          median_tpot_ms: 31.9
          cost_per_million_output_tokens: 1.78
          price_per_hour: 0.79
          roofline_pct: 41.2             #   null where the plan had no ceiling
          repeats: 2
          spread: 0.031                  #   (max - min) / mean of the repeats' output tok/s (null: one run)
          breakeven_tokens_per_month: 961166666.7   # with api_price only
    not_chosen:                          # models for which nothing qualified, and why (read back, not deployed)
      ./tiny-b: no configuration has a median TPOT <= 50.0 ms (...)

Errors are zenops.errors.ConfigError naming the file, the key (``models.Qwen/Qwen3-4B.options.platform``) and the
fix, from the same schema layer as zenops.yaml and campaign files (zenops.schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zenops import schema
from zenops.campaign.report import CampaignReport
from zenops.errors import ConfigError, UsageError
from zenops.schema import Entries, Field, Section

VERSION = 1
REFERENCE = "the module docstring of zenops.campaign.tuned (`zenops campaign report --write-tuned FILE` writes it)"

FIGURES = (
    "concurrency",
    "output_tok_s",
    "median_ttft_ms",
    "median_tpot_ms",
    "failed",
    "cost_per_million_output_tokens",
    "price_per_hour",
    "roofline_pct",
    "repeats",
    "spread",
    "breakeven_tokens_per_month",
)
_COUNTS = ("concurrency", "failed", "repeats")


@dataclass(frozen=True)
class TunedConfig:
    """One model's tuned configuration: ``options`` are ServeRequest keyword arguments (engine_args a tuple, paths
    Paths, ``instances: auto`` None), as a campaign file's options are."""

    model: str
    campaign: str
    flavor: str | None
    variant: str
    options: Mapping[str, Any]
    figures: Mapping[str, float | int | None] = field(default_factory=dict)
    source: str = ""  # the file it was read from

    @property
    def reason(self) -> str:
        """For the plan's reasons: ``tuned by campaign X (variant zen on gp.5.24.96: $1.78 per 1M output tokens,
        123.4 tok/s, median TPOT 31.9 ms at concurrency 4)``."""
        f = self.figures
        facts = []
        if f.get("cost_per_million_output_tokens") is not None:
            facts.append(f"${f['cost_per_million_output_tokens']:.2f} per 1M output tokens")
        if f.get("output_tok_s") is not None:
            facts.append(f"{f['output_tok_s']:.1f} tok/s")
        if f.get("median_tpot_ms") is not None:
            facts.append(f"median TPOT {f['median_tpot_ms']:.1f} ms")
        at = f" at concurrency {f['concurrency']}" if f.get("concurrency") is not None else ""
        where = f"variant {self.variant} on {self.flavor or 'its hosts'}"
        return f"tuned by campaign {self.campaign} ({where}: {', '.join(facts) or 'no figures'}{at})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "options": _plain(self.options), "figures": dict(self.figures)}


# --- writing ----------------------------------------------------------------------------------------------------


def _plain(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as YAML values: tuples as lists, paths as strings, ``instances`` None (automatic) as auto."""
    return {key: _plain_value(key, value) for key, value in options.items() if key != "model"}


def _plain_value(key: str, value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [str(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if key == "instances" and value is None:
        return "auto"
    return value


def tuned_document(
    report: CampaignReport,
    campaign_id: str,
    *,
    variants: Mapping[str, Mapping[str, Any]],
    engine: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The tuned file's content (see the module's docstring). ``variants``: variant name -> its `zenops up` options,
    ``engine``: the options every cell shared (the variant's win). Raises UsageError for a best configuration whose
    variant ``variants`` does not name."""
    models: dict[str, Any] = {}
    not_chosen: dict[str, str] = {}
    for model, row in report.best.items():
        if row is None:
            not_chosen[model] = report.why.get(model, "nothing qualified")
            continue
        variant = row.variant or ""
        if variant not in variants:
            known = ", ".join(sorted(variants)) or "none"
            raise UsageError(
                f"the best configuration of {model} is variant {variant!r}, whose options were not given",
                hint=f"pass the campaign's variants (given: {known})",
            )
        r = row.result
        be = report.break_even(row)
        figures: dict[str, float | int | None] = {
            "concurrency": row.concurrency,
            "output_tok_s": r.output_tok_s,
            "median_ttft_ms": r.median_ttft_ms,
            "median_tpot_ms": r.median_tpot_ms,
            "failed": r.failed,
            "cost_per_million_output_tokens": row.cost,
            "price_per_hour": r.price_per_hour,
            "roofline_pct": r.roofline_pct,
            "repeats": len(row.runs),
            "spread": row.spread,
        }
        if be is not None:
            figures["breakeven_tokens_per_month"] = be.tokens_per_month
        models[model] = {
            "flavor": row.flavor,
            "variant": variant,
            "options": _plain({**(engine or {}), **variants[variant]}),
            "figures": figures,
        }
    doc: dict[str, Any] = {
        "zenops_tuned": VERSION,
        "campaign": campaign_id,
        "max_tpot_ms": report.max_tpot_ms,
        "api_price": report.api_price,
        "models": models,
    }
    if not_chosen:
        doc["not_chosen"] = not_chosen
    return doc


def write_tuned(
    report: CampaignReport,
    campaign_id: str,
    path: Path,
    *,
    variants: Mapping[str, Mapping[str, Any]],
    engine: Mapping[str, Any] | None = None,
) -> None:
    """Write the best configuration per model of ``report`` as a tuned file at ``path`` (see the module's
    docstring). ``variants``: the campaign's variant name -> `zenops up` options (the report knows only names);
    ``engine``: the campaign's shared engine options. Models for which nothing qualified are listed under
    ``not_chosen`` with the reason. Raises UsageError (a variant not given, a file that cannot be written)."""
    import yaml  # noqa: PLC0415  (only when a file is written: the CLI's --help starts without it)

    doc = tuned_document(report, campaign_id, variants=variants, engine=engine)
    text = (
        f"# zenops tuned configurations: the best measured configuration per model (campaign {campaign_id}).\n"
        "# Deploy one with `zenops up --tuned FILE` (also plan and rollout).\n"
        + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    )
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror or e}", hint="pick a writable path") from e


# --- reading ----------------------------------------------------------------------------------------------------


def _version(v: Any) -> str | None:
    return None if v == VERSION else f"must be {VERSION} (this zenops reads version {VERSION} of the format)"


def _number_or_null(v: Any) -> str | None:
    ok = v is None or (isinstance(v, int | float) and not isinstance(v, bool))
    return None if ok else "must be a number or null"


def _count_or_null(v: Any) -> str | None:
    return None if v is None or schema.count(v) is None else "must be a whole number or null"


def _str_or_null(v: Any) -> str | None:
    return None if v is None or schema.non_empty_str(v) is None else "must be a name or null"


def _bound_or_null(v: Any) -> str | None:
    return None if v is None or schema.positive_number(v) is None else "must be a number above 0, or null"


def tuned_schema(base: Path) -> schema.Schema:
    """The tuned file's schema; ``base`` is its directory (a relative base_image_archive is checked there). The
    options are checked by the campaign file's own option checks (engine: and variants:)."""
    from zenops.campaign import spec  # noqa: PLC0415

    options = Section(
        {**spec._engine_schema(base).fields, **spec.VARIANT_OPTIONS},
        example="{platform: zen, image_source: pip}",
        problem="must be a mapping of `zenops up` option: value",
    )
    figures = Section(
        {name: Field(_count_or_null if name in _COUNTS else _number_or_null, f"{name}: 4") for name in FIGURES},
        example="{concurrency: 4, output_tok_s: 123.4, cost_per_million_output_tokens: 1.78}",
    )
    entry = Section(
        {
            "flavor": Field(_str_or_null, "flavor: gp.5.24.96  (null: an inventory's hosts)"),
            "variant": Field(schema.non_empty_str, "variant: zen"),
            "options": options,
            "figures": figures,
        },
        example="{flavor: gp.5.24.96, variant: zen, options: {platform: zen}}",
        problem="must be a mapping of flavor, variant, options, figures",
        required=("variant", "options"),
    )
    return schema.Schema(
        Section(
            {
                "zenops_tuned": Field(_version, f"zenops_tuned: {VERSION}"),
                "campaign": Field(schema.non_empty_str, "campaign: qwen-sweep-202611211200"),
                "max_tpot_ms": Field(_bound_or_null, "max_tpot_ms: 50"),
                "api_price": Field(_bound_or_null, "api_price: 0.6"),
                "models": Entries(entry, example="models: {Qwen/Qwen3-4B: {variant: zen, options: {}}}"),
                "not_chosen": Entries(Field(schema.non_empty_str, "why"), example="not_chosen: {model: why}"),
            },
            problem="the top level must be a mapping of keys",
            hint="write it with `zenops campaign report ID --write-tuned FILE`",
            required=("zenops_tuned", "campaign", "models"),
        ),
        reference=REFERENCE,
    )


def load_tuned(path: Path) -> dict[str, TunedConfig]:
    """Read and check a tuned file: model -> its TunedConfig. Raises ConfigError naming the file, the key and the
    fix (an empty ``models`` too: nothing to deploy)."""
    from zenops.campaign import spec  # noqa: PLC0415

    base = Path(path).expanduser().resolve().parent
    data = tuned_schema(base).validate(schema.read_yaml(Path(path)), str(path))
    if not data["models"]:
        why = "; ".join(f"{m}: {w}" for m, w in (data.get("not_chosen") or {}).items())
        raise ConfigError(
            str(path),
            "models",
            "no model has a tuned configuration" + (f" ({why})" if why else ""),
            hint="run the campaign with a looser --max-tpot-ms, or deploy without --tuned",
        )
    return {
        str(model): TunedConfig(
            model=str(model),
            campaign=data["campaign"],
            flavor=entry.get("flavor"),
            variant=entry["variant"],
            options=spec._options(entry["options"], base),
            figures=dict(entry.get("figures") or {}),
            source=str(path),
        )
        for model, entry in data["models"].items()
    }
