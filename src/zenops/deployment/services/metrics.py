"""The deployment's metrics (`up --metrics on`): Prometheus and a node_exporter on every host, from the distribution's
packages (roles/metrics, playbooks/metrics.yml).

- Prometheus runs where the gateway runs (its own server in cloud mode, `up --gateway-flavor`), else on the first
  host of the deployment. It listens on that host's loopback only: no port opens for it. It is read there: `zenops
  top` and `zenops status` over SSH, or `zenops ssh HOST -- curl -s 127.0.0.1:9090/api/v1/...`.
- It scrapes every vLLM instance's /metrics at the address the gateway reaches it by (the deployment's API key as
  bearer token), a node_exporter on every host (basic auth with a password of its own, generated next to the API key
  in the state dir; it listens on that one address, the loopback on Prometheus's own server) and HAProxy's exporter
  on the gateway's loopback. The targets carry the labels ``zenops_host`` and ``zenops_instance``.
- The API key and the metrics password reach Prometheus's host only; every other host keeps a bcrypt hash of the
  password (node_exporter's web config), nothing else. The scrapes are plain HTTP inside the deployment's network:
  the password and the key cross it in clear text (the key does so on every request the gateway forwards anyway).
- The targets follow the deployment: `up` writes them, a rollout rewrites them whenever its servers change (file_sd:
  no reload), `down` removes Prometheus and node_exporter from every host.

A service of zenops.deployment.services: :data:`SERVICE`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from zenops.context import RunContext
from zenops.deployment.services import Line, Preview, State, View
from zenops.deployment.services.gateway import Gateway, backends_from_endpoints
from zenops.deployment.store import Store
from zenops.errors import UsageError, ZenopsError
from zenops.option_table import row
from zenops.runner import RunSpec

PROMETHEUS_PORT = 9090  # roles/metrics: metrics_prometheus_port, on the loopback
NODE_PORT = 9100  # roles/metrics: metrics_node_exporter_port (roles/provision opens it inside the deployment's group)
HAPROXY_PORT = 8405  # roles/gateway: gateway_metrics_port, on the loopback
LOOPBACK = "127.0.0.1"
MODES: tuple[str, ...] = row("metrics").choices  # its option's row (``service="metrics"``)


@dataclass(frozen=True)
class Metrics:
    """Where the metrics run and what Prometheus scrapes, as kept in the serving record (``services.metrics``)."""

    host: str  # the host running Prometheus
    inventory: str = ""  # its own server's inventory (the gateway's); "": a host of the deployment's inventory
    nodes: Mapping[str, str] = field(default_factory=dict)  # deployment host -> the address its node_exporter uses
    vllm: tuple[Mapping[str, Any], ...] = ()  # [{host, instance, address, port}]
    haproxy: bool = False  # the gateway is on Prometheus's host: its exporter is scraped
    api_key_file: str = ""
    password_file: str = ""  # node_exporter's basic auth password on the controller ("": a record made before it)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nodes": dict(self.nodes), "vllm": [dict(t) for t in self.vllm]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metrics:
        return cls(
            host=str(data["host"]),
            inventory=str(data.get("inventory") or ""),
            nodes={str(k): str(v) for k, v in (data.get("nodes") or {}).items()},
            vllm=tuple(dict(t) for t in data.get("vllm") or ()),
            haproxy=bool(data.get("haproxy", False)),
            api_key_file=str(data.get("api_key_file") or ""),
            password_file=str(data.get("password_file") or ""),
        )

    @property
    def own_server(self) -> bool:
        return bool(self.inventory)

    @property
    def url(self) -> str:
        """Prometheus's API on its host (reachable there only)."""
        return f"http://{LOOPBACK}:{PROMETHEUS_PORT}"

    def node_targets(self) -> list[dict[str, Any]]:
        out = [{"host": h, "address": a, "port": NODE_PORT} for h, a in sorted(self.nodes.items())]
        if self.own_server:
            out.append({"host": self.host, "address": LOOPBACK, "port": NODE_PORT})
        return out

    def haproxy_targets(self) -> list[dict[str, Any]]:
        return [{"host": self.host, "address": LOOPBACK, "port": HAPROXY_PORT}] if self.haproxy else []

    def role_vars(self) -> dict[str, Any]:
        """The role's targets and credential files (playbooks/metrics.yml passes them on)."""
        out: dict[str, Any] = {
            "metrics_vllm_targets": [dict(t) for t in self.vllm],
            "metrics_node_targets": self.node_targets(),
            "metrics_haproxy_targets": self.haproxy_targets(),
        }
        if self.api_key_file:
            out["metrics_api_key_file"] = self.api_key_file
        if self.password_file:
            out["metrics_scrape_password_file"] = self.password_file
        return out


def wanted(mode: str) -> bool:
    if mode not in MODES:
        raise UsageError(f"--metrics {mode}: use one of {', '.join(MODES)}")
    return mode == "on"


def _listen_address(address: str) -> str:
    """The address a host's node_exporter listens on: the one Prometheus reaches it by, when it is an IP address;
    else (a DNS name) every address (basic auth still asks for the metrics password)."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "0.0.0.0"  # only when the host is known by a name, not an address
    return address


def plan(
    endpoints: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    gateway: Gateway | None,
    addresses: Mapping[str, str] | None = None,
    api_key_file: Path | str | None = None,
    password_file: Path | str | None = None,
) -> Metrics:
    """Where Prometheus runs and what it scrapes, for these servers (the serving record's endpoints): on the gateway's
    host (its own server when it has one), else on the first host; every instance at the address the gateway reaches
    it by (``addresses``: a cloud server's fixed address)."""
    if not endpoints:
        raise ZenopsError("the deployment has no server: there is nothing for its metrics to scrape")
    reach = {**(gateway.addresses if gateway is not None else {}), **(addresses or {})}
    backends = backends_from_endpoints(endpoints, reach)
    vllm = tuple({"host": b.host, "instance": b.instance, "address": b.address, "port": b.port} for b in backends)
    nodes = {b.host: b.address for b in backends}
    host = gateway.host if gateway is not None else sorted(endpoints)[0]
    return Metrics(
        host=host,
        inventory=gateway.inventory if gateway is not None else "",
        nodes=nodes,
        vllm=vllm,
        haproxy=gateway is not None,
        api_key_file=str(Path(api_key_file).resolve()) if api_key_file else "",
        password_file=str(Path(password_file).resolve()) if password_file else "",
    )


def _run(
    ctx: RunContext,
    inventory: Path,
    hosts: Iterable[str],
    action: str,
    *,
    prometheus_host: str = "",
    extravars: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    hosts = sorted(set(hosts))
    spec = RunSpec(
        playbook="metrics",
        inventory=inventory,
        extravars={
            "zenops_metrics_action": action,
            "zenops_metrics_prometheus_host": prometheus_host,
            **(extravars or {}),
        },
        limit=",".join(hosts),
        verbosity=ctx.verbosity,
    )
    run = ctx.run(spec)
    if not prometheus_host:
        return {}
    result = run.host_facts.get(prometheus_host, {}).get("zenops_metrics_result")
    if not isinstance(result, Mapping):
        raise ZenopsError(
            f"the metrics play on {prometheus_host} reported no result ({action})",
            hint=f"see the run log {run.run_dir}",
        )
    return dict(result)


def install(
    ctx: RunContext, deployment_inventory: Path, m: Metrics, hosts: Iterable[str] | None = None
) -> dict[str, Any]:
    """node_exporter on ``hosts`` of the deployment (default: all of ``m.nodes``) and Prometheus on its host, with
    ``m``'s targets. Returns Prometheus's result ({url, targets})."""
    hosts = set(m.nodes if hosts is None else hosts)
    listen = {h: _listen_address(a) for h, a in m.nodes.items()}
    vars_ = {**m.role_vars(), "zenops_metrics_listen": listen}
    if m.own_server:
        if hosts:
            _run(ctx, deployment_inventory, hosts, "present", extravars=vars_)
        return _run(
            ctx, Path(m.inventory), [m.host], "present", prometheus_host=m.host,
            extravars={**vars_, "zenops_metrics_listen": {m.host: LOOPBACK}},
        )  # fmt: skip
    return _run(ctx, deployment_inventory, hosts | {m.host}, "present", prometheus_host=m.host, extravars=vars_)


def targets(ctx: RunContext, deployment_inventory: Path, m: Metrics) -> dict[str, Any]:
    """Only Prometheus's targets rewritten (the servers changed, the hosts did not): file_sd, no reload."""
    inventory = Path(m.inventory) if m.own_server else deployment_inventory
    return _run(ctx, inventory, [m.host], "targets", prometheus_host=m.host, extravars=m.role_vars())


def remove(ctx: RunContext, deployment_inventory: Path, m: Metrics, hosts: Iterable[str] | None = None) -> None:
    """Prometheus and node_exporter gone from ``hosts`` (default: every host they are on)."""
    everywhere = hosts is None
    hosts = set(m.nodes if hosts is None else hosts)
    if m.own_server:
        if hosts:
            _run(ctx, deployment_inventory, hosts, "absent")
        if everywhere:
            _run(ctx, Path(m.inventory), [m.host], "absent")
        return
    if everywhere:
        hosts.add(m.host)
    if hosts:
        _run(ctx, deployment_inventory, hosts, "absent")


def status(ctx: RunContext, deployment_inventory: Path, m: Metrics) -> dict[str, Any]:
    inventory = Path(m.inventory) if m.own_server else deployment_inventory
    return _run(ctx, inventory, [m.host], "status", prometheus_host=m.host)


def target_summary(targets: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Prometheus's active targets as `status` shows them: job, host, instance, health, last error."""
    out = []
    for t in targets:
        labels = t.get("labels") or {}
        out.append(
            {
                "job": labels.get("job"),
                "host": labels.get("zenops_host"),
                "instance": labels.get("zenops_instance"),
                "url": t.get("scrapeUrl"),
                "health": t.get("health"),
                "error": t.get("lastError") or "",
            }
        )
    return sorted(out, key=lambda t: (str(t["job"]), str(t["host"]), str(t["instance"])))


# --- the service (zenops.deployment.services) -----------------------------------------------------------------------


class MetricsService:
    """`up --metrics on|off` (ServeRequest.metrics): Prometheus and node_exporter for the deployment."""

    name = "metrics"

    def preflight(self, view: View) -> None:
        if view.request is not None:
            wanted(view.request.metrics)

    def apply(self, ctx: RunContext, view: View, had: State | None) -> State | None:
        req = view.request
        old = Metrics.from_dict(had) if had else None
        if not wanted(req.metrics):
            if old is not None:
                ctx.note(f"metrics: off (--metrics off); removing Prometheus and node_exporter from {_hosts(old)}")
                remove(ctx, view.inventory, old)
            return None
        gw = view.services.get("gateway")
        new = plan(
            view.endpoints,
            gateway=Gateway.from_dict(gw) if gw else None,
            api_key_file=view.api_key_file,
            password_file=Store(ctx.config, view.inventory).metrics_password(),
        )
        if old is not None and (old.host, old.inventory) != (new.host, new.inventory):
            ctx.note(f"metrics: Prometheus moves from {old.host} to {new.host}")
            remove(ctx, view.inventory, old)
        elif old is not None and set(old.nodes) - set(new.nodes):
            remove(ctx, view.inventory, old, set(old.nodes) - set(new.nodes))
        where = "the gateway's own server " if new.own_server else ""
        ctx.note(
            f"metrics: Prometheus on {where}{new.host} (127.0.0.1:{PROMETHEUS_PORT}), node_exporter on "
            f"{len(new.nodes) + (1 if new.own_server else 0)} host(s), {len(new.vllm)} vLLM target(s)"
        )
        result = install(ctx, view.inventory, new)
        _warn_down(ctx, result)
        return new.to_dict()

    def update(self, ctx: RunContext, view: View, had: State) -> State:
        """The targets as the servers are now: new hosts get node_exporter, the targets files are rewritten."""
        old = Metrics.from_dict(had)
        gw = view.services.get("gateway")
        new = plan(
            view.endpoints,
            gateway=Gateway.from_dict(gw) if gw else None,
            addresses=view.addresses,
            api_key_file=old.api_key_file or None,
            password_file=old.password_file or Store(ctx.config, view.inventory).metrics_password(),
        )
        if not gw:  # without a gateway Prometheus stays where `up` put it, even when the first host changes
            new = replace(new, host=old.host, inventory=old.inventory)
        if new == old:
            return had
        joined = set(new.nodes) - set(old.nodes)
        if not old.password_file:  # made before node_exporter had a password of its own: every host moves to it
            ctx.note("metrics: node_exporter gets a password of its own; the API key stays on Prometheus's host only")
            install(ctx, view.inventory, new)
        elif joined:
            install(ctx, view.inventory, new, joined)
        else:
            targets(ctx, view.inventory, new)
        scraped = ", ".join(f"{t['host']}:{t['port']}" for t in new.vllm)
        ctx.note(f"metrics: Prometheus now scrapes {scraped}")
        return new.to_dict()

    def remove(self, ctx: RunContext, inventory: Path, had: State) -> None:
        m = Metrics.from_dict(had)
        ctx.note(f"removing Prometheus and node_exporter from {_hosts(m)}")
        remove(ctx, inventory, m)

    def status(self, ctx: RunContext, inventory: Path, had: State) -> dict[str, Any]:
        m = Metrics.from_dict(had)
        result = status(ctx, inventory, m)
        found = target_summary(result.get("targets") or [])
        return {
            "host": m.host,
            "url": f"{m.url} (on {m.host})",
            "targets": found,
            "up": sum(1 for t in found if t["health"] == "up"),
        }

    def lines(self, entry: Mapping[str, Any]) -> list[Line]:
        """Where Prometheus is, how many targets are up, each one that is not; a line on stderr when it could not be
        read."""
        from zenops.report.cells import markup  # noqa: PLC0415

        if entry.get("error"):
            return [Line(f"[yellow]metrics status unavailable:[/] {markup(entry['error'])}", err=True)]
        live = entry.get("live") or {}
        found = live.get("targets") or []
        out = [
            Line(
                f"metrics: Prometheus at {markup(live.get('url'))}, {markup(live.get('up', 0))} of {len(found)} "
                "target(s) up (`zenops top` reads it)"
            )
        ]
        for t in found:
            if t.get("health") != "up":
                out.append(
                    Line(
                        f"  {markup(t.get('job'))} {markup(t.get('url'))} {markup(t.get('health'))}: "
                        f"{markup(t.get('error') or '')}"
                    )
                )
        return out

    def plan(self, view: View, had: State | None) -> Preview:
        """What :meth:`apply` would do: off (and removed when it is there), or where Prometheus runs and what it
        scrapes (the metrics password is not made: a dry run writes nothing)."""
        req = view.request
        old = Metrics.from_dict(had) if had else None
        if not wanted(req.metrics):
            gone = f"; would be removed from {_hosts(old)}" if old is not None else ""
            return Preview(self.name, False, f"off (--metrics {req.metrics}){gone}", {"mode": req.metrics})
        gw = view.services.get("gateway")
        new = plan(view.endpoints, gateway=Gateway.from_dict(gw) if gw else None)
        where = "the gateway's own server " if new.own_server else ""
        scraped = [f"{t['address']}:{t['port']}" for t in new.vllm]
        summary = (
            f"on; Prometheus on {where}{new.host} ({LOOPBACK}:{PROMETHEUS_PORT}), node_exporter on "
            f"{len(new.node_targets())} host(s), scraping {', '.join(scraped) or 'no server'}"
        )
        details = {
            "mode": req.metrics,
            "prometheus_host": new.host,
            "own_server": new.own_server,
            "targets": {
                "vllm": scraped,
                "node": [f"{t['address']}:{t['port']}" for t in new.node_targets()],
                "haproxy": [f"{t['address']}:{t['port']}" for t in new.haproxy_targets()],
            },
        }
        return Preview(self.name, True, summary, details, new.to_dict())

    def drainable(self, had: State, addresses: Mapping[str, str]) -> None:
        """Clients do not go through the metrics."""
        return None


def _hosts(m: Metrics) -> str:
    return ", ".join(sorted(set(m.nodes) | {m.host}))


def _warn_down(ctx: RunContext, result: Mapping[str, Any]) -> None:
    down = [t for t in target_summary(result.get("targets") or []) if t["health"] != "up"]
    for t in down:
        ctx.note(f"warning: metrics target {t['job']} {t['url']} is {t['health']}: {t['error'] or 'not scraped yet'}")


SERVICE = MetricsService()
