"""One deployment, one identity: every way a command names a deployment resolves to the one DeploymentId
(zenops.deployment.target.resolve_target), and every name derived from it (lock key, files, labels) is one property of
it, read by no call site that computes its own. The names are the ones earlier releases used: state written by them
keeps working."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest

from zenops import lock
from zenops.cli.context import App
from zenops.cloud import ledger
from zenops.config import Config
from zenops.deployment import common as cloud_common
from zenops.deployment.identity import DeploymentId, inventory_label, inventory_name, lock_holder, locked
from zenops.deployment.store import Store
from zenops.deployment.target import resolve_target
from zenops.errors import UsageError
from zenops.lock import describe_lock, lock_path

SRC = Path(__file__).resolve().parents[2] / "src" / "zenops"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.delenv(lock.ENV, raising=False)
    return Config(state_dir=tmp_path / "state")


def _cloud(config: Config, name: str = "fle", cloud: str = "c") -> ledger.Deployment:
    """A ready cloud deployment in the ledger, with the inventory `up --cloud` writes for it."""
    inv = cloud_common.inventory_path(config.state_dir, cloud, name)
    inv.parent.mkdir(parents=True, exist_ok=True)
    inv.write_text(f"all:\n  hosts:\n    {name}-1:\n")
    dep = ledger.Deployment(
        name=name, cloud=cloud, flavor="gp.5.2.8", image="debian-12", count=1, network_mode="provider",
        price_per_hour=0.1, status="ready", inventory=str(inv),
    )  # fmt: skip
    ledger.save(config.state_dir, dep)
    return dep


# --- resolve_target: one DeploymentId for each way of naming a deployment ----------------------------------------


def test_an_inventory_of_your_own_hosts_is_their_deployment(config, tmp_path):
    inv = tmp_path / "fleet.yml"
    inv.write_text("all: {}\n")
    dep = resolve_target(config, inventory=inv)
    assert isinstance(dep, DeploymentId)
    assert (dep.cloud, dep.inventory, dep.hosts, dep.entry) == (None, inv, inv, None)
    assert dep.name == dep.key == dep.files_name == inventory_name(inv)
    assert dep.label == "fleet"


def test_a_cloud_deployment_is_one_identity_by_its_inventory_its_name_or_up_s_flags(config, tmp_path):
    entry = _cloud(config)
    by_inventory = resolve_target(config, inventory=Path(entry.inventory))
    by_name = resolve_target(config, deployment="fle")
    by_name_in = resolve_target(config, deployment="fle", cloud="c")
    by_up = resolve_target(config, deployment="fle", cloud="c", flavor="gp.5.2.8")
    assert by_inventory == by_name == by_name_in
    assert {d.key for d in (by_inventory, by_name, by_name_in, by_up)} == {"cloud-c-fle"}
    assert (by_name.name, by_name.cloud, by_name.hosts) == ("fle", "c", Path(entry.inventory))
    assert by_name.entry is not None  # --deployment: the ledger's entry
    assert by_name.entry.flavor == "gp.5.2.8"
    assert by_inventory.entry is None  # -i: the hosts, as before (bench labels no flavor or price from it)
    assert by_up.inventory is None  # `up --cloud` of it: provisioning gives the inventory
    with pytest.raises(UsageError, match="no inventory yet"):
        _ = by_up.hosts


def test_up_cloud_names_a_new_deployment_after_its_flavor_unless_named(config):
    assert resolve_target(config, cloud="c", flavor="gp.5.24.96") == DeploymentId("gp-5-24-96", "c")
    assert resolve_target(config, cloud="c", deployment="mine", flavor="gp.5.24.96").key == "cloud-c-mine"
    with pytest.raises(UsageError, match="--flavor goes with --cloud"):
        resolve_target(config, flavor="gp.5.24.96")


# --- the names derived from it: the ones earlier releases wrote --------------------------------------------------


def test_the_names_of_own_hosts_are_those_state_written_before_used(config, tmp_path):
    """A state dir written by the code before one identity: serving record under ``<stem>-<sha256 of the absolute
    path>[:8]``, lock under the same name, containers labelled with the stem. The identity reads them."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    old = f"hosts-{hashlib.sha256(str(inv.resolve()).encode()).hexdigest()[:8]}"  # the name as written before
    serving = config.state_dir / "serving" / f"{old}.json"
    serving.parent.mkdir(parents=True)
    serving.write_text(json.dumps({"inventory": str(inv), "request": {}, "compat": {}, "model": "m", "plans": {}}))
    dep = resolve_target(config, inventory=inv)
    assert (dep.files_name, dep.key, dep.label) == (old, old, "hosts")
    record = Store(config, inv).record()
    assert record is not None
    assert record.model == "m"
    assert lock_path(config, dep.key).name.startswith(old)


def test_a_cloud_deployment_keeps_its_label_and_files_under_the_inventory_up_wrote(config):
    entry = _cloud(config)
    dep = resolve_target(config, deployment="fle")
    assert dep.label == "fle.inventory" == Path(entry.inventory).stem  # what serve and bench labelled it before
    assert dep.files_name == inventory_name(Path(entry.inventory))
    assert inventory_label(Path(entry.inventory)) == dep.label


# --- locks: taken and read through the identity ---------------------------------------------------------------------


def test_locked_holds_each_identity_s_lock_and_lock_holder_reads_it(config, tmp_path):
    deps = [DeploymentId("a", "c"), DeploymentId("b", "c")]
    assert lock_holder(config, deps[0]) is None
    with locked(config, deps, note=lambda _t: None):
        assert [describe_lock(config, k) is not None for k in ("cloud-c-a", "cloud-c-b")] == [True, True]
        held = lock_holder(config, deps[1])
        assert held is not None
        assert held["alive"]
    assert lock_holder(config, deps[0]) is None


def test_a_campaign_command_holds_its_campaign_s_lock(config):
    app = App(config=config)
    with app.run_context(campaign="bench-week"):
        assert describe_lock(config, "campaign-bench-week") is not None
    assert describe_lock(config, "campaign-bench-week") is None
    with app.run_context():  # no campaign: no lock of one
        assert describe_lock(config, "campaign-bench-week") is None
        assert describe_lock(config, "campaign-None") is None


# --- no call site computes a name of its own ------------------------------------------------------------------------

IDENTITY = "deployment/identity.py"
# .stem of paths that are not a deployment's inventory: ledger files (cloud/name.json), report sources, playbooks
STEM_ELSEWHERE = {"cloud/ledger.py", "report/parsing.py", "runner/__init__.py"}
# the modules that turn an identity into a lock: the lock itself, the identity (locked, lock_holder), the lifecycle
# (Deployment.open), and the CLI's run context for a campaign's own lock
LOCKERS = {"lock.py", "deployment/identity.py", "deployment/lifecycle.py", "cli/context.py"}


def _modules() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text())) for p in sorted(SRC.rglob("*.py"))]


def _names(tree: ast.AST) -> set[str]:
    """Attribute names read and names called in ``tree``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            out.add(f".{node.attr}")
        elif isinstance(node, ast.Name):
            out.add(node.id)
    return out


def test_only_the_identity_derives_a_name_from_an_inventory_s_stem():
    offenders = [m for m, tree in _modules() if ".stem" in _names(tree) and m not in {IDENTITY, *STEM_ELSEWHERE}]
    assert offenders == [], f"{offenders}: take the label from DeploymentId.label (identity.inventory_label)"


def test_only_the_identity_and_the_lifecycle_take_a_deployment_s_lock():
    lock_calls = {"deployment_lock", "deployment_locks", "describe_lock"}
    lock_calls |= {f".{n}" for n in lock_calls}
    offenders = [m for m, tree in _modules() if _names(tree) & lock_calls and m not in LOCKERS]
    assert offenders == [], (
        f"{offenders}: open the deployment (lifecycle.Deployment.open), or identity.locked/lock_holder"
    )


def test_no_call_site_spells_a_lock_key_or_a_files_name():
    spelled = []
    for m, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and m != IDENTITY:
                head = node.values[0] if node.values else None
                formatted = sum(isinstance(v, ast.FormattedValue) for v in node.values)
                if isinstance(head, ast.Constant) and str(head.value).startswith("cloud-") and formatted >= 2:
                    spelled.append(m)
            called = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "inventory_name"
            if called and m not in {IDENTITY, "deployment/record.py", "deployment/store.py"}:
                spelled.append(m)
    assert spelled == [], f"{spelled}: DeploymentId.key / files_name are the one source of these names"
