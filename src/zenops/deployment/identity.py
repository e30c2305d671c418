"""Which deployment: one identity per deployment, however a command names it, and the one lock key derived from it.

- A cloud deployment (`zenops up --cloud`) is named by its cloud and the name `up` gave it (``--deployment``); its
  serving inventory is the one `up` wrote (the cloud ledger records it), so naming it by that inventory (`-i`) is the
  same deployment.
- Your own hosts' deployment is named after its inventory file: ``<inventory stem>-<hash of its absolute path>`` (two
  files both called hosts.yml are two deployments).

Every name zenops derives from a deployment comes from here, one property (or the one function behind it) each:

- :attr:`DeploymentId.key`: its lock (zenops.lock, taken by zenops.deployment.lifecycle), the same however it is
  named: ``cloud-<cloud>-<name>``, or your own hosts' ``<inventory stem>-<hash>``.
- :attr:`DeploymentId.files_name` (:func:`inventory_name`): the name its files (serving record, API key, rollout
  ledger: zenops.deployment.store) are filed under, ``<stem>-<hash>`` of its serving inventory.
- :attr:`DeploymentId.label` (:func:`inventory_label`): the name its containers, metrics, role variables
  (``vllm_server_deployment``) and bench results carry: its serving inventory's stem (a cloud deployment's:
  ``<name>.inventory``, of the ``<name>.inventory.yml`` `up` wrote), as zenops has always labelled them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zenops.cloud import ledger
from zenops.config import Config
from zenops.errors import UsageError
from zenops.lock import deployment_locks, describe_lock


def inventory_name(inventory: Path) -> str:
    """The name zenops files the deployment of an inventory under: ``<inventory stem>-<hash of its absolute path>``."""
    digest = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:8]
    return f"{inventory.stem}-{digest}"


def inventory_label(inventory: Path) -> str:
    """The name the deployment served on ``inventory`` carries on its containers, metrics and results: the
    inventory's stem (:attr:`DeploymentId.label`; for the steps that are handed the inventory alone)."""
    return inventory.stem


@dataclass(frozen=True)
class DeploymentId:
    """One deployment. ``cloud`` None: your own hosts (``inventory`` then names it)."""

    name: str
    cloud: str | None = None
    inventory: Path | None = None  # its serving inventory (a cloud deployment's: the one `up` wrote, once it has one)
    # the cloud ledger's entry when the command named the deployment (--deployment): its flavor, price and cloud label
    # results; not part of the identity
    entry: ledger.Deployment | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """The deployment's lock key, the same for every way of naming it: ``cloud-<cloud>-<name>`` or ``<name>``."""
        return f"cloud-{self.cloud}-{self.name}" if self.cloud else self.name

    @property
    def files_name(self) -> str | None:
        """The name its files are kept under (its serving inventory's; None: a cloud deployment not serving yet)."""
        return inventory_name(self.inventory) if self.inventory is not None else None

    @property
    def label(self) -> str:
        """The name its containers, metrics, role variables and bench results carry (:func:`inventory_label` of its
        serving inventory; its name while it has none)."""
        return inventory_label(self.inventory) if self.inventory is not None else self.name

    @property
    def hosts(self) -> Path:
        """Its serving inventory, the hosts its steps run on (UsageError: a cloud deployment not provisioned yet)."""
        if self.inventory is None:
            raise UsageError(f"{self.describe()} has no inventory yet: provision it first")
        return self.inventory

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
    records it), so that `up -i` of it and `up --cloud` are one deployment; else your own hosts'. Its steps run on
    ``inventory`` as given."""
    dep = cloud_entry_of(config, inventory)
    if dep is not None:
        return DeploymentId(dep.name, dep.cloud, inventory)
    return DeploymentId(inventory_name(inventory), None, inventory)


def of_cloud(config: Config, cloud: str, name: str) -> DeploymentId:
    """The cloud deployment ``name`` on ``cloud``, with its serving inventory where the ledger has one."""
    dep = ledger.load(config.state_dir, cloud, name)
    inventory = Path(dep.inventory) if dep is not None and dep.inventory else None
    return DeploymentId(name, cloud, inventory)


# --- locks without opening (removing deployments whole; who holds one) --------------------------------------------


@contextmanager
def locked(config: Config, deps: Iterable[DeploymentId], *, note: Callable[[str], None]) -> Iterator[None]:
    """The locks of ``deps`` held while the block runs (`down --campaign`, `reap`: deployments removed whole, no step
    of theirs run; a step runs in zenops.deployment.lifecycle.Deployment.open), each under its identity's key, taken
    in one order so two commands cannot deadlock."""
    with deployment_locks(config, [d.key for d in deps], note=note):
        yield


def lock_holder(config: Config, dep: DeploymentId) -> dict[str, Any] | None:
    """Who holds the lock of ``dep`` (`status -i`), as zenops.lock.describe_lock says it; None: nobody."""
    return describe_lock(config, dep.key)
