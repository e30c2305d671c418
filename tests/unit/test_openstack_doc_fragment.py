"""The doc fragment zenops.inference.openstack documents exactly the options ZenopsOpenStackModule adds to every
OpenStack module (COMMON_ARGS of plugins/module_utils/zenops_openstack.py), and every module built on that class
extends it instead of documenting those options again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.openstack_errors import load_zenops_openstack
from tests.unit.test_ansible_doc import ansible_doc, doc_env  # noqa: F401 - doc_env: the fixture

REPO = Path(__file__).resolve().parents[2]
FRAGMENT = REPO / "plugins" / "doc_fragments" / "openstack.py"
FRAGMENT_NAME = "zenops.inference.openstack"


def fragment_options() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("zenops_test_doc_fragment_openstack", FRAGMENT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    options = yaml.safe_load(module.ModuleDocFragment.DOCUMENTATION)["options"]
    assert isinstance(options, dict)
    return options


def openstack_modules() -> list[Path]:
    found = [p for p in sorted((REPO / "plugins" / "modules").glob("*.py")) if "ZenopsOpenStackModule" in p.read_text()]
    assert {p.stem for p in found} >= {"openstack_servers", "openstack_tags"}  # the enumeration itself works
    return found


def module_documentation(path: Path) -> dict[str, Any]:
    from ansible.parsing.plugin_docs import read_docstring  # noqa: PLC0415

    doc = read_docstring(str(path), verbose=False, ignore_errors=False)["doc"]
    assert isinstance(doc, dict)
    return doc


def test_the_fragment_documents_the_common_arguments_as_they_are():
    options = fragment_options()
    common = load_zenops_openstack().COMMON_ARGS
    assert sorted(options) == sorted(common)
    for name, arg in common.items():
        doc = options[name]
        assert doc.get("description"), name
        assert doc["type"] == arg["type"], name
        assert doc.get("required", False) == arg.get("required", False), name
        assert doc.get("default") == arg.get("default"), name


def test_every_openstack_module_extends_the_fragment_and_does_not_repeat_it():
    common = set(fragment_options())
    for path in openstack_modules():
        doc = module_documentation(path)
        fragments = doc.get("extends_documentation_fragment") or []
        fragments = [fragments] if isinstance(fragments, str) else fragments
        assert FRAGMENT_NAME in fragments, f"{path.name}: extends_documentation_fragment lacks {FRAGMENT_NAME}"
        assert not common & set(doc.get("options") or {}), f"{path.name} documents {common} again"


def test_ansible_doc_shows_the_common_options_on_every_openstack_module(doc_env: dict[str, str]):  # noqa: F811
    """What an operator reads: ansible-doc merges the fragment into each module's options."""
    names = [p.stem for p in openstack_modules()]
    docs = ansible_doc(doc_env, "module", names)
    expected = fragment_options()
    for name in names:
        options = docs[f"zenops.inference.{name}"]["doc"]["options"]
        assert {k: options.get(k) for k in expected} == expected, name
