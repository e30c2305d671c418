"""`zenops config init --cloud NAME`: the profile decided from a snapshot of the cloud (zenops.cloud.profile), merged
into the config file's text (zenops.config_edit), loaded back by zenops.config.load; and the command itself with a
snapshot standing in for the cloud."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

from zenops import config
from zenops.cloud import profile as cp
from zenops.cloud.errors import CloudNotFoundError
from zenops.cloud.preflight import Limits
from zenops.config_edit import with_entry
from zenops.errors import ConfigError, ExitCode, UsageError

CATALOGUE = {"gp.5.24.96": (24, 98304)}
UNLIMITED = Limits(-1, 0, -1, 0, -1, 0)

PROVIDER = cp.Network("provider", "n1", shared=True, ipv4_cidrs=("10.99.0.0/24",), routes_externally=True)
PUBLIC = cp.Network("public", "n2", external=True)
DEBIAN = cp.Image("debian-12", "i1", os_distro="debian", os_version="12", created_at="2025-01-01T00:00:00Z")
FLAVORS = (
    cp.Flavor("gp.5.2.8", "f1", 2, 8192),
    cp.Flavor("gp.5.24.96", "f4", 24, 98304),
    cp.Flavor("m1.tiny", "f5", 1, 512),
)


def snap(networks=(PROVIDER, PUBLIC), images=(DEBIAN,), flavors=FLAVORS, limits=UNLIMITED) -> cp.CloudSnapshot:
    return cp.CloudSnapshot("flex", tuple(networks), tuple(images), tuple(flavors), limits)


def choice(plan: cp.ProfilePlan, what: str) -> cp.Choice:
    return next(c for c in plan.choices if c.what == what)


# --- networks ---------------------------------------------------------------------------------------------------


def test_a_reachable_provider_network_wins_over_floating_ips():
    plan = cp.plan_profile(snap(), CATALOGUE)
    assert plan.profile["network_mode"] == "provider"
    assert plan.profile["provider_network"] == "provider"
    assert plan.profile["external_network"] == "public"  # kept for --network-mode floating
    mode = choice(plan, "network_mode")
    assert "routes_externally" in mode.reason
    assert mode.alternatives == ("floating, from external network public",)


def test_a_network_clouds_yaml_marks_routable_counts_even_with_its_subnets_hidden():
    hidden = cp.Network("direct", "n9", routes_externally=True)
    plan = cp.plan_profile(snap(networks=(hidden, PUBLIC)), CATALOGUE)
    assert (plan.profile["network_mode"], plan.profile["provider_network"]) == ("provider", "direct")


def test_provider_only_cloud():
    plan = cp.plan_profile(snap(networks=(PROVIDER,)), CATALOGUE)
    assert plan.profile["network_mode"] == "provider"
    assert "external_network" not in plan.profile
    assert choice(plan, "network_mode").alternatives == ()


def test_a_publicly_routed_subnet_counts_as_reachable():
    net = cp.Network("ext-direct", "n3", shared=True, ipv4_cidrs=("198.51.100.0/24", "8.8.0.0/24"))
    plan = cp.plan_profile(snap(networks=(net, PUBLIC)), CATALOGUE)
    assert plan.profile["network_mode"] == "provider"
    assert "8.8.0.0/24 is publicly routed" in choice(plan, "network_mode").reason


def test_floating_only_cloud_names_the_external_network_and_the_tenant_networks_to_reuse():
    own = cp.Network("my-net", "n4", own=True, ipv4_cidrs=("192.168.5.0/24",))
    other = cp.Network("ext-b", "n5", external=True)
    default = cp.Network("ext-a", "n6", external=True, is_default=True)
    plan = cp.plan_profile(snap(networks=(own, other, default)), CATALOGUE)
    assert plan.profile == {
        "network_mode": "floating",
        "external_network": "ext-a",
        "image": "debian-12",
        "image_user": "debian",
    }
    assert "Neutron's default" in choice(plan, "external_network").reason
    assert choice(plan, "external_network").alternatives == ("ext-b (external)",)
    tenant = choice(plan, "tenant_network")
    assert tenant.value is None
    assert tenant.alternatives == ("my-net (yours, 192.168.5.0/24)",)


def test_a_shared_network_nothing_says_is_reachable_is_only_an_alternative_to_floating():
    shared = cp.Network("shared-net", "n7", shared=True, ipv4_cidrs=("10.0.0.0/16",))
    nat = cp.Network("zz-ext", "n8", external=True, nat_source=True)
    plan = cp.plan_profile(snap(networks=(shared, PUBLIC, nat)), CATALOGUE)
    assert plan.profile["network_mode"] == "floating"
    assert plan.profile["external_network"] == "zz-ext"  # clouds.yaml's nat_source first
    assert plan.profile["provider_network"] == "shared-net"  # for --network-mode provider
    (alt,) = choice(plan, "network_mode").alternatives
    assert "provider on shared-net" in alt
    assert "routes_externally: true" in alt


def test_a_shared_network_alone_is_used_with_a_warning():
    shared = cp.Network("shared-net", "n7", shared=True, ipv4_cidrs=("10.0.0.0/16",))
    plan = cp.plan_profile(snap(networks=(shared,)), CATALOGUE)
    assert plan.profile["network_mode"] == "provider"
    assert any("shared-net" in w and "10.0.0.0/16" in w for w in plan.warnings)


def test_no_network_to_reach_servers_on_is_an_error_naming_the_fix():
    own = cp.Network("my-net", "n4", own=True, ipv4_cidrs=("192.168.5.0/24",))
    down = replace(PROVIDER, active=False)
    with pytest.raises(CloudNotFoundError) as e:
        cp.plan_profile(snap(networks=(own, down)), CATALOGUE)
    assert "no shared (provider) network and no external network" in e.value.message
    assert "my-net" in e.value.message
    assert "ask the cloud's admin" in (e.value.hint or "")
    assert e.value.exit_code == ExitCode.USAGE


# --- images -----------------------------------------------------------------------------------------------------


def test_the_newest_debian_12_image_is_chosen_and_the_others_listed():
    old = replace(DEBIAN, name="Debian 12 (old)", id="i2", created_at="2024-01-01T00:00:00Z")
    new = cp.Image("debian-12-2025-06", "i3", created_at="2025-06-01T00:00:00Z", admin_user="admin")  # by name
    d13 = cp.Image("debian-13", "i4", os_distro="debian", os_version="13", created_at="2025-09-01T00:00:00Z")
    ubuntu = cp.Image("ubuntu-24.04", "i5", os_distro="ubuntu", created_at="2025-10-01T00:00:00Z")
    stale = cp.Image("debian-12-new", "i6", os_distro="debian", os_version="12", created_at="2026-01-01", active=False)
    plan = cp.plan_profile(snap(images=(old, DEBIAN, new, d13, ubuntu, stale)), CATALOGUE)
    assert plan.profile["image"] == "debian-12-2025-06"
    assert plan.profile["image_user"] == "admin"  # its os_admin_user
    image = choice(plan, "image")
    assert "the newest Debian 12 image" in image.reason
    assert image.alternatives == (
        "debian-13 (debian 13, 2025-09-01)",
        "debian-12 (debian 12, 2025-01-01)",
        "Debian 12 (old) (debian 12, 2024-01-01)",
    )


def test_no_debian_12_image_is_an_error_naming_upload_and_os_image():
    d13 = cp.Image("debian-13", "i4", os_distro="debian", os_version="13")
    with pytest.raises(CloudNotFoundError) as e:
        cp.plan_profile(snap(images=(d13, cp.Image("ubuntu", "i5"))), CATALOGUE)
    assert "no active Debian 12 image" in e.value.message
    assert "debian-13" in e.value.message
    assert "upload one" in (e.value.hint or "")
    assert "--os-image" in (e.value.hint or "")


def test_os_image_picks_any_image_and_an_unknown_one_is_named():
    ubuntu = cp.Image("ubuntu-24.04", "i5", os_distro="ubuntu")
    plan = cp.plan_profile(snap(images=(ubuntu,)), CATALOGUE, os_image="ubuntu-24.04")
    assert plan.profile["image"] == "ubuntu-24.04"
    assert choice(plan, "image").reason.endswith("named by --os-image; logs in as debian (Debian's cloud images' user)")
    with pytest.raises(CloudNotFoundError, match="no active image 'ubuntu-22'"):
        cp.plan_profile(snap(images=(ubuntu,)), CATALOGUE, os_image="ubuntu-22")


# --- flavors and quota ------------------------------------------------------------------------------------------


def test_the_catalogued_flavor_is_recommended_then_gp5_family():
    plan = cp.plan_profile(snap(), CATALOGUE)
    assert [f.name for f in plan.flavors] == ["gp.5.24.96", "gp.5.2.8"]  # m1.tiny does not fit
    assert plan.flavor == "gp.5.24.96"
    assert "--flavor gp.5.24.96" in choice(plan, "flavor").reason


def test_a_flavor_as_big_as_a_catalogue_flavor_stands_in_for_it():
    big = (
        cp.Flavor("c3.huge", "f6", 32, 131072),
        cp.Flavor("c3.large", "f7", 24, 98304),
        cp.Flavor("s", "f8", 2, 4096),
    )
    plan = cp.plan_profile(snap(flavors=big), CATALOGUE)
    assert [f.name for f in plan.flavors] == ["c3.large", "c3.huge"]  # the smallest that fits first
    assert plan.flavors[0].why == "as big as the catalogue's gp.5.24.96"


def test_no_fitting_flavor_warns_and_still_gives_a_profile():
    plan = cp.plan_profile(snap(flavors=(cp.Flavor("m1.small", "f9", 2, 4096),)), CATALOGUE)
    assert plan.flavor is None
    (warning,) = plan.warnings
    assert "no flavor of cloud 'flex'" in warning
    assert "the biggest here: m1.small (2 vCPU, 4 GiB)" in warning
    assert plan.profile["network_mode"] == "provider"


def test_quota_room_counts_servers_of_the_recommended_flavor():
    limits = Limits(max_cores=100, cores_used=40, max_ram_mib=409600, ram_used_mib=0, max_instances=10,
                    instances_used=9, max_floating_ips=0, floating_ips_used=0)  # fmt: skip
    plan = cp.plan_profile(snap(limits=limits), CATALOGUE)
    assert [str(r) for r in plan.room][:3] == [
        "cores: 60 of 100 vCPUs free",
        "ram: 409600 of 409600 MiB free",
        "instances: 1 of 10 servers free",
    ]
    assert plan.fits_now == 1  # instances; provider mode needs no floating IP
    floating = cp.plan_profile(snap(networks=(PUBLIC,), limits=limits), CATALOGUE)
    assert floating.fits_now == 0  # no floating IP left
    assert any("no room for one server of gp.5.24.96" in w and "floating_ips" in w for w in floating.warnings)


# --- the file ---------------------------------------------------------------------------------------------------


def test_the_written_file_keeps_other_keys_and_comments_and_loads_back(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "# my settings\nkeep_runs: 7   # fewer\nclouds:\n  other:\n    image: mine  # hand-made\n\n"
        "# the docker section\ndocker:\n  source: upstream\n"
    )
    plan = cp.plan_profile(snap(), CATALOGUE)
    written = cp.prepare_write(path, plan, force=False)
    path.write_text(written.text)
    for kept in ("# my settings", "keep_runs: 7   # fewer", "image: mine  # hand-made", "# the docker section"):
        assert kept in written.text
    assert "# network_mode: servers on provider network provider" in written.text
    loaded = config.load(path)
    assert loaded.keep_runs == 7
    assert loaded.docker.source == "upstream"
    assert loaded.clouds["other"] == {"image": "mine"}
    profile = loaded.cloud_profile("flex")
    assert (profile.network_mode, profile.provider_network, profile.image) == ("provider", "provider", "debian-12")


def test_an_existing_profile_is_refused_without_force_and_replaced_with_it(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "clouds:\n  flex:\n    image: old\n    keypair: k\n    private_key_file: ~/.ssh/k\n  b:\n    image: x\n"
    )
    plan = cp.plan_profile(snap(), CATALOGUE)
    with pytest.raises(UsageError, match="already has a profile for cloud 'flex'") as e:
        cp.prepare_write(path, plan, force=False)
    assert "--force" in (e.value.hint or "")
    written = cp.prepare_write(path, plan, force=True)
    path.write_text(written.text)
    data = config.load(path).clouds
    assert data["flex"]["image"] == "debian-12"
    assert (data["flex"]["keypair"], data["flex"]["private_key_file"]) == ("k", "~/.ssh/k")  # init does not decide them
    assert data["b"] == {"image": "x"}
    assert written.text.count("flex:") == 1


def test_a_broken_file_is_not_merged_into(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("keep_runs: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        cp.prepare_write(path, cp.plan_profile(snap(), CATALOGUE), force=False)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "keep_runs: 3\n",
        "clouds:\n",
        "clouds: {}\nkeep_runs: 3\n",
        "clouds: {a: {image: x}}\nkeep_runs: 3\n",
        "{keep_runs: 3, clouds: {a: {image: x}}}\n",
        "clouds:\n    a:\n        image: x\n    # about flex\n    flex: {image: y}\n# tail\nkeep_runs: 3\n",
        "clouds:\n  a:\n    image: x\n    server_metadata:\n      k: v\n\n\n# the end\n",
    ],
)
def test_merging_sets_only_the_entry(text):
    before = yaml.safe_load(text) or {}
    new, _ = with_entry(text, "clouds", "flex", ["# why", "image: debian-12", "network_mode: floating"])
    after = yaml.safe_load(new)
    clouds = after.pop("clouds")
    assert clouds.pop("flex") == {"image": "debian-12", "network_mode": "floating"}
    assert clouds == {k: v for k, v in (before.pop("clouds", None) or {}).items() if k != "flex"}
    assert after == before
    if "# about flex" in text:
        assert "# about flex" in new
        assert "# tail" in new


# --- the command ------------------------------------------------------------------------------------------------


@pytest.fixture
def cloud(monkeypatch):
    """The cloud as a snapshot: no connection is made."""
    monkeypatch.setattr("zenops.cloud.ops.check_cloud_name", lambda cloud, recorded: None)
    monkeypatch.setattr("zenops.cloud.ops.connect", lambda cloud: SimpleNamespace(cloud=cloud))
    current = {"snapshot": snap()}
    monkeypatch.setattr(
        "zenops.cloud.profile.read_snapshot", lambda conn, name: replace(current["snapshot"], cloud=name)
    )
    return current


def test_init_writes_the_user_config_and_refuses_a_second_time(run, cloud, isolated_home):
    r = run(["config", "init", "--cloud", "flex"])
    assert r.exit_code == 0, r.output
    target = isolated_home / "config" / "zenops" / "config.yaml"
    assert f"wrote clouds.flex in {target}" in r.output
    assert "network_mode: provider" in r.output
    assert config.load(target).cloud_profile("flex").provider_network == "provider"
    assert target.stat().st_mode & 0o777 == 0o600
    r = run(["config", "init", "--cloud", "flex"])
    assert r.exit_code == ExitCode.USAGE
    assert "already has a profile" in r.output
    r = run(["config", "init", "--cloud", "flex", "--force"])
    assert r.exit_code == 0, r.output
    assert "replaced clouds.flex" in r.output


def test_init_dry_run_and_json_write_nothing(run, cloud, tmp_path):
    path = tmp_path / "z.yaml"
    r = run(["--config", str(path), "config", "init", "--cloud", "flex", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "dry run: nothing written" in r.output
    assert not path.exists()
    r = run(["--config", str(path), "config", "init", "--cloud", "flex", "--print"])  # one name: --dry-run
    assert r.exit_code == ExitCode.USAGE
    assert "No such option '--print'" in r.output
    assert not path.exists()
    r = run(["config", "init", "--cloud", "flex", "--dry-run", "--json", "--config", str(path)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output.splitlines()[-1])
    assert data["written"] is False
    assert data["path"] == str(path)
    assert data["profile"]["network_mode"] == "provider"
    assert data["flavor"] == "gp.5.24.96"
    assert {c["what"] for c in data["choices"]} >= {"network_mode", "image", "flavor"}
    assert [q["limit"] for q in data["quota"]] == ["cores", "ram", "instances", "floating_ips"]
    assert not path.exists()


def test_init_without_a_debian_image_exits_2_and_writes_nothing(run, cloud, tmp_path):
    cloud["snapshot"] = snap(images=())
    path = tmp_path / "z.yaml"
    r = run(["--config", str(path), "config", "init", "--cloud", "flex"])
    assert r.exit_code == ExitCode.USAGE
    assert "no active Debian 12 image" in r.output
    assert not path.exists()


def test_init_refuses_an_existing_profile_before_any_cloud_call(run, monkeypatch, tmp_path):
    def no_call(*_a):
        raise AssertionError("the cloud was called")

    monkeypatch.setattr("zenops.cloud.ops.check_cloud_name", no_call)
    path = tmp_path / "z.yaml"
    path.write_text("clouds:\n  flex: {image: x}\n")
    r = run(["--config", str(path), "config", "init", "--cloud", "flex"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert path.read_text() == "clouds:\n  flex: {image: x}\n"


def test_read_snapshot_fills_the_snapshot_from_the_sdk(monkeypatch):
    ns = SimpleNamespace
    common = {"project_id": "admin", "status": "ACTIVE", "is_default": None}
    flavor = {"vcpus": 2, "ram": 8192, "disk": 20, "ephemeral": 0}
    image = {"os_distro": "debian", "os_version": "12", "created_at": "2025", "status": "active", "properties": {}}
    conn = ns(
        current_project_id="p1",
        config=ns(get_external_ipv4_networks=lambda: ["provider"], get_nat_source=lambda: None),
        network=ns(
            subnets=lambda: [
                ns(ip_version=4, cidr="10.99.0.0/24", network_id="n1"),
                ns(ip_version=6, cidr="fd::/64", network_id="n1"),
            ],
            networks=lambda: [
                ns(name="provider", id="n1", is_shared=True, is_router_external=False, **common),
                ns(name="public", id="n2", is_shared=False, is_router_external=True, **common),
            ],
        ),
        image=ns(images=lambda: [ns(name="debian-12", id="i1", os_admin_user=None, **image)]),
        compute=ns(
            flavors=lambda: [
                ns(name="gp.5.2.8", id="f1", is_disabled=False, **flavor),
                ns(name="old", id="f2", is_disabled=True, **flavor),
            ]
        ),
    )
    monkeypatch.setattr("zenops.cloud.ops.limits", lambda conn, cloud: UNLIMITED)
    s = cp.read_snapshot(conn, "sandbox")
    assert s.networks == (
        cp.Network("provider", "n1", shared=True, ipv4_cidrs=("10.99.0.0/24",), routes_externally=True),
        cp.Network("public", "n2", external=True),
    )
    assert s.images == (cp.Image("debian-12", "i1", os_distro="debian", os_version="12", created_at="2025"),)
    assert s.flavors == (cp.Flavor("gp.5.2.8", "f1", 2, 8192, 20, 0),)
    assert cp.plan_profile(s, CATALOGUE).profile["network_mode"] == "provider"
