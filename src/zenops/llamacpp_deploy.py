"""The llama.cpp peer's role variables (roles/llamacpp_server), computed on the controller from zenops's plan.

The role stays thin: every llama.cpp fact (the converter's and quantizer's command lines, llama-server's flags, the
threads, slots, context and CPU mask) comes from :mod:`zenops.llamacpp`; this module only names the paths inside the
containers and puts the results in the shape the role reads (plain dicts and lists, ``--extra-vars`` JSON):

* ``llamacpp_server_mounts``: where the role mounts the model directory, the GGUF directory and the secrets
  directory inside its containers;
* ``llamacpp_server_conversions``: per GGUF format, the steps of :func:`zenops.llamacpp.conversion` (argv and the
  file each ``creates``, named inside the GGUF directory);
* ``llamacpp_server_instances``: per plan instance, llama-server's argv and container settings
  (:func:`zenops.llamacpp.server`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import PurePosixPath
from typing import Any

from zenops import llamacpp
from zenops.errors import UsageError
from zenops.planner import Instance, Plan

# Inside the containers of the role (the conversion's and the servers'): one source for the argv and the mounts.
MODELS_MOUNT = "/models"  # the Hugging Face model directory, read-only, at /models/<model name>
GGUF_MOUNT = "/gguf"  # the model's GGUF files (written by the conversion, read-only in the servers)
SECRETS_MOUNT = "/run/zenops/secrets"  # the role's secrets directory, read-only
API_KEY_NAME = "api-key"  # the key file in it (one key per line, as llama-server's --api-key-file reads it)
# The image's converter (the llamacpp_image recipe: a venv beside the tools, the script copied from the sdist)
IMAGE_PYTHON = "/opt/llama.cpp/venv/bin/python"
IMAGE_CONVERTER = "/opt/llama.cpp/convert/convert_hf_to_gguf.py"


def _instances_of(plan: Plan | Mapping[str, Any]) -> tuple[int, list[Instance]]:
    """(max_model_len, instances) of a Plan or of its to_dict() form (``zenops plan --json``)."""
    if isinstance(plan, Plan):
        return plan.max_model_len, list(plan.instances)
    names = {f.name for f in fields(Instance)}
    try:
        max_model_len = int(plan["max_model_len"])
        insts = [Instance(**{k: v for k, v in raw.items() if k in names}) for raw in plan["instances"]]
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(
            f"the serving plan is not a zenops plan ({type(e).__name__}: {e})",
            hint="pass the plan as `zenops plan --json` writes it (max_model_len, instances)",
        ) from None
    return max_model_len, insts


def mounts(model_name: str) -> dict[str, str]:
    """The container paths the role mounts its directories at (``model``: the Hugging Face directory)."""
    llamacpp.gguf_name(model_name, "bf16")  # refuses a name that is not a plain file name
    return {
        "model": f"{MODELS_MOUNT}/{model_name}",
        "gguf": GGUF_MOUNT,
        "secrets_dir": SECRETS_MOUNT,  # not "secrets": the runner refuses secret-named extra vars (a path here)
        "api_key_file": f"{SECRETS_MOUNT}/{API_KEY_NAME}",
    }


def conversions(model_name: str, formats: Sequence[str]) -> list[dict[str, Any]]:
    """One entry per format (in the order given, each once): its name, the GGUF file (a path inside the GGUF mount
    and its file name) and the steps, each with ``argv`` and ``creates`` (the file name it makes, in the GGUF
    directory). Raises UsageError for no format, an unknown one or a model name that cannot name a file."""
    if not formats:
        raise UsageError("no GGUF format to convert to", hint=f"give one or more of {', '.join(llamacpp.FORMATS)}")
    m = mounts(model_name)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for fmt in formats:
        c = llamacpp.conversion(m["model"], m["gguf"], fmt, model_name=model_name, python=IMAGE_PYTHON,
                                converter=IMAGE_CONVERTER)  # fmt: skip
        if c.fmt.name in seen:
            continue
        seen.add(c.fmt.name)
        steps = [{"argv": list(s.argv), "creates": PurePosixPath(s.creates).name} for s in c.steps]
        out.append({"format": c.fmt.name, "gguf": c.gguf, "file": PurePosixPath(c.gguf).name, "steps": steps})
    return out


def instances(
    plan: Plan | Mapping[str, Any],
    *,
    model_name: str,
    served_name: str,
    fmt: str,
    concurrency: int,
    host: str = "0.0.0.0",
    kv_bytes_per_token: int | None = None,
) -> list[dict[str, Any]]:
    """The role's instance list: one llama-server per instance of ``plan`` (a Plan or its to_dict()), serving the
    ``fmt`` GGUF of ``model_name`` as ``served_name`` with slots for ``concurrency`` (as many as the plan's KV cache
    holds at ``kv_bytes_per_token``: :func:`zenops.llamacpp.kv_slots`), listening on ``host``. Each: index, port,
    host, argv, container (cpuset_cpus, cpuset_mems, shm_size, ...), threads, cpus, slots, context, reason. Raises
    UsageError / PlanRefusedError as :func:`zenops.llamacpp.server` does."""
    max_model_len, insts = _instances_of(plan)
    if not insts:
        raise UsageError("the serving plan has no instance", hint="plan for a host first (zenops plan)")
    m = mounts(model_name)
    gguf = f"{m['gguf']}/{llamacpp.gguf_name(model_name, fmt)}"
    out: list[dict[str, Any]] = []
    servers = llamacpp.servers(insts, max_model_len, gguf=gguf, served_name=served_name,
                               api_key_file=m["api_key_file"], concurrency=concurrency, host=host,
                               kv_bytes_per_token=kv_bytes_per_token)  # fmt: skip
    for inst, s in zip(insts, servers, strict=True):
        d = asdict(s)
        d["argv"] = list(s.argv)
        d["cpus"] = list(s.cpus)
        out.append({"index": inst.index, "host": host, "format": llamacpp.gguf_format(fmt).name, **d})
    return out


def role_vars(
    plan: Plan | Mapping[str, Any],
    *,
    model_name: str,
    served_name: str,
    fmt: str,
    concurrency: int,
    convert: Sequence[str] = (),
    host: str = "0.0.0.0",
    kv_bytes_per_token: int | None = None,
) -> dict[str, Any]:
    """Everything the role needs for one host: its mounts, the conversions of ``fmt`` and of the other formats in
    ``convert`` (``fmt`` first), and its instances (:func:`instances`)."""
    servers = instances(plan, model_name=model_name, served_name=served_name, fmt=fmt, concurrency=concurrency,
                        host=host, kv_bytes_per_token=kv_bytes_per_token)  # fmt: skip
    return {
        "llamacpp_server_mounts": mounts(model_name),
        "llamacpp_server_conversions": conversions(model_name, [fmt, *convert]),
        "llamacpp_server_instances": servers,
    }


def extravars(
    plans: Mapping[str, Plan | Mapping[str, Any]],
    *,
    model_dir: str,
    served_name: str,
    fmt: str,
    concurrency: int,
    convert: Sequence[str] = (),
    host: str = "0.0.0.0",
    kv_bytes_per_token: int | None = None,
) -> dict[str, Any]:
    """The extra vars of playbooks/llamacpp.yml for the hosts of ``plans`` (host -> plan): ``zenops_llamacpp`` (host
    -> :func:`role_vars`, as serve.py passes ``zenops_plans``) and the model directory on the controller (its last
    component names the model). Raises UsageError before anything is returned for any host's bad input."""
    model_name = PurePosixPath(model_dir.rstrip("/")).name
    per_host: dict[str, dict[str, Any]] = {}
    for h, p in sorted(plans.items()):
        per_host[h] = role_vars(p, model_name=model_name, served_name=served_name, fmt=fmt, concurrency=concurrency,
                                convert=convert, host=host, kv_bytes_per_token=kv_bytes_per_token)  # fmt: skip
    return {
        "zenops_llamacpp": per_host,
        "llamacpp_server_model_dir": model_dir,
        "llamacpp_server_served_model_name": served_name,
    }


# --- a campaign's llama.cpp cell: the playbook's extra vars and the plan its bench is read against -----------------

# the pip settings of the engine image's build (zenops.serve.pip_settings) -> the llama.cpp image's same settings
PIP_SETTINGS = {
    "vllm_image_pip_find_links": "llamacpp_server_image_pip_find_links",
    "vllm_image_pip_extra_index_urls": "llamacpp_server_image_pip_extra_index_urls",
    "vllm_image_pip_ca_bundle": "llamacpp_server_image_pip_ca_bundle",
}
# bits per weight of a plan's unquantized weights (Plan.weights is the dtype for them)
_DTYPE_BITS = {"bfloat16": 16.0, "float16": 16.0, "float32": 32.0}


def serve_extravars(
    plans: Mapping[str, Plan | Mapping[str, Any]],
    *,
    model_dir: str,
    served_name: str,
    fmt: str,
    concurrency: int,
    api_key_file: str,
    deployment: str,
    kv_bytes_per_token: int | None,
    pip: Mapping[str, Any] | None = None,
    base_image: str | None = None,
    base_image_archive: str | None = None,
) -> dict[str, Any]:
    """playbooks/llamacpp.yml's extra vars for serving the ``fmt`` GGUF of ``model_dir`` on the hosts of ``plans``
    (:func:`extravars`; ``kv_bytes_per_token``: the model's KV cache per token at llama.cpp's f16, which caps the
    slots to the plan's KV cache, None: not capped), with the deployment's API key file (a path: the key never
    travels as a value), the deployment's name (the servers' io.zenops.deployment label), ``pip``
    (zenops.serve.pip_settings(): the engine image's find-links, extra indexes and CA bundle, passed on as the
    llama.cpp image's) and the engine's base image and its archive (a request's base_image / base_image_archive: the
    llama.cpp image builds on the same base, loaded from the archive where the host has no registry)."""
    if not api_key_file:
        raise UsageError("the llama.cpp servers need an API key file", hint="serve through zenops (it makes one)")
    out = extravars(plans, model_dir=model_dir, served_name=served_name, fmt=fmt, concurrency=concurrency,
                    kv_bytes_per_token=kv_bytes_per_token)  # fmt: skip
    out["llamacpp_server_api_key_file"] = api_key_file
    out["llamacpp_server_deployment"] = deployment
    for ours, theirs in PIP_SETTINGS.items():
        if pip and pip.get(ours):
            out[theirs] = pip[ours]
    if base_image:
        out["llamacpp_server_image_base_image"] = base_image
    if base_image_archive:
        out["llamacpp_server_image_base_archive"] = base_image_archive
    return out


def gguf_plan(plan: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """zenops's plan (its to_dict()) as the llama.cpp peer served it: the same instances, ``llamacpp`` naming the
    GGUF format, and each instance's decode ceiling read with the GGUF's bits per weight (zenops.llamacpp.FORMATS)
    instead of the plan's dtype (the KV cache stays 16-bit in both). A plan whose weights are not a plain dtype (a
    quantized model, which llama.cpp does not convert from) keeps no ceiling."""
    f = llamacpp.gguf_format(fmt)
    source_bits = _DTYPE_BITS.get(str(plan.get("weights") or "bfloat16"))
    insts = []
    for raw in plan.get("instances") or []:
        inst = dict(raw)
        roof = inst.get("roofline")
        if isinstance(roof, Mapping) and roof.get("weight_bytes"):
            if source_bits is None:
                inst["roofline"] = None
            else:
                weight_bytes = round(int(roof["weight_bytes"]) * f.bits_per_weight / source_bits)
                inst["roofline"] = {**roof, "weight_bytes": weight_bytes, "gguf_bits_per_weight": f.bits_per_weight}
        insts.append(inst)
    return {**plan, "instances": insts, "llamacpp": f.name}
