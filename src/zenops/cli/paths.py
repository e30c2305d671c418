"""`zenops paths`: where zenops finds its Ansible collection and keeps its state (for ansible-playbook users).

Library: zenops.paths. Playbook: none.
"""

from __future__ import annotations

import click

from zenops import paths as zpaths
from zenops.cli.context import get_app
from zenops.cli.options import json_option


@click.command()
@json_option
@click.pass_context
def paths(ctx: click.Context) -> None:
    """Print the collection root, the collections path and the state dir.

    \b
    To run a zenops playbook with plain ansible-playbook:
      export ANSIBLE_COLLECTIONS_PATH=$(zenops paths --json | jq -r .collections_path)
      ansible-playbook -i hosts.yml "$(zenops paths --json | jq -r .collection_root)/playbooks/up.yml"
    """
    app = get_app(ctx)
    data = {
        "collection_root": str(zpaths.collection_root()),
        "collections_path": str(zpaths.collections_path()),
        "state_dir": str(app.config.state_dir),
        "python_bin": str(zpaths.venv_bin()),
    }
    if app.json:
        app.emit_json({"type": "result", "command": "paths", **data})
    else:
        for k, v in data.items():
            click.echo(f"{k:<17} {v}")
