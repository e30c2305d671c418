"""A rollout's surge on a cloud deployment: one more server beside the old one, then the old one retired."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenops import catalog
from zenops.cloud import ledger
from zenops.errors import ZenopsError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    from zenops.context import RunContext
from zenops.deployment.common import CloudRequest, is_gateway, write_inventory
from zenops.deployment.provision import up_cloud


def surge_preflight(ctx: RunContext, dep: ledger.Deployment, *, more: int = 1) -> None:
    """Room for ``more`` serving servers of the deployment's flavor (a rollout's surge: one; blue/green: as many as
    it has); raises QuotaExceededError (or the cloud's error) before anything changes."""
    from zenops.cloud import ops  # noqa: PLC0415

    profile = ctx.config.cloud_profile(dep.cloud)
    spec = catalog.flavors(ctx.config.flavors).get(dep.flavor)
    conn = ops.connect(dep.cloud)
    ops.preflight(
        conn,
        dep.cloud,
        flavor=dep.flavor,
        image=dep.image,
        count=len(dep.servers) + more,
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
    now = _grown(ctx, dep, count=2, gateway_port=gateway_port)
    new = sorted(str(s["name"]) for s in now.servers if s["name"] != keep)
    if len(new) != 1 or keep not in {s["name"] for s in now.servers}:
        raise ZenopsError(
            f"deployment '{dep.name}' was to have {keep} and one server more, it has "
            + ", ".join(str(s["name"]) for s in now.servers),
            hint=f"see `zenops status --cloud {dep.cloud}`",
        )
    return new[0], now


def add_servers(
    ctx: RunContext, dep: ledger.Deployment, *, keep: list[str], more: int, gateway_port: int = 8080
) -> tuple[list[str], ledger.Deployment]:
    """``more`` serving servers beside ``keep`` (a rollout's blue/green: a whole new set), as :func:`add_server`
    makes one: returns their names and the deployment as it is now. Idempotent: servers an interrupted call made are
    adopted and finished, never more made."""
    now = _grown(ctx, dep, count=len(keep) + more, gateway_port=gateway_port)
    names = {str(s["name"]) for s in now.servers}
    new = sorted(names - set(keep))
    if len(new) != more or not set(keep) <= names:
        raise ZenopsError(
            f"deployment '{dep.name}' was to have {', '.join(keep)} and {more} server(s) more, it has "
            + ", ".join(sorted(names)),
            hint=f"see `zenops status --cloud {dep.cloud}`",
        )
    return new, now


def _grown(ctx: RunContext, dep: ledger.Deployment, *, count: int, gateway_port: int) -> ledger.Deployment:
    """The deployment with ``count`` serving servers of its flavor (what `up --count N` does: those it has adopted,
    the others made), behind its gateway (a surge's new server, a blue/green set); returns it as it is now."""
    req = CloudRequest(
        cloud=dep.cloud,
        flavor=dep.flavor,
        count=count,
        name=dep.name,
        image=dep.image,
        campaign=dep.campaign,
        network_mode=dep.network_mode,
        gateway_flavor=dep.gateway_flavor,
        gateway_port=gateway_port,
        gateway_fronts=True,  # the new servers run behind the deployment's gateway
    )
    _result, now = up_cloud(ctx, req)
    return now


def serving_server_names(dep: ledger.Deployment) -> list[str]:
    """The deployment's serving servers as the cloud has them (a server `up` made but did not record, after a failed
    run, too); the gateway's own server is not one."""
    from zenops.cloud import ops  # noqa: PLC0415

    conn = ops.connect(dep.cloud)
    return sorted(str(s.name) for s in ops.owned_servers(conn, dep.cloud, deployment=dep.name) if not is_gateway(s))


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
    dep.inventory = str(write_inventory(ctx.config.state_dir, dep, ctx.config.cloud_profile(dep.cloud).image_user))
    dep.updated_at = ledger.now()
    ledger.save(ctx.config.state_dir, dep)
    return dep
