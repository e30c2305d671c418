"""Text that zenops did not write (a host's error, HAProxy's status, a cloud's server state, a record's model name)
made safe for a rich console: control characters shown as their escapes (zenops.report.cells.clean: no terminal
escape sequence reaches the terminal) and rich markup escaped (``[red]`` shows as written, ``[/]`` cannot break the
line)."""

from __future__ import annotations


def shown(value: object, *, newlines: bool = False) -> str:
    """``value`` as text for a rich console's markup: cleaned and escaped (``newlines``: kept, for messages)."""
    from zenops.report.cells import markup  # noqa: PLC0415

    return markup(value, newlines=newlines)


def plain(value: object, *, newlines: bool = True) -> str:
    """``value`` for a console's plain :class:`rich.text.Text` (no markup read there): cleaned, newlines kept."""
    # zenops.report is not loaded by `--help` (tests/unit/test_cli_imports.py): imported when text is shown
    from zenops.report.cells import clean  # noqa: PLC0415

    return clean(str(value), newlines=newlines)
