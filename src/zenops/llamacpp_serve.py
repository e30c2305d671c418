"""Serving a campaign's llama.cpp cell: llama.cpp's server in place of zenops's vLLM servers on the same hosts, one
engine at a time, as a peer measurement (zenops does not switch engines by itself: only a campaign variant with the
``llamacpp`` key gets here).

The steps are `up`'s (zenops.serve.serve_inventory) with the llama.cpp role in place of the vLLM one: the hosts'
own up and facts, zenops's plan for each host (the same planner options), then playbooks/llamacpp.yml with one
llama-server per plan instance (zenops.llamacpp_deploy). The deployment's vLLM servers are stopped first; the serving
record then says what serves (its request's ``llamacpp`` is the GGUF format), so `zenops bench` drives these servers
with the same `vllm bench serve` client (zenops.bench.run) and reads them against the plan's ceiling at the GGUF's
bits per weight (zenops.llamacpp_deploy.gguf_plan).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops import llamacpp, llamacpp_deploy, serve
from zenops.context import RunContext
from zenops.deployment.identity import inventory_label
from zenops.deployment.record import ServingRecord
from zenops.deployment.store import Store
from zenops.errors import UsageError, ZenopsError
from zenops.hosts import down_inventory, up_inventory
from zenops.request_options import LLAMACPP_KEY as KEY  # the GGUF format llama.cpp serves; unset: vLLM serves
from zenops.runner import RunResult, RunSpec

PLAYBOOK = "llamacpp"


def gguf_of(request: Mapping[str, Any]) -> str | None:
    """The GGUF format a request (a campaign cell's, or a serving record's) has llama.cpp serve; None: vLLM."""
    value = request.get(KEY)
    return llamacpp.gguf_format(str(value)).name if value else None


def serve_llamacpp(ctx: RunContext, inventory: Path, request: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Serve ``request`` (ServeRequest fields and ``llamacpp``: the GGUF format) with llama.cpp on the hosts of
    ``inventory``: the deployment's vLLM servers stopped (their images, the model and the API key stay), zenops's
    plan made for each host as `up` makes it, then one llama-server per plan instance with ``concurrency`` seats, its
    health gate, and the serving record. Returns host -> the servers' endpoints. Raises UsageError for a model that
    is not a local Hugging Face directory of unquantized weights (llama.cpp converts from those); when the playbook
    fails, the llama.cpp servers it started are removed before the error goes on."""
    fmt = gguf_of(request)
    if fmt is None:
        raise UsageError("no GGUF format to serve with llama.cpp", hint=f"set the variant's {KEY}: bf16, q8_0, q4_k_m")
    config = ctx.config
    req = serve.request_from_dict(request)
    engine, model, model_dir = serve.check_request(req, ctx.warn)
    if model_dir is None:
        raise UsageError(
            f"llama.cpp converts the model from its Hugging Face files: {req.model} is not a local directory",
            hint="download the model and name its directory in the campaign's models",
        )
    if model.quantization:
        raise UsageError(
            f"{model_dir} holds quantized weights: llama.cpp converts from unquantized (bf16) weights",
            hint="use the unquantized model for the llama.cpp variants",
        )
    topologies = serve.topologies_of(config, up_inventory(ctx, inventory).run)  # the hosts' up first: Docker there
    plans = serve.make_plans(topologies, model, serve.plan_options(req, engine.combo.vllm), config)  # refusals here
    api_key = serve.ensure_api_key(config, inventory, req.api_key_file)
    served = req.served_model_name or model_dir.name
    extravars = llamacpp_deploy.serve_extravars(
        {h: p.to_dict() for h, p in plans.items()}, model_dir=str(model_dir), served_name=served, fmt=fmt,
        concurrency=req.concurrency, api_key_file=str(api_key), deployment=inventory_label(inventory),
        kv_bytes_per_token=model.kv_bytes_per_token(llamacpp.KV_CACHE_DTYPE),  # one rank: the peer runs no TP
        pip=serve.pip_settings(), base_image=req.base_image,
        base_image_archive=str(req.base_image_archive.resolve()) if req.base_image_archive is not None else None,
    )  # fmt: skip
    # one engine at a time: the deployment's vLLM servers go (images, models, the API key stay)
    down_inventory(ctx.quiet(), inventory, keep_secrets=True)
    try:
        run = ctx.run(RunSpec(playbook=PLAYBOOK, inventory=inventory, extravars=extravars, verbosity=ctx.verbosity))
    except ZenopsError:  # no half-started peer: the servers that did start would hold the next cell's ports
        with contextlib.suppress(ZenopsError):
            stop_llamacpp(ctx.quiet(cancel=threading.Event()), inventory)
        raise
    endpoints = endpoints_of(run, plans)
    record = serve.request_to_dict(req, hf_token_given=req.hf_token_file is not None, model_dir=model_dir)
    Store(config, inventory).save_record(
        ServingRecord(
            inventory=str(inventory.resolve()),
            request={**record, KEY: fmt},
            compat=engine.combo.to_dict(),  # the pair whose engine image runs the bench client
            model=served,
            model_spec=model.name,
            plans={h: llamacpp_deploy.gguf_plan(p.to_dict(), fmt) for h, p in plans.items()},
            endpoints=endpoints,
            images={h: _image(eps) for h, eps in endpoints.items()},
            api_key_file=str(api_key),
            deployment=inventory_label(inventory),
            updated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
    )
    return endpoints


def _image(endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    """The serving record's image of a host: the llama.cpp image its servers run."""
    return {"ref": next((e.get("image") for e in endpoints), None), "engine": llamacpp.LLAMA_CPP}


def endpoints_of(run: RunResult, plans: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Host -> the llama.cpp servers playbooks/llamacpp.yml reported (zenops_llamacpp_endpoints)."""
    return {h: list(run.host_facts.get(h, {}).get("zenops_llamacpp_endpoints") or []) for h in plans}


def serving(ctx: RunContext, inventory: Path) -> bool:
    """The deployment's serving record says llama.cpp serves (a campaign's llama.cpp cell was the last served)."""
    record = Store(ctx.config, inventory).record()
    return record is not None and gguf_of(record.request) is not None


def stop_llamacpp(ctx: RunContext, inventory: Path) -> None:
    """The deployment's llama.cpp servers stopped and removed, before vLLM serves on the same hosts; the GGUF files
    and the images stay for the next llama.cpp cell (llamacpp_server_absent_gguf false)."""
    extravars = {
        "llamacpp_state": "absent",
        "llamacpp_server_deployment": inventory_label(inventory),
        "llamacpp_server_absent_gguf": False,
    }
    ctx.run(RunSpec(playbook=PLAYBOOK, inventory=inventory, extravars=extravars, verbosity=ctx.verbosity))
