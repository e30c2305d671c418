"""`zenops reap`: the deployments whose servers have all passed their expiry, removed as `down` does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from zenops.cloud import marks as m
from zenops.config import Config
from zenops.errors import CanceledError, ExitCode, UsageError, ZenopsError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    from zenops.spend import Spend
from zenops.deployment.common import Note, ignore
from zenops.deployment.teardown import down


@dataclass(frozen=True)
class Expiry:
    """One deployment's servers and their expiry, as the cloud has them.

    ``expires_at``: the latest ``zenops:expires_at`` of its servers (a deployment is reaped only when every server has
    passed its own), None when a server has none (or one zenops cannot read): never reaped."""

    deployment: str
    campaign: str | None
    servers: tuple[str, ...]
    expires_at: str | None
    expired: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "campaign": self.campaign,
            "servers": list(self.servers),
            "expires_at": self.expires_at,
            "expired": self.expired,
            "reason": self.reason,
        }


def select_expired(servers: list[Any], now: datetime) -> list[Expiry]:
    """Group zenops-marked servers (openstacksdk servers, or anything with name, metadata and tags) by deployment and
    say which have expired at ``now``. Deployments none of whose servers carries an expiry are left out."""
    groups: dict[str, list[tuple[str, m.Marks]]] = {}
    for srv in servers:
        mk = m.from_server(getattr(srv, "metadata", None), getattr(srv, "tags", None))
        if mk is not None:
            groups.setdefault(mk.deployment, []).append((str(getattr(srv, "name", "") or getattr(srv, "id", "")), mk))
    out = []
    for deployment, members in sorted(groups.items()):
        if not any(mk.expires_at for _, mk in members):
            continue
        names = tuple(sorted(n for n, _ in members))
        campaign = next((mk.campaign for _, mk in members if mk.campaign), None)
        when = [(n, mk.expires_at, m.parse_expiry(mk.expires_at)) for n, mk in members]  # names may repeat
        without = [f"{n} ({f'unreadable: {raw!r}' if raw else 'none'})" for n, raw, w in when if w is None]
        if without:
            why = f"left alone: server(s) without an expiry: {', '.join(sorted(without))}"
            out.append(Expiry(deployment, campaign, names, None, False, why))
            continue
        times = [w for _, _, w in when if w is not None]
        latest = max(times)
        left = (latest - now).total_seconds()
        expired = left <= 0
        if expired:
            reason = f"expired {m.format_duration(left)} ago"
        else:
            reason = f"expires in {m.format_duration(left)}"
            if len(times) > 1:
                reason += f" ({sum(1 for w in times if w <= now)} of {len(times)} server(s) expired)"
        out.append(Expiry(deployment, campaign, names, m.format_expiry(latest), expired, reason))
    return out


@dataclass
class ReapResult:
    cloud: str
    now: str
    dry_run: bool
    reaped: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict() + removed
    kept: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict(): not expired (or not confirmed)
    failed: list[dict[str, Any]] = field(default_factory=list)  # Expiry.to_dict() + error, hint, exit_code

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ReapFailedError(ZenopsError):
    """Some expired deployments could not be removed; exits with the first one's code (e.g. 14: locked, 8: cloud)."""

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int = ExitCode.FAILURE) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = exit_code


def reap(
    config: Config,
    cloud: str,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    confirm: Callable[[Spend], bool] | None = None,
    note: Note = ignore,
) -> ReapResult:
    """Remove every deployment on ``cloud`` whose servers have all passed their ``zenops:expires_at``, each exactly
    as ``down(name=...)`` does (its lock held, its expiry read again under it), whether or not this machine's ledger
    knows it. A deployment that fails is reported in ``failed`` and the others go on; ``confirm`` declining one
    keeps it."""
    from zenops.cloud import ops  # noqa: PLC0415
    from zenops.deployment.identity import DeploymentId, locked  # noqa: PLC0415

    now = now or datetime.now(UTC)
    result = ReapResult(cloud, m.format_expiry(now), dry_run)
    conn = ops.connect(cloud)
    for exp in select_expired(ops.owned_servers(conn, cloud), now):
        if not exp.expired:
            result.kept.append(exp.to_dict())
            continue
        note(f"deployment {exp.deployment}: {exp.reason} ({exp.expires_at})")
        try:
            if dry_run:
                res = down(config, cloud=cloud, name=exp.deployment, dry_run=True, note=note)
            else:
                with locked(config, [DeploymentId(exp.deployment, cloud)], note=note):
                    # read again under the lock: an `up --ttl` that held it may have moved the expiry
                    again = select_expired(ops.owned_servers(conn, cloud, deployment=exp.deployment), now)
                    if not (again and again[0].expired):
                        result.kept.append((again[0] if again else exp).to_dict())
                        continue
                    res = down(
                        config, cloud=cloud, name=exp.deployment, confirm=confirm, note=note, command="zenops reap"
                    )
        except CanceledError:
            result.kept.append({**exp.to_dict(), "reason": exp.reason + "; not confirmed"})
            continue
        except UsageError:
            raise  # e.g. not interactive and no --yes: the same for every deployment
        except ZenopsError as e:
            result.failed.append({**exp.to_dict(), "error": e.message, "hint": e.hint, "exit_code": e.exit_code})
            continue
        result.reaped.append({**exp.to_dict(), "removed": res.removed})
    return result
