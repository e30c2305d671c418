"""Ownership marks: how zenops recognises what it created. One source of truth for their format.

* Neutron resources and Nova servers carry tags: ``zenops``, ``zenops:deployment=<name>``, ``zenops:campaign=<id>``.
* Nova servers also carry metadata with the same facts and the creator (metadata is what `openstack server show`
  prints first, and it survives where tags are not supported).
* Keypairs can hold neither: their name is ``zenops-<deployment>`` and the ledger records that zenops created them.
* Glance images zenops baked (`zenops image bake`) carry the tags and, from their creation (Nova's snapshot call takes
  no tags), the servers' metadata as properties, plus ``zenops:bake`` (the digest of what is baked in); one made with
  ``--keep`` also ``zenops:keep`` = 1: `down` and `leaks` leave it to the operator.
* A server may carry an expiry, metadata ``zenops:expires_at`` (ISO-8601 UTC, seconds, e.g. 2025-11-03T14:00:00Z),
  set at creation from `up --ttl` (or a campaign's budget.ttl). `zenops reap` removes deployments whose servers have
  all passed it; a server without one is never reaped.

Nothing without the ``zenops`` tag (or, for servers, metadata ``zenops=1``) is ever touched by ``down``.
"""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from zenops.errors import UsageError

OWNER_TAG = "zenops"
DEPLOYMENT_PREFIX = "zenops:deployment="
CAMPAIGN_PREFIX = "zenops:campaign="
EXPIRES_KEY = "zenops:expires_at"
ROLE_KEY = "zenops:role"  # server metadata: "gateway" on the gateway's own server (`up --gateway-flavor`)
GATEWAY_ROLE = "gateway"
BAKE_KEY = "zenops:bake"  # image property: the digest of a baked image's inputs (zenops.cloud.bake)
KEEP_KEY = "zenops:keep"  # image property "1": kept past the deployment's `down`, not a leak
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
    expires_at: str | None = None  # servers only (metadata): format_expiry's form; None: never expires

    def tags(self) -> list[str]:
        out = [OWNER_TAG, DEPLOYMENT_PREFIX + self.deployment]
        if self.campaign:
            out.append(CAMPAIGN_PREFIX + self.campaign)
        return out

    def server_metadata(self, who: str | None = None) -> dict[str, str]:
        meta = {"zenops": "1", "zenops:deployment": self.deployment, "zenops:creator": who or creator()}
        if self.campaign:
            meta["zenops:campaign"] = self.campaign
        if self.expires_at:
            meta[EXPIRES_KEY] = self.expires_at
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
    """A server's marks (its tags, else its metadata), with the expiry from its metadata when it has one."""
    meta = dict(metadata or {})
    marks = from_tags(tags)
    if marks is None and meta.get("zenops") == "1" and meta.get("zenops:deployment"):
        marks = Marks(meta["zenops:deployment"], meta.get("zenops:campaign"))
    if marks is None:
        return None
    expires = meta.get(EXPIRES_KEY)
    return Marks(marks.deployment, marks.campaign, str(expires)) if expires else marks


def keypair_name(deployment: str) -> str:
    return f"zenops-{deployment}"


# A resource made but not yet tagged (zenops stopped between the two API calls) still carries its marks elsewhere:
# the network, router and security group by their name (``zenops-<deployment>``, role provision's), a floating IP
# by the description it is created with (`description_of`). `down` and `leaks` find those too.
DESCRIPTION_PREFIX = "zenops marks: "


def description_of(tags: Iterable[str]) -> str:
    """The description a resource is created with, so that its marks are there before its tags are."""
    return DESCRIPTION_PREFIX + " ".join(tags)


def from_description(description: str | None) -> Marks | None:
    text = str(description or "")
    return from_tags(text[len(DESCRIPTION_PREFIX) :].split()) if text.startswith(DESCRIPTION_PREFIX) else None


def from_name(name: str | None) -> Marks | None:
    """The deployment a resource named ``zenops-<deployment>`` (role provision's network, router and security group,
    the generated keypair: :func:`keypair_name`) belongs to; None otherwise."""
    text = str(name or "")
    if not text.startswith("zenops-"):
        return None
    deployment = text[len("zenops-") :]
    return Marks(deployment) if _NAME.match(deployment) else None


# --- expiry ----------------------------------------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """3720 -> '1h2m', 90061 -> '1d1h1m', 42 -> '42s' (for messages: minutes are enough past an hour)."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    out = "".join(f"{v}{u}" for v, u in ((d, "d"), (h, "h"), (mins, "m")) if v)
    return out + (f"{secs}s" if secs and not (d or h) else "")


def format_expiry(when: datetime) -> str:
    """ISO-8601 UTC to the second, with Z: the form of ``zenops:expires_at``."""
    return when.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_after(ttl_s: int, now: datetime | None = None) -> str:
    return format_expiry((now or datetime.now(UTC)) + timedelta(seconds=ttl_s))


def parse_expiry(value: str | None) -> datetime | None:
    """A ``zenops:expires_at`` value as an aware UTC datetime; None when missing or unreadable (never expires: a
    hand-edited value zenops cannot read must not get a server deleted). A value without a zone is read as UTC."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(str(value).strip())
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
