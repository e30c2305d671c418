"""Which deployment: one identity per deployment, however a command names it, and the one lock key derived from it.

- A cloud deployment (`zenops up --cloud`) is named by its cloud and the name `up` gave it (``--deployment``); its
  serving inventory is the one `up` wrote (the cloud ledger records it), so naming it by that inventory (`-i`) is the
  same deployment.
- Your own hosts' deployment is named after its inventory file: ``<inventory stem>-<hash of its absolute path>`` (two
  files both called hosts.yml are two deployments).

The deployment's files (serving record, API key, rollout ledger: zenops.deployment.store) are filed under its
serving inventory's name, its lock (zenops.lock) under :attr:`DeploymentId.key`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from zenops.cloud import ledger
from zenops.config import Config


def inventory_name(inventory: Path) -> str:
    """The name zenops files the deployment of an inventory under: ``<inventory stem>-<hash of its absolute path>``."""
    digest = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:8]
    return f"{inventory.stem}-{digest}"


@dataclass(frozen=True)
class DeploymentId:
    """One deployment. ``cloud`` None: your own hosts (``inventory`` then names it)."""

    name: str
    cloud: str | None = None
    inventory: Path | None = None  # its serving inventory (a cloud deployment's: the one `up` wrote, once it has one)

    @property
    def key(self) -> str:
        """The deployment's lock key, the same for every way of naming it: ``cloud-<cloud>-<name>`` or ``<name>``."""
        return f"cloud-{self.cloud}-{self.name}" if self.cloud else self.name

    @property
    def files_name(self) -> str | None:
        """The name its files are kept under (its serving inventory's; None: a cloud deployment not serving yet)."""
        return inventory_name(self.inventory) if self.inventory is not None else None

    def describe(self) -> str:
        return f"deployment '{self.name}' on {self.cloud}" if self.cloud else f"the deployment of {self.inventory}"


def cloud_entry_of(config: Config, inventory: Path) -> ledger.Deployment | None:
    """The cloud deployment whose serving inventory this is (None: own hosts, or not in this controller's ledger)."""
    want = inventory.expanduser().resolve()
    for dep in ledger.all_deployments(config.state_dir):
        if dep.inventory and Path(dep.inventory).resolve() == want:
            return dep
    return None


def of_inventory(config: Config, inventory: Path) -> DeploymentId:
    """The deployment on ``inventory``: the cloud deployment `up --cloud` wrote it for (as this machine's ledger
    records it), so that `up -i` of it and `up --cloud` are one deployment; else your own hosts'."""
    dep = cloud_entry_of(config, inventory)
    if dep is not None:
        return DeploymentId(dep.name, dep.cloud, Path(dep.inventory))
    return DeploymentId(inventory_name(inventory), None, inventory)


def of_cloud(config: Config, cloud: str, name: str) -> DeploymentId:
    """The cloud deployment ``name`` on ``cloud``, with its serving inventory where the ledger has one."""
    dep = ledger.load(config.state_dir, cloud, name)
    inventory = Path(dep.inventory) if dep is not None and dep.inventory else None
    return DeploymentId(name, cloud, inventory)
