"""Where the engines e2e's llama.cpp image came from (tests/e2e/image_cache.py), read from the controller's image cache
before and after the run: loaded (the same tarball, touched), built (a new tarball), or neither (an AssertionError)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.image_cache import how_it_came, slug, tarballs

REPO_NAME, VERSION = "zenops/llamacpp", "11434.0.0"
DIGEST = "ab" * 32
TAG = f"{VERSION}-{DIGEST[:12]}"
NAME = f"zenops_llamacpp_{VERSION}-{DIGEST}.tar"  # the role's archive name (vllm_image_cache_name) for that digest


def test_the_slug_is_the_caches_name_for_the_repository_and_version() -> None:
    assert slug(REPO_NAME, VERSION) == "zenops_llamacpp_11434.0.0"


def test_tarballs_lists_only_that_versions_tarballs_with_inode_and_mtime(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(b"x")
    (tmp_path / f"zenops_llamacpp_1.0.0-{DIGEST}.tar").write_bytes(b"x")  # another version
    (tmp_path / f"zenops_vllm-zen_x-{DIGEST}.tar").write_bytes(b"x")  # the engine image's
    st = (tmp_path / NAME).stat()
    assert tarballs(tmp_path, REPO_NAME, VERSION) == {NAME: (st.st_ino, st.st_mtime_ns)}
    assert tarballs(tmp_path / "absent", REPO_NAME, VERSION) == {}


def test_a_tarball_there_before_and_touched_was_loaded(tmp_path: Path) -> None:
    path = tmp_path / NAME
    path.write_bytes(b"image")
    before = tarballs(tmp_path, REPO_NAME, VERSION)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the role's "mark as used" touch
    assert how_it_came(before, tarballs(tmp_path, REPO_NAME, VERSION), REPO_NAME, TAG) == "cache"


def test_a_tarball_new_after_the_run_was_built_and_saved() -> None:
    assert how_it_came({}, {NAME: (7, 100)}, REPO_NAME, TAG) == "built"


@pytest.mark.parametrize(
    ("before", "after", "says"),
    [
        ({NAME: (7, 100)}, {NAME: (7, 100)}, "not touched"),  # there, never loaded
        ({NAME: (7, 100)}, {NAME: (8, 200)}, "replaced"),  # dropped after a failed load, built and saved again
        ({}, {}, "0 tarball"),  # nothing saved
        ({}, {f"zenops_llamacpp_{VERSION}-{'cd' * 32}.tar": (7, 100)}, "0 tarball"),  # another digest's
    ],
)
def test_anything_else_is_an_error_saying_what_happened(before, after, says) -> None:
    with pytest.raises(AssertionError, match=says):
        how_it_came(before, after, REPO_NAME, TAG)


def test_a_tag_not_named_by_its_inputs_is_an_error() -> None:
    with pytest.raises(AssertionError, match="not named"):
        how_it_came({}, {NAME: (7, 100)}, REPO_NAME, "latest")
