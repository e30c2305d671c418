"""`zenops image bake`: a serving server of a cloud deployment snapshotted into the Glance image its new replicas boot
from.

The server is snapshotted as it serves (vLLM not stopped): stopping it would need a drain and a restart (minutes of
vLLM start, the very time baking saves), and the image then starts vLLM on a new server at its boot, with the
deployment's settings, while `serve` checks the rest (Docker present, the engine image carrying the current inputs
digest, the model files equal: each step leaves what is there). The cloud decides how live the snapshot is (libvirt:
a live disk snapshot; the sandbox pauses the server for the copy).

The image carries the deployment's marks (tags, and its properties from the snapshot call on: the tags come a call
later), so `down` deletes it and `leaks` finds it; ``keep``: marked ``zenops:keep`` too, and both leave it. The
digest of what is baked in (``zenops:bake``: the flavor, the base image, the engine image and the model on the
server) makes a re-run reuse the image it made; a bake of other inputs replaces the deployment's previous one.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openstack import exceptions as sdk

from zenops.cloud import ledger, ops
from zenops.cloud import marks as m
from zenops.cloud.errors import CloudError, CloudNotFoundError, classify, retrying
from zenops.config import Config
from zenops.errors import NoServerError, UsageError

Note = Callable[[str], None]
Clock = Callable[[], float]
Sleep = Callable[[float], None]

ACTIVE, FAILED = "active", ("killed", "deleted", "pending_delete", "deactivated")


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Baked:
    """A deployment's baked image: what `zenops image bake` reports (``--json``: ``to_dict``)."""

    deployment: str
    cloud: str
    image_id: str
    image_name: str
    server: str
    key: str  # the digest of the inputs (zenops:bake)
    reused: bool  # an image of the same inputs was there: no snapshot taken
    kept: bool
    size: int | None  # bytes, as Glance says
    seconds: float
    replaced: list[str]  # the deployment's previous baked images (other inputs), deleted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bake_key(dep: ledger.Deployment, server: str, record: Mapping[str, Any]) -> str:
    """The digest of what a baked image holds: the flavor and base image it was made on, and the engine image and
    model the serving record says the server has (``record``: ServingRecord.to_dict)."""
    images = record.get("images") or {}
    facts = {
        "flavor": dep.flavor,
        "image": dep.image,
        "engine": images.get(server),
        "model": record.get("model_spec") or record.get("model"),
        "compat": (record.get("compat") or {}).get("id"),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def image_name(deployment: str, key: str) -> str:
    return m.Marks(deployment).resource_name(f"baked-{key[:8]}")


def image_properties(marks: m.Marks, key: str, *, keep: bool) -> dict[str, str]:
    """The image's properties at its creation (Nova's createImage metadata): the marks, the digest, keep."""
    props = {**m.Marks(marks.deployment, marks.campaign).server_metadata(), m.BAKE_KEY: key}
    if keep:
        props[m.KEEP_KEY] = "1"
    return props


def baked_images(conn: Any, cloud: str, deployment: str) -> list[Any]:
    """The deployment's baked images, kept ones too (those carrying zenops:bake and its marks)."""
    project = str(conn.current_project_id or "")
    try:
        images = retrying(lambda: list(conn.image.images()))
    except Exception as e:
        raise classify(e, cloud) from e
    out = []
    for im in images:
        mk = ops.marks_of("images", im, project)
        if mk is not None and mk.deployment == deployment and _props(im).get(m.BAKE_KEY):
            out.append(im)
    return out


def _props(image: Any) -> dict[str, Any]:
    return dict(getattr(image, "properties", None) or {})


def usable_replica_image(conn: Any, cloud: str, image_id: str | None, note: Note = _quiet) -> str | None:
    """``image_id`` when the cloud has it active (new servers boot from it); None otherwise, said through ``note``
    (deleted behind zenops's back, or failed: new servers boot from the base image, the cold way)."""
    if not image_id:
        return None
    try:
        im = retrying(lambda: conn.image.get_image(image_id))
    except sdk.NotFoundException:
        im = None
    except Exception as e:
        raise classify(e, cloud) from e
    if im is not None and str(im.status) == ACTIVE:
        return image_id
    note(
        f"baked image {image_id} is {'gone' if im is None else str(im.status)}: new servers boot from the base "
        "image (the cold way); `zenops image bake` makes another"
    )
    return None


def bake(
    config: Config,
    *,
    cloud: str,
    name: str,
    server: str | None = None,
    keep: bool = False,
    timeout: float = 3600,
    note: Note = _quiet,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> Baked:
    """Snapshot a serving server of deployment ``name`` (``server``, default: its first) into a Glance image marked
    as the deployment's, record it as the deployment's ``replica_image`` and return it. Idempotent: an image of the
    same inputs is reused (one being made is waited for); one that failed is deleted and made again."""
    from zenops.deployment.record import load_serving_record  # noqa: PLC0415
    from zenops.deployment.target import unknown_deployment  # noqa: PLC0415

    started = clock()
    dep = ledger.load(config.state_dir, cloud, name)
    if dep is None:
        raise unknown_deployment(name, cloud)
    names = sorted(str(s["name"]) for s in dep.servers)
    if not names:
        raise NoServerError(
            f"deployment '{name}' has no serving server to bake",
            hint=f"`zenops up --cloud {cloud} --deployment {name} --model ...` makes one",
        )
    pick = server or names[0]
    if pick not in names:
        raise UsageError(f"deployment '{name}' has no serving server '{pick}'", hint=f"its servers: {', '.join(names)}")
    record = load_serving_record(config, Path(dep.inventory)) if dep.inventory else None
    if record is None or not record.images.get(pick):
        raise UsageError(
            f"server '{pick}' of deployment '{name}' serves nothing zenops recorded: a baked image would hold no "
            "engine image",
            hint=f"serve on it first: `zenops up --cloud {cloud} --deployment {name} --model ...`",
        )
    key = bake_key(dep, pick, record.to_dict())
    conn = ops.connect(cloud)
    mine = baked_images(conn, cloud, name)
    same = [im for im in mine if _props(im).get(m.BAKE_KEY) == key and str(im.status) not in FAILED]
    for im in mine:
        if _props(im).get(m.BAKE_KEY) == key and str(im.status) in FAILED:
            note(f"deleting baked image {im.name} ({im.status}): it is made again")
            ops.teardown(conn, cloud, ops.Owned(images=[im]), progress=note)
    if same:
        image, reused = same[0], True
        if str(image.status) != ACTIVE:
            note(f"baked image {image.name} is being made ({image.status}): waiting for it")
    else:
        image, reused = _snapshot(conn, cloud, dep, pick, key, keep=keep, note=note), False
    image = _wait_active(conn, cloud, image, timeout=timeout, note=note, clock=clock, sleep=sleep)
    replaced = [im for im in mine if _props(im).get(m.BAKE_KEY) != key and not ops.kept(im)]
    if replaced:
        ops.teardown(conn, cloud, ops.Owned(images=replaced), progress=note)
    dep.replica_image = str(image.id)
    ledger.save(config.state_dir, dep)
    note(f"deployment '{name}': new serving servers boot from {image.name} ({image.id})")
    return Baked(
        deployment=name,
        cloud=cloud,
        image_id=str(image.id),
        image_name=str(image.name),
        server=pick,
        key=key,
        reused=reused,
        kept=ops.kept(image),
        size=int(image.size) if getattr(image, "size", None) else None,
        seconds=round(clock() - started, 1),
        replaced=[str(im.name) for im in replaced],
    )


def _snapshot(conn: Any, cloud: str, dep: ledger.Deployment, server: str, key: str, *, keep: bool, note: Note) -> Any:
    """Nova's snapshot of ``server`` (its image, marked from its creation), tagged; the image as created (queued)."""
    found = [s for s in ops.owned_servers(conn, cloud, deployment=dep.name) if str(s.name) == server]
    if not found:
        raise CloudNotFoundError(
            f"cloud '{cloud}' has no server '{server}' of deployment '{dep.name}'",
            hint=f"`zenops status --cloud {cloud}` shows what it has; `zenops up` makes missing servers again",
        )
    srv = found[0]
    if str(srv.status) not in ("ACTIVE", "SHUTOFF"):
        raise CloudError(
            f"server '{server}' is {srv.status}: a snapshot needs it ACTIVE (or SHUTOFF)",
            hint="wait until it is ACTIVE, or name another with --server",
        )
    marks = m.Marks(dep.name, dep.campaign)
    name = image_name(dep.name, key)
    note(f"snapshotting {server} into image {name} (the cloud copies its disk: minutes for GBs)")
    try:
        image = conn.compute.create_server_image(
            srv, name=name, metadata=image_properties(marks, key, keep=keep), wait=False
        )
    except sdk.HttpException as e:
        if e.status_code in (400, 403, 409, 501):
            raise CloudError(
                f"cloud '{cloud}' refuses a snapshot of server '{server}': {e.details or e}",
                hint="its policy or its hypervisor allows no server snapshots (`openstack server image create` "
                "says the same): new replicas boot the cold way",
            ) from e
        raise classify(e, cloud) from e
    except Exception as e:
        raise classify(e, cloud) from e
    image_id = str(getattr(image, "id", None) or image)
    try:
        for tag in marks.tags():
            retrying(lambda tag=tag: conn.image.add_tag(image_id, tag))  # type: ignore[misc]
        return retrying(lambda: conn.image.get_image(image_id))
    except Exception as e:
        raise classify(e, cloud) from e


def _wait_active(conn: Any, cloud: str, image: Any, *, timeout: float, note: Note, clock: Clock, sleep: Sleep) -> Any:
    """Poll the image until Glance says active; CloudError when it fails or ``timeout`` passes (the image is left
    for a re-run: it is marked, `down` removes it)."""
    deadline, last = clock() + timeout, ""
    while True:
        status = str(image.status)
        if status == ACTIVE:
            return image
        if status in FAILED:
            raise CloudError(
                f"the snapshot {image.name} failed on cloud '{cloud}' (image {status})",
                hint="re-run `zenops image bake` (the failed image is deleted first); the cloud's compute log says why",
            )
        if status != last:
            note(f"image {image.name}: {status}")
            last = status
        if clock() >= deadline:
            raise CloudError(
                f"the snapshot {image.name} is still {status} after {timeout:.0f} s",
                hint="re-run `zenops image bake` later: it waits for this image instead of making another",
            )
        sleep(5.0)
        try:
            image = retrying(lambda image_id=image.id: conn.image.get_image(image_id))  # type: ignore[misc]
        except Exception as e:
            raise classify(e, cloud) from e
