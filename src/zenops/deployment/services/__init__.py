"""The services of a deployment: what runs beside its vLLM servers and follows them (the gateway, the metrics).

A service is one module here with one object that has the :class:`Service` methods, listed in :func:`services`. The
commands call every service through the functions below, never one by name:

- `zenops up` (zenops.serve): :func:`preflight` before anything is deployed, then :func:`apply` once the servers
  answer (a service the request turns on is installed or updated; one it turns off is removed);
- `zenops rollout`: :func:`update` whenever the deployment's servers change (a batch on other ports, a surge's new
  server, a revert);
- `zenops down`: :func:`remove`, before the servers go (clients are refused, not half-served);
- `zenops status`: :func:`status`, read live, then :func:`lines`, each service's own lines;
- `zenops up --dry-run`: :func:`plan`, what each service would do (nothing runs);
- `zenops rollout` and `zenops bench --through-gateway`: :func:`drainable`, the service every client request goes
  through (a :class:`Drainable`: it takes servers out of rotation and puts them back), whichever service that is;
- `zenops rollout`: :func:`paused`, every service that changes the deployment by itself (a :class:`Pausable`: the
  scaling loop) paused and its state taken back for the rollout, given back and resumed after it.

What a service applied is kept in the serving record (``services.<name>``: zenops.deployment.record), so that the
next command updates or removes what is there. A new service: a module here with its object, its line in
:func:`services`, its role (roles/<name>) and playbook, and its options: rows of zenops.option_table (or
zenops.request_options) tagged ``service="<name>"`` (:func:`rows` reads them by that tag).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from zenops.context import RunContext
    from zenops.request_options import Option

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


@dataclass(frozen=True)
class Line:
    """One line a service shows in `zenops status`: rich markup, with what hosts and records said escaped
    (zenops.report.cells.markup); on stderr when ``err`` (the service could not be read)."""

    text: str
    err: bool = False


@dataclass(frozen=True)
class Preview:
    """What a service would do (`zenops up --dry-run`): ``summary`` is its line, ``details`` what `--json` adds;
    ``state`` the state it would keep, as far as a dry run knows it (a later service may follow it: the metrics
    go where the gateway goes)."""

    name: str
    on: bool
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    state: State | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"on": self.on, "summary": self.summary, **self.details}


class Drainable(Protocol):
    """The service every client request goes through, seen by the rollout and bench: it names the servers behind
    it, takes some out of rotation (their in-flight requests finish) and puts them back, and is the deployment's
    one endpoint."""

    @property
    def host(self) -> str: ...  # the host it runs on

    @property
    def port(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def tls(self) -> bool: ...

    @property
    def own_server(self) -> bool: ...  # on a server of its own (no engine image there)

    def names_on(self, hosts: Iterable[str]) -> list[str]:
        """Its names of the servers on ``hosts``."""
        ...

    def address(self) -> str:
        """The address a serving host reaches it at."""
        ...

    def drain(self, ctx: RunContext, inventory: Path, names: list[str], *, timeout: int) -> None:
        """Take ``names`` out of rotation; back once their in-flight requests finished (``timeout`` s at most)."""
        ...

    def ready(self, ctx: RunContext, inventory: Path, names: list[str], *, timeout: int = 60) -> None:
        """Put ``names`` back in rotation; back once their health checks pass."""
        ...


class Pausable(Protocol):
    """A service that changes the deployment by itself (the scaling loop adds and removes servers): an operator's
    command that changes it too (a rollout) pauses it, takes its state back (:meth:`pull`: the servers it added are
    then the command's too), and gives the state back (:meth:`push`) before it resumes: the two never fight."""

    def pause(self, ctx: RunContext, inventory: Path, had: State, *, by: str, reason: str) -> None:
        """Back once the step in flight finished and the service holds still."""
        ...

    def resume(self, ctx: RunContext, inventory: Path, had: State) -> None: ...

    def pull(self, ctx: RunContext, inventory: Path, had: State) -> list[Path]:
        """Its copy of the deployment's state back to the controller; the files written."""
        ...

    def push(self, ctx: RunContext, inventory: Path, had: State) -> None:
        """The controller's state of the deployment to it."""
        ...


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

    def lines(self, entry: Mapping[str, Any]) -> list[Line]:
        """Its lines in `zenops status`, from its :func:`status` entry ({state, live} or {state, error})."""

    def plan(self, view: View, had: State | None) -> Preview:
        """`up --dry-run`: what :meth:`apply` would do with ``view`` (nothing runs, nothing is written)."""

    def drainable(self, had: State, addresses: Mapping[str, str]) -> Drainable | None:
        """The service as a :class:`Drainable` (reaching ``addresses``' hosts by those addresses too: a surge's new
        server), or None: clients do not go through it."""


def services() -> tuple[Service, ...]:
    """Every service, in the order they are applied and removed (the gateway first: clients are refused, not
    half-served; the metrics after it: they run where it runs). A new service adds its line here (imported here,
    not at the top: each module imports View)."""
    from zenops.deployment.services import gateway, metrics, scaler  # noqa: PLC0415

    return (gateway.SERVICE, metrics.SERVICE, scaler.SERVICE)


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


def lines(entries: Mapping[str, Mapping[str, Any]]) -> list[Line]:
    """The lines of every service in ``entries`` (what :func:`status` returned), in the services' order."""
    return [line for s in services() if entries.get(s.name) for line in s.lines(entries[s.name])]


def plan(view: View, had: Mapping[str, Mapping[str, Any]]) -> list[Preview]:
    """What every service would do after `up` (``view.request``) served ``view.endpoints`` (`--dry-run`)."""
    out: list[Preview] = []
    planned: dict[str, State] = {}
    for s in services():
        p = s.plan(replace(view, services=dict(planned)), dict(had[s.name]) if had.get(s.name) else None)
        if p.state:
            planned[s.name] = p.state
        out.append(p)
    return out


def drainable(had: Mapping[str, Mapping[str, Any]], addresses: Mapping[str, str] | None = None) -> Drainable | None:
    """The deployment's :class:`Drainable` service (``had``: the services' states, as recorded), or None: no
    service of it fronts its servers."""
    for s in services():
        if had.get(s.name):
            d = s.drainable(dict(had[s.name]), addresses or {})
            if d is not None:
                return d
    return None


def server_port(had: Mapping[str, Mapping[str, Any]]) -> int:
    """The port a new server of the deployment is opened to (its security group: what clients reach): the
    :class:`Drainable` service's port, as recorded (``had``: the services' states), else the gateway's default port
    (zenops.deployment.services.gateway.DEFAULT_PORT: where a gateway added later listens)."""
    d = drainable(had)
    if d is not None:
        return d.port
    from zenops.deployment.services import gateway  # noqa: PLC0415  (it imports View from here)

    return gateway.DEFAULT_PORT


def pausable(service: object) -> Pausable | None:
    """``service`` as a :class:`Pausable`, or None: it changes nothing by itself."""
    if all(callable(getattr(service, m, None)) for m in ("pause", "resume", "pull", "push")):
        return service  # type: ignore[return-value]
    return None


@contextmanager
def paused(
    ctx: RunContext, inventory: Path, had: Mapping[str, Mapping[str, Any]], *, by: str, reason: str
) -> Iterator[list[str]]:
    """Every :class:`Pausable` service of the deployment (``had``: the serving record's states) paused and its state
    pulled back before the block (the names paused); after it, however it ends, the controller's state pushed and
    each resumed. A push that fails leaves that service paused (the error says so): it must not act on a state that
    is not the deployment's."""
    held = [(s, p, dict(had[s.name])) for s in services() if had.get(s.name) and (p := pausable(s)) is not None]
    done: list[tuple[Service, Pausable, State]] = []
    try:
        for s, p, state in held:
            p.pause(ctx, inventory, state, by=by, reason=reason)
            done.append((s, p, state))
            p.pull(ctx, inventory, state)
        yield [s.name for s, _, _ in held]
    finally:
        for s, p, state in done:
            try:
                p.push(ctx, inventory, state)
            except Exception as e:
                ctx.warn(f"{s.name} stays paused: its state could not be given back ({e}); `zenops up` again, or "
                         "`zenops scale resume` on its host once the state is right")  # fmt: skip
                raise
            p.resume(ctx, inventory, state)


@contextmanager
def loops_paused(ctx: RunContext, config: Any, inventory: Path, *, by: str, reason: str) -> Iterator[None]:
    """:func:`paused` for the deployment served from ``inventory``, read from its serving record: a deployment with
    a service that changes it by itself (a scaling loop) has it paused and its state pulled back for the block (a
    rollout includes the replicas the loop added; a bake's image reaches the loop's copy of the ledger entry), pushed
    and resumed after it. Without one (or without a record): nothing."""
    from zenops.deployment.store import Store  # noqa: PLC0415

    record = Store(config, inventory).record()
    if record is None or not any(pausable(s) for s in services() if record.services.get(s.name)):
        yield
        return
    with paused(ctx, inventory, record.services, by=by, reason=reason):
        yield


def rows(service: Service) -> tuple[Option, ...]:
    """The options of ``service``: the table's rows tagged with its name (zenops.option_table), the one source."""
    from zenops.option_table import service_rows  # noqa: PLC0415

    return service_rows(service.name)
