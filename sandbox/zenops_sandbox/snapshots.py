"""Server snapshots of the sandbox: what goes into the Glance image of `openstack server image create`, and back.

A server is a container (its root filesystem: the container's layer over its image) plus an anonymous Docker volume
at /var/lib/docker (where Docker inside the server keeps its images: `docker commit` leaves volumes out). A snapshot's
Glance data is one uncompressed tar (format 1):

  manifest.json          {"format": "1", "tag": ..., "instance": ..., "volume": "/var/lib/docker"}
  rootfs.tar             `docker save` of the committed container, tagged zenops-sandbox/snapshot:<image id>
  var-lib-docker/...     the volume's files: owners by number, xattrs (overlay2's trusted.overlay.*), whiteouts

The image carries the properties zenops_container_image = that tag and zenops_sandbox_snapshot = the format, so a
server booted from it runs the committed root filesystem and gets the volume's files. No Nova imports here: the
functions are the pure parts of virt.ContainerDriver.snapshot/spawn, unit-tested without a sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

FORMAT = "1"
REPO = "zenops-sandbox/snapshot"
SNAPSHOT_PROP = "zenops_sandbox_snapshot"  # image property: the Glance data is a snapshot archive of this format
VOLUME = "/var/lib/docker"
MANIFEST = "manifest.json"
ROOTFS = "rootfs.tar"
VOLUME_DIR = "var-lib-docker"
# GNU tar: numeric owners, every xattr namespace (overlay2 marks opaque directories with trusted.overlay.opaque),
# ACLs, holes kept
_TAR_KEEP = ["--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls", "--sparse"]

# Run once in the committed root filesystem (then committed again): what must differ per server. sshd's host keys
# (the guest makes missing ones at boot: ssh-keygen -A) and the machine id (systemd makes one when it is empty).
CLEANUP = "rm -f /etc/ssh/ssh_host_*; : > /etc/machine-id"


def tag_for(image_id: str) -> str:
    """The Docker tag of a snapshot's root filesystem on this machine (Glance image ids are unique)."""
    return f"{REPO}:{image_id}"


def volume_source(inspect: Mapping[str, Any]) -> str | None:
    """The host path holding a container's /var/lib/docker volume, from `docker inspect` of the container."""
    for mount in inspect.get("Mounts") or []:
        if mount.get("Destination") == VOLUME and mount.get("Source"):
            return str(mount["Source"])
    return None


def manifest(tag: str, instance: str) -> bytes:
    return json.dumps({"format": FORMAT, "tag": tag, "instance": instance, "volume": VOLUME}, indent=1).encode()


def create_argv(archive: str, workdir: str) -> list[str]:
    """tar: a new archive with the manifest and the root filesystem (both files in ``workdir``)."""
    return ["tar", "--create", "--file", archive, "-C", workdir, MANIFEST, ROOTFS]


def volume_argv(archive: str, source: str) -> list[str]:
    """tar: the volume's files (``source``, the host path) under var-lib-docker/, in an archive of their own that
    :func:`concatenate_argv` appends to the first. The rename applies to the members and their hard links, never to
    symbolic links' targets (S): '../x' stays '../x'."""
    rename = rf"s,^\.,{VOLUME_DIR},S"
    return ["tar", "--create", "--file", archive, *_TAR_KEEP, "--transform", rename, "-C", source, "."]


def concatenate_argv(archive: str, more: str) -> list[str]:
    return ["tar", "--concatenate", "--file", archive, more]


def extract_rootfs_argv(archive: str, dest: str) -> list[str]:
    return ["tar", "--extract", "--file", archive, "-C", dest, MANIFEST, ROOTFS]


def extract_volume_argv(archive: str, dest: str) -> list[str]:
    """tar: the volume's files into ``dest`` (a new server's empty volume), owners and permissions as they were."""
    return [
        "tar", "--extract", "--file", archive, *_TAR_KEEP, "--same-permissions", "--strip-components=1",
        "-C", dest, VOLUME_DIR,
    ]  # fmt: skip


def tar_ok(returncode: int, live: bool = False) -> bool:
    """GNU tar's status 1 is "some files changed while being read": accepted of a running server's volume only."""
    return returncode == 0 or (live and returncode == 1)


def metadata(tag: str, container_format: str | None) -> dict[str, Any]:
    """What the driver writes on the snapshot's Glance image with its data (Nova made the image, with the
    properties the server's image had: these replace zenops_container_image and add the format)."""
    return {
        "disk_format": "raw",
        "container_format": container_format or "bare",
        "properties": {"zenops_container_image": tag, SNAPSHOT_PROP: FORMAT, "image_location": "snapshot"},
    }


def is_snapshot(properties: Mapping[str, Any]) -> bool:
    """Whether an image's properties (or a server's system metadata, image_ prefixed keys stripped) name a snapshot
    this driver can boot; an unknown format is refused by the caller."""
    return bool(properties.get(SNAPSHOT_PROP))
