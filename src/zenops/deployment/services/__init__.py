"""The services of a deployment: what runs beside its vLLM servers and follows them (the gateway, the metrics).

A service is one module here with one object that has the :class:`Service` methods, listed in :func:`services`. The
commands call every service through the functions below, never one by name:

- `zenops up` (zenops.serve): :func:`preflight` before anything is deployed, then :func:`apply` once the servers
  answer (a service the request turns on is installed or updated; one it turns off is removed);
- `zenops rollout`: :func:`update` whenever the deployment's servers change (a batch on other ports, a surge's new
  server, a revert);
- `zenops down`: :func:`remove`, before the servers go (clients are refused, not half-served);
- `zenops status`: :func:`status`, read live.

What a service applied is kept in the serving record (``services.<name>``: zenops.deployment.record), so that the
next command updates or removes what is there. A new service: a module here with its object, its line in
:func:`services`, its role (roles/<name>) and playbook, and its options in zenops.request_options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from zenops.context import RunContext

State = dict[str, Any]  # what a service keeps of itself in the serving record (JSON)


@dataclass(frozen=True)
class View:
    """What a service sees of its deployment."""

    inventory: Path  # the deployment's serving inventory
    # every vLLM server of the deployment: host -> [{instance, port, url, listen...}] (the serving record's shape)
    endpoints: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    request: Any = None  # the ServeRequest of `up` (None: the servers changed, the settings did not: a rollout)
    api_key_file: Path | None = None  # the deployment's API key on the controller (a path, never the key)
    hosts: frozenset[str] = frozenset()  # the inventory's hosts this run reached (`up`), for refusals
    limited: bool = False  # `up --limit`: only some hosts were served
    addresses: Mapping[str, str] = field(default_factory=dict)  # host -> fixed address a new server got (a surge)
    # the states of the services applied before this one in this run (a service may follow another: the metrics
    # run where the gateway runs)
    services: Mapping[str, State] = field(default_factory=dict)

    @property
    def instances(self) -> int:
        return sum(len(v) for v in self.endpoints.values())


class Service(Protocol):
    name: str

    def preflight(self, view: View) -> None:
        """Refuse (UsageError...) what `up` asks of this service before anything is deployed."""

    def apply(self, ctx: RunContext, view: View, had: State | None) -> State | None:
        """`up`: the service as the request wants it, given every server; None: off (``had`` is then removed)."""

    def update(self, ctx: RunContext, view: View, had: State) -> State:
        """The servers changed (``view.endpoints``): follow them; return ``had`` when nothing had to change."""

    def remove(self, ctx: RunContext, inventory: Path, had: State) -> None:
        """Take the service away from its host (`down`, or `up` turning it off)."""

    def status(self, ctx: RunContext, inventory: Path, had: State) -> dict[str, Any]:
        """What it shows in `zenops status`, read live (a failure raises; status() reports it as the service's)."""


def services() -> tuple[Service, ...]:
    """Every service, in the order they are applied and removed (the gateway first: clients are refused, not
    half-served; the metrics after it: they run where it runs). A new service adds its line here (imported here,
    not at the top: each module imports View)."""
    from zenops.deployment.services import gateway, metrics  # noqa: PLC0415

    return (gateway.SERVICE, metrics.SERVICE)


def preflight(view: View) -> None:
    for s in services():
        s.preflight(view)


def apply(ctx: RunContext, view: View, had: Mapping[str, Mapping[str, Any]]) -> dict[str, State]:
    """Every service after `up` served: the states to keep (a service off is left out)."""
    out: dict[str, State] = {}
    for s in services():
        state = s.apply(ctx, replace(view, services=dict(out)), dict(had[s.name]) if had.get(s.name) else None)
        if state:
            out[s.name] = state
    return out


def update(ctx: RunContext, view: View, had: Mapping[str, Mapping[str, Any]]) -> dict[str, State]:
    """Every service the deployment has, following its servers now; the states to keep."""
    out: dict[str, State] = {}
    for s in services():
        if had.get(s.name):
            out[s.name] = s.update(ctx, replace(view, services=dict(out)), dict(had[s.name]))
    return out


def remove(ctx: RunContext, inventory: Path, had: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Remove every service the deployment has; returns their names."""
    gone = []
    for s in services():
        if had.get(s.name):
            s.remove(ctx, inventory, dict(had[s.name]))
            gone.append(s.name)
    return gone


def status(ctx: RunContext, inventory: Path, had: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each service the deployment has: its recorded state and what it says live (``error`` when it could not)."""
    out: dict[str, dict[str, Any]] = {}
    for s in services():
        if not had.get(s.name):
            continue
        entry: dict[str, Any] = {"state": dict(had[s.name])}
        try:
            entry["live"] = s.status(ctx, inventory, dict(had[s.name]))
        except Exception as e:
            entry["error"] = str(e)
        out[s.name] = entry
    return out
