"""What every job on a cloud deployment shares: the request of `up --cloud`, names, keys, inventories."""

from __future__ import annotations

import socket
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import yaml

from zenops import statefile
from zenops.cloud import ledger
from zenops.cloud import marks as m
from zenops.errors import UsageError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    pass


Note = Callable[[str], None]


def ignore(_: str) -> None:
    pass


@dataclass(frozen=True)
class CloudRequest:
    cloud: str
    flavor: str
    count: int = 1
    name: str | None = None
    image: str | None = None
    campaign: str | None = None
    network_mode: str | None = None
    ttl_s: int | None = None  # seconds until the servers expire (`zenops reap`); None: no expiry
    gateway_flavor: str | None = None  # a server of its own for the gateway (HAProxy); None: none (or the ledger's)
    gateway_port: int = 8080  # opened to the operator in the security group
    # a gateway fronts (or, before the plan counts the instances, may front) the servers: the vLLM ports are then open
    # only between the deployment's servers, not to the operator (a gateway's own server, the ledger's too, implies
    # it); once recorded, the gateway service's decision wins (zenops.deployment.provision.api_to_operator)
    gateway_fronts: bool = False


def default_name(flavor: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in flavor.lower()).strip("-")[:32] or "default"


def tenant_cidr(deployment: str) -> str:
    """A /24 per deployment, stable across runs, so that deployments side by side rarely share a CIDR."""
    return f"10.98.{zlib.crc32(deployment.encode()) % 250 + 1}.0/24"


def operator_cidr(conn: Any) -> str:
    """This machine's address towards the cloud's API, as /32: the security group opens SSH and the API to it only."""
    url = conn.config.get_auth_args().get("auth_url", "")
    host = urlparse(url).hostname or "127.0.0.1"
    port = urlparse(url).port or 443
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))  # UDP: no packet is sent, the kernel only picks the route
        return f"{s.getsockname()[0]}/32"


def ensure_key(state_dir: Path, cloud: str, name: str) -> tuple[Path, Path]:
    key = ledger.keys_dir(state_dir, cloud) / m.keypair_name(name)
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"zenops {cloud}/{name}", "-f", str(key)], check=True
        )
    key.chmod(0o600)
    return key, key.with_suffix(".pub")


def inventory_path(state_dir: Path, cloud: str, name: str, kind: str = "") -> Path:
    """The inventory `up` writes for a deployment: its serving servers (kind ""), the gateway's own server
    ("gateway"), or every server (the expiry switch's run, "all")."""
    return ledger.path(state_dir, cloud, name).with_suffix(f".{kind + '.' if kind else ''}inventory.yml")


def known_hosts_path(state_dir: Path, cloud: str, name: str) -> Path:
    """The deployment's pinned SSH host keys: recorded at the first connection to each server, checked at every later
    one. Entries are keyed by server ID (``HostKeyAlias``), not by address: a new server on a reused address is a new
    entry, while a server whose key changed is refused."""
    return ledger.path(state_dir, cloud, name).with_suffix(".known_hosts")


def ssh_pinning_args(known_hosts: Path, server_id: str) -> str:
    """ssh options that pin a cloud server's host key in the deployment's known_hosts file (see known_hosts_path)."""
    return f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={known_hosts} -o HostKeyAlias={server_id}"


def write_inventory(
    state_dir: Path, dep: ledger.Deployment, user: str, servers: list[dict[str, Any]] | None = None, kind: str = ""
) -> Path:
    hosts = {
        s["name"]: {
            "ansible_host": s["address"],
            "ansible_user": user,
            "ansible_ssh_private_key_file": dep.private_key_file,
            "ansible_ssh_common_args": ssh_pinning_args(known_hosts_path(state_dir, dep.cloud, dep.name), s["id"]),
            "zenops_server_id": s["id"],
            # what another server of the deployment reaches it by (the gateway's backends): its fixed address
            **({"zenops_private_address": s["fixed_ip"]} if s.get("fixed_ip") else {}),
        }
        for s in (dep.servers if servers is None else servers)
    }
    return statefile.write_text(
        inventory_path(state_dir, dep.cloud, dep.name, kind),
        f"# written by zenops up --cloud {dep.cloud} --deployment {dep.name}\n"
        + yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True),
    )


def is_gateway(server: Any) -> bool:
    return (getattr(server, "metadata", None) or {}).get(m.ROLE_KEY) == m.GATEWAY_ROLE


def gateway_server_flavor(
    req: CloudRequest, existing: ledger.Deployment | None, in_cloud: str | None = None
) -> str | None:
    """The flavor of the gateway's own server: the request's, or the one the deployment already has (a re-run of
    `up` without --gateway-flavor keeps it; `zenops down` removes it): the ledger's, else that of the marked server
    the cloud holds (``in_cloud``: another controller made it). A different one is refused."""
    had = (existing.gateway_flavor if existing else None) or in_cloud
    if req.gateway_flavor and had and req.gateway_flavor != had:
        raise UsageError(
            f"deployment '{req.name or default_name(req.flavor)}' has its gateway on a server of flavor {had}, not "
            f"{req.gateway_flavor}",
            hint=f"re-run with --gateway-flavor {had}, or remove the deployment first (zenops down --deployment ...)",
        )
    return req.gateway_flavor or had


def check_count(serving: list[str], req: CloudRequest) -> None:
    """`up` adds servers, it never removes one: a --count below the servers the deployment has would leave the
    others running, billed and outside its inventory. Refused before anything changes."""
    if len(serving) <= req.count:
        return
    name = req.name or default_name(req.flavor)
    raise UsageError(
        f"deployment '{name}' has {len(serving)} servers ({', '.join(sorted(serving))}); --count {req.count} would "
        "leave the others running outside it: zenops up adds servers, it does not remove them",
        hint=f"re-run with --count {len(serving)}, or remove the deployment (zenops down --deployment {name}) and "
        f"create it again with --count {req.count}",
    )


def flavor_name(server: Any) -> str | None:
    flavor = getattr(server, "flavor", None)
    try:
        return str(flavor["original_name"]) if flavor is not None and flavor["original_name"] else None
    except (KeyError, TypeError):
        return None
