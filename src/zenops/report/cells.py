"""Text from results made safe to show: the one escaping function every report output goes through.

A bench result's model, label, flavor, problems and source come from files a host wrote (or anyone who could write
there), so they may hold terminal escape sequences (``\\x1b]8;;...``, ``\\x1b[2J``), other control characters, or
text a spreadsheet runs as a formula (``=HYPERLINK(...)``). :func:`clean` shows every control character as its
escape (``\\x1b``), so nothing reaches a terminal, a Markdown table or a CSV file as a control; :func:`csv_cell`
also neutralises a formula (the OWASP rule: a cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return gets a leading ``'``) while numbers, negative ones included, stay numbers. JSON output needs neither: JSON
escapes control characters itself.
"""

from __future__ import annotations

import re

# C0 (tab and carriage return included), DEL, C1 (0x9b is a one-byte CSI), and the bidirectional overrides and
# isolates that reorder what a terminal or an editor shows ("Trojan Source")
_CONTROLS = "\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ANY_CONTROL = re.compile(f"[\n{_CONTROLS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[{_CONTROLS}]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control character written as its escape (``\\x1b``, ``\\u202e``); newlines too unless
    ``newlines`` (where the format keeps them inside a cell: CSV quotes them)."""
    return (_CONTROL_BUT_NEWLINE if newlines else _ANY_CONTROL).sub(_escape, text)


def markup(value: object, *, newlines: bool = False) -> str:
    """``value`` for a rich console's markup: :func:`clean`\\ ed and its markup escaped (``[red]`` shows as
    written, ``[/]`` cannot break the line); ``newlines``: kept, for messages."""
    from rich.markup import escape  # noqa: PLC0415

    return escape(clean(str(value), newlines=newlines))


def csv_cell(value: object) -> object:
    """A CSV cell: None empty, numbers (and booleans) as they are, text :func:`clean`\\ ed with a ``'`` before a
    leading ``=``, ``+``, ``-``, ``@``, tab or carriage return, unless the text is a plain number (``-12.5``)."""
    if value is None:
        return ""
    if isinstance(value, int | float):
        return value
    text = clean(str(value), newlines=True)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text
