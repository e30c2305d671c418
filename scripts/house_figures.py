#!/usr/bin/env python3
"""The house figures of zenops's code (the before/after note of a refactor): read from ``src/zenops`` with the
stdlib's ``ast`` only, nothing imported or run (but for section 6, which calls the ``duplicates`` tool).

    scripts/house-figures              the figures as text
    scripts/house-figures --json       the same as one JSON object
    scripts/house-figures --from zenops.cli.rollout:rollout_cmd    walk the calls from another function

What each figure means (the same words are printed beside it):

1. Import graph. A node is a module of ``src/zenops`` (``pkg/__init__.py`` is ``zenops.pkg``). An edge is a distinct
   (importer, imported) pair of two different zenops modules; ``from zenops.x import y`` is an edge to ``zenops.x.y``
   when that is a module, else to ``zenops.x``; relative imports are resolved; the parent packages' ``__init__`` that
   Python also runs are not edges. An edge's kind is the strongest place the pair is imported at: ``module`` (runs at
   import), ``type`` (only under ``if TYPE_CHECKING:``), ``function`` (only inside a def). Cycles are the strongly
   connected components of more than one module, over all edges and over module-level edges alone.
   Upward: a *unit* is what sits directly in ``zenops/`` (a package such as ``cli`` or ``deployment``, or a top-level
   module such as ``serve``); each unit has a layer (``LAYERS``, from the layout in CONTRIBUTING.md: the CLI over the
   drivers over the operations over a deployment's home over the infrastructure over the pure base). An import is
   upward when the imported module's unit is in a higher layer than the importer's. A unit not in ``LAYERS`` is
   listed as unlayered and its edges are not judged.
   Fan-out of a module: the distinct zenops modules it imports from outside its own unit.
2. Steps. A static call graph: a node is a top-level function or a method (``module:func``, ``module:Class.meth``;
   what nested defs and lambdas call is counted to the def around them). A call or a reference is resolved by name,
   best effort: a name defined or imported anywhere in the module (a function; a class: its ``__init__`` and
   ``__post_init__``); ``mod.f`` through an imported module; ``self.m``/``cls.m`` in the class and its zenops bases;
   ``x.m`` where ``x`` is a parameter, a ``self.`` attribute or a local whose annotation (or ``x = Class(...)``) names a
   zenops class (``for y in x``: ``y`` too); a package's re-export is followed to the module that defines it; a
   method of a ``Protocol`` also stands for the same method of every zenops class that has all the protocol's
   methods. Calls on anything else (values from containers, return values, registries) are not followed, so the
   figure is a lower bound of what runs. The steps are the functions on some path from the start to
   ``zenops.runner:run_playbook`` (the one function that starts ansible-runner), the start included and the runner
   not; the modules are those the steps are in. Also printed: every function the start reaches at all.
3. Sizes: a module's lines are its file's lines; a function's lines run from its ``def`` to its last line (decorators
   not counted); every def counts, methods and nested ones too.
4. Parameters per command: every click command under ``zenops/cli`` (``@click.command``, ``@<group>.command``), named
   as click names it, with the number of parameters of its function (an ``option_group`` argument counts once).
   Also the ``click.option(...)`` calls written in ``cli/`` and how often each ``--flag`` is declared by them (options
   made from the table by ``table_option``/``request_options`` are not ``click.option`` calls and are not counted).
5. Files a new strategy / a new service touch: a proxy, not a measure. Strategy: the files under ``src/zenops`` that
   name an existing strategy or the registry (``surge``, ``in_place``, ``STRATEGIES``, case-insensitive). Service: the
   files under ``src/zenops`` that say ``gateway`` (case-insensitive).
6. ``duplicates`` (the whole checkout, as its ``--help`` says), then ``--repo src`` and ``--repo roles``: the pairs each
   counts in its first line (it reads source files only: the roles' YAML is not read, their Python is).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "zenops"
START = "zenops.cli.campaign:run_cmd"
RUNNER = "zenops.runner:run_playbook"

#: The layers of the units directly in zenops/, top first (CONTRIBUTING.md's layout: the CLI; the drivers that
#: sequence other operations; a deployment's home and lifecycle, with the operations that run playbooks for one
#: command; the infrastructure every operation uses; the pure base). An import into a higher layer than its own is
#: upward.
LAYERS: dict[str, int] = {
    **dict.fromkeys(["cli"], 5),
    **dict.fromkeys(["campaign", "rollout"], 4),
    **dict.fromkeys(
        ["deployment", "serve", "hosts", "bench", "llamacpp_serve", "llamacpp_deploy", "devhost", "facts", "bandwidth"],
        3,
    ),
    **dict.fromkeys(["cloud", "context", "runner", "lock", "metrics", "progress", "hostkeys"], 1),
    **dict.fromkeys(
        [
            "zenops", "errors", "paths", "config", "config_edit", "statefile", "durations", "schema", "cpulist",
            "compat", "planner", "catalog", "quant", "peers", "measured", "cost", "spend", "request_options",
            "llamacpp", "llamacpp_table", "tinymodel", "report", "option_table", "scaling",
        ],
        0,
    ),
}  # fmt: skip

UPWARD_DEFINITION = (
    "upward: the imported module's unit (what sits directly in zenops/: a package or a top-level module) is in a "
    "higher layer than the importer's; layers, top first: "
    + "; ".join(
        f"{layer}: " + " ".join(sorted(u for u, lv in LAYERS.items() if lv == layer))
        for layer in sorted(set(LAYERS.values()), reverse=True)
    )
)

KIND_RANK = {"module": 0, "type": 1, "function": 2}


# -- 1. the import graph ------------------------------------------------------------------------------------------


def module_files(src: Path) -> dict[str, Path]:
    """Module name -> file, for every .py below ``src/<ROOT_PACKAGE>`` (``src``: the folder holding the package)."""
    out: dict[str, Path] = {}
    for path in sorted((src / ROOT_PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def is_package(name: str, files: Mapping[str, Path]) -> bool:
    return name in files and files[name].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom, files: Mapping[str, Path]) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package(module, files):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass(frozen=True)
class ImportSite:
    names: tuple[tuple[str, str], ...]  # (bound name, what it is bound to: a module or module.attr)
    targets: tuple[str, ...]  # the zenops modules the statement imports
    kind: str  # module | type | function


def import_sites(module: str, tree: ast.Module, files: Mapping[str, Path]) -> list[ImportSite]:
    """Every import statement of a module with the zenops modules it reaches and the names it binds."""
    out: list[ImportSite] = []

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, "function")
            elif isinstance(child, ast.If) and kind == "module" and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, "type")
                for stmt in child.orelse:
                    visit_stmt(stmt, kind)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                visit_stmt(child, kind)
            else:
                visit(child, kind)

    def visit_stmt(stmt: ast.AST, kind: str) -> None:
        if isinstance(stmt, ast.Import):
            names = []
            targets = []
            for alias in stmt.names:
                if alias.asname:
                    names.append((alias.asname, alias.name))
                else:
                    first = alias.name.split(".")[0]
                    names.append((first, first))
                if alias.name in files:
                    targets.append(alias.name)
            out.append(ImportSite(tuple(names), tuple(targets), kind))
        elif isinstance(stmt, ast.ImportFrom):
            base = _absolute(module, stmt, files)
            names = []
            targets = []
            for alias in stmt.names:
                full = f"{base}.{alias.name}"
                names.append((alias.asname or alias.name, full))
                if full in files:
                    targets.append(full)
                elif base in files:
                    targets.append(base)
            out.append(ImportSite(tuple(names), tuple(targets), kind))
        else:
            visit(stmt, kind)

    visit(tree, "module")
    return out


@dataclass
class Graph:
    modules: list[str]
    edges: dict[tuple[str, str], str]  # (importer, imported) -> strongest kind

    def successors(self, kinds: Iterable[str] = ("module", "type", "function")) -> dict[str, set[str]]:
        wanted = set(kinds)
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for (a, b), kind in self.edges.items():
            if kind in wanted:
                out[a].add(b)
        return out


def parse_all(files: Mapping[str, Path]) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8"), str(path)) for name, path in files.items()}


def import_graph(files: Mapping[str, Path], trees: Mapping[str, ast.Module]) -> Graph:
    edges: dict[tuple[str, str], str] = {}
    for module, tree in trees.items():
        for site in import_sites(module, tree, files):
            for target in site.targets:
                if target == module:
                    continue
                key = (module, target)
                if key not in edges or KIND_RANK[site.kind] < KIND_RANK[edges[key]]:
                    edges[key] = site.kind
    return Graph(sorted(files), edges)


def cycles(successors: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(successors):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(successors[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward(edges: Iterable[tuple[str, str]], layers: Mapping[str, int]) -> list[tuple[str, str]]:
    return sorted(
        (a, b)
        for a, b in edges
        if unit_of(a) in layers and unit_of(b) in layers and layers[unit_of(b)] > layers[unit_of(a)]
    )


def fan_out(graph: Graph) -> dict[str, int]:
    out: Counter[str] = Counter()
    for a, b in graph.edges:
        if unit_of(a) != unit_of(b):
            out[a] += 1
    return dict(out)


# -- 2. the call graph --------------------------------------------------------------------------------------------


@dataclass
class ClassInfo:
    module: str
    name: str
    bases_ast: list[ast.expr]
    bases: list[str] = field(default_factory=list)  # resolved ("module:Class") where zenops's
    methods: set[str] = field(default_factory=set)
    attrs: dict[str, ast.expr] = field(default_factory=dict)  # annotated attributes (dataclass fields, self.x: T)
    protocol: bool = False


def _bindings(module: str, tree: ast.Module, files: Mapping[str, Path]) -> dict[str, str]:
    """Name -> what it stands for anywhere in the module: ``module`` (a zenops module) or ``module:name``."""
    out: dict[str, str] = {}
    for site in import_sites(module, tree, files):
        for name, full in site.names:
            if full in files:
                out[name] = full
            elif "." in full and full.rsplit(".", 1)[0] in files:
                base, attr = full.rsplit(".", 1)
                out[name] = f"{base}:{attr}"
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = f"{module}:{node.name}"
    return out


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


class CallGraph:
    """Functions and methods of the package and what each calls or names (see the module's docstring)."""

    def __init__(self, files: Mapping[str, Path], trees: Mapping[str, ast.Module]) -> None:
        self.files = files
        self.bindings = {m: _bindings(m, t, files) for m, t in trees.items()}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.owner: dict[str, str] = {}  # function -> its module
        self.classes: dict[str, ClassInfo] = {}
        for module, tree in trees.items():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions[f"{module}:{node.name}"] = node
                    self.owner[f"{module}:{node.name}"] = module
                elif isinstance(node, ast.ClassDef):
                    self._add_class(module, node)
        for info in self.classes.values():
            info.bases = [
                self._canonical(b) for b in (self._resolve_expr_name(info.module, e) for e in info.bases_ast) if b
            ]
            info.protocol = any((_dotted(e) or [""])[-1] == "Protocol" for e in info.bases_ast)
        self.edges: dict[str, set[str]] = {f: self._calls(f) for f in self.functions}

    def _add_class(self, module: str, node: ast.ClassDef) -> None:
        qual = f"{module}:{node.name}"
        info = ClassInfo(module, node.name, list(node.bases))
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                info.methods.add(item.name)
                self.functions[f"{qual}.{item.name}"] = item
                self.owner[f"{qual}.{item.name}"] = module
                for sub in ast.walk(item):
                    if (
                        isinstance(sub, ast.AnnAssign)
                        and isinstance(sub.target, ast.Attribute)
                        and isinstance(sub.target.value, ast.Name)
                        and sub.target.value.id == "self"
                    ):
                        info.attrs.setdefault(sub.target.attr, sub.annotation)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                info.attrs[item.target.id] = item.annotation
        self.classes[qual] = info

    # -- name resolution

    def _resolve_expr_name(self, module: str, expr: ast.expr) -> str | None:
        """What a dotted name stands for: ``module``, ``module:name`` or None (not zenops's)."""
        parts = _dotted(expr)
        if not parts:
            return None
        bound = self.bindings[module].get(parts[0])
        if bound is None:
            return None
        for i, part in enumerate(parts[1:], 1):
            if ":" in bound:
                return bound if i == len(parts) else f"{bound}.{'.'.join(parts[i:])}"
            sub = f"{bound}.{part}"
            # a package's own name (a re-export) shadows a submodule of that name, as in Python
            bound = self.bindings[bound].get(part) or (sub if sub in self.files else f"{bound}:{part}")
        return bound

    def _annotation_classes(self, module: str, annotation: ast.expr | None) -> list[str]:
        """The zenops classes an annotation names (``T``, ``T | None``, ``"T"``, ``Optional[T]``...)."""
        if annotation is None:
            return []
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return []
        out = []
        for node in ast.walk(annotation):
            if isinstance(node, ast.Name | ast.Attribute):
                target = self._resolve_expr_name(module, node)
                if target and self._canonical(target) in self.classes:
                    out.append(self._canonical(target))
        return out

    def _method(self, cls: str, name: str, seen: set[str] | None = None) -> list[str]:
        """``cls.name`` looked up in the class and its zenops bases; a protocol's also in its implementations."""
        seen = seen or set()
        if cls in seen or cls not in self.classes:
            return []
        seen.add(cls)
        info = self.classes[cls]
        if name in info.methods:
            found = [f"{cls}.{name}"]
            if info.protocol:
                found += [
                    f"{q}.{name}"
                    for q, other in self.classes.items()
                    if q != cls and not other.protocol and info.methods <= other.methods
                ]
            return found
        for base in info.bases:
            found = self._method(base, name, seen)
            if found:
                return found
        return []

    def _canonical(self, target: str) -> str:
        """``pkg:name`` where ``pkg`` only re-exports ``name`` (``from pkg.mod import name``): ``pkg.mod:name``."""
        for _ in range(10):
            module, sep, rest = target.partition(":")
            head = rest.split(".")[0]
            if not sep or module not in self.bindings or f"{module}:{head}" in self.functions:
                return target
            if f"{module}:{head}" in self.classes:
                return target
            bound = self.bindings[module].get(head)
            if bound is None or bound == f"{module}:{head}":
                return target
            tail = rest[len(head) :]
            target = bound + tail if ":" in bound else (f"{bound}:{tail[1:]}" if tail else bound)
        return target

    def _callable(self, target: str) -> list[str]:
        target = self._canonical(target)
        if target in self.functions:
            return [target]
        if target in self.classes:
            return [f"{target}.{m}" for m in ("__init__", "__post_init__") if f"{target}.{m}" in self.functions]
        if ":" in target:
            cls, _, meth = target.rpartition(".")
            if cls in self.classes:
                return self._method(cls, meth)
        return []

    def _calls(self, function: str) -> set[str]:
        module = self.owner[function]
        node = self.functions[function]
        qual_class = function.rsplit(".", 1)[0] if "." in function.split(":", 1)[1] else None
        types: dict[str, list[str]] = {}
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            types[arg.arg] = self._annotation_classes(module, arg.annotation)
        for sub in ast.walk(node):
            if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                types[sub.target.id] = self._annotation_classes(module, sub.annotation)
            elif isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call):
                made = self._resolve_expr_name(module, sub.value.func)
                made = self._canonical(made) if made else None
                if made in self.classes:
                    for target in sub.targets:
                        if isinstance(target, ast.Name):
                            types[target.id] = [made]
        for sub in ast.walk(node):
            if isinstance(sub, ast.For) and isinstance(sub.target, ast.Name) and isinstance(sub.iter, ast.Name):
                types.setdefault(sub.target.id, types.get(sub.iter.id, []))
        out: set[str] = set()
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Name | ast.Attribute) or not isinstance(sub.ctx, ast.Load):
                continue
            out.update(self._refers(module, qual_class, types, sub))
        out.discard(function)
        return out

    def _refers(self, module: str, qual_class: str | None, types: Mapping[str, list[str]], node: ast.expr) -> list[str]:
        parts = _dotted(node)
        if not parts:
            return []
        head = parts[0]
        if head in ("self", "cls") and qual_class and len(parts) >= 2:
            if len(parts) == 2:
                return self._method(qual_class, parts[1])
            if len(parts) == 3:
                info = self.classes.get(qual_class)
                annotation = info.attrs.get(parts[1]) if info else None
                holder = info.module if info else module
                return [f for c in self._annotation_classes(holder, annotation) for f in self._method(c, parts[2])]
            return []
        if head in types and len(parts) == 2:
            return [f for c in types[head] for f in self._method(c, parts[1])]
        if head in types:
            return []
        target = self._resolve_expr_name(module, node)
        return self._callable(target) if target else []

    def steps(self, start: str, goal: str) -> list[str]:
        """The functions on some path from ``start`` to ``goal``: start included, goal not."""
        forward = _reach(self.edges, start)
        backward_edges: dict[str, set[str]] = {}
        for a, bs in self.edges.items():
            for b in bs:
                backward_edges.setdefault(b, set()).add(a)
        backward = _reach(backward_edges, goal)
        return sorted((forward & backward) - {goal})

    def reachable(self, start: str) -> list[str]:
        """Every function the start reaches by the resolved calls, itself included."""
        return sorted(_reach(self.edges, start))


def _reach(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# -- 3. sizes -----------------------------------------------------------------------------------------------------


def function_sizes(trees: Mapping[str, ast.Module]) -> list[tuple[int, str]]:
    out = []
    for module, tree in trees.items():
        stack: list[tuple[ast.AST, str]] = [(tree, module + ":")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = prefix + child.name
                    out.append(((child.end_lineno or child.lineno) - child.lineno + 1, name))
                    stack.append((child, name + "."))
                elif isinstance(child, ast.ClassDef):
                    stack.append((child, prefix + child.name + "."))
                else:
                    stack.append((child, prefix))
    return sorted(out, key=lambda x: (-x[0], x[1]))


# -- 4. parameters per command ------------------------------------------------------------------------------------


def _click_name(function: str) -> str:
    name = function.lower()
    for suffix in ("_command", "_cmd", "_group", "_grp"):
        if name.endswith(suffix) and name != suffix.lstrip("_"):
            name = name[: -len(suffix)]
            break
    return name.replace("_", "-")


def _decorator_name(call: ast.Call, function: str) -> str:
    for arg in call.args[:1]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    for kw in call.keywords:
        if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    return _click_name(function)


def commands(trees: Mapping[str, ast.Module]) -> dict[str, int]:
    """``"group sub"`` or ``"cmd"`` -> the number of parameters of its click function."""
    out: dict[str, int] = {}
    for tree in trees.values():
        groups: dict[str, str] = {}
        found: list[tuple[str | None, str, int]] = []
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if not isinstance(deco, ast.Call) or not isinstance(deco.func, ast.Attribute):
                    continue
                owner = _dotted(deco.func.value)
                attr = deco.func.attr
                params = len(node.args.posonlyargs) + len(node.args.args) + len(node.args.kwonlyargs)
                if attr in ("group", "command") and owner == ["click"]:
                    if attr == "group":
                        groups[node.name] = _decorator_name(deco, node.name)
                    else:
                        found.append((None, _decorator_name(deco, node.name), params))
                elif attr in ("group", "command") and owner and len(owner) == 1:
                    if attr == "group":
                        groups[node.name] = _decorator_name(deco, node.name)
                    found.append((owner[0], _decorator_name(deco, node.name), params))
        for group, name, params in found:
            prefix = groups.get(group, group) if group else None
            out[f"{prefix} {name}" if prefix else name] = params
    return dict(sorted(out.items()))


def click_options(trees: Iterable[ast.Module]) -> tuple[int, Counter[str]]:
    """The ``click.option(...)`` calls and how often each ``--flag`` is declared by them."""
    calls = 0
    flags: Counter[str] = Counter()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func) == ["click", "option"]:
                calls += 1
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                        flags[arg.value.split("/")[0]] += 1
    return calls, flags


# -- 5. proxies ---------------------------------------------------------------------------------------------------

STRATEGY_WORDS = re.compile(r"surge|in_place|STRATEGIES", re.IGNORECASE)
SERVICE_WORDS = re.compile(r"gateway", re.IGNORECASE)


def files_saying(files: Iterable[Path], pattern: re.Pattern[str], base: Path) -> list[str]:
    out = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if pattern.search(text):
            out.append(str(path.relative_to(base)))
    return sorted(out)


# -- 6. duplicates ------------------------------------------------------------------------------------------------


def duplicates(repo: Path, folder: str) -> dict[str, Any]:
    tool = shutil.which("duplicates")
    if tool is None:
        return {"folder": folder, "pairs": None, "line": "duplicates is not on PATH"}
    done = subprocess.run(
        [tool, "--repo", str(repo / folder), "--most", "1", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
    )
    first = (done.stdout.strip().splitlines() or [""])[0]
    match = re.search(r"(\d+) pairs?", first)
    pairs = 0 if first.startswith("no duplicates") else int(match.group(1)) if match else None
    extra = [ln for ln in done.stdout.splitlines() if ln.startswith(("incomplete:", "left out:"))]
    return {"folder": folder, "pairs": pairs, "line": first, "notes": extra}


# -- the whole ----------------------------------------------------------------------------------------------------


def figures(repo: Path, start: str = START, *, run_duplicates: bool = True) -> dict[str, Any]:
    src = repo / "src"
    files = module_files(src)
    trees = parse_all(files)
    graph = import_graph(files, trees)
    kinds = Counter(graph.edges.values())
    up = upward(graph.edges, LAYERS)
    fan = sorted(fan_out(graph).items(), key=lambda x: (-x[1], x[0]))
    calls = CallGraph(files, trees)
    if start not in calls.functions:
        raise SystemExit(f"house-figures: no function {start} (give --from module:function)")
    steps = calls.steps(start, RUNNER)
    reached = calls.reachable(start)
    lines = sorted(((len(p.read_text(encoding="utf-8").splitlines()), m) for m, p in files.items()), reverse=True)
    sizes = function_sizes(trees)
    cli_trees = {m: t for m, t in trees.items() if m.startswith(f"{ROOT_PACKAGE}.cli.")}
    option_calls, flags = click_options(cli_trees.values())
    py_and_more = [p for p in sorted((src / ROOT_PACKAGE).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return {
        "commit": _commit(repo),
        "imports": {
            "modules": len(graph.modules),
            "edges": len(graph.edges),
            "edges_by_kind": {k: kinds.get(k, 0) for k in KIND_RANK},
            "upward_definition": UPWARD_DEFINITION,
            "upward": [f"{a} -> {b}" for a, b in up],
            "upward_by_kind": dict(Counter(graph.edges[e] for e in up)),
            "unlayered": sorted({unit_of(m) for m in graph.modules} - set(LAYERS)),
            "cycles": cycles(graph.successors()),
            "cycles_module_level": cycles(graph.successors(["module"])),
            "fan_out_top": fan[:10],
        },
        "steps": {
            "from": start,
            "to": RUNNER,
            "steps": len(steps),
            "modules": len({calls.owner[s] for s in steps}),
            "functions": steps,
            "reachable": len(reached),
            "reachable_modules": len({calls.owner[f] for f in reached}),
        },
        "sizes": {
            "modules_top": [[n, m] for n, m in lines[:10]],
            "modules_over_600": [m for n, m in lines if n > 600],
            "functions_80_or_more": len([1 for n, _ in sizes if n >= 80]),
            "functions_top": [[n, f] for n, f in sizes[:15]],
        },
        "commands": {
            "parameters": commands(cli_trees),
            "click_option_calls": option_calls,
            "flags_declared_more_than_once": dict(sorted((f, n) for f, n in flags.items() if n > 1)),
        },
        "touch_proxies": {
            "strategy": files_saying(py_and_more, STRATEGY_WORDS, repo),
            "service": files_saying(py_and_more, SERVICE_WORDS, repo),
        },
        "duplicates": [duplicates(repo, f) for f in (".", "src", "roles")] if run_duplicates else [],
    }


def _commit(repo: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def render(fig: Mapping[str, Any]) -> str:
    imp, st, sz, cmd, tp = fig["imports"], fig["steps"], fig["sizes"], fig["commands"], fig["touch_proxies"]
    out = [f"house figures of src/zenops at {fig['commit']}", "", "1. import graph"]
    by_kind = ", ".join(f"{k} {n}" for k, n in imp["edges_by_kind"].items())
    out.append(f"  modules {imp['modules']}; imports (distinct module pairs) {imp['edges']}: {by_kind}")
    up_kinds = ", ".join(f"{k} {n}" for k, n in sorted(imp["upward_by_kind"].items()))
    out.append(f"  upward imports {len(imp['upward'])}" + (f" ({up_kinds})" if up_kinds else ""))
    out.append(f"  ({imp['upward_definition']})")
    out += [f"    {e}" for e in imp["upward"]]
    if imp["unlayered"]:
        out.append(f"  unlayered units (their imports not judged): {' '.join(imp['unlayered'])}")
    out.append(f"  cycles (all imports) {len(imp['cycles'])}; at module level {len(imp['cycles_module_level'])}")
    out += [f"    [{len(c)}] {' '.join(c)}" for c in imp["cycles"]]
    out += [f"    module level [{len(c)}] {' '.join(c)}" for c in imp["cycles_module_level"]]
    out.append("  fan-out (distinct zenops modules imported from outside the module's unit), top 10:")
    out += [f"    {n:3d} {m}" for m, n in imp["fan_out_top"]]
    out += ["", f"2. steps from {st['from']} to {st['to']}: {st['steps']} functions in {st['modules']} modules"]
    out += [f"    {f}" for f in st["functions"]]
    out.append(
        f"  all the start reaches by the resolved calls (to the playbooks or not): {st['reachable']} functions in "
        f"{st['reachable_modules']} modules"
    )
    out += ["", "3. sizes", f"  modules over 600 lines: {len(sz['modules_over_600'])}; largest:"]
    out += [f"    {n:5d} {m}" for n, m in sz["modules_top"]]
    out.append(f"  functions of 80 lines or more: {sz['functions_80_or_more']}; largest:")
    out += [f"    {n:5d} {f}" for n, f in sz["functions_top"]]
    out += ["", "4. parameters per command (of its click function)"]
    out += [f"    {n:3d} {c}" for c, n in sorted(cmd["parameters"].items(), key=lambda x: (-x[1], x[0]))]
    out.append(f"  click.option calls in cli/: {cmd['click_option_calls']}; flags declared more than once:")
    out += [
        f"    {n:3d} {f}" for f, n in sorted(cmd["flags_declared_more_than_once"].items(), key=lambda x: (-x[1], x))
    ]
    out += ["", "5. files a new strategy / service touch (a proxy: files under src/zenops that name them)"]
    out.append(f"  strategy (surge|in_place|STRATEGIES): {len(tp['strategy'])} files")
    out += [f"    {f}" for f in tp["strategy"]]
    out.append(f"  service (gateway): {len(tp['service'])} files")
    out += [f"    {f}" for f in tp["service"]]
    out += ["", "6. duplicates"]
    for d in fig["duplicates"]:
        out.append(f"  --repo {d['folder']}: {d['pairs']} pairs  [{d['line']}]")
        out += [f"    {n}" for n in d.get("notes", [])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="house-figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument("--from", dest="start", default=START, help=f"where the call walk starts (default {START})")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    parser.add_argument("--no-duplicates", action="store_true", help="skip section 6 (the duplicates tool)")
    args = parser.parse_args(argv)
    fig = figures(args.repo.resolve(), args.start, run_duplicates=not args.no_duplicates)
    print(json.dumps(fig, indent=2) if args.json else render(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
