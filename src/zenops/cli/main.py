"""The `zenops` group: global options, config loading, and the single place where errors become exit codes."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from zenops import __version__, statefile
from zenops.cli import (
    bench,
    campaign,
    config,
    devhost,
    down,
    facts,
    images,
    leaks,
    logs,
    paths,
    plan,
    reap,
    report,
    rollout,
    scale,
    ssh,
    status,
    tiny_model,
    top,
    up,
)
from zenops.cli.context import App, make_console
from zenops.cli.options import to_default_map
from zenops.cli.text import shown
from zenops.config import Config, load
from zenops.errors import ConfigError, ExitCode, ZenopsError

_GLOBAL_COUNTS = ("-v", "--verbose")  # the root's own options a user may also write after the subcommand
_GLOBAL_VALUED = ("--config",)


def _takes_value(command: click.Command, token: str) -> bool:
    """Whether ``token`` is an option of ``command`` whose value is the next argument."""
    for p in command.params:
        if isinstance(p, click.Option) and token in (*p.opts, *p.secondary_opts):
            return not p.is_flag and not p.count and token not in p.secondary_opts
    return False


def hoist_global_options(group: click.Group, ctx: click.Context, args: list[str]) -> list[str]:
    """``zenops status -v --config f.yaml`` as ``zenops -v --config f.yaml status``: the root's options (-v, --config)
    are taken wherever they are, up to ``--``. A subcommand's option that takes a value keeps it, even one like -v."""
    front: list[str] = []
    rest: list[str] = []
    command: click.Command = group
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            rest.extend(args[i:])
            break
        if command is not group and (token in _GLOBAL_COUNTS or (token.startswith("-v") and set(token[1:]) == {"v"})):
            front.append(token)
        elif command is not group and token in _GLOBAL_VALUED and i + 1 < len(args):
            front += [token, args[i + 1]]
            i += 1
        elif command is not group and token.split("=", 1)[0] in _GLOBAL_VALUED and "=" in token:
            front.append(token)
        elif token.startswith("-") and "=" not in token and _takes_value(command, token) and i + 1 < len(args):
            rest += [token, args[i + 1]]  # an option and its value, whatever the value looks like
            i += 1
        else:
            if not token.startswith("-") and isinstance(command, click.Group):
                sub = command.get_command(ctx, token)
                if sub is not None:
                    command = sub
            rest.append(token)
        i += 1
    return front + rest


def exit_codes_help(codes: Iterable[ExitCode] = ExitCode) -> str:
    """The exit-code table of `zenops --help`, made from zenops.errors.ExitCode (one line per code)."""
    lines = [f"  {int(c):>3}  {c.meaning}" for c in sorted(codes)]
    return "\b\nExit codes (the same on every command):\n" + "\n".join(lines)


class ZenopsGroup(click.Group):
    """The root group: its global options may also come after the subcommand (hoist_global_options)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(self, ctx, args))


@click.group(
    cls=ZenopsGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog=exit_codes_help(),
)
@click.version_option(__version__, "--version", prog_name="zenops")
@click.option("-v", "--verbose", count=True, help="More detail: -v every host result, -vv also Ansible's -v.")
@click.option("--json", "json_output", is_flag=True, help="Machine-readable JSON output (events as JSON lines).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="ZENOPS_CONFIG",
    help="Config file to use instead of ./zenops.yaml and ~/.config/zenops/config.yaml.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, json_output: bool, config_path: Path | None) -> None:
    """zenops: cheap LLM inference on AMD EPYC CPUs with vLLM + ZenTorch, in one command.

    \b
    Typical use:
      zenops up --inventory hosts.yml      prepare your own hosts (SSH, Docker engine)
      zenops devhost up                    a local container host to try zenops on
      zenops config show                   the configuration in effect and where it came from

    Configuration: ./zenops.yaml, then ~/.config/zenops/config.yaml (see `zenops config example`); flags win.
    -v, --config and --json may also come after the subcommand (`zenops status -v`).
    """
    try:
        loaded = load(config_path)
        default_map = _default_map(ctx, loaded)
    except ConfigError as e:
        if ctx.invoked_subcommand != "config":  # every other command stops on a broken config (exit 3)
            raise
        # `config check FILE` checks its own file whatever the searched ones hold; `config show` says the error
        ctx.obj = App(config=Config(), json=json_output, verbose=verbose, config_error=e)
        return
    ctx.obj = App(config=loaded, json=json_output, verbose=verbose)
    statefile.set_warning_sink(ctx.obj.warn)  # a damaged state file is said once, on this command's channel
    ctx.call_on_close(lambda: statefile.set_warning_sink(None))
    ctx.default_map = default_map


def _default_map(ctx: click.Context, loaded: Config) -> dict[str, dict[str, Any]]:
    """The config's ``defaults:`` as click's default_map, each checked against its command's option and type."""
    assert isinstance(ctx.command, click.Group)
    return to_default_map(
        ctx.command,
        ctx,
        {k: dict(v) for k, v in loaded.command_defaults.items()},
        {k: dict(v) for k, v in loaded.command_default_sources.items()},
    )


cli.add_command(up.up)
cli.add_command(config.config)
cli.add_command(devhost.devhost)
cli.add_command(paths.paths)
cli.add_command(facts.facts)
cli.add_command(plan.plan_cmd)
cli.add_command(down.down)
cli.add_command(leaks.leaks)
cli.add_command(reap.reap)
cli.add_command(status.status)
cli.add_command(images.images)
cli.add_command(images.image)
cli.add_command(tiny_model.tiny_model)
cli.add_command(report.report)
cli.add_command(bench.bench)
cli.add_command(rollout.rollout)
cli.add_command(campaign.campaign)
cli.add_command(logs.logs)
cli.add_command(ssh.ssh)
cli.add_command(top.top)
cli.add_command(scale.scale)


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv


def report_error(err: ZenopsError, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps({"type": "error", **err.to_dict()}, default=str) + "\n")
    console = make_console(stderr=True)
    console.print(f"[bold red]error:[/] {shown(err.message, newlines=True)}", highlight=False)
    if err.hint:
        console.print(f"[bold]fix:[/] {shown(err.hint, newlines=True)}", highlight=False)


TERMINATED = ExitCode.TERMINATED  # 128 + SIGTERM: the exit code of a run stopped by `kill` / `systemctl stop`


class _Terminated:
    """SIGTERM (kill, systemctl stop, a CI timeout) stops zenops the way Ctrl-C does: the running playbook is
    canceled, a rollout puts its drained servers back, a campaign tears its servers down; the exit code is 143.
    Installed only when SIGTERM has its default action (kill would end zenops at once, leaving that undone) and
    only in the main thread (the only one Python delivers signals to)."""

    received = False

    @classmethod
    def install(cls) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, cls._handle)

    @classmethod
    def _handle(cls, _signum: int, _frame: object) -> None:
        if cls.received:  # a second SIGTERM while cleaning up: do not raise into the clean-up
            return
        cls.received = True
        raise KeyboardInterrupt

    @classmethod
    def code(cls, code: int) -> int:
        return TERMINATED if cls.received and code == ExitCode.CANCELED else code


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI and turn every zenops error into its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the installed command (tests calling main(args) keep their process's own handlers)
        _Terminated.install()
    try:
        cli.main(args=args, prog_name="zenops", standalone_mode=False)
    except ZenopsError as e:
        report_error(e, _wants_json(args))
        sys.exit(_Terminated.code(e.exit_code))
    except click.exceptions.Abort:
        Console(stderr=True).print("[red]aborted[/]")
        sys.exit(ExitCode.CANCELED)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        Console(stderr=True).print("[red]terminated[/]" if _Terminated.received else "[red]interrupted[/]")
        sys.exit(_Terminated.code(ExitCode.CANCELED))
    sys.exit(ExitCode.OK)
