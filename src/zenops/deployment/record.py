"""The serving record of a deployment: how zenops started the servers of its inventory (the ServeRequest as a dict,
the vLLM/zentorch pair, the API key file) and the state of its services (zenops.deployment.services: the gateway...),
``<state_dir>/serving/<inventory stem>-<hash>.json``, mode 0600. `zenops up --model` (zenops.serve) writes it,
`zenops bench` and `zenops rollout` read it, `zenops down` removes it; zenops.deployment.store files it."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.config import Config
from zenops.deployment.identity import inventory_name
from zenops.errors import UsageError


@dataclass(frozen=True)
class ServingRecord:
    """How zenops started the servers of one inventory. Stored as JSON with these keys; a record missing some (an
    older zenops, a hand edit) reads with their defaults, unknown keys are ignored."""

    inventory: str = ""  # the inventory file, absolute
    request: Mapping[str, Any] = field(default_factory=dict)  # the ServeRequest (zenops.serve.request_from_dict)
    compat: Mapping[str, Any] = field(default_factory=dict)  # the vLLM/zentorch pair: id, vllm, zentorch...
    model: str | None = None  # the name clients use
    model_spec: str | None = None  # the catalogue model
    plans: Mapping[str, Any] = field(default_factory=dict)  # host -> Plan.to_dict()
    endpoints: Mapping[str, Any] = field(default_factory=dict)  # host -> the servers' URLs
    images: Mapping[str, Any] = field(default_factory=dict)  # host -> the engine image there
    api_key_file: str | None = None
    deployment: str | None = None
    updated_at: str | None = None
    # service name -> its state as the service returned it (zenops.deployment.services); a service not there is off
    services: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingRecord:
        values: dict[str, Any] = {}
        for f in fields(cls):
            v = data.get(f.name)
            if f.name == "services":
                services = dict(v) if isinstance(v, Mapping) else {}
                if isinstance(data.get("gateway"), Mapping) and data["gateway"]:  # written before services existed
                    services.setdefault("gateway", data["gateway"])
                values[f.name] = {str(k): dict(s) for k, s in services.items() if isinstance(s, Mapping) and s}
            elif f.name in ("request", "compat", "plans", "endpoints", "images"):
                values[f.name] = dict(v) if isinstance(v, Mapping) else {}
            elif f.name == "inventory":
                values[f.name] = str(v) if v else ""
            else:
                values[f.name] = str(v) if v not in (None, "") else None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def gateway(self) -> Mapping[str, Any]:
        """The gateway service's state ({}: the deployment has none): the endpoint bench and rollout use."""
        return self.services.get("gateway") or {}

    def with_services(self, services: Mapping[str, Mapping[str, Any]]) -> ServingRecord:
        """This record with these services' states (a service absent or empty: off)."""
        return replace(self, services={k: dict(v) for k, v in services.items() if v})


def serving_record_path(config: Config, inventory: Path) -> Path:
    """Where zenops records how it started the servers of ``inventory`` (what `zenops bench` benchmarks, and what
    `--compare-platforms` restarts): ``<state_dir>/serving/<inventory stem>-<hash>.json``."""
    return config.state_dir / "serving" / f"{inventory_name(inventory)}.json"


def api_key_path(config: Config, inventory: Path) -> Path:
    """Where zenops keeps the API key it generates for the servers of this inventory (one key per inventory file):
    ``<state_dir>/secrets/<inventory stem>-<hash>.api-key``. `zenops down` removes it (unless --keep-secrets)."""
    return config.state_dir / "secrets" / f"{inventory_name(inventory)}.api-key"


def metrics_password_path(config: Config, inventory: Path) -> Path:
    """Where zenops keeps node_exporter's basic auth password for the metrics of this inventory (`up --metrics on`;
    a secret of its own, never the API key): ``<state_dir>/secrets/<inventory stem>-<hash>.metrics-password``.
    `zenops down` removes it with the API key file (unless --keep-secrets)."""
    return config.state_dir / "secrets" / f"{inventory_name(inventory)}.metrics-password"


def ensure_metrics_password(config: Config, inventory: Path) -> Path:
    """The metrics password file of ``inventory``, made (random, mode 0600) when there is none. Its path, resolved;
    UsageError naming the fix when the file there is empty or readable by others."""
    path = metrics_password_path(config, inventory)
    if not path.exists():
        statefile.write_text(path, "zm-" + secrets.token_urlsafe(32))
    if not path.is_file() or path.stat().st_size == 0:
        raise UsageError(
            f"the metrics password file {path} is empty or not a file",
            hint=f"remove it (zenops makes another): rm {path}",
        )
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise UsageError(
            f"the metrics password file {path} is readable by others (mode {mode:04o})", hint=f"chmod 600 {path}"
        )
    return path.resolve()


def forget_secrets(config: Config, inventory: Path, note: Callable[[str], None]) -> list[Path]:
    """Remove the API key file and the metrics password file zenops generated for ``inventory`` (`zenops down`; a
    key given with --api-key-file is the operator's and stays), so that a deployment made again gets new ones.
    Returns the files there were."""
    removed = []
    for path, what in ((api_key_path(config, inventory), "API key"), (metrics_password_path(config, inventory),
                                                                        "metrics password")):  # fmt: skip
        if path.is_file():
            path.unlink()
            note(f"removed the {what} file {path} (`--keep-secrets` keeps it)")
            removed.append(path)
    return removed


def save_serving_record(config: Config, inventory: Path, record: ServingRecord) -> Path:
    return statefile.write_json(serving_record_path(config, inventory), record.to_dict())


def load_serving_record(config: Config, inventory: Path) -> ServingRecord | None:
    """The record (None: none); DamagedStateError naming the file and the fix when it cannot be read."""
    path = serving_record_path(config, inventory)
    try:
        data = statefile.read_json_object(path)
    except statefile.DamagedStateError as e:
        raise statefile.DamagedStateError(
            path,
            e.reason,
            hint=f"remove it and start the servers again with `zenops up --inventory {inventory} --model ...`",
        ) from e
    return ServingRecord.from_dict(data) if data is not None else None
