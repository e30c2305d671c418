"""The gateway on a server of its own in cloud mode (`zenops up --cloud ... --gateway-flavor`): its room in the
preflight, its cost, its flavor kept by a re-run, what `up` hands the serving step, and the gateway record that
remembers its own inventory and the servers' fixed addresses. (The cloud and the playbooks: the sandbox e2e,
tests/e2e/test_gateway_server_sandbox.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from zenops.cloud import ledger
from zenops.cloud.preflight import Limits, shortfalls
from zenops.deployment.common import CloudRequest, check_count, flavor_name, gateway_server_flavor, inventory_path
from zenops.deployment.provision import serve_request_for
from zenops.deployment.services.gateway import Gateway, backends_from_endpoints
from zenops.errors import ExitCode, UsageError
from zenops.serve import ServeRequest, request_from_dict, request_to_dict


def _dep(**extra) -> ledger.Deployment:
    base = {
        "name": "demo", "cloud": "sandbox", "flavor": "gp.5.24.96", "image": "debian-12", "count": 2,
        "network_mode": "floating", "price_per_hour": 0.79,
        "servers": [
            {"name": "zenops-demo-1", "id": "a", "address": "203.0.113.1", "fixed_ip": "10.98.7.11"},
            {"name": "zenops-demo-2", "id": "b", "address": "203.0.113.2", "fixed_ip": "10.98.7.12"},
        ],
    }  # fmt: skip
    return ledger.Deployment(**{**base, **extra})


def test_the_gateway_server_counts_against_the_quota():
    limits = Limits(max_cores=50, cores_used=0, max_ram_mib=-1, ram_used_mib=0, max_instances=3, instances_used=0)
    assert shortfalls(limits, 24, 98304, 2) == []
    short = {s.limit: s for s in shortfalls(limits, 24, 98304, 2, more=((4, 8192, 1),))}
    assert str(short["cores"]) == "cores: 52 vCPUs needed, 50 available (2 vCPUs over)"
    assert "instances" not in short  # 3 servers, 3 allowed
    short = {s.limit: s for s in shortfalls(limits, 2, 8192, 3, more=((2, 4096, 1),))}
    assert short["instances"].needed == 4
    assert shortfalls(limits, 24, 98304, 2, more=((4, 8192, 0),)) == []  # adopted: no new room


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, 1.58),
        ({"gateway_flavor": "gp.5.2.8", "gateway_price_per_hour": 0.05}, 1.63),
        ({"gateway_flavor": "gp.5.2.8", "gateway_price_per_hour": None}, None),  # a server of unknown price
        ({"price_per_hour": None}, None),
    ],
)
def test_cost_per_hour_counts_the_gateway_server(extra, expected):
    assert _dep(**extra).cost_per_hour() == expected


def test_ledger_keeps_the_gateway_server_and_reads_an_entry_from_before_it(tmp_path):
    dep = _dep(gateway_flavor="gp.5.2.8", gateway_servers=[{"name": "zenops-demo-gw-1", "id": "g"}])
    ledger.save(tmp_path, dep)
    assert ledger.load(tmp_path, "sandbox", "demo") == dep
    path = ledger.path(tmp_path, "sandbox", "old")
    old = {k: v for k, v in _dep(name="old").to_dict().items() if not k.startswith("gateway_")}
    path.write_text(json.dumps(old))
    loaded = ledger.load(tmp_path, "sandbox", "old")
    assert loaded is not None
    assert (loaded.gateway_flavor, loaded.gateway_servers, loaded.gateway_inventory) == (None, [], "")


def test_inventory_paths_per_kind(tmp_path):
    assert inventory_path(tmp_path, "c", "d").name == "d.inventory.yml"
    assert inventory_path(tmp_path, "c", "d", "gateway").name == "d.gateway.inventory.yml"
    assert inventory_path(tmp_path, "c", "d", "all").name == "d.all.inventory.yml"
    assert len({inventory_path(tmp_path, "c", "d", k).parent for k in ("", "gateway", "all")}) == 1


def test_a_rerun_keeps_the_gateway_flavor_and_refuses_another():
    req = CloudRequest(cloud="sandbox", flavor="gp.5.24.96")
    assert gateway_server_flavor(req, None) is None
    assert gateway_server_flavor(req, _dep()) is None
    had = _dep(gateway_flavor="gp.5.2.8")
    assert gateway_server_flavor(req, had) == "gp.5.2.8"  # without --gateway-flavor: kept
    with_it = CloudRequest(cloud="sandbox", flavor="gp.5.24.96", gateway_flavor="gp.5.2.8")
    assert gateway_server_flavor(with_it, None) == "gp.5.2.8"
    assert gateway_server_flavor(with_it, had) == "gp.5.2.8"
    other = CloudRequest(cloud="sandbox", flavor="gp.5.24.96", gateway_flavor="gp.5.4.16")
    with pytest.raises(UsageError) as e:
        gateway_server_flavor(other, had)
    assert "gp.5.2.8" in e.value.message
    assert "--gateway-flavor gp.5.2.8" in (e.value.hint or "")


def test_a_rerun_from_another_controller_keeps_the_gateway_server_the_cloud_holds():
    req = CloudRequest(cloud="sandbox", flavor="gp.5.24.96")
    assert gateway_server_flavor(req, None, in_cloud="gp.5.2.8") == "gp.5.2.8"  # no ledger entry: the cloud's
    other = CloudRequest(cloud="sandbox", flavor="gp.5.24.96", gateway_flavor="gp.5.4.16")
    with pytest.raises(UsageError, match=r"flavor gp\.5\.2\.8"):
        gateway_server_flavor(other, None, in_cloud="gp.5.2.8")


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (SimpleNamespace(flavor={"original_name": "gp.5.2.8", "vcpus": 2}), "gp.5.2.8"),
        (SimpleNamespace(flavor={"id": "f1"}), None),  # an old microversion: no name in the server
        (SimpleNamespace(flavor=None), None),
        (SimpleNamespace(), None),
    ],
)
def test_flavor_name_of_a_listed_server(server, expected):
    assert flavor_name(server) == expected


def _with_gateway_server() -> ledger.Deployment:
    return _dep(
        count=1,
        servers=[{"name": "zenops-demo-1", "id": "a", "address": "203.0.113.1", "fixed_ip": "10.98.7.11"}],
        gateway_flavor="gp.5.2.8",
        gateway_servers=[{"name": "zenops-demo-gw-1", "id": "g", "address": "203.0.113.9", "fixed_ip": "10.98.7.9"}],
        gateway_inventory="/state/demo.gateway.inventory.yml",
    )


@pytest.mark.parametrize(
    ("req", "says"),
    [
        (ServeRequest(model="m", gateway="off"), "--gateway off"),
        (ServeRequest(model="m", gateway_host="zenops-demo-1"), "--gateway-host zenops-demo-1"),
    ],
)
def test_a_rerun_cannot_turn_away_from_the_gateway_server(req, says):
    with pytest.raises(UsageError, match=says) as e:
        serve_request_for(req, _with_gateway_server())
    assert "zenops down --deployment demo" in (e.value.hint or "")
    same = serve_request_for(ServeRequest(model="m", gateway_host="zenops-demo-gw-1"), _with_gateway_server())
    assert same.gateway_host == "zenops-demo-gw-1"


def test_serve_request_for_a_cloud_deployment_reaches_the_servers_by_their_fixed_addresses():
    req = ServeRequest(model="m", gateway="auto")
    out = serve_request_for(req, _dep())
    assert (out.gateway, out.gateway_host, out.gateway_inventory) == ("auto", None, None)
    assert dict(out.gateway_addresses) == {"zenops-demo-1": "10.98.7.11", "zenops-demo-2": "10.98.7.12"}


def test_serve_request_for_a_gateway_server_puts_the_gateway_there_whatever_the_instance_count():
    out = serve_request_for(ServeRequest(model="m"), _with_gateway_server())
    assert (out.gateway, out.gateway_host) == ("on", "zenops-demo-gw-1")
    assert out.gateway_inventory == Path("/state/demo.gateway.inventory.yml")
    assert dict(out.gateway_addresses) == {"zenops-demo-1": "10.98.7.11", "zenops-demo-gw-1": "10.98.7.9"}
    # the serving record keeps the request: the new fields survive the round trip
    back = request_from_dict(json.loads(json.dumps(request_to_dict(out, hf_token_given=False))))
    assert back.gateway_inventory == out.gateway_inventory
    assert dict(back.gateway_addresses) == dict(out.gateway_addresses)


def test_backends_at_the_given_addresses_else_the_endpoint_host():
    endpoints = {
        "zenops-demo-1": [{"instance": 0, "port": 8000, "url": "http://203.0.113.1:8000/v1"}],
        "zenops-demo-2": [{"instance": 0, "port": 8000, "url": "http://203.0.113.2:8000/v1"}],
    }
    backends = backends_from_endpoints(endpoints, {"zenops-demo-1": "10.98.7.11"})
    assert [b.address for b in backends] == ["10.98.7.11", "203.0.113.2"]
    assert [b.address for b in backends_from_endpoints(endpoints, {})] == ["203.0.113.1", "203.0.113.2"]


def test_gateway_record_keeps_its_own_inventory_addresses_and_certificate(tmp_path):
    gw = Gateway(
        host="zenops-demo-gw-1",
        port=8080,
        url="https://203.0.113.9:8080/v1",
        backends=backends_from_endpoints({"h": [{"port": 8000, "url": "http://h.example:8000/v1"}]}, {"h": "10.0.0.1"}),
        tls=True,
        tls_cert_file="/etc/zenops/gw.pem",
        inventory=str(tmp_path / "demo.gateway.inventory.yml"),
        addresses={"h": "10.0.0.1"},
    )
    back = Gateway.from_dict(json.loads(json.dumps(gw.to_dict())))
    assert back == gw
    assert back.own_server
    assert back.run_inventory(tmp_path / "demo.inventory.yml") == tmp_path / "demo.gateway.inventory.yml"
    on_host = Gateway.from_dict({"host": "h", "port": 8080})
    assert not on_host.own_server
    assert on_host.run_inventory(tmp_path / "demo.inventory.yml") == tmp_path / "demo.inventory.yml"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gateway-flavor", "gp.5.2.8", "--gateway", "off", "--model", "Qwen/Qwen3-4B"], "--gateway off"),
        (["--gateway-flavor", "gp.5.2.8", "--gateway-host", "x", "--model", "Qwen/Qwen3-4B"], "--gateway-host"),
        (["--gateway-flavor", "gp.5.2.8"], "goes with --model"),
    ],
)
def test_up_refuses_a_gateway_flavor_that_contradicts_other_flags(run, isolated_home, args, fragment):
    r = run(["up", "--cloud", "sandbox", "--flavor", "gp.5.24.96", *args])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert fragment in r.output
    assert not (isolated_home / "state" / "zenops" / "deployments").exists()  # nothing recorded, nothing created


def test_up_refuses_a_gateway_flavor_on_own_hosts(run, isolated_home, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 192.0.2.1\n")
    r = run(["up", "-i", str(inv), "--model", "Qwen/Qwen3-4B", "--gateway-flavor", "gp.5.2.8"])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert "--gateway-flavor goes with --cloud" in r.output
    assert not (isolated_home / "state" / "zenops" / "runs").exists()


def test_up_never_leaves_servers_outside_a_smaller_count():
    req = CloudRequest(cloud="sandbox", flavor="gp.5.24.96", count=2, name="demo")
    check_count([], req)
    check_count(["zenops-demo-1", "zenops-demo-2"], req)  # adopted
    with pytest.raises(UsageError) as e:
        check_count(["zenops-demo-3", "zenops-demo-1", "zenops-demo-2"], req)
    assert "has 3 servers (zenops-demo-1, zenops-demo-2, zenops-demo-3); --count 2" in e.value.message
    assert "--count 3" in (e.value.hint or "")
    assert "zenops down --deployment demo" in (e.value.hint or "")
