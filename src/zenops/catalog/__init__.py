"""The model and flavor catalogue: model shapes (for memory and KV-cache sizing) and server flavors (for cost).

Both come from YAML files shipped inside the package (``models.yaml``, ``flavors.yaml``, read with
importlib.resources, so they work from a wheel). A model that is not in the catalogue can be described by a local
directory holding its Hugging Face ``config.json``; flavors of your own cloud come from ``flavors:`` in zenops.yaml
and win over catalogue flavors of the same name.

The CPU catalogue (``cpus.yaml``) is in :mod:`zenops.catalog.cpus`, the reading of the files in
:mod:`zenops.catalog.resource`; their names are importable from here.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zenops.catalog.cpus import CpuSpec, cpu_spec
from zenops.catalog.resource import load_resource
from zenops.config import check_flavor
from zenops.errors import ConfigError, UsageError

__all__ = [
    "DTYPE_BYTES",
    "GIB",
    "CpuSpec",
    "FlavorSpec",
    "ModelConfigError",
    "ModelSpec",
    "check_config_flavor",
    "cpu_spec",
    "dtype_bytes",
    "estimate_params",
    "flavors",
    "flavors_that_fit",
    "get_flavor",
    "get_model",
    "load_resource",
    "model_from_config_json",
    "models",
]

GIB = 1024**3
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

_MODEL_FIX = "describe it with a local model directory containing config.json (pass the directory's path)"
_FLAVOR_FIX = "define it under `flavors:` in zenops.yaml (see `zenops config example`)"


def dtype_bytes(dtype: str) -> int:
    """Bytes per value of ``dtype``; UsageError naming the valid ones otherwise."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise UsageError(f"unknown dtype '{dtype}'", hint=f"use one of {', '.join(DTYPE_BYTES)}") from None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params_b: float
    architecture: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    hf_token_required: bool
    sliding_window: int | None = None
    tied_embeddings: bool = False
    source: str = "catalogue"  # "catalogue" or "config.json:<path>"
    sliding_window_pattern: int | None = None  # every Nth layer global, the others windowed (Gemma 3: 6)
    intermediate_size: int | None = None
    vocab_size: int | None = None
    num_experts: int | None = None  # mixture of experts: experts per layer (all of them stay in memory)
    notes: str = ""
    provenance: str = ""  # where the numbers come from (the catalogue's `source:` note, or how params were found)
    # config.json's quantization_config as JSON ("": not quantized); zenops.quant reads the format from it
    quantization: str = ""

    @property
    def quant_format(self) -> Any:
        """The weights' format (zenops.quant.Format), None when not quantized; raises zenops.quant.QuantError for
        one the engine cannot run."""
        from zenops import quant  # noqa: PLC0415

        return quant.detect(json.loads(self.quantization)) if self.quantization else None

    def linear_params(self) -> float:
        """Parameters of the linear layers (attention and MLP projections): what a quantized checkpoint quantizes;
        the rest (embeddings, lm_head, norms) stays in the model's dtype."""
        if self.intermediate_size is None:
            embeddings = (self.vocab_size or 0) * self.hidden_size * (1 if self.tied_embeddings else 2)
            return max(0.0, self.params_b * 1e9 - embeddings)
        attention = self.hidden_size * self.head_dim * (self.attention_heads + 2 * self.kv_heads)
        attention += self.attention_heads * self.head_dim * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size * (self.num_experts or 1)
        return float(min(self.params_b * 1e9, self.layers * (attention + mlp)))

    def kv_heads_per_rank(self, tensor_parallel: int = 1) -> int:
        """KV heads vLLM keeps on each tensor-parallel rank: ``max(1, kv_heads // tp)``. When TP exceeds the KV
        heads, every rank holds a replica of one head, so the cache per rank does not shrink any further."""
        return max(1, self.kv_heads // tensor_parallel)

    def kv_bytes_per_token(self, dtype: str, tensor_parallel: int = 1) -> int:
        """KV cache per token on one rank, every layer counted as global (conservative for sliding-window models)."""
        return 2 * self.layers * self.kv_heads_per_rank(tensor_parallel) * self.head_dim * dtype_bytes(dtype)

    def tensor_parallel_problem(self, tensor_parallel: int) -> str | None:
        """Why vLLM refuses this tensor-parallel size for the model, or None when it accepts it: the attention heads
        must divide by TP, and the KV heads must divide by TP or (replicated) divide TP."""
        tp = tensor_parallel
        if tp < 1:
            return f"tensor parallel {tp} is not a size"
        if self.attention_heads % tp:
            return f"{self.attention_heads} attention heads do not divide by {tp}"
        if self.kv_heads % tp and tp % self.kv_heads:
            return f"{self.kv_heads} KV heads neither divide by {tp} nor divide {tp} (replication)"
        return None

    def attention_flops_per_context_token(self) -> int:
        """Decode FLOPs per generated token per token of context: q.k and p.v, 2 FLOPs each multiply-add."""
        return 4 * self.layers * self.attention_heads * self.head_dim

    def weight_bytes(self, dtype: str) -> int:
        """Bytes of the weights in ``dtype``; a quantized model's linear layers at their bits, with their scales."""
        fmt = self.quant_format
        if fmt is None:
            return round(self.params_b * 1e9 * dtype_bytes(dtype))
        from zenops import quant  # noqa: PLC0415

        linear = self.linear_params()
        return quant.weight_bytes(fmt, linear, self.params_b * 1e9 - linear, dtype_bytes(dtype))


@dataclass(frozen=True)
class FlavorSpec:
    name: str
    vcpus: int
    ram_mib: int
    disk_gb: int
    ephemeral_gb: int
    cpu_model: str
    cpu_vendor: str
    cpu_flags: tuple[str, ...]
    numa_nodes: int = 1
    smt_exposed: bool = False
    price_per_hour: float | None = None
    currency: str = "USD"
    cloud: str | None = None
    source: str = "catalogue"  # "catalogue" or "config" / "config:<file>"
    provenance: str = ""

    @property
    def ram_gib(self) -> float:
        return self.ram_mib / 1024


class ModelConfigError(UsageError):
    """A model's config.json (or its weights index) is unreadable or lacks a key: names the file and the key."""

    def __init__(self, path: str, key: str, problem: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}", hint=hint)
        self.path = path
        self.key = key


# --- the model catalogue (models.yaml) --------------------------------------------------------------------------------


_INT_FIELDS = ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_context")
_OPTIONAL_INT_FIELDS = ("sliding_window", "sliding_window_pattern", "intermediate_size", "vocab_size", "num_experts")


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _catalogue_model(where: str, name: str, entry: Any) -> ModelSpec:
    def bad(key: str, problem: str) -> ConfigError:
        return ConfigError(where, f"models.{name}.{key}", problem, hint="fix the catalogue entry")

    if not isinstance(entry, dict):
        raise bad("", "must be a mapping")
    known = {"params_b", "architecture", "hf_token_required", "tied_embeddings", "notes", "source",
             "quantization_config"}  # fmt: skip
    for key in entry.keys() - known - set(_INT_FIELDS) - set(_OPTIONAL_INT_FIELDS):
        raise bad(str(key), "unknown field")
    for key in _INT_FIELDS:
        if not _is_pos_int(entry.get(key)):
            raise bad(key, "must be a positive integer")
    for key in _OPTIONAL_INT_FIELDS:
        if entry.get(key) is not None and not _is_pos_int(entry[key]):
            raise bad(key, "must be a positive integer or null")
    params = entry.get("params_b")
    if not isinstance(params, int | float) or isinstance(params, bool) or params <= 0:
        raise bad("params_b", "must be a number above 0")
    for key in ("hf_token_required", "tied_embeddings"):
        if not isinstance(entry.get(key), bool):
            raise bad(key, "must be true or false")
    for key in ("architecture", "source"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise bad(key, "must be a non-empty string")
    qc = entry.get("quantization_config")
    if qc is not None and (not isinstance(qc, dict) or not qc.get("quant_method")):
        raise bad("quantization_config", "must be the checkpoint's config.json quantization_config (a mapping)")
    fields: dict[str, Any] = {key: entry.get(key) for key in (*_INT_FIELDS, *_OPTIONAL_INT_FIELDS)}
    return ModelSpec(
        name=name,
        params_b=float(params),
        architecture=entry["architecture"],
        hf_token_required=entry["hf_token_required"],
        tied_embeddings=entry["tied_embeddings"],
        notes=str(entry.get("notes") or ""),
        provenance=entry["source"],
        quantization=json.dumps(qc, sort_keys=True) if qc else "",
        **fields,
    )


@functools.cache
def _catalogue_models() -> dict[str, ModelSpec]:
    where, entries = load_resource("models.yaml", "models")
    return {str(name): _catalogue_model(where, str(name), entry) for name, entry in entries.items()}


def models() -> dict[str, ModelSpec]:
    """The catalogue's models by Hugging Face id (read once, then cached)."""
    return dict(_catalogue_models())


def _close(query: str, names: Iterable[str]) -> list[str]:
    """Up to three names close to ``query``, compared case-insensitively, whole id or the part after the org."""
    keys: dict[str, str] = {}
    for name in names:
        keys.setdefault(name.lower(), name)
        keys.setdefault(name.rsplit("/", 1)[-1].lower(), name)
    found: list[str] = []
    for probe in dict.fromkeys((query.lower(), query.rsplit("/", 1)[-1].lower())):
        for key in difflib.get_close_matches(probe, list(keys), n=6, cutoff=0.6):
            if keys[key] not in found:
                found.append(keys[key])
    return found[:3]


def _suggest(close: list[str], fix: str, known: Iterable[str]) -> str:
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}? Otherwise {fix}"
    return f"known: {', '.join(sorted(known))}; otherwise {fix}"


def get_model(name: str) -> ModelSpec:
    """A catalogue model by exact or case-insensitive id, or a local directory holding config.json."""
    catalogue = _catalogue_models()
    if name in catalogue:
        return catalogue[name]
    for known, spec in catalogue.items():
        if known.lower() == name.lower():
            return spec
    local = Path(name).expanduser()
    if local.is_dir() or (local.is_file() and local.name == "config.json"):
        return model_from_config_json(local)
    raise UsageError(f"unknown model '{name}'", hint=_suggest(_close(name, catalogue), _MODEL_FIX, catalogue))


# --- a local config.json ----------------------------------------------------------------------------------------

# Keys a multimodal config's text_config may leave out, with transformers' defaults for that text model type.
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "vocab_size": 262208,
        "tie_word_embeddings": True,
    },
}


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(str(path), "", f"no {what} here", hint=f"a model directory needs {what}") from None
    except OSError as e:
        raise ModelConfigError(
            str(path), "", f"cannot read: {e.strerror}", hint="check the path and permissions"
        ) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f"line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        problem = f"not valid JSON: {e.msg}" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise ModelConfigError(str(path), where, problem, hint=f"download {what} again or fix it there") from e


def estimate_params(
    *,
    vocab_size: int,
    hidden_size: int,
    layers: int,
    attention_heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate_size: int,
    tied_embeddings: bool,
    num_experts: int | None = None,
) -> int:
    """Parameters of a decoder-only transformer, from its shape:

    - embeddings: ``vocab_size * hidden_size``, twice when the output head is not tied to the input embedding;
    - attention, per layer: ``hidden_size * head_dim * (attention_heads + 2 * kv_heads)`` (q, k, v projections)
      ``+ attention_heads * head_dim * hidden_size`` (output projection);
    - MLP, per layer: ``3 * hidden_size * intermediate_size`` (gated: gate, up and down projections); for a mixture
      of experts that times ``num_experts`` (config ``num_local_experts``), plus the router ``hidden_size * experts``;
    - norms: ``2 * hidden_size`` per layer and one final norm.

    Biases and vision towers are left out: a fraction of a percent for text models (Qwen2's q/k/v biases), about
    0.4B for multimodal Gemma 3. It matches the catalogue's published counts of text models within 2%.
    """
    embeddings = vocab_size * hidden_size * (1 if tied_embeddings else 2)
    attention = hidden_size * head_dim * (attention_heads + 2 * kv_heads) + attention_heads * head_dim * hidden_size
    experts = num_experts or 1
    mlp = 3 * hidden_size * intermediate_size * experts + (hidden_size * experts if num_experts else 0)
    return embeddings + layers * (attention + mlp + 2 * hidden_size) + hidden_size


def _safetensors_params(files: list[Path]) -> int:
    """Exact parameter count from safetensors headers (8-byte little-endian length, then a JSON tensor table)."""
    total = 0
    for path in files:
        try:
            with path.open("rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                if size > 100 * 1024 * 1024:
                    raise ValueError("header length is implausible")
                header = json.loads(f.read(size))
            total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
        except (OSError, struct.error, ValueError, TypeError, KeyError, AttributeError) as e:
            raise ModelConfigError(
                str(path), "", f"not a readable safetensors file ({e})", hint="download the weights again"
            ) from e
    return total


@dataclass(frozen=True)
class _Config:
    """One config.json, read through its text_config when it has one; errors name the file and the key."""

    where: str
    raw: dict[str, Any]
    text: dict[str, Any]
    prefix: str  # "text_config." or ""

    @classmethod
    def read(cls, config_file: Path) -> _Config:
        where = str(config_file)
        raw = _read_json(config_file, "config.json")
        if not isinstance(raw, dict):
            raise ModelConfigError(where, "", "the top level must be a JSON object", hint="download config.json again")
        prefix, text = "", raw
        if isinstance(raw.get("text_config"), dict):
            prefix, text = "text_config.", raw["text_config"]
        defaults = _TEXT_DEFAULTS.get(str(text.get("model_type")), {})
        text = {**defaults, **{k: v for k, v in text.items() if v is not None or k not in defaults}}
        return cls(where, raw, text, prefix)

    def error(self, key: str, problem: str) -> ModelConfigError:
        where = self.prefix or "the top level of "
        fix = f'add "{key}" to {where}config.json (copy it from the model\'s Hugging Face page)'
        return ModelConfigError(self.where, self.prefix + key, problem, hint=fix)

    def need(self, key: str) -> int:
        value = self.text.get(key)
        if value is None:
            raise self.error(key, "missing")
        if not _is_pos_int(value):
            raise self.error(key, f"must be a positive integer (got {value!r})")
        return int(value)

    def optional(self, key: str) -> int | None:
        return self.need(key) if self.text.get(key) is not None else None

    def architecture(self) -> str:
        archs = self.raw.get("architectures")
        if isinstance(archs, list) and archs and isinstance(archs[0], str):
            return archs[0]
        if isinstance(self.raw.get("model_type"), str):
            return str(self.raw["model_type"])
        raise self.error("architectures", "missing")

    def sliding_window(self, max_context: int) -> tuple[int | None, int | None]:
        """(window, pattern): None when no layer is windowed (switched off, or a window as long as the context)."""
        window, pattern = self.optional("sliding_window"), self.optional("sliding_window_pattern")
        layer_types = self.text.get("layer_types")
        if isinstance(layer_types, list):
            n_full = layer_types.count("full_attention")
            if "sliding_attention" not in layer_types:
                window = None
            elif pattern is None and n_full:
                pattern = len(layer_types) // n_full
        if self.text.get("use_sliding_window") is False or (window is not None and window >= max_context):
            return None, None
        return window, pattern if window is not None else None


def _count_params(cfg: _Config, directory: Path, shape: dict[str, Any]) -> tuple[int, str]:
    """(parameters, how they were found): index total_size, else safetensors headers, else the shape's estimate."""
    dtype = str(cfg.raw.get("torch_dtype") or cfg.raw.get("dtype") or cfg.text.get("torch_dtype") or "bfloat16")
    width = DTYPE_BYTES.get(dtype, 2)
    index_file = directory / "model.safetensors.index.json"
    shards = sorted(directory.glob("*.safetensors"))
    quantized = "quantization_config" in cfg.raw or "quantization_config" in cfg.text
    if index_file.is_file() and not quantized:
        index = _read_json(index_file, "model.safetensors.index.json")
        metadata = index.get("metadata") if isinstance(index, dict) else None
        total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
        if not isinstance(total_size, int) or isinstance(total_size, bool) or total_size <= 0:
            raise ModelConfigError(
                str(index_file), "metadata.total_size", "missing or not a positive integer", hint="download it again"
            )
        return total_size // width, f"{index_file.name} metadata.total_size / {width} bytes ({dtype})"
    if shards and not quantized:
        return _safetensors_params(shards), f"tensor shapes in {len(shards)} safetensors file(s)"
    estimate = estimate_params(
        vocab_size=cfg.need("vocab_size"), intermediate_size=cfg.need("intermediate_size"), **shape
    )
    return estimate, "estimated from the architecture (embeddings + attention + MLP per layer)"


def model_from_config_json(path: Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face ``config.json`` (``path``: the file or the model directory holding it).

    Multimodal configs are read through their ``text_config``. ``params_b`` comes, in order of preference, from
    ``model.safetensors.index.json`` (``metadata.total_size`` / bytes of the config's dtype), from the headers of
    the ``*.safetensors`` files next to it (exact tensor sizes), or from :func:`estimate_params` (the shape).
    Quantized checkpoints skip the byte-based counts, whose bytes per parameter are unknown. Errors name the file
    and the key.
    """
    path = Path(path).expanduser()
    config_file = path / "config.json" if path.is_dir() else path
    cfg = _Config.read(config_file)
    architecture = cfg.architecture()
    layers, hidden, heads = cfg.need("num_hidden_layers"), cfg.need("hidden_size"), cfg.need("num_attention_heads")
    kv_heads = cfg.optional("num_key_value_heads") or heads
    head_dim = cfg.optional("head_dim") or hidden // heads
    max_context = cfg.need("max_position_embeddings")
    tied = cfg.text.get("tie_word_embeddings", cfg.raw.get("tie_word_embeddings", True)) is not False
    experts = cfg.optional("num_local_experts") or cfg.optional("num_experts")
    window, pattern = cfg.sliding_window(max_context)
    shape = {
        "hidden_size": hidden,
        "layers": layers,
        "attention_heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "tied_embeddings": tied,
        "num_experts": experts,
    }
    params, how = _count_params(cfg, config_file.parent, shape)
    qc = cfg.raw.get("quantization_config") or cfg.text.get("quantization_config")
    return ModelSpec(
        name=str(config_file.parent) if config_file.name == "config.json" else cfg.where,
        params_b=params / 1e9,
        architecture=architecture,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_context=max_context,
        hf_token_required=False,  # the files are already here
        sliding_window=window,
        tied_embeddings=tied,
        source=f"config.json:{cfg.where}",
        sliding_window_pattern=pattern,
        intermediate_size=cfg.optional("intermediate_size"),
        vocab_size=cfg.optional("vocab_size"),
        num_experts=experts,
        provenance=f"params: {how}",
        quantization=json.dumps(qc, sort_keys=True) if isinstance(qc, dict) else "",
    )


# --- flavors ----------------------------------------------------------------------------------------------------


def _check_complete(where: str, name: Any, fields: Mapping[str, Any], base: FlavorSpec | None) -> None:
    """A flavor of its own (no catalogue flavor of its name to override) names at least its vCPUs and RAM."""
    if base is None and not ("vcpus" in fields and ("ram_mib" in fields or "ram_gb" in fields)):
        raise ConfigError(
            where,
            f"flavors.{name}",
            "a flavor needs at least vcpus and ram_mib (or ram_gb)",
            hint="e.g. {vcpus: 16, ram_gb: 64}",
        )


def check_config_flavor(where: str, name: Any, fields: Any) -> None:
    """Everything :func:`flavors` checks of one config entry ``flavors.<name>`` (``zenops config check`` and every
    command that reads flavors run this): its fields (zenops.config.FLAVOR_SCHEMA), then that a flavor of its own is
    complete enough to plan with. ConfigError naming ``where`` (the file) and the key."""
    check_flavor(where, name, dict(fields) if isinstance(fields, Mapping) else fields)
    _check_complete(where, name, fields, _catalogue_flavors().get(str(name)))


def _flavor(name: str, fields: Mapping[str, Any], base: FlavorSpec | None, source: str, where: str) -> FlavorSpec:
    _check_complete(where, name, fields, base)
    values = dict(fields)
    if "ram_gb" in values:
        values["ram_mib"] = round(values.pop("ram_gb") * 1024)
    if "cpu_flags" in values:
        values["cpu_flags"] = tuple(values["cpu_flags"])
    if values.get("price_per_hour") is not None:
        values["price_per_hour"] = float(values["price_per_hour"])
    start = base or FlavorSpec(name, 0, 0, 0, 0, "unknown", "unknown", ())
    note = f"{base.provenance} (overridden by {source})" if base else ""
    return dataclasses.replace(start, name=name, source=source, provenance=note, **values)


@functools.cache
def _catalogue_flavors() -> dict[str, FlavorSpec]:
    where, entries = load_resource("flavors.yaml", "flavors")
    result = {}
    for name, entry in entries.items():
        fields = dict(entry) if isinstance(entry, dict) else entry
        note = fields.pop("source", "") if isinstance(fields, dict) else ""
        check_flavor(where, name, fields)
        spec = _flavor(str(name), fields, None, "catalogue", where)
        result[str(name)] = dataclasses.replace(spec, provenance=str(note))
    return result


def flavors(
    config_flavors: Mapping[str, Mapping[str, Any]] | None = None, source: str = "config"
) -> dict[str, FlavorSpec]:
    """Catalogue flavors plus ``config_flavors`` (Config.flavors). A config flavor with a catalogue flavor's name
    overrides that flavor field by field (e.g. only your price); its ``source`` becomes ``source`` ("config" or
    "config:<file>"). ``source`` also names the file in errors."""
    result = dict(_catalogue_flavors())
    label = source if source == "config" or source.startswith("config:") else f"config:{source}"
    where = label.removeprefix("config:") if label != "config" else "config"
    for name, fields in (config_flavors or {}).items():
        check_config_flavor(where, name, fields)
        result[name] = _flavor(name, fields, result.get(name), label, where)
    return result


def get_flavor(
    name: str, config_flavors: Mapping[str, Mapping[str, Any]] | None = None, source: str = "config"
) -> FlavorSpec:
    """A flavor by exact or case-insensitive name; UsageError with close matches and the fix otherwise."""
    known = flavors(config_flavors, source)
    if name in known:
        return known[name]
    for key, spec in known.items():
        if key.lower() == name.lower():
            return spec
    raise UsageError(f"unknown flavor '{name}'", hint=_suggest(_close(name, known), _FLAVOR_FIX, known))


def flavors_that_fit(
    required_ram_gib: float,
    config_flavors: Mapping[str, Mapping[str, Any]] | None = None,
    need_avx512: bool = False,
    source: str = "config",
) -> list[FlavorSpec]:
    """Flavors with at least ``required_ram_gib`` of RAM (and AVX-512 if asked), cheapest first, unpriced last."""
    fitting = [
        f
        for f in flavors(config_flavors, source).values()
        if f.ram_gib >= required_ram_gib and (not need_avx512 or "avx512f" in f.cpu_flags)
    ]
    return sorted(fitting, key=lambda f: (f.price_per_hour is None, f.price_per_hour or 0.0, f.ram_mib, f.name))
