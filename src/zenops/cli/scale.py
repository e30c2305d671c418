"""`zenops scale`: the scaling loop of an elastic deployment, on its gateway host (run, status, pause, resume).

Library: zenops.scaling.loop (the loop and its pause protocol), zenops.scaling.fleet (what it reads and does: the
local Prometheus, the cloud, the gateway, the deployment's lifecycle), zenops.scaling.state (its state file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from zenops.cli.context import get_app
from zenops.cli.option_types import DurationType
from zenops.cli.options import json_option, plot_option, png_target
from zenops.errors import UsageError

if TYPE_CHECKING:
    from zenops.cli.context import App
    from zenops.scaling.state import ScalingState

_WHERE = """\b
It runs on the deployment's gateway host, where `zenops up --cloud ... --replicas MIN..MAX` installs it as the
systemd service zenops-scaler (its own server with --gateway-flavor, else the first serving server, which scale-in
then never removes). From your machine, `zenops status` shows what the loop says; `zenops rollout` pauses it and
resumes it.
Own hosts (`up -i`) have no cloud to make servers in: they get self-healing only (a failed vLLM restarted), never
more or fewer hosts."""

deployment_arg = click.argument("deployment", metavar="DEPLOYMENT")


@click.group(
    help=f"The scaling loop of an elastic deployment: replicas between MIN and MAX, a failed one replaced.\n\n{_WHERE}"
)
def scale() -> None:
    pass


@scale.command(
    "run",
    help=f"""Run the scaling loop of DEPLOYMENT (the service's command; Ctrl-C ends it).

\b
Each tick (every 10 s): observe (each replica's waiting and running requests, KV cache usage and TTFT p95 from the
local Prometheus; its server's status in the cloud; its gateway backends), decide (a replica failed for its window is
replaced; out when the waiting requests per replica stay over the target for the window, in when the load stays
under the lower target for the longer window; a cooldown after any action; never below MIN, never above MAX or the
price cap), act (a new server joins the gateway only once its health gate passed; a removed one is drained first),
record (the state file `zenops scale status` reads). After 3 failed attempts in a row (a broken image, a full quota)
the loop stops and says why: `zenops scale resume` starts it again.

{_WHERE}

\b
  zenops scale run fleet
  zenops scale run fleet --once --json      (one tick, its decision as JSON)
""",
)
@deployment_arg
@click.option("--once", is_flag=True, help="One tick (observe, decide, act, record), then exit.")
@json_option
@click.pass_context
def run(ctx: click.Context, deployment: str, once: bool) -> None:
    from zenops.deployment.target import resolve_target  # noqa: PLC0415
    from zenops.scaling import fleet, loop  # noqa: PLC0415

    app = get_app(ctx)
    dep = resolve_target(app.config, deployment=deployment, command="scale run")
    with app.run_context() as rc:
        settings = fleet.settings_of(rc, dep)
        the_loop = loop.Loop(
            settings,
            fleet.FleetObserver(rc, dep),
            fleet.DeploymentFleet(rc, dep),
            state_dir=app.config.state_dir,
            note=app.note,
        )
        app.note(f"scaling {dep.describe()}: {settings.bounds} replicas, every {settings.interval_s:.0f} s")

        def show(result: loop.TickResult) -> None:
            if app.json:
                app.emit_json(result.to_dict())
            else:
                app.out.print(escape(result.line()))

        the_loop.run(ticks=1 if once else None, on_tick=show)


@scale.command(
    "status",
    help=f"""What the scaling loop of DEPLOYMENT says (its state file on this host): replicas, target, phase, the last
decisions with their reasons and figures.

{_WHERE}

\b
  zenops scale status fleet
  zenops scale status fleet --plot replicas.png   (the replica count over time, the decisions numbered)
""",
)
@deployment_arg
@click.option("--last", "last_n", type=click.IntRange(min=0), default=5, show_default=True,
              help="How many of the last decisions to show.")  # fmt: skip
@plot_option(
    "Also write a PNG: the actual and target replicas over time (the loop's last 2000 ticks), MIN and MAX, each "
    "scaling decision that acted marked and numbered, with its reason, figures and result."
)
@json_option
@click.pass_context
def status(ctx: click.Context, deployment: str, last_n: int, plot_file: Path | None) -> None:
    from zenops.scaling.state import decision_line, pause_path, read_pause  # noqa: PLC0415

    app = get_app(ctx)
    if plot_file is not None:
        png_target(plot_file)
    st = _state(app, deployment)
    pause = read_pause(pause_path(app.config.state_dir, deployment))
    if plot_file is not None:
        _plot(app, st, plot_file)
    if app.json:
        app.emit_json(
            {**st.to_dict(), "pause": pause.to_dict() if pause else None, "plot": str(plot_file) if plot_file else None}
        )
        return
    app.out.print(escape(st.summary()))
    if pause is not None and st.phase not in ("paused", "stopped"):
        app.out.print(escape(f"  pause asked ({pause.line()}): the loop pauses once its step ends"))
    for d in st.decisions[-last_n:] if last_n else []:
        app.out.print(escape(f"  {decision_line(d)}"))


@scale.command(
    "pause",
    help=f"""Pause the scaling loop of DEPLOYMENT: it finishes the step in flight, then acts on nothing until
`zenops scale resume`. Waits until the loop says paused (--timeout; then an error naming the step in flight).

{_WHERE}
""",
)
@deployment_arg
@click.option("--reason", default="", help="Why, shown by `zenops scale status` and `zenops status`.")
@click.option("--timeout", "timeout_s", type=DurationType(), default="15m", show_default=True,
              help="How long to wait for the loop to end its step in flight (a new server takes minutes).")  # fmt: skip
@json_option
@click.pass_context
def pause(ctx: click.Context, deployment: str, reason: str, timeout_s: int) -> None:
    import getpass  # noqa: PLC0415

    from zenops.scaling import loop  # noqa: PLC0415

    app = get_app(ctx)
    st = loop.pause(app.config.state_dir, deployment, by=getpass.getuser(), reason=reason, timeout_s=timeout_s)
    _said(app, st, f"the scaling loop of {deployment} is {st.phase}")


@scale.command(
    "resume",
    help=f"""Resume the scaling loop of DEPLOYMENT (paused, or stopped after repeated failures: those no longer count).

{_WHERE}
""",
)
@deployment_arg
@json_option
@click.pass_context
def resume(ctx: click.Context, deployment: str) -> None:
    from zenops.scaling import loop  # noqa: PLC0415

    app = get_app(ctx)
    was, st = loop.resume(app.config.state_dir, deployment)
    if st is None:
        _state(app, deployment)  # raises: no loop has run here
        return
    if not was:
        text = f"the scaling loop of {deployment} was not paused"
    elif st.phase == "stopped":
        text = f"the scaling loop of {deployment} resumes at its next tick (it had stopped: {st.stopped})"
    else:
        text = f"the scaling loop of {deployment} resumes at its next tick"
    _said(app, st, text, resumed=was)


def _state(app: App, deployment: str) -> ScalingState:
    from zenops.errors import NoServerError  # noqa: PLC0415
    from zenops.scaling.state import load_state, state_path  # noqa: PLC0415

    path = state_path(app.config.state_dir, deployment)
    st = load_state(path)
    if st is None:
        raise NoServerError(
            f"no scaling loop has run for {deployment} on this host (no {path})",
            hint="run this on the deployment's gateway host (`zenops up --replicas MIN..MAX` installs the loop "
            "there); from your machine `zenops status` shows the loop's state",
        )
    return st


def _plot(app: App, st: ScalingState, path: Path) -> None:
    from zenops.scaling.plot import plot  # noqa: PLC0415

    try:
        data = plot(st, path)
    except OSError as e:
        raise UsageError(f"--plot {path}: cannot write: {e.strerror or e}") from e
    app.note(f"wrote {path}: {len(data.minutes)} ticks over {data.minutes[-1]:.1f} min, {len(data.markers)} decisions")


def _said(app: App, st: ScalingState, text: str, **extra: object) -> None:
    if app.json:
        app.emit_json({"message": text, "phase": st.phase, **extra})
    else:
        app.out.print(escape(text))
