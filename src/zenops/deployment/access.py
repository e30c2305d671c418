"""Reaching a deployment's hosts from the controller: `zenops ssh` (a shell or a command on a host) and `zenops logs`
(the vLLM containers' and the gateway's logs).

How to reach a host is what Ansible uses: the inventory's ``ansible_host``, ``ansible_user``, ``ansible_port``,
``ansible_ssh_private_key_file`` and ``ansible_ssh_common_args`` / ``ansible_ssh_extra_args``, read through
``ansible-inventory --list`` (so YAML, INI and group vars all work, and nothing in it is rendered as a template). A
cloud deployment's inventory carries its generated key and its pinned known_hosts file (zenops.deployment.common), so
`zenops ssh` checks the host key exactly as `up` pinned it. A login user other than root reads the Docker and systemd
logs through ``sudo -n`` (the become of every cloud image).

What runs where is the serving record's (zenops.deployment.record): each instance's container, and the gateway's host.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zenops.config import SshSettings
from zenops.deployment.record import ServingRecord
from zenops.errors import NoServerError, UsageError, ZenopsError

GATEWAY_UNIT = "haproxy"  # roles/gateway runs HAProxy as this systemd unit


@dataclass(frozen=True)
class HostAccess:
    """How to reach one inventory host over SSH."""

    host: str  # its inventory name
    address: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    ssh_args: tuple[str, ...] = ()  # ansible_ssh_common_args + ansible_ssh_extra_args, split as a shell would
    local: bool = False  # ansible_connection=local: the controller itself

    @property
    def become(self) -> bool:
        """Whether reading Docker's and systemd's logs needs sudo: unless the login user is named root (none named:
        ssh logs in as the controller's user, seldom root on a host)."""
        return not self.local and self.user != "root"

    def ssh_argv(self, command: Sequence[str] = (), *, tty: bool = False, batch: bool = False) -> list[str]:
        """ssh's argv for this host; ``command`` (an argv) runs there, quoted for the remote shell. ``tty``: a
        terminal (an interactive shell); ``batch``: never prompt (a password or passphrase fails instead)."""
        argv = ["ssh"]
        if tty:
            argv.append("-t")
        if batch:
            argv += ["-o", "BatchMode=yes"]
        if self.port:
            argv += ["-p", str(self.port)]
        if self.key_file:
            argv += ["-i", self.key_file, "-o", "IdentitiesOnly=yes"]
        argv += list(self.ssh_args)
        argv.append(f"{self.user}@{self.address}" if self.user else self.address)
        if command:
            argv += ["--", shlex.join(command)]
        return argv

    def run_argv(self, command: Sequence[str], *, batch: bool = False) -> list[str]:
        """The argv that runs ``command`` on this host: locally for the controller itself, else over ssh."""
        return list(command) if self.local else self.ssh_argv(command, batch=batch)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "address": self.address, "user": self.user, "port": self.port,
                "key_file": self.key_file, "ssh_args": list(self.ssh_args), "local": self.local}  # fmt: skip


def _ansible_inventory() -> str:
    beside = Path(sys.executable).parent / "ansible-inventory"  # the venv's, when zenops runs from one
    found = str(beside) if beside.exists() else shutil.which("ansible-inventory")
    if not found:
        raise ZenopsError("ansible-inventory is not installed", hint="install zenops with its dependencies")
    return found


def read_inventory(inventory: Path) -> dict[str, Any]:
    """``ansible-inventory --list`` of ``inventory``: {"_meta": {"hostvars": ...}, groups...}."""
    proc = subprocess.run(
        [_ansible_inventory(), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_NOCOLOR": "1"},
    )
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"cannot read the inventory {inventory}: {why}", hint="check it with `ansible-inventory -i`")
    try:
        return dict(json.loads(proc.stdout))
    except json.JSONDecodeError as e:
        raise ZenopsError(f"ansible-inventory printed no JSON for {inventory}: {e}") from e


def ssh_defaults(ssh: SshSettings) -> tuple[tuple[str, ...], str | None, str | None]:
    """What zenops.yaml's ``ssh:`` adds, as for Ansible (zenops.runner): the host key checking first (ssh keeps the
    first value of an option, so it wins over an inventory's, as in Ansible's runs), the default user and key."""
    return ssh.ssh_options(), ssh.user, str(ssh.private_key_file) if ssh.private_key_file else None


def hosts_from(listing: Mapping[str, Any], ssh: SshSettings | None = None) -> dict[str, HostAccess]:
    """Every host of an ``ansible-inventory --list`` output, with how to reach it (``ssh``: zenops.yaml's settings,
    as Ansible gets them)."""
    first, user, key = ssh_defaults(ssh) if ssh is not None else ((), None, None)
    hostvars: Mapping[str, Mapping[str, Any]] = (listing.get("_meta") or {}).get("hostvars") or {}
    names = set(hostvars)
    for group in listing.values():
        if isinstance(group, Mapping):
            names.update(str(h) for h in group.get("hosts") or [])
    out = {}
    for name in sorted(names):
        v = hostvars.get(name) or {}
        args = shlex.split(" ".join(str(v.get(k) or "") for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args")))
        port = v.get("ansible_port") or v.get("ansible_ssh_port")
        out[name] = HostAccess(
            host=name,
            address=str(v.get("ansible_host") or name),
            user=str(v.get("ansible_user") or v.get("ansible_ssh_user") or user or "") or None,
            port=int(port) if port else None,
            key_file=str(v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file") or key or "")
            or None,
            ssh_args=(*first, *args),
            local=str(v.get("ansible_connection") or "") == "local",
        )
    return out


def pick_host(hosts: Mapping[str, HostAccess], host: str | None, inventory: Path) -> HostAccess:
    """The host named (it must be in the inventory), or the only one."""
    if not hosts:
        raise NoServerError(f"{inventory} has no hosts")
    if host is None:
        if len(hosts) == 1:
            return next(iter(hosts.values()))
        raise UsageError(f"{inventory} has {len(hosts)} hosts: name one", hint=f"one of: {', '.join(sorted(hosts))}")
    if host not in hosts:
        raise UsageError(f"{host} is not a host of {inventory}", hint=f"one of: {', '.join(sorted(hosts))}")
    return hosts[host]


# --- logs ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogSource:
    """One log stream: a vLLM instance's container, or the gateway's systemd unit."""

    host: str
    label: str  # what each line is prefixed with: "<host>/<instance>" or "<host>/gateway"
    container: str | None = None  # docker logs of this container
    unit: str | None = None  # journalctl of this unit

    def command(self, *, follow: bool, since_s: int | None, tail: int | None, sudo: bool) -> list[str]:
        if self.container:
            cmd = ["docker", "logs", "--timestamps"]
            if since_s is not None:
                cmd += ["--since", f"{since_s}s"]
            if tail is not None:
                cmd += ["--tail", str(tail)]
            if follow:
                cmd.append("--follow")
            cmd.append(self.container)
        else:
            cmd = ["journalctl", "--no-pager", "--output", "short-iso", "-u", str(self.unit)]
            if since_s is not None:
                cmd += ["--since", f"-{since_s}s"]
            if tail is not None:
                cmd += ["--lines", str(tail)]
            if follow:
                cmd.append("--follow")
        return ["sudo", "-n", *cmd] if sudo else cmd


def log_sources(
    record: ServingRecord, *, host: str | None = None, instance: int | None = None, gateway: bool = False
) -> list[LogSource]:
    """The log streams of a deployment: its vLLM containers (on ``host``, of ``instance``: all by default), or with
    ``gateway`` its gateway's HAProxy."""
    if gateway:
        gw = record.gateway
        if not gw:
            raise NoServerError("the deployment has no gateway", hint="its servers' logs: leave out --through-gateway")
        if gw.get("inventory"):
            raise UsageError(
                "the gateway runs on a server of its own, outside the serving inventory",
                hint=f"read it with `zenops ssh -i {gw['inventory']} -- sudo journalctl -u {GATEWAY_UNIT}`",
            )
        return [LogSource(str(gw["host"]), f"{gw['host']}/gateway", unit=GATEWAY_UNIT)]
    if host is not None and host not in record.endpoints:
        raise UsageError(
            f"zenops serves nothing on {host}", hint=f"hosts that serve: {', '.join(sorted(record.endpoints))}"
        )
    out = []
    for h in sorted(record.endpoints):
        if host is not None and h != host:
            continue
        for ep in record.endpoints[h]:
            idx = int(ep.get("instance", 0))
            if instance is not None and idx != instance:
                continue
            container = str(ep.get("container") or f"zenops-vllm-{idx}")
            out.append(LogSource(h, f"{h}/{idx}", container=container))
    if not out:
        what = f"no instance {instance} serves" if instance is not None else "nothing serves"
        raise UsageError(what + (f" on {host}" if host else ""))
    return out
