"""The size limits of zenops's Python (behind scripts/check-limits): at most 600 lines per module and 80 lines per
function, except what .config/limits-allow.txt names, each with its reason.

A module's length is its number of lines (``wc -l``); a function's runs from its ``def`` line to its last line
(decorators not counted; a nested def counts in its parent's length and on its own; methods are ``Class.name``), as
scripts/house_figures.py measures them. Parameters are ruff's business (PLR0913, ``max-args`` in pyproject.toml).

The allow-list has one exception a line, ``<what>  <kind>  <reason>`` separated by whitespace, ``#`` comments:

    src/zenops/planner.py           module    the one named exception: ...
    src/zenops/x.py:Class.method    function  why it stays long

An entry with no reason, an unknown kind, or one that no longer excuses anything (the module or function is within
its limit, or gone) is an error too: the list names only what is over the limit today.

Exit status: 0 within the limits, 1 with violations (each printed on its line), 2 for a bad allow-list or path.
Reads the code with Python's ast; imports nothing of zenops.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
DEFAULT_PATHS = ("src/zenops", "plugins")
DEFAULT_ALLOW = ".config/limits-allow.txt"
KINDS = ("module", "function")


class AllowListError(ValueError):
    """A line of the allow-list that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Allowed:
    what: str  # a module's path, or path:qualname for a function
    kind: str
    reason: str
    line: int


@dataclass(frozen=True)
class Finding:
    what: str
    kind: str
    lines: int
    limit: int

    def __str__(self) -> str:
        return f"{self.what}: {self.kind} of {self.lines} lines (at most {self.limit})"


def module_lines(text: str) -> int:
    """Lines of a file as ``wc -l`` counts them, a last line without a newline included."""
    return len(text.splitlines())


def function_lengths(tree: ast.Module) -> list[tuple[str, int]]:
    """(qualified name, lines) of every def in the module: methods as Class.name, nested defs as outer.inner."""
    out: list[tuple[str, int]] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                out.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                stack.append((child, name + "."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, prefix + child.name + "."))
            else:
                stack.append((child, prefix))
    return sorted(out)


def parse_allow(text: str, source: str = DEFAULT_ALLOW) -> dict[tuple[str, str], Allowed]:
    """The allow-list's entries by (what, kind); raises AllowListError naming the line of a bad or repeated one."""
    entries: dict[tuple[str, str], Allowed] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[1] not in KINDS:
            raise AllowListError(
                f"{source}:{number}: want '<path or path:function>  <{'|'.join(KINDS)}>  <reason>', got {raw.strip()!r}"
            )
        what, kind, reason = parts
        if kind == "function" and ":" not in what:
            raise AllowListError(f"{source}:{number}: a function is named path:qualname, got {what!r}")
        if (what, kind) in entries:
            first = entries[what, kind].line
            raise AllowListError(f"{source}:{number}: {what} {kind} is already allowed on line {first}")
        entries[what, kind] = Allowed(what, kind, reason, number)
    return entries


def measure(
    sources: Mapping[str, str], *, max_module: int = MAX_MODULE_LINES, max_function: int = MAX_FUNCTION_LINES
) -> list[Finding]:
    """Every module and function over its limit, for sources given as {relative path: text}."""
    found: list[Finding] = []
    for path in sorted(sources):
        text = sources[path]
        n = module_lines(text)
        if n > max_module:
            found.append(Finding(path, "module", n, max_module))
        for name, length in function_lengths(ast.parse(text, filename=path)):
            if length > max_function:
                found.append(Finding(f"{path}:{name}", "function", length, max_function))
    return found


def judge(
    findings: Iterable[Finding], allowed: Mapping[tuple[str, str], Allowed], known: Iterable[str]
) -> tuple[list[Finding], list[str]]:
    """(the findings the allow-list does not excuse, the allow-list's entries that excuse nothing found).

    ``known`` are the paths measured: an entry for a path outside them is left alone (another run's business)."""
    findings = list(findings)
    measured = set(known)
    excused = {(f.what, f.kind) for f in findings}
    violations = [f for f in findings if (f.what, f.kind) not in allowed]
    stale = [
        f"{a.what} {a.kind} (line {a.line}): within its limit or gone, remove it from the allow-list"
        for key, a in sorted(allowed.items())
        if key not in excused and a.what.split(":", 1)[0] in measured
    ]
    return violations, stale


def python_files(root: Path, paths: Iterable[str]) -> dict[str, str]:
    """{path relative to root: text} of the .py files under each path (a file or a folder)."""
    out: dict[str, str] = {}
    for rel in paths:
        base = root / rel
        if not base.exists():
            raise FileNotFoundError(f"{rel}: no such file or folder under {root}")
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for file in files:
            out[file.relative_to(root).as_posix()] = file.read_text(encoding="utf-8")
    return out


def check(
    root: Path,
    paths: Iterable[str] = DEFAULT_PATHS,
    allow: Path | None = None,
    *,
    max_module: int = MAX_MODULE_LINES,
    max_function: int = MAX_FUNCTION_LINES,
) -> tuple[list[Finding], list[str]]:
    """Measure the Python under ``paths`` of ``root`` and judge it against the allow-list (none when absent)."""
    sources = python_files(root, paths)
    allowed = parse_allow(allow.read_text(encoding="utf-8"), str(allow)) if allow and allow.is_file() else {}
    return judge(measure(sources, max_module=max_module, max_function=max_function), allowed, sources)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/check-limits",
        description=f"Fail on Python modules over {MAX_MODULE_LINES} lines and functions over {MAX_FUNCTION_LINES} "
        f"lines that {DEFAULT_ALLOW} does not name with a reason.",
    )
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), help="files or folders, from the repo root")
    parser.add_argument("--allow", default=DEFAULT_ALLOW, help="the allow-list, from the repo root (%(default)s)")
    parser.add_argument("--max-module-lines", type=int, default=MAX_MODULE_LINES)
    parser.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    args = parser.parse_args(argv)
    try:
        violations, stale = check(
            REPO,
            args.paths,
            REPO / args.allow,
            max_module=args.max_module_lines,
            max_function=args.max_function_lines,
        )
    except (AllowListError, FileNotFoundError, SyntaxError) as exc:
        print(f"check-limits: {exc}", file=sys.stderr)
        return 2
    for finding in violations:
        print(finding)
    for entry in stale:
        print(f"stale allow-list entry: {entry}")
    if violations or stale:
        print(
            f"check-limits: {len(violations)} over the limits, {len(stale)} stale allow-list entries. Split the module "
            f"or function, or name it in {args.allow} with the reason it stays.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
