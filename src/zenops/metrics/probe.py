"""One snapshot of a deployment's servers: each vLLM instance's /metrics and its host's CPU and memory counters.

Read on each host, over SSH as `zenops ssh` connects (zenops.deployment.access), by a few lines of the host's own
python3 (every host Ansible manages has it): the instances are asked at the address they listen on, so a cloud
deployment whose vLLM ports are open only to its gateway is read all the same, and no port opens for it. The API key
goes to that program on its stdin, never on a command line. Hosts are read in parallel.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zenops.deployment.access import HostAccess

# runs on the host: reads the key from stdin, each URL given, /proc/stat's cpu line and /proc/meminfo; prints JSON
_PROGRAM = """
import json, sys, time, urllib.request
key = sys.stdin.readline().strip()
out = {"time": time.time(), "metrics": {}, "errors": {}}
for url in sys.argv[1:]:
    try:
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
        out["metrics"][url] = urllib.request.urlopen(req, timeout=5).read().decode("utf-8", "replace")
    except Exception as e:
        out["errors"][url] = str(e)
with open("/proc/stat") as f:
    out["cpu"] = [int(x) for x in f.readline().split()[1:]]
mem = {}
with open("/proc/meminfo") as f:
    for line in f:
        k, _, v = line.partition(":")
        mem[k] = int(v.split()[0]) * 1024
out["mem_total"], out["mem_available"] = mem.get("MemTotal"), mem.get("MemAvailable")
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Instance:
    host: str
    index: int
    port: int
    url: str  # its /metrics, at the address it listens on (as its host reaches it)


@dataclass
class HostSnapshot:
    host: str
    time: float
    metrics: dict[int, str] = field(default_factory=dict)  # instance index -> /metrics text
    errors: dict[int, str] = field(default_factory=dict)  # instance index -> why it could not be read
    cpu: list[int] = field(default_factory=list)  # /proc/stat's cpu line
    mem_total: int | None = None
    mem_available: int | None = None
    error: str | None = None  # the host could not be read at all


def instances_of(endpoints: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Instance]:
    """Every vLLM instance of a serving record's endpoints, with the URL of its /metrics on its host (its endpoint's
    ``listen``, as roles/vllm_server records it: "" when it binds to every address)."""
    out = []
    for host in sorted(endpoints):
        for ep in endpoints[host]:
            port = int(ep["port"])
            # as the role's health check asks it: the one address it binds to, else (bound to all) the loopback
            address = str(ep.get("listen") or "") or "127.0.0.1"
            if ":" in address:
                address = f"[{address}]"
            out.append(Instance(host, int(ep.get("instance", 0)), port, f"http://{address}:{port}/metrics"))
    return out


def _read_host(access: HostAccess, instances: list[Instance], key: str, timeout: float) -> HostSnapshot:
    argv = access.run_argv(["python3", "-c", _PROGRAM, *(i.url for i in instances)], batch=True)
    started = time.time()
    try:
        proc = subprocess.run(argv, input=key + "\n", capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return HostSnapshot(access.host, started, error=f"no answer in {timeout:.0f}s")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return HostSnapshot(access.host, started, error=why)
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return HostSnapshot(access.host, started, error="its answer was not JSON")
    by_url = {i.url: i.index for i in instances}
    return HostSnapshot(
        host=access.host,
        time=float(data.get("time") or started),
        metrics={by_url[u]: t for u, t in (data.get("metrics") or {}).items() if u in by_url},
        errors={by_url[u]: e for u, e in (data.get("errors") or {}).items() if u in by_url},
        cpu=[int(x) for x in data.get("cpu") or []],
        mem_total=data.get("mem_total"),
        mem_available=data.get("mem_available"),
    )


def snapshot(
    hosts: Mapping[str, HostAccess], instances: list[Instance], key_file: Path, *, timeout: float = 30.0
) -> dict[str, HostSnapshot]:
    """Every host's snapshot (host -> HostSnapshot), read at once."""
    key = key_file.read_text().strip()
    by_host: dict[str, list[Instance]] = {}
    for i in instances:
        by_host.setdefault(i.host, []).append(i)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(by_host)))) as pool:
        futures = {
            h: pool.submit(_read_host, hosts[h], insts, key, timeout) if h in hosts else None
            for h, insts in by_host.items()
        }
        return {
            h: f.result() if f is not None else HostSnapshot(h, time.time(), error="not in the inventory")
            for h, f in futures.items()
        }
