"""The local ledger: what zenops created, per cloud and deployment, under <state_dir>/deployments/<cloud>/<name>.json.

The cloud's ownership marks are the truth for teardown; the ledger says which deployments are meant to be alive (so
`leaks` can tell orphans apart), which keypair zenops generated, and what a deployment costs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


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


def load(state_dir: Path, cloud: str, name: str) -> Deployment | None:
    p = path(state_dir, cloud, name)
    if not p.is_file():
        return None
    return Deployment(**json.loads(p.read_text()))


def save(state_dir: Path, dep: Deployment) -> Path:
    d = _dir(state_dir, dep.cloud)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    dep.updated_at = now()
    p = path(state_dir, dep.cloud, dep.name)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(dep.to_dict(), indent=2, sort_keys=True))
    tmp.replace(p)
    return p


def remove(state_dir: Path, cloud: str, name: str) -> None:
    path(state_dir, cloud, name).unlink(missing_ok=True)


def all_deployments(state_dir: Path, cloud: str | None = None) -> list[Deployment]:
    root = state_dir / "deployments"
    if not root.is_dir():
        return []
    clouds = [root / cloud] if cloud else sorted(p for p in root.iterdir() if p.is_dir())
    out = []
    for c in clouds:
        for f in sorted(c.glob("*.json")) if c.is_dir() else []:
            out.append(Deployment(**json.loads(f.read_text())))
    return out


def keys_dir(state_dir: Path, cloud: str) -> Path:
    d = state_dir / "keys" / cloud
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    return d
