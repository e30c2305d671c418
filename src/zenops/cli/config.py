"""`zenops config`: see the configuration in effect, check a file, print an example.

Library: zenops.config. Playbook: none.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from zenops.cli.context import get_app
from zenops.cli.options import json_option, to_default_map
from zenops.config import EXAMPLE, read_file, search_paths


@click.group()
def config() -> None:
    """Show, check or explain the zenops configuration file."""


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@config.command()
@json_option
@click.pass_context
def show(ctx: click.Context) -> None:
    """The configuration in effect (defaults filled in) and the files it was read from."""
    app = get_app(ctx)
    if app.config_error is not None:
        raise app.config_error
    data = _plain(asdict(app.config))
    data.pop("command_default_sources", None)
    data["defaults"] = data.pop("command_defaults")
    searched = [str(p) for p in search_paths()]
    if app.json:
        app.emit_json({"type": "result", "command": "config show", "config": data, "searched": searched})
        return
    sources = data.pop("sources")
    click.echo(f"# read from: {', '.join(sources) if sources else 'no file (built-in defaults)'}")
    click.echo(f"# searched: {', '.join(searched)}")
    import yaml  # noqa: PLC0415

    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


@config.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def check(ctx: click.Context, file: Path) -> None:
    """Validate FILE as every command reads it: its sections and values, and each ``defaults.<command>.<option>``
    against that command's options and their types. A file this calls ok never makes a command exit 3; a wrong one
    exits 3 naming the key and the fix."""
    data = read_file(file)
    defaults = {str(k): dict(v) for k, v in data.get("defaults", {}).items()}
    root = ctx.find_root()
    assert isinstance(root.command, click.Group)
    to_default_map(root.command, root, defaults, {k: dict.fromkeys(v, str(file)) for k, v in defaults.items()})
    click.echo(f"{file}: ok")


@config.command()
def example() -> None:
    """Print a commented example config file."""
    click.echo(EXAMPLE, nl=False)
