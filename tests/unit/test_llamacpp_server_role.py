"""roles/llamacpp_server's interface: every public default is documented in meta/argument_specs.yml with the same
value, and the role's vars name internals only (house style: llamacpp_server_* public, _llamacpp_server_* internal)."""

from __future__ import annotations

import yaml

from tests.conftest import REPO

ROLE = REPO / "roles" / "llamacpp_server"


def _load(rel: str):
    return yaml.safe_load((ROLE / rel).read_text())


def test_every_default_is_documented_with_its_value():
    defaults = _load("defaults/main.yml")
    specs = _load("meta/argument_specs.yml")["argument_specs"]
    documented = {**specs["absent"]["options"], **specs["main"]["options"]}
    assert set(specs) == {"main", "absent"}
    assert all(k.startswith("llamacpp_server_") for k in defaults)
    missing = sorted(set(defaults) - set(documented))
    assert missing == [], f"defaults without a spec entry: {missing}"
    for name, spec in documented.items():
        if "default" in spec and "{{" not in str(defaults.get(name, "")):
            assert defaults[name] == spec["default"], name
        assert spec.get("description"), name


def test_the_roles_vars_are_internal():
    assert all(k.startswith("_llamacpp_server_") for k in _load("vars/main.yml"))
