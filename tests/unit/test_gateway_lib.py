"""zenops.gateway's pure parts: backends from a serving record's endpoints, when a deployment wants a gateway, and
the record's form of a gateway. (The playbook calls are Ansible runs: not here.)"""

from __future__ import annotations

import json

import pytest

from zenops.deployment.services.gateway import (
    DEFAULT_PORT,
    MODES,
    Backend,
    Gateway,
    backend_name,
    backends_from_endpoints,
    wanted,
)
from zenops.errors import UsageError

ENDPOINTS = {
    "node-b": [{"instance": 0, "port": 8000, "url": "http://10.0.0.2:8000/v1"}],
    "node-a": [
        {"instance": 0, "port": 8000, "url": "http://10.0.0.1:8000/v1", "model": "tiny"},
        {"instance": 1, "port": 8001, "url": "http://10.0.0.1:8001/v1"},
    ],
    "node-c": [],
}


def test_backend_name():
    assert backend_name("node-a", 8001) == "node-a-8001"


def test_backends_from_endpoints_one_per_server_sorted_by_host():
    backends = backends_from_endpoints(ENDPOINTS)
    assert backends == (
        Backend("node-a-8000", "node-a", 0, "10.0.0.1", 8000),
        Backend("node-a-8001", "node-a", 1, "10.0.0.1", 8001),
        Backend("node-b-8000", "node-b", 0, "10.0.0.2", 8000),
    )
    assert backends[1].role_entry() == {"name": "node-a-8001", "address": "10.0.0.1", "port": 8001}


def test_a_server_listening_at_one_address_is_reached_there_unless_the_cloud_names_its_fixed_address():
    ep = {"port": 8000, "url": "http://203.0.113.7:8000/v1", "listen": "10.0.0.7"}  # zenops_private_address
    (b,) = backends_from_endpoints({"h1": [ep]})
    assert b.address == "10.0.0.7"  # not the operator's address of the host: vLLM does not listen there
    (c,) = backends_from_endpoints({"h1": [ep]}, {"h1": "10.98.1.5"})
    assert c.address == "10.98.1.5"
    (d,) = backends_from_endpoints({"h1": [{**ep, "listen": ""}]})
    assert d.address == "203.0.113.7"  # listening everywhere: the endpoint's host


def test_backends_from_endpoints_address_from_the_url_host_not_the_inventory_name():
    (b,) = backends_from_endpoints({"h1": [{"port": "8002", "url": "https://gpu1.example.org:8002/v1"}]})
    assert b == Backend("h1-8002", "h1", 0, "gpu1.example.org", 8002)  # port as int, instance 0 by default


@pytest.mark.parametrize("url", [None, "", "not a url"])
def test_backends_from_endpoints_without_a_url_host_use_the_inventory_host(url):
    (b,) = backends_from_endpoints({"h1": [{"instance": 0, "port": 8000, "url": url}]})
    assert b.address == "h1"


def test_backends_from_endpoints_empty():
    assert backends_from_endpoints({}) == ()


@pytest.mark.parametrize(
    ("mode", "instances", "expected"),
    [
        ("auto", 0, False),
        ("auto", 1, False),
        ("auto", 2, True),
        ("auto", 7, True),
        ("on", 1, True),
        ("on", 0, True),
        ("off", 1, False),
        ("off", 5, False),
    ],
)
def test_wanted(mode, instances, expected):
    assert wanted(mode, instances) is expected


@pytest.mark.parametrize("mode", ["yes", "ON", "", "true"])
def test_wanted_refuses_a_bad_mode(mode):
    with pytest.raises(UsageError) as info:
        wanted(mode, 2)
    assert info.value.exit_code == 2
    for m in MODES:
        assert m in info.value.message


def _gateway(**extra) -> Gateway:
    return Gateway(
        host="node-a", port=DEFAULT_PORT, url="http://10.0.0.1:8080", backends=backends_from_endpoints(ENDPOINTS),
        **extra,
    )  # fmt: skip


@pytest.mark.parametrize("tls", [False, True])
def test_gateway_dict_round_trip_through_json(tls):
    gw = _gateway(tls=tls)
    data = json.loads(json.dumps(gw.to_dict()))
    assert data["host"] == "node-a"
    assert data["port"] == 8080
    assert data["tls"] is tls
    assert data["backends"][0] == {
        "name": "node-a-8000", "host": "node-a", "instance": 0, "address": "10.0.0.1", "port": 8000,
    }  # fmt: skip
    back = Gateway.from_dict(data)
    assert back == gw
    assert isinstance(back.backends, tuple)


def test_gateway_from_a_minimal_or_extended_dict():
    gw = Gateway.from_dict({"host": "h1", "port": "9000"})
    assert gw == Gateway(host="h1", port=9000, url="", backends=(), tls=False)
    data = _gateway().to_dict()
    data["backends"][0]["weight"] = 3  # keys a later zenops may add are ignored
    data["extra"] = {"x": 1}
    assert Gateway.from_dict(data) == _gateway()


def test_names_on():
    gw = _gateway()
    assert gw.names_on(["node-a"]) == ["node-a-8000", "node-a-8001"]
    assert gw.names_on(["node-b", "node-a"]) == ["node-a-8000", "node-a-8001", "node-b-8000"]
    assert gw.names_on(iter(["node-b"])) == ["node-b-8000"]
    assert gw.names_on(["node-c", "unknown"]) == []
    assert gw.names_on([]) == []
