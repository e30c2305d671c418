"""A campaign's engines: zenops's plan in vLLM, or llama.cpp's server as a peer on the same host (the variant key
``llamacpp``, `variants: engines`), one engine at a time.

* :func:`leave_out`: llama.cpp converts a model from its unquantized Hugging Face weights, so a llama.cpp cell of an
  already-quantized model (its config.json's quantization_config, zenops.quant) or of a catalogue id (no local
  directory) is no measurement: the campaign's plan leaves it out and says why, one line per cell.
Serving a cell with the engine its variant names, the other engine's servers stopped first, is a step of the
deployment's lifecycle (zenops.deployment.lifecycle.Deployment.serve_engine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from zenops.request_options import LLAMACPP_KEY as KEY

if TYPE_CHECKING:
    from zenops.campaign.plan import Cell


def llamacpp_refusal(model: str) -> str | None:
    """Why llama.cpp cannot serve ``model`` (a catalogue id or a local directory, as `up` resolves it), None when it
    can: llama.cpp converts from a local Hugging Face directory of unquantized weights."""
    from zenops import serve  # noqa: PLC0415
    from zenops.quant import QuantError  # noqa: PLC0415

    spec, local = serve.resolve_model(model)
    if spec.quantization:
        try:
            fmt = spec.quant_format
        except QuantError:
            fmt = None
        name = str(fmt.name) if fmt is not None else "a quantized format"
        return f"its weights are already quantized ({name}); llama.cpp converts from unquantized weights"
    if local is None:
        return "it is a catalogue id; llama.cpp converts from a local Hugging Face directory (download it, name that)"
    return None


def leave_out(
    cells: Iterable[Cell], refusal: Callable[[str], str | None] = llamacpp_refusal
) -> tuple[list[Cell], list[str]]:
    """(the cells to run, one line per cell left out with the reason): a llama.cpp cell of a model llama.cpp cannot
    serve (:func:`llamacpp_refusal`: already-quantized weights, or no local directory) is no measurement, not a
    failure; its bf16 twin's llama.cpp cells measure llama.cpp's own formats (q8_0, q4_k_m)."""
    kept: list[Cell] = []
    notes: list[str] = []
    seen: dict[str, str | None] = {}
    for c in cells:
        fmt = c.request.get(KEY)
        if fmt:
            if c.model not in seen:
                seen[c.model] = refusal(c.model)
            if seen[c.model] is not None:
                notes.append(f"{c.label()}: left out (llama.cpp {fmt}): {seen[c.model]}")
                continue
        kept.append(c)
    return kept, notes
