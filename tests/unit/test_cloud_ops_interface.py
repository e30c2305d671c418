"""zenops.cloud.ops.interface_of: the catalog interface of a connection, passed to openstack.cloud's modules (they
pass public unless told, so a clouds.yaml entry's internal was lost: the scaling loop inside the cloud then reached
the APIs' public addresses, which it cannot)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from openstack.config import cloud_region

from zenops.cloud import ops


@pytest.mark.parametrize(
    ("configured", "passed"),
    [({"interface": "internal"}, "internal"), ({}, "public"), ({"interface": "internalURL"}, "internal"),
     ({"interface": "admin"}, "admin"), ({"interface": "bogus"}, "public")],
)  # fmt: skip
def test_the_interface_of_a_clouds_yaml_entry(configured: dict[str, str], passed: str) -> None:
    conn = SimpleNamespace(config=cloud_region.CloudRegion(config=configured))  # openstacksdk's own config object
    assert ops.interface_of(conn) == passed
