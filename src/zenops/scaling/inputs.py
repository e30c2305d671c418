"""What a new replica's serve needs on the scaling loop's host that the host lacks (the cold scale-out).

The loop (zenops.scaling.loop) runs zenops on the deployment's gateway host; its scale-out serves the serving
record's request on a new server from there (zenops.serve.serve_inventory), so the host needs what the controller
had for that serve:

* the engine image: the controller's image cache entry of the recorded image (a `docker save` tarball named by its
  tag and inputs digest, ~3 GB for the real engine; the serve playbook reports it, ``images[host].archive``), copied
  into the loop's image cache (its ``ZENOPS_IMAGE_CACHE``), where roles/vllm_image loads it instead of building;
* the model, when it is a local directory (`zenops tiny-model`): a Hugging Face name is downloaded on the new server;
* the pip route's base image archive, when one was given;
* the Hugging Face token's file, given or made from $HF_TOKEN (a secret: 0600, copied with no_log, never in argv);
* the configuration (:func:`host_config`: the cloud profiles and the flavors).

The serving record the host gets points at the host's copies (:func:`rewrite`), and a
record pulled back has this machine's again (:func:`restored`). roles/scaler copies them (``scaler_inputs``): a file
again only when it is missing or of another size, so a re-run of `up` does not send 3 GB again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zenops.deployment.services.scaler import HOME, HOST_STATE

HOST_IMAGES = f"{HOME}/.cache/zenops/images"  # its ZENOPS_IMAGE_CACHE: the engine images a new replica loads
HOST_INPUTS = f"{HOME}/inputs"  # what else a new replica's serve reads on the host: the model, the base archive
HOST_SECRETS = f"{HOST_INPUTS}/secrets"  # ... and the Hugging Face token (0700 directory, 0600 file)
INPUT_FIELDS = ("model", "hf_token_file", "base_image_archive")  # the request's paths the host has its own of


@dataclass(frozen=True)
class Inputs:
    """What the loop's serve of a new replica reads on its host, shipped by the role (``scaler_inputs``): each
    ``src`` (controller), ``dest`` (host, absolute), ``mode``, ``kind`` (file, dir), ``size`` (a file's: the role
    copies a file again only when it is missing or its size differs; an image tarball's name carries its inputs
    digest), ``secret`` (copied with no_log, compared by checksum); ``request``: the serving record's request fields
    as the host has them (:func:`rewrite`); ``missing``: what the host will lack, said to the operator."""

    files: list[dict[str, Any]] = field(default_factory=list)
    request: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


def host_inputs(record: Any, hf_token: Path | None = None) -> Inputs:
    """What a new replica's serve needs that the host lacks, from the serving ``record``: the engine image's tarball
    of each recorded image (the controller's image cache entry of that pair and CPU kind, ``images[host].archive``:
    the host's serve loads it instead of building), the model directory when it is a local one (`zenops tiny-model`;
    a Hugging Face name is downloaded on the new server), the pip route's base image archive, and ``hf_token`` (the
    Hugging Face token's file, given or made from $HF_TOKEN: zenops.serve.hf_token_file)."""
    req = dict(record.request or {})
    out = Inputs()
    seen: set[str] = set()
    for host, image in sorted((record.images or {}).items()):
        archive = str((image or {}).get("archive") or "")
        if archive in seen:
            continue
        seen.add(archive)
        src = Path(archive)
        if not archive:
            out.missing.append(f"the engine image of {host} ({(image or {}).get('ref') or '?'}): no image cache "
                               "entry recorded (served by an older zenops: `zenops up` again records it)")  # fmt: skip
        elif not src.is_file():
            out.missing.append(f"the engine image {src.name}: not in this machine's image cache any more")
        else:
            out.files.append(_file(src, f"{HOST_IMAGES}/{src.name}", "0644"))
    model = Path(str(req.get("model") or ""))
    if model.is_absolute() and model.is_dir():
        dest = f"{HOST_INPUTS}/models/{model.name}"  # its name is the served name and the mount's
        out.files.append({"src": str(model), "dest": dest, "mode": "0644", "kind": "dir", "secret": False})
        out.request["model"] = dest
    base = Path(str(req.get("base_image_archive") or ""))
    if req.get("base_image_archive") and base.is_file():
        dest = f"{HOST_INPUTS}/{base.name}"  # its name and size are the image's build inputs: kept
        out.files.append(_file(base, dest, "0644"))
        out.request["base_image_archive"] = dest
    elif req.get("base_image_archive"):
        out.missing.append(f"the base image archive {base}: not on this machine")
    if hf_token is not None:
        dest = f"{HOST_SECRETS}/hf-token"
        out.files.append({**_file(hf_token, dest, "0600"), "secret": True})
        out.request["hf_token_file"] = dest
    return out


def _file(src: Path, dest: str, mode: str) -> dict[str, Any]:
    return {"src": str(src), "dest": dest, "mode": mode, "kind": "file", "size": src.stat().st_size, "secret": False}


def host_config(config: Any, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The loop's zenops.yaml: this machine's configuration as the host reads it (the cloud profiles, the flavors,
    Docker's and SSH's settings); no state_dir (the host's is its XDG_STATE_HOME), no SSH key of this machine (the
    fleet's comes with the ledger entry). ``overrides``: per cloud, the profile fields the host has its own of
    (zenops.deployment.services.scaler.profile_overrides: the recorded operator range, the host's copy of an operator
    keypair's private key)."""
    import yaml  # noqa: PLC0415

    d, ssh = config.docker, config.ssh
    docker = {"source": d.source, "users": list(d.users), "log_max_size": d.log_max_size,
              "log_max_file": d.log_max_file, "daemon_options": dict(d.daemon_options)}  # fmt: skip
    more = overrides or {}
    clouds = {c: {**dict(config.clouds.get(c) or {}), **dict(more.get(c) or {})} for c in {*config.clouds, *more}}
    data = {
        "keep_runs": config.keep_runs,
        "clouds": clouds,
        "flavors": dict(config.flavors),
        "docker": docker,
        "ssh": {"host_key_checking": ssh.host_key_checking, **({"user": ssh.user} if ssh.user else {})},
    }
    return "# written by zenops for the scaling loop (zenops.deployment.services.scaler.host_config)\n" + str(
        yaml.safe_dump(data, sort_keys=True)
    )


def restored(text: str, mine: Path) -> str:
    """A serving record pulled from the host with this machine's inputs again (the request fields :func:`host_inputs`
    pointed at the host's copies, as the record ``mine`` here has them)."""
    data = json.loads(text)
    here = json.loads(mine.read_text()).get("request") or {} if mine.is_file() else {}
    req = dict(data.get("request") or {})
    for k in INPUT_FIELDS:
        if str(req.get(k) or "").startswith(f"{HOME}/"):
            req[k] = here.get(k)
    return json.dumps({**data, "request": req}, indent=2, sort_keys=True)


def rewrite(
    text: str,
    state_dir: Path,
    *,
    inventory: bool = False,
    request: Mapping[str, Any] | None = None,
    paths: Mapping[str, str] | None = None,
    services: Mapping[str, Any] | None = None,
) -> str:
    """A state file as the host reads it: every controller state path is the host's (and each of ``paths``, the
    controller's files outside the state dir the host has a copy of: :func:`host_key`); an ``inventory``'s hosts are
    reached by their fixed address (``zenops_private_address``, which `up --cloud` writes): the loop is inside the
    deployment's network. ``request``: a serving record's request fields the host has its own of (its copies of the
    model, the Hugging Face token, the base image archive: zenops.scaling.inputs), set in its ``request``.
    ``services``: a serving record's services states as they will be once `up` is done (the record on the
    controller is written again after its services follow: the gateway's state, the loop's own)."""
    if request or services is not None:
        data = json.loads(text)
        if request:
            data["request"] = {**(data.get("request") or {}), **request}
        if services is not None:
            data["services"] = {k: dict(v) for k, v in services.items()}
        text = json.dumps(data, indent=2, sort_keys=True)
    for here, there in (paths or {}).items():
        text = text.replace(here, there)
    out = text.replace(str(state_dir), HOST_STATE)
    if not inventory:
        return out
    import yaml  # noqa: PLC0415

    data = yaml.safe_load(out) or {}
    for hv in ((data.get("all") or {}).get("hosts") or {}).values():
        if isinstance(hv, dict) and hv.get("zenops_private_address"):
            hv["ansible_host"] = hv["zenops_private_address"]
    return str(yaml.safe_dump(data, sort_keys=True))
