"""The files of one deployment, in one place: its serving record (``serving/``), the API key and the metrics password
zenops generated for it (``secrets/``), its rollout ledger (``rollouts/<name>/``: state.json, history.jsonl) and, for
a cloud deployment, its entry in the cloud ledger (``deployments/<cloud>/<name>.json``). Every file is written and
read through zenops.statefile (atomic, fsynced; a damaged file is named, never a traceback), and filed under the
deployment's serving inventory (zenops.deployment.identity.inventory_name).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zenops.cloud import ledger
from zenops.config import Config
from zenops.deployment import record as record_lib
from zenops.deployment.identity import cloud_entry_of, inventory_name
from zenops.deployment.rollouts import Ledger


class Store:
    """The files of the deployment served on ``inventory``."""

    def __init__(self, config: Config, inventory: Path) -> None:
        self.config = config
        self.inventory = inventory
        self.name = inventory_name(inventory)

    # the serving record: what `up --model` started, and the state of the deployment's services
    @property
    def record_path(self) -> Path:
        return record_lib.serving_record_path(self.config, self.inventory)

    def record(self) -> record_lib.ServingRecord | None:
        """The serving record (None: none); DamagedStateError naming the file and the fix when it cannot be read."""
        return record_lib.load_serving_record(self.config, self.inventory)

    def save_record(self, record: record_lib.ServingRecord) -> Path:
        return record_lib.save_serving_record(self.config, self.inventory, record)

    def remove_record(self) -> None:
        self.record_path.unlink(missing_ok=True)

    # the API key zenops generated (a key given with --api-key-file is the operator's, not kept here), and the
    # metrics' own password (node_exporter's basic auth)
    @property
    def api_key_path(self) -> Path:
        return record_lib.api_key_path(self.config, self.inventory)

    def metrics_password(self) -> Path:
        return record_lib.ensure_metrics_password(self.config, self.inventory)

    def forget_secrets(self, note: Callable[[str], None]) -> list[Path]:
        return record_lib.forget_secrets(self.config, self.inventory, note)

    # the rollout ledger: the rollout in progress (or the last) and the history of rollout events
    @property
    def rollouts(self) -> Ledger:
        return Ledger(self.config, self.name)

    # the cloud ledger's entry (None: your own hosts, or not recorded on this controller)
    def cloud_entry(self) -> ledger.Deployment | None:
        return cloud_entry_of(self.config, self.inventory)
