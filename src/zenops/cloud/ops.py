"""openstacksdk calls: connect, preflight, list what zenops owns, tear it down and prove it gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import openstack
from openstack import exceptions as sdk
from openstack.connection import Connection

from zenops.cloud import marks as m
from zenops.cloud.errors import (
    RETRY_AFTER_CAP,
    CloudError,
    CloudNotFoundError,
    QuotaExceededError,
    classify,
    close_matches,
    is_transient,
    retry_after,
    retrying,
)
from zenops.cloud.preflight import Limits, Shortfall, cost_per_hour, shortfalls

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def check_cloud_name(cloud: str, recorded: list[str]) -> None:
    """``cloud`` is a clouds.yaml entry (OS_CLIENT_CONFIG_FILE and the usual places), or one the ledger records
    (``recorded``: its deployments are still listed when its entry is gone). CloudError (exit 8) otherwise, naming
    the entries there are: an unknown --cloud is an error, not an empty answer."""
    if cloud in recorded:
        return
    from openstack.config import loader  # noqa: PLC0415

    try:
        names = loader.OpenStackConfig().get_cloud_names()
    except sdk.ConfigException as e:
        raise classify(e, cloud) from e
    if cloud in names:
        return
    known = sorted((set(names) - {"defaults"}) | set(recorded))  # "defaults": the SDK's name for no clouds.yaml
    raise CloudError(
        f"no cloud named '{cloud}' in clouds.yaml, and no deployment of zenops recorded in it",
        hint=f"pass one of: {', '.join(known)} (similar: {close_matches(cloud, known)})"
        if known
        else "add the entry to clouds.yaml (or set OS_CLIENT_CONFIG_FILE)",
    )


def connect(cloud: str) -> Connection:
    """Connect and authenticate now, so a bad clouds.yaml entry fails before anything else happens."""
    try:
        conn = openstack.connect(cloud=cloud)
        retrying(conn.authorize)
        return conn
    except Exception as e:
        raise classify(e, cloud) from e


INTERFACES = ("public", "internal", "admin")


def interface_of(conn: Any) -> str:
    """The service catalog's interface ``conn`` uses (its clouds.yaml entry's ``interface``; public when unset), for
    what does not read clouds.yaml's (openstack.cloud's modules pass public unless told)."""
    try:
        got = conn.config.get_interface()
    except Exception:
        got = None
    got = str(got or "public").removesuffix("URL")  # old spellings: publicURL, internalURL
    return got if got in INTERFACES else "public"


@dataclass(frozen=True)
class Preflight:
    cloud: str
    flavor: dict[str, Any]
    image: dict[str, Any]
    network_mode: str
    network: str
    external_network: str | None
    count: int
    limits: Limits
    shortfalls: list[Shortfall]
    cost_per_hour: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shortfalls": [str(s) for s in self.shortfalls]}


def _limits(conn: Connection) -> Limits:
    a = retrying(conn.compute.get_limits).absolute
    fip_max, fip_used = -1, 0
    try:
        project = str(conn.current_project_id)
        q = retrying(lambda: conn.network.get_quota(project, details=True))
        detail = q.floating_ips if isinstance(q.floating_ips, dict) else {}
        fip_max = int(detail.get("limit", -1))
        fip_used = int(detail.get("used", 0))
    except sdk.SDKException:
        pass  # some clouds hide Neutron quota details; the API will still refuse
    return Limits(
        max_cores=int(a.total_cores),
        cores_used=int(a.total_cores_used or 0),
        max_ram_mib=int(a.total_ram),
        ram_used_mib=int(a.total_ram_used or 0),
        max_instances=int(a.instances),
        instances_used=int(a.instances_used or 0),
        max_floating_ips=fip_max,
        floating_ips_used=fip_used,
    )


def limits(conn: Connection, cloud: str) -> Limits:
    """The project's absolute limits and what it uses of them (Nova's; floating IPs: Neutron's quota)."""
    try:
        return _limits(conn)
    except Exception as e:
        raise classify(e, cloud) from e


def room(conn: Connection, cloud: str, flavors: list[str]) -> tuple[Limits, dict[str, tuple[int, int]]]:
    """The project's absolute limits and each flavor's (vCPUs, RAM MiB): what a campaign checks before it runs
    several flavors at once. Unknown flavors are left out (their own preflight names them)."""
    try:
        sizes = {}
        for name in flavors:

            def find(n: str = name) -> Any:
                return conn.compute.find_flavor(n, ignore_missing=True)

            fl = retrying(find)
            if fl is not None:
                sizes[name] = (int(fl.vcpus), int(fl.ram))
        return _limits(conn), sizes
    except CloudError:
        raise
    except Exception as e:
        raise classify(e, cloud) from e


def _find_flavor(conn: Connection, cloud: str, name: str, option: str) -> Any:
    """The cloud's flavor ``name`` (given by ``option``), or CloudNotFoundError with the close matches and all names."""
    fl = retrying(lambda: conn.compute.find_flavor(name, ignore_missing=True))
    if fl is None:
        names = [f.name for f in retrying(lambda: list(conn.compute.flavors()))]
        raise CloudNotFoundError(
            f"cloud '{cloud}' has no flavor '{name}' ({option})",
            hint=f"close matches: {close_matches(name, names)} (all: {', '.join(sorted(names))})",
        )
    return fl


def _find_image(conn: Connection, cloud: str, image: str) -> Any:
    """The cloud's image ``image``, or CloudNotFoundError with the close matches."""
    im = retrying(lambda: conn.image.find_image(image, ignore_missing=True))
    if im is None:
        names = [i.name for i in retrying(lambda: list(conn.image.images()))]
        raise CloudNotFoundError(
            f"cloud '{cloud}' has no image '{image}'",
            hint=f"close matches: {close_matches(image, names)}; pass --image NAME",
        )
    return im


def _check_network(conn: Connection, cloud: str, needed: str, network_mode: str) -> None:
    """CloudNotFoundError with the close matches unless the cloud has the network ``network_mode`` needs."""
    nets = {n.name: n for n in retrying(lambda: list(conn.network.networks()))}
    if needed not in nets:
        raise CloudNotFoundError(
            f"cloud '{cloud}' has no network '{needed}' ({network_mode} mode)",
            hint=f"close matches: {close_matches(needed, nets)}; set the cloud profile's network names",
        )


def _flavor_facts(fl: Any) -> dict[str, Any]:
    """What the preflight reports of a flavor."""
    return {
        "name": fl.name,
        "id": fl.id,
        "vcpus": fl.vcpus,
        "ram_mib": fl.ram,
        "disk_gb": fl.disk,
        "ephemeral_gb": getattr(fl, "ephemeral", 0) or 0,
    }


def preflight(
    conn: Connection,
    cloud: str,
    *,
    flavor: str,
    image: str,
    count: int,
    network_mode: str,
    network: str,
    external_network: str | None,
    price_per_hour: float | None,
    adopted: int = 0,
    gateway_flavor: str | None = None,
    gateway_adopted: bool = False,
) -> Preflight:
    """Check everything `up` needs before creating anything; raise the first blocking problem with its fix.

    ``adopted`` servers already exist for this deployment and need no new room; so does the gateway's own server
    (``gateway_flavor``) when ``gateway_adopted``.
    """
    try:
        fl = _find_flavor(conn, cloud, flavor, "--flavor")
        gw = _find_flavor(conn, cloud, gateway_flavor, "--gateway-flavor") if gateway_flavor else None
        im = _find_image(conn, cloud, image)
        _check_network(conn, cloud, network if network_mode == "provider" else (external_network or ""), network_mode)
        limits = _limits(conn)
    except CloudError:
        raise
    except Exception as e:
        raise classify(e, cloud) from e
    new = max(count - adopted, 0)
    new_gw = 1 if gw is not None and not gateway_adopted else 0
    more = ((int(gw.vcpus), int(gw.ram), new_gw),) if gw is not None else ()
    fips = new + new_gw if network_mode == "floating" else 0
    short = shortfalls(limits, int(fl.vcpus), int(fl.ram), new, fips, more=more)
    result = Preflight(
        cloud=cloud,
        flavor=_flavor_facts(fl),
        image={"name": im.name, "id": im.id},
        network_mode=network_mode,
        network=network,
        external_network=external_network,
        count=count,
        limits=limits,
        shortfalls=short,
        cost_per_hour=cost_per_hour(price_per_hour, count),
    )
    if short:
        raise QuotaExceededError(
            f"cloud '{cloud}': {new} more server(s) of {flavor}"
            + (f" and the gateway's of {gateway_flavor}" if new_gw else "")
            + " do not fit the project's limits: "
            + "; ".join(str(s) for s in short),
            hint="lower --count, pick a smaller --flavor, free resources (zenops status, zenops down), or raise "
            "the project's quota",
        )
    return result


# --- what zenops owns --------------------------------------------------------------------------------------------


# teardown's order: servers first (nothing runs on what follows), then the images they may have booted from...
KINDS = ("servers", "images", "floating_ips", "routers", "ports", "networks", "security_groups", "keypairs")


@dataclass
class Owned:
    servers: list[Any] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)  # baked replica images (zenops.cloud.bake)
    floating_ips: list[Any] = field(default_factory=list)
    routers: list[Any] = field(default_factory=list)
    ports: list[Any] = field(default_factory=list)
    networks: list[Any] = field(default_factory=list)
    security_groups: list[Any] = field(default_factory=list)
    keypairs: list[Any] = field(default_factory=list)

    def items(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for kind in KINDS:
            out += [(kind, r) for r in getattr(self, kind)]
        return out

    def __len__(self) -> int:
        return len(self.items())


def describe(kind: str, r: Any) -> dict[str, Any]:
    name = getattr(r, "name", None) or getattr(r, "floating_ip_address", None) or getattr(r, "id", "")
    marks = marks_of(kind, r)
    return {
        "kind": kind.rstrip("s"),
        "id": getattr(r, "id", None) or name,
        "name": name,
        "deployment": marks.deployment if marks else None,
        "campaign": marks.campaign if marks else None,
    }


# the kinds role provision names zenops-<deployment>: found by that name while untagged (marks.from_name, which reads
# the keypairs' names too)
NAMED_KINDS = ("networks", "routers", "security_groups")


def marks_of(kind: str, r: Any, project: str | None = None) -> m.Marks | None:
    """The zenops marks of a listed resource, or None when it is not zenops's. ``project``: the connection's project;
    given, an untagged resource is claimed by its name or description only when it is that project's (admin
    credentials list every project's, and another project's ``zenops-<name>`` network is not this deployment's)."""
    if kind == "servers":
        return m.from_server(getattr(r, "metadata", None), getattr(r, "tags", None))
    if kind == "images":  # tags, else the properties it was created with (a snapshot is made before it is tagged)
        props = dict(getattr(r, "properties", None) or {})
        if project is not None and str(getattr(r, "owner", None) or getattr(r, "owner_id", None) or "") != project:
            return None  # another project's image (public, shared): never ours to delete
        return m.from_server(props, getattr(r, "tags", None))
    if kind == "keypairs":  # no tags: named zenops-<deployment> (marks.keypair_name)
        return m.from_name(getattr(r, "name", None))
    tags = list(getattr(r, "tags", None) or ())
    marks = m.from_tags(tags)
    if marks is not None or tags:  # tagged: by its tags alone (someone else's tags: not ours)
        return marks
    # untagged: made by zenops, which stopped before it could tag it, in this project
    if project is not None and str(getattr(r, "project_id", None) or "") != project:
        return None
    if kind == "floating_ips":
        return m.from_description(getattr(r, "description", None))
    return m.from_name(getattr(r, "name", None)) if kind in NAMED_KINDS else None


def list_owned(
    conn: Connection,
    cloud: str,
    *,
    deployment: str | None = None,
    campaign: str | None = None,
    keypairs: set[str] | None = None,
) -> Owned:
    """Every resource carrying zenops's marks (optionally of one deployment or campaign): in its tags, or, made and
    not yet tagged (a crash between the two calls), in its name or description (``marks_of``) while it is the
    connection's project's.

    Keypairs cannot carry marks: only the names in ``keypairs`` (those the ledger says zenops created) are listed.
    """

    def want(kind: str, r: Any) -> bool:
        mk = marks_of(kind, r, project)
        if mk is None:
            return False
        return (deployment is None or mk.deployment == deployment) and (campaign is None or mk.campaign == campaign)

    try:
        # the untagged ones are claimed in this project only (marks_of); an unscoped token has none: claims none
        project = str(conn.current_project_id or "")
        owned = Owned(
            servers=[s for s in retrying(lambda: list(conn.compute.servers(details=True))) if want("servers", s)],
            # a kept image (bake --keep) is the operator's: neither down's nor a leak
            images=[i for i in retrying(lambda: list(conn.image.images())) if want("images", i) and not kept(i)],
            # not filtered by tag: an untagged one zenops made carries its marks in its name or description
            floating_ips=[r for r in retrying(lambda: list(conn.network.ips())) if want("floating_ips", r)],
            routers=[r for r in retrying(lambda: list(conn.network.routers())) if want("routers", r)],
            ports=[r for r in retrying(lambda: list(conn.network.ports(tags=m.OWNER_TAG))) if want("ports", r)],
            networks=[r for r in retrying(lambda: list(conn.network.networks())) if want("networks", r)],
            security_groups=[
                r for r in retrying(lambda: list(conn.network.security_groups())) if want("security_groups", r)
            ],
            keypairs=[
                k
                for k in retrying(lambda: list(conn.compute.keypairs()))
                if keypairs is not None and k.name in keypairs and want("keypairs", k)
            ],
        )
    except CloudError:
        raise
    except Exception as e:
        raise classify(e, cloud) from e
    return owned


def kept(image: Any) -> bool:
    """A baked image made with ``--keep``: zenops's, left to the operator by `down` and `leaks`."""
    return str(dict(getattr(image, "properties", None) or {}).get(m.KEEP_KEY, "")) == "1"


def owned_servers(conn: Connection, cloud: str, *, deployment: str | None = None) -> list[Any]:
    """The servers carrying zenops's marks (optionally of one deployment): what `reap` reads expiries from."""
    try:
        servers = retrying(lambda: list(conn.compute.servers(details=True)))
    except Exception as e:
        raise classify(e, cloud) from e
    out = []
    for s in servers:
        mk = marks_of("servers", s)
        if mk is not None and (deployment is None or mk.deployment == deployment):
            out.append(s)
    return out


def set_expiry(conn: Connection, cloud: str, servers: list[Any], expires_at: str) -> None:
    """Write ``zenops:expires_at`` on existing servers (adopted, given a new --ttl); their other metadata stays."""
    for s in servers:
        try:
            retrying(lambda s=s: conn.compute.set_server_metadata(s, **{m.EXPIRES_KEY: expires_at}))  # type: ignore[misc,no-untyped-call]
        except Exception as e:
            raise classify(e, cloud) from e


def wait_until_404(
    fetch: Callable[[], Any],
    what: str,
    timeout: float,
    *,
    interval: float = 2.0,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> None:
    """Fetch until the API answers 404 (``NotFoundException``), or raise ``ResourceTimeout`` after ``timeout``.

    Not openstacksdk's ``wait_for_delete`` for servers: it also stops at status DELETED. Nova shows that status
    between marking an instance deleted and removing its record, and the server list still has it meanwhile (the
    sandbox took 63 s, beside CI's lanes), so the proof that follows a teardown called it a leak.

    A transient failure of one fetch (is_transient: 5xx, 429, no answer) is one more poll, not the end of the wait
    (waiting at least its Retry-After); the last one is raised if the deadline passes meanwhile."""
    sleep, clock = sleep or time.sleep, clock or time.monotonic
    deadline = clock() + timeout
    while True:
        pause = interval
        try:
            fetch()
        except sdk.NotFoundException:
            return
        except Exception as exc:
            if not is_transient(exc) or clock() >= deadline:
                raise
            pause = max(interval, min(retry_after(exc) or 0.0, RETRY_AFTER_CAP))
        if clock() >= deadline:
            raise sdk.ResourceTimeout(f"{what} is still there {timeout:.0f} s after its deletion")
        sleep(pause)


def _delete(conn: Connection, kind: str, r: Any, timeout: int) -> None:
    """Delete one resource and wait until the API answers 404 for it. Safe to repeat (teardown retries it whole on a
    transient failure): a resource already gone is fine, and the wait polls through transient failures."""
    net = conn.network

    def gone(fetch: Callable[[], Any], what: str) -> None:
        wait_until_404(fetch, what, timeout)

    if kind == "servers":
        conn.compute.delete_server(r, ignore_missing=True)
        gone(lambda: conn.compute.get_server(r.id), f"server {r.name}")
    elif kind == "images":
        conn.image.delete_image(r, ignore_missing=True)
        gone(lambda: conn.image.get_image(r.id), f"image {r.name}")
    elif kind == "floating_ips":
        net.delete_ip(r, ignore_missing=True)
        gone(lambda: net.get_ip(r.id), f"floating IP {r.floating_ip_address}")
    elif kind == "routers":
        for port in net.ports(device_id=r.id):
            if port.device_owner == "network:router_interface":
                net.remove_interface_from_router(r, port=port.id)  # type: ignore[no-untyped-call]
        if r.external_gateway_info:
            net.update_router(r, external_gateway_info={})
        net.delete_router(r, ignore_missing=True)
        gone(lambda: net.get_router(r.id), f"router {r.name}")
    elif kind == "ports":
        net.delete_port(r, ignore_missing=True)
        gone(lambda: net.get_port(r.id), f"port {r.id}")
    elif kind == "networks":
        for port in net.ports(network_id=r.id):  # leftovers of deleted servers on agentless clouds
            if not port.device_owner or str(port.device_owner).startswith("compute:"):
                net.delete_port(port, ignore_missing=True)
        net.delete_network(r, ignore_missing=True)  # its subnets go with it
        gone(lambda: net.get_network(r.id), f"network {r.name}")
    elif kind == "security_groups":
        net.delete_security_group(r, ignore_missing=True)
    elif kind == "keypairs":
        conn.compute.delete_keypair(r, ignore_missing=True)
    else:
        raise ValueError(kind)


def teardown(
    conn: Connection,
    cloud: str,
    owned: Owned,
    *,
    dry_run: bool = False,
    timeout: int = 300,
    progress: Progress = _quiet,
) -> list[dict[str, Any]]:
    """Delete in dependency order (servers, floating IPs, routers, ports, networks, security groups, keypairs) and
    wait until each is really gone (404). Returns what was (or, with dry_run, would be) removed."""
    if dry_run:
        return [describe(kind, r) for kind, r in owned.items()]
    removed: list[dict[str, Any]] = []
    for kind, r in owned.items():
        what = describe(kind, r)
        progress(f"deleting {what['kind']} {what['name']}")
        try:
            retrying(lambda kind=kind, r=r: _delete(conn, kind, r, timeout))  # type: ignore[misc]
        except sdk.NotFoundException:
            pass
        except Exception as e:
            raise classify(e, cloud) from e
        removed.append(what)
    return removed
