"""Where an image a host ran came from, read from the controller's image cache before and after (the llamacpp_server
role's image step, roles/llamacpp_server/tasks/image.yml, which goes through roles/vllm_image's load and save).

A host without the image of its inputs loads the cache's tarball of that inputs digest and then touches it (the cache
keeps the most recently used): the same file, a newer mtime. A host that builds saves its image into the cache through
a partial file renamed to its name: a new file. So, for the tarball of the image a fresh host served:

* in the cache before, the same inode, a newer mtime -> ``cache`` (loaded, not built);
* not in the cache before, there after -> ``built`` (built on the host, saved for the next run);
* anything else (replaced: its load failed and the host built again; untouched: the host did not load it; missing:
  nothing was saved) -> AssertionError saying which.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import REPO, load_file_module

_filter = load_file_module("_zenops_vllm_image_filter", REPO / "plugins" / "filter" / "vllm_image.py")

Snapshot = Mapping[str, tuple[int, int]]  # tarball file name -> (inode, mtime in ns)


def slug(repo: str, version: str) -> str:
    """The file name part the cache gives ``repo:version`` (its tarballs are <slug>-<inputs digest>.tar)."""
    return str(_filter.cache_slug(f"{repo}:{version}"))


def tarballs(cache: Path, repo: str, version: str) -> dict[str, tuple[int, int]]:
    """The cache's tarballs of ``repo:version``: name -> (inode, mtime_ns); empty when the cache does not exist."""
    out: dict[str, tuple[int, int]] = {}
    if cache.is_dir():
        for p in cache.glob(f"{slug(repo, version)}-*.tar"):
            st = p.stat()
            out[p.name] = (st.st_ino, st.st_mtime_ns)
    return out


def how_it_came(before: Snapshot, after: Snapshot, repo: str, tag: str) -> str:
    """``cache`` or ``built`` for the image ``repo:tag`` (tag ``<version>-<digest12>``, as the role names it) a fresh
    host served, from the cache's tarballs of its version before and after; AssertionError when neither holds."""
    m = re.fullmatch(r"(?P<version>.+)-(?P<digest12>[0-9a-f]{12})", tag)
    assert m, f"{repo}:{tag} is not named <version>-<inputs digest[:12]> as the role names its image"
    prefix = f"{slug(repo, m['version'])}-{m['digest12']}"
    names = [n for n in after if n.startswith(prefix)]
    assert len(names) == 1, f"{len(names)} tarball(s) of {repo}:{tag} in the cache after the run: {sorted(after)}"
    (name,) = names
    if name not in before:
        return "built"
    (inode0, mtime0), (inode1, mtime1) = before[name], after[name]
    assert inode1 == inode0, (
        f"{name} was replaced during the run: the host did not load it (a failed load drops it) and built again"
    )
    assert mtime1 > mtime0, f"{name} was not touched during the run: the host did not load it from the cache"
    return "cache"
