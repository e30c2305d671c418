"""The serving record: how zenops started the servers of an inventory (the ServeRequest as a dict, the vLLM/zentorch
pair, the API key file), ``<state_dir>/serving/<inventory stem>-<hash>.json``, mode 0600. `zenops up --model`
(zenops.serve) writes it, `zenops bench` (zenops.bench.run) reads it, `zenops down --inventory` (zenops.hosts) removes
it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from zenops.config import Config
from zenops.errors import ZenopsError


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
    gateway: Mapping[str, Any] = field(default_factory=dict)  # zenops.gateway.Gateway.to_dict(); empty: none

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingRecord:
        values: dict[str, Any] = {}
        for f in fields(cls):
            v = data.get(f.name)
            if f.name in ("request", "compat", "plans", "endpoints", "images", "gateway"):
                values[f.name] = dict(v) if isinstance(v, Mapping) else {}
            elif f.name == "inventory":
                values[f.name] = str(v) if v else ""
            else:
                values[f.name] = str(v) if v not in (None, "") else None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def deployment_key(inventory: Path) -> str:
    """The name zenops files a deployment of an inventory under (serving record, lock, rollout state):
    ``<inventory stem>-<hash of its absolute path>``."""
    digest = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:8]
    return f"{inventory.stem}-{digest}"


def serving_record_path(config: Config, inventory: Path) -> Path:
    """Where zenops records how it started the servers of ``inventory`` (what `zenops bench` benchmarks, and what
    `--compare-platforms` restarts): ``<state_dir>/serving/<inventory stem>-<hash>.json``."""
    return config.state_dir / "serving" / f"{deployment_key(inventory)}.json"


def save_serving_record(config: Config, inventory: Path, record: ServingRecord) -> Path:
    path = serving_record_path(config, inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record.to_dict(), f, indent=2, sort_keys=True)
    tmp.replace(path)
    return path


def load_serving_record(config: Config, inventory: Path) -> ServingRecord | None:
    path = serving_record_path(config, inventory)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as e:
        raise ZenopsError(
            f"{path}: the serving record cannot be read ({e})",
            hint=f"remove it and start the servers again with `zenops up --inventory {inventory} --model ...`",
        ) from e
    return ServingRecord.from_dict(data) if isinstance(data, dict) else None
