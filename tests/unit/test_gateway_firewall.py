"""A cloud deployment's security group follows its gateway (zenops.deployment.firewall): the vLLM ports are open to the
operator only when no gateway fronts the servers, decided by the gateway's one rule (gateway.wanted) on the plan's
instance count, not on the server count.

The Ansible runs are TEST DOUBLES (``Runs`` records each play and answers the gateway play as playbooks/gateway.yml
does); the security group's rules are the provision role's (roles/provision/tasks/security_group.yml), which
playbooks/firewall.yml runs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from zenops import serve
from zenops.cloud import ledger
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import provision
from zenops.deployment import services as services_lib
from zenops.deployment.common import CloudRequest
from zenops.deployment.services import gateway as gw_lib
from zenops.paths import collection_root
from zenops.runner import RunResult

OPERATOR = "203.0.113.7/32"
# one server, three vLLM instances (the plan's count): the gateway turns on under --gateway auto
ONE_SERVER = {
    "zenops-d1-1": [{"instance": i, "port": 8000 + i, "url": f"http://198.51.100.5:{8000 + i}/v1"} for i in range(3)]
}


class Runs:
    """TEST DOUBLE of Ansible: records each play; the gateway play answers as playbooks/gateway.yml does."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.specs: list[Any] = []

    def __call__(self, spec: Any) -> RunResult:
        self.specs.append(spec)
        facts: dict[str, Any] = {}
        if host := spec.extravars.get("zenops_gateway_host"):
            facts[host] = {"zenops_gateway_result": {"url": f"http://{host}:8080/v1", "servers": []}}
        return RunResult("r1", spec.playbook, "successful", 0, self.tmp_path, "now", 0.1, host_facts=facts)

    def firewall(self) -> list[dict[str, Any]]:
        return [s.extravars for s in self.specs if s.playbook == "firewall"]


@pytest.fixture
def ctx(isolated_home, tmp_path, monkeypatch) -> RunContext:
    monkeypatch.chdir(tmp_path)
    c = RunContext(load())
    runs = Runs(tmp_path)
    monkeypatch.setattr(c, "run", runs)
    c.runs = runs  # type: ignore[attr-defined]
    return c


def _cloud_deployment(ctx: RunContext, tmp_path: Path, *, api_to_operator: bool | None) -> ledger.Deployment:
    """A one-server cloud deployment as `up --cloud --count 1` recorded it."""
    inventory = tmp_path / "d1.inventory.yml"
    inventory.write_text("all: {}\n")
    dep = ledger.Deployment("d1", "c1", "f1", "debian-12", 1, "provider", campaign="sweep-1", inventory=str(inventory))
    dep.operator_cidr, dep.api_to_operator = OPERATOR, api_to_operator
    ledger.save(ctx.config.state_dir, dep)
    return dep


def _view(inventory: str, gateway: str) -> services_lib.View:
    return services_lib.View(Path(inventory), ONE_SERVER, request=serve.ServeRequest(model="m", gateway=gateway))


def test_one_server_several_instances_gateway_auto_closes_the_vllm_ports_to_the_operator(ctx, tmp_path):
    dep = _cloud_deployment(ctx, tmp_path, api_to_operator=True)  # opened by the old count-based rule
    state = gw_lib.SERVICE.apply(ctx, _view(dep.inventory, "auto"), None)
    assert state is not None  # the gateway is on: 3 instances
    (fw,) = ctx.runs.firewall()  # type: ignore[attr-defined]
    assert fw["provision_api_to_operator"] is False  # the vLLM ports: not to the operator
    assert fw["provision_operator_cidr"] == OPERATOR
    assert fw["provision_gateway_port"] == 8080  # the gateway's port is (the role's rule)
    assert fw["provision_deployment"] == "d1"
    assert fw["provision_tags"] == ["zenops", "zenops:deployment=d1", "zenops:campaign=sweep-1"]
    assert [s.playbook for s in ctx.runs.specs] == ["gateway", "firewall"]  # type: ignore[attr-defined]
    again = ledger.load(ctx.config.state_dir, "c1", "d1")
    assert again is not None
    assert again.api_to_operator is False  # recorded: the next `up --cloud` keeps it closed


def test_the_gateway_off_opens_them_and_nothing_runs_when_the_group_already_is_so(ctx, tmp_path):
    dep = _cloud_deployment(ctx, tmp_path, api_to_operator=False)
    one = {"zenops-d1-1": ONE_SERVER["zenops-d1-1"][:1]}
    view = services_lib.View(Path(dep.inventory), one, request=serve.ServeRequest(model="m", gateway="auto"))
    assert gw_lib.SERVICE.apply(ctx, view, None) is None
    assert [f["provision_api_to_operator"] for f in ctx.runs.firewall()] == [True]  # type: ignore[attr-defined]
    assert gw_lib.SERVICE.apply(ctx, view, None) is None
    assert len(ctx.runs.firewall()) == 1  # type: ignore[attr-defined]  # recorded open: no second run


def test_own_hosts_have_no_security_group(ctx, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    assert gw_lib.SERVICE.apply(ctx, _view(str(inventory), "auto"), None) is not None
    assert ctx.runs.firewall() == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("mode", "instances", "expected"),
    [("auto", None, True), ("on", None, True), ("off", None, False), ("auto", 1, False), ("auto", 3, True)],
)
def test_fronts_is_the_gateway_rule_and_before_the_plan_a_gateway_may_front(mode, instances, expected):
    assert gw_lib.fronts(mode, instances) is expected


@pytest.mark.parametrize(
    ("fronts", "gateway_flavor", "recorded", "expected"),
    [
        (True, None, None, False),  # `up --cloud --count 1 --model m` (auto): closed until the plan decides
        (True, None, True, False),  # closed while it serves again; the gateway service opens them if it stays off
        (False, None, False, False),  # `up --cloud` without --model keeps the gateway's decision
        (False, None, True, True),
        (False, None, None, True),  # no model, no decision: open (SSH-only servers for your own use)
        (False, "gw.small", True, False),  # a gateway's own server fronts them
    ],
)
def test_provisioning_opens_the_vllm_ports_only_when_no_gateway_may_front_them(
    fronts, gateway_flavor, recorded, expected
):
    req = CloudRequest(cloud="c1", flavor="f1", gateway_fronts=fronts)
    dep = ledger.Deployment("d1", "c1", "f1", "debian-12", 1, "provider", gateway_flavor=gateway_flavor)
    dep.api_to_operator = recorded
    assert provision.api_to_operator(req, dep) is expected


def test_up_cloud_with_one_server_and_a_model_asks_for_the_ports_closed(isolated_home, tmp_path, monkeypatch):
    """The old rule counted --count (1 server: no gateway, ports open) where the plan gives several instances."""
    from click.testing import CliRunner  # noqa: PLC0415

    from zenops.cli.main import cli  # noqa: PLC0415

    asked: list[CloudRequest] = []

    def up_cloud(_ctx: Any, req: CloudRequest, **_kw: Any) -> Any:  # check=, confirm=
        asked.append(req)
        raise SystemExit(0)

    monkeypatch.setattr("zenops.deployment.provision.up_cloud", up_cloud)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["up", "--cloud", "c1", "--flavor", "f1", "--count", "1", "--model", "Qwen/Qwen3-0.6B"])
    assert asked, r.output
    (req,) = asked
    assert req.count == 1
    assert req.gateway_fronts is True


def test_the_firewall_playbook_runs_the_provision_roles_security_group_rules():
    play = yaml.safe_load((Path(collection_root()) / "playbooks" / "firewall.yml").read_text())
    (task,) = play[0]["tasks"]
    assert task["ansible.builtin.include_role"] == {
        "name": "zenops.inference.provision",
        "tasks_from": "security_group.yml",
    }
    rules = yaml.safe_load((Path(collection_root()) / "roles/provision/tasks/security_group.yml").read_text())
    api_to_operator = [
        r for r in rules[0]["zenops.inference.openstack_security_group"]["rules"]
        if r.get("remote_ip_prefix") and "provision_api_port_min" in str(r["port_range_min"])
    ]  # fmt: skip
    assert [r["state"] for r in api_to_operator] == [
        "{{ 'present' if provision_api_to_operator | bool else 'absent' }}"
    ]
