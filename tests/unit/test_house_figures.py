"""scripts/house_figures.py (behind scripts/house-figures): the import graph (edges and their kinds, cycles, upward
imports, fan-out), the call walk from a command to the runner, and the parameters per click command, each on a small
package written to tmp_path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("house_figures", REPO / "scripts" / "house_figures.py")
assert _spec is not None
assert _spec.loader is not None
hf = importlib.util.module_from_spec(_spec)
sys.modules["house_figures"] = hf  # dataclasses look their module up by name
_spec.loader.exec_module(hf)


def _package(root: Path, files: dict[str, str]) -> Path:
    """Writes ``src/zenops/<path>`` for each entry (``__init__.py`` of every folder made empty) and returns src."""
    src = root / "src"
    for rel, text in files.items():
        path = src / "zenops" / rel
        for folder in [path.parent, *path.parent.parents]:
            if folder == src:
                break
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch(exist_ok=True)
        path.write_text(text)
    return src


def _graph(src: Path):
    files = hf.module_files(src)
    trees = hf.parse_all(files)
    return files, trees, hf.import_graph(files, trees)


def test_edges_get_their_strongest_kind_and_resolve_submodules_relative_imports_and_attributes(tmp_path):
    src = _package(
        tmp_path,
        {
            "lib/a.py": "from zenops.lib import b\nfrom . import c\nfrom .d import thing\n",
            "lib/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zenops.lib.c import C\n",
            "lib/c.py": "def f():\n    import zenops.lib.d\n",
            "lib/d.py": "thing = 1\n",
            "top.py": "import os\nfrom zenops.lib.d import thing\n\ndef g():\n    from zenops.lib import d\n",
        },
    )
    _, _, graph = _graph(src)
    assert graph.edges == {
        ("zenops.lib.a", "zenops.lib.b"): "module",  # a submodule, not the package
        ("zenops.lib.a", "zenops.lib.c"): "module",  # relative
        ("zenops.lib.a", "zenops.lib.d"): "module",  # an attribute of a module: the module
        ("zenops.lib.b", "zenops.lib.c"): "type",
        ("zenops.lib.c", "zenops.lib.d"): "function",
        ("zenops.top", "zenops.lib.d"): "module",  # also imported in g: the module level wins
    }
    assert len(graph.modules) == 7  # zenops, zenops.lib and the five files


def test_cycles_count_function_level_imports_apart_from_module_level_ones(tmp_path):
    src = _package(
        tmp_path,
        {
            "a.py": "from zenops import b\n",
            "b.py": "def f():\n    from zenops import a\n",
            "c.py": "from zenops import d\n",
            "d.py": "from zenops import e\n",
            "e.py": "from zenops import c\n",
            "f.py": "from zenops import a\n",
        },
    )
    _, _, graph = _graph(src)
    assert hf.cycles(graph.successors()) == [["zenops.c", "zenops.d", "zenops.e"], ["zenops.a", "zenops.b"]]
    assert hf.cycles(graph.successors(["module"])) == [["zenops.c", "zenops.d", "zenops.e"]]


def test_an_import_into_a_higher_layers_unit_is_upward_and_fan_out_counts_other_units(tmp_path):
    src = _package(
        tmp_path,
        {
            "cli/up.py": "from zenops.lib import x\nfrom zenops.lib import y\nfrom zenops.cli import text\n",
            "cli/text.py": "",
            "lib/x.py": "def f():\n    from zenops.cli import text\n",
            "lib/y.py": "from zenops import base\nfrom zenops.lib import x\n",
            "base.py": "from zenops import odd\n",
            "odd.py": "from zenops.cli import text\n",
        },
    )
    _, _, graph = _graph(src)
    layers = {"cli": 2, "lib": 1, "base": 0}
    assert hf.upward(graph.edges, layers) == [("zenops.lib.x", "zenops.cli.text")]  # odd is unlayered: not judged
    assert hf.fan_out(graph) == {"zenops.cli.up": 2, "zenops.lib.x": 1, "zenops.lib.y": 1, "zenops.base": 1,
                                 "zenops.odd": 1}  # fmt: skip


def test_the_steps_are_the_functions_on_a_path_from_the_command_to_the_runner(tmp_path):
    src = _package(
        tmp_path,
        {
            "runner.py": "def run_playbook(spec):\n    return _inner()\n\ndef _inner():\n    pass\n",
            "context.py": (
                "from zenops.runner import run_playbook\n\n"
                "class Ctx:\n    def run(self, spec):\n        return run_playbook(spec)\n"
            ),
            "ops/__init__.py": "from zenops.ops.serve import serve\nfrom zenops.ops.serve import serve as start\n",
            "ops/serve.py": (
                "from typing import Protocol\nfrom zenops.context import Ctx\n\n"
                "class Service(Protocol):\n    def apply(self, ctx: Ctx) -> None: ...\n\n"
                "class Gateway:\n    def apply(self, ctx: Ctx) -> None:\n        ctx.run('gw')\n\n"
                "class Quiet:\n    def apply(self, ctx: Ctx) -> None:\n        pass\n\n"
                "def serve(ctx: Ctx, services: list[Service]) -> None:\n"
                "    _plan()\n    for s in services:\n        s.apply(ctx)\n\n"
                "def _plan() -> None:\n    pass\n"
            ),
            "cli/cmd.py": (
                "def run_cmd():\n    from zenops import ops\n    from zenops.context import Ctx\n"
                "    ctx = Ctx()\n    ops.serve(ctx, [])\n    _echo()\n\n"
                "def _echo():\n    pass\n\n"
                "def start_cmd(ctx: Ctx):\n    from zenops.ops import start\n    start(ctx, [])\n"
            ),
        },
    )
    files, trees, _ = _graph(src)
    calls = hf.CallGraph(files, trees)
    assert calls.steps("zenops.cli.cmd:run_cmd", "zenops.runner:run_playbook") == [
        "zenops.cli.cmd:run_cmd",
        "zenops.context:Ctx.run",
        "zenops.ops.serve:Gateway.apply",  # through the protocol: it has all of Service's methods
        "zenops.ops.serve:serve",  # the package's name shadows its submodule of the same name, as in Python
    ]
    assert calls.steps("zenops.cli.cmd:start_cmd", "zenops.runner:run_playbook") == [
        "zenops.cli.cmd:start_cmd",
        "zenops.context:Ctx.run",
        "zenops.ops.serve:Gateway.apply",
        "zenops.ops.serve:serve",  # a name the package imports under another: followed to its definition
    ]
    # reached, but leading to no playbook: not a step (the protocol's own method, Quiet.apply, _plan, _echo)
    assert "zenops.cli.cmd:_echo" in calls.reachable("zenops.cli.cmd:run_cmd")
    assert "zenops.ops.serve:Quiet.apply" in calls.reachable("zenops.cli.cmd:run_cmd")


CLICK_FIXTURE = '''
import click

@click.group()
def fleet() -> None:
    """A group."""

@fleet.command("grow")
@click.option("--cloud", "-c")
@click.option("--dry-run/--no-dry-run")
def grow_cmd(ctx, cloud, dry_run) -> None:
    pass

@click.command()
@click.option("--cloud")
@click.argument("name")
def up_command(cloud, name, *, extra=None) -> None:
    pass

@fleet.command()
def shrink_now() -> None:
    pass
'''


def test_parameters_per_command_and_the_flags_click_option_declares(tmp_path):
    src = _package(tmp_path, {"cli/fleet.py": CLICK_FIXTURE})
    _, trees, _ = _graph(src)
    assert hf.commands(trees) == {"fleet grow": 3, "fleet shrink-now": 0, "up": 3}
    calls, flags = hf.click_options(trees.values())
    assert calls == 3
    assert flags == {"--cloud": 2, "--dry-run": 1}


def test_function_sizes_run_from_def_to_last_line_for_methods_and_nested_defs_too(tmp_path):
    src = _package(
        tmp_path,
        {
            "m.py": "@decorator\ndef f():\n    def g():\n        pass\n    return g\n\n"
            "class K:\n    def h(self):\n        pass\n"
        },
    )
    _, trees, _ = _graph(src)
    assert hf.function_sizes(trees) == [(4, "zenops.m:f"), (2, "zenops.m:K.h"), (2, "zenops.m:f.g")]
