"""The sandbox's snapshot archive (sandbox/zenops_sandbox/snapshots.py): made and read back with GNU tar, as the Nova
driver does, on files in a temporary directory (no Docker, no sandbox)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sandbox"))

from zenops_sandbox import snapshots as snap  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar needed")


def run(argv: list[str]) -> None:
    res = subprocess.run(argv, check=False, capture_output=True, text=True)
    assert snap.tar_ok(res.returncode), res.stderr


def volume(root: Path) -> Path:
    """A /var/lib/docker-like tree: nested files, a relative symlink upwards, a hard link, an empty directory."""
    (root / "overlay2" / "abc" / "diff" / "etc").mkdir(parents=True)
    (root / "overlay2" / "abc" / "diff" / "etc" / "engine.conf").write_text("engine\n")
    (root / "overlay2" / "l").mkdir()
    (root / "overlay2" / "l" / "SHORT").symlink_to("../abc/diff")
    os.link(root / "overlay2" / "abc" / "diff" / "etc" / "engine.conf", root / "overlay2" / "abc" / "hard")
    (root / "volumes").mkdir()
    (root / "image" / "overlay2").mkdir(parents=True)
    (root / "image" / "overlay2" / "repositories.json").write_text('{"Repositories": {}}')
    os.chmod(root / "image" / "overlay2" / "repositories.json", 0o600)
    return root


def archive_of(tmp: Path, vol: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / snap.MANIFEST).write_bytes(snap.manifest(snap.tag_for("img-1"), "uuid-1"))
    (work / snap.ROOTFS).write_bytes(b"docker save stand-in")
    archive = tmp / "snap.tar"
    run(snap.volume_argv(str(archive) + ".volume", str(vol)))
    run(snap.create_argv(str(archive), str(work)))
    run(snap.concatenate_argv(str(archive), str(archive) + ".volume"))
    return archive


def test_the_archive_holds_the_manifest_the_root_filesystem_and_the_volume_under_its_directory(tmp_path: Path) -> None:
    archive = archive_of(tmp_path, volume(tmp_path / "vol"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        link = tar.getmember(f"{snap.VOLUME_DIR}/overlay2/l/SHORT")
        pair = [tar.getmember(f"{snap.VOLUME_DIR}/overlay2/abc/{n}") for n in ("hard", "diff/etc/engine.conf")]
    assert names[:2] == [snap.MANIFEST, snap.ROOTFS]
    assert f"{snap.VOLUME_DIR}/overlay2/abc/diff/etc/engine.conf" in names
    assert link.issym()
    assert link.linkname == "../abc/diff"
    links = [m for m in pair if m.islnk()]  # whichever tar met second is the link, to the other's renamed name
    assert len(links) == 1
    assert links[0].linkname in {m.name for m in pair}
    # all volume members under the one directory: nothing else of the host's paths
    assert all(n in (snap.MANIFEST, snap.ROOTFS) or n.split("/")[0] == snap.VOLUME_DIR for n in names)


def test_a_new_servers_volume_gets_the_same_tree_back(tmp_path: Path) -> None:
    vol = volume(tmp_path / "vol")
    archive = archive_of(tmp_path, vol)
    dest = tmp_path / "new-volume"
    dest.mkdir()
    run(snap.extract_volume_argv(str(archive), str(dest)))
    assert (dest / "overlay2" / "abc" / "diff" / "etc" / "engine.conf").read_text() == "engine\n"
    assert os.readlink(dest / "overlay2" / "l" / "SHORT") == "../abc/diff"
    assert (dest / "overlay2" / "l" / "SHORT" / "etc" / "engine.conf").exists()
    assert (
        os.stat(dest / "overlay2" / "abc" / "hard").st_ino
        == os.stat(dest / "overlay2" / "abc" / "diff" / "etc" / "engine.conf").st_ino
    )
    assert oct(os.stat(dest / "image" / "overlay2" / "repositories.json").st_mode & 0o777) == "0o600"
    assert (dest / "volumes").is_dir()
    assert not (dest / snap.ROOTFS).exists()
    assert not (dest / snap.VOLUME_DIR).exists()


def test_the_root_filesystem_and_manifest_come_out_alone(tmp_path: Path) -> None:
    archive = archive_of(tmp_path, volume(tmp_path / "vol"))
    dest = tmp_path / "load"
    dest.mkdir()
    run(snap.extract_rootfs_argv(str(archive), str(dest)))
    assert sorted(p.name for p in dest.iterdir()) == [snap.MANIFEST, snap.ROOTFS]
    manifest = json.loads((dest / snap.MANIFEST).read_text())
    tag = "zenops-sandbox/snapshot:img-1"
    assert manifest == {"format": "1", "tag": tag, "instance": "uuid-1", "volume": snap.VOLUME}


def test_volume_source_is_the_mount_at_var_lib_docker() -> None:
    inspect = {
        "Mounts": [
            {"Destination": "/sys/fs/cgroup", "Source": "/sys/fs/cgroup"},
            {"Destination": "/var/lib/docker", "Source": "/var/lib/docker/volumes/0f3/_data", "Type": "volume"},
        ]
    }
    assert snap.volume_source(inspect) == "/var/lib/docker/volumes/0f3/_data"
    assert snap.volume_source({"Mounts": [{"Destination": "/data", "Source": "/x"}]}) is None
    assert snap.volume_source({}) is None


def test_the_images_properties_name_the_tag_and_the_format_and_say_it_is_a_snapshot() -> None:
    meta = snap.metadata("zenops-sandbox/snapshot:i", None)
    assert meta["properties"]["zenops_container_image"] == "zenops-sandbox/snapshot:i"
    assert snap.is_snapshot(meta["properties"])
    assert meta["container_format"] == "bare"
    assert meta["disk_format"] == "raw"
    assert not snap.is_snapshot({"zenops_container_image": "zenops/debian12-guest:latest"})


def test_tar_status_1_is_accepted_of_a_live_volume_only() -> None:
    assert snap.tar_ok(0)
    assert snap.tar_ok(1, live=True)
    assert not snap.tar_ok(1)
    assert not snap.tar_ok(2, live=True)
