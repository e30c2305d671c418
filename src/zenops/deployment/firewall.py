"""A cloud deployment's security group follows its gateway: the vLLM ports are open to the operator only when no
gateway fronts the servers (then the operator reaches them through the gateway's port; the servers reach each other
on every port). The gateway service (zenops.deployment.services.gateway) decides from the plan's instance count and
calls :func:`follow_gateway` each time it is applied; provisioning (zenops.deployment.provision.api_to_operator) keeps
the recorded decision. The rules themselves are the provision role's (roles/provision/tasks/security_group.yml, run
alone by playbooks/firewall.yml)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.errors import ZenopsError

if TYPE_CHECKING:
    from zenops.context import RunContext


def follow_gateway(ctx: RunContext, inventory: Path, *, fronted: bool, gateway_port: int) -> bool | None:
    """Open or close the vLLM ports to the operator in the security group of the cloud deployment whose serving
    inventory this is, as the gateway decided (``fronted``; a gateway's own server fronts them whatever the
    request). Nothing for your own hosts, nor when the group already is so. Returns whether they are open now (None:
    not a cloud deployment of this machine's ledger)."""
    from zenops.deployment.identity import cloud_entry_of  # noqa: PLC0415

    dep = cloud_entry_of(ctx.config, inventory)
    if dep is None:
        return None
    want = not (fronted or bool(dep.gateway_flavor))
    if dep.api_to_operator is want:
        return want
    set_api_to_operator(ctx, dep, want, gateway_port=gateway_port)
    return want


def _cidr(ctx: RunContext, dep: ledger.Deployment) -> str:
    cidr = dep.operator_cidr or ctx.config.cloud_profile(dep.cloud).operator_cidr
    if not cidr:
        from zenops.cloud import ops  # noqa: PLC0415
        from zenops.deployment.common import operator_cidr  # noqa: PLC0415

        cidr = operator_cidr(ops.connect(dep.cloud))
    return cidr


def _run(ctx: RunContext, dep: ledger.Deployment, cidr: str, **more: object) -> None:
    from zenops.runner import RunSpec  # noqa: PLC0415

    extravars = {
        "provision_cloud": dep.cloud,
        "provision_deployment": dep.name,
        "provision_tags": m.Marks(dep.name, dep.campaign).tags(),
        "provision_operator_cidr": cidr,
        "provision_api_to_operator": bool(dep.api_to_operator),  # as recorded (a loop: behind its gateway)
        "provision_loop_cidr": dep.loop_cidr,
        **more,
    }
    env = {k: os.environ[k] for k in ("OS_CLIENT_CONFIG_FILE",) if k in os.environ}
    ctx.run(RunSpec(playbook="firewall", inventory=None, extravars=extravars, verbosity=ctx.verbosity, envvars=env))


def set_loop_ssh(ctx: RunContext, dep: ledger.Deployment, cidr: str, *, gateway_port: int) -> None:
    """SSH open to the scaling loop's host (``cidr``: its fixed address /32; zenops.deployment.services.scaler) in
    the deployment's security group, or ("") the rule of the one recorded removed; recorded in the ledger. The
    operator's range stays as recorded. Nothing when the group already is so."""
    if cidr == dep.loop_cidr:
        return
    if dep.loop_cidr:  # another host before (the loop moved), or none now: its rule goes
        _run(ctx, dep, _cidr(ctx, dep), provision_loop_ssh=False, provision_gateway_port=gateway_port)
    dep.loop_cidr = cidr
    if cidr:
        _run(ctx, dep, _cidr(ctx, dep), provision_loop_ssh=True, provision_gateway_port=gateway_port)
    ledger.save(ctx.config.state_dir, dep)
    ctx.note(f"security group of {dep.name}: SSH " + (f"open to {cidr} (the scaling loop's host)" if cidr
             else "no longer open to the scaling loop's host"))  # fmt: skip


def set_api_to_operator(ctx: RunContext, dep: ledger.Deployment, open_: bool, *, gateway_port: int) -> None:
    """Run playbooks/firewall.yml (the provision role's security-group rules) with the vLLM ports to the operator
    open or closed, and record it in the ledger."""
    cidr = _cidr(ctx, dep)
    extravars = {
        "provision_cloud": dep.cloud,
        "provision_deployment": dep.name,
        "provision_tags": m.Marks(dep.name, dep.campaign).tags(),
        "provision_operator_cidr": cidr,
        "provision_gateway_port": gateway_port,
        "provision_api_to_operator": open_,
    }
    _run(ctx, dep, cidr, **extravars)
    dep.operator_cidr, dep.api_to_operator = cidr, open_
    ledger.save(ctx.config.state_dir, dep)
    ctx.note(
        f"security group of {dep.name}: the vLLM ports are "
        + (f"open to {cidr} (no gateway fronts the servers)" if open_ else f"closed to {cidr}: clients use the gateway")
    )


def loop_cidr(dep: ledger.Deployment, host: str) -> str:
    """The loop's host by its fixed address, /32: where its SSH to the servers it adds comes from (it reaches them by
    their fixed addresses, inside the deployment's network)."""
    for server in dep.servers + dep.gateway_servers:
        if str(server.get("name")) == host and (server.get("fixed_ip") or server.get("address")):
            return f"{server.get('fixed_ip') or server.get('address')}/32"
    raise ZenopsError(
        f"the scaling loop's host {host} is not a server of deployment '{dep.name}' with a fixed address",
        hint=f"run `zenops up --cloud {dep.cloud}` for it again (the ledger entry records its servers' addresses)",
    )


def open_ssh(ctx: RunContext, dep: ledger.Deployment, cidr: str, services: Mapping[str, Any]) -> None:
    """The deployment's security group opens SSH to the loop's host ``cidr`` ("": closes it again), besides the
    operator's range, which stays as recorded (zenops.deployment.firewall.set_loop_ssh). Its fixed address, not the
    whole group (``remote_group: self``, which the gateway's own server is in as well): only the loop's host holds
    the fleet's key, and a serving server has no business reaching another's SSH."""
    from zenops.deployment.services import server_port  # noqa: PLC0415

    set_loop_ssh(ctx, dep, cidr, gateway_port=server_port(services))


def close_loop_ssh(ctx: RunContext, inventory: Path) -> None:
    """The scaling loop gone: SSH no longer open to its host in the security group of the cloud deployment whose
    serving inventory this is (nothing for own hosts, nor when no rule is recorded)."""
    from zenops.deployment.identity import cloud_entry_of  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415

    dep = cloud_entry_of(ctx.config, inventory)
    if dep is not None and dep.loop_cidr:
        record = Store(ctx.config, inventory).record()
        open_ssh(ctx, dep, "", record.services if record is not None else {})
