"""The dead-man's switch without a cloud: the credential's name, access rules and expiry (zenops.cloud.expiry_switch),
its openstacksdk calls on a stub connection, and the server-side script (roles/expiry_switch/files) run against a
fake Keystone + Nova on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from zenops.cloud import expiry_switch as es
from zenops.cloud import ledger
from zenops.cloud import marks as m

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "expiry_switch" / "files" / "zenops-expiry-switch"
SECRET = "s3cret-not-for-logs"
SERVER = "6f0c1b8e-2a4b-4c8e-9d1f-000000000001"


# --- pure parts -----------------------------------------------------------------------------------------------------


def test_credential_name_round_trip() -> None:
    assert es.credential_name("bench-a", SERVER) == f"zenops-expiry-bench-a.{SERVER}"  # one per server
    assert es.deployment_of(f"zenops-expiry-bench-a.{SERVER}") == "bench-a"
    assert es.deployment_of("zenops-expiry-bench-a") == "bench-a"  # an older zenops's, one per deployment
    with pytest.raises(ValueError, match="expected a Nova id"):
        es.credential_name("bench-a", "")
    with pytest.raises(ValueError, match="expected a Nova id"):
        es.credential_name("bench-a", "x.y")
    assert es.deployment_of("zenops-expiry-") is None
    assert es.deployment_of("zenops-expiry-Not_A_Name") is None
    assert es.deployment_of("my-own-credential") is None
    assert es.deployment_of(None) is None


def test_access_rules_delete_only_each_server_once() -> None:
    rules = es.access_rules(["b", "a", "b"], "http://127.0.0.1:8774/v2.1/")
    assert rules == [
        {"service": "compute", "method": "DELETE", "path": "/v2.1/servers/a"},
        {"service": "compute", "method": "DELETE", "path": "/v2.1/servers/b"},
    ]
    # an endpoint behind a path prefix keeps it (the API sees the whole path)
    assert es.access_rules(["a"], "https://cloud.example/compute/v2.1")[0]["path"] == "/compute/v2.1/servers/a"


@pytest.mark.parametrize(
    "url", ["http://h:8774/v2.1/0123456789abcdef", "http://h:8774/v2/%(tenant_id)s", "http://h:8774/"]
)
def test_access_rules_refuse_endpoints_with_a_project(url: str) -> None:
    with pytest.raises(ValueError, match=r"expected a path ending in /v2\.1"):
        es.access_rules(["a"], url)


def test_access_rules_need_a_server() -> None:
    with pytest.raises(ValueError, match="at least one"):
        es.access_rules([], "http://h:8774/v2.1")


def test_credential_expiry_adds_the_margin() -> None:
    assert es.credential_expiry("2026-11-24T15:00:00Z") == "2026-11-24T16:00:00Z"
    assert es.credential_expiry("2026-11-24T15:00:00Z", margin_s=90) == "2026-11-24T15:01:30Z"
    assert es.credential_expiry("2026-11-24T15:00:00+01:00", margin_s=0) == "2026-11-24T14:00:00Z"
    with pytest.raises(ValueError, match="not an ISO-8601"):
        es.credential_expiry("tomorrow")


def test_description_carries_the_marks_and_the_repr_hides_the_secret() -> None:
    assert es.description(m.Marks("d1", "c1")) == "zenops expiry switch; zenops zenops:deployment=d1 zenops:campaign=c1"
    cred = es.Credential("id1", "zenops-expiry-d1", SECRET, "2026-11-24T16:00:00Z", [])
    assert SECRET not in repr(cred)
    assert SECRET not in str(cred)


# --- openstacksdk calls on a stub -----------------------------------------------------------------------------------


class StubIdentity:
    def __init__(self, existing: list[str]) -> None:
        self.creds = [SimpleNamespace(id=f"id-{n}", name=n) for n in existing]
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def application_credentials(self, user: str) -> list[Any]:
        assert user == "u1"
        return list(self.creds)

    def delete_application_credential(self, user: str, cred_id: str, ignore_missing: bool = True) -> None:
        self.deleted.append(cred_id)
        self.creds = [c for c in self.creds if c.id != cred_id]

    def create_application_credential(self, user: str, name: str, **attrs: Any) -> Any:
        self.created.append({"user": user, "name": name, **attrs})
        made = SimpleNamespace(
            id=f"new-{len(self.created)}", name=name, secret=SECRET, expires_at=attrs["expires_at"] + ""
        )
        self.creds.append(made)
        return made


def stub_conn(existing: list[str]) -> Any:
    compute = SimpleNamespace(get_endpoint=lambda: "http://127.0.0.1:8774/v2.1")
    return SimpleNamespace(current_user_id="u1", identity=StubIdentity(existing), compute=compute)


def test_create_makes_one_servers_credential_replacing_that_servers_only() -> None:
    conn = stub_conn(["zenops-expiry-d1.s1", "zenops-expiry-d1.s2", "zenops-expiry-d2.s1", "mine"])
    cred = es.create(conn, m.Marks("d1"), "s1", expires_at="2026-11-24T15:00:00Z", margin_s=600)
    assert conn.identity.deleted == ["id-zenops-expiry-d1.s1"]  # its sibling's and other deployments' stay
    (made,) = conn.identity.created
    assert made["name"] == "zenops-expiry-d1.s1"
    assert made["unrestricted"] is False
    assert made["expires_at"] == "2026-11-24T15:10:00Z"
    # DELETE of this server, nothing else: a server holding it cannot delete a sibling
    assert made["access_rules"] == [{"service": "compute", "method": "DELETE", "path": "/v2.1/servers/s1"}]
    assert cred.id == "new-1"
    assert cred.secret == SECRET


def test_owned_and_delete_touch_zenops_credentials_only() -> None:
    conn = stub_conn(["zenops-expiry-d1", "zenops-expiry-d2", "mine", "zenops-d1"])
    assert [c.name for c in es.owned(conn)] == ["zenops-expiry-d1", "zenops-expiry-d2"]
    assert [c.name for c in es.owned(conn, deployment="d2")] == ["zenops-expiry-d2"]
    assert es.delete(conn, deployment="d2") == ["zenops-expiry-d2"]
    assert es.delete(conn) == ["zenops-expiry-d1"]
    assert [c.name for c in conn.identity.creds] == ["mine", "zenops-d1"]


def test_listed_is_empty_where_keystone_forbids_listing() -> None:
    from openstack import exceptions as sdk  # noqa: PLC0415

    conn = stub_conn(["zenops-expiry-d1"])

    def forbidden(user: str) -> list[Any]:
        raise sdk.ForbiddenException("policy does not allow identity:list_application_credentials")

    conn.identity.application_credentials = forbidden
    assert es.listed(conn, "c") == []


def test_listed_described_and_removed_as_down_shows_them() -> None:
    conn = stub_conn(["zenops-expiry-d1", "other"])
    (cred,) = es.listed(conn, "c")
    said: list[str] = []
    removed = es.remove(conn, [cred], progress=said.append)
    assert removed == [
        {
            "kind": "application_credential",
            "id": "id-zenops-expiry-d1",
            "name": "zenops-expiry-d1",
            "deployment": "d1",
            "campaign": None,
        }
    ]
    assert said == ["deleting application_credential zenops-expiry-d1"]
    assert es.listed(conn, "c") == []


# --- the server-side script against a fake Keystone + Nova ----------------------------------------------------------


class FakeCloud:
    """Keystone (POST /v3/auth/tokens) and Nova (DELETE /v2.1/servers/<id>) on one port; records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.keystone_status = 201
        self.nova_status = 204
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
                raw = json.dumps(body or {}).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                cloud.requests.append({"method": "POST", "path": self.path, "body": body})
                catalog = [
                    {
                        "type": "compute",
                        "endpoints": [
                            {"interface": "public", "region_id": "RegionOne", "url": f"{cloud.url}/v2.1"},
                            {"interface": "internal", "region_id": "RegionOne", "url": "http://unused.invalid/v2.1"},
                        ],
                    }
                ]
                if cloud.keystone_status != 201:
                    self._reply(cloud.keystone_status)
                else:
                    self._reply(201, {"token": {"catalog": catalog}}, {"X-Subject-Token": "tok-123"})

            def do_DELETE(self) -> None:
                cloud.requests.append(
                    {"method": "DELETE", "path": self.path, "token": self.headers.get("X-Auth-Token")}
                )
                self._reply(cloud.nova_status)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    c = FakeCloud()
    c.thread.start()
    try:
        yield c
    finally:
        c.server.shutdown()
        c.server.server_close()


def write_conf(tmp_path: Path, cloud: FakeCloud, **over: Any) -> Path:
    conf = {
        "auth_url": f"{cloud.url}/v3",
        "credential_id": "cred-1",
        "credential_secret": SECRET,
        "server_id": SERVER,
        "expires_at": "2020-01-01T00:00:00Z",
        "compute_url": "",
        "interface": "public",
        "region": "RegionOne",
        **over,
    }
    path = tmp_path / "credential.json"
    path.write_text(json.dumps(conf))
    path.chmod(0o600)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=60, env=env
    )


def test_expired_server_is_deleted_through_the_catalogs_endpoint(cloud: FakeCloud, tmp_path: Path) -> None:
    res = run(str(write_conf(tmp_path, cloud)))
    assert res.returncode == 0, res.stderr
    assert "deletion accepted" in res.stdout
    post, delete = cloud.requests
    assert post["path"] == "/v3/auth/tokens"
    ident = post["body"]["auth"]["identity"]
    assert ident["methods"] == ["application_credential"]
    assert ident["application_credential"] == {"id": "cred-1", "secret": SECRET}
    assert delete == {"method": "DELETE", "path": f"/v2.1/servers/{SERVER}", "token": "tok-123"}
    assert SECRET not in res.stdout + res.stderr


def test_given_compute_url_wins_and_gone_already_is_success(cloud: FakeCloud, tmp_path: Path) -> None:
    cloud.nova_status = 404
    res = run(str(write_conf(tmp_path, cloud, auth_url=cloud.url, compute_url=f"{cloud.url}/v2.1/")))
    assert res.returncode == 0, res.stderr
    assert "gone already" in res.stdout
    assert [r["path"] for r in cloud.requests] == ["/v3/auth/tokens", f"/v2.1/servers/{SERVER}"]


def test_not_yet_expired_sends_nothing(cloud: FakeCloud, tmp_path: Path) -> None:
    res = run(str(write_conf(tmp_path, cloud, expires_at="2999-01-01T00:00:00Z")))
    assert res.returncode == 0, res.stderr
    assert "not yet, nothing done" in res.stdout
    assert cloud.requests == []


def test_check_authenticates_and_deletes_nothing(cloud: FakeCloud, tmp_path: Path) -> None:
    res = run("--check", str(write_conf(tmp_path, cloud, expires_at="2999-01-01T00:00:00Z")))
    assert res.returncode == 0, res.stderr
    assert "the credential authenticates" in res.stdout
    assert [r["method"] for r in cloud.requests] == ["POST"]


@pytest.mark.parametrize(("keystone", "nova", "said"), [(401, 204, "Keystone refused"), (201, 401, "Nova refused")])
def test_refusals_fail_for_systemd_to_retry(
    cloud: FakeCloud, tmp_path: Path, keystone: int, nova: int, said: str
) -> None:
    cloud.keystone_status, cloud.nova_status = keystone, nova
    res = run(str(write_conf(tmp_path, cloud)))
    assert res.returncode == 1
    assert said in res.stderr
    assert SECRET not in res.stdout + res.stderr


def test_unreachable_api_fails(tmp_path: Path, cloud: FakeCloud) -> None:
    path = write_conf(tmp_path, cloud, auth_url="http://127.0.0.1:9/v3")
    res = run(str(path))
    assert res.returncode == 1
    assert "POST http://127.0.0.1:9/v3/auth/tokens" in res.stderr


def test_a_file_others_can_read_is_refused(cloud: FakeCloud, tmp_path: Path) -> None:
    path = write_conf(tmp_path, cloud)
    path.chmod(0o640)
    res = run(str(path))
    assert res.returncode == 1
    assert "readable by others (mode 0640)" in res.stderr
    assert cloud.requests == []


def test_missing_keys_are_named(cloud: FakeCloud, tmp_path: Path) -> None:
    res = run(str(write_conf(tmp_path, cloud, server_id="", credential_secret="")))
    assert res.returncode == 1
    assert "lacks credential_secret, server_id" in res.stderr


# --- the role's interface -------------------------------------------------------------------------------------------


def test_role_defaults_match_its_argument_specs() -> None:
    role = REPO / "roles" / "expiry_switch"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name
    assert options["expiry_switch_credential_secret"]["no_log"] is True


def test_credential_file_task_is_no_log() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "expiry_switch" / "tasks" / "configure.yml").read_text())
    (write,) = [t for t in tasks if t["name"] == "Write the credential file"]
    assert write["no_log"] is True
    assert write["diff"] is False
    assert write["ansible.builtin.copy"]["mode"] == "0600"


# --- arming (zenops up --ttl): the decisions before any playbook runs, on a stubbed SDK connection ------------------


class StubSession:
    """The keystoneauth session's catalog lookup: (service_type, interface) -> URL; absent -> raises, as it does."""

    def __init__(self, catalog: dict[tuple[str, str], str]) -> None:
        self.catalog = catalog

    def get_endpoint(self, *, service_type: str, interface: str, region_name: str | None) -> str:
        try:
            return self.catalog[(service_type, interface)]
        except KeyError:
            raise LookupError(f"no {service_type} {interface}") from None


def catalog_conn(catalog: dict[tuple[str, str], str]) -> Any:
    conn = stub_conn([])
    conn.session = StubSession(catalog)
    conn.config = SimpleNamespace(region_name="RegionOne")
    return conn


SANDBOX_CATALOG = {
    ("identity", "public"): "http://127.0.0.1:5000/v3/",
    ("compute", "public"): "http://127.0.0.1:8774/v2.1",
    ("identity", "internal"): "http://172.30.0.1:5000/v3/",
    ("compute", "internal"): "http://172.30.0.1:8774/v2.1",
}


def test_server_endpoints_internal_first_then_public_distinct() -> None:
    conn = catalog_conn(SANDBOX_CATALOG)
    assert es.server_endpoints(conn) == [
        {"auth_url": "http://172.30.0.1:5000/v3/", "compute_url": "http://172.30.0.1:8774/v2.1"},
        {"auth_url": "http://127.0.0.1:5000/v3/", "compute_url": "http://127.0.0.1:8774/v2.1"},
    ]
    assert es.server_endpoints(conn, "public") == [
        {"auth_url": "http://127.0.0.1:5000/v3/", "compute_url": "http://127.0.0.1:8774/v2.1"}
    ]
    same = {k: v for k, v in SANDBOX_CATALOG.items() if k[1] == "public"}
    same |= {
        ("identity", "internal"): same[("identity", "public")],
        ("compute", "internal"): same[("compute", "public")],
    }
    assert len(es.server_endpoints(catalog_conn(same))) == 1  # one candidate when both interfaces are the same
    assert es.server_endpoints(catalog_conn({("identity", "internal"): "http://k"}), "internal") == []


class NoRuns:
    """A RunContext whose playbook runs fail the test: the decisions below must be taken before any run."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.config = SimpleNamespace(state_dir=Path("/nonexistent"))
        self.verbosity = 0

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def run(self, spec: Any) -> Any:
        raise AssertionError(f"no playbook should run: {spec}")


def soon(seconds: int) -> str:
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    return m.format_expiry(datetime.now(UTC) + timedelta(seconds=seconds))


def test_arm_does_nothing_off_or_without_an_expiry() -> None:
    ctx, conn = NoRuns(), catalog_conn(SANDBOX_CATALOG)
    args = {"cloud": "c", "servers": [{"id": "s1"}], "inventory": Path("i.yml")}
    assert es.arm(ctx, conn, marks=m.Marks("d1", expires_at=soon(3600)), mode="off", **args) is None  # type: ignore[arg-type]
    assert es.arm(ctx, conn, marks=m.Marks("d1"), **args) is None  # type: ignore[arg-type]
    assert conn.identity.created == []
    assert ctx.warnings == []


def test_arm_too_close_to_the_expiry_or_without_endpoints_says_so_or_refuses_when_required() -> None:
    from zenops.cloud.errors import CloudError  # noqa: PLC0415

    ctx = NoRuns()
    args = {"cloud": "c", "servers": [{"id": "s1"}], "inventory": Path("i.yml")}
    near = es.arm(ctx, catalog_conn(SANDBOX_CATALOG), marks=m.Marks("d1", expires_at=soon(20)), **args)  # type: ignore[arg-type]
    assert near is not None
    assert near.servers == []
    assert "too soon" in near.why_not
    empty = catalog_conn({})
    none = es.arm(ctx, empty, marks=m.Marks("d1", expires_at=soon(3600)), **args)  # type: ignore[arg-type]
    assert none is not None
    assert "no identity and compute endpoints" in none.why_not
    assert len(ctx.warnings) == 2
    assert all("zenops reap --cloud c" in w for w in ctx.warnings)
    with pytest.raises(CloudError, match="no expiry switch on d1"):
        es.arm(ctx, empty, marks=m.Marks("d1", expires_at=soon(3600)), mode="required", **args)  # type: ignore[arg-type]
    assert empty.identity.created == []  # no credential made for a switch that cannot be armed


def test_cloud_profile_reads_the_switch_mode_and_yamls_bare_off(tmp_path: Path) -> None:
    from zenops.config import ConfigError, load  # noqa: PLC0415

    f = tmp_path / "z.yaml"
    f.write_text("clouds:\n  a: {expiry_switch: off}\n  b: {expiry_switch: required, api_interface: internal}\n")
    config = load(f)
    assert config.cloud_profile("a").expiry_switch == "off"
    b, c = config.cloud_profile("b"), config.cloud_profile("c")
    assert (b.expiry_switch, b.api_interface) == ("required", "internal")
    assert (c.expiry_switch, c.api_interface) == ("auto", "any")
    f.write_text("clouds:\n  a: {expiry_switch: always}\n")
    with pytest.raises(ConfigError, match="must be one of auto, required, off"):
        load(f)


def test_a_credentials_campaign_is_read_back_from_its_description() -> None:
    marks = m.Marks("d1", "sweep-2611241200")
    made = SimpleNamespace(id="i", name="zenops-expiry-d1", description=es.description(marks))
    assert es.campaign_of(made) == "sweep-2611241200"
    assert es.describe(made)["campaign"] == "sweep-2611241200"
    assert es.describe(made)["deployment"] == "d1"
    assert es.campaign_of(SimpleNamespace(description=es.description(m.Marks("d1")))) is None
    assert es.campaign_of(SimpleNamespace(description="someone's zenops:campaign=x")) is None  # not ours
    assert es.campaign_of(SimpleNamespace(name="x")) is None


class ArmingRuns(NoRuns):
    """A RunContext whose playbook run arms the hosts ``armed`` (the facts the real play reports)."""

    def __init__(self, state_dir: Path, armed: list[str]) -> None:
        super().__init__()
        self.config = SimpleNamespace(state_dir=state_dir)
        self.armed = armed
        self.specs: list[Any] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def run(self, spec: Any) -> Any:
        self.specs.append(spec)
        for entry in spec.extravars["zenops_expiry_credentials"].values():  # each secret a 0600 file of its own
            assert Path(entry["secret_file"]).read_text() == SECRET
            assert Path(entry["secret_file"]).stat().st_mode & 0o777 == 0o600
        facts = {h: {"zenops_expiry_switch": {"armed": h in self.armed, "auth_url": "http://k"}} for h in
                 spec.extravars["zenops_expiry_credentials"]}  # fmt: skip
        return SimpleNamespace(host_facts=facts)


def test_arm_gives_each_server_its_own_credential_and_drops_those_not_armed(tmp_path: Path) -> None:
    conn = catalog_conn(SANDBOX_CATALOG)
    conn.identity.creds = [SimpleNamespace(id="old", name="zenops-expiry-d1")]  # an older zenops's, shared
    ctx = ArmingRuns(tmp_path, armed=["zenops-d1-1", "zenops-d1-2"])
    servers = [{"name": f"zenops-d1-{i}", "id": f"s{i}"} for i in (1, 2, 3)]
    got = es.arm(ctx, conn, cloud="c", marks=m.Marks("d1", expires_at=soon(3600)), servers=servers,
                 inventory=Path("i.yml"))  # type: ignore[arg-type]  # fmt: skip
    assert got is not None
    assert got.servers == ["zenops-d1-1", "zenops-d1-2"]
    made = conn.identity.created
    assert [c["name"] for c in made] == [f"zenops-expiry-d1.s{i}" for i in (1, 2, 3)]
    assert [[r["path"] for r in c["access_rules"]] for c in made] == [[f"/v2.1/servers/s{i}"] for i in (1, 2, 3)]
    creds = ctx.specs[0].extravars["zenops_expiry_credentials"]
    assert {h: v["id"] for h, v in creds.items()} == {f"zenops-d1-{i}": f"new-{i}" for i in (1, 2, 3)}
    assert "expiry_switch_credential_id" not in ctx.specs[0].extravars  # per host, not one for all
    assert SECRET not in json.dumps(ctx.specs[0].extravars)
    # the shared one of before is gone, and so is the credential of the server whose switch was not armed
    assert sorted(c.name for c in conn.identity.creds) == ["zenops-expiry-d1.s1", "zenops-expiry-d1.s2"]
    assert not list(tmp_path.rglob("*.secret"))
    assert ctx.warnings == ["expiry switch armed on 2 of 3 server(s) only: the others reach no API"]


class FailingRuns(NoRuns):
    """A RunContext whose playbook run fails the way a host the role refuses makes it fail (the real error type)."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__()
        self.config = SimpleNamespace(state_dir=state_dir)
        self.specs: list[Any] = []

    def run(self, spec: Any) -> Any:
        from zenops.errors import HostFailure, RunFailedError  # noqa: PLC0415

        self.specs.append(spec)
        (entry,) = spec.extravars["zenops_expiry_credentials"].values()
        secret = Path(entry["secret_file"])
        assert secret.read_text() == SECRET  # the secret reaches Ansible as a 0600 file, never as a variable
        assert secret.stat().st_mode & 0o777 == 0o600
        raise RunFailedError("expiry_switch.yml", [HostFailure("h1", "Assert a supported distribution", "Alpine")])


def test_arm_a_failed_install_costs_the_switch_in_auto_and_the_deployment_when_required(tmp_path: Path) -> None:
    from zenops.errors import RunFailedError  # noqa: PLC0415

    ctx = FailingRuns(tmp_path)
    conn = catalog_conn(SANDBOX_CATALOG)
    args = {"cloud": "c", "servers": [{"id": "s1"}], "inventory": Path("i.yml")}
    got = es.arm(ctx, conn, marks=m.Marks("d1", expires_at=soon(3600)), **args)  # type: ignore[arg-type]
    assert got is not None
    assert got.servers == []
    assert "installing it failed" in got.why_not
    assert len(conn.identity.created) == 1
    assert conn.identity.creds == []  # deleted again: no switch, no credential
    assert SECRET not in json.dumps(ctx.specs[0].extravars)
    assert not list(tmp_path.rglob("*.secret"))  # deleted after the run
    assert ctx.warnings
    with pytest.raises(RunFailedError):
        es.arm(ctx, conn, marks=m.Marks("d1", expires_at=soon(3600)), mode="required", **args)  # type: ignore[arg-type]
    assert not list(tmp_path.rglob("*.secret"))


def test_status_column_says_who_removes_an_expiring_server() -> None:
    from zenops.cli.status import _expires  # noqa: PLC0415

    assert _expires(None, None) == "-"
    assert _expires("2026-11-24T19:52:00Z", {"servers": ["h1"], "why_not": ""}) == "2026-11-24T19:52:00Z, switch"
    assert _expires("2026-11-24T19:52:00Z", {"servers": [], "why_not": "no API"}) == "2026-11-24T19:52:00Z, reap"
    assert _expires("2026-11-24T19:52:00Z", None) == "2026-11-24T19:52:00Z, reap"  # from before the switch


# --- the credential's roles, and its secret file on every way out (issue 46 N8) ------------------------------------


def with_token_roles(conn: Any, roles: list[str]) -> Any:
    """The stub connection's session answering the token's role names as keystoneauth's AccessInfo does."""
    access = SimpleNamespace(role_names=roles)
    conn.session = SimpleNamespace(auth=SimpleNamespace(get_access=lambda _session: access))
    return conn


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (["admin", "member", "reader"], [{"name": "member"}]),  # not admin: Nova's delete needs a member only
        (["_member_", "heat_stack_owner"], [{"name": "_member_"}]),
        (["Member", "admin"], [{"name": "Member"}]),  # spelled as the cloud spells it
        (["operator"], None),  # no member role known: Keystone's default (the access rule still restricts it)
        ([], None),
    ],
)
def test_switch_roles_are_the_member_role_only(token: list[str], expected: Any) -> None:
    assert es.switch_roles(token) == expected


def test_create_asks_keystone_for_the_member_role_only() -> None:
    conn = with_token_roles(stub_conn([]), ["admin", "member", "reader"])
    es.create(conn, m.Marks("d1"), "s1", expires_at="2026-11-24T15:00:00Z")
    (made,) = conn.identity.created
    assert made["roles"] == [{"name": "member"}]
    conn = with_token_roles(stub_conn([]), ["operator"])
    es.create(conn, m.Marks("d1"), "s1", expires_at="2026-11-24T15:00:00Z")
    assert "roles" not in conn.identity.created[-1]  # Keystone's default: no role named that it may refuse


class InterruptedRuns(ArmingRuns):
    """A RunContext whose playbook run is interrupted: Ctrl-C, or SIGTERM, which zenops's main turns into the same
    KeyboardInterrupt (zenops.cli.main._Terminated)."""

    def run(self, spec: Any) -> Any:
        super().run(spec)  # the secrets are there while the play runs
        raise KeyboardInterrupt


def test_an_interrupted_arm_leaves_no_secret_file(tmp_path: Path) -> None:
    ctx = InterruptedRuns(tmp_path, armed=[])
    conn = catalog_conn(SANDBOX_CATALOG)
    servers = [{"name": f"zenops-d1-{i}", "id": f"s{i}"} for i in (1, 2)]
    with pytest.raises(KeyboardInterrupt):
        es.arm(ctx, conn, cloud="c", marks=m.Marks("d1", expires_at=soon(3600)), servers=servers,
               inventory=Path("i.yml"))  # type: ignore[arg-type]  # fmt: skip
    assert len(ctx.specs) == 1
    assert not list(tmp_path.rglob("*.secret"))


def test_a_secret_write_interrupted_halfway_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file exists from os.open on: Ctrl-C (or a full disk) while its secret is written must not leave it."""
    real_fdopen = os.fdopen

    class Interrupted:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, _text: str) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(es.os, "fdopen", lambda fd, mode: Interrupted(real_fdopen(fd, mode)))
    ctx = ArmingRuns(tmp_path, armed=[])
    with pytest.raises(KeyboardInterrupt):
        es.arm(ctx, catalog_conn(SANDBOX_CATALOG), cloud="c", marks=m.Marks("d1", expires_at=soon(3600)),
               servers=[{"name": "zenops-d1-1", "id": "s1"}], inventory=Path("i.yml"))  # type: ignore[arg-type]  # fmt: skip
    assert ctx.specs == []
    assert not list(tmp_path.rglob("*.secret"))


def test_the_next_arm_removes_the_secret_files_a_killed_run_left(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the files of that run (a server since replaced: another id) stay until the next
    `up` of the deployment arms its switch again; another deployment's are not touched."""
    keys = ledger.keys_dir(tmp_path, "c")
    stale = keys / f"{es.credential_name('d1', 'gone-server')}.secret"
    other = keys / f"{es.credential_name('d10', 's1')}.secret"
    for p in (stale, other):
        p.write_text(SECRET)
    ctx = ArmingRuns(tmp_path, armed=["zenops-d1-1"])
    es.arm(ctx, catalog_conn(SANDBOX_CATALOG), cloud="c", marks=m.Marks("d1", expires_at=soon(3600)),
           servers=[{"name": "zenops-d1-1", "id": "s1"}], inventory=Path("i.yml"))  # type: ignore[arg-type]  # fmt: skip
    assert not stale.exists()
    assert other.exists()
    assert any("a killed run left" in n for n in ctx.notes)


def test_down_forgets_the_secret_files_a_killed_run_left(tmp_path: Path) -> None:
    from zenops.deployment import teardown  # noqa: PLC0415

    keys = ledger.keys_dir(tmp_path, "c")
    stale = keys / f"{es.credential_name('d1', 's1')}.secret"
    stale.write_text(SECRET)
    dep = ledger.Deployment("d1", "c", "f1", "debian-12", 1, "provider")
    config = SimpleNamespace(state_dir=tmp_path, cloud_profile=lambda _c: SimpleNamespace(keypair=""))
    teardown._forget_all(config, "c", [dep], [], keep_secrets=True, note=lambda _t: None)  # type: ignore[arg-type]
    assert not stale.exists()


# --- the scaling loop's connection: a restricted application credential ---------------------------------------------


def with_token(conn: Any, token: dict[str, Any]) -> Any:
    """The stub connection's session answering keystoneauth's own AccessInfo of a Keystone token body."""
    from keystoneauth1.access import AccessInfoV3  # noqa: PLC0415

    access = AccessInfoV3({"token": token}, auth_token="t")
    conn.session.auth = SimpleNamespace(get_access=lambda _session: access)
    return conn


LOOP_TOKEN = {"roles": [{"name": "member"}], "application_credential": {"id": "a1", "name": "zenops-scaler-d1",
              "restricted": True}}  # fmt: skip


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_the_loops_restricted_credential_arms_nothing_and_keeps_the_switches_armed_before(mode: str) -> None:
    # Keystone refuses a restricted application credential every credential call (403 on list-then-delete in
    # _start_over, then on create): the loop's scale-out must not fail after its servers are made, nor delete the
    # switches of the servers it has
    conn = with_token(catalog_conn(SANDBOX_CATALOG), LOOP_TOKEN)
    conn.identity.creds = [SimpleNamespace(id="old", name="zenops-expiry-d1.s1")]
    ctx = NoRuns()
    got = es.arm(ctx, conn, cloud="c", marks=m.Marks("d1", expires_at=soon(3600)), mode=mode,
                 servers=[{"name": "zenops-d1-1", "id": "s1"}, {"name": "zenops-d1-2", "id": "s2"}],
                 inventory=Path("i.yml"))  # type: ignore[arg-type]  # fmt: skip
    assert got is None
    assert conn.identity.created == []
    assert conn.identity.deleted == []
    assert [c.name for c in conn.identity.creds] == ["zenops-expiry-d1.s1"]
    (warning,) = ctx.warnings
    assert "restricted application credential" in warning


def test_restricted_credential_is_read_from_the_token() -> None:
    assert es.restricted_credential(with_token(catalog_conn(SANDBOX_CATALOG), LOOP_TOKEN))
    unrestricted = {**LOOP_TOKEN, "application_credential": {"id": "a1", "name": "ops", "restricted": False}}
    assert not es.restricted_credential(with_token(catalog_conn(SANDBOX_CATALOG), unrestricted))
    assert not es.restricted_credential(with_token(catalog_conn(SANDBOX_CATALOG), {"roles": []}))  # a password's
    assert not es.restricted_credential(stub_conn([]))  # no session to ask
