"""The fleet endpoint: HAProxy (roles/gateway) on one host of the deployment, or on a small server of its own in cloud
mode (`up --gateway-flavor`: then it has an inventory of its own), balancing every vLLM instance of the serving record
(least outstanding requests, /health checks); in cloud mode the backends are the servers' fixed addresses. Its
runtime API drains an instance (no new requests, in-flight ones finish) and puts it back: what `zenops rollout` does
around each batch.

The deployment's first service (zenops.deployment.services: :data:`SERVICE`, which `up`, `rollout`, `down` and
`status` call), and the traffic manager of zenops.rollout (drain, ready). Playbook: playbooks/gateway.yml (actions
present, absent, drain, ready, status). A server's name in HAProxy is ``<inventory host>-<port>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zenops.context import RunContext
from zenops.deployment.services import Line, Preview, State, View
from zenops.errors import UsageError, ZenopsError
from zenops.option_table import row
from zenops.runner import RunSpec

# its options' rows (zenops.option_table: ``service="gateway"``) say its modes and its default port
MODES: tuple[str, ...] = row("gateway_mode").choices
DEFAULT_PORT = int(row("gateway_port").default)


@dataclass(frozen=True)
class Backend:
    name: str
    host: str
    instance: int
    address: str
    port: int

    def role_entry(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "port": self.port}


@dataclass(frozen=True)
class Gateway:
    """Where the gateway runs and what it balances, as kept in the serving record (``gateway``)."""

    host: str
    port: int
    url: str
    backends: tuple[Backend, ...] = ()
    tls: bool = False
    tls_cert_file: str = ""  # kept so that a later update (a rollout's new ports) stays on HTTPS
    inventory: str = ""  # the gateway's own server's inventory; "": a host of the deployment's inventory
    addresses: Mapping[str, str] = field(default_factory=dict)  # host -> the address the gateway reaches it by
    api_key_file: str = ""  # the deployment's key on the controller: the gateway requires it (a path, not the key)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "backends": [asdict(b) for b in self.backends], "addresses": dict(self.addresses)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Gateway:
        return cls(
            host=str(data["host"]),
            port=int(data["port"]),
            url=str(data.get("url") or ""),
            backends=tuple(
                Backend(**{k: b[k] for k in Backend.__dataclass_fields__}) for b in data.get("backends", [])
            ),
            tls=bool(data.get("tls", False)),
            tls_cert_file=str(data.get("tls_cert_file") or ""),
            inventory=str(data.get("inventory") or ""),
            addresses={str(k): str(v) for k, v in (data.get("addresses") or {}).items()},
            api_key_file=str(data.get("api_key_file") or ""),
        )

    def names_on(self, hosts: Iterable[str]) -> list[str]:
        wanted = set(hosts)
        return [b.name for b in self.backends if b.host in wanted]

    def run_inventory(self, deployment_inventory: Path) -> Path:
        """The inventory the gateway's host is in: its own server's, or the deployment's."""
        return Path(self.inventory) if self.inventory else deployment_inventory

    @property
    def own_server(self) -> bool:
        return bool(self.inventory)

    # --- a Drainable (zenops.deployment.services): what the rollout and bench see of it -------------------------

    def address(self) -> str:
        """The address a serving host reaches the gateway at: its own server's fixed address where known, else the
        endpoint's host."""
        return self.addresses.get(self.host) or urlsplit(self.url).hostname or self.host

    def drain(self, ctx: RunContext, inventory: Path, names: list[str], *, timeout: int) -> None:
        drain(ctx, inventory, self, names, timeout=timeout)

    def ready(self, ctx: RunContext, inventory: Path, names: list[str], *, timeout: int = 60) -> None:
        ready(ctx, inventory, self, names, timeout=timeout)


def backend_name(host: str, port: int) -> str:
    return f"{host}-{port}"


def backends_from_endpoints(
    endpoints: Mapping[str, Iterable[Mapping[str, Any]]], addresses: Mapping[str, str] | None = None
) -> tuple[Backend, ...]:
    """One backend per server of the serving record's endpoints (host -> [{instance, port, url, listen...}]), reached
    at ``addresses[host]`` where given (a cloud server's fixed address), else at the one address the server listens
    at (``listen``: an own host's zenops_private_address), else at its endpoint's host."""
    out = []
    for host in sorted(endpoints):
        for ep in endpoints[host]:
            port = int(ep["port"])
            address = (
                (addresses or {}).get(host)
                or str(ep.get("listen") or "")
                or urlsplit(str(ep.get("url") or "")).hostname
                or host
            )
            out.append(Backend(backend_name(host, port), host, int(ep.get("instance", 0)), address, port))
    return tuple(out)


def wanted(mode: str, instances: int) -> bool:
    """`--gateway auto` (the default): on when the deployment has more than one instance."""
    if mode not in MODES:
        raise UsageError(f"--gateway {mode}: use one of {', '.join(MODES)}")
    return mode == "on" or (mode == "auto" and instances > 1)


def fronts(mode: str, instances: int | None) -> bool:
    """Whether a gateway fronts the deployment's servers, so that their vLLM ports stay closed to the operator (open
    between the servers only, the gateway's port open instead): :func:`wanted`, the one rule. ``instances`` None:
    not planned yet (`up --cloud` makes the servers before the plan counts the instances): fronted unless --gateway
    off, so the ports are never opened on a guess; the gateway service sets them once it decides."""
    if instances is None:
        return wanted(mode, 2)  # on or auto: the plan may well give several instances
    return wanted(mode, instances)


def _run(
    ctx: RunContext, inventory: Path, host: str, action: str, extravars: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    spec = RunSpec(
        playbook="gateway",
        inventory=inventory,
        extravars={"zenops_gateway_host": host, "zenops_gateway_action": action, **(extravars or {})},
        limit=host,
        verbosity=ctx.verbosity,
    )
    run = ctx.run(spec)
    result = run.host_facts.get(host, {}).get("zenops_gateway_result")
    if not isinstance(result, Mapping):
        raise ZenopsError(
            f"the gateway play on {host} reported no result ({action})", hint=f"see the run log {run.run_dir}"
        )
    return dict(result)


def apply(
    ctx: RunContext,
    inventory: Path,
    host: str,
    backends: Iterable[Backend],
    *,
    port: int = DEFAULT_PORT,
    tls_cert_file: Path | None = None,
    own_inventory: Path | None = None,
    addresses: Mapping[str, str] | None = None,
    api_key_file: Path | None = None,
) -> Gateway:
    """Install or update the gateway on ``host`` (of ``own_inventory`` when it has a server of its own, else of the
    deployment's ``inventory``) with these backends; returns what the serving record keeps. With ``api_key_file`` the
    gateway itself refuses a request without the deployment's key (roles/gateway: gateway_api_key_file)."""
    backends = tuple(backends)
    extravars: dict[str, Any] = {"gateway_backends": [b.role_entry() for b in backends], "gateway_port": port}
    cert = str(tls_cert_file.resolve()) if tls_cert_file is not None else ""
    if cert:
        extravars["gateway_tls_cert_file"] = cert
    key = str(api_key_file.resolve()) if api_key_file is not None else ""
    if key:
        extravars["gateway_api_key_file"] = key
    result = _run(ctx, own_inventory or inventory, host, "present", extravars)
    return Gateway(
        host=host,
        port=port,
        url=str(result.get("url") or ""),
        backends=backends,
        tls=bool(cert),
        tls_cert_file=cert,
        inventory=str(own_inventory or ""),
        addresses=dict(addresses or {}),
        api_key_file=key,
    )


def update(ctx: RunContext, inventory: Path, gw: Gateway, backends: Iterable[Backend]) -> Gateway:
    """The same gateway (host, port, TLS, its own server) balancing these backends now."""
    return apply(
        ctx,
        inventory,
        gw.host,
        backends,
        port=gw.port,
        tls_cert_file=Path(gw.tls_cert_file) if gw.tls_cert_file else None,
        own_inventory=Path(gw.inventory) if gw.inventory else None,
        addresses=gw.addresses,
        api_key_file=Path(gw.api_key_file) if gw.api_key_file else None,
    )


@dataclass
class ServerState:
    name: str
    status: str
    in_flight: int
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def serving(self) -> bool:
        return self.status.startswith("UP")


def _states(result: Mapping[str, Any]) -> list[ServerState]:
    return [
        ServerState(str(s.get("name")), str(s.get("status", "?")), int(s.get("in_flight", 0) or 0), s)
        for s in result.get("servers") or []
    ]


def status(ctx: RunContext, inventory: Path, gw: Gateway) -> list[ServerState]:
    return _states(_run(ctx, gw.run_inventory(inventory), gw.host, "status", {"gateway_port": gw.port}))


def drain(
    ctx: RunContext, inventory: Path, gw: Gateway, names: list[str], *, timeout: int, allow_last: bool = False
) -> list[ServerState]:
    """Take ``names`` out of rotation and wait (``timeout`` s at most) until their in-flight requests finished.
    The role refuses to drain the last server that serves, unless ``allow_last``."""
    extravars = {
        "zenops_gateway_servers": names,
        "gateway_drain_timeout": timeout,
        "gateway_drain_allow_last": allow_last,
        "gateway_port": gw.port,
    }
    return _states(_run(ctx, gw.run_inventory(inventory), gw.host, "drain", extravars))


def ready(ctx: RunContext, inventory: Path, gw: Gateway, names: list[str], *, timeout: int = 60) -> list[ServerState]:
    """Put ``names`` back in rotation and wait until their health checks say UP."""
    extravars = {"zenops_gateway_servers": names, "gateway_ready_timeout": timeout, "gateway_port": gw.port}
    return _states(_run(ctx, gw.run_inventory(inventory), gw.host, "ready", extravars))


def remove(ctx: RunContext, inventory: Path, gw: Gateway) -> None:
    _run(ctx, gw.run_inventory(inventory), gw.host, "absent", {"gateway_port": gw.port})


# --- the service (zenops.deployment.services) -----------------------------------------------------------------------


class GatewayService:
    """`up --gateway auto|on|off` (ServeRequest.gateway*): HAProxy in front of every server of the deployment."""

    name = "gateway"

    def preflight(self, view: View) -> None:
        req = view.request
        if req is None or not req.gateway_host or view.limited or req.gateway_inventory is not None:
            return
        if view.hosts and req.gateway_host not in view.hosts:
            raise UsageError(
                f"--gateway-host {req.gateway_host} is not a host of {view.inventory}",
                hint=f"one of: {', '.join(sorted(view.hosts))}",
            )

    def apply(self, ctx: RunContext, view: View, had: State | None) -> State | None:
        """On: updated with every server of the deployment; off: removed when there was one."""
        req = view.request
        old = Gateway.from_dict(had) if had else None
        if not fronts(req.gateway, view.instances):
            if old is not None:
                ctx.note(f"gateway: off (--gateway {req.gateway}); removing it from {old.host}")
                remove(ctx, view.inventory, old)
            elif req.gateway == "auto":
                ctx.note("gateway: off (one instance; --gateway on adds one)")
            _firewall(ctx, view, fronted=False)
            return None
        host = req.gateway_host or (old.host if old else sorted(view.endpoints)[0])
        own = req.gateway_inventory
        if own is None and old is not None and old.host == host and old.own_server:
            own = Path(old.inventory)  # e.g. `up -i <a cloud deployment's inventory>`: its gateway keeps its server
        addresses = dict(req.gateway_addresses) or (dict(old.addresses) if old else {})
        why = "--gateway on" if req.gateway == "on" else f"{view.instances} instances"
        where = "its own server " if own is not None else ""
        ctx.note(f"gateway: on ({why}); HAProxy on {where}{host}, port {req.gateway_port}")
        if old is not None and old.host != host:
            remove(ctx, view.inventory, old)
        made = apply(
            ctx,
            view.inventory,
            host,
            backends_from_endpoints(view.endpoints, addresses),
            port=req.gateway_port,
            tls_cert_file=req.gateway_tls_cert_file,
            own_inventory=own,
            addresses=addresses,
            api_key_file=view.api_key_file,
        )
        _firewall(ctx, view, fronted=True)
        return made.to_dict()

    def update(self, ctx: RunContext, view: View, had: State) -> State:
        """The same gateway balancing the servers now, applied when its backends change (other ports or instances,
        a surge's new server joining or its old one gone)."""
        gw = with_addresses(Gateway.from_dict(had), view.addresses)
        backends = backends_from_endpoints(view.endpoints, gw.addresses)
        if {b.name for b in backends} == {b.name for b in gw.backends}:
            return had
        made = update(ctx, view.inventory, gw, backends)
        ctx.note(f"the gateway now balances {', '.join(b.name for b in backends)}")
        return made.to_dict()

    def remove(self, ctx: RunContext, inventory: Path, had: State) -> None:
        gw = Gateway.from_dict(had)
        ctx.note(f"removing the gateway on {gw.host} ({gw.url})")
        remove(ctx, inventory, gw)

    def status(self, ctx: RunContext, inventory: Path, had: State) -> dict[str, Any]:
        """Each backend as HAProxy sees it now: UP, DRAIN, DOWN, in-flight requests."""
        gw = Gateway.from_dict(had)
        return {
            "url": gw.url,
            "host": gw.host,
            "backends": [
                {"name": s.name, "status": s.status, "in_flight": s.in_flight} for s in status(ctx, inventory, gw)
            ],
        }

    def lines(self, entry: Mapping[str, Any]) -> list[Line]:
        """The endpoint, then each backend as HAProxy sees it; a line on stderr when it could not be read."""
        from zenops.report.cells import markup  # noqa: PLC0415

        state = entry.get("state") or {}
        out = [Line(f"endpoint: {markup(str(state.get('url')))} (gateway on {markup(state.get('host'))})")]
        for b in (entry.get("live") or {}).get("backends") or []:
            out.append(Line(f"  {markup(b['name']):<28} {markup(b['status']):<10} in flight {markup(b['in_flight'])}"))
        if entry.get("error"):
            out.append(Line(f"[yellow]gateway status unavailable:[/] {markup(entry['error'])}", err=True))
        return out

    def plan(self, view: View, had: State | None) -> Preview:
        """What :meth:`apply` would do: off (and removed when there is one), or on which host and port, with TLS
        or not, balancing how many servers."""
        req = view.request
        old = Gateway.from_dict(had) if had else None
        details: dict[str, Any] = {"mode": req.gateway}
        if not fronts(req.gateway, view.instances):
            why = "one instance; --gateway on adds one" if req.gateway == "auto" else f"--gateway {req.gateway}"
            gone = f"; would be removed from {old.host}" if old is not None else ""
            return Preview(self.name, False, f"off ({why}){gone}", {**details, "remove_from": old and old.host})
        host = req.gateway_host or (old.host if old else sorted(view.endpoints)[0])
        own = req.gateway_inventory
        if own is None and old is not None and old.host == host and old.own_server:
            own = Path(old.inventory)
        backends = backends_from_endpoints(view.endpoints, dict(req.gateway_addresses))
        tls = req.gateway_tls_cert_file is not None
        why = "--gateway on" if req.gateway == "on" else f"{view.instances} instances"
        where = "its own server " if own is not None else ""
        summary = (
            f"on ({why}); HAProxy on {where}{host}, port {req.gateway_port}, {'HTTPS' if tls else 'plain HTTP'}, "
            f"balancing {len(backends)} server(s)"
        )
        details.update(host=host, port=req.gateway_port, tls=tls, own_server=own is not None,
                       backends=[b.name for b in backends])  # fmt: skip
        state = Gateway(host, req.gateway_port, "", backends, tls, inventory=str(own or ""))
        return Preview(self.name, True, summary, details, state.to_dict())

    def drainable(self, had: State, addresses: Mapping[str, str]) -> Gateway:
        """The gateway as recorded, reaching ``addresses``' hosts by those addresses too (a surge's new server)."""
        return with_addresses(Gateway.from_dict(had), addresses)


def _firewall(ctx: RunContext, view: View, *, fronted: bool) -> None:
    """A cloud deployment's security group follows the gateway: the vLLM ports open to the operator only when no
    gateway fronts the servers (zenops.deployment.firewall; nothing for your own hosts)."""
    from zenops.deployment.firewall import follow_gateway  # noqa: PLC0415

    follow_gateway(ctx, view.inventory, fronted=fronted, gateway_port=int(view.request.gateway_port))


def with_addresses(gw: Gateway, extra: Mapping[str, str]) -> Gateway:
    """The gateway reaching these hosts by these addresses too (a surge's new server, before the record has it)."""
    return replace(gw, addresses={**gw.addresses, **extra}) if extra else gw


SERVICE = GatewayService()
