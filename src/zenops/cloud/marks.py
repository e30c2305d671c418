"""Ownership marks: how zenops recognises what it created. One source of truth for their format.

* Neutron resources and Nova servers carry tags: ``zenops``, ``zenops:deployment=<name>``, ``zenops:campaign=<id>``.
* Nova servers also carry metadata with the same facts and the creator (metadata is what `openstack server show`
  prints first, and it survives where tags are not supported).
* Keypairs can hold neither: their name is ``zenops-<deployment>`` and the ledger records that zenops created them.

Nothing without the ``zenops`` tag (or, for servers, metadata ``zenops=1``) is ever touched by ``down``.
"""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zenops.errors import UsageError

OWNER_TAG = "zenops"
DEPLOYMENT_PREFIX = "zenops:deployment="
CAMPAIGN_PREFIX = "zenops:campaign="
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


def check_name(name: str, what: str = "deployment") -> str:
    """Deployment and campaign names end up in resource names, tags (Nova: 60 chars) and hostnames."""
    if not _NAME.match(name):
        raise UsageError(
            f"{what} name {name!r} is not allowed",
            hint="use 1-32 characters: lowercase letters, digits and dashes, not starting or ending with a dash",
        )
    return name


def creator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Marks:
    deployment: str
    campaign: str | None = None

    def tags(self) -> list[str]:
        out = [OWNER_TAG, DEPLOYMENT_PREFIX + self.deployment]
        if self.campaign:
            out.append(CAMPAIGN_PREFIX + self.campaign)
        return out

    def server_metadata(self, who: str | None = None) -> dict[str, str]:
        meta = {"zenops": "1", "zenops:deployment": self.deployment, "zenops:creator": who or creator()}
        if self.campaign:
            meta["zenops:campaign"] = self.campaign
        return meta

    def resource_name(self, suffix: str = "") -> str:
        return f"zenops-{self.deployment}" + (f"-{suffix}" if suffix else "")


def from_tags(tags: Iterable[str] | None) -> Marks | None:
    """The marks in a resource's tags, or None when it is not zenops's."""
    tags = list(tags or ())
    if OWNER_TAG not in tags:
        return None
    deployment = next((t[len(DEPLOYMENT_PREFIX) :] for t in tags if t.startswith(DEPLOYMENT_PREFIX)), None)
    if not deployment:
        return None
    campaign = next((t[len(CAMPAIGN_PREFIX) :] for t in tags if t.startswith(CAMPAIGN_PREFIX)), None)
    return Marks(deployment, campaign)


def from_server(metadata: Mapping[str, str] | None, tags: Iterable[str] | None) -> Marks | None:
    marks = from_tags(tags)
    if marks is not None:
        return marks
    meta = dict(metadata or {})
    if meta.get("zenops") == "1" and meta.get("zenops:deployment"):
        return Marks(meta["zenops:deployment"], meta.get("zenops:campaign"))
    return None


def keypair_name(deployment: str) -> str:
    return f"zenops-{deployment}"
