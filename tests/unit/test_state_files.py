"""State survives crashes (issue 23, item 9) and `down` forgets the deployment's API key (item 12).

* One writer for every JSON state file (zenops.statefile): a temp file in the same directory, flushed and fsynced,
  renamed, the directory fsynced; a write that fails half-way leaves the old file and no temp file.
* A damaged file (truncated by a crash, not JSON) is a warning naming it on stderr, never a traceback: `zenops status`,
  `down` and `leaks` go on with one truncated ledger file; the rollout history skips a partial last line; the campaign
  store lists a damaged campaign (its servers may still run) instead of hiding it.
* `zenops down` (a cloud deployment, or --inventory) removes the API key file zenops generated; --keep-secrets keeps it.

The cloud is a small stand-in for the openstacksdk calls `down` and `leaks` make (zenops.cloud.ops), Ansible runs are
faked (RunContext.run): every command runs through Click's CliRunner with the test's own XDG state dir.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result

from zenops.campaign.state import CampaignState, Store, new_id
from zenops.cli.main import cli
from zenops.cloud import expiry_switch, ledger, ops
from zenops.cloud.errors import CloudError
from zenops.config import Config, load
from zenops.context import RunContext
from zenops.deployment.common import inventory_path, write_inventory
from zenops.deployment.identity import inventory_name
from zenops.deployment.record import ServingRecord, ensure_metrics_password, save_serving_record, serving_record_path
from zenops.deployment.rollouts import Ledger, RolloutState
from zenops.errors import ZenopsError
from zenops.facts import facts_path, save_facts, saved_facts
from zenops.runner import HostStats, RunResult
from zenops.serve import ensure_api_key

CLOUD = "fakecloud"


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("COLUMNS", "250")
    return load()  # the state dir under this test's XDG_STATE_HOME (tests/conftest.py)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def deployment(name: str, **kw: Any) -> ledger.Deployment:
    return ledger.Deployment(
        name=name, cloud=CLOUD, flavor="gp.1", image="debian-12", count=1, network_mode="provider", **kw
    )


def truncate(path: Path) -> Path:
    """What a crash half-way through a plain write leaves: the first half of the file."""
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    return path


def no_traceback(r: Result) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


# --- the one writer ---------------------------------------------------------------------------------------------


@pytest.fixture
def io_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """In order: ("fsync", (device, inode)) of every fsync, ("rename", (source, target)) of every rename."""
    seen: list[tuple[str, Any]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        seen.append(("fsync", (st.st_dev, st.st_ino)))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        seen.append(("rename", (Path(src), Path(dst))))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return seen


def _ident(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _writers(config: Config, tmp_path: Path) -> dict[str, Any]:
    """Every writer of zenops's state, each a callable writing its file and returning its path."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    dep = deployment("demo", servers=[{"name": "zenops-demo-1", "address": "192.0.2.1", "id": "s1"}])
    rollout = Ledger(config, "hosts-1234")
    state = CampaignState(
        id="c-1", name="c", spec_path="c.yaml", spec_digest="d", created_at="2026-01-01T00:00:00+00:00"
    )

    def rollout_state() -> Path:
        rollout.save(RolloutState("r1", "hosts", str(inv), {}, {}, {}, []))
        return rollout.state_path

    def history() -> Path:
        rollout.event("r1", "started")
        return rollout.history_path

    def campaign() -> Path:
        Store(config).save(state)
        return Store(config).dir("c-1") / "state.json"

    def serving() -> Path:
        save_serving_record(config, inv, ServingRecord(inventory=str(inv)))
        return serving_record_path(config, inv)

    return {
        "ledger": lambda: ledger.save(config.state_dir, dep),
        "inventory": lambda: write_inventory(config.state_dir, dep, "debian"),
        "rollout state": rollout_state,
        "rollout history": history,
        "campaign": campaign,
        "serving record": serving,
        "facts": lambda: save_facts(config, "h1", {"schema": 1}),
        "api key": lambda: ensure_api_key(config, inv, None),
    }


WRITERS = [
    "ledger",
    "inventory",
    "rollout state",
    "rollout history",
    "campaign",
    "serving record",
    "facts",
    "api key",
]


@pytest.mark.parametrize("which", WRITERS)
def test_every_state_writer_fsyncs_the_file_renames_it_then_fsyncs_its_directory(config, tmp_path, io_events, which):
    path = _writers(config, tmp_path)[which]()
    file_synced = ("fsync", _ident(path))
    dir_synced = ("fsync", _ident(path.parent))
    assert file_synced in io_events, f"{which}: {path} was not fsynced"
    assert dir_synced in io_events, f"{which}: the directory of {path} was not fsynced"
    renames = [i for i, (kind, (_src, dst)) in enumerate(io_events) if kind == "rename" and dst == path]
    if which != "rollout history":  # appended: no rename
        assert renames, f"{which}: {path} was not renamed into place"
        [(_kind, (src, _dst))] = [io_events[i] for i in renames]
        assert src.parent == path.parent  # a temp file in the same directory: the rename is atomic
        assert io_events.index(file_synced) < renames[0] < io_events.index(dir_synced)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("which", [w for w in WRITERS if w not in ("rollout history", "api key")])
def test_a_write_that_fails_leaves_the_old_file_whole_and_no_temp_file(config, tmp_path, monkeypatch, which):
    write = _writers(config, tmp_path)[which]
    path = write()
    before = path.read_text()

    def crash(*_a: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    monkeypatch.setattr(Path, "replace", crash)
    with pytest.raises(OSError, match="No space"):
        write()
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


# --- readers: damaged files are warnings, never tracebacks -----------------------------------------------------


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """A cloud holding servers by deployment name; `down` deletes them, `leaks` and `status` list them."""
    servers: dict[str, list[str]] = {}

    def connect(name: str) -> Any:
        if name != CLOUD:
            raise CloudError(f"no cloud {name}")
        return SimpleNamespace(compute=SimpleNamespace(keypairs=list, servers=lambda **_: []))

    def list_owned(_conn: Any, _cloud: str, *, deployment: str | None = None, **_kw: Any) -> ops.Owned:
        names = [deployment] if deployment else list(servers)
        mine = [SimpleNamespace(id=f"{d}-{s}", name=s, deployment=d) for d in names for s in servers.get(d, [])]
        return ops.Owned(servers=mine)

    def describe(_kind: str, r: Any) -> dict[str, Any]:
        return {"kind": "server", "id": r.id, "name": r.name, "deployment": r.deployment, "campaign": None}

    def teardown(_conn: Any, _cloud: str, owned: ops.Owned, *, dry_run: bool = False, **_kw: Any) -> list[Any]:
        gone = [describe("servers", r) for r in owned.servers]
        if not dry_run:
            for r in owned.servers:
                servers[r.deployment].remove(r.name)
        return gone

    monkeypatch.setattr(ops, "connect", connect)
    monkeypatch.setattr(ops, "list_owned", list_owned)
    monkeypatch.setattr(ops, "describe", describe)
    monkeypatch.setattr(ops, "teardown", teardown)
    monkeypatch.setattr(expiry_switch, "listed", lambda *_a: [])
    return servers


@pytest.fixture
def two_deployments(config: Config, cloud: dict[str, list[str]]) -> Path:
    """`good` and `broken` recorded and running; broken's ledger file cut in half. Returns that file."""
    for name in ("good", "broken"):
        ledger.save(config.state_dir, deployment(name))
        cloud[name] = [f"zenops-{name}-1"]
    return truncate(ledger.path(config.state_dir, CLOUD, "broken"))


def test_status_with_a_truncated_ledger_file_lists_the_others_and_names_it(config, two_deployments):
    r = invoke("status")
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert "good" in r.stdout
    assert f"warning: {two_deployments}: damaged state file" in r.stderr
    assert f"zenops down --deployment broken --cloud {CLOUD}" in r.stderr  # how to deal with it


def test_status_json_carries_the_warning_as_a_json_line(config, two_deployments):
    r = invoke("--json", "status")
    no_traceback(r)
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["type"] for x in lines] == ["warning", "result"]
    assert str(two_deployments) in lines[0]["message"]
    assert [d["name"] for d in lines[1]["deployments"]] == ["good"]


def test_down_of_another_deployment_works_beside_a_truncated_ledger_file(config, cloud, two_deployments):
    r = invoke("down", "--deployment", "good", "--cloud", CLOUD, "--yes")
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert cloud["good"] == []
    assert cloud["broken"] == ["zenops-broken-1"]
    assert str(two_deployments) in r.stderr
    assert ledger.load(config.state_dir, CLOUD, "good") is None


def test_down_of_the_damaged_deployment_removes_it_and_forgets_its_file(config, cloud, two_deployments):
    r = invoke("down", "--deployment", "broken", "--yes")  # no --cloud: the damaged file still says where
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert cloud["broken"] == []
    assert not two_deployments.exists()


def test_leaks_works_beside_a_truncated_ledger_file_and_does_not_call_it_a_leak(config, cloud, two_deployments):
    r = invoke("leaks", "--cloud", CLOUD)
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert "0 leaked resource(s)" in r.stdout
    assert str(two_deployments) in r.stderr


def test_loading_a_damaged_deployment_is_an_error_naming_the_file(config, two_deployments):
    r = invoke("bench", "--deployment", "broken", "--cloud", CLOUD)
    assert isinstance(r.exception, ZenopsError), repr(r.exception)
    assert str(two_deployments) in r.exception.message
    assert "zenops leaks" in (r.exception.hint or "")


@pytest.mark.parametrize("text", ["", "{", '{"name": "x"}', "[1, 2]", "\x00\x00\x00"])
def test_each_kind_of_damage_is_named(config, text):
    p = ledger.path(config.state_dir, CLOUD, "x")
    p.parent.mkdir(parents=True)
    p.write_text(text)
    with pytest.raises(ZenopsError) as info:
        ledger.load(config.state_dir, CLOUD, "x")
    assert str(p) in info.value.message
    assert ledger.all_deployments(config.state_dir) == []


def test_history_skips_a_partial_last_line_with_a_warning(config, capsys):
    led = Ledger(config, "hosts-1234")
    led.event("r1", "started")
    led.event("r1", "batch-done", batch=1)
    with led.history_path.open("a") as f:
        f.write('{"at": "2026-01-01T00:00:00+00:00", "rollout": "r1", "ev')  # the crash
    assert [e["event"] for e in led.history()] == ["started", "batch-done"]
    err = capsys.readouterr().err
    assert f"warning: {led.history_path}: damaged state file (line 3 is not JSON" in err
    led.event("r1", "finished")  # the next line is whole, not glued onto the partial one
    assert [e["event"] for e in led.history()] == ["started", "batch-done", "finished"]


def test_status_of_an_inventory_with_damaged_rollout_and_serving_files_warns_and_goes_on(config, tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    led = Ledger(config, inventory_name(inv))
    led.event("r1", "started")
    led.state_path.write_text('{"id": "r1", "deploy')
    record = serving_record_path(config, inv)
    record.parent.mkdir(parents=True)
    record.write_text('{"inventory": ')
    r = invoke("status", "-i", str(inv))
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert str(led.state_path) in r.stderr
    assert str(record) in r.stderr
    assert "started" in r.stdout  # the history still shows


def test_a_damaged_rollout_state_is_an_error_naming_the_file_and_the_drained_servers(config):
    led = Ledger(config, "hosts-1234")
    led.dir.mkdir(parents=True)
    led.state_path.write_text('{"id": "r1"')
    with pytest.raises(ZenopsError) as info:
        led.load()
    assert str(led.state_path) in info.value.message
    assert "zenops status -i" in (info.value.hint or "")


def test_a_damaged_facts_file_is_gathered_again_with_a_warning(config, capsys):
    p = facts_path(config, "h1")
    p.parent.mkdir(parents=True)
    p.write_text('{"schema": 1, "cp')
    assert saved_facts(config, "h1") is None
    assert f"warning: {p}: damaged state file" in capsys.readouterr().err


# --- the campaign store does not hide a damaged campaign ------------------------------------------------------


@pytest.fixture
def damaged_campaign(config: Config) -> Path:
    store = Store(config)
    for cid, at in (
        ("sweep-2601011200", "2026-01-01T12:00:00+00:00"),
        ("sweep-2601021200", "2026-01-02T12:00:00+00:00"),
    ):
        store.save(CampaignState(id=cid, name="sweep", spec_path="s.yaml", spec_digest="d", created_at=at))
    return truncate(store.dir("sweep-2601021200") / "state.json")


def test_campaign_status_lists_a_damaged_campaign_with_its_path_and_how_to_tear_it_down(config, damaged_campaign):
    r = invoke("campaign", "status")
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert "sweep-2601011200" in r.stdout
    assert f"sweep-2601021200  damaged  {damaged_campaign}" in r.stdout
    assert "zenops down --campaign sweep-2601021200" in r.stderr


def test_campaign_status_json_lists_it_as_damaged(config, damaged_campaign):
    r = invoke("--json", "campaign", "status")
    result = json.loads(r.stdout.splitlines()[-1])
    assert {"campaign": "sweep-2601021200", "status": "damaged", "path": str(damaged_campaign)}.items() <= {
        k: v for c in result["campaigns"] if c["campaign"] == "sweep-2601021200" for k, v in c.items()
    }.items()


def test_a_new_campaign_never_takes_a_damaged_campaigns_id(config, damaged_campaign):
    store = Store(config)
    assert new_id("sweep", store.ids(), datetime(2026, 1, 2, 12, 0, tzinfo=UTC)) == "sweep-2601021200-2"


def test_loading_a_damaged_campaign_names_the_file_and_the_teardown(config, damaged_campaign):
    r = invoke("campaign", "status", "sweep-2601021200")
    assert isinstance(r.exception, ZenopsError), repr(r.exception)
    assert str(damaged_campaign) in r.exception.message
    assert "zenops down --campaign sweep-2601021200" in (r.exception.hint or "")


# --- down removes the deployment's API key file (item 12) -------------------------------------------------------


def _cloud_key(config: Config, name: str) -> Path:
    return ensure_api_key(config, inventory_path(config.state_dir, CLOUD, name), None)


@pytest.mark.parametrize("running", [True, False], ids=["servers-left", "nothing-left"])
def test_down_of_a_cloud_deployment_removes_its_api_key_file(config, cloud, running):
    ledger.save(config.state_dir, deployment("demo"))
    cloud["demo"] = ["zenops-demo-1"] if running else []
    key = _cloud_key(config, "demo")
    password = ensure_metrics_password(config, inventory_path(config.state_dir, CLOUD, "demo"))
    other = _cloud_key(config, "other")
    r = invoke("down", "--deployment", "demo", "--cloud", CLOUD, "--yes")
    assert r.exit_code == 0, r.output
    assert not key.exists()
    assert not password.exists()
    assert f"removed the API key file {key}" in r.stderr
    assert other.exists()  # another deployment's key stays


def test_down_keep_secrets_keeps_the_cloud_deployments_key(config, cloud):
    ledger.save(config.state_dir, deployment("demo"))
    cloud["demo"] = ["zenops-demo-1"]
    key = _cloud_key(config, "demo")
    r = invoke("down", "--deployment", "demo", "--cloud", CLOUD, "--yes", "--keep-secrets")
    assert r.exit_code == 0, r.output
    assert cloud["demo"] == []
    assert key.exists()


def test_down_dry_run_keeps_the_key_the_real_down_removes_it(config, cloud):
    ledger.save(config.state_dir, deployment("demo"))
    cloud["demo"] = ["zenops-demo-1"]
    key = _cloud_key(config, "demo")
    assert invoke("down", "--deployment", "demo", "--cloud", CLOUD, "--dry-run").exit_code == 0
    assert key.exists()
    assert invoke("down", "--deployment", "demo", "--cloud", CLOUD, "--yes").exit_code == 0
    assert not key.exists()


@pytest.fixture
def fake_down_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """playbooks/down.yml without Ansible: every host reports its servers removed."""
    specs: list[Any] = []

    def run(_self: Any, spec: Any) -> RunResult:
        specs.append(spec)
        facts = {"h1": {"zenops_down": {"docker": True, "containers": ["zenops-vllm-0"], "images": []}}}
        return RunResult("r1", spec.playbook, "successful", 0, Path("runs/r1"), "now", 0.1, {"h1": HostStats()}, facts)

    monkeypatch.setattr(RunContext, "run", run)
    return specs


@pytest.mark.parametrize(("extra", "kept"), [((), False), (("--keep-secrets",), True)], ids=["default", "keep-secrets"])
def test_down_inventory_removes_the_api_key_file_unless_kept(config, tmp_path, fake_down_run, extra, kept):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    key = ensure_api_key(config, inv, None)
    password = ensure_metrics_password(config, inv)
    r = invoke("down", "-i", str(inv), *extra)
    assert r.exit_code == 0, r.output
    assert [s.playbook for s in fake_down_run] == ["down"]
    assert key.exists() is kept
    assert password.exists() is kept
    if not kept:
        assert f"removed the API key file {key}" in r.stderr
        assert f"removed the metrics password file {password}" in r.stderr


def test_down_inventory_with_limit_keeps_the_key_the_whole_down_removes_it(config, tmp_path, fake_down_run):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\nh2\n")
    key = ensure_api_key(config, inv, None)
    assert invoke("down", "-i", str(inv), "--limit", "h1").exit_code == 0
    assert key.exists()  # h2's servers still use it
    assert invoke("down", "-i", str(inv)).exit_code == 0
    assert not key.exists()


def test_down_inventory_removes_zenops_key_never_one_the_operator_gave(config, tmp_path, fake_down_run):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    generated = ensure_api_key(config, inv, None)
    mine = tmp_path / "my.key"
    mine.write_text("zk-mine")
    mine.chmod(0o600)
    assert ensure_api_key(config, inv, mine) == mine.resolve()  # `up --api-key-file my.key` later
    assert invoke("down", "-i", str(inv)).exit_code == 0
    assert not generated.exists()
    assert mine.read_text() == "zk-mine"


def test_down_inventory_with_a_damaged_serving_record_warns_and_removes_the_servers(config, tmp_path, fake_down_run):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    record = serving_record_path(config, inv)
    record.parent.mkdir(parents=True)
    record.write_text('{"inventory": "')
    r = invoke("down", "-i", str(inv))
    no_traceback(r)
    assert r.exit_code == 0, r.output
    assert str(record) in r.stderr
    assert not record.exists()


def test_the_new_key_after_down_is_a_new_one(config, tmp_path, fake_down_run):
    inv = tmp_path / "hosts.ini"
    inv.write_text("h1\n")
    first = ensure_api_key(config, inv, None).read_text()
    assert invoke("down", "-i", str(inv)).exit_code == 0
    assert ensure_api_key(config, inv, None).read_text() != first


def test_down_help_documents_keep_secrets():
    r = invoke("down", "--help")
    assert "--keep-secrets" in r.output
    assert "API key file" in r.output
