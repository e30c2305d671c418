"""The local ledger: what zenops created, per cloud and deployment, under <state_dir>/deployments/<cloud>/<name>.json.

The cloud's ownership marks are the truth for teardown; the ledger says which deployments are meant to be alive (so
`leaks` can tell orphans apart), which keypair zenops generated, and what a deployment costs.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from zenops import statefile


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Deployment:
    name: str
    cloud: str
    flavor: str
    image: str
    count: int
    network_mode: str
    campaign: str | None = None
    price_per_hour: float | None = None
    status: str = "provisioning"  # provisioning | ready | failed
    created_at: str = field(default_factory=now)
    updated_at: str = field(default_factory=now)
    keypair: str = ""
    keypair_created: bool = False
    private_key_file: str = ""
    servers: list[dict[str, Any]] = field(default_factory=list)
    inventory: str = ""
    # the dead-man's switch of an expiring deployment (zenops.cloud.expiry_switch.Armed.to_dict), None: not tried
    expiry_switch: dict[str, Any] | None = None
    # `up --gateway-flavor`: the gateway's own server (HAProxy, no vLLM), its flavor and price, its own inventory
    gateway_flavor: str | None = None
    gateway_price_per_hour: float | None = None
    gateway_servers: list[dict[str, Any]] = field(default_factory=list)
    gateway_inventory: str = ""
    # the security group: the operator's address range it opens SSH and the gateway's port to, and whether the vLLM
    # ports are open to it too (only when no gateway fronts the servers; zenops.deployment.firewall); None: not recorded
    operator_cidr: str = ""
    api_to_operator: bool | None = None
    # `up --replicas MIN..MAX`: the scaling loop's host (the gateway's server), by its fixed address /32, which SSH is
    # open to as well (its scale-out provisions and serves new servers; zenops.deployment.firewall.set_loop_ssh);
    # "": no loop
    loop_cidr: str = ""
    # `zenops image bake`: the Glance image id new serving servers boot from (Docker, the engine image and the model
    # inside); None: they boot from ``image`` and get all of it the cold way
    replica_image: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def cost_per_hour(self) -> float | None:
        """Every server of the deployment, the gateway's own included; None when a price is unknown."""
        if self.price_per_hour is None:
            return None
        if not self.gateway_flavor:
            return round(self.price_per_hour * self.count, 4)
        if self.gateway_price_per_hour is None:
            return None
        return round(self.price_per_hour * self.count + self.gateway_price_per_hour, 4)


def _dir(state_dir: Path, cloud: str) -> Path:
    return state_dir / "deployments" / cloud


def path(state_dir: Path, cloud: str, name: str) -> Path:
    return _dir(state_dir, cloud) / f"{name}.json"


def _hint(cloud: str, name: str) -> str:
    return (
        f"`zenops leaks --cloud {cloud}` lists what the cloud still has of it (its marks are the truth); "
        f"`zenops down --deployment {name} --cloud {cloud}` removes that and this file"
    )


def _read(p: Path) -> Deployment | None:
    """The deployment recorded in ``p`` (None: no such file); DamagedStateError when it cannot be read."""
    cloud, name = p.parent.name, p.stem
    try:
        data = statefile.read_json_object(p)
    except statefile.DamagedStateError as e:
        raise statefile.DamagedStateError(p, e.reason, hint=_hint(cloud, name)) from e
    if data is None:
        return None
    known = {f.name for f in fields(Deployment)}
    try:
        return Deployment(**{k: v for k, v in data.items() if k in known})
    except TypeError as e:  # a required field missing
        raise statefile.DamagedStateError(p, f"not a deployment record: {e}", hint=_hint(cloud, name)) from e


def load(state_dir: Path, cloud: str, name: str) -> Deployment | None:
    """The deployment ``name`` on ``cloud`` (None: not recorded); DamagedStateError (naming the file and what to do)
    when its file is damaged."""
    return _read(path(state_dir, cloud, name))


def save(state_dir: Path, dep: Deployment) -> Path:
    dep.updated_at = now()
    return statefile.write_json(path(state_dir, dep.cloud, dep.name), dep.to_dict())


def remove(state_dir: Path, cloud: str, name: str) -> None:
    path(state_dir, cloud, name).unlink(missing_ok=True)


@dataclass(frozen=True)
class Listing:
    """The ledger's deployments, and the names of those whose file is damaged (each warned about when listed)."""

    deployments: list[Deployment]
    damaged: list[tuple[str, str]]  # (cloud, name)


def listing(state_dir: Path, cloud: str | None = None) -> Listing:
    """Every deployment recorded (of ``cloud``, or of every cloud). A damaged file is not a traceback: it is warned
    about (naming it and how to check the cloud) and its deployment listed in ``damaged``."""
    root = state_dir / "deployments"
    if not root.is_dir():
        return Listing([], [])
    clouds = [root / cloud] if cloud else sorted(p for p in root.iterdir() if p.is_dir())
    good, damaged = [], []
    for c in clouds:
        for f in sorted(c.glob("*.json")) if c.is_dir() else []:
            try:
                dep = _read(f)
            except statefile.DamagedStateError as e:
                statefile.warn_damaged(e)
                damaged.append((c.name, f.stem))
                continue
            if dep is not None:
                good.append(dep)
    return Listing(good, damaged)


def all_deployments(state_dir: Path, cloud: str | None = None) -> list[Deployment]:
    """The deployments whose files can be read (see :func:`listing`: damaged ones are warned about)."""
    return listing(state_dir, cloud).deployments


def keys_dir(state_dir: Path, cloud: str) -> Path:
    d = state_dir / "keys" / cloud
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d
