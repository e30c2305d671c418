"""`zenops config`: see the configuration in effect, check a file, print an example.

Library: zenops.config. Playbook: none.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import check_defaults, json_option
from zenops.config import EXAMPLE, check_file, search_paths
from zenops.errors import ConfigError


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
@json_option
@click.pass_context
def check(ctx: click.Context, file: Path) -> None:
    """Validate FILE as every command reads it: its sections and values (durations such as 15m or 1h30m; a mode's
    on/off unquoted), the flavors a plan needs, the cloud profiles, and each ``defaults.<command>.<option>`` against
    that command's option and type (the engine-argument guard; absolute paths and tuned files there). Every mistake
    is reported at once, with its line and the fix; a file this calls ok never makes a command exit 3, a wrong one
    exits 3. --json: {"ok", "errors": [{path, key, line, problem, hint}]}."""
    app = get_app(ctx)
    root = ctx.find_root()
    assert isinstance(root.command, click.Group)
    group = root.command

    def defaults(data: dict[str, Any], broken: set[str]) -> list[ConfigError]:
        return check_defaults(group, root, data["defaults"], str(file), broken)

    findings = check_file(file, defaults)
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "config check",
                "file": str(file),
                "ok": not findings,
                "errors": [f.to_dict() for f in findings],
            }
        )
    elif findings:
        for finding in findings:
            app.err.print(escape(str(finding)), highlight=False)
    else:
        click.echo(f"{file}: ok")
    if findings:
        many = f"{len(findings)} mistakes" if len(findings) > 1 else "1 mistake"
        raise ConfigError(str(file), "", many, hint="fix each one as said above, then run `zenops config check` again")


@config.command()
def example() -> None:
    """Print a commented example config file."""
    click.echo(EXAMPLE, nl=False)
