"""`zenops facts`: the CPU, SMT and NUMA topology of hosts, saved for `zenops plan`.

Library: zenops.facts (and zenops.bandwidth for --bandwidth). Playbook: playbooks/facts.yml (playbooks/bandwidth.yml).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from zenops.cli.context import App, get_app
from zenops.cli.options import OldSpellingOption, json_option, option
from zenops.errors import UsageError

_GIB_IN_KIB = 1024 * 1024


@click.command()
@option("inventory", "facts")
@click.option("--local", is_flag=True, help="Read this machine's topology (no SSH, no inventory).")
@click.option(
    "--bandwidth",
    is_flag=True,
    help="Also measure each NUMA node's memory bandwidth (GB/s) and bf16 GEMM throughput (GFLOP/s) with the engine "
    "image, for the plan's roofline (about 10-30 s per node).",
)
@click.option(
    "--engine-image",
    "--image",
    "image",
    cls=OldSpellingOption,
    old=("--image",),
    metavar="REF",
    help="With --bandwidth: the engine image (default: newest zenops/vllm-zen). `up --os-image` is the cloud's OS "
    "image.",
)
@option("limit", "facts")
@json_option
@click.pass_context
def facts(
    ctx: click.Context, inventory: Path | None, local: bool, bandwidth: bool, image: str | None, limit: str | None
) -> None:
    """Read the CPU model and flags, sockets, cores, SMT and NUMA nodes of hosts; save them for the planner.

    \b
      zenops facts --inventory hosts.yml     your hosts, over SSH (read-only)
      zenops facts --local                   this machine
      zenops facts --local --json > f.json   for `zenops plan --facts f.json`
      zenops facts -i hosts.yml --bandwidth  + each NUMA node's measured roofs, for the plan's roofline

    Each host's topology is also saved as <state_dir>/facts/<host>.json. Nothing changes on the hosts.

    --bandwidth runs where the engine runs: per NUMA node, a short-lived container of the engine image
    (docker run --rm, pinned to the node's cores and memory) times a STREAM triad over arrays far larger than L3
    and a bf16 GEMM with the image's own torch/zentorch. Nothing is installed on the hosts; a host without the image
    fails with the fix (`zenops up --model` makes it). With --local and no image here, zenops's own torch is used if
    installed, labelled as such. The figures are kept with the facts: `zenops plan --facts`, `zenops up` and later
    `zenops facts` runs use them while the hardware is the same.
    """
    from zenops.facts import facts_path, gather_facts  # noqa: PLC0415

    app = get_app(ctx)
    if image and not bandwidth:
        raise UsageError("--engine-image goes with --bandwidth", hint="add --bandwidth to measure with that image")
    if local == (inventory is not None):
        raise UsageError(
            "zenops facts needs exactly one of --inventory FILE and --local" + (" (both were given)" if local else ""),
            hint="pass --inventory hosts.yml for your hosts, or --local for this machine",
        )
    with app.run_context(read_only=True) as run_ctx:
        hosts = gather_facts(run_ctx, inventory, local=local, limit=limit, bandwidth=bandwidth, image=image)
    saved = {host: str(facts_path(app.config, host)) for host in hosts}
    if app.json:
        app.emit_json({"type": "result", "command": "facts", "hosts": hosts, "saved": saved})
        return
    for host, topology in hosts.items():
        _print_host(app, host, topology, saved[host])


def _gib(kib: int) -> str:
    return f"{kib / _GIB_IN_KIB:.1f} GiB"


def summary_lines(topology: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows describing one host's topology for people."""
    from zenops.cpulist import display_cpulist  # noqa: PLC0415

    t = topology
    cpu_id = ", ".join(f"{k} {t[k]}" for k in ("family", "model", "stepping") if t.get(k) is not None)
    cpu = " ".join(x for x in (t.get("vendor"), t.get("model_name")) if x) or "unknown CPU"
    rows = [("CPU", f"{cpu}" + (f" ({cpu_id})" if cpu_id else "") + f", {t['architecture']}, kernel {t.get('kernel')}")]
    smt = f"SMT on, {t['threads_per_core']} threads per core" if t["smt_active"] else "SMT off"
    rows.append(("cores", f"{t['sockets']} socket(s), {t['physical_cores']} physical cores, {smt}"))
    for node in t["numa_nodes"]:
        distances = " ".join(str(d) for d in node["distances"])
        rows.append(
            (
                f"node {node['id']}",
                f"cpus {display_cpulist(node['cpus'])}, {_gib(node['memory_total_kib'])} "
                f"({_gib(node['memory_free_kib'])} free), distances {distances or '-'}",
            )
        )
    rows.append(("memory", f"{_gib(t['memory_total_kib'])} total, {_gib(t['memory_available_kib'])} available"))
    rows.append(
        (
            "allowed",
            f"cpus {display_cpulist(t['allowed_cpus'])} ({len(t['allowed_cpus'])} of {len(t['online_cpus'])} online)",
        )
    )
    rows.append(("flags", " ".join(t["flags"]) or "-"))
    rows.append(("hypervisor", t.get("hypervisor") or "none (bare metal)"))
    rows.extend(("note", note) for note in t.get("notes") or ())  # facts of older zenops have no notes
    if t.get("bandwidth"):
        from zenops.bandwidth import summary  # noqa: PLC0415

        rows.extend(summary(t["bandwidth"]))
    else:
        rows.append(("roofs", "not measured (`zenops facts --bandwidth` measures the memory and compute roofs)"))
    return rows


def _print_host(app: App, host: str, topology: dict[str, Any], saved: str) -> None:
    app.out.print(host, style="bold", markup=False, highlight=False)
    for label, text in [*summary_lines(topology), ("saved", saved)]:
        app.out.print(f"  {label:<11}{text}", markup=False, highlight=False)
