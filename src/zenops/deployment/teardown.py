"""`zenops down` of cloud deployments: every marked resource removed, proven gone, the ledger forgotten."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zenops import spend
from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.config import Config
from zenops.deployment.target import cloud_for
from zenops.errors import CanceledError, UnknownDeploymentError, UsageError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    from zenops.deployment.identity import DeploymentId
    from zenops.spend import Spend
from zenops.deployment.common import Note, ignore, inventory_path, known_hosts_path


@dataclass(frozen=True)
class DownResult:
    cloud: str
    removed: list[dict[str, Any]]
    dry_run: bool
    deployments: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "removed": self.removed, "dry_run": self.dry_run, "deployments": self.deployments}


def down(
    config: Config,
    *,
    cloud: str | None,
    name: str | None = None,
    campaign: str | None = None,
    all_mine: bool = False,
    dry_run: bool = False,
    confirm: Callable[[Spend], bool] | None = None,
    note: Note = ignore,
    keep_secrets: bool = False,
    command: str = "zenops down",
) -> DownResult:
    """Remove the selected deployments' resources from the cloud, prove none is left, then forget them locally
    (:func:`_forget_all`: ledger entry, inventories, generated keypair, pinned host keys, and the API key and metrics
    password files unless ``keep_secrets``). ``confirm`` is asked what ``command`` deletes and what that stops
    costing, before any deletion (False: nothing is deleted, CanceledError)."""
    if sum(bool(x) for x in (name, campaign, all_mine)) != 1:
        raise UsageError(
            "say what to remove: exactly one of --deployment D, --campaign C, --all-mine",
            hint="see `zenops status` for the deployments",
        )
    from zenops.cloud import expiry_switch, ops, scaler_cred  # noqa: PLC0415
    from zenops.cloud.errors import CloudError, classify  # noqa: PLC0415

    cloud = cloud_for(config, cloud, name)
    listed = ledger.listing(config.state_dir, cloud)
    deps = listed.deployments
    selected = _selected(deps, name, campaign, all_mine)
    # a deployment whose ledger file is damaged (warned about): forgotten too once the cloud has nothing of it
    unreadable = [n for _, n in listed.damaged if all_mine or n == name]
    keypairs = {d.keypair for d in (deps if all_mine else selected) if d.keypair_created}
    if name and not selected and config.cloud_profile(cloud).keypair != m.keypair_name(name):
        # not in this machine's ledger (another controller made it, `zenops reap`): the keypair zenops generates for
        # a deployment is named after it, and `leaks` counts it as zenops's; a profile naming it as its own is kept
        keypairs.add(m.keypair_name(name))
    conn = ops.connect(cloud)
    owned = ops.list_owned(conn, cloud, deployment=name, campaign=campaign, keypairs=keypairs)
    plan = ops.teardown(conn, cloud, owned, dry_run=True)
    names = sorted({d.name for d in selected} | {r["deployment"] for r in plan if r["deployment"]})
    # the expiry switch's and the scaling loop's application credentials (no tags), deleted after the servers
    scope = set(names) | ({name} if name else set())
    creds, loop_creds = _credentials(conn, cloud, scope, campaign)
    plan += [expiry_switch.describe(c) for c in creds] + [scaler_cred.describe(c) for c in loop_creds]
    if dry_run or not plan:
        if not dry_run:  # nothing of it on the cloud
            _forget_all(config, cloud, selected, unreadable, keep_secrets=keep_secrets, note=note)
        return DownResult(cloud, plan, dry_run, names)
    if confirm is not None and not confirm(spend.of_teardown(command, cloud, plan, selected)):
        raise CanceledError("nothing was removed", hint="pass --yes to remove without asking")
    from zenops.deployment.services import scaler  # noqa: PLC0415

    scaler.stop_for_down(config, selected, note)  # first: no loop replaces what is deleted now
    removed = ops.teardown(conn, cloud, owned, progress=note)
    try:
        removed += expiry_switch.remove(conn, creds, progress=note)
        removed += scaler_cred.remove(conn, loop_creds, progress=note)
    except Exception as e:
        raise classify(e, cloud) from e
    left = ops.list_owned(conn, cloud, deployment=name, campaign=campaign, keypairs=keypairs)
    left_names = [f"{k} {ops.describe(k, r)['name']}" for k, r in left.items()]
    left_names += [f"application_credential {c.name}" for cs in _credentials(conn, cloud, scope, campaign) for c in cs]
    if left_names:
        raise CloudError(
            f"{len(left_names)} resource(s) are still there after teardown: " + ", ".join(left_names),
            hint="re-run zenops down; if it persists, the cloud refuses the deletion (see its logs)",
        )
    _forget_all(config, cloud, selected, unreadable, keep_secrets=keep_secrets, note=note)
    return DownResult(cloud, removed, False, names)


def _credentials(conn: Any, cloud: str, scope: set[str], campaign: str | None) -> tuple[list[Any], list[Any]]:
    """The expiry switch's and the scaling loop's application credentials of the deployments in ``scope`` (by their
    names) or of ``campaign`` (by their description's mark, even once its servers are all gone)."""
    from zenops.cloud import expiry_switch, scaler_cred  # noqa: PLC0415

    def mine(kind: Any, c: Any) -> bool:
        return kind.deployment_of(c.name) in scope or (campaign is not None and kind.campaign_of(c) == campaign)

    return (
        [c for c in expiry_switch.listed(conn, cloud) if mine(expiry_switch, c)],
        [c for c in scaler_cred.listed(conn, cloud) if mine(scaler_cred, c)],
    )


def _forget_all(
    config: Config,
    cloud: str,
    selected: list[ledger.Deployment],
    unreadable: list[str],
    *,
    keep_secrets: bool,
    note: Note,
) -> None:
    """What this machine keeps of deployments the cloud no longer has: each one's ledger entry, its inventories,
    the keypair zenops generated for it (unknown for an ``unreadable`` ledger file: kept), its pinned host keys, the
    expiry-switch secret files a killed `up --ttl` left, and its API key and metrics password files (unless
    ``keep_secrets``)."""
    from zenops.cloud import expiry_switch, scaler_cred  # noqa: PLC0415
    from zenops.deployment.record import forget_secrets  # noqa: PLC0415

    created = {d.name: d.keypair_created for d in selected}
    for name in [*created, *unreadable]:
        ledger.remove(config.state_dir, cloud, name)
        key = ledger.keys_dir(config.state_dir, cloud) / m.keypair_name(name)
        if created.get(name):
            key.unlink(missing_ok=True)
            key.with_suffix(".pub").unlink(missing_ok=True)
        if not keep_secrets:  # the key of the serving inventory `up --cloud --model` served
            forget_secrets(config, inventory_path(config.state_dir, cloud, name), note)
        for kind in ("", "gateway", "all"):
            inventory_path(config.state_dir, cloud, name, kind).unlink(missing_ok=True)
        known_hosts_path(config.state_dir, cloud, name).unlink(missing_ok=True)
        expiry_switch.remove_secret_files(config.state_dir, cloud, name)  # a killed `up --ttl`'s (SIGKILL)
        scaler_cred.remove_secret_files(config.state_dir, cloud, name)  # a killed `up --replicas`' (SIGKILL)


def _selected(
    deps: list[ledger.Deployment], name: str | None, campaign: str | None, all_mine: bool
) -> list[ledger.Deployment]:
    """The ledger's deployments that down() removes: the named one, the campaign's, or all of them."""
    return [d for d in deps if all_mine or d.name == name or (campaign and d.campaign == campaign)]


def down_locked(
    config: Config,
    *,
    cloud: str | None,
    name: str | None = None,
    campaign: str | None = None,
    all_mine: bool = False,
    dry_run: bool = False,
    confirm: Callable[[Spend], bool] | None = None,
    note: Note = ignore,
    keep_secrets: bool = False,
    command: str = "zenops down",
) -> DownResult:
    """down() holding the lock of each deployment it removes, so none is cut from under a running `up`, `rollout` or
    `bench`. A dry run changes nothing and takes none."""
    from zenops.deployment.identity import locked  # noqa: PLC0415

    with locked(config, [] if dry_run else _removed(config, cloud, name, campaign, all_mine), note=note):
        return down(
            config, cloud=cloud, name=name, campaign=campaign, all_mine=all_mine, dry_run=dry_run, confirm=confirm,
            note=note, keep_secrets=keep_secrets, command=command,
        )  # fmt: skip


def _removed(
    config: Config, cloud: str | None, name: str | None, campaign: str | None, all_mine: bool
) -> list[DeploymentId]:
    """The deployments down() removes, whose locks it holds: the named one (known to the ledger or not), or those of
    the campaign (all of mine) this machine's ledger records, the only ones a command here can be working on."""
    from zenops.deployment.identity import DeploymentId  # noqa: PLC0415

    try:
        where = cloud_for(config, cloud, name)
    except (UsageError, UnknownDeploymentError):
        return []  # not in the ledger and no --cloud: down() says so
    if name:
        return [DeploymentId(name, where)]
    deps = _selected(ledger.all_deployments(config.state_dir, where), name, campaign, all_mine)
    return [DeploymentId(d.name, where) for d in deps]
