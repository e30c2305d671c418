"""The scaling loop as a service of the deployment (`up --cloud ... --replicas MIN..MAX`): zenops itself, running on
the deployment's gateway server as the systemd unit ``zenops-scaler.service`` (`zenops scale run NAME`,
as the system user ``zenops-scaler``), so that it keeps working while the operator's machine is off.

What `up` installs there (roles/scaler, playbooks/scaler.yml; zenops.scaling.request chose the range):

* a venv from a wheelhouse the controller builds and caches (zenops.scaling.bundle): the host needs no package index;
* its configuration (``/etc/zenops-scaler``, its XDG_CONFIG_HOME): the controller's zenops.yaml (the cloud profile)
  and a clouds.yaml holding the loop's application credential (zenops.cloud.scaler_cred), 0600, its user's;
* the deployment's state (``/var/lib/zenops-scaler/zenops``, its XDG_STATE_HOME/zenops): the ledger entry, the
  serving record, the API key, the fleet's SSH key and pinned host keys, the inventory rewritten to reach the servers
  by their fixed (private) addresses; every controller path in them rewritten to the host's (:func:`host_files`).

Where the gateway shares a serving host (no ``--gateway-flavor``), the loop runs there and scale-in never removes that
host (``protected``). `down` removes the service first (the unit stopped, its files and its credential gone), so no
loop replaces servers `down` deletes. `status` reads the loop's state file over SSH (playbook action ``state``); a
rollout pauses it, pulls its state back, rolls out and pushes it again (:class:`zenops.deployment.services.Pausable`).

A service of zenops.deployment.services: :data:`SERVICE`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.deployment.services import Line, Preview, State, View
from zenops.errors import UsageError, ZenopsError
from zenops.scaling.replicas import Replicas, parse
from zenops.scaling.request import OVERRIDES

if TYPE_CHECKING:
    from zenops.cloud import ledger
    from zenops.context import RunContext

USER = "zenops-scaler"
HOME = "/var/lib/zenops-scaler"  # its XDG_STATE_HOME: zenops's state is HOME/zenops
HOST_STATE = f"{HOME}/zenops"
UNIT = "zenops-scaler.service"
ACTIONS = ("present", "absent", "pause", "resume", "state", "push", "pull")


SERVICE_NAME = "scaler"  # its name in the serving record's services


@dataclass(frozen=True)
class Scaler:
    """Where the loop runs and what it keeps, as kept in the serving record (``services.scaler``)."""

    host: str  # the gateway's host: the loop runs there
    deployment: str
    cloud: str
    replicas: Replicas
    inventory: str = ""  # the gateway's own server's inventory; "": a host of the deployment's inventory
    cap_per_hour: float | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)  # the policy overrides given (request.OVERRIDES)
    protected: str = ""  # the serving host the loop shares (scale-in never removes it); "": its own server
    credential: str = ""  # its application credential's name (zenops.cloud.scaler_cred)
    wheels: str = ""  # the wheelhouse's key (zenops.scaling.bundle)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "replicas": self.replicas.to_dict(), "overrides": dict(self.overrides)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scaler:
        r = data.get("replicas") or {}
        return cls(
            host=str(data["host"]),
            deployment=str(data["deployment"]),
            cloud=str(data["cloud"]),
            replicas=Replicas(int(r["min"]), int(r["max"])),
            inventory=str(data.get("inventory") or ""),
            cap_per_hour=float(data["cap_per_hour"]) if data.get("cap_per_hour") is not None else None,
            overrides=dict(data.get("overrides") or {}),
            protected=str(data.get("protected") or ""),
            credential=str(data.get("credential") or ""),
            wheels=str(data.get("wheels") or ""),
        )

    @property
    def own_server(self) -> bool:
        return bool(self.inventory)

    def run_inventory(self, deployment_inventory: Path) -> Path:
        return Path(self.inventory) if self.inventory else deployment_inventory

    @property
    def state_file(self) -> str:
        """The loop's state on its host (zenops.scaling.state writes it)."""
        return f"{HOST_STATE}/scaling/{self.deployment}.json"


def wanted(req: Any) -> Replicas | None:
    """The range of the request (`up --replicas MIN..MAX`); None: no loop (no --replicas, or a fixed N)."""
    text = getattr(req, "replicas", None) if req is not None else None
    if not text:
        return None
    r = parse(text)
    return None if r.fixed else r


def plan(view: View, dep: ledger.Deployment, replicas: Replicas) -> Scaler:
    """Where the loop runs for this deployment: on the gateway's host (``view.services['gateway']``)."""
    gw = view.services.get("gateway")
    if not gw:
        raise ZenopsError(
            f"--replicas {replicas}: the scaling loop needs the gateway, and this deployment has none",
            hint="run `zenops up` again with --gateway on (--replicas turns it on)",
        )
    if not view.services.get("metrics"):
        raise ZenopsError(
            f"--replicas {replicas}: the scaling loop reads the metrics, and this deployment has none",
            hint="run `zenops up` again with --metrics on (--replicas turns it on)",
        )
    req = view.request
    own = str(gw.get("inventory") or "")
    from zenops.cloud import scaler_cred  # noqa: PLC0415

    return Scaler(
        host=str(gw["host"]),
        deployment=dep.name,
        cloud=dep.cloud,
        replicas=replicas,
        inventory=own,
        cap_per_hour=getattr(req, "max_price_per_hour", None),
        overrides={f: getattr(req, f) for f in OVERRIDES if getattr(req, f, None) is not None},
        protected="" if own else str(gw["host"]),
        credential=scaler_cred.credential_name(dep.name),
    )


# --- what goes to the host ------------------------------------------------------------------------------------------


def files_names(inventory: Path, host_inventory: str) -> tuple[str, str]:
    """The name the deployment's files (serving record, API key, metrics password) are kept under here, and the one
    the loop's zenops looks them up by on its host: both its serving inventory's (DeploymentId.files_name), of the
    inventory's path on each machine."""
    from zenops.deployment.identity import DeploymentId  # noqa: PLC0415

    here = DeploymentId("", inventory=inventory).files_name
    there = DeploymentId("", inventory=Path(host_inventory)).files_name  # absolute: resolve() keeps the host's path
    assert here is not None
    assert there is not None
    return here, there


def host_key(state_dir: Path, dep: ledger.Deployment) -> tuple[Path, str] | None:
    """The fleet's SSH key when it lies outside the state dir (the cloud profile's ``keypair`` with its
    ``private_key_file``, e.g. ~/.ssh/id_ed25519), and where the host keeps it: ``keys/<cloud>/`` of its state dir
    (0600, its user's). None: no such key, or one in the state dir (shipped at its relative path)."""
    if not dep.private_key_file:
        return None
    key = Path(dep.private_key_file).expanduser()
    if key.resolve().is_relative_to(Path(state_dir).resolve()):
        return None
    return key, f"{HOST_STATE}/keys/{dep.cloud}/{key.name}"


def profile_overrides(state_dir: Path, dep: ledger.Deployment) -> dict[str, dict[str, str]]:
    """The cloud profile's fields the loop's zenops.yaml has its own of (zenops.scaling.inputs.host_config): the
    operator's address range as recorded (the loop's `up` would record its own host's address instead, and the
    security group would open SSH to the gateway's server in the operator's place), and the host's copy of an
    operator keypair's private key (:func:`host_key`)."""
    out: dict[str, str] = {}
    if dep.operator_cidr:
        out["operator_cidr"] = dep.operator_cidr
    key = host_key(state_dir, dep)
    if key is not None and not dep.keypair_created:
        out["private_key_file"] = key[1]
    return {dep.cloud: out} if out else {}


def host_files(config: Any, dep: ledger.Deployment, inventory: Path) -> list[dict[str, Any]]:
    """The deployment's state the loop needs, as (src on the controller, dest relative to the host's state dir,
    mode, whether it is rewritten (:func:`rewrite`)): the ledger entry, the serving inventory and record, the API key,
    the metrics password, the fleet's SSH key and its pinned host keys (the files kept under the inventory's files
    name: under the host inventory's there, ``names``). Files that do not exist are left out."""
    from zenops.cloud import ledger as ledger_lib  # noqa: PLC0415
    from zenops.deployment import record as record_lib  # noqa: PLC0415
    from zenops.deployment.common import known_hosts_path  # noqa: PLC0415

    state = Path(config.state_dir)

    def rel(p: Path) -> str:
        return str(p.resolve().relative_to(state.resolve()))

    host_inventory = f"{HOST_STATE}/{rel(inventory)}" if inventory.resolve().is_relative_to(state.resolve()) else ""
    out: list[dict[str, Any]] = [
        {"src": ledger_lib.path(state, dep.cloud, dep.name), "dest": None, "mode": "0600", "rewrite": True},
        {"src": inventory, "dest": None, "mode": "0600", "rewrite": True, "inventory": True},
        {"src": known_hosts_path(state, dep.cloud, dep.name), "dest": None, "mode": "0600", "rewrite": False},
    ]
    if dep.gateway_inventory:  # the gateway's own server's (and the metrics'): the record's services run there
        out.append({"src": dep.gateway_inventory, "dest": None, "mode": "0600", "rewrite": True, "inventory": True})
    if dep.private_key_file:
        outside = host_key(state, dep)  # the operator's keypair: under keys/<cloud>/ on the host
        dest = outside[1].removeprefix(f"{HOST_STATE}/") if outside else None
        out.append({"src": Path(dep.private_key_file).expanduser(), "dest": dest, "mode": "0600", "rewrite": False})
    if dep.private_key_file and dep.keypair_created:  # the loop's `up` ensures the keypair from its public key file
        pub = Path(dep.private_key_file).with_suffix(".pub")  # (openstack.cloud.keypair opens it: missing, it fails)
        out.append({"src": pub, "dest": None, "mode": "0644", "rewrite": False})
    if host_inventory:
        # the files zenops keeps under the inventory's files name: on the host, under the host inventory's (else the
        # loop's serve would make a new API key the gateway's clients do not have, a new metrics password...)
        here, there = files_names(inventory, host_inventory)
        named = [
            (record_lib.serving_record_path(config, inventory), {"rewrite": True, "record": True}),
            (record_lib.api_key_path(config, inventory), {"rewrite": False}),
            (record_lib.metrics_password_path(config, inventory), {"rewrite": False}),
        ]
        for src, how in named:
            dest = str(Path(rel(src)).with_name(src.name.replace(here, there, 1)))
            # the record names the API key by its file: the host's name in it on the way there, ours on the way back
            out.append({"src": src, "dest": dest, "mode": "0600", "names": (here, there), **how})
    for f in out:
        f["src"] = Path(f["src"])
        if f["dest"] is None and f["src"].resolve().is_relative_to(state.resolve()):
            f["dest"] = rel(f["src"])
    return [f for f in out if f["dest"] and f["src"].is_file()]


@contextmanager
def staged(
    config: Any,
    dep: ledger.Deployment,
    inventory: Path,
    request: Mapping[str, Any] | None = None,
    services: Mapping[str, Any] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """:func:`host_files` written to a 0700 directory as the host reads them, for the block (the play copies them);
    removed on every way out (it holds a copy of the fleet's SSH key). ``request``: the serving record's fields the
    host has its own of (:func:`host_inputs`); ``services``: the record's services states to ship (:func:`rewrite`)."""
    from zenops.cloud import ledger as ledger_lib  # noqa: PLC0415
    from zenops.scaling import inputs as inputs_lib  # noqa: PLC0415

    key = host_key(config.state_dir, dep)
    paths = {str(key[0]): key[1]} if key else {}
    with tempfile.TemporaryDirectory(dir=ledger_lib.keys_dir(config.state_dir, dep.cloud)) as tmp:
        out = []
        for i, f in enumerate(host_files(config, dep, inventory)):
            dst = Path(tmp) / f"{i}-{f['src'].name}"
            if f["rewrite"]:
                text = inputs_lib.rewrite(f["src"].read_text(), config.state_dir, inventory=bool(f.get("inventory")),
                               request=request if f.get("record") else None, paths=paths,
                               services=services if f.get("record") else None)  # fmt: skip
                if f.get("names"):
                    text = text.replace(*f["names"])
                dst.write_text(text)
            else:
                dst.write_bytes(f["src"].read_bytes())
            dst.chmod(0o600)
            out.append({"src": str(dst), "dest": f["dest"], "mode": f["mode"]})
        yield out


@contextmanager
def shipped(
    ctx: RunContext, dep: ledger.Deployment, inventory: Path, services: Mapping[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """The role's variables of what goes to the host (action present and push): the deployment's state
    (:func:`staged`, its serving record pointing at the host's inputs), the inputs a new replica's serve reads and
    the loop's zenops.yaml (zenops.scaling.inputs), its image cache. What the host will lack is said. The staged
    files and a token made from $HF_TOKEN go on every way out."""
    from zenops import serve  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415
    from zenops.scaling.inputs import HOST_IMAGES, Inputs, host_config, host_inputs  # noqa: PLC0415

    record = Store(ctx.config, inventory).record()
    given = (record.request or {}).get("hf_token_file") if record is not None else None
    with serve.hf_token_file(Path(given) if given else None) as token:
        inputs = host_inputs(record, token) if record is not None else Inputs()
        for what in inputs.missing:
            ctx.warn(f"scaling: a new replica's serve on the loop's host lacks {what}; it builds or fetches it there")
        with staged(ctx.config, dep, inventory, inputs.request, services) as files:
            config = Path(files[0]["src"]).parent / "zenops.yaml" if files else None
            if config is not None:
                config.write_text(host_config(ctx.config, profile_overrides(ctx.config.state_dir, dep)))
                config.chmod(0o600)
            yield {
                "scaler_state_files": files,
                "scaler_inputs": inputs.files,
                "scaler_image_cache": HOST_IMAGES,
                "scaler_config_file": str(config) if config is not None else "",
            }


# --- the plays -------------------------------------------------------------------------------------------------------


def _run(
    ctx: RunContext, inventory: Path, s: Scaler, action: str, extravars: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    from zenops.runner import RunSpec  # noqa: PLC0415

    spec = RunSpec(
        playbook="scaler",
        inventory=s.run_inventory(inventory),
        extravars={
            "zenops_scaler_host": s.host,
            "zenops_scaler_action": action,
            "scaler_deployment": s.deployment,
            **(extravars or {}),
        },
        limit=s.host,
        verbosity=ctx.verbosity,
    )
    run = ctx.run(spec)
    result = run.host_facts.get(s.host, {}).get("zenops_scaler_result")
    if not isinstance(result, Mapping):
        raise ZenopsError(
            f"the scaler play on {s.host} reported no result ({action})", hint=f"see the run log {run.run_dir}"
        )
    return dict(result)


@contextmanager
def cloud_vars(ctx: RunContext, s: Scaler, dep: ledger.Deployment) -> Iterator[dict[str, Any]]:
    """The loop's credential made (zenops.cloud.scaler_cred), its secret in a 0600 file for the block (the play
    ships it): the role's clouds.yaml variables. The file goes on every way out."""
    from zenops.cloud import marks as m  # noqa: PLC0415
    from zenops.cloud import ops, scaler_cred  # noqa: PLC0415

    conn = ops.connect(s.cloud)
    cred = scaler_cred.create(conn, m.Marks(dep.name, dep.campaign, scaler_cred.deployment_expiry(conn, dep)))
    path = scaler_cred.secret_path(ctx.config.state_dir, s.cloud, s.deployment)
    candidates = scaler_cred.loop_endpoints(conn, ctx.config.cloud_profile(s.cloud).api_interface)
    endpoint = candidates[0] if candidates else {}
    with scaler_cred.secret_file_of(cred, path):
        yield {
            "scaler_cloud": s.cloud,
            "scaler_credential": {
                "id": cred.id,
                "secret_file": str(path),
                "auth_url": endpoint.get("auth_url", ""),
                "interface": endpoint.get("interface", "public"),
                "endpoints": candidates,  # the role keeps the first its host reaches
                "region": str(getattr(conn.config, "region_name", "") or ""),
            },
        }


def install(ctx: RunContext, inventory: Path, s: Scaler, dep: ledger.Deployment, services: Mapping[str, Any]) -> Scaler:
    """The loop on its host: the wheelhouse, the credential, the deployment's state, the unit (action present).
    ``services``: the states of the services applied before this one (the gateway's, the metrics'): the serving
    record the loop gets carries them and the loop's own, as `up` records them once it is done."""
    from zenops.scaling import bundle  # noqa: PLC0415

    wheels = bundle.ensure(ctx.config, note=ctx.note)
    done = replace(s, wheels=wheels.key)
    states = {**services, SERVICE_NAME: done.to_dict()}
    with cloud_vars(ctx, s, dep) as cloud, shipped(ctx, dep, inventory, states) as goes:
        extravars = {**cloud, **goes, "scaler_wheelhouse": str(wheels.path), "scaler_wheel_key": wheels.key}
        _run(ctx, inventory, s, "present", extravars)
    return done


def push(ctx: RunContext, inventory: Path, s: Scaler, dep: ledger.Deployment) -> None:
    """The deployment's state as the controller has it now, to the loop's host (after a rollout), with what a new
    replica's serve needs (a rollout's new engine image among them)."""
    with shipped(ctx, dep, inventory) as goes:
        _run(ctx, inventory, s, "push", goes)


def pull(ctx: RunContext, inventory: Path, s: Scaler, dep: ledger.Deployment) -> list[Path]:
    """The loop's ledger entry and serving record back to the controller (the loop may have added or removed
    replicas: a rollout includes them), each host path in them the controller's again; the controller's inventory
    is then written again from the ledger entry (its servers' public addresses). The files written."""
    from zenops.scaling import inputs  # noqa: PLC0415

    wanted = [f for f in host_files(ctx.config, dep, inventory) if f["rewrite"] and not f.get("inventory")]
    result = _run(ctx, inventory, s, "pull", {"scaler_pull": [f["dest"] for f in wanted]})
    got = result.get("files") or {}
    key = host_key(ctx.config.state_dir, dep)
    written = []
    for f in wanted:
        text = got.get(f["dest"])
        if isinstance(text, str) and text:
            if key is not None:  # the host's copy of the operator's key: the operator's own again
                text = text.replace(key[1], str(key[0]))
            text = text.replace(HOST_STATE, str(ctx.config.state_dir))
            if f.get("names"):
                here, there = f["names"]
                text = text.replace(there, here)
            f["src"].write_text(inputs.restored(text, f["src"]) if f.get("record") else text)
            written.append(f["src"])
    if written:
        from zenops.cloud import ledger as ledger_lib  # noqa: PLC0415
        from zenops.deployment.common import write_inventory  # noqa: PLC0415

        now = ledger_lib.load(ctx.config.state_dir, dep.cloud, dep.name)
        if now is not None:
            written.append(write_inventory(ctx.config.state_dir, now, ctx.config.cloud_profile(dep.cloud).image_user))
            written += _pull_facts(ctx, inventory, s, [str(x["name"]) for x in now.servers])
    return written


def _pull_facts(ctx: RunContext, inventory: Path, s: Scaler, servers: list[str]) -> list[Path]:
    """The saved facts of the servers the loop added (this machine has none: a rollout plans from them), taken back
    from the loop's host; the files written."""
    from zenops.facts import facts_path  # noqa: PLC0415

    state = Path(ctx.config.state_dir)
    lacking = {str(facts_path(ctx.config, n).relative_to(state)): facts_path(ctx.config, n) for n in servers}
    lacking = {rel: path for rel, path in lacking.items() if not path.is_file()}
    if not lacking:
        return []
    got = _run(ctx, inventory, s, "pull", {"scaler_pull": sorted(lacking)}).get("files") or {}
    for rel, text in got.items():
        if rel in lacking and isinstance(text, str) and text:
            lacking[rel].parent.mkdir(parents=True, exist_ok=True)
            lacking[rel].write_text(text)
    return [lacking[rel] for rel in sorted(got) if rel in lacking and lacking[rel].is_file()]


def delete_credential(ctx: RunContext, s: Scaler) -> list[str]:
    """The loop's application credential deleted (missing: fine); its names."""
    from zenops.cloud import ops, scaler_cred  # noqa: PLC0415

    conn = ops.connect(s.cloud)
    gone = scaler_cred.remove(conn, scaler_cred.owned(conn, deployment=s.deployment), progress=ctx.note)
    scaler_cred.remove_secret_files(ctx.config.state_dir, s.cloud, s.deployment)
    return [str(g["name"]) for g in gone]


def remove(ctx: RunContext, inventory: Path, s: Scaler) -> None:
    """The unit stopped and disabled, its files gone (action absent), then its credential deleted and SSH to its
    host closed again."""
    _run(ctx, inventory, s, "absent")
    delete_credential(ctx, s)
    from zenops.deployment import firewall  # noqa: PLC0415

    firewall.close_loop_ssh(ctx, inventory)


def state(ctx: RunContext, inventory: Path, s: Scaler) -> dict[str, Any]:
    """The loop's state file read on its host (the JSON of zenops.scaling.state), and whether its unit runs."""
    result = _run(ctx, inventory, s, "state", {"scaler_state_file": s.state_file})
    raw = result.get("state")
    loaded = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw if isinstance(raw, Mapping) else None)
    return {"active": str(result.get("active") or "unknown"), "state": dict(loaded) if loaded else None}


# --- the service (zenops.deployment.services) -----------------------------------------------------------------------


def _entry(ctx: RunContext, inventory: Path) -> ledger.Deployment:
    """The cloud deployment of ``inventory`` (a loop creates servers: own hosts have none, refused)."""
    from zenops.deployment.identity import cloud_entry_of  # noqa: PLC0415

    dep = cloud_entry_of(ctx.config, inventory)
    if dep is None:
        raise UsageError(
            f"--replicas MIN..MAX: {inventory} is not a cloud deployment of this machine's ledger",
            hint="a scaling loop creates servers: use `zenops up --cloud C --flavor F --replicas MIN..MAX`",
        )
    return dep


def summary(replicas: Replicas, cap: float | None, loop: Mapping[str, Any] | None) -> str:
    """``scaling: 2 replicas (1..3, cap $2.50/h), target 2, idle; last: out 1 -> 2 at 12:03 (...)``: one status line
    from the loop's state (zenops.scaling.state's JSON, its own summary; None: it wrote none yet)."""
    from zenops.errors import ZenopsError  # noqa: PLC0415
    from zenops.scaling.state import ScalingState  # noqa: PLC0415
    from zenops.spend import hourly  # noqa: PLC0415

    if not loop:
        capped = f", cap {hourly(cap)}" if cap is not None else ""
        return f"scaling: {replicas}{capped}; the loop has written no state yet"
    try:
        return ScalingState.from_dict(loop).summary()
    except (ZenopsError, KeyError, TypeError, ValueError) as e:
        return f"scaling: {replicas}; the loop's state cannot be read ({e})"


class ScalerService:
    """`up --replicas MIN..MAX` (ServeRequest.replicas...): the scaling loop on the gateway's host."""

    name = SERVICE_NAME

    def preflight(self, view: View) -> None:
        wanted(view.request)  # a bad range is refused before anything is deployed

    def apply(self, ctx: RunContext, view: View, had: State | None) -> State | None:
        old = Scaler.from_dict(had) if had else None
        r = wanted(view.request)
        if r is None:
            if old is not None:
                ctx.note(f"scaling: off (a fixed fleet); removing the loop from {old.host}")
                remove(ctx, view.inventory, old)
            return None
        dep = _entry(ctx, view.inventory)
        new = plan(view, dep, r)
        if old is not None and (old.host, old.inventory) != (new.host, new.inventory):
            ctx.note(f"scaling: the loop moves from {old.host} to {new.host}")
            remove(ctx, view.inventory, old)
        where = "the gateway's own server " if new.own_server else ""
        kept = f"; scale-in never removes {new.protected} (the gateway's host)" if new.protected else ""
        ctx.note(f"scaling: a loop on {where}{new.host} keeps {r} replicas{kept}")
        from zenops.deployment import firewall  # noqa: PLC0415

        firewall.open_ssh(ctx, dep, firewall.loop_cidr(dep, new.host), view.services)
        return install(ctx, view.inventory, new, dep, view.services).to_dict()

    def update(self, ctx: RunContext, view: View, had: State) -> State:
        """The servers changed (a rollout): the rollout pushes the state once it is done (:meth:`push`); nothing
        here."""
        return had

    def remove(self, ctx: RunContext, inventory: Path, had: State) -> None:
        s = Scaler.from_dict(had)
        ctx.note(f"removing the scaling loop from {s.host} and its credential {s.credential}")
        remove(ctx, inventory, s)

    def status(self, ctx: RunContext, inventory: Path, had: State) -> dict[str, Any]:
        s = Scaler.from_dict(had)
        return {"host": s.host, **state(ctx, inventory, s)}

    def lines(self, entry: Mapping[str, Any]) -> list[Line]:
        from zenops.report.cells import markup  # noqa: PLC0415

        if entry.get("error"):
            return [Line(f"[yellow]scaling status unavailable:[/] {markup(entry['error'])}", err=True)]
        s = Scaler.from_dict(entry.get("state") or {})
        live = entry.get("live") or {}
        out = [Line(markup(summary(s.replicas, s.cap_per_hour, live.get("state"))))]
        if live.get("active") not in (None, "active"):
            out.append(Line(f"[yellow]  the loop's unit on {markup(s.host)} is {markup(live.get('active'))}[/]"))
        return out

    def plan(self, view: View, had: State | None) -> Preview:
        r = wanted(view.request)
        if r is None:
            gone = f"; the loop would be removed from {had.get('host')}" if had else ""
            return Preview(self.name, False, f"off (a fixed fleet){gone}")
        gw = view.services.get("gateway") or {}
        host = str(gw.get("host") or "the gateway's host")
        req = view.request
        cap = getattr(req, "max_price_per_hour", None)
        overrides = {f: getattr(req, f) for f in OVERRIDES if getattr(req, f, None) is not None}
        text = f"on; a loop on {host} keeps {r} replicas" + (f", cap ${cap:.2f}/h" if cap is not None else "")
        if gw and not gw.get("inventory"):
            text += f"; scale-in never removes {host} (the gateway's host)"
        details = {"host": host, "replicas": r.to_dict(), "cap_per_hour": cap, "overrides": overrides}
        return Preview(self.name, True, text, details)

    def drainable(self, had: State, addresses: Mapping[str, str]) -> None:
        """Clients do not go through the loop."""
        return None

    # --- Pausable (zenops.deployment.services): a rollout pauses the loop and takes its state ---------------------

    def pause(self, ctx: RunContext, inventory: Path, had: State, *, by: str, reason: str) -> None:
        s = Scaler.from_dict(had)
        ctx.note(f"scaling: pausing the loop on {s.host} ({reason})")
        _run(ctx, inventory, s, "pause", {"scaler_pause": {"by": by, "reason": reason}})

    def resume(self, ctx: RunContext, inventory: Path, had: State) -> None:
        s = Scaler.from_dict(had)
        ctx.note(f"scaling: resuming the loop on {s.host}")
        _run(ctx, inventory, s, "resume")

    def pull(self, ctx: RunContext, inventory: Path, had: State) -> list[Path]:
        s = Scaler.from_dict(had)
        return pull(ctx, inventory, s, _entry(ctx, inventory))

    def push(self, ctx: RunContext, inventory: Path, had: State) -> None:
        s = Scaler.from_dict(had)
        push(ctx, inventory, s, _entry(ctx, inventory))


SERVICE = ScalerService()


def stop_for_down(config: Any, deps: list[ledger.Deployment], note: Any) -> list[str]:
    """`zenops down` of cloud deployments: each one's scaling loop stopped first (its unit gone, its credential
    deleted), so that no loop replaces a server `down` deletes. A loop that cannot be reached (its server already
    gone) is said and left: deleting its server stops it, `down` deletes its credential by name. The hosts stopped."""
    from zenops.context import RunContext  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415

    stopped = []
    for dep in deps:
        if not dep.inventory:
            continue
        record = Store(config, Path(dep.inventory)).record()
        had = (record.services if record is not None else {}).get(SERVICE.name)
        if not had:
            continue
        try:
            SERVICE.remove(RunContext(config, note=note), Path(dep.inventory), dict(had))
            stopped.append(str(had.get("host")))
        except Exception as e:
            note(f"warning: the scaling loop of {dep.name} could not be stopped first ({e}); its server goes now")
    return stopped
