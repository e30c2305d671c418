"""`zenops facts`: read the CPU, SMT and NUMA topology of hosts and keep it for the planner.

The collection's ``facts.yml`` runs the module ``zenops.inference.cpu_topology`` on every host; its fact
``zenops_cpu_topology`` comes back through the runner. Each host's topology is saved as
``<state_dir>/facts/<host>.json`` (directory mode 0700), which ``zenops plan --facts FILE`` reads with
:func:`load_facts_file`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from zenops import statefile
from zenops.config import Config
from zenops.context import RunContext
from zenops.errors import UsageError, ZenopsError
from zenops.runner import RunSpec

FACT_NAME = "zenops_cpu_topology"
SCHEMA = 1
# keys a topology dict must have for the planner to use it
REQUIRED_KEYS = frozenset(
    {
        "schema",
        "architecture",
        "vendor",
        "model_name",
        "flags",
        "sockets",
        "numa_nodes",
        "cpus",
        "online_cpus",
        "allowed_cpus",
        "physical_cores",
        "threads_per_core",
        "smt_active",
        "memory_total_kib",
        "memory_available_kib",
    }
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._:@-]")


def facts_dir(config: Config) -> Path:
    return config.state_dir / "facts"


def facts_path(config: Config, host: str) -> Path:
    """Where the topology of ``host`` is kept: ``<state_dir>/facts/<host>.json`` (odd characters become _)."""
    name = _UNSAFE.sub("_", host)
    if name in ("", ".", ".."):
        name = f"_{name}"
    return facts_dir(config) / f"{name}.json"


def saved_facts(config: Config, host: str) -> dict[str, Any] | None:
    """The topology kept for ``host`` (zenops facts, up), or None when there is none or it is unreadable."""
    return _kept(facts_path(config, host))


def _kept(path: Path) -> dict[str, Any] | None:
    """The topology kept in ``path``; None when there is none, or (with a warning naming it) when it is damaged:
    facts are gathered again."""
    try:
        return statefile.read_json_object(path)
    except statefile.DamagedStateError as e:
        hint = "zenops reads the host's facts again (`zenops facts --inventory FILE`), which rewrites it"
        statefile.warn_damaged(statefile.DamagedStateError(path, e.reason, hint=hint))
        return None


def save_facts(config: Config, host: str, topology: dict[str, Any]) -> Path:
    """Write one host's topology (file 0600 in a 0700 dir), atomically, and return its path.

    Fresh facts without a bandwidth measurement get the one kept for the host when it was measured on the same
    hardware (zenops.bandwidth.carry_over): into ``topology`` too, so the caller plans with it."""
    from zenops import bandwidth  # noqa: PLC0415

    path = facts_path(config, host)
    bandwidth.carry_over(topology, _kept(path))
    return statefile.write_json(path, topology)


def check_topology(topology: Any, source: str) -> dict[str, Any]:
    """``topology`` as a dict if it is a schema-1 topology, else a UsageError naming what is wrong."""
    hint = "regenerate it with `zenops facts --inventory FILE` (or `zenops facts --local`)"
    if not isinstance(topology, dict):
        raise UsageError(f"{source}: expected a CPU topology object, got {type(topology).__name__}", hint=hint)
    if topology.get("schema") != SCHEMA:
        raise UsageError(
            f"{source}: CPU topology schema {topology.get('schema')!r} is not supported (this zenops reads {SCHEMA})",
            hint=hint,
        )
    missing = sorted(REQUIRED_KEYS - topology.keys())
    if missing:
        raise UsageError(f"{source}: CPU topology lacks {', '.join(missing)}", hint=hint)
    return topology


def gather_facts(
    ctx: RunContext,
    inventory: Path | None,
    *,
    local: bool = False,
    limit: str | None = None,
    bandwidth: bool = False,
    image: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Run facts.yml on the inventory's hosts (or on this machine with ``local``); save and return host -> topology.

    ``bandwidth``: then measure each NUMA node's roofs (zenops.bandwidth) with the engine image (``image``, else the
    newest zenops/vllm-zen on the host); on this machine without the image, with its own torch (labelled), else a
    UsageError naming the fix. The measurement is kept with the facts (key ``bandwidth``)."""
    if local == (inventory is not None):
        raise UsageError(
            "zenops facts needs exactly one of --inventory FILE and --local",
            hint="pass --inventory hosts.yml for your hosts, or --local for this machine",
        )
    with tempfile.TemporaryDirectory(prefix="zenops-facts-") as tmp:  # mode 0700
        if local:
            inventory = Path(tmp) / "local.ini"
            inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
        assert inventory is not None
        spec = RunSpec(playbook="facts", inventory=inventory, limit=limit, verbosity=ctx.verbosity)
        run = ctx.run(spec)
        out: dict[str, dict[str, Any]] = {}
        for host in sorted(run.stats):
            topology = run.host_facts.get(host, {}).get(FACT_NAME)
            if topology is None:
                raise ZenopsError(
                    f"{host}: the run succeeded but returned no {FACT_NAME} fact",
                    hint="the collection may be stale or overridden; check `zenops paths` and the run log "
                    f"{run.run_dir}",
                )
            out[host] = check_topology(topology, f"{host} ({run.run_dir})")
        if bandwidth:
            measure_hosts(ctx, inventory, out, local=local, image=image)
    for host, topology in out.items():
        save_facts(ctx.config, host, topology)
    return out


def measure_hosts(
    ctx: RunContext, inventory: Path, topologies: dict[str, dict[str, Any]], *, local: bool, image: str | None
) -> None:
    """Measure every host of ``topologies`` and put the figures in its facts (key ``bandwidth``)."""
    from zenops import bandwidth  # noqa: PLC0415

    if local and not _local_image(image):
        if not bandwidth.local_torch_available():
            raise bandwidth.no_probe_error()
        for topology in topologies.values():
            topology[bandwidth.KEY] = bandwidth.measure_local(topology)
        return
    measured = bandwidth.measure_inventory(ctx, inventory, topologies, image=image)
    for host, figures in measured.items():
        topologies[host][bandwidth.KEY] = figures


def _local_image(image: str | None) -> bool:
    """This machine's Docker has the engine image (``image``, or any zenops/vllm-zen)."""
    try:
        proc = subprocess.run(
            ["docker", "images", "--quiet", image or "zenops/vllm-zen"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def _result_objects(text: str) -> list[Any]:
    """Every JSON value in ``text``: the whole text if it is one, else one per non-empty line (JSON lines)."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise UsageError(
                    f"line {number} is not JSON: {e.msg}",
                    hint="pass a file written by `zenops facts` (<state_dir>/facts/HOST.json) or by "
                    "`zenops facts --json > FILE`",
                ) from e
    return values


def load_facts_file(path: Path, host: str | None = None) -> dict[str, Any]:
    """A CPU topology from ``path`` for ``zenops plan --facts FILE``.

    Accepts one topology dict (a ``<state_dir>/facts/<host>.json`` file) or the output of ``zenops facts --json``
    (its result object, possibly after event lines). A result with several hosts needs ``host``.
    """
    try:
        text = path.read_text()
    except FileNotFoundError as e:
        raise UsageError(
            f"facts file {path} not found", hint="create it with `zenops facts --inventory FILE` or `--local`"
        ) from e
    except OSError as e:
        raise UsageError(f"cannot read facts file {path}: {e.strerror}", hint="check the path and permissions") from e
    try:
        values = _result_objects(text)
    except UsageError as e:
        raise UsageError(f"facts file {path}: {e.message}", hint=e.hint) from e
    results = [v for v in values if isinstance(v, dict) and v.get("type") == "result" and v.get("command") == "facts"]
    if results:
        hosts = results[-1].get("hosts")
        if not isinstance(hosts, dict) or not hosts:
            raise UsageError(f"facts file {path} holds a facts result without hosts", hint="re-run `zenops facts`")
        if host is None:
            if len(hosts) > 1:
                raise UsageError(
                    f"facts file {path} holds {len(hosts)} hosts: {', '.join(sorted(hosts))}",
                    hint="pick one with --limit NAME",
                )
            host = next(iter(hosts))
        if host not in hosts:
            raise UsageError(f"facts file {path} has no host {host!r}", hint=f"hosts in it: {', '.join(sorted(hosts))}")
        return check_topology(hosts[host], f"{path} (host {host})")
    if len(values) == 1 and isinstance(values[0], dict) and "schema" in values[0]:
        return check_topology(values[0], str(path))
    raise UsageError(
        f"facts file {path} is neither a CPU topology nor the output of `zenops facts --json`",
        hint="pass <state_dir>/facts/HOST.json as written by `zenops facts`",
    )
