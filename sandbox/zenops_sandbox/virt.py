"""A Nova compute driver whose servers are systemd containers on this machine.

Each server is `docker create --name <instance uuid>` on a Docker bridge network that mirrors the Neutron subnet of its
port (same CIDR, this machine holds the gateway address), with the fixed IP Neutron allocated, the systemd options of a
"VM-like" container, an anonymous volume for /var/lib/docker, and the server's keypair in root's and the image's
default user's authorized_keys. Nova's bookkeeping (resources, node identity) comes from the fake driver.

Fault injection for tests, from server metadata (any user may set it), flavor extra specs or image properties:
  zenops_test:fail = spawn       spawn fails: server ERROR with a fault naming the injection (no reschedule)
  zenops_test:fail = reschedule  spawn asks for a reschedule: one host, so ERROR "Exceeded maximum number of retries"
  zenops_test:slow = <seconds>   sleep before creating the container (a slow BUILD; a delete meanwhile aborts it)

Snapshots (`openstack server image create`): the container's root filesystem (docker commit) and its /var/lib/docker
volume go into the Glance image's data (zenops_sandbox.snapshots has the format); a server booted from such an image
gets both, the data downloaded from Glance once per image into this machine's cache (snapshot_dir).
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time

from nova.compute import power_state, task_states
from nova.image import glance
from oslo_config import cfg
from oslo_log import log as logging

from nova import exception
from nova.virt import fake, hardware
from zenops_sandbox import GUARD_ROUTE_METRIC, LABEL
from zenops_sandbox import snapshots as snap
from zenops_sandbox.netutil import check_overlap, default_mtu

LOG = logging.getLogger(__name__)

opts = [
    cfg.StrOpt(
        "default_image",
        default="zenops/debian12-guest:latest",
        help="Container image when the Glance image has no zenops_container_image property",
    ),
    cfg.StrOpt("default_user", default="debian", help="Login user when the Glance image has no os_admin_user property"),
    cfg.StrOpt("docker", default="docker", help="Docker CLI"),
    cfg.IntOpt("docker_timeout", default=120, help="Seconds for one Docker CLI call"),
    cfg.StrOpt(
        "snapshot_dir",
        default="/var/tmp/zenops-sandbox-snapshots",
        help="Snapshot archives: those being made, and those downloaded from Glance (one per image, the cache)",
    ),
    cfg.IntOpt("snapshot_timeout", default=3600, help="Seconds for one step of a snapshot (commit, save, tar, load)"),
]
CONF = cfg.CONF
CONF.register_opts(opts, group="zenops_sandbox")

FAIL_KEY = "zenops_test:fail"
SLOW_KEY = "zenops_test:slow"
IMAGE_PROP = "zenops_container_image"
USER_PROP = "os_admin_user"

# What a systemd container needs here (no --privileged).
SYSTEMD_OPTS = [
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--cap-add",
    "SYS_NICE",  # a VM has it; vLLM containers inside the guest are started with --cap-add SYS_NICE
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
    # A tty makes systemd print its boot to the console, which `docker logs` (Nova's console log) shows.
    "--tty",
    "--env",
    "SYSTEMD_COLORS=0",
    # A reboot inside the guest exits 133 (see sandbox/guest): Docker starts it again; a poweroff (exit 0) stays off.
    "--restart",
    "on-failure",
]

_net_lock = threading.Lock()  # network create/remove vs. container create/remove within this nova-compute
_snap_lock = threading.Lock()  # one download + docker load of a snapshot image at a time


class DockerError(Exception):
    pass


def docker(*args: str, stdin: bytes | None = None, check: bool = True, timeout: int | None = None) -> str:
    cmd = [CONF.zenops_sandbox.docker, *args]
    try:
        res = subprocess.run(
            cmd, input=stdin, capture_output=True, timeout=timeout or CONF.zenops_sandbox.docker_timeout
        )
    except subprocess.TimeoutExpired as e:
        raise DockerError(f"{' '.join(cmd[:3])}: timed out") from e
    if check and res.returncode != 0:
        raise DockerError(f"docker {args[0]} failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout.decode(errors="replace")


def docker_bytes(*args: str) -> bytes:
    res = subprocess.run(
        [CONF.zenops_sandbox.docker, *args], capture_output=True, timeout=CONF.zenops_sandbox.docker_timeout
    )
    if res.returncode != 0:
        raise DockerError(f"docker {args[0]} failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout


def network_name(net_id: str) -> str:
    return f"zenops-sandbox-{net_id}"


def bridge_name(net_id: str) -> str:
    return "zsb-" + net_id.replace("-", "")[:11]


def ensure_network(net_id: str, cidr: str, gateway: str | None, mtu: int | None) -> str:
    """Docker bridge network mirroring the IPv4 subnet of Neutron network net_id; call with _net_lock held."""
    name = network_name(net_id)
    out = docker("network", "inspect", name, check=False)
    if out.strip() not in ("", "[]"):
        return name
    check_overlap(cidr)
    net = ipaddress.ip_network(cidr, strict=False)
    if not gateway:
        gateway = str(net.network_address + net.num_addresses - 2)
        LOG.warning("subnet %s has no gateway: this machine takes %s on its mirror", cidr, gateway)
    mtu = min(mtu or 1500, default_mtu())
    docker(
        "network",
        "create",
        "--driver",
        "bridge",
        "--subnet",
        str(net),
        "--gateway",
        gateway,
        "--label",
        f"{LABEL}=1",
        "--label",
        f"{LABEL}.network={net_id}",
        "-o",
        f"com.docker.network.bridge.name={bridge_name(net_id)}",
        "-o",
        f"com.docker.network.driver.mtu={mtu}",
        name,
    )
    # Once the mirror is gone again, traffic to this subnet must not leave through the default route.
    subprocess.run(
        ["ip", "route", "replace", "blackhole", str(net), "metric", str(GUARD_ROUTE_METRIC)], capture_output=True
    )
    LOG.info("created Docker network %s for subnet %s (gateway %s)", name, cidr, gateway)
    return name


def prune_networks() -> None:
    """Remove the sandbox's per-network mirrors that no longer have containers; call with _net_lock held.

    A container counts in any state: `docker network inspect` lists only running ones, so a server created but not
    started yet (spawn starts it after the lock) or stopped (SHUTOFF) would lose its network to another server's
    removal, and its `docker start` then fails with "network ... not found" (seen in a --full campaign, where an
    injected spawn failure was cleaned up while another server on the provider network was starting)."""
    names = docker("network", "ls", "--filter", f"label={LABEL}.network", "--format", "{{.Name}}").split()
    for name in names:
        try:
            if docker("ps", "--all", "--quiet", "--filter", f"network={name}").strip():
                continue
        except DockerError as e:  # not known to be unused: keep it
            LOG.warning("kept Docker network %s: %s", name, e)
            continue
        docker("network", "rm", name, check=False)
        LOG.info("removed Docker network %s (no containers left)", name)


def _parse_passwd(data: bytes, user: str) -> tuple[int, int, str] | None:
    for line in data.decode(errors="replace").splitlines():
        f = line.split(":")
        if len(f) >= 7 and f[0] == user:
            return int(f[2]), int(f[3]), f[5]
    return None


def authorized_keys_tar(key_data: str, users: list[tuple[int, int, str]]) -> bytes:
    """A tar stream (for `docker cp -a - C:/`) with <home>/.ssh/authorized_keys for each (uid, gid, home)."""
    content = key_data.strip().encode() + b"\n"
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for uid, gid, home in users:
            base = home.strip("/") + "/.ssh"
            d = tarfile.TarInfo(base)
            d.type, d.mode, d.uid, d.gid, d.mtime = tarfile.DIRTYPE, 0o700, uid, gid, now
            tar.addfile(d)
            f = tarfile.TarInfo(base + "/authorized_keys")
            f.mode, f.uid, f.gid, f.mtime, f.size = 0o600, uid, gid, now, len(content)
            tar.addfile(f, io.BytesIO(content))
    return buf.getvalue()


def _meta(instance, key: str) -> str | None:
    """A test key from server metadata, then flavor extra specs, then image properties."""
    for source in (
        lambda: instance.metadata,
        lambda: instance.flavor.extra_specs,
        lambda: {k[len("image_") :]: v for k, v in (instance.system_metadata or {}).items() if k.startswith("image_")},
    ):
        try:
            value = (source() or {}).get(key)
        except Exception:
            value = None
        if value not in (None, ""):
            return str(value)
    return None


def _hostname(instance) -> str:
    name = getattr(instance, "hostname", None) or instance.display_name or instance.uuid
    name = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-")[:63]
    return name or instance.uuid


class ContainerDriver(fake.FakeDriverWithoutFakeNodes):
    """FakeDriverWithoutFakeNodes for the bookkeeping, Docker for the servers."""

    # Large fake resources: placement, not this machine, decides how many gp.5.24.96 fit (tests lower quotas instead).
    vcpus = 10000
    memory_mb = 16 * 1024 * 1024  # 16 TiB
    local_gb = 100000  # 100 TB

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def spawn(
        self,
        context,
        instance,
        image_meta,
        injected_files,
        admin_password,
        allocations,
        network_info=None,
        block_device_info=None,
        power_on=True,
        accel_info=None,
    ):
        uuid = instance.uuid
        fail = _meta(instance, FAIL_KEY)
        if fail == "spawn":
            raise exception.BuildAbortException(
                instance_uuid=uuid, reason=f"fault injected by {FAIL_KEY}=spawn (zenops sandbox)"
            )
        if fail == "reschedule":
            raise exception.RescheduledException(
                instance_uuid=uuid, reason=f"fault injected by {FAIL_KEY}=reschedule (zenops sandbox)"
            )
        if fail:
            LOG.warning("unknown %s value %r ignored (use spawn or reschedule)", FAIL_KEY, fail, instance=instance)
        slow = _meta(instance, SLOW_KEY)
        if slow:
            self._slow(instance, slow)
        started = time.monotonic()
        try:
            archive = self._snapshot_archive(context, instance)
            self._create(instance, network_info or [], power_on, archive)
        except (exception.InstanceNotFound, exception.UnexpectedDeletingTaskStateError):
            self._remove(uuid)
            raise
        except Exception as e:
            LOG.exception("container spawn failed", instance=instance)
            self._remove(uuid)
            raise exception.BuildAbortException(instance_uuid=uuid, reason=f"zenops sandbox container: {e}") from e
        LOG.info("container %s started in %.2fs", uuid, time.monotonic() - started, instance=instance)

    def _slow(self, instance, value: str) -> None:
        try:
            seconds = float(value)
        except ValueError:
            raise exception.BuildAbortException(
                instance_uuid=instance.uuid, reason=f"{SLOW_KEY}={value!r} is not a number of seconds"
            ) from None
        LOG.info("%s: sleeping %.1fs before creating the container", SLOW_KEY, seconds, instance=instance)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            instance.refresh()  # raises InstanceNotFound once deleted
            if instance.task_state == task_states.DELETING:
                raise exception.UnexpectedDeletingTaskStateError(
                    instance_uuid=instance.uuid, expected=task_states.SPAWNING, actual=task_states.DELETING
                )

    def _image_and_user(self, instance) -> tuple[str, str]:
        sysmeta = instance.system_metadata or {}
        image = sysmeta.get("image_" + IMAGE_PROP) or CONF.zenops_sandbox.default_image
        user = sysmeta.get("image_" + USER_PROP) or CONF.zenops_sandbox.default_user
        return image, user

    @staticmethod
    def _ports(network_info) -> list[dict]:
        ports = []
        for vif in network_info:
            for subnet in vif["network"]["subnets"]:
                cidr = subnet["cidr"]
                if not cidr or ipaddress.ip_network(cidr, strict=False).version != 4 or not subnet["ips"]:
                    continue
                gw = subnet["gateway"]["address"] if subnet.get("gateway") else None
                # Nova's network model carries no subnet id: one mirror per Neutron network (its first IPv4 subnet).
                ports.append(
                    {
                        "net_id": vif["network"]["id"],
                        "cidr": cidr,
                        "gateway": gw,
                        "ip": subnet["ips"][0]["address"],
                        "mtu": vif["network"].get_meta("mtu"),
                    }
                )
                break
        return ports

    def _create(self, instance, network_info, power_on: bool, archive: str | None = None) -> None:
        uuid = instance.uuid
        image, user = self._image_and_user(instance)
        ports = self._ports(network_info)
        if not ports:
            raise DockerError("the server has no IPv4 port: boot it on a network with an IPv4 subnet")
        base = [
            "create",
            "--name",
            uuid,
            "--hostname",
            _hostname(instance),
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{LABEL}.instance={uuid}",
            "--label",
            f"{LABEL}.name={instance.display_name or ''}",
            *SYSTEMD_OPTS,
            "-v",
            "/var/lib/docker",  # anonymous volume: Docker inside the guest can use overlay2
        ]
        with _net_lock:
            first = ports[0]
            net = ensure_network(first["net_id"], first["cidr"], first["gateway"], first["mtu"])
            docker(*base, "--network", net, "--ip", first["ip"], image, "/sbin/init")
            for extra in ports[1:]:
                net = ensure_network(extra["net_id"], extra["cidr"], extra["gateway"], extra["mtu"])
                docker("network", "connect", "--ip", extra["ip"], net, uuid)
        if instance.key_data:
            users = [(0, 0, "/root")]
            passwd = _passwd_from_container(uuid)
            found = _parse_passwd(passwd, user) if passwd else None
            if found and found[2] not in ("/root", "/"):
                users.append(found)
            elif not found:
                LOG.warning("image %s has no user %r: key installed for root only", image, user, instance=instance)
            docker("cp", "-a", "-", f"{uuid}:/", stdin=authorized_keys_tar(instance.key_data, users))
        if archive:
            _fill_volume(uuid, archive)
        if power_on:
            docker("start", uuid)

    def _remove(self, uuid: str) -> None:
        with _net_lock:
            docker("rm", "-f", "-v", uuid, check=False)
            prune_networks()

    def destroy(
        self, context, instance, network_info, block_device_info=None, destroy_disks=True, destroy_secrets=True
    ):
        self._remove(instance.uuid)
        self.instances.pop(instance.uuid, None)

    def cleanup(
        self,
        context,
        instance,
        network_info,
        block_device_info=None,
        destroy_disks=True,
        migrate_data=None,
        destroy_vifs=True,
        destroy_secrets=True,
    ):
        pass

    # --- snapshots -------------------------------------------------------------------------------------------------

    def snapshot(self, context, instance, image_id, update_task_state):
        """The container's root filesystem and /var/lib/docker volume into the Glance image ``image_id`` (Nova made
        it, queued). The container is paused for the copy (as a cold snapshot: Docker inside it writes nothing
        meanwhile, so its databases are copied whole), then runs on; a stopped one is copied as it is."""
        uuid = instance.uuid
        info = self._inspect(uuid)
        if info is None:
            raise exception.InstanceNotRunning(instance_id=uuid)
        api = glance.API()
        image = api.get(context, image_id)
        update_task_state(task_state=task_states.IMAGE_PENDING_UPLOAD)
        tag = snap.tag_for(image_id)
        os.makedirs(CONF.zenops_sandbox.snapshot_dir, mode=0o700, exist_ok=True)
        archive = _archive_path(image_id)
        started = time.monotonic()
        try:
            _write_snapshot(uuid, info, tag, archive)
            LOG.info("snapshot %s: archive of %d MiB in %.1fs", image_id, os.path.getsize(archive) >> 20,
                     time.monotonic() - started, instance=instance)  # fmt: skip
            update_task_state(task_state=task_states.IMAGE_UPLOADING, expected_state=task_states.IMAGE_PENDING_UPLOAD)
            with open(archive, "rb") as data:
                api.update(context, image_id, snap.metadata(tag, image.get("container_format")), data,
                           purge_props=False)  # fmt: skip
        except Exception:
            LOG.exception("snapshot %s failed", image_id, instance=instance)
            _drop_snapshot(image_id)
            raise
        LOG.info("snapshot %s uploaded in %.1fs", image_id, time.monotonic() - started, instance=instance)

    def _snapshot_archive(self, context, instance) -> str | None:
        """The local archive of the snapshot image the server boots from (downloaded from Glance when this machine
        has none), its root filesystem loaded into Docker; None when the image is no snapshot."""
        sysmeta = instance.system_metadata or {}
        props = {k[len("image_") :]: v for k, v in sysmeta.items() if k.startswith("image_")}
        if not snap.is_snapshot(props):
            return None
        if props[snap.SNAPSHOT_PROP] != snap.FORMAT:
            raise DockerError(f"image {instance.image_ref}: snapshot format {props[snap.SNAPSHOT_PROP]!r} unknown")
        image_id = instance.image_ref
        tag = props.get(IMAGE_PROP) or snap.tag_for(image_id)
        archive = _archive_path(image_id)
        with _snap_lock:
            if not os.path.exists(archive):
                os.makedirs(CONF.zenops_sandbox.snapshot_dir, mode=0o700, exist_ok=True)
                part = archive + ".part"
                started = time.monotonic()
                glance.API().download(context, image_id, dest_path=part)
                os.replace(part, archive)
                LOG.info("snapshot %s downloaded from Glance in %.1fs", image_id, time.monotonic() - started)
            if docker("image", "inspect", tag, check=False).strip() in ("", "[]"):
                _load_rootfs(archive)
        return archive

    # --- state -----------------------------------------------------------------------------------------------------

    def _inspect(self, uuid: str) -> dict | None:
        out = docker("inspect", "--type", "container", uuid, check=False)
        data = json.loads(out or "[]")
        return data[0] if data else None

    def get_info(self, instance, use_cache=True):
        info = self._inspect(instance.uuid)
        if info is None:
            raise exception.InstanceNotFound(instance_id=instance.uuid)
        state = info.get("State", {})
        if state.get("Paused"):
            ps = power_state.PAUSED
        elif state.get("Running") or state.get("Restarting"):
            ps = power_state.RUNNING
        elif state.get("Dead"):
            ps = power_state.CRASHED
        else:
            ps = power_state.SHUTDOWN
        return hardware.InstanceInfo(state=ps)

    def instance_exists(self, instance):
        return self._inspect(instance.uuid) is not None

    def _uuids(self) -> list[str]:
        out = docker("ps", "-a", "--filter", f"label={LABEL}.instance", "--format", "{{.Names}}", check=False)
        # a snapshot's helper container inherits the server's labels (docker commit keeps them): not a server
        return [n for n in out.split() if not n.startswith("zenops-snapshot-")]

    def list_instances(self):
        return self._uuids()

    def list_instance_uuids(self):
        return self._uuids()

    def get_num_instances(self):
        return len(self._uuids())

    # --- power -----------------------------------------------------------------------------------------------------

    def _need(self, instance) -> None:
        if self._inspect(instance.uuid) is None:
            raise exception.InstanceNotFound(instance_id=instance.uuid)

    def power_off(self, instance, timeout=0, retry_interval=0):
        self._need(instance)
        docker("stop", "-t", str(int(timeout) if timeout else 10), instance.uuid)

    def power_on(self, context, instance, network_info, block_device_info=None, accel_info=None, share_info=None):
        self._need(instance)
        docker("start", instance.uuid)

    def reboot(
        self,
        context,
        instance,
        network_info,
        reboot_type,
        block_device_info=None,
        bad_volumes_callback=None,
        accel_info=None,
        share_info=None,
    ):
        self._need(instance)
        docker("restart", "-t", "10" if str(reboot_type).upper() == "SOFT" else "0", instance.uuid)

    def resume_state_on_host_boot(self, context, instance, network_info, share_info, block_device_info=None):
        self.power_on(context, instance, network_info)

    def pause(self, instance):
        docker("pause", instance.uuid)

    def unpause(self, instance):
        docker("unpause", instance.uuid)

    def suspend(self, context, instance):
        docker("pause", instance.uuid)

    def resume(self, context, instance, network_info, block_device_info=None, share_info=None):
        docker("unpause", instance.uuid)

    def get_console_output(self, context, instance):
        self._need(instance)
        res = subprocess.run(
            [CONF.zenops_sandbox.docker, "logs", "--tail", "500", instance.uuid],
            capture_output=True,
            timeout=CONF.zenops_sandbox.docker_timeout,
        )
        # Nova wants latin-1 (it encodes str that way and returns ASCII): hand it ASCII bytes.
        text = (res.stdout + res.stderr).decode(errors="replace").replace("\u2026", "...")
        return text.encode("ascii", "replace")

    def get_host_ip_addr(self):
        return CONF.my_ip


def _archive_path(image_id: str) -> str:
    return os.path.join(CONF.zenops_sandbox.snapshot_dir, f"{image_id}.tar")


def _run(argv: list[str], what: str, *, live: bool = False) -> None:
    res = subprocess.run(argv, capture_output=True, timeout=CONF.zenops_sandbox.snapshot_timeout)
    if not snap.tar_ok(res.returncode, live):
        raise DockerError(f"{what} failed: {res.stderr.decode(errors='replace').strip()[-2000:]}")
    if res.returncode:
        LOG.warning("%s: %s", what, res.stderr.decode(errors="replace").strip()[-2000:])


def _write_snapshot(uuid: str, info: dict, tag: str, archive: str) -> None:
    """``archive``: the snapshot of container ``uuid`` (snapshots module docstring), its root filesystem tagged
    ``tag`` in Docker too (a server booted from it on this machine needs no load)."""
    source = snap.volume_source(info)
    if source is None:
        raise DockerError(f"container {uuid} has no {snap.VOLUME} volume")
    timeout = CONF.zenops_sandbox.snapshot_timeout
    state = info.get("State", {})
    pause = bool(state.get("Running")) and not state.get("Paused")
    work = tempfile.mkdtemp(prefix="snap-", dir=CONF.zenops_sandbox.snapshot_dir)
    cleaner = f"zenops-snapshot-{uuid}"
    try:
        if pause:
            docker("pause", uuid)
        try:
            docker("commit", "--pause=false", uuid, tag, timeout=timeout)
            _run(snap.volume_argv(archive + ".volume", source), f"tar of {source}", live=not pause)
        finally:
            if pause:
                docker("unpause", uuid, check=False)
        # once, in the committed filesystem: host keys and machine id are per server
        docker("rm", "-f", cleaner, check=False)
        # the command replaced, not the entrypoint: the guest image has none, and `docker commit --change
        # "ENTRYPOINT []"` does not clear one on Docker 20.10 (the child then ran `/bin/sh /sbin/init`)
        docker("create", "--name", cleaner, "--network", "none", tag, "/bin/sh", "-c", snap.CLEANUP)
        try:
            docker("start", "--attach", cleaner, timeout=timeout)
            docker("commit", "--change", 'CMD ["/sbin/init"]', cleaner, tag, timeout=timeout)
        finally:
            docker("rm", "-f", cleaner, check=False)
        with open(os.path.join(work, snap.MANIFEST), "wb") as f:
            f.write(snap.manifest(tag, uuid))
        docker("save", "--output", os.path.join(work, snap.ROOTFS), tag, timeout=timeout)
        _run(snap.create_argv(archive, work), "tar of the root filesystem")
        _run(snap.concatenate_argv(archive, archive + ".volume"), "tar --concatenate")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.exists(archive + ".volume"):
            os.unlink(archive + ".volume")


def _drop_snapshot(image_id: str) -> None:
    """What a failed snapshot left on this machine: its archive and its Docker tag."""
    for path in (_archive_path(image_id), _archive_path(image_id) + ".volume"):
        if os.path.exists(path):
            os.unlink(path)
    docker("image", "rm", snap.tag_for(image_id), check=False)


def _load_rootfs(archive: str) -> None:
    work = tempfile.mkdtemp(prefix="load-", dir=CONF.zenops_sandbox.snapshot_dir)
    try:
        _run(snap.extract_rootfs_argv(archive, work), "tar --extract of the root filesystem")
        docker("load", "--input", os.path.join(work, snap.ROOTFS), timeout=CONF.zenops_sandbox.snapshot_timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fill_volume(uuid: str, archive: str) -> None:
    """The snapshot's /var/lib/docker into the new container's (empty) volume, before it starts."""
    info = json.loads(docker("inspect", "--type", "container", uuid) or "[]")
    source = snap.volume_source(info[0]) if info else None
    if source is None:
        raise DockerError(f"container {uuid} has no {snap.VOLUME} volume")
    started = time.monotonic()
    _run(snap.extract_volume_argv(archive, source), f"tar --extract into {source}")
    LOG.info("container %s: %s filled from the snapshot in %.1fs", uuid, snap.VOLUME, time.monotonic() - started)


def _passwd_from_container(uuid: str) -> bytes | None:
    """/etc/passwd of a created (not yet started) container, read through `docker cp` (a tar stream)."""
    try:
        raw = docker_bytes("cp", f"{uuid}:/etc/passwd", "-")
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    f = tar.extractfile(member)
                    return f.read() if f else None
                if member.issym() or member.islnk():
                    return None
    except (DockerError, tarfile.TarError, OSError):
        LOG.warning("could not read /etc/passwd of %s", uuid, exc_info=True)
    return None
