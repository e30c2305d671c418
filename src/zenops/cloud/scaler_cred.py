"""The scaling loop's cloud credential: one Keystone application credential per deployment with a loop
(`up --replicas MIN..MAX`), which the loop on the gateway's server uses to create, replace and delete the
deployment's servers (zenops.deployment.services.scaler).

* named ``zenops-scaler-<deployment>`` and described with the deployment's marks (credentials carry no tags), so
  `zenops leaks` finds it and `zenops down` deletes it;
* ``unrestricted=False``: it cannot create application credentials or trusts (Keystone refuses them to a restricted
  credential);
* the project's member role only (``member``, or ``_member_`` of older clouds: zenops.cloud.expiry_switch.switch_roles),
  not all of the creator's roles (Keystone's default: an admin's credential would carry admin);
* expiring with the deployment (its ``zenops:expires_at`` plus a margin) when it has an expiry; without one, it lives
  until `down` deletes it;
* no access rules: the loop needs Nova (servers, flavors), Neutron (ports, floating IPs, security groups), Glance
  (images) and Cinder where the profile boots from volume, too many calls to list path by path. What the cloud lets
  us restrict: the project (a credential is scoped to the one project it was made in), the roles, the expiry, and
  (Keystone >= Train) access rules. What it does not: within the project and the member role, the credential can
  create any server up to the project's quota and delete any server of the project, not only the deployment's (its
  marks are zenops's convention, not the cloud's).

Its secret is shown once by Keystone; it reaches the gateway's server through a controller-side 0600 file, removed on
every way out of :func:`secret_file_of` (an error, Ctrl-C; a SIGKILL's file: :func:`remove_secret_files`).

Pure helpers (name, description, expiry, the deployment of a name) apart from the openstacksdk calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zenops.cloud import expiry_switch
from zenops.cloud import marks as m

NAME_PREFIX = "zenops-scaler-"
DESCRIPTION_PREFIX = "zenops scaling loop; "
DEFAULT_MARGIN_S = 3600


def credential_name(deployment: str) -> str:
    """One credential per deployment: ``zenops-scaler-<deployment>``."""
    return NAME_PREFIX + m.check_name(deployment)


def deployment_of(name: str | None) -> str | None:
    """The deployment of a credential named by :func:`credential_name`; None for any other name."""
    if not name or not name.startswith(NAME_PREFIX):
        return None
    try:
        return m.check_name(name[len(NAME_PREFIX) :])
    except Exception:
        return None


def description(marks: m.Marks) -> str:
    """The marks in the description (Keystone allows 255 characters)."""
    return DESCRIPTION_PREFIX + " ".join(marks.tags())


def campaign_of(cred: Any) -> str | None:
    """The campaign mark a credential's description carries, or None (the expiry switch's reading, this prefix)."""
    return expiry_switch.campaign_of(cred, DESCRIPTION_PREFIX)


def expiry(expires_at: str | None, margin_s: int = DEFAULT_MARGIN_S) -> str | None:
    """The credential's expires_at: the deployment's plus a margin (the loop's last steps still authenticate);
    None: the deployment never expires, nor does the credential (`down` deletes it)."""
    return expiry_switch.credential_expiry(expires_at, margin_s) if expires_at else None


def create_kwargs(marks: m.Marks, roles: list[dict[str, str]] | None) -> dict[str, Any]:
    """The keywords of Keystone's create call (beside the user and the name): restricted, described, the member
    role only where the token has one, expiring with the deployment."""
    out: dict[str, Any] = {"description": description(marks), "unrestricted": False}
    when = expiry(marks.expires_at)
    if when:
        out["expires_at"] = when
    if roles:
        out["roles"] = roles
    return out


@dataclass(frozen=True)
class Credential:
    """What the loop's clouds.yaml needs. ``secret``: never logged, never on argv."""

    id: str
    name: str
    secret: str
    expires_at: str | None

    def __repr__(self) -> str:
        return f"Credential(id={self.id!r}, name={self.name!r}, expires_at={self.expires_at!r}, secret=<hidden>)"


def deployment_expiry(conn: Any, dep: Any) -> str | None:
    """The deployment's expiry, as `up --ttl` wrote it on its servers (``zenops:expires_at``, the latest where they
    differ: what `up` keeps and `reap` reads), whether or not an expiry switch was armed; the switch's record when no
    server says (they are gone); None: it never expires."""
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.deployment.provision import decide_expiry  # noqa: PLC0415

    servers = ops.owned_servers(conn, dep.cloud, deployment=dep.name)
    marked, _said = decide_expiry(None, [(getattr(s, "metadata", None) or {}).get(m.EXPIRES_KEY) for s in servers])
    return marked or (dep.expiry_switch or {}).get("expires_at") or None


def loop_endpoints(conn: Any, interface: str = "any") -> list[dict[str, str]]:
    """Every Keystone the loop's host might reach, in the order the loop prefers them (the catalog's
    internal endpoints, then its public ones; the cloud profile's api_interface alone when it names one), each with
    its interface: the role tries them from the host and writes the first that answers into the loop's clouds.yaml
    (tenant servers of many clouds do not reach the internal endpoints)."""
    out: list[dict[str, str]] = []
    for iface in ("internal", "public") if interface == "any" else (interface,):
        for found in expiry_switch.server_endpoints(conn, iface):
            if found["auth_url"] not in {e["auth_url"] for e in out}:
                out.append({"auth_url": found["auth_url"], "interface": iface})
    return out


# --- openstacksdk --------------------------------------------------------------------------------------------------


def _user_id(conn: Any) -> str:
    uid = getattr(conn, "current_user_id", None)
    if not uid:
        raise ValueError("the connection has no user (application credentials belong to a user)")
    return str(uid)


def owned(conn: Any, *, deployment: str | None = None) -> list[Any]:
    """This user's scaler credentials (of one deployment, or all)."""
    user = _user_id(conn)
    out = []
    for c in conn.identity.application_credentials(user):
        dep = deployment_of(getattr(c, "name", None))
        if dep is not None and (deployment is None or dep == deployment):
            out.append(c)
    return out


def listed(conn: Any, cloud: str) -> list[Any]:
    """:func:`owned`, or nothing where this user may not list application credentials (what `down` and `leaks`
    read, which must work on every cloud): the expiry switch's listing of this kind."""
    return expiry_switch.listed(conn, cloud, owned)


def describe(cred: Any) -> dict[str, Any]:
    """A credential in the form of `down`'s and `leaks`' resource lines."""
    return expiry_switch.describe(cred, deployment_of, DESCRIPTION_PREFIX)


def remove(conn: Any, creds: list[Any], progress: Any = None) -> list[dict[str, Any]]:
    """Delete these credentials (missing ones are fine); returns them described."""
    return expiry_switch.remove(conn, creds, progress, describe)


def create(conn: Any, marks: m.Marks) -> Credential:
    """Make (again: an existing one is deleted first, its secret is gone) the deployment's loop credential."""
    name = credential_name(marks.deployment)
    remove(conn, owned(conn, deployment=marks.deployment))
    roles = expiry_switch.switch_roles(expiry_switch.token_roles(conn))
    kwargs = create_kwargs(marks, roles)
    cred = conn.identity.create_application_credential(_user_id(conn), name, **kwargs)
    return Credential(str(cred.id), name, str(cred.secret), kwargs.get("expires_at"))


def secret_path(state_dir: Path, cloud: str, deployment: str) -> Path:
    from zenops.cloud import ledger  # noqa: PLC0415

    return ledger.keys_dir(state_dir, cloud) / f"{credential_name(deployment)}.secret"


def remove_secret_files(state_dir: Path, cloud: str, deployment: str) -> list[Path]:
    """The secret file a killed run (SIGKILL) left, removed; returns it."""
    p = secret_path(state_dir, cloud, deployment)
    if p.is_file():
        p.unlink(missing_ok=True)
        return [p]
    return []


@contextmanager
def secret_file_of(cred: Credential, path: Path) -> Iterator[Path]:
    """The credential's secret in a 0600 file at ``path`` for the block (the play ships it), removed on every way
    out (an error, Ctrl-C)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(cred.secret)
        yield path
    finally:
        path.unlink(missing_ok=True)
