"""The `vllm serve` arguments an operator may add (--engine-arg): never one that sets what zenops sets itself (a
model option, the plan's flags), read as vLLM's parser reads it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zenops.errors import UsageError
from zenops.planner import ENGINE_FLAGS

# `vllm serve` flags zenops sets itself, and the zenops option that sets each; the plan's (planner.ENGINE_FLAGS) too
OWN_ENGINE_FLAGS = {
    "--model": "--model",
    "--served-model-name": "--served-model-name",
    "--host": "the plan (the bind address)",
    "--port": "the plan (one port per instance)",
    "--api-key": "--api-key-file (the key stays out of argv)",
    "--shutdown-timeout": "--shutdown-timeout",
    "--max-model-len": "--max-model-len",
    "--max-num-seqs": "--max-num-seqs",
    "--tensor-parallel-size": "--instances / the plan's layout",
    "-tp": "--instances / the plan's layout",
}
_PLANNED = "the plan (see `zenops plan`)"


def engine_arg_conflict(arg: str, planned: Iterable[str] = ()) -> tuple[str, str] | None:
    """The flag zenops sets that the `vllm serve` argument ``arg`` would set again, read as vLLM's parser reads it,
    and the zenops way to set it instead; None when it sets nothing zenops sets. vLLM reads ``_`` as ``-`` in a
    flag (``--api_key``), the value after ``=`` (``--max_num_seqs=99``), and argparse takes any prefix of a flag
    for the flag (``--api-k``; an ambiguous one vLLM refuses, so zenops may too). ``planned``: more flags to refuse
    (a plan's args)."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None  # a value, or the end of the options
    flags = {**{f: _PLANNED for f in (*ENGINE_FLAGS, *planned) if f.startswith("-")}, **OWN_ENGINE_FLAGS}
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        hits = [f for f in flags if f.startswith("--") and f.startswith(name)]
    else:  # -tp, -tp=2, and an abbreviation -t: argparse matches single-dash flags among themselves
        hits = [f for f in flags if not f.startswith("--") and (f.startswith(name) or name.startswith(f))]
    flag = name if name in hits else min(hits, default=None)
    return (flag, flags[flag]) if flag else None


def engine_arg_refusal(arg: str, planned: Iterable[str] = ()) -> tuple[str, str] | None:
    """Why ``arg`` may not be an engine argument, and the fix (None: it may): see :func:`engine_arg_conflict`. The
    flag is named, never the value: it may be a secret."""
    hit = engine_arg_conflict(arg, planned)
    if hit is None:
        return None
    flag, how = hit
    given = arg.split("=", 1)[0]
    read = f" (vLLM reads {given} as {flag})" if given != flag else ""
    return f"{given}: zenops sets {flag} itself{read}", f"use {how}" if how.startswith("--") else f"it comes from {how}"


def check_engine_args(engine_args: Sequence[str], plans: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Refuse --engine-arg values that set what zenops sets (a second --max-num-seqs would silently win over the
    plan's, and the KV cache sized for the first; --api_key would put the key on argv): name the zenops option to
    use instead. Needs no plan (every flag a plan may set is refused), so it runs before anything is provisioned;
    ``plans``: their args are refused too."""
    planned = {a for p in (plans or {}).values() for inst in p.get("instances") or [] for a in inst.get("args") or []}
    for arg in engine_args:
        refused = engine_arg_refusal(arg, planned)
        if refused is not None:
            raise UsageError(f"--engine-arg {refused[0]}", hint=refused[1])
