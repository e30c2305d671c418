"""What a user installing zenops gets besides the wheel's contents (tests/unit/test_packaging.py): the license
pyproject names, the `tiny` extra that `zenops tiny-model` needs (and the error that names it), and shipped text that
cites only documents the user has."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

from zenops import tinymodel
from zenops.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _third_party_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("zenops", "__future__")}


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_tiny_extra_holds_every_library_tinymodel_imports():
    extras = PYPROJECT["project"]["optional-dependencies"]
    package = Path(tinymodel.__file__).parent  # zenops/tinymodel/: the package and its submodules
    needed = set().union(*(_third_party_imports(p) for p in sorted(package.glob("*.py"))))
    assert needed == {"numpy", "sentencepiece"}
    assert needed <= _requirement_names(extras["tiny"])
    assert "zenops" in _requirement_names(extras["test"])  # the test extra pulls zenops[tiny] in
    assert "zenops[tiny]" in extras["test"]


def test_tiny_model_without_its_libraries_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import sentencepiece -> ImportError
    with pytest.raises(UsageError) as info:
        tinymodel._require_deps()
    assert "pip install 'zenops[tiny]'" in str(info.value.hint)


def test_the_license_pyproject_names_is_shipped_whole():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text
    assert len(text) > 11000  # the full text, not a stub


# where a user reads text: the package (help, plan reasons, catalogue), the collection, the README and its docs
SHIPPED = ["src", "roles", "plugins", "playbooks", "meta", "inventories", "README.md", "pyproject.toml", "galaxy.yml"]
UNSHIPPED_DOCS = re.compile(r"\.\./shared|shared/reference|DESIGN\.md|/work/")


def test_shipped_text_cites_no_document_the_user_does_not_have():
    hits = []
    for entry in SHIPPED:
        base = ROOT / entry
        for f in [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()):
            if f.suffix in (".pyc", ".so", ".png", ".gz") or "__pycache__" in f.parts:
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if UNSHIPPED_DOCS.search(line):
                    hits.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
    # a document the shipped text names by file name is one the repository ships (docs/reference/)
    for name in ("serving-layouts.md", "vllm-zentorch.md"):
        assert (ROOT / "docs" / "reference" / name).is_file()
