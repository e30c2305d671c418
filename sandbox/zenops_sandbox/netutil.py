"""Which IPv4 networks this machine already uses, so the sandbox never mirrors a subnet over them (stdlib only)."""

from __future__ import annotations

import ipaddress
import json
import subprocess

NEVER_MIRROR = [ipaddress.ip_network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4")]


class OverlapError(Exception):
    pass


def _ip_json(*args: str) -> list:
    return json.loads(
        subprocess.run(["ip", "-j", "-4", *args], capture_output=True, text=True, check=True).stdout or "[]"
    )


def host_networks(own_bridge: str | None = None) -> list[tuple[ipaddress.IPv4Network, str]]:
    """Networks this machine already uses: routes, addresses and DNS servers (never mirror over them)."""
    found = []
    for r in _ip_json("route", "show", "table", "main"):
        if r.get("dst") in (None, "default") or r.get("type") in ("blackhole", "unreachable", "prohibit"):
            continue
        if own_bridge and r.get("dev") == own_bridge:
            continue
        found.append((ipaddress.ip_network(r["dst"], strict=False), f"route via {r.get('dev', '?')}"))
    for link in _ip_json("addr"):
        if own_bridge and link.get("ifname") == own_bridge:
            continue
        for a in link.get("addr_info", []):
            found.append((ipaddress.ip_network(a["local"]), f"address of {link.get('ifname')}"))
    try:
        with open("/etc/resolv.conf") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver" and ":" not in parts[1]:
                    found.append((ipaddress.ip_network(parts[1]), "DNS server of this machine"))
    except OSError:
        pass
    return found


def check_overlap(cidr: str, own_bridge: str | None = None) -> None:
    net = ipaddress.ip_network(cidr, strict=False)
    for bad in NEVER_MIRROR:
        if net.overlaps(bad):
            raise OverlapError(f"subnet {cidr} overlaps reserved range {bad}: the sandbox cannot mirror it")
    for used, what in host_networks(own_bridge):
        if net.overlaps(used):
            raise OverlapError(
                f"subnet {cidr} overlaps {used} ({what}) on the sandbox machine: use another CIDR "
                f"(e.g. 10.100.0.0/24); the sandbox refuses to shadow this machine's own networks"
            )


def default_mtu() -> int:
    try:
        route = next(r for r in _ip_json("route", "show", "default"))
        with open(f"/sys/class/net/{route['dev']}/mtu") as f:
            return int(f.read())
    except (StopIteration, OSError, ValueError, KeyError):
        return 1500
