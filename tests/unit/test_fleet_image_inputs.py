"""zenops.serve.fleet_image_inputs: servers added to a running deployment get the engine image it runs (its inputs
digest from the serving record), not one this machine would hash from its own inputs. Found by the scaling e2e: the
loop's host, without the controller's pip settings, hashed another digest, missed the shipped tarball and built."""

from __future__ import annotations

from dataclasses import replace

from zenops import compat
from zenops.deployment.record import ServingRecord
from zenops.serve import ServeRequest, fleet_image_inputs

D1, D2 = "a" * 64, "b" * 64


def setup() -> tuple[ServingRecord, ServeRequest, compat.Combo]:
    combo = compat.engine_of({}).combo  # the default pair
    req = ServeRequest(model="m", image_source="pip", base_image="zenops/bookworm-slim:latest")
    record = ServingRecord(
        inventory="d.yml",
        compat=combo.to_dict(),
        request={"image_source": "pip", "base_image": "zenops/bookworm-slim:latest", "model": "m"},
        images={"h1": {"ref": combo.image_tag, "inputs": D1}, "h2": {"ref": combo.image_tag, "inputs": D1}},
    )
    return record, req, combo


def test_servers_added_with_the_same_engine_get_the_fleets_image() -> None:
    record, req, combo = setup()
    assert fleet_image_inputs(record, req, combo, "h3") == D1
    # a rollout's batch changing only the model: the same image
    assert fleet_image_inputs(record, replace(req, model="other"), combo, "h1") == D1


def test_no_pin_for_a_whole_serve_another_engine_or_no_single_image() -> None:
    record, req, combo = setup()
    assert fleet_image_inputs(record, req, combo, None) == ""  # `up` of the whole deployment: its own inputs
    assert fleet_image_inputs(None, req, combo, "h3") == ""
    assert fleet_image_inputs(record, replace(req, base_image="debian:bookworm-slim"), combo, "h3") == ""
    assert fleet_image_inputs(record, replace(req, image_source="prebuilt"), combo, "h3") == ""
    other = replace(record, compat={**record.compat, "id": "another-pair"})
    assert fleet_image_inputs(other, req, combo, "h3") == ""
    mixed = replace(record, images={"h1": {"inputs": D1}, "h2": {"inputs": D2}})
    assert fleet_image_inputs(mixed, req, combo, "h3") == ""
    older = replace(record, images={"h1": {"ref": combo.image_tag}})  # a record from before the digest was kept
    assert fleet_image_inputs(older, req, combo, "h3") == ""
