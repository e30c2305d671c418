"""Pure parts of the OpenStack support: ownership marks, preflight arithmetic, error classification, the ledger."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from openstack import exceptions as sdk

from zenops.cloud import ledger, ops
from zenops.cloud import marks as m
from zenops.cloud.errors import (
    CloudAuthError,
    classify,
    retrying,
)
from zenops.cloud.preflight import Limits, cost_per_hour, cost_so_far, shortfalls
from zenops.errors import UsageError


def test_marks_round_trip_through_tags_and_metadata():
    mk = m.Marks("demo", "sweep-1")
    assert mk.tags() == ["zenops", "zenops:deployment=demo", "zenops:campaign=sweep-1"]
    assert m.from_tags(mk.tags()) == mk
    meta = mk.server_metadata("ops@box")
    assert meta == {
        "zenops": "1",
        "zenops:deployment": "demo",
        "zenops:creator": "ops@box",
        "zenops:campaign": "sweep-1",
    }
    assert m.from_server(meta, None) == mk
    assert all(len(t) <= 60 for t in m.Marks("a" * 32, "b" * 32).tags())  # Nova's tag length limit


@pytest.mark.parametrize(
    "tags",
    [None, [], ["zenops:deployment=demo"], ["zenops"], ["other", "zenops:deployment=demo"]],
)
def test_resources_without_the_owner_mark_are_not_ours(tags):
    assert m.from_tags(tags) is None


def test_server_without_marks_is_not_ours():
    assert m.from_server({"zenops:deployment": "demo"}, []) is None
    assert m.from_server({}, None) is None


@pytest.mark.parametrize("name", ["demo", "gp-5-24-96", "a", "x1"])
def test_good_names(name):
    assert m.check_name(name) == name


@pytest.mark.parametrize("name", ["", "Demo", "-a", "a-", "a_b", "a" * 33, "a.b"])
def test_bad_names_are_refused_with_the_rule(name):
    with pytest.raises(UsageError) as info:
        m.check_name(name)
    assert "lowercase" in (info.value.hint or "")


def test_ownership_filter_on_listed_resources():
    ours = SimpleNamespace(id="1", name="zenops-demo", tags=m.Marks("demo").tags())
    other = SimpleNamespace(id="2", name="zenops-demo-lookalike", tags=["team-a"])
    server = SimpleNamespace(id="3", name="zenops-demo-1", metadata=m.Marks("demo").server_metadata("x"), tags=[])
    assert ops.marks_of("networks", ours) == m.Marks("demo")
    assert ops.marks_of("networks", other) is None
    assert ops.marks_of("servers", server) == m.Marks("demo")
    assert ops.describe("servers", server)["deployment"] == "demo"
    assert ops.marks_of("keypairs", SimpleNamespace(name="team-key")) is None


def test_an_untagged_resource_zenops_made_is_found_by_its_name_or_description():
    """A crash between create and tag: the network, router and security group carry the deployment in their name
    (role provision's zenops-<deployment>), a floating IP in the description it was created with."""
    for kind in ops.NAMED_KINDS:
        assert ops.marks_of(kind, SimpleNamespace(id="1", name="zenops-demo", tags=[])) == m.Marks("demo")
        assert ops.marks_of(kind, SimpleNamespace(id="1", name="zenops-demo", tags=None)) == m.Marks("demo")
        # tagged by someone else, or a name that is no deployment's: not ours
        assert ops.marks_of(kind, SimpleNamespace(id="1", name="zenops-demo", tags=["team-a"])) is None
        assert ops.marks_of(kind, SimpleNamespace(id="1", name="zenops-Demo_x", tags=[])) is None
        assert ops.marks_of(kind, SimpleNamespace(id="1", name="demo", tags=[])) is None
    tags = m.Marks("demo", "sweep").tags()
    fip = SimpleNamespace(id="f", floating_ip_address="172.30.0.9", description=m.description_of(tags), tags=[])
    assert ops.marks_of("floating_ips", fip) == m.Marks("demo", "sweep")
    assert ops.describe("floating_ips", fip)["deployment"] == "demo"
    assert ops.marks_of("floating_ips", SimpleNamespace(id="g", description="someone's", tags=[])) is None
    # ports are never named by zenops: untagged, not ours
    assert ops.marks_of("ports", SimpleNamespace(id="p", name="zenops-demo", tags=[])) is None


def test_the_module_writes_the_description_prefix_zenops_reads():
    from plugins.module_utils.zenops_openstack import MARKS_DESCRIPTION_PREFIX  # noqa: PLC0415

    assert MARKS_DESCRIPTION_PREFIX == m.DESCRIPTION_PREFIX


UNLIMITED = Limits(-1, 0, -1, 0, -1, 0)


def test_unlimited_project_has_room():
    assert shortfalls(UNLIMITED, vcpus=24, ram_mib=98304, count=100) == []


def test_shortfalls_say_which_limit_and_how_far_over():
    limits = Limits(
        max_cores=40,
        cores_used=10,
        max_ram_mib=200_000,
        ram_used_mib=0,
        max_instances=10,
        instances_used=9,
        max_floating_ips=1,
        floating_ips_used=1,
    )
    short = shortfalls(limits, vcpus=24, ram_mib=98304, count=3, floating_ips=3)
    by = {s.limit: s for s in short}
    assert set(by) == {"cores", "ram", "instances", "floating_ips"}
    assert str(by["cores"]) == "cores: 72 vCPUs needed, 30 available (42 vCPUs over)"
    assert by["ram"].needed == 3 * 98304
    assert by["instances"].available == 1
    assert by["floating_ips"].available == 0


def test_costs():
    assert cost_per_hour(0.79, 3) == 2.37
    assert cost_per_hour(None, 3) is None
    assert cost_so_far(0.79, 2, 1.5) == 2.37


def http(code: int, message: str = "boom") -> sdk.HttpException:
    return sdk.HttpException(message=message, http_status=code)


# classify's kinds, error classes and exit codes: one table of cases with the collection's error_kind,
# tests/fixtures/openstack_errors.py, run by tests/unit/test_error_classifiers.py


def test_retrying_retries_transient_errors_with_back_off_then_gives_up():
    calls, sleeps = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise http(503)
        return "ok"

    assert retrying(flaky, sleep=sleeps.append) == "ok"
    assert len(calls) == 3
    assert len(sleeps) == 2
    assert sleeps[1] > sleeps[0] * 0.3  # grows (with jitter)

    def always() -> str:
        raise http(502)

    with pytest.raises(sdk.HttpException):
        retrying(always, attempts=3, sleep=sleeps.append)


def test_retrying_does_not_retry_client_errors():
    calls = []

    def bad() -> None:
        calls.append(1)
        raise http(400, "bad request")

    with pytest.raises(sdk.HttpException):
        retrying(bad, sleep=lambda _: None)
    assert calls == [1]


def test_ledger_round_trip_and_private_files(tmp_path):
    dep = ledger.Deployment(
        name="demo",
        cloud="sandbox",
        flavor="gp.5.2.8",
        image="debian-12",
        count=2,
        network_mode="provider",
        price_per_hour=0.1,
    )
    path = ledger.save(tmp_path, dep)
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    loaded = ledger.load(tmp_path, "sandbox", "demo")
    assert loaded == dep
    assert [d.name for d in ledger.all_deployments(tmp_path)] == ["demo"]
    assert ledger.all_deployments(tmp_path, "other") == []
    ledger.remove(tmp_path, "sandbox", "demo")
    assert ledger.load(tmp_path, "sandbox", "demo") is None


def test_a_wrapped_401_is_still_an_auth_error():
    wrapped = sdk.SDKException("The request you have made requires authentication. (HTTP 401) (Request-ID: req-1)")
    err = classify(wrapped, "flex")
    assert isinstance(err, CloudAuthError)
    assert "'flex' entry in clouds.yaml" in (err.hint or "")


def test_cloud_inventories_pin_host_keys_per_deployment_by_server_id(tmp_path):
    """Every server of a cloud deployment is reached with its host key pinned in the deployment's known_hosts file
    (accept-new: recorded at the first connection, checked at every later one), under the server's ID."""
    from zenops.deployment.common import known_hosts_path, write_inventory  # noqa: PLC0415

    dep = ledger.Deployment(
        name="demo", cloud="flex", flavor="gp.5.2.8", image="debian-12", count=1, network_mode="provider",
        private_key_file="/k",
    )  # fmt: skip
    dep.servers = [{"name": "zenops-demo-1", "id": "uuid-1", "address": "10.0.0.5", "fixed_ip": "10.0.0.5"}]
    inv = yaml.safe_load(write_inventory(tmp_path, dep, "debian").read_text())
    args = inv["all"]["hosts"]["zenops-demo-1"]["ansible_ssh_common_args"].split()
    known = known_hosts_path(tmp_path, "flex", "demo")
    assert known.parent == ledger.path(tmp_path, "flex", "demo").parent
    assert "StrictHostKeyChecking=accept-new" in args
    assert f"UserKnownHostsFile={known}" in args
    assert "HostKeyAlias=uuid-1" in args
    assert "StrictHostKeyChecking=no" not in args
    assert "UserKnownHostsFile=/dev/null" not in args


class _GoneAfter:
    """A TEST DOUBLE of a server's GET: ``DELETED`` ``n`` times (Nova between marking an instance deleted and
    removing its record), then 404."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        if self.left <= 0:
            raise sdk.NotFoundException("gone")
        self.left -= 1
        return SimpleNamespace(status="DELETED")


def test_a_server_is_gone_only_at_404_not_at_status_deleted():
    fetch, slept = _GoneAfter(3), []
    ops.wait_until_404(fetch, "server x", 300, sleep=slept.append, clock=lambda: 0.0)
    assert fetch.calls == 4
    assert slept == [2.0, 2.0, 2.0]


def test_a_server_still_there_at_the_timeout_is_an_error_naming_it():
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(sdk.ResourceTimeout, match="server x is still there 10 s after its deletion"):
        ops.wait_until_404(_GoneAfter(100), "server x", 10, sleep=sleep, clock=lambda: now[0])
    assert now[0] == 10.0


def test_teardown_of_a_server_waits_for_its_404(monkeypatch):
    monkeypatch.setattr(ops.time, "sleep", lambda _s: None)
    fetch, deleted = _GoneAfter(2), []
    compute = SimpleNamespace(
        delete_server=lambda r, ignore_missing: deleted.append(r.id), get_server=lambda _id: fetch()
    )
    server = SimpleNamespace(id="s1", name="zenops-demo-1", metadata={"zenops": "1", "zenops:deployment": "demo"})
    ops._delete(SimpleNamespace(compute=compute, network=None), "servers", server, 300)
    assert deleted == ["s1"]
    assert fetch.calls == 3


class TwoProjects:
    """TEST DOUBLE of an openstacksdk connection with admin credentials: its listings hold two projects' resources,
    each an untagged ``zenops-demo`` network, router and security group and an untagged floating IP with zenops's
    description (a crash between create and tag, in either project)."""

    def __init__(self, project: str | None) -> None:
        self.current_project_id = project
        fip_desc = m.description_of(m.Marks("demo").tags())

        def of(kind: str) -> list[SimpleNamespace]:
            return [
                SimpleNamespace(id=f"{kind}-{p}", name="zenops-demo", tags=[], project_id=p, description=fip_desc)
                for p in ("ours", "theirs")
            ]

        self.network = SimpleNamespace(
            ips=lambda: of("fip"),
            routers=lambda: of("router"),
            ports=lambda tags=None: [],
            networks=lambda: of("network"),
            security_groups=lambda: of("sg"),
        )
        self.compute = SimpleNamespace(servers=lambda details=True: [], keypairs=lambda: [])
        self.image = SimpleNamespace(images=lambda: [])


def test_untagged_resources_are_claimed_in_the_connections_project_only():
    owned = ops.list_owned(TwoProjects("ours"), "c", deployment="demo")  # type: ignore[arg-type]
    kinds = ("floating_ips", "routers", "networks", "security_groups")
    claimed = [r.id for kind in kinds for r in getattr(owned, kind)]
    assert claimed == ["fip-ours", "router-ours", "network-ours", "sg-ours"]


def test_a_tagged_resource_of_another_project_is_still_found_by_its_tags():
    # tags are zenops's own marks (a project's member wrote them): `leaks` under admin sees every project's
    tagged = SimpleNamespace(id="n", name="x", tags=m.Marks("demo").tags(), project_id="theirs")
    assert ops.marks_of("networks", tagged, "ours") == m.Marks("demo")


def test_without_a_project_no_untagged_resource_is_claimed():
    owned = ops.list_owned(TwoProjects(None), "c", deployment="demo")  # type: ignore[arg-type]
    assert (owned.networks, owned.routers, owned.security_groups, owned.floating_ips) == ([], [], [], [])
