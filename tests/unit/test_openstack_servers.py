"""plugins/modules/openstack_servers.py against a TEST DOUBLE of the openstacksdk connection (the integration tests
run it against the sandbox cloud): adoption, check mode, creation, the wait for ACTIVE, the replacement of servers
that go to ERROR (bounded), the timeout, floating IPs; the results and the order of the cloud calls."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from keystoneauth1 import exceptions as ksa

from tests.fixtures.openstack_errors import answered, load_zenops_openstack

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / "plugins" / "modules" / "openstack_servers.py"
UTILS_NAME = "ansible_collections.zenops.inference.plugins.module_utils.zenops_openstack"

MARKS = {"zenops": "1", "zenops:deployment": "demo"}


class Exited(SystemExit):  # exit_json / fail_json end the module (sys.exit), past its except Exception
    def __init__(self, failed: bool, result: dict[str, Any]) -> None:
        super().__init__(result)
        self.failed = failed
        self.result = result


class Clock:
    """The module's ``time``: sleeping advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeCloud:
    """compute, image and network as the module uses them. ``script[name]``: per attempt (creation) of that server,
    the statuses get_server answers in turn (the last one repeats); ``calls`` the calls that change something, and
    the polls, in order."""

    def __init__(self, script: dict[str, list[list[str]]] | None = None, existing: list[Any] | None = None) -> None:
        self.script = script or {}
        self.servers_by_id: dict[str, Any] = {}
        self.attempt: dict[str, int] = {}
        self.polls: dict[str, int] = {}
        self.calls: list[str] = []
        self.ports: dict[str, Any] = {}
        self.ips: dict[str, Any] = {}
        for s in existing or []:
            self.servers_by_id[s.id] = s
            self.ports[s.id] = SimpleNamespace(id=f"port-{s.id}")
        self.compute = SimpleNamespace(
            servers=self.list_servers,
            find_flavor=lambda name, ignore_missing: SimpleNamespace(id=f"flavor-{name}"),
            create_server=self.create_server,
            get_server=self.get_server,
            delete_server=self.delete_server,
            wait_for_delete=lambda server, wait: self.calls.append(f"wait_for_delete {server.id} {wait}"),
        )
        self.image = SimpleNamespace(find_image=lambda name, ignore_missing: SimpleNamespace(id=f"image-{name}"))
        self.network = SimpleNamespace(
            find_network=lambda name, ignore_missing: SimpleNamespace(id=f"net-{name}"),
            ports=lambda device_id: [self.ports[device_id]] if device_id in self.ports else [],
            ips=lambda port_id=None, floating_network_id=None: [
                ip for ip in self.ips.values() if port_id is None or ip.port_id == port_id
            ],
            create_ip=self.create_ip,
            set_tags=lambda ip, tags: self.calls.append(f"set_tags {ip.id} {tags}"),
            update_ip=self.update_ip,
        )

    def list_servers(self, details: bool) -> list[Any]:
        assert details
        return list(self.servers_by_id.values())

    def create_server(self, **kwargs: Any) -> Any:
        name = kwargs["name"]
        n = self.attempt[name] = self.attempt.get(name, 0) + 1
        sid = f"{name}#{n}"
        self.calls.append(f"create {sid} {sorted(kwargs.items())}")
        server = SimpleNamespace(id=sid, name=name, attempt=n, status="BUILD", metadata=kwargs["metadata"], fault=None,
                                 addresses={"net": [{"addr": f"10.0.0.{len(self.servers_by_id) + 1}", "version": 4,
                                                     "OS-EXT-IPS:type": "fixed"}]})  # fmt: skip
        self.servers_by_id[sid] = server
        self.ports[sid] = SimpleNamespace(id=f"port-{sid}")
        return server

    def get_server(self, sid: str) -> Any:
        server = self.servers_by_id[sid]
        attempt = getattr(server, "attempt", None)  # None: one the cloud had before
        if attempt is not None and server.name in self.script:
            statuses = self.script[server.name][attempt - 1]
            i = self.polls[sid] = self.polls.get(sid, -1) + 1
            server.status = statuses[min(i, len(statuses) - 1)]
            if server.status == "ERROR":
                server.fault = {"message": "No valid host was found.", "code": 500}
        elif server.status == "BUILD":
            server.status = "ACTIVE"
        self.calls.append(f"get {sid} {server.status}")
        return server

    def delete_server(self, server: Any, ignore_missing: bool) -> None:
        assert ignore_missing
        self.calls.append(f"delete {server.id}")
        del self.servers_by_id[server.id]

    def create_ip(self, floating_network_id: str, description: str = "") -> Any:
        ip = SimpleNamespace(id=f"ip{len(self.ips) + 1}", floating_ip_address=f"192.0.2.{len(self.ips) + 1}",
                             port_id=None, description=description)  # fmt: skip
        self.ips[ip.id] = ip
        self.calls.append(f"create_ip {ip.id} on {floating_network_id} ({description})")
        return ip

    def update_ip(self, ip: Any, port_id: str) -> None:
        ip.port_id = port_id
        self.calls.append(f"update_ip {ip.id} {port_id}")


def load_module(monkeypatch: pytest.MonkeyPatch, cloud: FakeCloud, clock: Clock) -> ModuleType:
    utils = load_zenops_openstack()
    monkeypatch.setattr(utils, "openstack", SimpleNamespace(connect=lambda **_kw: cloud))
    monkeypatch.setitem(sys.modules, UTILS_NAME, utils)
    monkeypatch.setattr(utils, "time", clock)  # the retries' back-off sleeps on the same clock
    spec = importlib.util.spec_from_file_location("zenops_test_openstack_servers", MODULE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "time", clock)
    return module


def run_module(monkeypatch: pytest.MonkeyPatch, cloud: FakeCloud, **args: Any) -> tuple[Exited, Clock]:
    clock = Clock()
    module = load_module(monkeypatch, cloud, clock)

    def exit_json(self: Any, **result: Any) -> None:
        raise Exited(False, result)

    def fail_json(self: Any, msg: str, **result: Any) -> None:
        raise Exited(True, {"msg": msg, **result})

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    params = {
        "cloud": "sandbox",
        "deployment": "demo",
        "name_prefix": "zenops-demo",
        "count": 2,
        "flavor": "gp.5.2.8",
        "image": "debian-12",
        "network": "provider",
        "key_name": "zenops-demo",
        "metadata": MARKS,
        **args,
    }
    with patch_module_args(params), pytest.raises(Exited) as info:
        module.main()
    return info.value, clock


def existing(name: str, sid: str, status: str = "ACTIVE", metadata: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(id=sid, name=name, status=status, metadata=MARKS if metadata is None else metadata,
                           fault=None, addresses={"net": [{"addr": "10.0.0.9", "version": 4}]})  # fmt: skip


CREATE_ARGS = (
    "[('flavor_id', 'flavor-gp.5.2.8'), ('image_id', 'image-debian-12'), ('key_name', 'zenops-demo'), "
    "('metadata', {'zenops': '1', 'zenops:deployment': 'demo'}), ('name', '{name}'), "
    "('networks', [{'uuid': 'net-provider'}])"
)


def create(sid: str, extra: str = "") -> str:
    name = sid.split("#", maxsplit=1)[0]
    return f"create {sid} " + CREATE_ARGS.replace("{name}", name) + extra + "]"


def test_check_mode_says_what_it_would_create_and_changes_nothing(monkeypatch):
    cloud = FakeCloud(existing=[existing("zenops-demo-1", "s1"), existing("other-1", "o1", metadata={})])
    out, _ = run_module(monkeypatch, cloud, _ansible_check_mode=True)
    assert not out.failed
    assert out.result == {
        "changed": True,
        "created": ["zenops-demo-2"],
        "servers": [
            {"name": "zenops-demo-1", "id": "s1", "status": "ACTIVE"},
            {"name": "zenops-demo-2", "id": None, "status": "would be created"},
        ],
    }
    assert cloud.calls == []


def test_adopts_its_servers_creates_the_missing_ones_and_waits_for_active(monkeypatch):
    cloud = FakeCloud(
        script={"zenops-demo-2": [["BUILD", "BUILD", "ACTIVE"]]},
        existing=[existing("zenops-demo-1", "s1"), existing("zenops-demo-2", "x", metadata={"zenops": "1"})],
    )
    out, clock = run_module(monkeypatch, cloud, security_groups=["ssh"])
    assert not out.failed
    assert out.result["changed"] is True
    assert out.result["created"] == ["zenops-demo-2"]
    assert out.result["servers"] == [
        {"name": "zenops-demo-1", "id": "s1", "status": "ACTIVE", "fixed_ip": "10.0.0.9", "floating_ip": None,
         "address": "10.0.0.9", "replaced": 0, "faults": []},
        {"name": "zenops-demo-2", "id": "zenops-demo-2#1", "status": "ACTIVE", "fixed_ip": "10.0.0.3",
         "floating_ip": None, "address": "10.0.0.3", "replaced": 0, "faults": []},
    ]  # fmt: skip
    assert cloud.calls == [
        create("zenops-demo-2#1", ", ('security_groups', [{'name': 'ssh'}])"),
        "get s1 ACTIVE",
        "get zenops-demo-2#1 BUILD",
        "get zenops-demo-2#1 BUILD",
        "get zenops-demo-2#1 ACTIVE",
    ]
    assert clock.now == 1000.0 + 3 * 2  # three polls, 2 s apart


def test_nothing_to_do_is_no_change(monkeypatch):
    cloud = FakeCloud(existing=[existing("zenops-demo-1", "s1"), existing("zenops-demo-2", "s2")])
    out, _ = run_module(monkeypatch, cloud)
    assert (out.failed, out.result["changed"], out.result["created"]) == (False, False, [])
    assert cloud.calls == ["get s1 ACTIVE", "get s2 ACTIVE"]


def test_a_server_in_error_is_deleted_and_created_again(monkeypatch):
    cloud = FakeCloud(script={"zenops-demo-1": [["BUILD", "ERROR"], ["ACTIVE"]], "zenops-demo-2": [["ACTIVE"]]})
    out, _ = run_module(monkeypatch, cloud, timeout=100)
    assert not out.failed
    assert out.result["created"] == ["zenops-demo-1", "zenops-demo-2"]
    first = out.result["servers"][0]
    assert (first["id"], first["replaced"]) == ("zenops-demo-1#2", 1)
    assert first["faults"] == ["No valid host was found. (code 500)"]
    assert cloud.calls == [
        create("zenops-demo-1#1"),
        create("zenops-demo-2#1"),
        "get zenops-demo-1#1 BUILD",
        "get zenops-demo-2#1 ACTIVE",
        "get zenops-demo-1#1 ERROR",
        "get zenops-demo-1#1 ERROR",  # the fault
        "delete zenops-demo-1#1",
        "wait_for_delete zenops-demo-1#1 100",
        create("zenops-demo-1#2"),
        "get zenops-demo-1#2 ACTIVE",
    ]


def test_a_server_that_keeps_failing_fails_the_module_after_its_retries(monkeypatch):
    cloud = FakeCloud(script={"zenops-demo-1": [["ERROR"], ["ERROR"]]})
    out, _ = run_module(monkeypatch, cloud, count=1, retries=1)
    assert out.failed
    assert out.result["zenops_error"] == "server_error"
    assert out.result["msg"] == (
        "server zenops-demo-1 went to ERROR 2 time(s); last fault: No valid host was found. (code 500). It was "
        "deleted; nothing of it is left"
    )
    assert out.result["created"] == ["zenops-demo-1"]
    assert out.result["faults"] == {"zenops-demo-1": ["No valid host was found. (code 500)"] * 2}
    assert [c for c in cloud.calls if c.startswith(("create", "delete"))] == [
        create("zenops-demo-1#1"),
        "delete zenops-demo-1#1",
        create("zenops-demo-1#2"),
        "delete zenops-demo-1#2",
    ]


def test_a_slow_build_fails_only_at_the_timeout_and_keeps_the_servers(monkeypatch):
    cloud = FakeCloud(script={"zenops-demo-1": [["BUILD"]], "zenops-demo-2": [["ACTIVE"]]})
    out, clock = run_module(monkeypatch, cloud, timeout=7)
    assert out.failed
    assert out.result["zenops_error"] == "timeout"
    assert out.result["created"] == ["zenops-demo-1", "zenops-demo-2"]
    assert out.result["msg"].startswith("not ACTIVE after 7s: zenops-demo-1 (BUILD); the servers are kept")
    assert clock.now == 1008.0  # polled at 2, 4, 6 and 8 s; failed once past the deadline
    assert not any(c.startswith("delete") for c in cloud.calls)


def test_floating_ips_are_made_tagged_and_attached_or_kept(monkeypatch):
    cloud = FakeCloud(existing=[existing("zenops-demo-1", "s1")])
    cloud.ips["old"] = SimpleNamespace(id="old", floating_ip_address="192.0.2.99", port_id="port-s1")
    out, _ = run_module(monkeypatch, cloud, floating_network="public", tags=["zenops", "zenops:deployment=demo"])
    assert out.result["changed"] is True
    assert [(s["floating_ip"], s["address"]) for s in out.result["servers"]] == [
        ("192.0.2.99", "192.0.2.99"),
        ("192.0.2.2", "192.0.2.2"),
    ]
    assert cloud.calls[-3:] == [
        # its marks in its description from the start: a crash before the tags leaves it findable
        "create_ip ip2 on net-public (zenops marks: zenops zenops:deployment=demo)",
        "set_tags ip2 ['zenops', 'zenops:deployment=demo']",
        "update_ip ip2 port-zenops-demo-2#1",
    ]
    # run again: every server has its IP, nothing changes
    cloud.calls.clear()
    out, _ = run_module(monkeypatch, cloud, floating_network="public", tags=["zenops"])
    assert (out.result["changed"], out.result["created"]) == (False, [])
    assert cloud.calls == ["get s1 ACTIVE", "get zenops-demo-2#1 ACTIVE"]


def test_servers_are_adopted_whatever_their_index_and_new_ones_take_the_lowest_free(monkeypatch):
    # after a rollout's surge a one-server deployment has -2 only: a re-run keeps it, it does not make -1 again
    cloud = FakeCloud(existing=[existing("zenops-demo-2", "s2"), existing("zenops-demo-gw-1", "g1")])
    out, _ = run_module(monkeypatch, cloud, count=1)
    assert (out.failed, out.result["changed"], out.result["created"]) == (False, False, [])
    assert [s["name"] for s in out.result["servers"]] == ["zenops-demo-2"]
    # one more: the lowest free index
    out, _ = run_module(monkeypatch, cloud, count=2)
    assert out.result["created"] == ["zenops-demo-1"]
    assert [s["name"] for s in out.result["servers"]] == ["zenops-demo-1", "zenops-demo-2"]


def test_wanted_names_keep_the_lowest_indexes_and_fill_the_gaps(monkeypatch):
    module = load_module(monkeypatch, FakeCloud(), Clock())
    names = ["p-3", "p-7", "p-gw-1", "p-x", "q-1"]
    assert module.wanted_names("p", 1, names) == ["p-3"]
    assert module.wanted_names("p", 2, names) == ["p-3", "p-7"]
    assert module.wanted_names("p", 4, names) == ["p-1", "p-2", "p-3", "p-7"]
    assert module.wanted_names("p", 3, []) == ["p-1", "p-2", "p-3"]


def test_a_deleted_server_whose_record_is_still_listed_is_not_adopted(monkeypatch):
    """Nova lists a deleted instance (status DELETED) until its record goes: a campaign's next cell re-uses the
    name; the module makes a new server instead of waiting for that one to become ACTIVE."""
    cloud = FakeCloud(existing=[existing("zenops-demo-1", "old", status="DELETED"), existing("zenops-demo-2", "s2")])
    out, _ = run_module(monkeypatch, cloud)
    assert not out.failed, out.result
    assert out.result["created"] == ["zenops-demo-1"]
    assert [s["id"] for s in out.result["servers"]] == ["zenops-demo-1#1", "s2"]


class LostAnswers(FakeCloud):
    """A cloud whose first answers to creations are lost: ``made`` says whether it carried the request out all the
    same (a timeout or a dropped connection after the fact) or not (a 503 with its Retry-After)."""

    def __init__(self, failures: list[tuple[BaseException, bool]], **kw: Any) -> None:
        super().__init__(**kw)
        self.failures = failures
        self.compute.create_server = self.lossy(self.create_server)
        self.network.create_ip = self.lossy(self.create_ip)

    def lossy(self, create: Any) -> Any:
        def call(**kwargs: Any) -> Any:
            if self.failures:
                exc, made = self.failures.pop(0)
                if made:
                    create(**kwargs)
                raise exc
            return create(**kwargs)

        return call


def test_a_creation_whose_answer_is_lost_adopts_what_the_cloud_made(monkeypatch):
    cloud = LostAnswers([(ksa.ConnectTimeout("Request to http://nova/servers timed out"), True)])
    out, _ = run_module(monkeypatch, cloud, count=1)
    assert not out.failed, out.result
    assert [c for c in cloud.calls if c.startswith("create")] == [create("zenops-demo-1#1")]  # no twin
    assert [s["id"] for s in out.result["servers"]] == ["zenops-demo-1#1"]
    assert out.result["created"] == ["zenops-demo-1"]


class ResendingProxy(LostAnswers):
    """As openstacksdk and keystoneauth behave: a creation goes through the proxy's ``request``, which passes
    connect_retries=1 unless told otherwise, and keystoneauth counts a read timeout as a connection failure and sends
    the request again by itself: the sandbox's Nova log showed a second POST /servers 10.5 s after the first, no
    listing between them, and a twin server."""

    def __init__(self, failures: list[tuple[BaseException, bool]], **kw: Any) -> None:
        super().__init__(failures, **kw)
        lossy = self.compute.create_server

        def request(url: str, method: str, connect_retries: int = 1, **kwargs: Any) -> Any:
            while True:
                try:
                    return lossy(**kwargs)
                except ksa.ConnectTimeout:
                    if connect_retries <= 0:
                        raise
                    connect_retries -= 1

        self.compute.request = request
        self.compute.create_server = lambda **kwargs: self.compute.request("/servers", "POST", **kwargs)


def test_a_lost_answer_is_not_sent_again_by_the_sdk_before_zenops_looks(monkeypatch):
    cloud = ResendingProxy([(ksa.ConnectTimeout("Request to http://nova/servers timed out"), True)])
    request = cloud.compute.request
    out, _ = run_module(monkeypatch, cloud, count=1)
    assert not out.failed, out.result
    assert [c for c in cloud.calls if c.startswith("create")] == [create("zenops-demo-1#1")]  # no twin
    assert [s["id"] for s in out.result["servers"]] == ["zenops-demo-1#1"]
    assert cloud.compute.request is request  # the proxy's own request is put back after the creation


def test_a_refused_creation_is_tried_again_after_its_retry_after(monkeypatch):
    cloud = LostAnswers([(answered(503, retry_after="9"), False), (answered(429, retry_after="4"), False)])
    out, clock = run_module(monkeypatch, cloud, count=1)
    assert not out.failed, out.result
    assert [c for c in cloud.calls if c.startswith("create")] == [create("zenops-demo-1#1")]
    assert clock.now == 1000.0 + 9 + 4 + 2  # both Retry-After waits, then one poll


def test_a_floating_ip_whose_answer_is_lost_is_adopted_not_doubled(monkeypatch):
    cloud = LostAnswers([(ksa.ConnectFailure("connection reset"), True)], existing=[existing("zenops-demo-1", "s1")])
    out, _ = run_module(monkeypatch, cloud, count=1, floating_network="public", tags=["zenops"])
    assert not out.failed, out.result
    assert list(cloud.ips) == ["ip1"]
    assert out.result["servers"][0]["floating_ip"] == "192.0.2.1"
    assert cloud.calls[-1] == "update_ip ip1 port-s1"


def test_a_creation_refused_past_the_retries_fails_as_transient_and_makes_nothing(monkeypatch):
    cloud = LostAnswers([(answered(503), False)] * 4)
    out, _ = run_module(monkeypatch, cloud, count=1)
    assert out.failed
    assert out.result["zenops_error"] == "transient"
    assert out.result["msg"].startswith("the cloud API failed repeatedly: ")
    assert "503" in out.result["msg"]
    assert "http://127.0.0.1:8774/v2.1/servers" in out.result["msg"]
    assert cloud.servers_by_id == {}
