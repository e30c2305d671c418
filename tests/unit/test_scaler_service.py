"""The scaling loop's service (zenops.deployment.services.scaler), its credential (zenops.cloud.scaler_cred), its
wheelhouse (zenops.scaling.bundle) and the rollout's pause hook (zenops.deployment.services.paused).

TEST DOUBLES: ``Runs`` records each play and answers as playbooks/scaler.yml does; the cloud (the credential's
Keystone) is ``FakeIdentity``; pip is a recorded ``run``. The real role is roles/scaler's Molecule scenario."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from zenops import serve
from zenops.cloud import ledger, scaler_cred
from zenops.cloud import marks as m
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment import services as services_lib
from zenops.deployment.services import scaler as sc
from zenops.errors import ZenopsError
from zenops.runner import RunResult
from zenops.scaling import bundle, inputs
from zenops.scaling.replicas import Replicas

ENDPOINTS = {"s1": [{"instance": 0, "port": 8000}], "s2": [{"instance": 0, "port": 8000}]}


class Runs:
    """TEST DOUBLE of Ansible: records each play; the scaler play answers on its host as playbooks/scaler.yml."""

    def __init__(self, tmp_path: Path, loop_state: dict[str, Any] | None = None) -> None:
        self.tmp_path, self.specs, self.loop_state = tmp_path, [], loop_state
        self.host_files: dict[str, str] = {}  # the loop's host's state files (relative path -> text), for a pull

    def __call__(self, spec: Any) -> RunResult:
        self.specs.append(spec)
        facts: dict[str, Any] = {}
        if host := spec.extravars.get("zenops_scaler_host"):
            result: dict[str, Any] = {"action": spec.extravars["zenops_scaler_action"]}
            if spec.extravars["zenops_scaler_action"] == "state":
                result |= {"active": "active", "state": json.dumps(self.loop_state) if self.loop_state else ""}
            if (
                spec.extravars["zenops_scaler_action"] == "pull"
            ):  # the host's files of those asked (playbooks/scaler.yml)
                asked = spec.extravars["scaler_pull"]
                result |= {"files": {k: v for k, v in self.host_files.items() if k in asked}}
            facts[host] = {"zenops_scaler_result": result}
        if host := spec.extravars.get("zenops_gateway_host"):
            facts[host] = {"zenops_gateway_result": {"url": f"http://{host}:8080/v1", "servers": []}}
        if host := spec.extravars.get("zenops_metrics_prometheus_host"):
            facts[host] = {"zenops_metrics_result": {"url": "http://127.0.0.1:9090", "targets": []}}
        return RunResult("r1", spec.playbook, "successful", 0, self.tmp_path, "now", 0.1, host_facts=facts)

    def scaler(self) -> list[tuple[str, str]]:
        return [(s.extravars["zenops_scaler_action"], s.limit) for s in self.specs if s.playbook == "scaler"]


@pytest.fixture
def ctx(isolated_home, tmp_path, monkeypatch) -> RunContext:
    monkeypatch.chdir(tmp_path)
    c = RunContext(load())
    runs = Runs(tmp_path)
    monkeypatch.setattr(c, "run", runs)
    c.runs = runs  # type: ignore[attr-defined]
    return c


@pytest.fixture
def cloud(ctx, monkeypatch, tmp_path) -> dict[str, Any]:
    """The deployment's ledger entry, the wheelhouse and the credential as TEST DOUBLES; what they were asked."""
    seen: dict[str, Any] = {"deleted": []}
    dep = ledger.Deployment("d1", "c1", "f1", "debian-12", 2, "provider", inventory=str(tmp_path / "d1.yml"))
    dep.servers = [{"name": "s1", "fixed_ip": "10.1.0.7"}, {"name": "s2", "fixed_ip": "10.1.0.8"}]
    dep.operator_cidr, dep.api_to_operator = "198.51.100.4/32", False
    ledger.save(ctx.config.state_dir, dep)
    seen["dep"] = dep
    monkeypatch.setattr(sc, "_entry", lambda _c, _i: dep)
    monkeypatch.setattr(bundle, "ensure", lambda *_a, **_k: bundle.Wheelhouse("k123", tmp_path / "wheels"))

    @contextlib.contextmanager
    def cloud_vars(_ctx: Any, s: Any, _dep: Any) -> Any:
        seen["made"] = s.credential
        yield {"scaler_cloud": s.cloud, "scaler_credential": {"id": "ac1", "secret_file": "/x/secret"}}

    monkeypatch.setattr(sc, "cloud_vars", cloud_vars)
    monkeypatch.setattr(sc, "delete_credential", lambda _ctx, s: seen["deleted"].append(s.credential))
    return seen


def _view(endpoints: Any = ENDPOINTS, **req: Any) -> services_lib.View:
    args = {"model": "m", "gateway": "on", "metrics": "on", "replicas": "1..3", **req}
    return services_lib.View(Path("d1.yml"), endpoints, request=serve.ServeRequest(**args))


def test_the_loop_is_a_service_after_the_metrics():
    assert [s.name for s in services_lib.services()] == ["gateway", "metrics", "scaler"]
    assert services_lib.pausable(sc.SERVICE) is sc.SERVICE
    assert services_lib.pausable(services_lib.services()[0]) is None


def test_up_with_a_range_installs_the_loop_on_the_gateways_host_which_scale_in_never_removes(ctx, cloud):
    states = services_lib.apply(ctx, _view(scale_cooldown=60), {})
    s = states["scaler"]
    assert (s["host"], s["protected"], s["replicas"], s["wheels"]) == ("s1", "s1", {"min": 1, "max": 3}, "k123")
    assert s["overrides"] == {"scale_cooldown": 60}
    assert s["credential"] == cloud["made"] == "zenops-scaler-d1"
    assert ctx.runs.scaler() == [("present", "s1")]
    present = ctx.runs.specs[-1].extravars
    assert present["scaler_wheelhouse"].endswith("wheels")
    assert present["scaler_credential"] == {"id": "ac1", "secret_file": "/x/secret"}  # a file, never the secret


def test_up_without_a_range_removes_the_loop_and_its_credential(ctx, cloud):
    had = {"scaler": sc.Scaler("s1", "d1", "c1", Replicas(1, 3), credential="zenops-scaler-d1").to_dict()}
    states = services_lib.apply(ctx, _view(replicas="2"), had)
    assert "scaler" not in states
    assert ctx.runs.scaler() == [("absent", "s1")]
    assert cloud["deleted"] == ["zenops-scaler-d1"]


def test_the_loop_without_the_metrics_is_refused_with_the_fix(ctx, cloud):
    view = services_lib.View(Path("d1.yml"), ENDPOINTS, request=serve.ServeRequest(model="m", replicas="1..3"),
                             services={"gateway": {"host": "s1", "port": 8080}})  # fmt: skip
    with pytest.raises(ZenopsError, match="reads the metrics") as e:
        sc.SERVICE.apply(ctx, view, None)
    assert "--metrics on" in (e.value.hint or "")


def test_status_reads_the_loops_state_and_lines_say_target_actual_and_the_last_decision(ctx):
    from zenops.scaling.state import ScalingState  # noqa: PLC0415

    # the loop's own state file (zenops.scaling.state writes it on the host), as the playbook's `state` action reads it
    loop = ScalingState("d1", Replicas(1, 3), cloud="c1", cap_per_hour=2.5, target=2, actual=2, phase="idle")
    loop.decisions = [{"action": "out", "current": 1, "target": 2, "reason": "waiting/replica 5.5 > 2",
                       "at": "2025-01-01T12:03:10Z", "result": "done"}]  # fmt: skip
    ctx.runs.loop_state = loop.to_dict()
    had = {"scaler": sc.Scaler("s1", "d1", "c1", Replicas(1, 3), cap_per_hour=2.5).to_dict()}
    entries = services_lib.status(ctx, Path("d1.yml"), had)
    assert ctx.runs.specs[-1].extravars["scaler_state_file"] == "/var/lib/zenops-scaler/zenops/scaling/d1.json"
    [line] = services_lib.lines(entries)
    assert line.text == (
        "scaling: 2 replicas (1..3, cap $2.50/h), target 2, idle; "
        "last: out 1 -> 2 at 12:03:10 (waiting/replica 5.5 > 2): done"
    )


def test_a_status_that_fails_is_a_line_on_stderr():
    [line] = sc.SERVICE.lines({"state": {}, "error": "unreachable"})
    assert line.err
    assert "scaling status unavailable" in line.text


def test_the_dry_run_says_where_the_loop_would_run_and_what_it_keeps():
    view = _view(max_price_per_hour=3.0)
    previews = {p.name: p for p in services_lib.plan(view, {})}
    p = previews["scaler"]
    assert p.on
    assert (
        p.summary == "on; a loop on s1 keeps 1..3 replicas, cap $3.00/h; scale-in never removes s1 (the gateway's host)"
    )
    off = sc.SERVICE.plan(_view(replicas=None), {"host": "s1"})
    assert not off.on
    assert "would be removed from s1" in off.summary


def test_the_state_the_host_gets_has_its_paths_and_reaches_servers_by_their_fixed_address(tmp_path):
    state = tmp_path / "state"
    inv = (
        "all:\n  hosts:\n    s1:\n      ansible_host: 203.0.113.5\n"
        f"      ansible_ssh_private_key_file: {state}/keys/c1/k\n"
        "      zenops_private_address: 10.1.0.7\n    s2:\n      ansible_host: 203.0.113.6\n"
    )
    out = inputs.rewrite(inv, state, inventory=True)
    assert "ansible_host: 10.1.0.7" in out
    assert "ansible_host: 203.0.113.6" in out  # no fixed address recorded: as it was
    assert f"{sc.HOST_STATE}/keys/c1/k" in out
    assert str(state) not in out


def test_the_host_finds_the_record_api_key_and_metrics_password_under_its_own_inventorys_name(tmp_path):
    """The loop's zenops looks its deployment's files up by its inventory's path on the host: the record, the API key
    (else its serve makes a new key the gateway's clients do not have) and the metrics password go under that name,
    and the record names the host's key file; pulled back, ours again."""
    from zenops.config import Config  # noqa: PLC0415
    from zenops.deployment import record as record_lib  # noqa: PLC0415

    state = tmp_path / "state"
    config = Config(state_dir=state)
    inventory = state / "deployments" / "c1" / "d1.inventory.yml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("all:\n  hosts: {}\n")
    key = record_lib.api_key_path(config, inventory)
    for p in (key, record_lib.metrics_password_path(config, inventory)):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    record = record_lib.serving_record_path(config, inventory)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"api_key_file": str(key), "request": {}}))
    dep = ledger.Deployment("d1", "c1", "f", "img", 1, "fixed")
    files = {f["src"]: f for f in sc.host_files(config, dep, inventory)}
    here, there = sc.files_names(inventory, f"{sc.HOST_STATE}/deployments/c1/d1.inventory.yml")
    assert here != there
    assert files[record]["dest"] == f"serving/{there}.json"
    assert files[key]["dest"] == f"secrets/{there}.api-key"
    assert files[record_lib.metrics_password_path(config, inventory)]["dest"] == f"secrets/{there}.metrics-password"
    (state / "keys" / "c1").mkdir(parents=True)  # where staged() keeps its 0700 copies
    with sc.staged(config, dep, inventory) as staged:
        sent = {f["dest"]: Path(f["src"]).read_text() for f in staged}
    assert json.loads(sent[f"serving/{there}.json"])["api_key_file"] == f"{sc.HOST_STATE}/secrets/{there}.api-key"
    # at `up`, the record on the controller is written again once the services followed: the loop gets their
    # states as they will be (the gateway's, its own), not the ones before this up
    states = {"gateway": {"host": "g1"}, "scaler": {"host": "g1"}}
    with sc.staged(config, dep, inventory, services=states) as staged:
        sent = {f["dest"]: Path(f["src"]).read_text() for f in staged}
    assert json.loads(sent[f"serving/{there}.json"])["services"] == states


def test_a_rollout_pauses_pulls_then_pushes_and_resumes_even_when_it_fails(ctx):
    calls: list[str] = []
    fake = SimpleNamespace(
        name="scaler",
        pause=lambda *_a, **k: calls.append(f"pause by {k['by']}"),
        pull=lambda *_a: calls.append("pull"),
        push=lambda *_a: calls.append("push"),
        resume=lambda *_a: calls.append("resume"),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services_lib, "services", lambda: (fake,))

        def rollout() -> None:
            with services_lib.paused(ctx, Path("d1.yml"), {"scaler": {"host": "s1"}}, by="zenops rollout", reason="r"):
                calls.append("rollout")
                raise RuntimeError("a batch failed")

        with pytest.raises(RuntimeError):
            rollout()
    assert calls == ["pause by zenops rollout", "pull", "rollout", "push", "resume"]


# --- the credential ------------------------------------------------------------------------------------------------


class FakeIdentity:
    def __init__(self) -> None:
        self.made: list[tuple[str, str, dict[str, Any]]] = []
        self.deleted: list[str] = []
        self.creds: list[Any] = [SimpleNamespace(id="old", name="zenops-scaler-d1", description="")]

    def application_credentials(self, _user: str) -> list[Any]:
        return list(self.creds)

    def create_application_credential(self, user: str, name: str, **kw: Any) -> Any:
        self.made.append((user, name, kw))
        return SimpleNamespace(id="new", secret="s3cr3t", expires_at=kw.get("expires_at"))

    def delete_application_credential(self, _user: str, cid: str, ignore_missing: bool) -> None:
        self.deleted.append(cid)


def test_the_credential_is_named_described_restricted_member_only_and_expires_with_the_deployment(monkeypatch):
    ident = FakeIdentity()
    conn = SimpleNamespace(current_user_id="u1", identity=ident)
    monkeypatch.setattr("zenops.cloud.expiry_switch.token_roles", lambda _c: ["admin", "member", "reader"])
    cred = scaler_cred.create(conn, m.Marks("d1", "camp", "2030-01-01T00:00:00Z"))
    assert ident.deleted == ["old"]  # made again: the old one's secret is gone
    [(user, name, kw)] = ident.made
    assert (user, name) == ("u1", "zenops-scaler-d1")
    assert kw["unrestricted"] is False
    assert kw["roles"] == [{"name": "member"}]
    assert kw["expires_at"] == "2030-01-01T01:00:00Z"
    assert kw["description"].startswith("zenops scaling loop; ")
    assert scaler_cred.campaign_of(SimpleNamespace(description=kw["description"])) == "camp"
    assert "s3cr3t" not in repr(cred)
    assert scaler_cred.deployment_of("zenops-scaler-d1") == "d1"
    assert scaler_cred.deployment_of("zenops-expiry-d1.abc") is None
    assert "expires_at" not in scaler_cred.create_kwargs(m.Marks("d1"), None)  # no expiry: `down` deletes it


def test_the_secret_file_is_0600_and_gone_however_the_block_ends(tmp_path):
    cred = scaler_cred.Credential("i", "n", "s3cr3t", None)
    path = tmp_path / "keys" / "n.secret"
    seen: list[tuple[str, int]] = []

    def interrupted() -> None:
        with scaler_cred.secret_file_of(cred, path) as p:
            seen.append((p.read_text(), p.stat().st_mode & 0o777))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert seen == [("s3cr3t", 0o600)]
    assert not path.exists()


# --- the wheelhouse ------------------------------------------------------------------------------------------------


def test_the_wheelhouse_key_changes_with_each_thing_that_changes_its_wheels():
    base = bundle.key("1.0", "abc", ["pyyaml>=6"])
    assert base == bundle.key("1.0", "abc", ["pyyaml>=6"])
    assert len({base, bundle.key("1.1", "abc", ["pyyaml>=6"]), bundle.key("1.0", "abd", ["pyyaml>=6"]),
                bundle.key("1.0", "abc", ["pyyaml>=7"]),
                bundle.key("1.0", "abc", ["pyyaml>=6"], {**bundle.TARGET, "python_version": "3.12"})}) == 5  # fmt: skip


def test_the_pip_commands_build_zenops_and_download_its_requirements_for_the_host(tmp_path):
    wheel, download = bundle.commands("py", tmp_path, ["a>=1"], root=Path("/src/zenops"), version="1.0")
    assert wheel == ["py", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path), "/src/zenops"]
    assert download[:6] == ["py", "-m", "pip", "download", "--dest", str(tmp_path)]
    assert "--only-binary=:all:" in download
    assert download[-1] == "a>=1"
    assert download[download.index("--python-version") + 1] == "3.11"
    released = bundle.commands("py", tmp_path, [], root=None, version="1.0")[0]
    assert released[-1] == "zenops==1.0"


def test_the_wheelhouse_is_built_once_then_taken_from_the_cache_and_a_failure_leaves_nothing(tmp_path):
    argv: list[list[str]] = []

    def run(cmd: list[str], **_kw: Any) -> Any:
        argv.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    w = bundle.ensure(run=run, python="py", root=None, cache=tmp_path)
    assert (w.path / bundle.MARKER).is_file()
    assert [a[3] for a in argv] == ["wheel", "download"]
    assert bundle.ensure(run=run, python="py", root=None, cache=tmp_path) == w
    assert len(argv) == 2  # the cache

    def fails(cmd: list[str], **_kw: Any) -> Any:
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: no matching distribution")

    with pytest.raises(ZenopsError, match="no matching distribution"):
        bundle.ensure(run=fails, python="py", root=None, cache=tmp_path / "other")
    assert list((tmp_path / "other").iterdir()) == []


def test_the_host_gets_the_fleets_public_key_the_loops_up_opens(tmp_path):
    """The loop's scale-out runs `up` (provision's keypair task: openstack.cloud.keypair opens the public key file
    whenever the deployment made its keypair): without the .pub beside the private key, its first scale-out fails."""
    from zenops.config import Config  # noqa: PLC0415
    from zenops.deployment.common import ensure_key  # noqa: PLC0415

    state = tmp_path / "state"
    config = Config(state_dir=state)
    inventory = state / "deployments" / "c1" / "d1.inventory.yml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("all:\n  hosts: {}\n")
    key, pub = ensure_key(state, "c1", "d1")
    dep = ledger.Deployment("d1", "c1", "f", "img", 1, "fixed")
    dep.private_key_file, dep.keypair_created = str(key), True
    dests = {f["src"]: f["dest"] for f in sc.host_files(config, dep, inventory)}
    assert dests[key] == str(key.relative_to(state))
    assert dests[pub] == str(pub.relative_to(state))  # where the host's ensure_key finds it


SANDBOX_CATALOG = {  # the sandbox's: the public endpoints are the controller's view, 127.0.0.1
    ("identity", "public"): "http://127.0.0.1:5000/v3/",
    ("compute", "public"): "http://127.0.0.1:8774/v2.1",
    ("identity", "internal"): "http://172.30.0.1:5000/v3/",
    ("compute", "internal"): "http://172.30.0.1:8774/v2.1",
}


def catalog_conn(catalog: dict[tuple[str, str], str]) -> Any:
    def get_endpoint(*, service_type: str, interface: str, region_name: str | None) -> str:
        return catalog[(service_type, interface)]

    return SimpleNamespace(session=SimpleNamespace(get_endpoint=get_endpoint), config=SimpleNamespace(region_name=""))


def test_the_loops_clouds_yaml_takes_every_api_from_the_interface_its_keystone_came_from(tmp_path):
    """Keystone at its internal address, the SDK's default interface (public) would send every Nova and Neutron call
    of the loop to the catalog's public endpoints: the sandbox's 127.0.0.1, the gateway server itself."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415
    from ansible.template import Templar, trust_as_template  # noqa: PLC0415

    init_plugin_loader()  # the template's lookup('ansible.builtin.file')
    conn = catalog_conn(SANDBOX_CATALOG)
    assert scaler_cred.loop_endpoints(conn)[0] == {"auth_url": "http://172.30.0.1:5000/v3/", "interface": "internal"}
    assert scaler_cred.loop_endpoints(conn, "public")[0] == {
        "auth_url": "http://127.0.0.1:5000/v3/",
        "interface": "public",
    }
    assert scaler_cred.loop_endpoints(catalog_conn({}), "any") == []
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    template = (Path(sc.__file__).parents[4] / "roles" / "scaler" / "templates" / "clouds.yaml.j2").read_text()
    variables = {"scaler_cloud": "sandbox", "ansible_managed": "managed",
                 "scaler_credential": {"id": "ac1", "secret_file": str(secret),
                                       **scaler_cred.loop_endpoints(conn)[0]}}  # fmt: skip
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))
    entry = yaml.safe_load(text)["clouds"]["sandbox"]
    assert entry["interface"] == "internal"
    assert entry["auth"]["auth_url"] == "http://172.30.0.1:5000/v3/"
    assert entry["auth"]["application_credential_secret"] == "s3cret"


def test_the_host_gets_the_gateways_own_inventory_its_services_update_runs_on(tmp_path):
    """With `--gateway-flavor` the serving record's gateway (and metrics) state names the gateway server's inventory:
    the loop's scale-out updates them there (rewritten to the host's state dir), so the host needs that file."""
    from zenops.config import Config  # noqa: PLC0415

    state = tmp_path / "state"
    config = Config(state_dir=state)
    inventory = state / "deployments" / "c1" / "d1.inventory.yml"
    gw = state / "deployments" / "c1" / "d1.gateway.inventory.yml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("all:\n  hosts: {}\n")
    gw.write_text(f"all:\n  hosts:\n    g1:\n      ansible_host: 203.0.113.9\n      zenops_private_address: 10.1.0.9\n"
                  f"      ansible_ssh_private_key_file: {state}/keys/c1/k\n")  # fmt: skip
    dep = ledger.Deployment("d1", "c1", "f", "img", 1, "fixed")
    dep.gateway_inventory = str(gw)
    files = {f["src"]: f for f in sc.host_files(config, dep, inventory)}
    assert files[gw]["dest"] == "deployments/c1/d1.gateway.inventory.yml"
    (state / "keys" / "c1").mkdir(parents=True)
    with sc.staged(config, dep, inventory) as staged:
        sent = {f["dest"]: Path(f["src"]).read_text() for f in staged}
    host = yaml.safe_load(sent["deployments/c1/d1.gateway.inventory.yml"])["all"]["hosts"]["g1"]
    assert host["ansible_host"] == "10.1.0.9"
    assert host["ansible_ssh_private_key_file"] == f"{sc.HOST_STATE}/keys/c1/k"


def test_the_loops_credential_expires_with_the_servers_when_no_expiry_switch_was_armed(ctx, monkeypatch):
    """`up --ttl 2h --expiry-switch off`: no switch record, but the servers carry ``zenops:expires_at`` (what `reap`
    reads): the credential expires with them (+ the margin), not never."""
    from zenops.cloud import ops  # noqa: PLC0415

    made: list[m.Marks] = []

    def create(_conn: Any, marks: m.Marks) -> scaler_cred.Credential:
        made.append(marks)
        return scaler_cred.Credential("ac1", scaler_cred.credential_name(marks.deployment), "s", None)

    servers = [
        SimpleNamespace(metadata={m.EXPIRES_KEY: "2031-01-01T10:00:00Z"}),
        SimpleNamespace(metadata={m.EXPIRES_KEY: "2031-01-01T12:00:00Z"}),
        SimpleNamespace(metadata={}),
    ]
    monkeypatch.setattr(ops, "connect", lambda _c: catalog_conn(SANDBOX_CATALOG))
    monkeypatch.setattr(ops, "owned_servers", lambda _conn, _cloud, deployment: servers if deployment == "d1" else [])
    monkeypatch.setattr(scaler_cred, "create", create)
    dep = ledger.Deployment("d1", "c1", "f", "img", 2, "fixed")  # expiry_switch: None (off)
    s = sc.Scaler(host="s1", deployment="d1", cloud="c1", replicas=Replicas(1, 3))
    (ctx.config.state_dir / "keys" / "c1").mkdir(parents=True, exist_ok=True)
    with sc.cloud_vars(ctx, s, dep):
        pass
    assert made[0].expires_at == "2031-01-01T12:00:00Z"  # the latest, as `up` keeps it
    assert scaler_cred.create_kwargs(made[0], None)["expires_at"] == "2031-01-01T13:00:00Z"  # + the margin
    servers.clear()  # the servers gone: the switch's record, when there is one
    dep.expiry_switch = {"expires_at": "2031-02-01T00:00:00Z"}
    assert scaler_cred.deployment_expiry(catalog_conn({}), dep) == "2031-02-01T00:00:00Z"


def test_an_operator_keypair_outside_the_state_dir_goes_to_the_hosts_keys_and_every_path_names_that_copy(tmp_path):
    """The profile's ``keypair`` with ``private_key_file: ~/.ssh/id_ed25519``: the host gets the key under
    keys/<cloud>/ (0600), and its inventory, its ledger entry and its zenops.yaml's profile (the loop's `up` takes the
    key from there) name that copy, not the operator's home."""
    from zenops.config import Config  # noqa: PLC0415
    from zenops.scaling.inputs import host_config  # noqa: PLC0415

    state = tmp_path / "state"
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("PRIVATE\n")
    config = Config(state_dir=state, clouds={"c1": {"keypair": "mine", "private_key_file": "~/.ssh/id_ed25519"}})
    inventory = state / "deployments" / "c1" / "d1.inventory.yml"
    inventory.parent.mkdir(parents=True)
    host_vars = {
        "ansible_host": "203.0.113.5",
        "ansible_ssh_private_key_file": str(key),
        "zenops_private_address": "10.1.0.7",
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"s1": host_vars}}}))
    dep = ledger.Deployment("d1", "c1", "f", "img", 1, "fixed", keypair="mine", private_key_file=str(key))
    ledger.save(state, dep)
    there = f"{sc.HOST_STATE}/keys/c1/id_ed25519"
    files = {f["src"]: f for f in sc.host_files(config, dep, inventory)}
    assert (files[key]["dest"], files[key]["mode"]) == ("keys/c1/id_ed25519", "0600")
    with sc.staged(config, dep, inventory) as staged:
        sent = {f["dest"]: Path(f["src"]).read_text() for f in staged}
    assert sent["keys/c1/id_ed25519"] == "PRIVATE\n"
    host = yaml.safe_load(sent["deployments/c1/d1.inventory.yml"])["all"]["hosts"]["s1"]
    assert host["ansible_ssh_private_key_file"] == there
    assert json.loads(sent["deployments/c1/d1.json"])["private_key_file"] == there
    profile = yaml.safe_load(host_config(config, sc.profile_overrides(state, dep)))["clouds"]["c1"]
    assert (profile["keypair"], profile["private_key_file"]) == ("mine", there)


def test_the_loops_host_gets_ssh_by_its_fixed_address_and_the_operators_range_stays(ctx, cloud):
    """The loop's scale-out provisions and serves new servers over SSH from the gateway's host: the security group
    opens SSH to that host's fixed address /32 (recorded, so every later `up` keeps it), the operator's range stays as
    recorded (the host's zenops.yaml says it: its `up` would record the host's own address), and the rule goes with
    the loop."""
    from zenops.scaling.inputs import host_config  # noqa: PLC0415

    services_lib.apply(ctx, _view(), {})
    fw = [sp.extravars for sp in ctx.runs.specs if sp.playbook == "firewall"]
    assert len(fw) == 1
    assert (fw[0]["provision_loop_cidr"], fw[0]["provision_loop_ssh"]) == ("10.1.0.7/32", True)
    assert fw[0]["provision_operator_cidr"] == "198.51.100.4/32"
    assert fw[0]["provision_api_to_operator"] is False  # behind the gateway, as recorded
    saved = ledger.load(ctx.config.state_dir, "c1", "d1")
    assert saved is not None
    assert (saved.loop_cidr, saved.operator_cidr) == ("10.1.0.7/32", "198.51.100.4/32")
    profile = yaml.safe_load(host_config(ctx.config, sc.profile_overrides(ctx.config.state_dir, saved)))["clouds"]
    assert profile["c1"]["operator_cidr"] == "198.51.100.4/32"
    from zenops.deployment import provision  # noqa: PLC0415

    kept = provision._up_extravars(ctx.config, ctx.config.cloud_profile("c1"), SimpleNamespace(cloud="c1", count=1,
        flavor="f1", gateway_port=8080), saved, m.Marks("d1"), name="d1", image="i", mode="provider",
        public_key=Path("k.pub"))  # fmt: skip
    assert kept["provision_loop_cidr"] == "10.1.0.7/32"  # the loop's own `up` keeps the rule
    assert kept["provision_interface"] == "public"  # the default; the loop's connection passes its internal
    inside = provision._up_extravars(ctx.config, ctx.config.cloud_profile("c1"), SimpleNamespace(cloud="c1", count=1,
        flavor="f1", gateway_port=8080), saved, m.Marks("d1"), name="d1", image="i", mode="provider",
        public_key=Path("k.pub"), interface="internal")  # fmt: skip
    assert inside["provision_interface"] == "internal"
    ctx.runs.specs.clear()
    sc.remove(ctx, Path("d1.yml"), sc.Scaler.from_dict(services_lib.apply(ctx, _view(), {})["scaler"]))
    fw = [sp.extravars for sp in ctx.runs.specs if sp.playbook == "firewall"]
    assert [(f["provision_loop_cidr"], f["provision_loop_ssh"]) for f in fw] == [("10.1.0.7/32", False)]
    assert ledger.load(ctx.config.state_dir, "c1", "d1").loop_cidr == ""  # type: ignore[union-attr]


def test_the_role_tries_each_keystone_from_the_host_and_keeps_the_first_that_answers(tmp_path):
    """A tenant server of many clouds does not reach the catalog's internal Keystone: the role tries the candidates
    (:func:`scaler_cred.loop_endpoints`, internal first) from the host, and the first that answers is the
    clouds.yaml's."""
    import http.server  # noqa: PLC0415
    import os  # noqa: PLC0415
    import socket  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import threading  # noqa: PLC0415

    assert scaler_cred.loop_endpoints(catalog_conn(SANDBOX_CATALOG)) == [
        {"auth_url": "http://172.30.0.1:5000/v3/", "interface": "internal"},
        {"auth_url": "http://127.0.0.1:5000/v3/", "interface": "public"},
    ]
    with socket.socket() as closed:  # a port nothing listens on: the internal endpoint the host does not reach
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    live = f"http://127.0.0.1:{server.server_address[1]}/"
    role = Path(sc.__file__).parents[4] / "roles" / "scaler"
    cred = {"id": "ac1", "secret_file": "/x", "auth_url": f"http://127.0.0.1:{dead}/", "interface": "internal",
            "endpoints": [{"auth_url": f"http://127.0.0.1:{dead}/", "interface": "internal"},
                          {"auth_url": live, "interface": "public"}]}  # fmt: skip
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"ansible_python_interpreter": sys.executable, "scaler_state": "present",
                      "scaler_deployment": "d1", "scaler_cloud": "c1", "scaler_wheelhouse": "/w",
                      "scaler_reach_timeout": 3,
                      "scaler_credential": cred},
             "tasks": [{"ansible.builtin.include_tasks": str(role / "tasks" / "preflight.yml")},
                       {"ansible.builtin.copy": {"content": "{{ _scaler_endpoint | to_json }}",
                                                 "dest": str(tmp_path / "chosen.json")}}]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    try:
        playbook = [str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml")]
        run = subprocess.run(playbook, env=env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        server.shutdown()
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert json.loads((tmp_path / "chosen.json").read_text()) == {"auth_url": live, "interface": "public"}


def test_the_role_puts_the_loops_configuration_where_zenops_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit's XDG_CONFIG_HOME is scaler_config_dir: the role's copy must land where zenops.config looks (it was
    zenops/zenops.yaml, which zenops never reads: the loop ran without the flavors' prices and the operator range)."""
    import yaml  # noqa: PLC0415

    from zenops import config as config_lib  # noqa: PLC0415

    role = REPO / "roles" / "scaler"
    config_dir = yaml.safe_load((role / "defaults" / "main.yml").read_text())["scaler_config_dir"]
    tasks = yaml.safe_load((role / "tasks" / "configure.yml").read_text())
    (copy,) = [t for t in tasks if t["name"].startswith("Copy the configuration")]
    dest = copy["ansible.builtin.copy"]["dest"].replace("{{ scaler_config_dir }}", config_dir)
    monkeypatch.setenv("XDG_CONFIG_HOME", config_dir)
    assert dest == str(config_lib._user_config())
    unit = (role / "templates" / "zenops-scaler.service.j2").read_text()
    assert "Environment=XDG_CONFIG_HOME={{ scaler_config_dir }}" in unit


def test_a_pull_takes_back_the_facts_of_the_servers_the_loop_added(ctx, cloud):
    """A rollout plans from each server's saved facts: those of a server the loop made are on its host only (the
    sandbox e2e's rollout failed: 'no saved facts for zenops-e2esc-2')."""
    from zenops.facts import facts_path  # noqa: PLC0415

    dep = cloud["dep"]
    servers = [
        {**x, "address": x["fixed_ip"], "id": f"id-{x['name']}"}
        for x in [*dep.servers, {"name": "s3", "fixed_ip": "10.1.0.9"}]
    ]
    there = ledger.Deployment(**{**dep.__dict__, "servers": servers})
    ledger.save(ctx.config.state_dir, there)
    host_ledger = ledger.path(ctx.config.state_dir, "c1", "d1").read_text().replace(str(ctx.config.state_dir),
                                                                                    sc.HOST_STATE)  # fmt: skip
    ledger.save(ctx.config.state_dir, dep)  # this machine's: before the loop added s3
    facts_path(ctx.config, "s1").parent.mkdir(parents=True, exist_ok=True)
    facts_path(ctx.config, "s1").write_text("{}")  # s2's are missing too, and the host has none: left
    ctx.runs.host_files = {"deployments/c1/d1.json": host_ledger, "facts/s3.json": '{"cpu": "s3"}'}
    state = services_lib.apply(ctx, _view(), {})["scaler"]
    ctx.runs.specs.clear()
    written = sc.SERVICE.pull(ctx, Path("d1.yml"), state)
    pulls = [sp.extravars["scaler_pull"] for sp in ctx.runs.specs if sp.extravars.get("zenops_scaler_action") == "pull"]
    assert pulls[-1] == ["facts/s2.json", "facts/s3.json"]  # only what this machine lacks
    assert facts_path(ctx.config, "s3").read_text() == '{"cpu": "s3"}'
    assert facts_path(ctx.config, "s3") in written
    assert not facts_path(ctx.config, "s2").exists()
