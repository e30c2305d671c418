"""`zenops facts --bandwidth`: the measured roofs of each NUMA node, kept with the host's facts for the planner.

The probe (roles/vllm_server/files/bandwidth_probe.py) runs where the engine runs: a short-lived container of the
engine image per NUMA node, pinned to the node's cores (one thread per core, no SMT sibling) and memory
(playbooks/bandwidth.yml, the vllm_server role's ``bandwidth`` entry point). It prints raw timings; this module
turns them into GB/s and GFLOP/s and into the facts key the planner reads (zenops.planner.Topology.from_facts)::

    bandwidth: {nodes: {"<id>": {gbps, gflops, method, cores}}, image, measured_at}

The measurement is kept in ``<state_dir>/facts/<host>.json`` with the topology; a later ``zenops facts`` or
``zenops up`` carries it over as long as the hardware it was measured on is the same (:func:`same_hardware`).

Everything here is pure except :func:`measure_inventory` (runs the playbook) and :func:`measure_local` (runs the
probe with this machine's own torch when no engine image is at hand).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zenops.errors import UsageError, ZenopsError

if TYPE_CHECKING:
    from zenops.context import RunContext

KEY = "bandwidth"  # the facts key (zenops.planner reads it)
PROBE = "bandwidth_probe.py"  # roles/vllm_server/files/
PROBE_TIMEOUT = 600


class MeasurementError(ZenopsError):
    """The probe ran but gave no usable figures."""


# --- what to measure ------------------------------------------------------------------------------------------


def probe_targets(topology: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One probe per NUMA node that has allowed cores and memory: its id, the first CPU of each allowed core (no
    SMT sibling: one thread per core, as the servers bind), its memory node, the core count, and whether zentorch may
    be loaded: only where the planner would choose the zen platform (AMD with AVX-512); elsewhere the engine runs
    without it, and its AVX-512 kernels could kill the probe (SIGILL)."""
    from zenops.cpulist import format_cpulist  # noqa: PLC0415
    from zenops.planner import Topology, choose_platform  # noqa: PLC0415

    topo = Topology.from_facts(topology)
    zentorch = choose_platform(topo, "auto")[0] == "zen" if "avx2" in topo.flags else False
    return [
        {
            "node": node.id,
            "cpus": format_cpulist([core.primary for core in node.cores]),
            "mems": str(node.id),
            "cores": len(node.cores),
            "zentorch": zentorch,
        }
        for node in topo.nodes
    ]


# --- the arithmetic -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFigures:
    node: int
    gbps: float  # sustained triad bandwidth, 10^9 bytes/s
    gflops: float  # bf16 GEMM, 10^9 FLOP/s
    cores: int  # threads the probe ran (one per core)
    method: str
    # with fewer threads, each on that many of the node's first cores: (threads, GB/s, GFLOP/s)
    scaling: tuple[tuple[int, float, float], ...] = ()

    def to_facts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gbps": self.gbps, "gflops": self.gflops, "method": self.method, "cores": self.cores}
        if self.scaling:
            out["scaling"] = [{"threads": t, "gbps": g, "gflops": f} for t, g, f in self.scaling]
        return out


def triad_gbps(elements: int, element_bytes: int, arrays: int, seconds: float) -> float:
    """STREAM's convention: a triad pass moves ``arrays`` (3: two read, one written) x elements x bytes."""
    if elements <= 0 or element_bytes <= 0 or arrays <= 0 or seconds <= 0:
        raise ValueError("triad: elements, bytes, arrays and seconds must be positive")
    return arrays * elements * element_bytes / seconds / 1e9


def gemm_gflops(m: int, n: int, k: int, seconds: float) -> float:
    """A (m x k) @ (k x n) product is m x n x k multiply-adds: 2 m n k FLOPs."""
    if m <= 0 or n <= 0 or k <= 0 or seconds <= 0:
        raise ValueError("gemm: sizes and seconds must be positive")
    return 2 * m * n * k / seconds / 1e9


def _figures(triad: Mapping[str, Any], gemm: Mapping[str, Any]) -> tuple[float, float]:
    """(GB/s, GFLOP/s) of one run's raw triad and GEMM timings."""
    gbps = triad_gbps(int(triad["elements"]), int(triad["element_bytes"]), int(triad["arrays"]), float(triad["best_s"]))
    return gbps, gemm_gflops(int(gemm["m"]), int(gemm["n"]), int(gemm["k"]), float(gemm["best_s"]))


def _probe_line(stdout: str) -> Any:
    """The probe's JSON line: the last line of ``stdout`` that parses as a JSON object; None without one."""
    for line in reversed(stdout.strip().splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def parse_probe(stdout: str, *, where: str, image: str) -> NodeFigures:
    """The probe's JSON line (see :func:`_probe_line`) -> the node's figures."""
    obj = _probe_line(stdout)
    if not isinstance(obj, dict):
        raise MeasurementError(
            f"{where}: the bandwidth probe printed no result", hint="look at its output in the run log (-v)"
        )
    if obj.get("error"):
        raise MeasurementError(f"{where}: the bandwidth probe failed: {obj['error']}")
    try:
        triad, gemm = obj["triad"], obj["gemm"]
        mib = triad["elements"] * triad["element_bytes"] / 2**20
        gbps, gflops = _figures(triad, gemm)
        points = [(int(p["threads"]), *_figures(p["triad"], p["gemm"])) for p in obj.get("scaling") or []]
        scaling = tuple(sorted((t, round(g, 2), round(f, 1)) for t, g, f in points))
        threads = int(obj["threads"])
        engine = f"torch {obj.get('torch')}" + (f" + zentorch {obj['zentorch']}" if obj.get("zentorch") else "")
        method = (
            f"STREAM triad {triad['arrays']} x {mib:.0f} MiB float32, {threads} thread(s), best of {triad['runs']}; "
            f"{gemm['dtype']} GEMM {gemm['m']}x{gemm['k']}x{gemm['n']} ({gemm['op']}), best of {gemm['runs']}; "
            f"{engine} in {image}"
        )
        if scaling:
            method += (
                "; also with " + ", ".join(str(t) for t, _g, _f in scaling) + " thread(s) on the node's first cores"
            )
        return NodeFigures(int(obj["node"]), round(gbps, 2), round(gflops, 1), threads, method, scaling)
    except (KeyError, TypeError, ValueError) as e:
        raise MeasurementError(
            f"{where}: the bandwidth probe's result is incomplete ({e})",
            hint="the probe and this zenops may be of different versions: re-run with this zenops",
        ) from e


def measurement(figures: Sequence[NodeFigures], *, image: str, now: datetime | None = None) -> dict[str, Any]:
    """The facts key: ``{nodes: {"<id>": {gbps, gflops, method, cores}}, image, measured_at}``."""
    return {
        "nodes": {str(f.node): f.to_facts() for f in sorted(figures, key=lambda f: f.node)},
        "image": image,
        "measured_at": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
    }


def from_runs(host: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The role's ``vllm_server_bandwidth_result`` of one host -> the facts key; a failed node fails the host."""
    image = str(result.get("image") or result.get("image_id") or "the engine image")
    figures = []
    for run in result.get("runs") or []:
        node = (run.get("item") or {}).get("node")
        where = f"{host} node {node}"
        if run.get("rc") != 0:
            tail = " / ".join(line for line in str(run.get("stderr") or "").splitlines()[-3:] if line.strip())
            own = _probe_error(str(run.get("stdout") or ""))  # the probe's own words come first when it said why
            tail = f"{own}" + (f" ({tail})" if own and tail else "") if own else tail
            why = "timed out" if run.get("rc") in (124, 137) else f"exit {run.get('rc')}"
            raise MeasurementError(
                f"{where}: the bandwidth probe failed ({why})" + (f": {tail}" if tail else ""),
                hint="the probe runs `python3` inside the engine image; check the image with "
                "`docker run --rm --entrypoint python3 IMAGE -c 'import torch'` on the host",
            )
        figures.append(parse_probe(str(run.get("stdout") or ""), where=where, image=image))
    if not figures:
        raise MeasurementError(f"{host}: no NUMA node was measured", hint="check the host's facts (`zenops facts`)")
    return measurement(figures, image=image)


def _probe_error(stdout: str) -> str | None:
    """The ``{"error": ...}`` line a failing probe prints, if any."""
    obj = _probe_line(stdout)
    return str(obj["error"]) if isinstance(obj, dict) and obj.get("error") else None


# --- keeping it with the facts ----------------------------------------------------------------------------------


def hardware_key(topology: Mapping[str, Any]) -> dict[str, Any]:
    """What a measurement depends on: the CPU model, the NUMA nodes with their CPUs, the CPUs allowed and the
    memory installed (whole GiB of MemTotal: changed DIMMs change the bandwidth; a node's own meminfo is not used,
    some VMs report it differently from one reading to the next)."""
    return {
        "model_name": topology.get("model_name"),
        "memory_gib": round(int(topology.get("memory_total_kib") or 0) / 2**20),
        "nodes": sorted((int(n["id"]), sorted(n.get("cpus") or [])) for n in topology.get("numa_nodes") or []),
        "allowed_cpus": sorted(topology.get("allowed_cpus") or []),
    }


def same_hardware(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return hardware_key(a) == hardware_key(b)


def carry_over(new: dict[str, Any], old: Mapping[str, Any] | None) -> bool:
    """Give ``new`` (fresh facts without a measurement) the measurement of ``old`` (the facts kept before) when both
    describe the same hardware; True when it did. Facts that carry a measurement of their own keep it."""
    if KEY in new or not old or not isinstance(old.get(KEY), Mapping) or not same_hardware(new, old):
        return False
    new[KEY] = dict(old[KEY])
    return True


def has_measurement(topology: Mapping[str, Any]) -> bool:
    raw = topology.get(KEY)
    return isinstance(raw, Mapping) and isinstance(raw.get("nodes"), Mapping) and bool(raw["nodes"])


def summary(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows of a measurement for `zenops facts`."""
    rows = []
    for node, m in sorted((raw.get("nodes") or {}).items(), key=lambda kv: str(kv[0])):
        gflops = m.get("gflops")
        rows.append(
            (
                "roofs",
                f"node {node}: {m.get('gbps')} GB/s memory (triad), "
                + (f"{gflops} GFLOP/s bf16 GEMM" if gflops is not None else "GEMM not measured")
                + (f" on {m['cores']} core(s)" if m.get("cores") else ""),
            )
        )
    if raw.get("nodes"):
        first = next(iter(raw["nodes"].values()))
        rows.append(("method", str(first.get("method") or "-")))
    if raw.get("measured_at"):
        rows.append(("measured", str(raw["measured_at"])))
    return rows


# --- running it -------------------------------------------------------------------------------------------------


def probe_path() -> Path:
    from zenops import paths  # noqa: PLC0415

    return paths.collection_root() / "roles" / "vllm_server" / "files" / PROBE


def measure_inventory(
    ctx: RunContext,
    inventory: Path,
    topologies: Mapping[str, Mapping[str, Any]],
    *,
    image: str | None = None,
    limit: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Run playbooks/bandwidth.yml on the hosts of ``topologies``; host -> the facts key."""
    from zenops.runner import RunSpec  # noqa: PLC0415

    nodes = {host: probe_targets(t) for host, t in topologies.items()}
    extravars: dict[str, Any] = {"zenops_bandwidth_nodes": nodes}
    if image:
        extravars["zenops_bandwidth_image"] = image
    spec = RunSpec(playbook="bandwidth", inventory=inventory, extravars=extravars, limit=limit, verbosity=ctx.verbosity)
    run = ctx.run(spec)
    out = {}
    for host in sorted(nodes):
        result = run.host_facts.get(host, {}).get("zenops_bandwidth")
        if not result:
            raise MeasurementError(
                f"{host}: the bandwidth run returned nothing for this host",
                hint=f"check the run log {run.run_dir}",
            )
        out[host] = from_runs(host, result)
    return out


def local_torch_available(python: str = sys.executable) -> bool:
    proc = subprocess.run(
        [python, "-c", "import torch"], capture_output=True, check=False, timeout=120, env=_probe_env()
    )
    return proc.returncode == 0


def _probe_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY")}


def measure_local(topology: Mapping[str, Any], python: str = sys.executable) -> dict[str, Any]:
    """No engine image here: run the probe with this machine's own torch, pinned to each node's cores (memory not
    bound: no container), and say so in the method."""
    from zenops.cpulist import parse_cpulist  # noqa: PLC0415

    label = f"this machine's own Python {python} (not the engine image; memory not bound)"
    figures = []
    for target in probe_targets(topology):
        cpus = set(parse_cpulist(target["cpus"]))
        argv = [python, str(probe_path()), "--node", str(target["node"]), "--threads", str(target["cores"])]
        proc = subprocess.run(
            [*argv, "--zentorch" if target["zentorch"] else "--no-zentorch"],
            capture_output=True,
            text=True,
            check=False,
            timeout=PROBE_TIMEOUT,
            env=_probe_env(),
            preexec_fn=lambda cpus=cpus: os.sched_setaffinity(0, cpus),  # type: ignore[misc]
        )
        where = f"this machine, node {target['node']}"
        if proc.returncode != 0:
            tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
            raise MeasurementError(f"{where}: the bandwidth probe failed (exit {proc.returncode}): {tail}")
        figures.append(parse_probe(proc.stdout, where=where, image=label))
    return measurement(figures, image=f"local torch ({python})")


def no_probe_error() -> UsageError:
    return UsageError(
        "zenops facts --bandwidth --local: this machine has neither the engine image (zenops/vllm-zen) nor torch",
        hint="measure with the engine image: `zenops up --inventory HOSTS --model MODEL` builds it there, then "
        "`zenops facts --bandwidth --inventory HOSTS`; or pip install torch into zenops's Python for a labelled "
        "local measurement",
    )
