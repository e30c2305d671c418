"""The dead-man's switch's cloud side: a restricted, expiring Keystone application credential per server.

A server that carries ``zenops:expires_at`` can delete itself at its expiry (role ``zenops.inference.expiry_switch``:
a systemd timer that authenticates with this credential and sends ``DELETE /servers/<its id>`` to Nova), so that a
lost controller and a forgotten `zenops reap` cron leak nothing. The credential:

* is made by the deployment's owner (application credentials belong to a user), one per server, named
  ``zenops-expiry-<deployment>.<server id>`` and described with the deployment's marks, so `leaks` can find it and
  `down` can delete it;
* is ``unrestricted=False`` (it cannot make other credentials or trusts) and carries one access rule: ``DELETE
  <compute path>/servers/<its server's id>`` on the ``compute`` service, nothing else: a server holding it can delete
  itself and no sibling (Keystone >= Train; the service's
  keystonemiddleware enforces the rules only when its ``[keystone_authtoken] service_type`` is set, and refuses every
  restricted token when it is not);
* expires a little after the servers (``margin_s``), so the timer's retries still authenticate and a forgotten
  credential stops working by itself;
* carries only the project's member role (``member``, or ``_member_`` of older clouds) where the user's token has
  one, not all of the user's roles (Keystone's default: an admin's credential would carry admin): Nova's
  ``DELETE /servers/{id}`` needs project member (its default policy), nothing more. Keystone restricts an
  application credential in three ways, all used here: ``roles`` (a subset of the creator's roles on the project),
  ``access_rules`` (which API calls), ``expires_at``. A cloud whose roles have other names: Keystone's default, the
  access rule still limits the credential to that one call.

Its secret reaches the servers through a 0600 file on the controller, removed on every way out of :func:`arm`
(an error, Ctrl-C, SIGTERM: zenops turns it into Ctrl-C); a SIGKILL cannot be caught: the next `up` of the
deployment (:func:`arm`) and `zenops down` remove what such a run left (:func:`remove_secret_files`).

Pure helpers (names, rules, times) are separate from the openstacksdk calls so they can be unit-tested.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from zenops.cloud import marks as m

if TYPE_CHECKING:
    from zenops.context import RunContext
    from zenops.runner import RunResult

NAME_PREFIX = "zenops-expiry-"
DESCRIPTION_PREFIX = "zenops expiry switch; "
DEFAULT_MARGIN_S = 3600
COMPUTE_SERVICE = "compute"
MIN_LEAD_S = 60  # an expiry closer than this when the servers are ready: no switch (the role wants it in the future)


def credential_name(deployment: str, server_id: str) -> str:
    """One credential per server: the deployment, a dot (never in a deployment's name), the server's Nova id."""
    if not server_id or "." in server_id:
        raise ValueError(f"server id {server_id!r}: expected a Nova id")
    return f"{NAME_PREFIX}{m.check_name(deployment)}.{server_id}"


def deployment_of(name: str | None) -> str | None:
    """The deployment a credential named by :func:`credential_name` belongs to (or one an older zenops named after
    the deployment alone, ``zenops-expiry-<deployment>``); None for anything else."""
    if not name or not name.startswith(NAME_PREFIX):
        return None
    rest = name[len(NAME_PREFIX) :].split(".", 1)[0]
    try:
        return m.check_name(rest)
    except Exception:
        return None


def description(marks: m.Marks) -> str:
    """Application credentials have no tags: the marks go into the description (Keystone allows 255 characters)."""
    return DESCRIPTION_PREFIX + " ".join(marks.tags())


def compute_path(compute_url: str) -> str:
    """The path of the compute endpoint as the API sees it (``http://h:8774/v2.1`` -> ``/v2.1``). An endpoint that
    still carries a project id (``/v2.1/<project>``, ``/v2/%(tenant_id)s``) is refused: the rule would not match."""
    path = urlparse(compute_url).path.rstrip("/")
    parts = [p for p in path.split("/") if p]
    if not parts or not parts[-1].startswith("v2"):
        raise ValueError(f"compute endpoint {compute_url!r}: expected a path ending in /v2.1 (or /v2)")
    return path


def access_rules(server_ids: list[str], compute_url: str) -> list[dict[str, str]]:
    """One rule per server: DELETE of that server on the compute service, nothing else."""
    if not server_ids:
        raise ValueError("no servers: an access rule list must name at least one")
    base = compute_path(compute_url)
    return [
        {"service": COMPUTE_SERVICE, "method": "DELETE", "path": f"{base}/servers/{sid}"}
        for sid in sorted(set(server_ids))
    ]


def credential_expiry(expires_at: str, margin_s: int = DEFAULT_MARGIN_S) -> str:
    """The credential's expires_at: the servers' ``zenops:expires_at`` plus a margin (ISO-8601 UTC with Z, a form
    Keystone reads)."""
    when = m.parse_expiry(expires_at)
    if when is None:
        raise ValueError(f"expiry {expires_at!r} is not an ISO-8601 time")
    return m.format_expiry(when + timedelta(seconds=max(int(margin_s), 0)))


@dataclass(frozen=True)
class Credential:
    """What the server's switch needs. ``secret`` is shown once by Keystone: never log it, never put it on argv."""

    id: str
    name: str
    secret: str
    expires_at: str
    access_rules: list[dict[str, str]]

    def __repr__(self) -> str:  # the secret stays out of tracebacks and debug output
        return f"Credential(id={self.id!r}, name={self.name!r}, expires_at={self.expires_at!r}, secret=<hidden>)"


# --- openstacksdk --------------------------------------------------------------------------------------------------


def _user_id(conn: Any) -> str:
    uid = conn.current_user_id
    if not uid:
        raise ValueError("the connection has no user (application credentials belong to a user)")
    return str(uid)


def compute_endpoint(conn: Any) -> str:
    """The compute endpoint of the connection's catalog (region and interface from clouds.yaml)."""
    return str(conn.compute.get_endpoint())


MEMBER_ROLES = ("member", "_member_")  # Nova's server delete needs a member of the project, nothing more


def switch_roles(token_roles: Iterable[str]) -> list[dict[str, str]] | None:
    """The roles of the switch's credential: the member role among the user's roles on the project (its name as
    the token spells it), nothing else. None: the token names no member role (the credential then gets Keystone's
    default, all of the user's roles on the project)."""
    by_lower = {str(r).lower(): str(r) for r in token_roles}
    for wanted in MEMBER_ROLES:
        if wanted in by_lower:
            return [{"name": by_lower[wanted]}]
    return None


def token_roles(conn: Any) -> list[str]:
    """The role names of the connection's token on its project ([] when the session cannot say)."""
    try:
        return [str(r) for r in conn.session.auth.get_access(conn.session).role_names or []]
    except Exception:
        return []


def restricted_credential(conn: Any) -> bool:
    """Whether the connection authenticates with a restricted application credential (``unrestricted=False``, the
    scaling loop's: zenops.cloud.scaler_cred), which Keystone refuses to create or delete application credentials.
    The token says so (its ``application_credential.restricted``; absent: restricted, Keystone's default); False
    when the session cannot say."""
    try:
        cred = conn.session.auth.get_access(conn.session).application_credential
    except Exception:  # no application credential in the token (KeyError), or no session to ask
        return False
    return bool(cred) and dict(cred).get("restricted", True) is not False


def create(
    conn: Any,
    marks: m.Marks,
    server_id: str,
    *,
    expires_at: str,
    margin_s: int = DEFAULT_MARGIN_S,
    compute_url: str | None = None,
) -> Credential:
    """Make (or make again: an existing one of that server is deleted first, its secret is gone) the credential of
    one server of the deployment, restricted to deleting that server."""
    rules = access_rules([server_id], compute_url or compute_endpoint(conn))
    name = credential_name(marks.deployment, server_id)
    user = _user_id(conn)
    remove(conn, [c for c in owned(conn, deployment=marks.deployment) if c.name == name])
    roles = switch_roles(token_roles(conn))
    cred = conn.identity.create_application_credential(
        user,
        name,
        description=description(marks),
        expires_at=credential_expiry(expires_at, margin_s),
        unrestricted=False,
        access_rules=rules,
        **({"roles": roles} if roles else {}),
    )
    return Credential(
        id=str(cred.id),
        name=name,
        secret=str(cred.secret),
        expires_at=str(cred.expires_at),
        access_rules=rules,
    )


def owned(conn: Any, *, deployment: str | None = None) -> list[Any]:
    """The connection's user's zenops expiry credentials (of one deployment, or all)."""
    user = _user_id(conn)
    out = []
    for c in conn.identity.application_credentials(user):
        dep = deployment_of(getattr(c, "name", None))
        if dep is not None and (deployment is None or dep == deployment):
            out.append(c)
    return out


def delete(conn: Any, *, deployment: str | None = None) -> list[str]:
    """Delete the expiry credentials of ``deployment`` (None: all of this user's); returns their names."""
    return [str(d["name"]) for d in remove(conn, owned(conn, deployment=deployment))]


def listed(conn: Any, cloud: str, owned: Callable[[Any], list[Any]] = owned) -> list[Any]:
    """:func:`owned` (or another kind's ``owned``: the scaling loop's), or nothing where this user may not list
    application credentials (a policy that forbids it, a Keystone without them): what `down` and `leaks` read, which
    must work on every cloud."""
    from openstack import exceptions as sdk  # noqa: PLC0415

    from zenops.cloud.errors import classify, retrying  # noqa: PLC0415

    try:
        return retrying(lambda: owned(conn))
    except (sdk.ForbiddenException, sdk.NotFoundException, ValueError):
        return []
    except Exception as e:
        raise classify(e, cloud) from e


def campaign_of(cred: Any, prefix: str = DESCRIPTION_PREFIX) -> str | None:
    """The campaign mark a credential's description carries (:func:`description`; ``prefix``: its kind's), or None."""
    text = str(getattr(cred, "description", None) or "")
    if not text.startswith(prefix):
        return None
    for word in text[len(prefix) :].split():
        if word.startswith(m.CAMPAIGN_PREFIX):
            return word[len(m.CAMPAIGN_PREFIX) :] or None
    return None


def describe(
    cred: Any, deployment_of: Callable[[str | None], str | None] = deployment_of, prefix: str = DESCRIPTION_PREFIX
) -> dict[str, Any]:
    """A credential in the form of `down`'s and `leaks`' resource lines (``ops.describe``); ``deployment_of`` and
    ``prefix``: its kind's name and description (the scaling loop's: zenops.cloud.scaler_cred)."""
    return {
        "kind": "application_credential",
        "id": str(cred.id),
        "name": str(cred.name),
        "deployment": deployment_of(getattr(cred, "name", None)),
        "campaign": campaign_of(cred, prefix),
    }


def remove(
    conn: Any, creds: list[Any], progress: Any = None, describe: Callable[[Any], dict[str, Any]] = describe
) -> list[dict[str, Any]]:
    """Delete these credentials (missing ones are fine); returns them described (``describe``: their kind's)."""
    user = _user_id(conn) if creds else ""
    out = []
    for c in creds:
        if progress is not None:
            progress(f"deleting application_credential {c.name}")
        conn.identity.delete_application_credential(user, c.id, ignore_missing=True)
        out.append(describe(c))
    return out


# --- arming a deployment (zenops up --ttl) ------------------------------------------------------------------------


def server_endpoints(conn: Any, interface: str = "any") -> list[dict[str, str]]:
    """Candidate (auth_url, compute_url) pairs as the servers may reach the APIs: the catalog's internal endpoints,
    then its public ones (``any``), or those of the one interface asked; distinct, in that order."""
    interfaces = ("internal", "public") if interface == "any" else (interface,)
    region = getattr(conn.config, "region_name", None) or None
    out: list[dict[str, str]] = []
    for iface in interfaces:
        try:
            auth = conn.session.get_endpoint(service_type="identity", interface=iface, region_name=region)
            compute = conn.session.get_endpoint(service_type="compute", interface=iface, region_name=region)
        except Exception:  # no such interface in this catalog
            continue
        pair = {"auth_url": str(auth or ""), "compute_url": str(compute or "")}
        if pair["auth_url"] and pair["compute_url"] and pair not in out:
            out.append(pair)
    return out


@dataclass(frozen=True)
class Armed:
    """What :func:`arm` did: the servers whose switch is armed, the endpoint they use, or why there is none."""

    servers: list[str]
    of: int
    expires_at: str
    auth_url: str = ""
    why_not: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def secret_file(state_dir: Path, cloud: str, deployment: str, server_id: str) -> Path:
    from zenops.cloud import ledger  # noqa: PLC0415

    return ledger.keys_dir(state_dir, cloud) / f"{credential_name(deployment, server_id)}.secret"


def remove_secret_files(state_dir: Path, cloud: str, deployment: str) -> list[Path]:
    """The controller-side secret files of a deployment's switch credentials that a killed run left (SIGKILL, a
    power cut: no clean-up ran), removed; returns them."""
    from zenops.cloud import ledger  # noqa: PLC0415

    keys = ledger.keys_dir(state_dir, cloud)
    pattern = f"{glob.escape(NAME_PREFIX + deployment)}.*.secret"
    gone = sorted(p for p in keys.glob(pattern) if p.is_file()) if keys.is_dir() else []
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def _start_over(ctx: RunContext, conn: Any, cloud: str, deployment: str) -> None:
    """Before a deployment's switch is armed (again): its credentials deleted (a re-run makes them again: their
    secrets are gone), and the secret files a killed run (SIGKILL) left, removed and said."""
    delete(conn, deployment=deployment)
    stale = remove_secret_files(ctx.config.state_dir, cloud, deployment)
    if stale:
        ctx.note(f"removed {len(stale)} secret file(s) of expiry-switch credentials a killed run left")


def _credentials(
    ctx: RunContext,
    conn: Any,
    cloud: str,
    marks: m.Marks,
    servers: list[dict[str, Any]],
    compute_url: str,
    *,
    into: dict[str, tuple[Credential, Path]],
) -> None:
    """Each server's own credential, its secret in a controller-side 0600 file, added to ``into`` (inventory host ->
    both) one by one, so that a failure halfway leaves ``into`` naming what exists."""
    for server in servers:
        sid = str(server["id"])
        cred = create(conn, marks, sid, expires_at=str(marks.expires_at), compute_url=compute_url)
        path = secret_file(ctx.config.state_dir, cloud, marks.deployment, sid)
        into[str(server.get("name") or sid)] = (cred, path)  # named before it exists: removed however writing ends
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(cred.secret)


def _credentials_or_why(
    ctx: RunContext,
    conn: Any,
    cloud: str,
    marks: m.Marks,
    servers: list[dict[str, Any]],
    compute_url: str,
    *,
    into: dict[str, tuple[Credential, Path]],
) -> str | None:
    """:func:`_credentials`, or why the cloud cannot have them (what was made deleted again): a compute endpoint
    whose path still carries a project id, a policy or access rules refused. None: all made. Any other cloud error
    raises, classified, after a best-effort delete of those made so far."""
    from openstack import exceptions as sdk  # noqa: PLC0415

    from zenops.cloud.errors import classify  # noqa: PLC0415

    try:
        _credentials(ctx, conn, cloud, marks, servers, compute_url, into=into)
    # a compute endpoint whose path still carries a project id (ValueError); a policy, access rules refused
    except (ValueError, sdk.ForbiddenException, sdk.BadRequestException, sdk.NotFoundException) as e:
        delete(conn, deployment=marks.deployment)
        if isinstance(e, ValueError):
            return str(e)
        return f"the cloud refused a restricted application credential ({classify(e, cloud).message})"
    except Exception as e:
        with contextlib.suppress(Exception):  # those made so far: best effort, the cloud error is the news
            delete(conn, deployment=marks.deployment)
        raise classify(e, cloud) from e
    return None


def _install(
    ctx: RunContext,
    inventory: Path,
    candidates: list[dict[str, str]],
    made: dict[str, tuple[Credential, Path]],
    *,
    mode: str,
    expires_at: str,
) -> RunResult:
    """Run playbooks/expiry_switch.yml: each host gets the endpoints to try and its own credential."""
    from zenops.runner import RunSpec  # noqa: PLC0415

    return ctx.run(
        RunSpec(
            playbook="expiry_switch",
            inventory=inventory,
            extravars={
                "zenops_expiry_endpoints": candidates,
                "zenops_expiry_switch_required": mode == "required",
                # host -> its own credential: the id, and the controller-side 0600 file of its secret
                "zenops_expiry_credentials": {
                    host: {"id": cred.id, "secret_file": str(path)} for host, (cred, path) in made.items()
                },
                "expiry_switch_expires_at": expires_at,
            },
            verbosity=ctx.verbosity,
        )
    )


def _armed_hosts(host_facts: dict[str, dict[str, Any]]) -> tuple[list[str], str]:
    """The hosts whose play said their switch is armed (sorted), and the Keystone URL the last of them uses."""
    armed, url = [], ""
    for host, facts in sorted(host_facts.items()):
        fact = facts.get("zenops_expiry_switch") or {}
        if str(fact.get("armed")).lower() == "true":
            armed.append(host)
            url = str(fact.get("auth_url") or url)
    return armed, url


def arm(
    ctx: RunContext,
    conn: Any,
    *,
    cloud: str,
    marks: m.Marks,
    servers: list[dict[str, Any]],
    inventory: Path,
    mode: str = "auto",
    interface: str = "any",
) -> Armed | None:
    """Give each server of a deployment with an expiry its dead-man's switch: make each server its own credential
    (restricted to deleting that server, expiring after it), and run playbooks/expiry_switch.yml, which installs the
    switch with its credential on each server that reaches Keystone and Nova. ``mode`` auto: a cloud or a server
    that cannot have it is said (a warning) and the deployment goes on; required: it raises; off: nothing. None:
    nothing to arm, or nothing this connection may arm (a restricted application credential, the scaling loop's:
    said, in every mode, and the switches armed before are left as they are)."""
    from zenops.cloud.errors import CloudError  # noqa: PLC0415
    from zenops.errors import RunFailedError  # noqa: PLC0415

    expires_at = marks.expires_at
    if mode == "off" or not expires_at or not servers:
        return None
    ids = [str(s["id"]) for s in servers]
    if restricted_credential(conn):  # Keystone refuses it every credential call: the switches stay as they are
        ctx.warn(
            f"no expiry switch on the new server(s) of {marks.deployment}: this cloud credential is a restricted "
            "application credential (the scaling loop's), which Keystone lets make no credentials; they carry the "
            f"expiry {expires_at}, `zenops reap --cloud {cloud}` removes them once expired"
        )
        return None

    def without(why: str) -> Armed:
        text = f"no expiry switch on {marks.deployment}: {why}; `zenops reap --cloud {cloud}` removes it once expired"
        if mode == "required":
            raise CloudError(
                text, hint="set expiry_switch: auto (or off) for this cloud in zenops.yaml to go on without it"
            )
        ctx.warn(text)
        return Armed([], len(ids), expires_at, why_not=why)

    when = m.parse_expiry(expires_at)
    if when is not None and (when - datetime.now(UTC)).total_seconds() < MIN_LEAD_S:
        return without(f"it expires at {expires_at}, too soon to arm a switch (`zenops reap` is enough)")
    candidates = server_endpoints(conn, interface)
    if not candidates:
        return without(f"the catalog has no identity and compute endpoints of interface {interface}")
    _start_over(ctx, conn, cloud, marks.deployment)
    made: dict[str, tuple[Credential, Path]] = {}  # inventory host -> its server's credential, its secret's file
    try:
        why = _credentials_or_why(ctx, conn, cloud, marks, servers, candidates[0]["compute_url"], into=made)
        if why is not None:
            return without(why)
        try:
            run = _install(ctx, inventory, candidates, made, mode=mode, expires_at=expires_at)
        except RunFailedError as e:  # auto: a host the role does not support costs the switch, not the deployment
            if mode == "required":
                raise
            delete(conn, deployment=marks.deployment)
            return without(f"installing it failed ({e.message.splitlines()[0][:300]})")
    finally:
        for _cred, path in made.values():
            path.unlink(missing_ok=True)  # the servers have them now; a re-run of `up` makes new credentials
    armed, url = _armed_hosts(run.host_facts)
    remove(conn, [made[h][0] for h in made if h not in armed])  # a server without its switch: no credential either
    if not armed:
        tried = ", ".join(c["auth_url"] for c in candidates)
        return without(f"its servers reach neither Keystone nor Nova ({tried})")
    if len(armed) < len(ids):
        ctx.warn(f"expiry switch armed on {len(armed)} of {len(ids)} server(s) only: the others reach no API")
    ctx.note(f"expiry switch armed on {len(armed)} server(s): each deletes itself at {expires_at} (Keystone {url})")
    return Armed(armed, len(ids), expires_at, url)
