"""Preflight arithmetic: will N servers of a flavor fit the project's absolute limits, and what will they cost."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Nova absolute limits (-1 = unlimited) and, for floating IPs, Neutron's quota."""

    max_cores: int
    cores_used: int
    max_ram_mib: int
    ram_used_mib: int
    max_instances: int
    instances_used: int
    max_floating_ips: int = -1
    floating_ips_used: int = 0


@dataclass(frozen=True)
class Shortfall:
    limit: str
    needed: int
    available: int
    unit: str

    def __str__(self) -> str:
        over = self.needed - self.available
        return f"{self.limit}: {self.needed} {self.unit} needed, {self.available} available ({over} {self.unit} over)"


def _room(maximum: int, used: int) -> int | None:
    return None if maximum < 0 else max(maximum - used, 0)


def shortfalls(
    limits: Limits,
    vcpus: int,
    ram_mib: int,
    count: int,
    floating_ips: int = 0,
    *,
    more: tuple[tuple[int, int, int], ...] = (),
) -> list[Shortfall]:
    """Every limit the request would exceed, with how far over it is. ``more``: other servers of the same request,
    (vcpus, ram_mib, count) each (the gateway's own server)."""
    servers = ((vcpus, ram_mib, count), *more)
    wants = [
        ("cores", sum(v * n for v, _, n in servers), _room(limits.max_cores, limits.cores_used), "vCPUs"),
        ("ram", sum(r * n for _, r, n in servers), _room(limits.max_ram_mib, limits.ram_used_mib), "MiB"),
        ("instances", sum(n for *_, n in servers), _room(limits.max_instances, limits.instances_used), "servers"),
        ("floating_ips", floating_ips, _room(limits.max_floating_ips, limits.floating_ips_used), "floating IPs"),
    ]
    return [Shortfall(name, need, room, unit) for name, need, room, unit in wants if room is not None and need > room]


HOURS_PER_MONTH = 730  # 365 x 24 / 12: a server billed around the clock


def cost_per_hour(price_per_hour: float | None, count: int) -> float | None:
    return None if price_per_hour is None else round(price_per_hour * count, 4)


def cost_so_far(price_per_hour: float | None, count: int, hours: float) -> float | None:
    return None if price_per_hour is None else round(price_per_hour * count * hours, 4)


def cost_per_month(per_hour: float | None) -> float | None:
    """What ``per_hour`` comes to over a month of HOURS_PER_MONTH hours (a server kept up around the clock)."""
    return None if per_hour is None else round(per_hour * HOURS_PER_MONTH, 2)
