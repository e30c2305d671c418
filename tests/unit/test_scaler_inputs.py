"""What the scaling loop's host gets for a cold scale-out (zenops.scaling.inputs: host_inputs, restored;
zenops.deployment.services.scaler: rewrite, shipped; roles/scaler's unit): the engine image tarball, a local model,
the base image archive, the Hugging Face token, the configuration, and the serving record pointing at the host's
copies.

TEST DOUBLES: ``FakeRecord`` stands for a serving record (request and images); files are real, in tmp_path."""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from zenops import paths
from zenops.cloud import ledger
from zenops.config import load
from zenops.context import RunContext
from zenops.deployment.record import ServingRecord
from zenops.deployment.services import scaler as sc
from zenops.deployment.store import Store
from zenops.scaling import inputs as si


@dataclass
class FakeRecord:
    request: dict[str, Any] = field(default_factory=dict)
    images: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def controller(tmp_path: Path) -> dict[str, Path]:
    """The controller's inputs: an image tarball in its cache, a local model, a base archive, a token file."""
    cache = tmp_path / "cache" / "zenops" / "images"
    cache.mkdir(parents=True)
    image = cache / f"zenops_vllm-zen_x-{'a' * 64}.tar"
    image.write_bytes(b"i" * 1000)
    model = tmp_path / "models" / "tiny-llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    base = tmp_path / "debian.tar"
    base.write_bytes(b"b" * 10)
    token = tmp_path / "hf-token"
    token.write_text("hf_secret")
    token.chmod(0o600)
    return {"image": image, "model": model, "base": base, "token": token}


def test_what_goes_the_image_once_the_model_the_base_archive_and_the_token_as_a_secret(controller) -> None:
    c = controller
    images = {h: {"ref": "zenops/vllm-zen:x", "archive": str(c["image"])} for h in ("web-1", "web-2")}
    record = FakeRecord({"model": str(c["model"]), "base_image_archive": str(c["base"])}, images)
    got = si.host_inputs(record, c["token"])
    by_dest = {f["dest"]: f for f in got.files}
    assert len(got.files) == len(by_dest)  # each once
    assert sorted(by_dest) == sorted([
        f"{si.HOST_IMAGES}/{c['image'].name}",  # one tarball for both hosts: same pair, same CPU kind
        f"{si.HOST_INPUTS}/models/tiny-llama",  # its name is the served name: kept
        f"{si.HOST_INPUTS}/debian.tar",  # its name and size are build inputs: kept
        f"{si.HOST_SECRETS}/hf-token",
    ])  # fmt: skip
    image = by_dest[f"{si.HOST_IMAGES}/{c['image'].name}"]
    assert (image["kind"], image["size"], image["mode"], image["secret"]) == ("file", 1000, "0644", False)
    assert by_dest[f"{si.HOST_INPUTS}/models/tiny-llama"]["kind"] == "dir"
    assert "size" not in by_dest[f"{si.HOST_INPUTS}/models/tiny-llama"]  # a directory: copied file by file
    secret = by_dest[f"{si.HOST_SECRETS}/hf-token"]
    assert (secret["mode"], secret["secret"]) == ("0600", True)
    assert got.request == {
        "model": f"{si.HOST_INPUTS}/models/tiny-llama",
        "base_image_archive": f"{si.HOST_INPUTS}/debian.tar",
        "hf_token_file": f"{si.HOST_SECRETS}/hf-token",
    }
    assert got.missing == []


def test_a_hugging_face_name_and_no_token_ship_only_the_image_and_what_is_missing_is_said(controller) -> None:
    images = {"web-1": {"ref": "zenops/vllm-zen:x", "archive": str(controller["image"])},
              "web-2": {"ref": "zenops/vllm-zen:y", "archive": str(controller["image"].with_name("gone.tar"))},
              "web-3": {"ref": "zenops/vllm-zen:z"}}  # fmt: skip
    got = si.host_inputs(FakeRecord({"model": "Qwen/Qwen2.5-0.5B-Instruct"}, images))
    assert [f["dest"] for f in got.files] == [f"{si.HOST_IMAGES}/{controller['image'].name}"]
    assert got.request == {}  # the model's name stays: downloaded on the new server
    assert len(got.missing) == 2
    assert "gone.tar" in got.missing[0]
    assert "zenops/vllm-zen:z" in got.missing[1]


def test_the_record_the_host_gets_points_at_its_copies_and_its_state(tmp_path: Path) -> None:
    state = tmp_path / "state"
    record = {"request": {"model": "/home/me/models/tiny", "hf_token_file": None, "dtype": "bfloat16"},
              "api_key_file": f"{state}/secrets/d1.api-key"}  # fmt: skip
    host = {"model": f"{si.HOST_INPUTS}/models/tiny", "hf_token_file": f"{si.HOST_SECRETS}/hf-token"}
    out = json.loads(si.rewrite(json.dumps(record), state, request=host))
    assert out["request"] == {**host, "dtype": "bfloat16"}
    assert out["api_key_file"] == f"{sc.HOST_STATE}/secrets/d1.api-key"


def test_a_record_pulled_back_has_this_machines_inputs_again(tmp_path: Path) -> None:
    mine = tmp_path / "record.json"
    mine.write_text(json.dumps({"request": {"model": "/home/me/models/tiny", "hf_token_file": None}}))
    pulled = {"request": {"model": f"{si.HOST_INPUTS}/models/tiny", "hf_token_file": f"{si.HOST_SECRETS}/hf-token",
                          "dtype": "bfloat16"}, "plans": {"web-3": {}}}  # fmt: skip
    out = json.loads(si.restored(json.dumps(pulled), mine))
    assert out["request"] == {"model": "/home/me/models/tiny", "hf_token_file": None, "dtype": "bfloat16"}
    assert out["plans"] == {"web-3": {}}  # what the loop changed stays


def test_install_ships_the_inputs_the_config_and_a_record_pointing_at_them(
    isolated_home, controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load()
    (config.state_dir / "deployments").mkdir(parents=True)
    inventory = config.state_dir / "deployments" / "d1.inventory.yml"
    inventory.write_text("all:\n  hosts:\n    web-1:\n      ansible_host: 203.0.113.5\n")
    images = {"web-1": {"ref": "zenops/vllm-zen:x", "archive": str(controller["image"])}}
    request = {"model": str(controller["model"]), "hf_token_file": str(controller["token"])}
    Store(config, inventory).save_record(ServingRecord(inventory=str(inventory), request=request, images=images))
    dep = ledger.Deployment("d1", "c1", "f1", "debian-12", 1, "provider", inventory=str(inventory))
    ctx = RunContext(config)
    seen: dict[str, Any] = {}
    with sc.shipped(ctx, dep, inventory) as goes:
        seen["record"] = [json.loads(Path(f["src"]).read_text()) for f in goes["scaler_state_files"]
                          if f["dest"].startswith("serving/")]  # fmt: skip
        seen["config"] = yaml.safe_load(Path(goes["scaler_config_file"]).read_text())
        seen["config_mode"] = stat.S_IMODE(Path(goes["scaler_config_file"]).stat().st_mode)
        seen["modes"] = {stat.S_IMODE(Path(f["src"]).stat().st_mode) for f in goes["scaler_state_files"]}
        staged_dir = Path(goes["scaler_config_file"]).parent
    assert goes["scaler_image_cache"] == si.HOST_IMAGES
    assert {f["dest"] for f in goes["scaler_inputs"]} == {
        f"{si.HOST_IMAGES}/{controller['image'].name}", f"{si.HOST_INPUTS}/models/tiny-llama",
        f"{si.HOST_SECRETS}/hf-token",
    }  # fmt: skip
    [record] = seen["record"]
    assert record["request"]["model"] == f"{si.HOST_INPUTS}/models/tiny-llama"
    assert record["request"]["hf_token_file"] == f"{si.HOST_SECRETS}/hf-token"
    assert "state_dir" not in seen["config"]  # the host's own: its XDG_STATE_HOME
    assert set(seen["config"]) == {"keep_runs", "clouds", "flavors", "docker", "ssh"}
    assert seen["config_mode"] == seen["modes"].pop() == 0o600
    assert not staged_dir.exists()  # the staged copies (an SSH key among them) are gone


def test_the_token_made_from_the_environment_goes_too_and_never_in_the_variables(
    isolated_home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load()
    inventory = tmp_path / "d1.inventory.yml"
    inventory.write_text("all: {}\n")
    Store(config, inventory).save_record(ServingRecord(inventory=str(inventory), request={"model": "org/gated"}))
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    dep = ledger.Deployment("d1", "c1", "f1", "debian-12", 1, "provider", inventory=str(inventory))
    with sc.shipped(RunContext(config), dep, inventory) as goes:
        [token] = [f for f in goes["scaler_inputs"] if f["secret"]]
        assert Path(token["src"]).read_text() == "hf_from_env"
        assert stat.S_IMODE(Path(token["src"]).stat().st_mode) == 0o600
        assert "hf_from_env" not in json.dumps(goes)  # a path, never the secret
    assert not Path(token["src"]).exists()


def test_the_loop_runs_with_the_image_cache_the_inputs_go_to() -> None:
    role = paths.collection_root() / "roles" / "scaler"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    home = defaults["scaler_home"]
    cache = jinja2.Template(defaults["scaler_image_cache"]).render(scaler_home=home)
    assert cache == si.HOST_IMAGES
    unit = jinja2.Template((role / "templates" / "zenops-scaler.service.j2").read_text()).render(
        **{**defaults, "ansible_managed": "", "scaler_deployment": "d1", "scaler_image_cache": si.HOST_IMAGES}
    )
    assert f"Environment=ZENOPS_IMAGE_CACHE={si.HOST_IMAGES}\n" in unit
    assert f"ReadWritePaths={home}\n" in unit
    assert si.HOST_IMAGES.startswith(f"{home}/")  # the loop may write there (a cache hit touches its tarball)
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert specs["scaler_image_cache"]["default"] == si.HOST_IMAGES
    assert {"scaler_inputs", "scaler_image_cache"} <= set(specs)
