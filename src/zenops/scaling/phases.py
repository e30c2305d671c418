"""How long a scale-out took, phase by phase: the figures behind "decision to first request served".

A scale-out (zenops.deployment.lifecycle.Deployment.scale_out) goes through, in order:

* ``provision``: the servers created and reachable over SSH (wall time around ``add_servers``);
* ``docker``: the hosts' own up (ready, Docker, facts: playbooks/up.yml's run);
* ``image``: the engine image on them (loaded from the image cache, or built) — from playbooks/serve.yml's marks;
* ``model``: the model in place (a local model copied; a Hugging Face name is downloaded by vLLM as it starts, so
  its download counts in ``vllm``);
* ``vllm``: vLLM started and through its health gate;
* ``rotation``: the record and the services following, the gateway's health checks passing (in rotation);

and ``total``, the wall time of the whole step. When the serve run reported no marks (an older collection, a check
run), its time is one phase, ``serve``. Each host of the serve reports its marks (``zenops_serve_marks``, epoch s on
the controller: began, image, model, healthy); with several new servers, a phase ends when its last host is done.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ORDER = ("provision", "docker", "image", "model", "vllm", "serve", "rotation", "total")
MARKS = ("began", "image", "model", "healthy")


@dataclass(frozen=True)
class ScaledOut:
    """The servers a scale-out added, and its phases (seconds, in :data:`ORDER`)."""

    names: list[str]
    phases: dict[str, float] = field(default_factory=dict)


def _mark(value: Any) -> float | None:
    try:
        t = float(value)
    except (TypeError, ValueError):
        return None
    return t if math.isfinite(t) and t > 0 else None


def serve_phases(marks: Mapping[str, Mapping[str, Any]]) -> dict[str, float] | None:
    """``image``, ``model`` and ``vllm`` from each host's serve marks (host -> {began, image, model, healthy}); None
    when a host lacks one of them (the caller counts the serve run as one phase)."""
    if not marks:
        return None
    read: dict[str, list[float]] = {m: [] for m in MARKS}
    for got in marks.values():
        for m in MARKS:
            t = _mark(got.get(m))
            if t is None:
                return None
            read[m].append(t)
    began, image, model, healthy = min(read["began"]), max(read["image"]), max(read["model"]), max(read["healthy"])
    return {
        "image": round(max(image - began, 0.0), 1),
        "model": round(max(model - image, 0.0), 1),
        "vllm": round(max(healthy - model, 0.0), 1),
    }


def ordered(phases: Mapping[str, float]) -> dict[str, float]:
    """``phases`` in :data:`ORDER` (unknown names last, as given)."""
    known = {k: float(phases[k]) for k in ORDER if k in phases}
    return known | {k: float(v) for k, v in phases.items() if k not in known}


def line(phases: Mapping[str, Any]) -> str:
    """``provision 61s, docker 38s, image 92s, model 2s, vllm 47s, rotation 6s; total 246s``."""
    parts = [f"{k} {float(v):.0f}s" for k, v in ordered(phases).items() if k != "total"]
    total = f"; total {float(phases['total']):.0f}s" if "total" in phases else ""
    return ", ".join(parts) + total
