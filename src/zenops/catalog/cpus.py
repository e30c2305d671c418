"""The CPU catalogue (``cpus.yaml``): each CPU model's spec-sheet roofs, the theoretical upper bounds of the
planner's roofline. Its names are importable from :mod:`zenops.catalog` too."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from zenops.catalog.resource import load_resource
from zenops.errors import ConfigError


@dataclass(frozen=True)
class CpuSpec:
    """A CPU model's spec-sheet roofs (``cpus.yaml``): upper bounds for the roofline, labelled theoretical."""

    name: str
    microarchitecture: str
    cores: int  # per socket
    memory_channels: int  # per socket
    memory_mts: int
    base_ghz: float
    flops_per_cycle: Mapping[str, int]  # per core, by dtype
    source: str

    @property
    def socket_bandwidth_gbps(self) -> float:
        """channels x MT/s x 8 bytes, in GB/s (10^9 bytes)."""
        return self.memory_channels * self.memory_mts * 8 / 1000

    def gflops(self, cores: int, dtype: str) -> float:
        """cores x base clock x FLOPs per cycle for ``dtype`` (float16 counts as bfloat16), in GFLOP/s."""
        per_cycle = self.flops_per_cycle.get("bfloat16" if dtype == "float16" else dtype)
        if per_cycle is None:
            per_cycle = self.flops_per_cycle.get("float32", 0)
        return cores * self.base_ghz * per_cycle


@functools.cache
def _catalogue_cpus() -> dict[str, CpuSpec]:
    where, entries = load_resource("cpus.yaml", "cpus")
    result = {}
    for name, entry in entries.items():
        try:
            result[str(name)] = CpuSpec(
                name=str(name),
                microarchitecture=str(entry["microarchitecture"]),
                cores=int(entry["cores"]),
                memory_channels=int(entry["memory_channels"]),
                memory_mts=int(entry["memory_mts"]),
                base_ghz=float(entry["base_ghz"]),
                flops_per_cycle={str(k): int(v) for k, v in dict(entry["flops_per_cycle"]).items()},
                source=str(entry["source"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                where, f"cpus.{name}", f"missing or bad field ({e})", hint="fix the catalogue entry"
            ) from e
    return result


def cpu_spec(model_name: str) -> CpuSpec | None:
    """The catalogue CPU whose name occurs in ``model_name`` (/proc/cpuinfo's model name), longest name first."""
    for name in sorted(_catalogue_cpus(), key=len, reverse=True):
        if name.lower() in (model_name or "").lower():
            return _catalogue_cpus()[name]
    return None
