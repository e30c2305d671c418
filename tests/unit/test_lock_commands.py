"""Every command that changes a deployment takes its lock, under one key however the deployment is named: a cloud
deployment by cloud and name (`up --cloud`, `down --name`, `--deployment`) or by the inventory `up --cloud` wrote for
it (`up -i`, `bench -i`, `rollout -i`, `down -i`); your own hosts by their inventory. A live holder (a sleeper
standing for a running command) makes each refuse with exit 14 before anything runs: no playbook, no cloud."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_campaign_plan import make_spec
from tests.unit.test_lock import SLEEPER, Procs
from zenops import lock
from zenops.campaign import plan as plan_lib
from zenops.campaign.run import Campaign
from zenops.campaign.state import CampaignState, Store, deployment_name
from zenops.cloud import ledger
from zenops.config import Config, load
from zenops.context import RunContext
from zenops.deployment import common as cloud_common
from zenops.deployment import teardown
from zenops.deployment.identity import DeploymentId, inventory_name, of_cloud, of_inventory
from zenops.errors import ExitCode, LockedError
from zenops.lock import Holder, lock_path

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

CLOUD, NAME, FLAVOR = "c", "fle", "gp.5.2.8"
KEY = "cloud-c-fle"


@pytest.fixture
def config(isolated_home, monkeypatch) -> Config:
    monkeypatch.delenv(lock.ENV, raising=False)
    return load()


def _record(config: Config, name: str, *, campaign: str | None = None) -> Path:
    """A ready cloud deployment in the ledger with the inventory `up --cloud` writes for it; returns the inventory."""
    inv = cloud_common.inventory_path(config.state_dir, CLOUD, name)
    inv.parent.mkdir(parents=True, exist_ok=True)
    inv.write_text(f"all:\n  hosts:\n    {name}-1:\n      ansible_host: 10.0.0.1\n")
    ledger.save(config.state_dir, ledger.Deployment(
        name=name, cloud=CLOUD, flavor=FLAVOR, image="debian-12", count=1, network_mode="provider",
        price_per_hour=0.1, status="ready", inventory=str(inv), campaign=campaign,
        servers=[{"name": f"{name}-1", "id": "id1", "fixed_ip": "10.0.0.1"}],
    ))  # fmt: skip
    return inv


@pytest.fixture
def deployment(config) -> Path:
    return _record(config, NAME)


@pytest.fixture
def hold(config) -> Iterator[Callable[..., int]]:
    """Makes a live process the holder of a key's lock (as a running command would be); returns its pid."""
    procs = Procs()

    def _hold(key: str, command: str = "zenops rollout -i fleet.yml --model ./tiny-b") -> int:
        p = procs.start(SLEEPER)
        holder = Holder(p.pid, lock.proc_start(p.pid), socket.gethostname(), command, "2026-01-01T00:00:00+00:00", "")
        path = lock_path(config, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(holder)))
        return p.pid

    yield _hold
    procs.stop()


@pytest.fixture
def nothing_runs(monkeypatch) -> None:
    """A command that got past its lock fails the test: no host step, no serving, no bench, no cloud."""

    def fail(*_a: Any, **_kw: Any) -> None:
        pytest.fail("the command ran past a held lock")

    for target in (
        "zenops.hosts.up_inventory",
        "zenops.hosts.down_inventory",
        "zenops.deployment.provision.up_cloud",
        "zenops.deployment.teardown.down",  # what down_locked calls
        "zenops.bench.run.bench_inventory",
        "zenops.rollout.rollout",
        "zenops.cloud.ops.connect",
        "zenops.runner.run_playbook",
    ):
        monkeypatch.setattr(target, fail)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- one key per deployment -----------------------------------------------------------------------------------------


def test_a_cloud_deployment_has_one_key_by_name_or_by_its_inventory(config, deployment, tmp_path, monkeypatch):
    assert of_cloud(config, CLOUD, NAME).key == KEY
    assert of_cloud(config, CLOUD, NAME).inventory == deployment  # one identity: named by cloud and name...
    assert of_inventory(config, deployment) == of_cloud(config, CLOUD, NAME)  # ...or by its inventory
    assert inventory_name(deployment) != KEY  # what `up -i` of it took before: another lock than `up --cloud`'s
    assert of_inventory(config, deployment).key == KEY
    monkeypatch.chdir(deployment.parent)
    assert of_inventory(config, Path(deployment.name)).key == KEY  # relative
    link = tmp_path / "mine.yml"
    link.symlink_to(deployment)
    assert of_inventory(config, link).key == KEY  # another name for the same file
    own = tmp_path / "hosts.yml"
    own.write_text("all:\n  hosts:\n    h1:\n")
    assert of_inventory(config, own).key == inventory_name(own)  # your own hosts: their inventory's key


# --- each command spelling takes it ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["up", "-i", "INV"],
        ["up", "--cloud", CLOUD, "--flavor", FLAVOR, "--deployment", NAME],
        ["down", "-i", "INV"],
        ["down", "--deployment", NAME, "--cloud", CLOUD, "--yes"],
        ["down", "--deployment", NAME, "--yes"],  # the cloud from the ledger
        ["bench", "-i", "INV"],
        ["bench", "--deployment", NAME, "--cloud", CLOUD],
        ["rollout", "-i", "INV", "--model", "./tiny-b"],
        ["rollout", "--deployment", NAME, "--model", "./tiny-b"],
    ],
    ids=" ".join,
)
def test_every_spelling_of_a_cloud_deployment_waits_for_its_one_lock(run, deployment, hold, nothing_runs, args):
    pid = hold(KEY, f"zenops up --cloud {CLOUD} --flavor {FLAVOR} --deployment {NAME}")
    r = run([str(deployment) if a == "INV" else a for a in args])
    assert r.exit_code == ExitCode.LOCKED == 14, r.output
    assert f"deployment {KEY} is locked by pid {pid}" in flat(r.output)
    assert "zenops up --cloud c" in flat(r.output)


def test_a_bench_waits_for_another_bench_on_your_own_hosts(run, config, tmp_path, hold, nothing_runs):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n")
    pid = hold(inventory_name(inv), "zenops bench -i hosts.yml")
    r = run(["bench", "-i", str(inv)])
    assert r.exit_code == 14, r.output
    assert f"locked by pid {pid}" in flat(r.output)
    assert "zenops bench -i hosts.yml" in flat(r.output)


@pytest.mark.parametrize("what", [["--campaign", "camp-1"], ["--all-mine"]], ids=" ".join)
def test_down_of_several_deployments_takes_each_ones_lock(run, config, hold, nothing_runs, what):
    _record(config, "camp-a", campaign="camp-1")
    _record(config, "camp-b", campaign="camp-1")
    pid = hold(DeploymentId("camp-b", CLOUD).key, "zenops bench --deployment camp-b")
    r = run(["down", *what, "--cloud", CLOUD, "--yes"])
    assert r.exit_code == 14, r.output
    assert f"deployment cloud-c-camp-b is locked by pid {pid}" in flat(r.output)
    assert not lock_path(config, DeploymentId("camp-a", CLOUD).key).exists()  # the one taken first was let go


def test_a_dry_run_of_down_takes_no_lock(run, config, hold, monkeypatch):
    _record(config, "camp-a", campaign="camp-1")
    hold(DeploymentId("camp-a", CLOUD).key)
    seen: list[dict[str, Any]] = []

    def down(config: Config, **kw: Any) -> teardown.DownResult:
        seen.append(kw)
        return teardown.DownResult(CLOUD, [], True, ["camp-a"])

    monkeypatch.setattr(teardown, "down", down)  # what down_locked calls
    r = run(["down", "--campaign", "camp-1", "--cloud", CLOUD, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert seen[0]["dry_run"] is True


# --- a campaign holds the lock of each group's deployment -----------------------------------------------------------


def _campaign(config: Config, **spec: Any) -> Campaign:
    c = Campaign(RunContext(config), make_spec(prices={"f.small": 0.5, "f.big": 2.0}, **spec), Store(config))
    c.state = CampaignState(id="sweep-1", name="sweep", spec_path="/f", spec_digest="d", created_at="2026-01-01")
    return c


def _holder_pid(config: Config, key: str) -> int | None:
    holder = lock.read_holder(lock_path(config, key))
    return holder.pid if holder else None


def test_a_campaign_group_holds_its_servers_lock_from_provisioning_to_teardown(config, tmp_path, monkeypatch):
    campaign = _campaign(config)
    key = DeploymentId(deployment_name("sweep-1", "f.small"), "sandbox").key
    held: dict[str, int | None] = {}

    def step(name: str, value: Any = None) -> Callable[..., Any]:
        def record(*_a: Any, **_kw: Any) -> Any:
            held[name] = _holder_pid(config, key)
            return value

        return record

    monkeypatch.setattr(campaign, "_provision", step("provision", tmp_path / "inv.yml"))
    monkeypatch.setattr(campaign, "_cell", step("cell"))
    monkeypatch.setattr(campaign, "_teardown", step("teardown"))
    campaign._group("f.small", [c for c in plan_lib.cells(campaign.spec) if c.group == "f.small"])
    assert held == {"provision": os.getpid(), "cell": os.getpid(), "teardown": os.getpid()}
    assert not lock_path(config, key).exists()


def test_a_campaign_on_your_own_hosts_refuses_while_their_lock_is_held(config, tmp_path, hold, monkeypatch):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n")
    campaign = _campaign(config, cloud=None, inventory=inv, flavors=())
    pid = hold(of_inventory(config, inv).key, "zenops up -i hosts.yml -m ./tiny")
    monkeypatch.setattr(campaign, "_cell", lambda *a, **k: pytest.fail("a cell ran on locked hosts"))
    monkeypatch.setattr(campaign, "_stop_servers", lambda *a, **k: pytest.fail("the hosts' servers were stopped"))
    with pytest.raises(LockedError, match=f"locked by pid {pid}"):
        campaign._group("hosts", plan_lib.cells(campaign.spec))


def test_locks_held_by_threads_keep_each_ones_token_in_the_environment(config):
    """A campaign's groups run in threads, each holding its server's lock: they let go in any order, and each
    release takes out its own token only (the first one taken, let go first, leaves the second's in place)."""
    taken, release = threading.Event(), threading.Event()
    tokens: list[str] = []

    def group() -> None:
        with lock.deployment_lock(config, "cloud-c-a", command="a") as me:
            tokens.append(me.token)
            taken.set()
            release.wait(10)

    a = threading.Thread(target=group)
    a.start()
    assert taken.wait(10)
    with lock.deployment_lock(config, "cloud-c-b", command="b") as b:
        assert os.environ[lock.ENV] == f"{tokens[0]},{b.token}"
        release.set()
        a.join(10)
        assert os.environ.get(lock.ENV) == b.token
    assert lock.ENV not in os.environ
