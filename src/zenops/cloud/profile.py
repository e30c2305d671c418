"""`zenops config init --cloud NAME`: decide a cloud profile (the ``clouds.<name>`` entry of the config file) from
what the cloud lists.

Input: a :class:`CloudSnapshot`, plain data (``read_snapshot`` fills it from an openstacksdk Connection; the tests
write it by hand). Output: a :class:`ProfilePlan`: the profile's keys, each choice with its reason and alternatives,
the flavors that fit, the quota's room, warnings. No cloud calls and no files here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zenops.cloud.errors import CloudNotFoundError, close_matches
from zenops.cloud.preflight import Limits, shortfalls

# the written entry (`config init` writing the profile) lives in profile_write; its names stay importable from here
from zenops.cloud.profile_write import ProfileWrite, existing_profile, prepare_write, render_entry

__all__ = [
    "DEFAULT_IMAGE_USER",
    "Choice",
    "CloudSnapshot",
    "Flavor",
    "FlavorFit",
    "Image",
    "Network",
    "ProfilePlan",
    "ProfileWrite",
    "Room",
    "existing_profile",
    "plan_profile",
    "prepare_write",
    "read_snapshot",
    "render_entry",
]

DEFAULT_IMAGE_USER = "debian"  # Debian's cloud images log in as debian (the image's os_admin_user wins)


@dataclass(frozen=True)
class Network:
    name: str
    id: str
    shared: bool = False
    external: bool = False  # router:external: floating IPs come from it
    own: bool = False  # the project's own network
    active: bool = True
    ipv4_cidrs: tuple[str, ...] = ()  # its IPv4 subnets (external networks' may be hidden from a project)
    routes_externally: bool = False  # clouds.yaml says its addresses are reachable (networks: routes_externally)
    nat_source: bool = False  # clouds.yaml names it the floating IPs' network (networks: nat_source)
    is_default: bool = False  # Neutron's default external network


@dataclass(frozen=True)
class Image:
    name: str
    id: str
    os_distro: str = ""
    os_version: str = ""
    created_at: str = ""  # ISO 8601, as Glance gives it
    admin_user: str = ""  # os_admin_user
    active: bool = True


@dataclass(frozen=True)
class Flavor:
    name: str
    id: str
    vcpus: int
    ram_mib: int
    disk_gb: int = 0
    ephemeral_gb: int = 0


@dataclass(frozen=True)
class CloudSnapshot:
    """What the cloud listed for the project: networks, images, flavors, absolute limits."""

    cloud: str
    networks: tuple[Network, ...]
    images: tuple[Image, ...]
    flavors: tuple[Flavor, ...]
    limits: Limits


@dataclass(frozen=True)
class Choice:
    """One decision: the profile key it sets (or none: ``flavor`` is a flag of `up`), the value, why, the others."""

    what: str
    value: str | None
    reason: str
    alternatives: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "value": self.value, "reason": self.reason, "alternatives": list(self.alternatives)}


@dataclass(frozen=True)
class FlavorFit:
    name: str
    vcpus: int
    ram_mib: int
    why: str  # in the catalogue / gp.5 family / as big as catalogue flavor X

    def label(self) -> str:
        return f"{self.name} ({self.vcpus} vCPU, {_gib(self.ram_mib)} GiB; {self.why})"


@dataclass(frozen=True)
class Room:
    limit: str  # cores | ram | instances | floating_ips
    maximum: int  # -1: unlimited
    used: int
    unit: str

    @property
    def free(self) -> int | None:
        return None if self.maximum < 0 else max(self.maximum - self.used, 0)

    def __str__(self) -> str:
        if self.free is None:
            return f"{self.limit}: unlimited ({self.used} {self.unit} used)"
        return f"{self.limit}: {self.free} of {self.maximum} {self.unit} free"


@dataclass(frozen=True)
class ProfilePlan:
    cloud: str
    profile: dict[str, Any]  # the clouds.<cloud> entry (config.CLOUD_SCHEMA)
    choices: tuple[Choice, ...]
    flavors: tuple[FlavorFit, ...]  # the fitting flavors, the recommended one first
    room: tuple[Room, ...]
    fits_now: int | None  # servers of the recommended flavor the quota has room for (None: unlimited or no flavor)
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def flavor(self) -> str | None:
        return self.flavors[0].name if self.flavors else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "profile": dict(self.profile),
            "choices": [c.to_dict() for c in self.choices],
            "flavor": self.flavor,
            "flavors": [f.__dict__ for f in self.flavors],
            "quota": [{"limit": r.limit, "max": r.maximum, "used": r.used, "free": r.free} for r in self.room],
            "fits_now": self.fits_now,
            "warnings": list(self.warnings),
        }


def _gib(mib: int) -> str:
    return f"{mib / 1024:g}"


# --- networks ---------------------------------------------------------------------------------------------------


def _public(cidr: str) -> bool:
    try:
        return ipaddress.ip_network(cidr, strict=False).is_global
    except ValueError:
        return False


def _reachable(n: Network) -> str | None:
    """Why servers on ``n`` are reached at their fixed addresses, or None when nothing says so."""
    if n.routes_externally:
        return "clouds.yaml marks it routes_externally"
    public = [c for c in n.ipv4_cidrs if _public(c)]
    if public:
        return f"its subnet {public[0]} is publicly routed"
    return None


def _net_label(n: Network) -> str:
    kind = ", ".join(
        k
        for k, on in (
            ("shared", n.shared),
            ("external", n.external),
            ("yours", n.own),
            ("Neutron's default", n.is_default),
        )
        if on
    )
    cidrs = ", ".join(n.ipv4_cidrs)
    return f"{n.name} ({', '.join(x for x in (kind, cidrs) if x)})" if kind or cidrs else n.name


def _choose_mode(
    provider: list[Network], external: list[Network], reachable: list[Network], warnings: list[str]
) -> tuple[str, Network | None, Choice]:
    """The network mode (provider on a network this machine reaches, else floating, else the only shared network,
    with a warning added to ``warnings``), the provider network it is on (None: floating), and its Choice."""
    if reachable:
        mode, best = "provider", reachable[0]
        mode_reason = f"servers on provider network {best.name} are reached at their fixed IPs ({_reachable(best)})"
        mode_alts = [f"floating, from external network {external[0].name}"] if external else []
    elif external:
        mode, best = "floating", None
        why = "nothing says this machine reaches a shared network's addresses" if provider else "no shared network"
        mode_reason = f"{why}: servers get a tenant network, a router to {external[0].name} and floating IPs from it"
        mode_alts = [
            f"provider on {n.name}, if this machine reaches {', '.join(n.ipv4_cidrs)} (then also mark it "
            f"routes_externally: true under the cloud's networks: in clouds.yaml)"
            for n in provider
        ]
    else:
        mode, best = "provider", provider[0]
        mode_reason = f"{best.name} is the only network servers can be reached on (shared; no external network)"
        mode_alts = []
        warnings.append(
            f"nothing says this machine reaches {best.name}'s addresses ({', '.join(best.ipv4_cidrs)}): if `zenops up` "
            "cannot reach its servers over SSH, run zenops from a machine on that network"
        )
    return mode, best, Choice("network_mode", mode, mode_reason, tuple(mode_alts))


def _provider_choice(provider: list[Network], chosen: Network, mode: str) -> Choice:
    why = (
        "the network servers are created on"
        if mode == "provider"
        else "for --network-mode provider (nothing says this machine reaches it)"
    )
    return Choice(
        "provider_network",
        chosen.name,
        f"{_net_label(chosen)}: {why}",
        tuple(_net_label(n) for n in provider if n is not chosen),
    )


def _external_choice(external: list[Network], mode: str) -> Choice:
    ranked = (
        "clouds.yaml names it nat_source"
        if external[0].nat_source
        else "Neutron's default external network"
        if external[0].is_default
        else "the first external network by name"
        if len(external) > 1
        else "the only external network"
    )
    use = "floating IPs and the router's gateway" if mode == "floating" else "for --network-mode floating"
    return Choice(
        "external_network",
        external[0].name,
        f"{_net_label(external[0])}: {use} ({ranked})",
        tuple(_net_label(n) for n in external[1:]),
    )


def _choose_networks(snap: CloudSnapshot) -> tuple[dict[str, Any], list[Choice], list[str]]:
    nets = [n for n in snap.networks if n.active]
    # a network servers get a reachable address on: shared with the project, or one clouds.yaml/its subnet says routes
    # (an IPv4 subnet needed, unless clouds.yaml vouches for the network: a project may not see its subnets)
    provider = [
        n for n in nets if not n.external and (n.routes_externally or (n.ipv4_cidrs and (n.shared or _reachable(n))))
    ]
    provider.sort(key=lambda n: (not n.routes_externally, _reachable(n) is None, not n.shared, n.name))
    external = [n for n in nets if n.external]
    external.sort(key=lambda n: (not n.nat_source, not n.is_default, n.name))
    tenant = sorted((n for n in nets if n.own and not n.shared and not n.external), key=lambda n: n.name)
    reachable = [n for n in provider if _reachable(n)]
    profile: dict[str, Any] = {}
    choices: list[Choice] = []
    warnings: list[str] = []
    if not provider and not external:
        seen = ", ".join(sorted(n.name for n in nets)) or "none"
        raise CloudNotFoundError(
            f"cloud '{snap.cloud}' offers no network zenops can reach servers on: no shared (provider) network and "
            f"no external network for floating IPs (networks the project sees: {seen})",
            hint="ask the cloud's admin for a provider network or an external network, or write the profile by hand "
            "(see `zenops config example`)",
        )
    mode, best, mode_choice = _choose_mode(provider, external, reachable, warnings)
    profile["network_mode"] = mode
    choices.append(mode_choice)
    if provider:
        chosen = best or provider[0]
        profile["provider_network"] = chosen.name
        choices.append(_provider_choice(provider, chosen, mode))
    if external:
        profile["external_network"] = external[0].name
        choices.append(_external_choice(external, mode))
    if mode == "floating":
        choices.append(
            Choice(
                "tenant_network",
                None,
                "zenops creates a network zenops-<deployment> (10.98.<n>.0/24) per deployment; set tenant_network "
                "to reuse one of the project's instead",
                tuple(_net_label(n) for n in tenant),
            )
        )
    return profile, choices, warnings


# --- images -----------------------------------------------------------------------------------------------------

_DEBIAN = re.compile(r"debian|bookworm|trixie|bullseye", re.IGNORECASE)
_DEBIAN_12 = re.compile(r"(debian[\s_.-]*12(?!\d))|bookworm", re.IGNORECASE)


def _debian(im: Image) -> bool:
    distro = im.os_distro.lower()
    return distro == "debian" if distro else bool(_DEBIAN.search(im.name))


def _debian_12(im: Image) -> bool:
    if not _debian(im):
        return False
    if im.os_version:
        return im.os_version.split(".")[0] == "12" or im.os_version.lower() == "bookworm"
    return bool(_DEBIAN_12.search(im.name))


def _image_label(im: Image) -> str:
    facts = [x for x in (im.os_distro and f"{im.os_distro} {im.os_version}".strip(), im.created_at[:10]) if x]
    return f"{im.name} ({', '.join(facts)})" if facts else im.name


def _choose_image(snap: CloudSnapshot, os_image: str | None) -> tuple[dict[str, Any], Choice]:
    images = [im for im in snap.images if im.active]
    newest_first = sorted(images, key=lambda im: (im.created_at, im.name), reverse=True)
    debian = [im for im in newest_first if _debian(im)]
    if os_image is not None:
        found = next((im for im in images if os_image in (im.name, im.id)), None)
        if found is None:
            raise CloudNotFoundError(
                f"cloud '{snap.cloud}' has no active image '{os_image}' (--os-image)",
                hint=f"close matches: {close_matches(os_image, [im.name for im in images])}; "
                f"Debian images there: {', '.join(im.name for im in debian) or 'none'}",
            )
        chosen, reason = found, "named by --os-image"
    else:
        twelve = [im for im in debian if _debian_12(im)]
        if not twelve:
            others = ", ".join(_image_label(im) for im in debian)
            raise CloudNotFoundError(
                f"cloud '{snap.cloud}' has no active Debian 12 image"
                + (f" (Debian images there: {others})" if others else " (and no Debian image at all)"),
                hint="upload one (Debian's cloud image: https://cloud.debian.org/images/cloud/bookworm/latest/, "
                "`openstack image create --disk-format qcow2 --file debian-12-genericcloud-amd64.qcow2 "
                "--property os_distro=debian --property os_version=12 debian-12`), or pass --os-image NAME",
            )
        chosen = twelve[0]
        reason = "the newest Debian 12 image" if len(twelve) > 1 else "the only Debian 12 image"
    alts = tuple(_image_label(im) for im in debian if im is not chosen)
    user = chosen.admin_user or DEFAULT_IMAGE_USER
    profile = {"image": chosen.name, "image_user": user}
    how = "its os_admin_user" if chosen.admin_user else "Debian's cloud images' user"
    return profile, Choice("image", chosen.name, f"{_image_label(chosen)}: {reason}; logs in as {user} ({how})", alts)


# --- flavors ----------------------------------------------------------------------------------------------------


def _fits(snap: CloudSnapshot, catalogue: Mapping[str, tuple[int, int]]) -> list[FlavorFit]:
    """The cloud's flavors zenops knows or that are big enough, the recommended one first: one the catalogue knows
    by name, else the smallest as big as a catalogue flavor, else the biggest of the gp.5 family."""
    smallest = sorted(catalogue.items(), key=lambda kv: kv[1])
    known, sized, family = [], [], []
    for f in snap.flavors:
        big = next((n for n, (v, r) in smallest if f.vcpus >= v and f.ram_mib >= r), None)
        if f.name in catalogue:
            known.append(FlavorFit(f.name, f.vcpus, f.ram_mib, "in zenops's catalogue: CPU and price known"))
        elif big is not None:
            sized.append(FlavorFit(f.name, f.vcpus, f.ram_mib, f"as big as the catalogue's {big}"))
        elif f.name.startswith("gp.5."):
            family.append(FlavorFit(f.name, f.vcpus, f.ram_mib, "gp.5 family"))
    order = list(catalogue)
    known.sort(key=lambda x: order.index(x.name))
    sized.sort(key=lambda x: (x.vcpus, x.ram_mib, x.name))
    family.sort(key=lambda x: (-x.vcpus, -x.ram_mib, x.name))
    return known + sized + family


def _room(limits: Limits) -> tuple[Room, ...]:
    return (
        Room("cores", limits.max_cores, limits.cores_used, "vCPUs"),
        Room("ram", limits.max_ram_mib, limits.ram_used_mib, "MiB"),
        Room("instances", limits.max_instances, limits.instances_used, "servers"),
        Room("floating_ips", limits.max_floating_ips, limits.floating_ips_used, "floating IPs"),
    )


def _fits_now(room: tuple[Room, ...], fit: FlavorFit, floating: bool) -> int | None:
    per = {"cores": fit.vcpus, "ram": fit.ram_mib, "instances": 1, "floating_ips": 1 if floating else 0}
    counts = [r.free // per[r.limit] for r in room if r.free is not None and per[r.limit]]
    return min(counts) if counts else None


# --- the plan ---------------------------------------------------------------------------------------------------


def plan_profile(
    snap: CloudSnapshot, catalogue: Mapping[str, tuple[int, int]], *, os_image: str | None = None
) -> ProfilePlan:
    """Decide the profile of ``snap.cloud``. ``catalogue``: zenops's flavors, name -> (vCPUs, RAM MiB).
    CloudNotFoundError when the cloud lacks what a profile needs (a network servers can be reached on, a Debian 12
    image), naming the fix."""
    net_profile, choices, warnings = _choose_networks(snap)
    image_profile, image_choice = _choose_image(snap, os_image)
    choices.append(image_choice)
    fits = _fits(snap, catalogue)
    floating = net_profile["network_mode"] == "floating"
    room = _room(snap.limits)
    fits_now: int | None = None
    if fits:
        best = fits[0]
        choices.append(
            Choice(
                "flavor",
                best.name,
                f"{best.label()}: pass it to `zenops up --cloud {snap.cloud} --flavor {best.name}`",
                tuple(f.label() for f in fits[1:]),
            )
        )
        fits_now = _fits_now(room, best, floating)
        short = shortfalls(snap.limits, best.vcpus, best.ram_mib, 1, 1 if floating else 0)
        if short:
            warnings.append(
                f"the project's quota has no room for one server of {best.name} now: "
                + "; ".join(str(s) for s in short)
                + " (free resources, or ask for a bigger quota)"
            )
    else:
        need = ", ".join(
            f"{n} ({v} vCPU, {_gib(r)} GiB)" for n, (v, r) in sorted(catalogue.items(), key=lambda x: x[1])
        )
        biggest = max(snap.flavors, key=lambda f: (f.vcpus, f.ram_mib), default=None)
        have = (
            f"; the biggest here: {biggest.name} ({biggest.vcpus} vCPU, {_gib(biggest.ram_mib)} GiB)" if biggest else ""
        )
        warnings.append(
            f"no flavor of cloud '{snap.cloud}' is in zenops's catalogue, of the gp.5 family, or as big as a "
            f"catalogue flavor ({need}){have}: ask the cloud's admin for one, or describe yours under flavors: in "
            "the config file and pass it to `zenops up --flavor`"
        )
        choices.append(Choice("flavor", None, "no fitting flavor", tuple(f.name for f in snap.flavors)))
    return ProfilePlan(
        cloud=snap.cloud,
        profile={**net_profile, **image_profile},
        choices=tuple(choices),
        flavors=tuple(fits),
        room=room,
        fits_now=fits_now,
        warnings=tuple(warnings),
    )


# --- reading the cloud ------------------------------------------------------------------------------------------


def read_snapshot(conn: Any, cloud: str) -> CloudSnapshot:
    """What ``conn`` (an authenticated openstacksdk Connection, zenops.cloud.ops.connect) lists for the project:
    networks with their IPv4 subnets and what clouds.yaml says of them, active images, enabled flavors, limits.
    Errors are classified (zenops.cloud.errors.classify); nothing secret is read or kept."""
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.cloud.errors import CloudError, classify, retrying  # noqa: PLC0415

    try:
        project = str(conn.current_project_id)
        config = conn.config
        routed = set(config.get_external_ipv4_networks())
        nat = config.get_nat_source()
        cidrs: dict[str, list[str]] = {}
        for sub in retrying(lambda: list(conn.network.subnets())):
            if sub.ip_version == 4 and sub.cidr:
                cidrs.setdefault(str(sub.network_id), []).append(str(sub.cidr))
        networks = tuple(
            Network(
                name=str(n.name or n.id),
                id=str(n.id),
                shared=bool(n.is_shared),
                external=bool(n.is_router_external),
                own=str(n.project_id) == project,
                active=str(n.status or "ACTIVE").upper() == "ACTIVE",
                ipv4_cidrs=tuple(cidrs.get(str(n.id), ())),
                routes_externally=bool(routed & {n.name, n.id}),
                nat_source=nat is not None and nat in (n.name, n.id),
                is_default=bool(getattr(n, "is_default", False)),
            )
            for n in retrying(lambda: list(conn.network.networks()))
        )
        images = tuple(
            Image(
                name=str(im.name or im.id),
                id=str(im.id),
                os_distro=str(im.os_distro or (im.properties or {}).get("os_distro") or ""),
                os_version=str(im.os_version or (im.properties or {}).get("os_version") or ""),
                created_at=str(im.created_at or ""),
                admin_user=str(getattr(im, "os_admin_user", None) or (im.properties or {}).get("os_admin_user") or ""),
                active=str(im.status or "").lower() == "active",
            )
            for im in retrying(lambda: list(conn.image.images()))
        )
        flavors = tuple(
            Flavor(
                name=str(f.name),
                id=str(f.id),
                vcpus=int(f.vcpus),
                ram_mib=int(f.ram),
                disk_gb=int(f.disk or 0),
                ephemeral_gb=int(getattr(f, "ephemeral", 0) or 0),
            )
            for f in retrying(lambda: list(conn.compute.flavors()))
            if not getattr(f, "is_disabled", False)
        )
        limits = ops.limits(conn, cloud)
    except CloudError:
        raise
    except Exception as e:
        raise classify(e, cloud) from e
    return CloudSnapshot(cloud=cloud, networks=networks, images=images, flavors=flavors, limits=limits)
