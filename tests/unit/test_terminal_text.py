"""Text from hosts reaches the terminal as text (issue 46, N5): `zenops top`'s rows, `zenops status`'s lines and
tables, error messages, notes and warnings show a host's escape sequences (ESC, CSI, OSC, BEL, C1) as their escapes
and its rich markup as written. Before, a host's error or HAProxy status could clear the screen, retitle the window,
plant a hyperlink, or (``[/]``) make rich refuse the line."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from zenops.cli.context import App
from zenops.cli.main import report_error
from zenops.cli.text import shown
from zenops.config import load
from zenops.errors import ZenopsError
from zenops.metrics.top import Row

OSC_LINK = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07"  # a hyperlink
CSI_CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
OSC_TITLE = "\x1b]0;owned\x07"  # the window's title
C1_CSI = "\x9b31m"  # the one-byte CSI
MARKUP = "[red]red[/red] [link=https://evil.example]here[/link] [/]"
HOSTILE = f"boom {OSC_LINK} {CSI_CLEAR} {OSC_TITLE} {C1_CSI} {MARKUP}"
CONTROLS = ("\x1b", "\x07", "\x9b")


def assert_shown_as_text(out: str) -> None:
    assert not [c for c in CONTROLS if c in out], f"a control character reached the terminal: {out!r}"
    assert "\\x1b[2J" in out, out  # shown as its escape
    assert "\\x1b]0;owned\\x07" in out, out
    assert "\\x9b31m" in out, out
    assert "[red]red[/red]" in out, out  # markup shown as written
    assert "[link=https://evil.example]here[/link]" in out, out


def test_shown_escapes_controls_and_markup():
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(f"[bold]{shown(HOSTILE)}[/]")
    assert_shown_as_text(console.file.getvalue())  # type: ignore[attr-defined]


def test_top_rows_show_a_hosts_error_and_names_as_text():
    from zenops.cli import top  # noqa: PLC0415

    rows = [Row(host=f"h1{CSI_CLEAR}", instance=0, port=8000, error=HOSTILE), Row(host="h2", instance=0, port=8000)]
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(top._table(f"model{OSC_TITLE}[red]", rows, 5, "direct"))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert_shown_as_text(out)
    assert "model\\x1b]0;owned\\x07[red]" in out


GATEWAY = {"url": "http://gw:8080", "host": f"gw{OSC_TITLE}", "port": 8080}
BACKENDS = [{"name": f"b{MARKUP}", "status": f"UP{CSI_CLEAR}", "in_flight": f"1{C1_CSI}"}]


def forged_status(inventory: Path) -> dict[str, Any]:
    """What `serving_status` returns when the hosts (HAProxy, Prometheus) and the records say hostile things."""
    return {
        "inventory": str(inventory),
        "serving": {"model": f"m{CSI_CLEAR}", "endpoints": {f"h1{OSC_TITLE}": [{"url": f"http://h1/{MARKUP}"}]},
                    "servers": 1, "endpoint": None, "updated_at": ""},
        "services": {
            "gateway": {"state": GATEWAY, "live": {"backends": BACKENDS}, "error": HOSTILE},
            "metrics": {"live": {"url": f"http://p{C1_CSI}", "up": 0, "targets": [
                {"job": f"vllm{OSC_LINK}", "url": "http://h1:8000", "health": f"down{CSI_CLEAR}", "error": HOSTILE}]}}},
        "gateway": GATEWAY,  # the gateway's, as before services (zenops.deployment.status)
        "backends": BACKENDS,
        "gateway_error": HOSTILE,
        "lock": {"pid": 1, "host": f"ctl{OSC_TITLE}", "alive": True, "command": f"zenops up {MARKUP}"},
        "rollout": {"id": "r1", "status": "failed", "message": HOSTILE},
        "history": [{"at": "t", "rollout": "r1", "event": f"gate failed{CSI_CLEAR}", "host": HOSTILE}],
    }  # fmt: skip


def test_status_of_a_deployment_shows_what_hosts_say_as_text(run, tmp_path, monkeypatch, isolated_home):
    from zenops.deployment import status as status_lib  # noqa: PLC0415

    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {hosts: {h1: {}}}\n")
    monkeypatch.setattr(status_lib, "serving_status", lambda ctx, inv, last: forged_status(inv))
    r = run(["status", "-i", str(inventory)])
    assert r.exit_code == 0, r.output
    assert_shown_as_text(r.output)
    assert "UP\\x1b[2J" in r.output  # HAProxy's word for the backend, as text
    assert "gateway status unavailable" in r.output


def test_status_list_shows_a_clouds_server_state_as_text(run, monkeypatch, isolated_home):
    from zenops.deployment import listing  # noqa: PLC0415

    dep = {
        "name": "fleet", "cloud": "c", "status": f"ready{CSI_CLEAR}", "flavor": f"f{MARKUP}", "cost_so_far": None,
        "age_hours": 1.0, "serving": {"model": f"m{OSC_LINK}", "instances": 1, "endpoint": None},
        "servers": [{"name": "fleet-1", "address": f"10.0.0.1{OSC_TITLE}", "status": HOSTILE, "ssh": True}],
    }  # fmt: skip
    monkeypatch.setattr(listing, "status", lambda config, cloud: [dep])
    r = run(["status"])
    assert r.exit_code == 0, r.output
    # the table wraps long cells: the pieces, each as text
    assert not [c for c in CONTROLS if c in r.output], f"a control character reached the terminal: {r.output!r}"
    for piece in ("ready\\x1b[2J", "10.0.0.1\\x1b]0;owned\\x07", "\\x9b31m", "f[red]red[/red]", "m\\x1b]8;;"):
        assert piece in r.output, piece


def test_error_messages_and_hints_show_host_text_as_text(capsys):
    report_error(ZenopsError(f"serve.yml failed\n  h1: {HOSTILE}", hint=f"look at {MARKUP} {CSI_CLEAR}"), False)
    err = capsys.readouterr().err
    assert_shown_as_text(err)
    assert "serve.yml failed\n  h1: boom" in err  # the message's own lines are kept


def test_notes_and_warnings_show_host_text_as_text(monkeypatch):
    buf = io.StringIO()
    app = App(config=load(), err=Console(file=buf, width=400, color_system=None))
    app.note(f"rollout: {HOSTILE}")
    app.warn(f"damaged {HOSTILE}")
    assert_shown_as_text(buf.getvalue())


@pytest.mark.parametrize("text", ["[/]", "[/red]", "[bold"])
def test_a_hosts_stray_markup_does_not_break_the_line(text):
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(f"[yellow]x:[/] {shown(text)}")
    assert text in console.file.getvalue()  # type: ignore[attr-defined]
