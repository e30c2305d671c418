"""`zenops up --model`: ready -> docker -> facts (playbooks/up.yml), then plan (here, pure Python), then image ->
server -> health gate (playbooks/serve.yml). Only serving: the hosts' own up and down are zenops.hosts, the serving
record it leaves is zenops.deployment.record.

The plan is made between the two runs, so a refusal (model too big, CPU without AVX2, a broken vLLM/zentorch pair)
stops zenops before an image is built or a container started. Secrets go to Ansible only as paths of 0600 files.
The --engine-arg values a request may carry: zenops.serve.engine_args.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zenops import catalog, compat, request_options, statefile
from zenops.catalog import ModelSpec
from zenops.config import Config
from zenops.context import RunContext
from zenops.deployment import services as services_lib
from zenops.deployment.identity import inventory_label
from zenops.deployment.record import ServingRecord
from zenops.deployment.store import Store
from zenops.errors import UsageError, ZenopsError
from zenops.facts import FACT_NAME, check_topology, save_facts
from zenops.hosts import UpResult, up_inventory
from zenops.option_table import field_default, request_from_rows
from zenops.planner import (
    Plan,
    PlanOptions,
    PlanRefusedError,
    Topology,
    check_quantized_engine,
    plan,
)
from zenops.runner import RunResult, RunSpec
from zenops.serve.engine_args import OWN_ENGINE_FLAGS as OWN_ENGINE_FLAGS
from zenops.serve.engine_args import check_engine_args as check_engine_args
from zenops.serve.engine_args import engine_arg_conflict as engine_arg_conflict
from zenops.serve.engine_args import engine_arg_refusal as engine_arg_refusal

IMAGE_SOURCES = request_options.IMAGE_SOURCES
HF_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


_REQ = "ServeRequest"  # its fields' defaults are its rows' (zenops.option_table.field_default): written once, there


@dataclass(frozen=True)
class ServeRequest:
    model: str
    # None: the pair's own route (zenops.compat.engine_of); a record has it resolved
    image_source: str | None = field_default(_REQ, "image_source")
    vllm: str | None = field_default(_REQ, "vllm")
    zentorch: str | None = field_default(_REQ, "zentorch")
    force_unsupported: bool = field_default(_REQ, "force_unsupported")
    prebuilt_ref: str | None = field_default(_REQ, "prebuilt_ref")
    served_model_name: str | None = field_default(_REQ, "served_model_name")
    api_key_file: Path | None = field_default(_REQ, "api_key_file")
    hf_token_file: Path | None = field_default(_REQ, "hf_token_file")
    platform: str = field_default(_REQ, "platform")
    dtype: str = field_default(_REQ, "dtype")
    # None: only when the model fits no NUMA node (the planner's)
    tensor_parallel: int | None = field_default(_REQ, "tensor_parallel")
    max_model_len: int | None = field_default(_REQ, "max_model_len")
    max_num_seqs: int | None = field_default(_REQ, "max_num_seqs")
    concurrency: int = field_default(_REQ, "concurrency")
    objective: str = field_default(_REQ, "objective")  # auto | latency | throughput (the planner's)
    instances: int | None = field_default(_REQ, "instances")
    # pip route: a `docker save` tarball of the base image (air-gapped)
    base_image_archive: Path | None = field_default(_REQ, "base_image_archive")
    base_image: str | None = field_default(_REQ, "base_image")
    health_timeout: int = field_default(_REQ, "health_timeout")
    # vLLM's --shutdown-timeout: the longest expected request (Docker's stop: +15 s)
    shutdown_timeout: int = field_default(_REQ, "shutdown_timeout")
    # hosts whose facts have no bandwidth measurement are measured once (zenops.bandwidth)
    measure: bool = field_default(_REQ, "measure")
    # auto | on | off: the fleet endpoint (services/gateway.py); on with more than 1 instance
    gateway: str = field_default(_REQ, "gateway")
    gateway_host: str | None = field_default(
        _REQ, "gateway_host"
    )  # the inventory host running it (default: the first host)
    gateway_port: int = field_default(_REQ, "gateway_port")
    gateway_tls_cert_file: Path | None = field_default(_REQ, "gateway_tls_cert_file")
    # cloud mode (zenops.deployment.provision): the gateway's own server's inventory (`up --gateway-flavor`;
    # gateway_host is in it), and the servers' fixed addresses, which the gateway reaches them by
    gateway_inventory: Path | None = None
    gateway_addresses: Mapping[str, str] = field(default_factory=dict)
    # more `vllm serve` arguments, after the planned ones (check_engine_args)
    engine_args: tuple[str, ...] = field_default(_REQ, "engine_args")
    metrics: str = field_default(_REQ, "metrics")  # on | off: Prometheus and node_exporter (services/metrics.py)
    # the scaling loop (services/scaler.py; zenops.scaling.request): a range MIN..MAX installs it; None: none
    replicas: str | None = field_default(_REQ, "replicas")
    max_price_per_hour: float | None = field_default(_REQ, "max_price_per_hour")
    scale_out_waiting: float | None = field_default(_REQ, "scale_out_waiting")
    scale_in_load: float | None = field_default(_REQ, "scale_in_load")
    scale_cooldown: int | None = field_default(_REQ, "scale_cooldown")
    layout: str = field_default(_REQ, "layout")  # zenops, or a peer's settings reproduced for comparison (zenops.peers)


@dataclass
class ServeResult:
    up: UpResult
    serve: RunResult | None
    engine: compat.Engine  # the pair and the image route served (what `plan` shows for the same options)
    plans: dict[str, Plan]
    endpoints: dict[str, list[dict[str, Any]]]
    images: dict[str, dict[str, Any]]
    api_key_file: Path | None
    model: str
    inventory: Path
    warnings: list[str] = field(default_factory=list)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)  # zenops.deployment.services: name -> state
    previews: list[services_lib.Preview] = field(default_factory=list)  # a dry run: what each service would do

    @property
    def combo(self) -> compat.Combo:
        return self.engine.combo

    @property
    def gateway(self) -> dict[str, Any] | None:
        """The gateway's state when the deployment has one (what `up` reports as its endpoint)."""
        return self.services.get("gateway")

    @property
    def changed_total(self) -> int:
        return self.up.run.changed_total + (self.serve.changed_total if self.serve else 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.up.to_dict(),
            "serve_run": self.serve.to_dict() if self.serve else None,
            "changed_total": self.changed_total,
            "compat": self.combo.to_dict(),
            "engine": self.engine.to_dict(),
            "model": self.model,
            "plans": {h: p.to_dict() for h, p in self.plans.items()},
            "endpoints": self.endpoints,
            "images": self.images,
            "api_key_file": str(self.api_key_file) if self.api_key_file else None,
            "inventory": str(self.inventory),
            "warnings": self.warnings,
            "services": self.services,
            "gateway": self.gateway,
            **({"service_plans": {p.name: p.to_dict() for p in self.previews}} if self.previews else {}),
        }


# --- inputs ---------------------------------------------------------------------------------------------------


def resolve_engine(req: ServeRequest, warn: Callable[[str], None]) -> compat.Engine:
    """The engine (vLLM/zentorch pair and image route) ``req`` asks for, by zenops.compat.engine_of, the function
    `plan` resolves with too; refused (exit 11, or 2 for a route that cannot make the pair) before anything runs.
    An engine zenops's tests do not run end to end is warned about (`up`, `rollout` and campaigns)."""
    engine = compat.engine_of(vars(req), warn)
    if not engine.verified and engine.combo.status != "broken":  # a forced pair has been warned about already
        warn(f"engine {engine.combo.id} by --image-source {engine.image_source}: {engine.verification}")
    return engine


def pip_settings(python: str = sys.executable) -> dict[str, Any]:
    """This machine's pip configuration that a pip-route image build needs: index URLs, find-links folders (their
    wheels are copied into the build, e.g. a local torch CPU wheel) and the CA bundle HTTPS needs here."""
    values: dict[str, str] = {}
    proc = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, timeout=60
    )
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.split(".", 1)[-1]] = value.strip().strip("'\"")
    for key in ("index-url", "extra-index-url", "find-links", "cert"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if env:
            values[key] = env
    for key in ("index-url", "extra-index-url"):
        for url in values.get(key, "").split():
            parts = urlsplit(url)
            if parts.username or parts.password:
                raise UsageError(
                    f"pip's {key} carries credentials ({parts.scheme}://***@{parts.hostname}...): the pip route "
                    "writes the index into the engine image's build, so they would stay in the image, on every host "
                    "and in the image cache",
                    hint="use an index that needs no login (a local mirror, or --find-links wheels), or "
                    "--image-source build / prebuilt",
                )
    find_links = [p for p in values.get("find-links", "").split() if Path(p).is_dir()]
    extra = [u for u in values.get("extra-index-url", "").split() if not u.startswith("file:")]
    index = values.get("index-url", "")
    cert = values.get("cert", "")
    out: dict[str, Any] = {"vllm_image_pip_find_links": find_links, "vllm_image_pip_extra_index_urls": extra}
    if index and not index.startswith("file:"):
        out["vllm_image_pip_index_url"] = index
    if cert and Path(cert).is_file():
        out["vllm_image_pip_ca_bundle"] = cert
    return out


def _write_secret(path: Path, value: str) -> None:
    """A secret as a 0600 file in a 0700 directory, written whole or not at all (an empty key file is no key)."""
    statefile.write_text(path, value)


def check_secret_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{what} {path} does not exist", hint="create it with the secret in it and mode 0600")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise UsageError(f"{what} {path} is readable by others (mode {mode:04o})", hint=f"chmod 600 {path}")
    return path.resolve()


def ensure_api_key(config: Config, inventory: Path, given: Path | None) -> Path:
    if given is not None:
        return check_secret_file(given, "--api-key-file")
    path = Store(config, inventory).api_key_path
    if not path.exists():
        _write_secret(path, "zk-" + secrets.token_urlsafe(32))
    return check_secret_file(path, "API key file")


@contextmanager
def hf_token_file(given: Path | None) -> Iterator[Path | None]:
    """The Hugging Face token as a 0600 file: the one given, or one made from $HF_TOKEN for this run only."""
    if given is not None:
        yield check_secret_file(given, "--hf-token-file")
        return
    token = next((os.environ[n] for n in HF_TOKEN_ENV if os.environ.get(n)), None)
    if token is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="zenops-secret-") as tmp:
        path = Path(tmp) / "hf-token"
        _write_secret(path, token)
        yield path


def resolve_model(name: str) -> tuple[ModelSpec, Path | None]:
    """The model's spec, and its directory when it is a local one (copied to the hosts)."""
    spec = catalog.get_model(name)
    local = Path(name).expanduser()
    if local.is_dir():
        return spec, local.resolve()
    return spec, None


def check_request(req: ServeRequest, warn: Callable[[str], None]) -> tuple[compat.Engine, ModelSpec, Path | None]:
    """What can be refused from the request alone, before anything is provisioned (`up --cloud` asks it before it
    creates servers; serving asks it first): the engine (pair and image route), and a quantized model on a pair
    whose kernels zenops did not read. Returns the engine, the model's spec and its local directory (None: not a
    local model)."""
    engine = resolve_engine(req, warn)
    model, model_dir = resolve_model(req.model)
    check_quantized_engine(model, engine.combo.vllm)
    return engine, model, model_dir


def request_to_dict(req: ServeRequest, hf_token_given: bool, model_dir: Path | None = None) -> dict[str, Any]:
    """The request as a record: absolute paths (a later command may run elsewhere), no temporary token file."""
    out = {
        k: (str(v.resolve()) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
        for k, v in asdict(req).items()
    }
    if model_dir is not None:
        out["model"] = str(model_dir)
    if not hf_token_given:
        out["hf_token_file"] = None  # a temporary file made from $HF_TOKEN: gone after the run
    return out


def request_from_dict(data: Mapping[str, Any]) -> ServeRequest:
    """The ServeRequest a serving record holds (paths as Path again); unknown keys are ignored."""
    names = set(ServeRequest.__dataclass_fields__)
    paths = {"api_key_file", "hf_token_file", "base_image_archive", "gateway_tls_cert_file", "gateway_inventory"}
    values: dict[str, Any] = {k: (Path(v) if k in paths and v else v) for k, v in data.items() if k in names}
    values["engine_args"] = tuple(values.get("engine_args") or ())
    return ServeRequest(**values)


def check_image_ref(image_source: str | None, prebuilt_ref: str | None) -> None:
    """--image-ref names the image of --image-source prebuilt; with another source nothing would use it: refused."""
    if prebuilt_ref and image_source != "prebuilt":
        source = image_source or "not given: the pair's own route"
        raise UsageError(
            f"--image-ref {prebuilt_ref} goes with --image-source prebuilt (the image source is {source})",
            hint="add --image-source prebuilt to run that image, or leave out --image-ref",
        )


def plan_options(req: ServeRequest, vllm_version: str, *, tuned: str | None = None) -> PlanOptions:
    """The planner's options of a serve request (what `up` plans with, and what `rollout` plans ahead with);
    ``tuned``: the reason of the tuned file the request's options came from (the plans' first reason)."""
    return request_from_rows(PlanOptions, vars(req), vllm_version=vllm_version, tuned=tuned)


def make_plans(
    topologies: Mapping[str, Mapping[str, Any]], model: ModelSpec, opts: PlanOptions, config: Config
) -> dict[str, Plan]:
    plans = {}
    for host, facts in sorted(topologies.items()):
        try:
            plans[host] = plan(
                Topology.from_facts(facts), model, opts, flavors=list(catalog.flavors(config.flavors).values())
            )
        except PlanRefusedError as e:
            raise PlanRefusedError(e.code, f"{host}: {e.message}", hint=e.hint or "") from e
    return plans


# --- the run --------------------------------------------------------------------------------------------------


def topologies_of(config: Config, up_run: RunResult) -> dict[str, dict[str, Any]]:
    """Host -> its CPU topology, as the hosts' up run (playbooks/up.yml) reported it; each checked and kept with the
    facts. Raises ZenopsError when no host reported one."""
    topologies: dict[str, dict[str, Any]] = {}
    for host in sorted(up_run.stats):
        facts = up_run.host_facts.get(host, {}).get(FACT_NAME)
        if facts is None:
            continue  # not a target (e.g. the controller)
        topologies[host] = check_topology(facts, f"{host} ({up_run.run_dir})")
        save_facts(config, host, topologies[host])
    if not topologies:
        raise ZenopsError(
            "no host reported its CPU topology: nothing to plan for",
            hint=f"check the run log {up_run.run_dir}; in --check mode on a fresh host facts may be missing",
        )
    return topologies


def serve_inventory(
    ctx: RunContext,
    inventory: Path,
    req: ServeRequest,
    *,
    limit: str | None = None,
    check: bool = False,
    record: bool = True,
    min_healthy: int = 0,
    gateway: bool = True,
    tuned: str | None = None,
) -> ServeResult:
    """Serve ``req`` on the hosts of ``inventory`` (``limit``: some of them). ``record``: write the serving record
    (not for a temporary state); ``gateway``: add, update or remove the fleet endpoint as the request says (a rollout
    manages it itself); ``min_healthy``: seconds each server must stay healthy after the gate passed; ``tuned``: the
    request's options came from a campaign's tuned file, this its reason (TunedConfig.reason): every plan carries it
    (and so does the serving record's)."""
    config, warn, first_warning = ctx.config, ctx.warn, len(ctx.warnings)
    engine, model, model_dir = check_request(req, warn)  # a refusal here: nothing on the hosts changed
    combo = engine.combo
    req = replace(req, image_source=engine.image_source)  # the route resolved: the record keeps what was deployed
    api_key = ensure_api_key(config, inventory, req.api_key_file)
    opts = plan_options(req, combo.vllm, tuned=tuned)

    # ready -> docker -> facts
    up_result = up_inventory(ctx, inventory, limit=limit, check=check)  # the hosts' own up: facts come with it
    topologies = topologies_of(config, up_result.run)

    # plan (refusals stop here: nothing built, nothing started)
    store = Store(config, inventory)
    services_lib.preflight(
        services_lib.View(inventory, request=req, hosts=frozenset(topologies), limited=limit is not None)
    )
    plans = make_plans(topologies, model, opts, config)
    check_engine_args(req.engine_args, {h: p.to_dict() for h, p in plans.items()})
    for host, p in plans.items():
        for w in p.warnings:
            warn(f"{host}: {w}")

    # image -> server -> health
    extravars = _serve_extravars(inventory, req, combo, plans, topologies, model, model_dir, api_key, min_healthy)
    previous = store.record()
    pin = fleet_image_inputs(previous, req, combo, limit)
    if pin:  # servers added to a running deployment get its image, not one of this machine's inputs
        extravars["vllm_image_inputs_digest"] = pin
    serve_run = _serve_run(ctx, inventory, req, model, model_dir, extravars, limit=limit, check=check)
    endpoints = {h: list(serve_run.host_facts.get(h, {}).get("zenops_endpoints") or []) for h in plans}
    images = {h: dict(serve_run.host_facts.get(h, {}).get("zenops_image") or {}) for h in plans}
    if req.measure and not check:
        plans = measure_missing(ctx, inventory, topologies, images, lambda t: make_plans(t, model, opts, config), plans)
    served_name = req.served_model_name or (model_dir.name if model_dir else model.name)
    previews = _services_preview(store, req, plans, limit) if check and gateway and record else []
    result = ServeResult(
        up=up_result,
        serve=serve_run,
        engine=engine,
        plans=plans,
        endpoints=endpoints,
        images=images,
        api_key_file=api_key,
        model=served_name,
        inventory=inventory,
        warnings=ctx.warnings[first_warning:],
        services={k: dict(v) for k, v in previous.services.items()} if previous else {},
        previews=previews,
    )
    apply = bool(gateway and record and not check)
    if apply:  # the record as served now, the services as they were: a service that ships it (the loop) reads it
        _save_record(store, result, req, model, model_dir)
    result.services = _services_step(ctx, store, previous, req, endpoints, limit, apply=apply, api_key_file=api_key)
    if record and not check:  # not for a temporary state (`zenops bench --compare-platforms`'s other platform)
        _save_record(store, result, req, model, model_dir)
    return result


IMAGE_FIELDS = ("image_source", "base_image", "prebuilt_ref")  # the request's fields the engine image is made of


def fleet_image_inputs(
    previous: ServingRecord | None, req: ServeRequest, combo: compat.Combo, limit: str | None
) -> str:
    """The inputs digest of the engine image a deployment runs, for servers added to it (``limit``: a scale-out, a
    surge, a rollout's batch) with the same engine (pair and image fields as recorded): they get that image (from
    the image cache), not one this machine would make from its own inputs (another controller's pip settings, or
    a scaling loop's host, hash differently). Empty: not such a serve, or the record names no single image (an
    older record, hosts on different images)."""
    if limit is None or previous is None or (previous.compat or {}).get("id") != combo.id:
        return ""
    had = previous.request or {}
    if any(str(had.get(f) or "") != str(getattr(req, f) or "") for f in IMAGE_FIELDS):
        return ""
    digests = {str((img or {}).get("inputs") or "") for img in previous.images.values()}
    return digests.pop() if len(digests) == 1 and "" not in digests else ""


def _serve_extravars(
    inventory: Path,
    req: ServeRequest,
    combo: compat.Combo,
    plans: Mapping[str, Plan],
    topologies: Mapping[str, Mapping[str, Any]],
    model: ModelSpec,
    model_dir: Path | None,
    api_key: Path,
    min_healthy: int,
) -> dict[str, Any]:
    """playbooks/serve.yml's extra vars: the plans, the image (built on the first host) and the servers' settings."""
    builder = sorted(plans)[0]
    flags = Topology.from_facts(topologies[builder]).flags
    extravars: dict[str, Any] = {
        "zenops_plans": {h: p.to_dict() for h, p in plans.items()},
        "vllm_image_source": req.image_source,
        "vllm_image_combo": combo.to_dict(),
        "vllm_image_builder": builder,
        "vllm_image_build_args": compat.build_args(combo, flags),
        "vllm_server_api_key_file": str(api_key),
        "vllm_server_model": model.name if model_dir is None else str(model_dir),
        "vllm_server_model_dir": str(model_dir) if model_dir else "",
        "vllm_server_deployment": inventory_label(inventory),
        "vllm_server_health_min_healthy": min_healthy,
        # the pass-through options (health and shutdown timeouts, engine args, served model name): from the table
        **request_options.role_vars(vars(req)),
    }
    if req.image_source == "pip":
        extravars.update(pip_settings())
        if req.base_image_archive is not None:
            extravars["vllm_image_pip_base_archive"] = str(req.base_image_archive.resolve())
        if req.base_image:
            extravars["vllm_image_pip_base_image"] = req.base_image
    if req.image_source == "prebuilt" and req.prebuilt_ref:
        extravars["vllm_image_prebuilt_ref"] = req.prebuilt_ref
    return extravars


def _serve_run(
    ctx: RunContext,
    inventory: Path,
    req: ServeRequest,
    model: ModelSpec,
    model_dir: Path | None,
    extravars: dict[str, Any],
    *,
    limit: str | None,
    check: bool,
) -> RunResult:
    """playbooks/serve.yml with ``extravars`` and the Hugging Face token's file (a gated model without one: a
    warning)."""
    with hf_token_file(req.hf_token_file) as token:
        if token is not None:
            extravars["vllm_server_hf_token_file"] = str(token)
        elif model.hf_token_required and model_dir is None:
            ctx.warn(
                f"{model.name} is gated on Hugging Face: set HF_TOKEN or pass --hf-token-file, or the download fails"
            )
        serve_spec = RunSpec(
            playbook="serve",
            inventory=inventory,
            extravars=extravars,
            limit=limit,
            check=check,
            verbosity=ctx.verbosity,
        )
        return ctx.run(serve_spec)


def _save_record(
    store: Store, result: ServeResult, req: ServeRequest, model: ModelSpec, model_dir: Path | None
) -> None:
    """The serving record of what ``result`` serves."""
    store.save_record(
        ServingRecord(
            inventory=str(result.inventory.resolve()),
            request=request_to_dict(req, hf_token_given=req.hf_token_file is not None, model_dir=model_dir),
            compat=result.combo.to_dict(),
            model=result.model,
            model_spec=model.name,
            plans={h: p.to_dict() for h, p in result.plans.items()},
            endpoints=result.endpoints,
            images=result.images,
            api_key_file=str(result.api_key_file),
            deployment=inventory_label(result.inventory),
            updated_at=datetime.now(UTC).isoformat(timespec="seconds"),
            services=result.services,
        ),
    )


def _services_step(
    ctx: RunContext,
    store: Store,
    previous: ServingRecord | None,
    req: ServeRequest,
    endpoints: Mapping[str, list[dict[str, Any]]],
    limit: str | None,
    *,
    apply: bool,
    api_key_file: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """The deployment's services after a serve (zenops.deployment.services: the gateway...), given every server of
    the deployment (a --limit run keeps the other hosts' servers of the record). Not ``apply``: the record's,
    unchanged. ``previous``: the record before this serve."""
    had = {k: dict(v) for k, v in previous.services.items()} if previous else {}
    if not apply:
        return had
    everything = dict(previous.endpoints) if previous and limit else {}
    everything.update(endpoints)
    view = services_lib.View(store.inventory, everything, request=req, api_key_file=api_key_file)
    return services_lib.apply(ctx, view, had)


def _services_preview(
    store: Store, req: ServeRequest, plans: Mapping[str, Plan], limit: str | None
) -> list[services_lib.Preview]:
    """`up --dry-run`: what each service would do once the planned servers serve (nothing runs): the servers are
    the plans' (a --limit run keeps the other hosts' servers of the record)."""
    previous = store.record()
    had = {k: dict(v) for k, v in previous.services.items()} if previous else {}
    everything: dict[str, Any] = dict(previous.endpoints) if previous and limit else {}
    everything.update({h: [{"instance": i.index, "port": i.port} for i in p.instances] for h, p in plans.items()})
    return services_lib.plan(services_lib.View(store.inventory, everything, request=req), had)


def measure_missing(
    ctx: RunContext,
    inventory: Path,
    topologies: dict[str, dict[str, Any]],
    images: Mapping[str, Mapping[str, Any]],
    replan: Callable[[dict[str, dict[str, Any]]], dict[str, Plan]],
    plans: dict[str, Plan],
) -> dict[str, Plan]:
    """`zenops up --measure`: the hosts whose facts carry no bandwidth measurement are measured once, now that the
    engine image is there (zenops.bandwidth), and planned again: the plans then show the measured ceiling (the
    serving settings do not depend on it). The servers already run: a measurement that fails is a warning, never a
    failed `up` (the serving record must still be written), and the plans stay as they were."""
    from zenops import bandwidth  # noqa: PLC0415
    from zenops.errors import RunFailedError  # noqa: PLC0415

    missing = {h: t for h, t in topologies.items() if not bandwidth.has_measurement(t)}
    if not missing:
        return plans
    refs = [str(images.get(h, {}).get("ref") or "") for h in sorted(missing)]
    ctx.note(
        f"measuring memory bandwidth and GEMM throughput of {', '.join(sorted(missing))} (once; kept with the facts)"
    )
    try:
        measured = bandwidth.measure_inventory(ctx, inventory, missing, image=refs[0] or None)
    except (bandwidth.MeasurementError, RunFailedError) as e:
        why = e.message + (f" ({e.hint})" if e.hint else "")
        ctx.note(
            f"warning: the measurement failed, the plans show no measured ceiling: {why}; the servers run as planned"
        )
        return plans
    for host, key in measured.items():
        topologies[host][bandwidth.KEY] = key
        save_facts(ctx.config, host, topologies[host])
    return replan(topologies)
