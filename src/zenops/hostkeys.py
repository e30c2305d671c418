"""A cloud deployment's pinned SSH host keys (``<state_dir>/deployments/<cloud>/<name>.known_hosts``, entries keyed
by server ID through ``HostKeyAlias``): `up` checks them before its playbook runs, so a server whose key changed is
refused at once, naming the file and how to re-trust it, instead of after the playbook's connection timeout."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from zenops.errors import ExitCode, ZenopsError

Key = tuple[str, str]  # (type, base64 key)


class HostKeyChangedError(ZenopsError):
    exit_code = ExitCode.UNREACHABLE


@dataclass(frozen=True)
class Pinned:
    name: str  # the server's name (what the operator sees)
    alias: str  # its ID: the known_hosts entry's name
    address: str


def parse_keys(text: str) -> set[Key]:
    """The (type, key) pairs of known_hosts or ssh-keyscan lines ("host type key [comment]"); comments skipped."""
    out = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith("#"):
            out.add((fields[1], fields[2]))
    return out


def changed(pinned: set[Key], offered: set[Key]) -> bool:
    """Whether the server offers, for a key type pinned for it, another key (a type not pinned proves nothing)."""
    pinned_types = dict(pinned)
    return any(t in pinned_types and pinned_types[t] != k for t, k in offered)


def _pinned(known_hosts: Path, alias: str) -> set[Key]:
    proc = subprocess.run(
        ["ssh-keygen", "-F", alias, "-f", str(known_hosts)], capture_output=True, text=True, check=False, timeout=30
    )
    return parse_keys(proc.stdout) if proc.returncode == 0 else set()


def _offered(address: str, timeout: int) -> set[Key]:
    try:
        proc = subprocess.run(
            ["ssh-keyscan", "-T", str(timeout), address],
            capture_output=True, text=True, check=False, timeout=timeout * 4 + 5,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return parse_keys(proc.stdout)


def check(known_hosts: Path, servers: Iterable[Pinned], timeout: int = 5) -> None:
    """Refuse servers whose host key is no longer the one pinned for them (a server that does not answer, or has no
    pinned key yet, is left to the playbook: accept-new records a new server's key at its first connection)."""
    if not known_hosts.is_file():
        return
    bad = []
    for s in servers:
        pinned = _pinned(known_hosts, s.alias)
        if pinned and changed(pinned, _offered(s.address, timeout)):
            bad.append(s)
    if bad:
        raise HostKeyChangedError(
            f"the SSH host key of {', '.join(f'{s.name} ({s.address})' for s in bad)} is not the one pinned in "
            f"{known_hosts} at the first connection: something else may answer at that address",
            hint="if the server was rebuilt on purpose, re-trust it with "
            + " and ".join(f"`ssh-keygen -R {s.alias} -f {known_hosts}`" for s in bad)
            + ", then run again",
        )
