"""Local container hosts to try zenops on: systemd + sshd containers on this machine's Docker engine.

Each host is a "VM-like" Debian 12 container (image zenops/debian12-devhost, built by scripts/build-images) reached
over real SSH with a key generated here, as the non-root user `debian` with passwordless sudo, as on every cloud
image: zenops becomes root where it must, and whatever the login user must read or write is tested as that user.
The image has the Docker engine installed (the docker role finds it present; Molecule `docker` and the sandbox's
servers test the install), and it runs nested, so `zenops up` does there what it does on a cloud VM.
No --privileged: systemd runs with SYS_ADMIN + NET_ADMIN, seccomp/apparmor unconfined and the host's cgroups.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from zenops.errors import UsageError, ZenopsError

IMAGE = "zenops/debian12-devhost:latest"
USER = "debian"  # the login user (the image's, with passwordless sudo)
LABEL = "io.zenops.devhost"
_RUN_FLAGS = [
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    # a VM has every capability; the vLLM containers started inside need SYS_NICE (NUMA policy, thread affinity),
    # and a nested container can only get what its host container has
    "--cap-add",
    "SYS_NICE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--cgroupns=host",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "--stop-signal",
    "SIGRTMIN+3",
    # an anonymous volume keeps the nested Docker's data off overlayfs, so it can use overlay2 instead of vfs
    "-v",
    "/var/lib/docker",
]


# run as the login user: its own authorized_keys
_AUTHORIZE = "install -d -m 700 ~/.ssh && cat > ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys"


@dataclass(frozen=True)
class DevHost:
    name: str
    container: str
    address: str
    state: str


def _docker(*args: str, input_text: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker") is None:
        raise ZenopsError("the docker command is not installed here", hint="apt-get install docker.io")
    proc = subprocess.run(["docker", *args], input=input_text, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ZenopsError(f"docker {' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _preflight() -> None:
    if _docker("info", "--format", "{{.ServerVersion}}", check=False).returncode != 0:
        raise ZenopsError("no Docker engine answers on this machine", hint="start it: scripts/start-dockerd")
    if _docker("image", "inspect", IMAGE, check=False).returncode != 0:
        raise ZenopsError(f"the host image {IMAGE} is not built", hint="build it: scripts/build-images")


def home(state_dir: Path, name: str) -> Path:
    return state_dir / "devhost" / name


def inventory_path(state_dir: Path, name: str) -> Path:
    return home(state_dir, name) / "inventory.yml"


def _container(name: str, index: int) -> str:
    return f"zenops-dev-{name}-{index}"


def _ensure_key(d: Path) -> Path:
    key = d / "id_ed25519"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"zenops-devhost-{d.name}", "-f", str(key)],
            check=True,
        )
    key.chmod(0o600)
    return key


def _wait_ready(container: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = _docker("exec", container, "systemctl", "is-active", "ssh", check=False)
        if p.stdout.strip() == "active":
            return
        time.sleep(1)
    raise ZenopsError(
        f"{container}: sshd did not become active within {timeout:.0f}s",
        hint=f"look inside: docker exec {container} systemctl --failed",
    )


def _address(container: str) -> str:
    out = _docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", container).stdout
    for net in json.loads(out).values():
        if net.get("IPAddress"):
            return str(net["IPAddress"])
    raise ZenopsError(f"{container} has no IP address on any Docker network")


def list_hosts(name: str | None = None) -> list[DevHost]:
    flt = f"label={LABEL}={name}" if name else f"label={LABEL}"
    out = _docker("ps", "-a", "--filter", flt, "--format", "{{json .}}").stdout
    hosts = []
    for line in out.splitlines():
        row = json.loads(line)
        labels = dict(kv.split("=", 1) for kv in row.get("Labels", "").split(",") if "=" in kv)
        address = _address(row["Names"]) if row.get("State") == "running" else ""
        hosts.append(DevHost(labels.get(LABEL, "?"), row["Names"], address, row.get("State", "")))
    return sorted(hosts, key=lambda h: h.container)


def up(
    state_dir: Path, name: str = "dev", count: int = 1, timeout: float = 90, cpus: str | None = None
) -> tuple[Path, list[DevHost]]:
    """Start (or reuse) ``count`` hosts; write an inventory for them; return its path and the hosts. ``cpus``: the
    CPUs each host may use (Docker's --cpuset-cpus, e.g. "1" or "0-3"): a smaller machine than this one, as its facts
    then show (a reused host keeps the CPUs it was started with)."""
    if count < 1:
        raise UsageError("--count must be at least 1")
    if cpus is not None and not cpus_ok(cpus):
        raise UsageError(f"--cpus {cpus}: use CPU ids this machine has, e.g. 1 or 0-3 (see `nproc`)")
    _preflight()
    d = home(state_dir, name)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    key = _ensure_key(d)
    pub = key.with_suffix(".pub").read_text()
    known_hosts = d / "known_hosts"
    hosts = {}
    for i in range(1, count + 1):
        c = _container(name, i)
        state = _docker("inspect", "--format", "{{.State.Status}}", c, check=False)
        if state.returncode != 0:
            _docker(
                "run",
                "-d",
                "--name",
                c,
                "--hostname",
                f"{name}-{i}",
                "--label",
                f"{LABEL}={name}",
                *_RUN_FLAGS,
                *(["--cpuset-cpus", cpus] if cpus else []),
                IMAGE,
                "/sbin/init",
            )
            known_hosts.unlink(missing_ok=True)  # a new container has new host keys
        elif state.stdout.strip() != "running":
            _docker("start", c)
        _wait_ready(c, timeout)
        _docker("exec", "-i", "-u", USER, "-w", f"/home/{USER}", c, "sh", "-c", _AUTHORIZE, input_text=pub)
        hosts[f"{name}-{i}"] = {
            "ansible_host": _address(c),
            "ansible_user": USER,
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    inv = inventory_path(state_dir, name)
    inv.write_text("# written by `zenops devhost up`\n" + yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True))
    return inv, list_hosts(name)


def cpus_ok(spec: str) -> bool:
    """A cpuset list (``1``, ``0-3``, ``0,2``) of CPUs this process may use."""
    from zenops.cpulist import parse_cpulist  # noqa: PLC0415

    try:
        wanted = set(parse_cpulist(spec))
    except ValueError:
        return False
    return bool(wanted) and wanted <= os.sched_getaffinity(0)


def down(state_dir: Path, name: str = "dev") -> list[str]:
    """Remove this devhost set's containers (and their volumes) and its key and inventory."""
    removed = []
    for h in list_hosts(name):
        _docker("rm", "-f", "-v", h.container)
        removed.append(h.container)
    shutil.rmtree(home(state_dir, name), ignore_errors=True)
    return removed
