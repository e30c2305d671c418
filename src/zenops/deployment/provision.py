"""`zenops up --cloud`: preflight, the ledger entry, playbooks/up.yml, the expiry and its switch."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops import catalog, spend
from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.errors import CanceledError, RunFailedError, UsageError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    from zenops.config import CloudProfile, Config
    from zenops.context import RunContext
    from zenops.hosts import UpResult
    from zenops.serve import ServeRequest
    from zenops.spend import Spend
from zenops.deployment.common import (
    CloudRequest,
    Note,
    check_count,
    default_name,
    ensure_key,
    flavor_name,
    gateway_server_flavor,
    is_gateway,
    known_hosts_path,
    operator_cidr,
    tenant_cidr,
    write_inventory,
)


def decide_expiry(
    ttl_s: int | None, existing: list[str | None], now: datetime | None = None
) -> tuple[str | None, str | None]:
    """The expiry for a deployment's servers, and a note for the operator (None: nothing to say).

    ``existing``: the ``zenops:expires_at`` of the servers it already has (None where a server has none). A ttl sets
    now + ttl on all of them; without one, an existing expiry is kept (the latest, when they differ) and new servers
    get it too; no ttl and none existing: no expiry."""
    now = now or datetime.now(UTC)
    had = [w for w in (m.parse_expiry(v) for v in existing) if w is not None]
    if ttl_s is not None:
        new = m.expiry_after(ttl_s, now)
        note = f"the servers expire at {new} (in {m.format_duration(ttl_s)}; `zenops reap` removes them after)"
        old = {m.format_expiry(w) for w in had}
        if old and old != {new}:
            note += f"; moved from {', '.join(sorted(old))}"
        elif existing and not had:
            note += "; the existing servers had no expiry"
        return new, note
    if not had:
        return None, None
    keep = max(had)
    kept = m.format_expiry(keep)
    left = (keep - now).total_seconds()
    when = f"in {m.format_duration(left)}" if left > 0 else f"passed {m.format_duration(left)} ago"
    note = f"the deployment keeps its expiry {kept} ({when}); pass --ttl to move it"
    if left <= 0:
        note += ": `zenops reap` will remove it"
    return kept, note


def api_to_operator(req: CloudRequest, dep: ledger.Deployment) -> bool:
    """Whether provisioning opens the vLLM ports to the operator: never behind a gateway's own server, nor while a
    gateway may front the servers (``req.gateway_fronts``: the gateway service opens them after the plan if it turns
    out off); else what the gateway service last decided from the plan's instances (zenops.deployment.firewall), so
    that `up --cloud` without --model keeps it; open on a deployment that has no decision yet."""
    if dep.gateway_flavor or req.gateway_fronts:
        return False
    return dep.api_to_operator if dep.api_to_operator is not None else True


def _expiry(conn: Any, req: CloudRequest, adopted: list[Any], note: Note, *, check: bool) -> str | None:
    """decide_expiry for up_cloud, said, and written on the adopted servers when a ttl moves it (the provisioning
    module keeps an existing server as it is: new metadata reaches only the servers it creates)."""
    from zenops.cloud import ops  # noqa: PLC0415

    expires_at, said = decide_expiry(req.ttl_s, [(s.metadata or {}).get(m.EXPIRES_KEY) for s in adopted])
    if said:
        note(said)
    if req.ttl_s is not None and expires_at and adopted and not check:
        ops.set_expiry(conn, req.cloud, adopted, expires_at)
    return expires_at


def _arm_switch(ctx: RunContext, conn: Any, cloud: str, mk: m.Marks, dep: ledger.Deployment) -> None:
    """A dead-man's switch on each server of a deployment with an expiry (auto: where the cloud and the servers
    allow it; the cloud profile's expiry_switch and api_interface)."""
    if not mk.expires_at:
        return
    from zenops.cloud import expiry_switch  # noqa: PLC0415

    profile = ctx.config.cloud_profile(cloud)
    servers, inventory = dep.servers, Path(str(dep.inventory))
    if dep.gateway_servers:  # the gateway's own server deletes itself too
        servers = dep.servers + dep.gateway_servers
        inventory = write_inventory(ctx.config.state_dir, dep, profile.image_user, servers, "all")
    try:
        armed = expiry_switch.arm(
            ctx,
            conn,
            cloud=cloud,
            marks=mk,
            servers=servers,
            inventory=inventory,
            mode=profile.expiry_switch,
            interface=profile.api_interface,
        )
    finally:
        if dep.gateway_servers:
            inventory.unlink(missing_ok=True)
    if armed is not None:
        dep.expiry_switch = armed.to_dict()
        ledger.save(ctx.config.state_dir, dep)


def _preflight(
    ctx: RunContext,
    conn: Any,
    req: CloudRequest,
    existing: ledger.Deployment | None,
    owned: Any,
    *,
    name: str,
    campaign: str | None,
    image: str,
    mode: str,
    confirm: Callable[[Spend], bool] | None = None,
) -> ledger.Deployment:
    """Everything `up` checks before it creates anything (raises the first problem), the pinned host keys of the
    servers it has; the deployment's ledger entry as it will be (not saved yet), its projected cost said, and
    ``confirm`` asked what it creates and costs (CanceledError when it declines)."""
    from zenops.cloud import ops  # noqa: PLC0415

    config, note, profile = ctx.config, ctx.note, ctx.config.cloud_profile(req.cloud)
    flavors = catalog.flavors(config.flavors)
    flavor_spec = flavors.get(req.flavor)
    price = flavor_spec.price_per_hour if flavor_spec else None

    if existing and (existing.flavor != req.flavor or existing.image != image):
        raise UsageError(
            f"deployment '{name}' exists with flavor {existing.flavor} and image {existing.image}",
            hint=f"pick another --deployment, or remove it first: zenops down --deployment {name}",
        )
    in_cloud = next((flavor_name(s) for s in owned.servers if is_gateway(s)), None)
    check_count([str(s.name) for s in owned.servers if not is_gateway(s)], req)
    gateway_flavor = gateway_server_flavor(req, existing, in_cloud)
    gateway_spec = flavors.get(gateway_flavor) if gateway_flavor else None
    gateway_price = gateway_spec.price_per_hour if gateway_spec else None
    pre = ops.preflight(
        conn,
        req.cloud,
        flavor=req.flavor,
        image=image,
        count=req.count,
        network_mode=mode,
        network=profile.provider_network,
        external_network=profile.external_network,
        price_per_hour=price,
        adopted=len([s for s in owned.servers if not is_gateway(s)]),
        gateway_flavor=gateway_flavor,
        gateway_adopted=any(is_gateway(s) for s in owned.servers),
    )
    dep = existing or ledger.Deployment(
        name=name,
        cloud=req.cloud,
        flavor=req.flavor,
        image=image,
        count=req.count,
        network_mode=mode,
        campaign=campaign,
        price_per_hour=price,
    )
    dep.gateway_flavor, dep.gateway_price_per_hour = gateway_flavor, gateway_price
    dep.count = req.count
    projected = dep.cost_per_hour()
    note(
        f"preflight ok: {req.count} x {req.flavor} ({pre.flavor['vcpus']} vCPU, {pre.flavor['ram_mib'] // 1024} GiB) "
        + (f"and the gateway's own server ({gateway_flavor}) " if gateway_flavor else "")
        + f"on {req.cloud}, image {image}, {mode} network; "
        + (f"{len(owned.servers)} server(s) adopted; " if owned.servers else "")
        + (
            f"projected cost ${projected}/h"
            if projected is not None
            else "price unknown (add price_per_hour to the flavor in zenops.yaml)"
        )
    )
    _check_host_keys(config.state_dir, existing)
    _consent(req, dep, owned, confirm)
    return dep


def _check_host_keys(state_dir: Path, existing: ledger.Deployment | None) -> None:
    """The servers a deployment already has: their pinned host keys, before anything connects to them."""
    if existing is None:
        return
    from zenops import hostkeys  # noqa: PLC0415

    hostkeys.check(
        known_hosts_path(state_dir, existing.cloud, existing.name),
        [
            hostkeys.Pinned(str(s["name"]), str(s["id"]), str(s["address"]))
            for s in existing.servers + existing.gateway_servers
            if s.get("id") and s.get("address")
        ],
    )


def _spend(req: CloudRequest, dep: ledger.Deployment, owned: Any) -> Spend:
    """What `up` is about to create (preflight passed, nothing created yet): the servers beyond those it adopts, the
    gateway's own server when it has none yet, the deployment's cost once created, and its expiry."""
    adopted = [s for s in owned.servers if not is_gateway(s)]
    expires_at, _said = decide_expiry(req.ttl_s, [(s.metadata or {}).get(m.EXPIRES_KEY) for s in owned.servers])
    expiry = None
    if expires_at:
        expiry = f"in {m.format_duration(req.ttl_s)} ({expires_at})" if req.ttl_s is not None else f"at {expires_at}"
    return spend.of_up(
        dep,
        new_servers=req.count - len(adopted),
        new_gateway=bool(dep.gateway_flavor) and not any(is_gateway(s) for s in owned.servers),
        expiry=expiry,
    )


def _consent(req: CloudRequest, dep: ledger.Deployment, owned: Any, confirm: Callable[[Spend], bool] | None) -> None:
    """``confirm`` asked what `up` creates and costs (after preflight, before anything is created); CanceledError when
    it declines."""
    if confirm is not None and not confirm(_spend(req, dep, owned)):
        raise CanceledError("nothing was created", hint="pass --yes to create it without asking")


def _keypair(config: Config, profile: CloudProfile, cloud: str, name: str) -> tuple[str, bool, Path, Path]:
    """The servers' keypair: the profile's (the operator's key), or one zenops creates for the deployment (its key
    files in the state dir). Returns its name, whether zenops creates it, the private and the public key's files."""
    if profile.keypair:
        keypair, keypair_created = profile.keypair, False
        private_key = Path(profile.private_key_file).expanduser()
        public_key = Path("")
    else:
        keypair, keypair_created = m.keypair_name(name), True
        private_key, public_key = ensure_key(config.state_dir, cloud, name)
    return keypair, keypair_created, private_key, public_key


def _up_extravars(
    config: Config,
    profile: CloudProfile,
    req: CloudRequest,
    dep: ledger.Deployment,
    mk: m.Marks,
    *,
    name: str,
    image: str,
    mode: str,
    public_key: Path,
    interface: str = "public",
) -> dict[str, Any]:
    """playbooks/up.yml's extra vars for the cloud: the servers, their network and keypair (as ``dep``, the ledger
    entry, records them), the marks, the gateway's server, Docker's settings. ``interface``: the service catalog's
    interface of zenops's connection to the cloud (clouds.yaml's; openstack.cloud's modules are told it)."""
    extravars: dict[str, Any] = {
        "provision_cloud": req.cloud,
        "provision_interface": interface,
        "provision_deployment": name,
        # the operator's extra metadata first: zenops's own marks always win
        "provision_server_metadata": {
            **{str(k): str(v) for k, v in profile.server_metadata.items()},
            **mk.server_metadata(),
        },
        "provision_tags": mk.tags(),
        "provision_count": req.count,
        "provision_flavor": req.flavor,
        "provision_image": image,
        # new serving servers boot from the deployment's baked image when it has one (the gateway's: from image)
        "provision_replica_image": dep.replica_image or "",
        "provision_image_user": profile.image_user,
        "provision_network_mode": mode,
        "provision_provider_network": profile.provider_network,
        "provision_tenant_network": profile.tenant_network,
        "provision_external_network": profile.external_network,
        "provision_tenant_cidr": profile.tenant_cidr or tenant_cidr(name),
        "provision_operator_cidr": dep.operator_cidr,
        "provision_keypair_name": dep.keypair,
        "provision_keypair_create": dep.keypair_created,
        "provision_public_key_file": str(public_key) if dep.keypair_created else "",
        "provision_private_key_file": dep.private_key_file,
        "provision_known_hosts_file": str(known_hosts_path(config.state_dir, req.cloud, name)),
        "provision_active_timeout": profile.active_timeout,
        "provision_error_retries": profile.error_retries,
        "provision_gateway_flavor": dep.gateway_flavor or "",
        "provision_gateway_port": req.gateway_port,
        "provision_api_to_operator": dep.api_to_operator,
        "provision_loop_cidr": dep.loop_cidr,  # a loop's SSH rule, kept by every run (the loop's own `up` too)
        "zenops_hosts": "zenops_targets",
        **config.docker.role_vars(),
    }
    return extravars


def up_cloud(
    ctx: RunContext, req: CloudRequest, *, check: bool = False, confirm: Callable[[Spend], bool] | None = None
) -> tuple[UpResult, ledger.Deployment]:
    config, note = ctx.config, ctx.note
    name = m.check_name(req.name or default_name(req.flavor))
    campaign = m.check_name(req.campaign, "campaign") if req.campaign else None
    if req.count < 1:
        raise UsageError("--count must be at least 1")
    profile = config.cloud_profile(req.cloud)
    mode, image = req.network_mode or profile.network_mode, req.image or profile.image
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.hosts import UpResult, summarize  # noqa: PLC0415
    from zenops.runner import RunSpec  # noqa: PLC0415

    conn = ops.connect(req.cloud)
    existing = ledger.load(config.state_dir, req.cloud, name)
    owned = ops.list_owned(conn, req.cloud, deployment=name)
    dep = _preflight(
        ctx, conn, req, existing, owned, name=name, campaign=campaign, image=image, mode=mode, confirm=confirm
    )

    from zenops.cloud import bake  # noqa: PLC0415

    dep.replica_image = bake.usable_replica_image(conn, req.cloud, dep.replica_image, note)
    keypair, keypair_created, private_key, public_key = _keypair(config, profile, req.cloud, name)
    mk = m.Marks(name, campaign, _expiry(conn, req, owned.servers, note, check=check))
    # the security group's range, and the vLLM ports to it or not: recorded, the gateway service changes them after
    dep.count, dep.keypair, dep.keypair_created, dep.private_key_file, dep.operator_cidr, dep.api_to_operator = (
        req.count,
        keypair,
        keypair_created,
        str(private_key),
        profile.operator_cidr or operator_cidr(conn),
        api_to_operator(req, dep),
    )
    if not check:
        ledger.save(config.state_dir, dep)

    extravars = _up_extravars(
        config, profile, req, dep, mk, name=name, image=image, mode=mode, public_key=public_key,
        interface=ops.interface_of(conn),
    )  # fmt: skip
    env = {k: os.environ[k] for k in ("OS_CLIENT_CONFIG_FILE",) if k in os.environ}
    spec = RunSpec(
        playbook="up", inventory=None, extravars=extravars, check=check, verbosity=ctx.verbosity, envvars=env
    )
    try:
        run = ctx.run(spec)
    except (RunFailedError, CanceledError) as e:
        if not check:
            dep.status = "failed"
            ledger.save(config.state_dir, dep)
        e.hint = ((e.hint + "; ") if e.hint else "") + (
            f"what was created is marked as deployment '{name}': re-run the same `zenops up` to resume, or "
            f"`zenops down --deployment {name} --cloud {req.cloud}` to remove it"
        )
        raise
    facts = run.host_facts.get("localhost", {})
    keep = ("name", "id", "address", "fixed_ip", "floating_ip", "replaced", "faults")
    dep.servers = [{k: s.get(k) for k in keep} for s in facts.get("zenops_servers", [])]
    dep.gateway_servers = [{k: s.get(k) for k in keep} for s in facts.get("zenops_gateway_servers") or []]
    dep.status = "ready"
    if not check:
        dep.inventory = str(write_inventory(config.state_dir, dep, profile.image_user))
        if dep.gateway_servers:
            gw_inventory = write_inventory(config.state_dir, dep, profile.image_user, dep.gateway_servers, "gateway")
            dep.gateway_inventory = str(gw_inventory)
        ledger.save(config.state_dir, dep)
        _arm_switch(ctx, conn, req.cloud, mk, dep)
    run.stats.pop("localhost", None)
    return UpResult(run=run, hosts=summarize(run)), dep


def serve_request_for(req: ServeRequest, dep: ledger.Deployment) -> ServeRequest:
    """A cloud deployment's gateway reaches the servers by their fixed addresses; with a server of its own
    (`--gateway-flavor`, kept by a re-run without it) it runs there, whatever the instance count."""
    every = dep.servers + dep.gateway_servers  # the gateway's own too: a serving host's bench client reaches it there
    addresses = {str(s["name"]): str(s["fixed_ip"]) for s in every if s.get("fixed_ip")}
    if not dep.gateway_servers:
        return dataclasses.replace(req, gateway_addresses=addresses)
    own = str(dep.gateway_servers[0]["name"])
    if req.gateway == "off" or (req.gateway_host and req.gateway_host != own):
        raise UsageError(
            f"deployment '{dep.name}' has its gateway on a server of its own ({own}): "
            + ("--gateway off" if req.gateway == "off" else f"--gateway-host {req.gateway_host}")
            + " would leave that server running for nothing",
            hint="drop the option; to go without that server, remove the deployment "
            f"(zenops down --deployment {dep.name}) and create it again without --gateway-flavor",
        )
    return dataclasses.replace(
        req,
        gateway="on",
        gateway_host=str(dep.gateway_servers[0]["name"]),
        gateway_inventory=Path(dep.gateway_inventory),
        gateway_addresses=addresses,
    )
