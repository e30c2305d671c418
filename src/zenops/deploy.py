"""`zenops up --cloud`, `down`, `leaks` and `status`: deployments on OpenStack, created, tracked and removed.

Order of `up --cloud`: preflight (nothing is created before it passes) -> ledger entry (status provisioning) ->
playbooks/up.yml (role provision, then the same host steps as --inventory) -> ledger entry (ready, servers).
A failed or interrupted `up` leaves every created resource marked and the ledger entry in place, so a re-run adopts
what exists and `down` removes it.

Expiry (``CloudRequest.ttl_s``, `up --ttl`): new servers carry ``zenops:expires_at`` = now + ttl. Re-running `up` on
an existing deployment never moves its expiry silently: without a ttl the servers keep theirs (and new ones get the
same); with one, every server of the deployment gets the new expiry, and the note says it moved. `reap` asks the
cloud (not the ledger: the controller that made them may be gone) for deployments whose servers have all expired and
removes each as `down --deployment` does.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import yaml

from zenops import catalog, statefile
from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.cloud.preflight import cost_so_far
from zenops.config import Config
from zenops.errors import CanceledError, ExitCode, RunFailedError, UsageError, ZenopsError
from zenops.target import cloud_for

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    from zenops.context import RunContext
    from zenops.hosts import UpResult
    from zenops.serve import ServeRequest

Note = Callable[[str], None]


def _ignore(_: str) -> None:
    pass


@dataclass(frozen=True)
class CloudRequest:
    cloud: str
    flavor: str
    count: int = 1
    name: str | None = None
    image: str | None = None
    campaign: str | None = None
    network_mode: str | None = None
    ttl_s: int | None = None  # seconds until the servers expire (`zenops reap`); None: no expiry
    gateway_flavor: str | None = None  # a server of its own for the gateway (HAProxy); None: none (or the ledger's)
    gateway_port: int = 8080  # opened to the operator in the security group
    # a gateway fronts the servers (on one of them, or on its own server): the vLLM ports are then open only between
    # the deployment's servers, not to the operator (a gateway's own server, the ledger's too, implies it)
    gateway_fronts: bool = False


def default_name(flavor: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in flavor.lower()).strip("-")[:32] or "default"


def tenant_cidr(deployment: str) -> str:
    """A /24 per deployment, stable across runs, so that deployments side by side rarely share a CIDR."""
    return f"10.98.{zlib.crc32(deployment.encode()) % 250 + 1}.0/24"


def operator_cidr(conn: Any) -> str:
    """This machine's address towards the cloud's API, as /32: the security group opens SSH and the API to it only."""
    url = conn.config.get_auth_args().get("auth_url", "")
    host = urlparse(url).hostname or "127.0.0.1"
    port = urlparse(url).port or 443
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))  # UDP: no packet is sent, the kernel only picks the route
        return f"{s.getsockname()[0]}/32"


def _ensure_key(state_dir: Path, cloud: str, name: str) -> tuple[Path, Path]:
    key = ledger.keys_dir(state_dir, cloud) / m.keypair_name(name)
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"zenops {cloud}/{name}", "-f", str(key)], check=True
        )
    key.chmod(0o600)
    return key, key.with_suffix(".pub")


def inventory_path(state_dir: Path, cloud: str, name: str, kind: str = "") -> Path:
    """The inventory `up` writes for a deployment: its serving servers (kind ""), the gateway's own server
    ("gateway"), or every server (the expiry switch's run, "all")."""
    return ledger.path(state_dir, cloud, name).with_suffix(f".{kind + '.' if kind else ''}inventory.yml")


def known_hosts_path(state_dir: Path, cloud: str, name: str) -> Path:
    """The deployment's pinned SSH host keys: recorded at the first connection to each server, checked at every later
    one. Entries are keyed by server ID (``HostKeyAlias``), not by address: a new server on a reused address is a new
    entry, while a server whose key changed is refused."""
    return ledger.path(state_dir, cloud, name).with_suffix(".known_hosts")


def ssh_pinning_args(known_hosts: Path, server_id: str) -> str:
    """ssh options that pin a cloud server's host key in the deployment's known_hosts file (see known_hosts_path)."""
    return f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts} -o HostKeyAlias={server_id}"


def _write_inventory(
    state_dir: Path, dep: ledger.Deployment, user: str, servers: list[dict[str, Any]] | None = None, kind: str = ""
) -> Path:
    hosts = {
        s["name"]: {
            "ansible_host": s["address"],
            "ansible_user": user,
            "ansible_ssh_private_key_file": dep.private_key_file,
            "ansible_ssh_common_args": ssh_pinning_args(known_hosts_path(state_dir, dep.cloud, dep.name), s["id"]),
            "zenops_server_id": s["id"],
            # what another server of the deployment reaches it by (the gateway's backends): its fixed address
            **({"zenops_private_address": s["fixed_ip"]} if s.get("fixed_ip") else {}),
        }
        for s in (dep.servers if servers is None else servers)
    }
    return statefile.write_text(
        inventory_path(state_dir, dep.cloud, dep.name, kind),
        f"# written by zenops up --cloud {dep.cloud} --deployment {dep.name}\n"
        + yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True),
    )


def _is_gateway(server: Any) -> bool:
    return (getattr(server, "metadata", None) or {}).get(m.ROLE_KEY) == m.GATEWAY_ROLE


def gateway_server_flavor(
    req: CloudRequest, existing: ledger.Deployment | None, in_cloud: str | None = None
) -> str | None:
    """The flavor of the gateway's own server: the request's, or the one the deployment already has (a re-run of
    `up` without --gateway-flavor keeps it; `zenops down` removes it): the ledger's, else that of the marked server
    the cloud holds (``in_cloud``: another controller made it). A different one is refused."""
    had = (existing.gateway_flavor if existing else None) or in_cloud
    if req.gateway_flavor and had and req.gateway_flavor != had:
        raise UsageError(
            f"deployment '{req.name or default_name(req.flavor)}' has its gateway on a server of flavor {had}, not "
            f"{req.gateway_flavor}",
            hint=f"re-run with --gateway-flavor {had}, or remove the deployment first (zenops down --deployment ...)",
        )
    return req.gateway_flavor or had


def check_count(serving: list[str], req: CloudRequest) -> None:
    """`up` adds servers, it never removes one: a --count below the servers the deployment has would leave the
    others running, billed and outside its inventory. Refused before anything changes."""
    if len(serving) <= req.count:
        return
    name = req.name or default_name(req.flavor)
    raise UsageError(
        f"deployment '{name}' has {len(serving)} servers ({', '.join(sorted(serving))}); --count {req.count} would "
        "leave the others running outside it: zenops up adds servers, it does not remove them",
        hint=f"re-run with --count {len(serving)}, or remove the deployment (zenops down --deployment {name}) and "
        f"create it again with --count {req.count}",
    )


def _flavor_name(server: Any) -> str | None:
    flavor = getattr(server, "flavor", None)
    try:
        return str(flavor["original_name"]) if flavor is not None and flavor["original_name"] else None
    except (KeyError, TypeError):
        return None


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
        inventory = _write_inventory(ctx.config.state_dir, dep, profile.image_user, servers, "all")
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
) -> ledger.Deployment:
    """Everything `up` checks before it creates anything (raises the first problem); the deployment's ledger entry
    as it will be (not saved yet), its projected cost said."""
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
    in_cloud = next((_flavor_name(s) for s in owned.servers if _is_gateway(s)), None)
    check_count([str(s.name) for s in owned.servers if not _is_gateway(s)], req)
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
        adopted=len([s for s in owned.servers if not _is_gateway(s)]),
        gateway_flavor=gateway_flavor,
        gateway_adopted=any(_is_gateway(s) for s in owned.servers),
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


def up_cloud(ctx: RunContext, req: CloudRequest, *, check: bool = False) -> tuple[UpResult, ledger.Deployment]:
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
    dep = _preflight(ctx, conn, req, existing, owned, name=name, campaign=campaign, image=image, mode=mode)
    _check_host_keys(config.state_dir, existing)

    if profile.keypair:
        keypair, keypair_created = profile.keypair, False
        private_key = Path(profile.private_key_file).expanduser()
        public_key = Path("")
    else:
        keypair, keypair_created = m.keypair_name(name), True
        private_key, public_key = _ensure_key(config.state_dir, req.cloud, name)
    mk = m.Marks(name, campaign, _expiry(conn, req, owned.servers, note, check=check))
    dep.count, dep.keypair, dep.keypair_created, dep.private_key_file = (
        req.count,
        keypair,
        keypair_created,
        str(private_key),
    )
    if not check:
        ledger.save(config.state_dir, dep)

    extravars: dict[str, Any] = {
        "provision_cloud": req.cloud,
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
        "provision_image_user": profile.image_user,
        "provision_network_mode": mode,
        "provision_provider_network": profile.provider_network,
        "provision_tenant_network": profile.tenant_network,
        "provision_external_network": profile.external_network,
        "provision_tenant_cidr": profile.tenant_cidr or tenant_cidr(name),
        "provision_operator_cidr": profile.operator_cidr or operator_cidr(conn),
        "provision_keypair_name": keypair,
        "provision_keypair_create": keypair_created,
        "provision_public_key_file": str(public_key) if keypair_created else "",
        "provision_private_key_file": str(private_key),
        "provision_known_hosts_file": str(known_hosts_path(config.state_dir, req.cloud, name)),
        "provision_active_timeout": profile.active_timeout,
        "provision_error_retries": profile.error_retries,
        "provision_gateway_flavor": dep.gateway_flavor or "",
        "provision_gateway_port": req.gateway_port,
        "provision_api_to_operator": not (req.gateway_fronts or bool(dep.gateway_flavor)),
        "zenops_hosts": "zenops_targets",
        **config.docker.role_vars(),
    }
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
        dep.inventory = str(_write_inventory(config.state_dir, dep, profile.image_user))
        if dep.gateway_servers:
            gw_inventory = _write_inventory(config.state_dir, dep, profile.image_user, dep.gateway_servers, "gateway")
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


# --- a rollout's surge: one server more, then one less -------------------------------------------------------------


def deployment_of_inventory(config: Config, inventory: Path) -> ledger.Deployment | None:
    """The cloud deployment whose serving inventory this is (None: own hosts, or not in this controller's ledger)."""
    want = inventory.expanduser().resolve()
    for dep in ledger.all_deployments(config.state_dir):
        if dep.inventory and Path(dep.inventory).resolve() == want:
            return dep
    return None


def surge_preflight(ctx: RunContext, dep: ledger.Deployment) -> None:
    """Room for one more serving server of the deployment's flavor (a rollout's surge); raises QuotaExceededError
    (or the cloud's error) before anything changes."""
    from zenops.cloud import ops  # noqa: PLC0415

    profile = ctx.config.cloud_profile(dep.cloud)
    spec = catalog.flavors(ctx.config.flavors).get(dep.flavor)
    conn = ops.connect(dep.cloud)
    ops.preflight(
        conn,
        dep.cloud,
        flavor=dep.flavor,
        image=dep.image,
        count=len(dep.servers) + 1,
        network_mode=dep.network_mode,
        network=profile.provider_network,
        external_network=profile.external_network,
        price_per_hour=spec.price_per_hour if spec else None,
        adopted=len(dep.servers),
        gateway_flavor=dep.gateway_flavor,
        gateway_adopted=bool(dep.gateway_servers),
    )


def add_server(
    ctx: RunContext, dep: ledger.Deployment, *, keep: str, gateway_port: int = 8080
) -> tuple[str, ledger.Deployment]:
    """A second serving server beside ``keep`` (what `up --count 2` does: provisioned, Docker ready, in the
    deployment's inventory and ledger, its expiry and switch as the other's); returns its name and the deployment as
    it is now. Idempotent: a server an interrupted call made is adopted and finished, never a third one made."""
    req = CloudRequest(
        cloud=dep.cloud,
        flavor=dep.flavor,
        count=2,
        name=dep.name,
        image=dep.image,
        campaign=dep.campaign,
        network_mode=dep.network_mode,
        gateway_flavor=dep.gateway_flavor,
        gateway_port=gateway_port,
        gateway_fronts=True,  # a surge runs behind the deployment's gateway
    )
    _result, now = up_cloud(ctx, req)
    new = sorted(str(s["name"]) for s in now.servers if s["name"] != keep)
    if len(new) != 1 or keep not in {s["name"] for s in now.servers}:
        raise ZenopsError(
            f"deployment '{dep.name}' was to have {keep} and one server more, it has "
            + ", ".join(str(s["name"]) for s in now.servers),
            hint=f"see `zenops status --cloud {dep.cloud}`",
        )
    return new[0], now


def serving_server_names(dep: ledger.Deployment) -> list[str]:
    """The deployment's serving servers as the cloud has them (a server `up` made but did not record, after a failed
    run, too); the gateway's own server is not one."""
    from zenops.cloud import ops  # noqa: PLC0415

    conn = ops.connect(dep.cloud)
    return sorted(str(s.name) for s in ops.owned_servers(conn, dep.cloud, deployment=dep.name) if not _is_gateway(s))


def retire_server(ctx: RunContext, dep: ledger.Deployment, name: str) -> ledger.Deployment:
    """Delete one serving server of the deployment (and its floating IP), and drop it from the ledger and the
    inventory: the end of a surge (the old server) or its revert (the new one). Gone already: only the records."""
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.cloud.errors import classify  # noqa: PLC0415

    conn = ops.connect(dep.cloud)
    owned = ops.list_owned(conn, dep.cloud, deployment=dep.name)
    servers = [s for s in owned.servers if str(s.name) == name]
    try:
        ports = {p.id for s in servers for p in conn.network.ports(device_id=s.id)}
    except Exception as e:
        raise classify(e, dep.cloud) from e
    # its floating IP by port, or (the server gone already: an interrupted call) by the address the ledger kept
    recorded = {s.get("floating_ip") for s in dep.servers if s["name"] == name} - {None}
    fips = [ip for ip in owned.floating_ips if ip.port_id in ports or ip.floating_ip_address in recorded]
    gone = ops.Owned(servers=servers, floating_ips=fips)
    ops.teardown(conn, dep.cloud, gone, progress=ctx.note)
    dep.servers = [s for s in dep.servers if str(s["name"]) != name]
    dep.count = len(dep.servers)
    dep.inventory = str(_write_inventory(ctx.config.state_dir, dep, ctx.config.cloud_profile(dep.cloud).image_user))
    dep.updated_at = ledger.now()
    ledger.save(ctx.config.state_dir, dep)
    return dep


# --- down, leaks, status -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownResult:
    cloud: str
    removed: list[dict[str, Any]]
    dry_run: bool
    deployments: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "removed": self.removed, "dry_run": self.dry_run, "deployments": self.deployments}


def down(
    config: Config,
    *,
    cloud: str | None,
    name: str | None = None,
    campaign: str | None = None,
    all_mine: bool = False,
    dry_run: bool = False,
    confirm: Callable[[list[dict[str, Any]]], bool] | None = None,
    note: Note = _ignore,
    keep_secrets: bool = False,
) -> DownResult:
    """Remove the selected deployments' resources from the cloud, prove none is left, then forget them locally
    (:func:`_forget_all`: ledger entry, inventories, generated keypair, pinned host keys, and the API key file unless
    ``keep_secrets``)."""
    if sum(bool(x) for x in (name, campaign, all_mine)) != 1:
        raise UsageError(
            "say what to remove: exactly one of --deployment D, --campaign C, --all-mine",
            hint="see `zenops status` for the deployments",
        )
    from zenops.cloud import expiry_switch, ops  # noqa: PLC0415
    from zenops.cloud.errors import CloudError, classify  # noqa: PLC0415

    cloud = cloud_for(config, cloud, name)
    listed = ledger.listing(config.state_dir, cloud)
    deps = listed.deployments
    selected = _selected(deps, name, campaign, all_mine)
    # a deployment whose ledger file is damaged (warned about): forgotten too once the cloud has nothing of it
    unreadable = [n for _, n in listed.damaged if all_mine or n == name]
    keypairs = {d.keypair for d in (deps if all_mine else selected) if d.keypair_created}
    if name and not selected and config.cloud_profile(cloud).keypair != m.keypair_name(name):
        # not in this machine's ledger (another controller made it, `zenops reap`): the keypair zenops generates for
        # a deployment is named after it, and `leaks` counts it as zenops's; a profile naming it as its own is kept
        keypairs.add(m.keypair_name(name))
    conn = ops.connect(cloud)
    owned = ops.list_owned(conn, cloud, deployment=name, campaign=campaign, keypairs=keypairs)
    plan = ops.teardown(conn, cloud, owned, dry_run=True)
    names = sorted({d.name for d in selected} | {r["deployment"] for r in plan if r["deployment"]})
    # the expiry switch's application credentials (no tags: named after their deployment), deleted after the servers
    scope = set(names) | ({name} if name else set())

    def in_scope(c: Any) -> bool:  # a campaign's: by its description's mark, even once its servers are all gone
        return expiry_switch.deployment_of(c.name) in scope or (
            campaign is not None and expiry_switch.campaign_of(c) == campaign
        )

    creds = [c for c in expiry_switch.listed(conn, cloud) if in_scope(c)]
    plan += [expiry_switch.describe(c) for c in creds]
    if dry_run or not plan:
        if not dry_run:  # nothing of it on the cloud
            _forget_all(config, cloud, selected, unreadable, keep_secrets=keep_secrets, note=note)
        return DownResult(cloud, plan, dry_run, names)
    if confirm is not None and not confirm(plan):
        raise CanceledError("nothing was removed", hint="pass --yes to remove without asking")
    removed = ops.teardown(conn, cloud, owned, progress=note)
    try:
        removed += expiry_switch.remove(conn, creds, progress=note)
    except Exception as e:
        raise classify(e, cloud) from e
    left = ops.list_owned(conn, cloud, deployment=name, campaign=campaign, keypairs=keypairs)
    left_names = [f"{k} {ops.describe(k, r)['name']}" for k, r in left.items()]
    left_names += [f"application_credential {c.name}" for c in expiry_switch.listed(conn, cloud) if in_scope(c)]
    if left_names:
        raise CloudError(
            f"{len(left_names)} resource(s) are still there after teardown: " + ", ".join(left_names),
            hint="re-run zenops down; if it persists, the cloud refuses the deletion (see its logs)",
        )
    _forget_all(config, cloud, selected, unreadable, keep_secrets=keep_secrets, note=note)
    return DownResult(cloud, removed, False, names)


def _forget_all(
    config: Config,
    cloud: str,
    selected: list[ledger.Deployment],
    unreadable: list[str],
    *,
    keep_secrets: bool,
    note: Note,
) -> None:
    """What this machine keeps of deployments the cloud no longer has: each one's ledger entry, its inventories,
    the keypair zenops generated for it (unknown for an ``unreadable`` ledger file: kept), its pinned host keys, and
    its API key file (unless ``keep_secrets``)."""
    from zenops.serving_record import forget_api_key  # noqa: PLC0415

    created = {d.name: d.keypair_created for d in selected}
    for name in [*created, *unreadable]:
        ledger.remove(config.state_dir, cloud, name)
        key = ledger.keys_dir(config.state_dir, cloud) / m.keypair_name(name)
        if created.get(name):
            key.unlink(missing_ok=True)
            key.with_suffix(".pub").unlink(missing_ok=True)
        if not keep_secrets:  # the key of the serving inventory `up --cloud --model` served
            forget_api_key(config, inventory_path(config.state_dir, cloud, name), note)
        for kind in ("", "gateway", "all"):
            inventory_path(config.state_dir, cloud, name, kind).unlink(missing_ok=True)
        known_hosts_path(config.state_dir, cloud, name).unlink(missing_ok=True)


def _selected(
    deps: list[ledger.Deployment], name: str | None, campaign: str | None, all_mine: bool
) -> list[ledger.Deployment]:
    """The ledger's deployments that down() removes: the named one, the campaign's, or all of them."""
    return [d for d in deps if all_mine or d.name == name or (campaign and d.campaign == campaign)]


def down_locked(
    config: Config,
    *,
    cloud: str | None,
    name: str | None = None,
    campaign: str | None = None,
    all_mine: bool = False,
    dry_run: bool = False,
    confirm: Callable[[list[dict[str, Any]]], bool] | None = None,
    note: Note = _ignore,
    keep_secrets: bool = False,
) -> DownResult:
    """down() holding the lock of each deployment it removes, so none is cut from under a running `up`, `rollout` or
    `bench`. A dry run changes nothing and takes none."""
    from zenops.lock import deployment_locks  # noqa: PLC0415

    keys = [] if dry_run else _lock_keys(config, cloud, name, campaign, all_mine)
    with deployment_locks(config, keys, note=note):
        return down(
            config, cloud=cloud, name=name, campaign=campaign, all_mine=all_mine, dry_run=dry_run, confirm=confirm,
            note=note, keep_secrets=keep_secrets,
        )  # fmt: skip


def _lock_keys(config: Config, cloud: str | None, name: str | None, campaign: str | None, all_mine: bool) -> list[str]:
    """The lock keys of what down() removes: the named deployment (known to the ledger or not), or those of the
    campaign (all of mine) this machine's ledger records, the only ones a command here can be working on."""
    from zenops.lock import cloud_key  # noqa: PLC0415

    try:
        where = cloud_for(config, cloud, name)
    except UsageError:
        return []  # not in the ledger and no --cloud: down() says so
    if name:
        return [cloud_key(where, name)]
    deps = _selected(ledger.all_deployments(config.state_dir, where), name, campaign, all_mine)
    return [cloud_key(where, d.name) for d in deps]


# --- reap: deployments past their expiry ---------------------------------------------------------------------


@dataclass(frozen=True)
class Expiry:
    """One deployment's servers and their expiry, as the cloud has them.

    ``expires_at``: the latest ``zenops:expires_at`` of its servers (a deployment is reaped only when every server has
    passed its own), None when a server has none (or one zenops cannot read): never reaped."""

    deployment: str
    campaign: str | None
    servers: tuple[str, ...]
    expires_at: str | None
    expired: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "campaign": self.campaign,
            "servers": list(self.servers),
            "expires_at": self.expires_at,
            "expired": self.expired,
            "reason": self.reason,
        }


def select_expired(servers: list[Any], now: datetime) -> list[Expiry]:
    """Group zenops-marked servers (openstacksdk servers, or anything with name, metadata and tags) by deployment and
    say which have expired at ``now``. Deployments none of whose servers carries an expiry are left out."""
    groups: dict[str, list[tuple[str, m.Marks]]] = {}
    for srv in servers:
        mk = m.from_server(getattr(srv, "metadata", None), getattr(srv, "tags", None))
        if mk is not None:
            groups.setdefault(mk.deployment, []).append((str(getattr(srv, "name", "") or getattr(srv, "id", "")), mk))
    out = []
    for deployment, members in sorted(groups.items()):
        if not any(mk.expires_at for _, mk in members):
            continue
        names = tuple(sorted(n for n, _ in members))
        campaign = next((mk.campaign for _, mk in members if mk.campaign), None)
        when = [(n, mk.expires_at, m.parse_expiry(mk.expires_at)) for n, mk in members]  # names may repeat
        without = [f"{n} ({f'unreadable: {raw!r}' if raw else 'none'})" for n, raw, w in when if w is None]
        if without:
            why = f"left alone: server(s) without an expiry: {', '.join(sorted(without))}"
            out.append(Expiry(deployment, campaign, names, None, False, why))
            continue
        times = [w for _, _, w in when if w is not None]
        latest = max(times)
        left = (latest - now).total_seconds()
        expired = left <= 0
        if expired:
            reason = f"expired {m.format_duration(left)} ago"
        else:
            reason = f"expires in {m.format_duration(left)}"
            if len(times) > 1:
                reason += f" ({sum(1 for w in times if w <= now)} of {len(times)} server(s) expired)"
        out.append(Expiry(deployment, campaign, names, m.format_expiry(latest), expired, reason))
    return out


@dataclass
class ReapResult:
    cloud: str
    now: str
    dry_run: bool
    reaped: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict() + removed
    kept: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict(): not expired (or not confirmed)
    failed: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict() + error, hint, exit_code

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "now": self.now,
            "dry_run": self.dry_run,
            "reaped": self.reaped,
            "kept": self.kept,
            "failed": self.failed,
        }


class ReapFailedError(ZenopsError):
    """Some expired deployments could not be removed; exits with the first one's code (e.g. 14: locked, 8: cloud)."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = ExitCode.FAILURE) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = exit_code


def reap(
    config: Config,
    cloud: str,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    confirm: Callable[[list[dict[str, Any]]], bool] | None = None,
    note: Note = _ignore,
) -> ReapResult:
    """Remove every deployment on ``cloud`` whose servers have all passed their ``zenops:expires_at``, each exactly
    as ``down(name=...)`` does (its lock held, its expiry read again under it), whether or not this machine's ledger
    knows it. A deployment that fails is reported in ``failed`` and the others go on; ``confirm`` declining one
    keeps it."""
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.lock import cloud_key, deployment_lock  # noqa: PLC0415

    now = now or datetime.now(UTC)
    result = ReapResult(cloud, m.format_expiry(now), dry_run)
    conn = ops.connect(cloud)
    for exp in select_expired(ops.owned_servers(conn, cloud), now):
        if not exp.expired:
            result.kept.append(exp.to_dict())
            continue
        note(f"deployment {exp.deployment}: {exp.reason} ({exp.expires_at})")
        try:
            if dry_run:
                res = down(config, cloud=cloud, name=exp.deployment, dry_run=True, note=note)
            else:
                with deployment_lock(config, cloud_key(cloud, exp.deployment), note=note):
                    # read again under the lock: an `up --ttl` that held it may have moved the expiry
                    again = select_expired(ops.owned_servers(conn, cloud, deployment=exp.deployment), now)
                    if not (again and again[0].expired):
                        result.kept.append((again[0] if again else exp).to_dict())
                        continue
                    res = down(config, cloud=cloud, name=exp.deployment, confirm=confirm, note=note)
        except CanceledError:
            result.kept.append({**exp.to_dict(), "reason": exp.reason + "; not confirmed"})
            continue
        except UsageError:
            raise  # e.g. not interactive and no --yes: the same for every deployment
        except ZenopsError as e:
            result.failed.append({**exp.to_dict(), "error": e.message, "hint": e.hint, "exit_code": e.exit_code})
            continue
        result.reaped.append({**exp.to_dict(), "removed": res.removed})
    return result


class LeaksFoundError(ZenopsError):
    exit_code = ExitCode.LEAKS


def leaks(config: Config, cloud: str) -> list[dict[str, Any]]:
    """zenops-marked resources whose deployment is not alive in the ledger (exit non-zero through LeaksFoundError)."""
    from zenops.cloud import expiry_switch, ops  # noqa: PLC0415

    listed = ledger.listing(config.state_dir, cloud)
    # a deployment whose ledger file is damaged (warned about, naming it) is still meant to be alive: not a leak
    alive = {d.name for d in listed.deployments} | {n for _, n in listed.damaged}
    conn = ops.connect(cloud)
    keypairs = {k.name for k in conn.compute.keypairs() if k.name.startswith("zenops-")}
    owned = ops.list_owned(conn, cloud, keypairs=keypairs)
    found = [ops.describe(k, r) for k, r in owned.items() if ops.describe(k, r)["deployment"] not in alive]
    # the expiry switch's application credentials (this user's: Keystone lists a user's own only)
    creds = [expiry_switch.describe(c) for c in expiry_switch.listed(conn, cloud)]
    return found + [c for c in creds if c["deployment"] not in alive]


def _age_hours(created_at: str) -> float:
    started = datetime.fromisoformat(created_at)
    return max((datetime.now(UTC) - started).total_seconds() / 3600, 0.0)


def _ssh_answers(address: str | None, timeout: float = 2.0) -> bool:
    if not address:
        return False
    try:
        with socket.create_connection((address, 22), timeout=timeout):
            return True
    except OSError:
        return False


def status(config: Config, cloud: str | None = None) -> list[dict[str, Any]]:
    from zenops.cloud import ops  # noqa: PLC0415

    out = []
    if cloud is not None:
        listed = ledger.listing(config.state_dir)
        ops.check_cloud_name(cloud, [d.cloud for d in listed.deployments] + [c for c, _ in listed.damaged])
    by_cloud: dict[str, list[ledger.Deployment]] = {}
    for d in ledger.all_deployments(config.state_dir, cloud):
        by_cloud.setdefault(d.cloud, []).append(d)
    for c, deps in sorted(by_cloud.items()):
        try:
            conn = ops.connect(c)
            live = {s.id: s for s in conn.compute.servers(details=True)}
            reachable = True
        except ZenopsError:
            live, reachable = {}, False
        for d in deps:
            hours = _age_hours(d.created_at)
            servers = []
            for role, s in [("serving", s) for s in d.servers] + [("gateway", s) for s in d.gateway_servers]:
                srv = live.get(s["id"])
                servers.append(
                    {
                        **s,
                        "role": role,
                        "status": srv.status if srv else ("unknown" if not reachable else "gone"),
                        "ssh": _ssh_answers(s.get("address")),
                        "expires_at": (srv.metadata or {}).get(m.EXPIRES_KEY) if srv else None,
                    }
                )
            out.append(
                {
                    **d.to_dict(),
                    "age_hours": round(hours, 2),
                    "servers": servers,
                    "cost_so_far": cost_so_far(d.cost_per_hour(), 1, hours),
                    "cloud_reachable": reachable,
                }
            )
    return out
