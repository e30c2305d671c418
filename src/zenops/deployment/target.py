"""From flags to a deployment: the one identity (zenops.deployment.identity.DeploymentId) a command works on, given
--inventory (hosts you have, or the inventory `up --cloud` wrote), --deployment (what `zenops up --cloud` made, found
in the ledger, in --cloud or wherever the ledger says it is), or --cloud with --flavor (what `up --cloud` makes).

Its name is the only one the command then uses: its lock, its files and its labels are properties of it.
`zenops up`, `bench`, `rollout`, `down -i`, `status -i`, `logs`, `ssh` and `top` resolve it here. `down --deployment`,
`--campaign` and `--all-mine` remove what the ledger records (zenops.deployment.teardown), and `facts` and `plan` take
hosts only as --inventory (or --local, --facts), never a deployment.
"""

from __future__ import annotations

from pathlib import Path

from zenops.cloud import ledger
from zenops.config import Config
from zenops.deployment.identity import DeploymentId, of_inventory
from zenops.errors import NoServerError, UnknownDeploymentError, UsageError


def resolve_target(
    config: Config,
    *,
    inventory: Path | None = None,
    deployment: str | None = None,
    cloud: str | None = None,
    command: str = "bench",
    flavor: str | None = None,
) -> DeploymentId:
    """The deployment a command works on. Exactly one of ``inventory`` and ``deployment``; ``cloud`` only with
    ``deployment``. ``inventory``: the deployment on it (a cloud deployment's inventory names that deployment:
    zenops.deployment.identity.of_inventory), its steps run on the file as given. ``deployment``: it must be in the
    ledger (UnknownDeploymentError, exit 19, as on every command) with an inventory (NoServerError otherwise: nothing
    runs there that zenops knows of); its ledger entry comes with it (``entry``). ``flavor`` with ``cloud``: the
    deployment `up --cloud` makes or adds to, named ``deployment`` or after the flavor (it need not exist yet)."""
    if flavor is not None:
        return _new(cloud, deployment, flavor)
    if inventory is not None and deployment is not None:
        raise UsageError("--inventory and --deployment: your hosts or a deployment, not both")
    if inventory is not None:
        if cloud:
            raise UsageError("--cloud goes with --deployment")
        return of_inventory(config, inventory)
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
    return DeploymentId(dep.name, where, Path(dep.inventory), entry=dep)


def _new(cloud: str | None, name: str | None, flavor: str) -> DeploymentId:
    """`up --cloud C --flavor F [--deployment NAME]`: not provisioned yet (no inventory until it is)."""
    from zenops.deployment.common import default_name  # noqa: PLC0415

    if not cloud:
        raise UsageError("--flavor goes with --cloud: the servers zenops creates on a cloud")
    return DeploymentId(name or default_name(flavor), cloud)


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
