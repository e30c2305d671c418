"""From flags to hosts: the inventory a command runs on, given --inventory (hosts you have) or --deployment (what
`zenops up --cloud` made, found in the ledger, in --cloud or wherever the ledger says it is).

`zenops bench` and `zenops rollout` use it; `campaign` will too. `zenops up` is the one command that makes its
target (--cloud C --flavor F creates it) and `zenops down` the one that removes it (--deployment, --campaign, --all-mine
or --inventory), so they read their own flags. `facts` and `plan` take hosts only as --inventory (or --local,
--facts), never a deployment, and `status` lists deployments (--cloud filters them; --inventory shows one):
none has a deployment to resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zenops.cloud import ledger
from zenops.config import Config
from zenops.errors import NoServerError, UnknownDeploymentError, UsageError


@dataclass(frozen=True)
class Target:
    """The hosts of one command: an inventory file, and the deployment it belongs to when there is one (its flavor,
    price and cloud label the results)."""

    inventory: Path
    deployment: ledger.Deployment | None = None


def resolve_target(
    config: Config,
    *,
    inventory: Path | None = None,
    deployment: str | None = None,
    cloud: str | None = None,
    command: str = "bench",
) -> Target:
    """Exactly one of ``inventory`` and ``deployment``; ``cloud`` only with ``deployment``. A deployment must be in
    the ledger (UnknownDeploymentError, exit 19, as on every command) with an inventory (NoServerError otherwise:
    nothing runs there that zenops knows of)."""
    if inventory is not None and deployment is not None:
        raise UsageError("--inventory and --deployment: your hosts or a deployment, not both")
    if inventory is not None:
        if cloud:
            raise UsageError("--cloud goes with --deployment")
        return Target(inventory)
    if deployment is None:
        raise UsageError(
            f"zenops {command} needs the servers: --inventory FILE or --deployment NAME",
            hint="the inventory `zenops up --inventory` served, or the deployment `zenops up --cloud` made "
            "(`zenops status` lists them)",
        )
    where = cloud_for(config, cloud, deployment)
    dep = ledger.load(config.state_dir, where, deployment)
    if dep is None:
        raise unknown_deployment(deployment, where)
    if not dep.inventory or not Path(dep.inventory).is_file():
        raise NoServerError(
            f"no deployment named {deployment!r} with an inventory is recorded here",
            hint="`zenops status` lists the deployments; start one with `zenops up --cloud C --flavor F --model M`",
        )
    return Target(Path(dep.inventory), dep)


def cloud_for(config: Config, cloud: str | None, name: str | None) -> str:
    """The cloud a deployment is in: ``cloud`` when given, else the one cloud the ledger records it (or any) in."""
    if cloud:
        return cloud
    listed = ledger.listing(config.state_dir)
    recorded = [(d.cloud, d.name) for d in listed.deployments] + listed.damaged  # a damaged file still says where
    clouds = sorted({c for c, n in recorded if name is None or n == name})
    if len(clouds) == 1:
        return clouds[0]
    if not clouds:
        if name:
            raise unknown_deployment(name, None)
        raise UsageError(
            "no deployment of zenops is recorded here" + (f" named '{name}'" if name else ""),
            hint="pass --cloud NAME to look in a cloud directly",
        )
    raise UsageError(f"deployments in several clouds ({', '.join(clouds)})", hint="pass --cloud NAME")


def unknown_deployment(name: str, cloud: str | None) -> UnknownDeploymentError:
    """The error of every command given a deployment name this machine has no record of (exit 19)."""
    return UnknownDeploymentError(
        f"no deployment named {name!r} is recorded here" + (f" in {cloud}" if cloud else ""),
        hint="`zenops status` lists the deployments; pass --cloud NAME to look in a cloud directly",
    )
