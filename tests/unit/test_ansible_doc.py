"""`ansible-doc` reads the documentation of every module and filter of the collection.

The plugins are enumerated from plugins/ (every module file, every name a filter file's FilterModule returns), so a
new plugin is covered without touching this test. ansible-doc exits 1 on an unparsable DOCUMENTATION, and only warns
(exit 0) on a name it cannot find: both fail here. ansible-lint merely prints such errors; this test is what makes
them fail CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "zenops.inference"
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


def module_names() -> list[str]:
    return sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if not p.stem.startswith("_"))


def filter_names() -> dict[str, str]:
    """Filter name -> the file that defines it, from each filter plugin's FilterModule().filters()."""
    names: dict[str, str] = {}
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        if path.stem.startswith("_"):
            continue
        spec = importlib.util.spec_from_file_location(f"zenops_doc_test_filter_{path.stem}", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in module.FilterModule().filters():
            assert name not in names, f"filter {name} defined in {names.get(name)} and {path.name}"
            names[name] = path.name
    return names


@pytest.fixture(scope="module")
def doc_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment scripts/test gives Ansible: ANSIBLE_COLLECTIONS_PATH from `python -m zenops.paths`."""
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("ZENOPS_COLLECTION_ROOT", None)
    collections = subprocess.run(
        [sys.executable, "-m", "zenops.paths"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (Path(collections) / "ansible_collections" / "zenops" / "inference").resolve() == REPO
    env.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": collections,
            "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",  # this checkout's collection, not an installed copy
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_HOME": str(tmp_path_factory.mktemp("ansible-home")),
        }
    )
    return env


def ansible_doc(env: dict[str, str], plugin_type: str, names: list[str]) -> dict[str, Any]:
    """One ansible-doc call for all the names; fails on a non-zero exit or anything on stderr."""
    proc = subprocess.run(
        [ANSIBLE_DOC, "-t", plugin_type, "--json", *(f"{NAMESPACE}.{n}" for n in names)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, f"ansible-doc -t {plugin_type} exited {proc.returncode}:\n{proc.stderr}"
    assert proc.stderr.strip() == "", f"ansible-doc -t {plugin_type} said on stderr:\n{proc.stderr}"
    docs = json.loads(proc.stdout)
    assert isinstance(docs, dict)
    assert sorted(docs) == sorted(f"{NAMESPACE}.{n}" for n in names), "ansible-doc returned other plugins"
    return docs


def _tasks(entries: list[Any]) -> list[dict[str, Any]]:
    """The tasks of a task list, those inside blocks included."""
    found: list[dict[str, Any]] = []
    for task in entries:
        assert isinstance(task, dict), f"not a task: {task!r}"
        found.append(task)
        for key in ("block", "rescue", "always"):
            found.extend(_tasks(task.get(key) or []))
    return found


def _examples_use_the_module(fqcn: str, examples: str) -> None:
    """EXAMPLES is a YAML task list and uses the plugin (a module as a task's action, a filter anywhere in it)."""
    tasks = yaml.safe_load(examples)
    assert isinstance(tasks, list), f"{fqcn}: EXAMPLES is not a YAML list of tasks"
    assert any(fqcn in task for task in _tasks(tasks)) or f"| {fqcn}" in examples, (
        f"{fqcn}: no task of EXAMPLES uses it"
    )


def test_the_collection_has_modules_and_filters():
    # The enumeration itself can fail: a moved plugins/ directory must not make the tests below vacuous.
    assert "vllm_health" in module_names()
    assert "serving_plan" in filter_names()


def test_every_module_documentation_parses(doc_env: dict[str, str]):
    names = module_names()
    docs = ansible_doc(doc_env, "module", names)
    for name in names:
        fqcn = f"{NAMESPACE}.{name}"
        entry = docs[fqcn]
        doc = entry["doc"]
        assert doc["module"] == name, fqcn
        assert Path(doc["filename"]).resolve() == REPO / "plugins" / "modules" / f"{name}.py"
        assert doc.get("short_description"), f"{fqcn}: no short_description"
        assert doc.get("description"), f"{fqcn}: no description"
        assert isinstance(doc.get("options") or {}, dict), f"{fqcn}: options is not a mapping"
        for option, spec in (doc.get("options") or {}).items():
            assert spec.get("description"), f"{fqcn}: option {option} has no description"
        assert isinstance(entry.get("return") or {}, dict), f"{fqcn}: RETURN is not a mapping"
        _examples_use_the_module(fqcn, entry.get("examples") or "")


def test_every_filter_documentation_parses(doc_env: dict[str, str]):
    files = filter_names()
    docs = ansible_doc(doc_env, "filter", sorted(files))
    for name, file in files.items():
        fqcn = f"{NAMESPACE}.{name}"
        doc = docs[fqcn]["doc"]
        assert Path(doc["filename"]).resolve() in {
            REPO / "plugins" / "filter" / file,
            REPO / "plugins" / "filter" / f"{name}.yml",
        }, fqcn
        # its own documentation, not another filter's of the same file: a file of several filters has none itself,
        # each filter has plugins/filter/<name>.yml (ansible-doc ignores those when the .py has DOCUMENTATION)
        assert doc.get("name") == name, (
            f"{fqcn}: ansible-doc shows the documentation of {doc.get('name')} ({file}); give {name} its own "
            f"plugins/filter/{name}.yml and keep DOCUMENTATION out of {file} if it defines several filters"
        )
        for option, spec in (doc.get("options") or {}).items():
            assert spec.get("description"), f"{fqcn}: option {option} has no description"
        assert doc.get("short_description"), f"{fqcn}: no short_description"
        assert doc.get("description"), f"{fqcn}: no description"
        _examples_use_the_module(fqcn, docs[fqcn].get("examples") or "")
