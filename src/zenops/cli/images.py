"""`zenops images`: the vLLM + zentorch combinations zenops supports, and checks of a pair.

Library: zenops.compat. Playbook: none.
"""

from __future__ import annotations

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import json_option


@click.command()
@click.option("--vllm", "vllm_version", metavar="VERSION", help="Check this vLLM release (with --zentorch: the pair).")
@click.option("--zentorch", metavar="VERSION", help="zentorch release to check with --vllm.")
@click.option("--force-unsupported", is_flag=True, help="Accept an unsupported or known-bad pair, with a warning.")
@json_option
@click.pass_context
def images(ctx: click.Context, vllm_version: str | None, zentorch: str | None, force_unsupported: bool) -> None:
    """List the vLLM x zentorch x torch combinations and how each image is made; or check one pair.

    \b
      zenops images                                  the table (default pair marked)
      zenops images --vllm 0.18.0                    refused: names the known problem and a good alternative
      zenops images --vllm 0.14.1 --zentorch 5.2.0   ok: the combination zenops would build

    A pair the table marks broken, or does not know, exits 11 and names a working pair.
    """
    from zenops import compat  # noqa: PLC0415

    app = get_app(ctx)
    t = compat.table()
    if vllm_version or zentorch:
        warnings: list[str] = []
        combo = compat.resolve(vllm_version, zentorch, force=force_unsupported, warn=warnings.append)
        if app.json:
            app.emit_json({"type": "result", "command": "images", "combo": combo.to_dict(), "warnings": warnings})
            return
        for w in warnings:
            app.err.print(f"[bold yellow]{escape(w)}[/]")
        app.out.print(
            f"{combo.id}: vLLM {combo.vllm} + zentorch {combo.zentorch} on torch {combo.torch} "
            f"({combo.status}); image {combo.image_tag} by route {combo.route}"
        )
        return
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "images",
                "default": t.default.id,
                "test_default": t.test_default.id,
                "combos": [c.to_dict() for c in t.combos],
            }
        )
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="vLLM + zentorch combinations", title_justify="left")
    for col in ("id", "vLLM", "zentorch", "torch", "status", "made by", "why"):
        table.add_column(col)
    for c in t.combos:
        mark = " (default)" if c is t.default else " (tests)" if c is t.test_default else ""
        source = c.pip or c.prebuilt or c.route
        why = c.broken_because if c.status == "broken" else c.note
        style = "red" if c.status == "broken" else "green" if c.status == "tested" else ""
        table.add_row(
            c.id + mark,
            c.vllm,
            c.zentorch,
            c.torch,
            f"[{style}]{c.status}[/]" if style else c.status,
            escape(source),
            escape(why),
        )
    app.out.print(table)
