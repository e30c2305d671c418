"""scripts/check_limits.py (behind scripts/check-limits): modules over 600 lines and functions over 80 lines, except
what the allow-list names with a reason, on small files written to tmp_path."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("check_limits", REPO / "scripts" / "check_limits.py")
assert _spec is not None
assert _spec.loader is not None
cl = importlib.util.module_from_spec(_spec)
sys.modules["check_limits"] = cl  # dataclasses look their module up by name
_spec.loader.exec_module(cl)


def _function(name: str, lines: int, indent: str = "") -> str:
    """A def of exactly ``lines`` lines (its def line included)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}():\n{body}"


def _module(lines: int) -> str:
    return "".join(f"A{i} = {i}\n" for i in range(lines))


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_module_over_600_lines_is_reported_and_one_of_600_is_not(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/big.py": _module(601), "pkg/edge.py": _module(600), "pkg/small.py": _module(3)})
    violations, stale = cl.check(tmp_path, ["pkg"])
    assert [str(v) for v in violations] == ["pkg/big.py: module of 601 lines (at most 600)"]
    assert stale == []


def test_functions_over_80_lines_are_reported_by_qualified_name(tmp_path: Path) -> None:
    text = (
        _function("long", 81)
        + _function("edge", 80)
        + "class Rollout:\n"
        + _function("prepare", 85, indent="    ")
        + "def outer():\n"
        + _function("inner", 82, indent="    ")
    )
    _write(tmp_path, {"pkg/mod.py": text})
    violations, _ = cl.check(tmp_path, ["pkg"])
    assert {(v.what, v.lines) for v in violations} == {
        ("pkg/mod.py:long", 81),
        ("pkg/mod.py:Rollout.prepare", 85),
        ("pkg/mod.py:outer", 83),  # the nested def counts in its parent's length
        ("pkg/mod.py:outer.inner", 82),
    }


def test_decorators_do_not_count_in_a_functions_length(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/mod.py": "import functools\n\n\n@functools.cache\n@functools.cache\n" + _function("f", 80)})
    assert cl.check(tmp_path, ["pkg"]) == ([], [])


def test_the_allow_list_excuses_what_it_names_and_reports_stale_entries(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "src/planner.py": _module(700),
            "src/run.py": _function("prepare", 90) + _function("small", 3),
            "src/other.py": _module(650),
        },
    )
    allow = tmp_path / "allow.txt"
    allow.write_text(
        "# exceptions\n"
        "src/planner.py  module  the one named exception\n"
        "src/run.py:prepare  function  reads as one sequence  # trailing comment\n"
        "src/run.py:small  function  no longer long\n"
        "src/run.py  module  never was long\n"
        "elsewhere/x.py  module  not measured in this run\n"
    )
    violations, stale = cl.check(tmp_path, ["src"], allow)
    assert [str(v) for v in violations] == ["src/other.py: module of 650 lines (at most 600)"]
    assert [s.split(" (")[0] for s in stale] == ["src/run.py module", "src/run.py:small function"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("src/x.py  module\n", "want '<path or path:function>  <module|function>  <reason>'"),
        ("src/x.py  class  a reason\n", "want '<path or path:function>"),
        ("src/x.py  function  a reason\n", "a function is named path:qualname"),
        ("src/x.py  module  one\nsrc/x.py  module  two\n", "already allowed on line 1"),
    ],
)
def test_a_bad_allow_list_line_is_refused_naming_its_line(text: str, message: str) -> None:
    with pytest.raises(cl.AllowListError, match=r"allow\.txt:\d+: ") as info:
        cl.parse_allow(text, "allow.txt")
    assert message in str(info.value)


def test_main_exits_1_listing_violations_and_2_on_a_bad_allow_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limits_py = "scripts/check_limits.py"
    assert cl.main([limits_py, "--allow", str(tmp_path / "none.txt")]) == 0  # no allow-list: nothing excused
    assert cl.main([limits_py, "--allow", str(tmp_path / "none.txt"), "--max-module-lines", "10"]) == 1
    assert f"{limits_py}: module of " in capsys.readouterr().out
    bad = tmp_path / "bad.txt"
    bad.write_text("scripts/check_limits.py  module\n")
    assert cl.main([limits_py, "--allow", str(bad)]) == 2
    assert f"{bad}:1: want" in capsys.readouterr().err


def test_the_shipped_allow_list_parses_and_gives_each_entry_a_reason() -> None:
    entries = cl.parse_allow((REPO / cl.DEFAULT_ALLOW).read_text(), cl.DEFAULT_ALLOW)
    assert entries, "the allow-list names at least the planner"
    assert all(len(e.reason.split()) >= 3 for e in entries.values()), "each exception says why in a few words"


def test_function_lengths_name_methods_by_class_and_count_async_defs() -> None:
    tree = cl.ast.parse(
        textwrap.dedent(
            """\
            def a():
                return 1


            class B:
                async def c(self):
                    pass
            """
        )
    )
    assert cl.function_lengths(tree) == [("B.c", 2), ("a", 2)]
