"""`zenops image bake` (zenops.cloud.bake) and the baked images in ops's listing and teardown, against a test double
of openstacksdk's connection (compute + image)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from openstack import exceptions as sdk

from zenops.cloud import bake, ledger, ops
from zenops.cloud import marks as m
from zenops.cloud.errors import CloudError
from zenops.config import Config, load
from zenops.deployment.record import ServingRecord, save_serving_record
from zenops.errors import UnknownDeploymentError, UsageError

PROJECT = "p-ours"


class FakeImages:
    """TEST DOUBLE of Glance through openstacksdk: images with status, tags, properties and owner."""

    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        self.store: dict[str, SimpleNamespace] = {}
        self.deleted: list[str] = []

    def images(self) -> list[SimpleNamespace]:
        return list(self.store.values())

    def get_image(self, image_id: str) -> SimpleNamespace:
        if image_id not in self.store:
            raise sdk.NotFoundException("no image")
        im = self.store[image_id]
        if im.status in ("queued", "saving") and self.conn.snapshot_polls_left is not None:
            self.conn.snapshot_polls_left -= 1
            if self.conn.snapshot_polls_left <= 0:
                im.status, im.size = self.conn.snapshot_ends, 3 * 2**30
        return im

    def add_tag(self, image_id: str, tag: str) -> None:
        self.store[image_id].tags.append(tag)

    def delete_image(self, im: Any, ignore_missing: bool = True) -> None:
        self.deleted.append(im.id)
        self.store.pop(im.id, None)


class FakeConn:
    """TEST DOUBLE of an openstacksdk connection: one project's servers (Nova) and images (Glance)."""

    def __init__(self, servers: list[SimpleNamespace]) -> None:
        self.current_project_id = PROJECT
        self.servers = servers
        self.snapshots: list[tuple[str, str, dict[str, str]]] = []
        self.snapshot_polls_left: int | None = 2
        self.snapshot_ends = "active"
        self.refuse: sdk.HttpException | None = None
        self.image = FakeImages(self)
        self.compute = SimpleNamespace(
            servers=lambda details=True: self.servers,
            create_server_image=self.create_server_image,
            keypairs=lambda: [],
        )

        def none(*_a: Any, **_k: Any) -> list[Any]:
            return []

        self.network = SimpleNamespace(ips=none, routers=none, ports=none, networks=none, security_groups=none)

    def create_server_image(self, server: Any, name: str, metadata: dict[str, str], wait: bool) -> SimpleNamespace:
        if self.refuse is not None:
            raise self.refuse
        image_id = f"img-{len(self.snapshots) + 1}"
        self.snapshots.append((server.name, name, metadata))
        self.image.store[image_id] = SimpleNamespace(
            id=image_id, name=name, status="queued", tags=[], properties=dict(metadata), owner=PROJECT, size=None
        )
        return SimpleNamespace(id=image_id)


def server(name: str, status: str = "ACTIVE") -> SimpleNamespace:
    return SimpleNamespace(
        id=f"id-{name}", name=name, status=status, tags=[], metadata=m.Marks("demo").server_metadata("t@h")
    )


@pytest.fixture
def config(isolated_home: Path) -> Config:
    return load()


def deployment(config: Config, *, engine: str | None = "zenops/vllm:abc") -> ledger.Deployment:
    inventory = config.state_dir / "inventories" / "c" / "demo.yml"
    dep = ledger.Deployment(
        name="demo", cloud="c", flavor="gp.5.8.32", image="debian-12", count=2, network_mode="provider",
        servers=[{"name": "zenops-demo-1"}, {"name": "zenops-demo-2"}], inventory=str(inventory),
    )  # fmt: skip
    ledger.save(config.state_dir, dep)
    images = {"zenops-demo-1": engine, "zenops-demo-2": engine} if engine else {}
    save_serving_record(config, inventory, ServingRecord(inventory=str(inventory), images=images, model="tiny"))
    return dep


@pytest.fixture
def conn(monkeypatch: pytest.MonkeyPatch) -> FakeConn:
    fake = FakeConn([server("zenops-demo-1"), server("zenops-demo-2")])
    monkeypatch.setattr(ops, "connect", lambda cloud: fake)
    monkeypatch.setattr(ops.time, "sleep", lambda _s: None)
    return fake


def run(config: Config, **kw: Any) -> bake.Baked:
    return bake.bake(config, cloud="c", name="demo", sleep=lambda _s: None, **kw)


def test_bake_snapshots_the_first_server_marks_the_image_and_records_it(config: Config, conn: FakeConn) -> None:
    deployment(config)
    notes: list[str] = []
    baked = run(config, note=notes.append)
    assert [(s, n) for s, n, _ in conn.snapshots] == [("zenops-demo-1", f"zenops-demo-baked-{baked.key[:8]}")]
    image = conn.image.store[baked.image_id]
    assert image.tags == m.Marks("demo").tags()
    # marked from its creation on (before the tags): the marks and the inputs' digest in its properties
    props = conn.snapshots[0][2]
    assert props["zenops:deployment"] == "demo"
    assert props[m.BAKE_KEY] == baked.key
    assert m.KEEP_KEY not in props
    assert ledger.load(config.state_dir, "c", "demo").replica_image == baked.image_id  # type: ignore[union-attr]
    assert not baked.reused
    assert baked.size == 3 * 2**30
    assert any("queued" in n for n in notes)


def test_a_rerun_with_the_same_inputs_reuses_the_image(config: Config, conn: FakeConn) -> None:
    deployment(config)
    first = run(config)
    again = run(config)
    assert len(conn.snapshots) == 1
    assert again.reused
    assert again.image_id == first.image_id


def test_other_inputs_make_a_new_image_and_delete_the_previous(config: Config, conn: FakeConn) -> None:
    deployment(config)
    first = run(config)
    deployment(config, engine="zenops/vllm:def")  # a rollout changed the engine image
    second = run(config)
    assert second.key != first.key
    assert conn.image.deleted == [first.image_id]
    assert second.replaced == [first.image_name]


def test_a_failed_snapshot_is_an_error_and_the_next_run_makes_it_again(config: Config, conn: FakeConn) -> None:
    deployment(config)
    conn.snapshot_ends = "killed"
    with pytest.raises(CloudError, match="failed"):
        run(config)
    assert ledger.load(config.state_dir, "c", "demo").replica_image is None  # type: ignore[union-attr]
    conn.snapshot_ends = "active"
    baked = run(config)
    assert conn.image.deleted == ["img-1"]
    assert baked.image_id == "img-2"


def test_a_cloud_that_refuses_snapshots_is_a_clear_error(config: Config, conn: FakeConn) -> None:
    deployment(config)
    conn.refuse = sdk.HttpException("Forbidden", http_status=403)
    with pytest.raises(CloudError, match="refuses a snapshot") as e:
        run(config)
    assert "openstack server image create" in str(e.value.hint)


def test_no_deployment_no_such_server_no_engine_image(config: Config, conn: FakeConn) -> None:
    with pytest.raises(UnknownDeploymentError):
        run(config)
    deployment(config)
    with pytest.raises(UsageError, match="no serving server 'zenops-demo-9'"):
        run(config, server="zenops-demo-9")
    deployment(config, engine=None)
    with pytest.raises(UsageError, match="serves nothing"):
        run(config)
    assert conn.snapshots == []


def test_a_building_server_is_refused(config: Config, conn: FakeConn) -> None:
    deployment(config)
    conn.servers[0].status = "BUILD"
    with pytest.raises(CloudError, match="is BUILD"):
        run(config)


def test_keep_marks_the_image_and_down_and_leaks_listings_leave_it(config: Config, conn: FakeConn) -> None:
    deployment(config)
    baked = run(config, keep=True)
    assert baked.kept
    conn.servers = []
    assert ops.list_owned(conn, "c", deployment="demo").images == []  # type: ignore[arg-type]


def test_list_owned_finds_baked_images_by_tags_or_properties_in_this_project_only() -> None:
    props = m.Marks("demo").server_metadata("t@h")
    untagged = SimpleNamespace(id="a", name="a", tags=[], properties=props, owner=PROJECT)
    tagged = SimpleNamespace(id="b", name="b", tags=m.Marks("demo").tags(), properties={}, owner=PROJECT)
    theirs = SimpleNamespace(id="c", name="c", tags=m.Marks("demo").tags(), properties=props, owner="p-theirs")
    other = SimpleNamespace(id="d", name="debian-12", tags=[], properties={}, owner=PROJECT)
    fake = FakeConn([])
    fake.image.store = {i.id: i for i in (untagged, tagged, theirs, other)}
    owned = ops.list_owned(fake, "c", deployment="demo")  # type: ignore[arg-type]
    assert [i.id for i in owned.images] == ["a", "b"]
    assert [kind for kind, _ in owned.items()] == ["images", "images"]


def test_teardown_deletes_an_image_after_the_servers_and_waits_for_its_404(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops.time, "sleep", lambda _s: None)
    fake = FakeConn([])
    image = SimpleNamespace(id="i", name="zenops-demo-baked-1", status="active", tags=[], properties={})
    fake.image.store["i"] = image
    srv = server("zenops-demo-1")
    order: list[str] = []
    fake.compute.delete_server = lambda r, ignore_missing: order.append("server")
    fake.compute.get_server = lambda _id: (_ for _ in ()).throw(sdk.NotFoundException("gone"))
    real_delete = fake.image.delete_image
    fake.image.delete_image = lambda r, ignore_missing=True: (order.append("image"), real_delete(r))  # type: ignore[method-assign]
    removed = ops.teardown(fake, "c", ops.Owned(servers=[srv], images=[image]))  # type: ignore[arg-type]
    assert order == ["server", "image"]
    assert [r["kind"] for r in removed] == ["server", "image"]
    assert "i" not in fake.image.store


def test_a_gone_replica_image_is_noticed_and_the_cold_way_taken() -> None:
    fake = FakeConn([])
    notes: list[str] = []
    assert bake.usable_replica_image(fake, "c", "img-x", notes.append) is None
    assert "gone" in notes[0]
    fake.image.store["img-y"] = SimpleNamespace(id="img-y", name="y", status="active")
    assert bake.usable_replica_image(fake, "c", "img-y", notes.append) == "img-y"
    assert bake.usable_replica_image(fake, "c", None, notes.append) is None
    assert len(notes) == 1


def test_the_bake_of_a_deployment_with_a_scaling_loop_pauses_it_and_gives_it_the_image(
    config: Config, conn: FakeConn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop pulled back before the snapshot, the image in the ledger entry before it is pushed to the loop, then
    the loop resumed: its scale-outs boot from the image (without it, the loop's copy kept the cold way)."""
    from click.testing import CliRunner  # noqa: PLC0415

    from zenops.cli.main import cli  # noqa: PLC0415
    from zenops.deployment import services  # noqa: PLC0415

    dep = deployment(config)
    inventory = Path(str(dep.inventory))
    inventory.parent.mkdir(parents=True, exist_ok=True)
    inventory.write_text("all: {}\n")
    save_serving_record(
        config, inventory,
        ServingRecord(inventory=str(inventory), images={"zenops-demo-1": "zenops/vllm:abc"}, model="tiny",
                      services={"scaler": {"host": "zenops-demo-gw"}}),
    )  # fmt: skip
    calls: list[str] = []

    def replica_image() -> str | None:
        entry = ledger.load(config.state_dir, "c", "demo")
        return entry.replica_image if entry else None

    loop = SimpleNamespace(
        name="scaler",
        pause=lambda *_a, **k: calls.append(f"pause by {k['by']}"),
        pull=lambda *_a: calls.append(f"pull (snapshots so far: {len(conn.snapshots)})"),
        push=lambda *_a: calls.append(f"push {replica_image()}"),
        resume=lambda *_a: calls.append("resume"),
    )
    monkeypatch.setattr(services, "services", lambda: (loop,))
    result = CliRunner().invoke(cli, ["image", "bake", "demo", "--cloud", "c"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert calls == ["pause by zenops image bake", "pull (snapshots so far: 0)", "push img-1", "resume"]


def test_the_bake_of_a_deployment_without_a_loop_pauses_nothing(
    config: Config, conn: FakeConn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from zenops.cli.main import cli  # noqa: PLC0415
    from zenops.deployment import services  # noqa: PLC0415

    dep = deployment(config)
    Path(str(dep.inventory)).parent.mkdir(parents=True, exist_ok=True)
    Path(str(dep.inventory)).write_text("all: {}\n")
    touched: list[str] = []
    loop = SimpleNamespace(name="scaler", **{k: (lambda *_a, k=k, **_kw: touched.append(k)) for k in
                                            ("pause", "pull", "push", "resume")})  # fmt: skip
    monkeypatch.setattr(services, "services", lambda: (loop,))
    result = CliRunner().invoke(cli, ["image", "bake", "demo", "--cloud", "c"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert touched == []
    assert replica_image_of(config) == "img-1"


def replica_image_of(config: Config) -> str | None:
    entry = ledger.load(config.state_dir, "c", "demo")
    return entry.replica_image if entry else None
