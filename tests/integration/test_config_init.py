"""`zenops config init --cloud sandbox` against the sandbox cloud: the profile it decides from what the tenant sees
(the shared `provider` network, which the sandbox's clouds.yaml marks routes_externally; the external `public`
network; the `debian-12` image; the gp.5 flavors), written to the user's config file and loaded back. Nothing is
created in the cloud."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import Zenops
from zenops import config
from zenops.errors import ExitCode

pytestmark = pytest.mark.integration


def result(lines: list[dict]) -> dict:
    return next(line for line in lines if line.get("type") == "result")


def test_config_init_writes_the_sandbox_profile_and_it_loads_back(zenops: Zenops, admin):
    code, lines, err = zenops("config", "init", "--cloud", "sandbox", "--dry-run")
    assert code == 0, err[-3000:]
    plan = result(lines)
    assert plan["written"] is False
    target = Path(zenops.env["XDG_CONFIG_HOME"]) / "zenops" / "config.yaml"
    assert plan["path"] == str(target)
    assert not target.exists()
    assert plan["profile"] == {
        "network_mode": "provider",
        "provider_network": "provider",
        "external_network": "public",
        "image": "debian-12",
        "image_user": "debian",
    }
    assert plan["flavor"] == "gp.5.24.96"  # the catalogue's, by name
    assert {"gp.5.2.8", "gp.5.4.16", "gp.5.8.32"} <= {f["name"] for f in plan["flavors"]}
    assert [q["limit"] for q in plan["quota"]] == ["cores", "ram", "instances", "floating_ips"]
    # what the admin sees agrees with the choices
    provider = admin.network.find_network("provider")
    assert provider.is_shared
    assert not provider.is_router_external
    assert admin.network.find_network("public").is_router_external
    assert admin.image.find_image("debian-12").status == "active"

    target.parent.mkdir(parents=True)
    target.write_text("# the operator's own\nkeep_runs: 9\n")
    code, lines, err = zenops("config", "init", "--cloud", "sandbox")
    assert code == 0, err[-3000:]
    assert result(lines)["written"] is True
    text = target.read_text()
    assert text.startswith("# the operator's own\nkeep_runs: 9\n")
    assert "# network_mode: servers on provider network provider" in text
    loaded = config.load(target)
    assert loaded.keep_runs == 9
    profile = loaded.cloud_profile("sandbox")
    assert (profile.network_mode, profile.provider_network, profile.external_network) == (
        "provider",
        "provider",
        "public",
    )
    assert (profile.image, profile.image_user) == ("debian-12", "debian")
    code, _, err = zenops("config", "check", str(target))
    assert code == 0, err

    code, _, err = zenops("config", "init", "--cloud", "sandbox")
    assert code == ExitCode.USAGE, err
    assert "already has a profile for cloud 'sandbox'" in err
    code, lines, err = zenops("config", "init", "--cloud", "sandbox", "--force")
    assert code == 0, err[-3000:]
    assert result(lines)["replaced"] is True
    assert yaml.safe_load(target.read_text())["clouds"]["sandbox"]["network_mode"] == "provider"


def test_config_init_of_an_unknown_cloud_names_the_entries(zenops: Zenops):
    code, _, err = zenops("config", "init", "--cloud", "no-such-cloud")
    assert code == ExitCode.CLOUD, err
    assert "no cloud named 'no-such-cloud'" in err
    assert "sandbox" in err
    assert not (Path(zenops.env["XDG_CONFIG_HOME"]) / "zenops" / "config.yaml").exists()
