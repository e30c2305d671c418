"""Writing one named entry of a section into a zenops config file (``clouds.<name>``) without disturbing the rest.

The file's text is edited, not re-dumped: its other keys, their order and its comments stay as they were. The new
entry goes where the section's entries are (or a new section at the end); a replaced entry's lines are swapped for
the new ones. The result is parsed back and must equal the old document with that one entry set (else nothing is
written), and it must pass the config's validation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zenops.config import validate
from zenops.errors import ZenopsError
from zenops.schema import read_yaml


def yaml_scalar(value: Any) -> str:
    """``value`` as one line of YAML (quoted when it must be; a mapping or list in flow style)."""
    import yaml  # noqa: PLC0415

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


def read_document(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its validated content ("", {} when it does not exist). ConfigError when it is broken:
    nothing is merged into a file zenops cannot read."""
    if not path.exists():
        return "", {}
    data = validate(read_yaml(path), str(path))
    return path.read_text(), data


def _span(lines: list[str], key: Any, value: Any, following: Any | None, indent: int) -> tuple[int, int]:
    """The lines [start, end) of one entry of a block mapping: its key's line to the next entry's (or the end of its
    value), less the blank lines and the comments at the entry's indentation or less that trail it (they belong to
    what follows)."""
    start = key.start_mark.line
    if following is not None:
        end = following.start_mark.line
    else:
        mark = value.end_mark
        end = mark.line + (1 if mark.column > 0 else 0)
    end = min(end, len(lines))
    while end > start + 1:
        line = lines[end - 1]
        stripped = line.lstrip()
        if stripped and not (stripped.startswith("#") and len(line) - len(stripped) <= indent):
            break
        end -= 1
    return start, end


def _indented(lines: list[str], indent: int) -> list[str]:
    return [(" " * indent + line) if line else "" for line in lines]


def _entry_lines(name: str, body: list[str], indent: int) -> list[str]:
    return [" " * indent + f"{yaml_scalar(name)}:", *_indented(body, indent + 2)]


def with_entry(text: str, section: str, name: str, body: list[str]) -> tuple[str, bool]:
    """``text`` with ``<section>.<name>`` set to the YAML ``body`` (its lines, unindented; comments welcome).
    Returns the new text and whether the file's comments all survived (a flow-style document or section is
    re-dumped: its comments go)."""
    import yaml  # noqa: PLC0415

    lines = text.splitlines()
    root = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    if root is None:  # empty, or comments only
        kept = [*lines, ""] if lines and lines[-1].strip() else lines
        return "\n".join([*kept, f"{section}:", *_entry_lines(name, body, 2)]) + "\n", True
    if not isinstance(root, yaml.MappingNode):  # validate() refuses such a file before this
        raise ZenopsError("the config file's top level is not a mapping")
    if root.flow_style:  # {a: 1, ...}: written again in block style (rare: a hand-written one-liner)
        data = yaml.safe_load(text) or {}
        rest = {k: v for k, v in data.items() if k != section}
        out = yaml.safe_dump(rest, sort_keys=False).splitlines() if rest else []
        old = {k: v for k, v in (data.get(section) or {}).items() if k != name}
        return _with_section(out, section, old, name, body), False
    entries = root.value
    at = next((i for i, (k, _) in enumerate(entries) if getattr(k, "value", None) == section), None)
    if at is None:  # a new section at the end
        kept = [*lines, ""] if lines and lines[-1].strip() else lines
        return "\n".join([*kept, f"{section}:", *_entry_lines(name, body, 2)]) + "\n", True
    key, value = entries[at]
    following = entries[at + 1][0] if at + 1 < len(entries) else None
    if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
        items = value.value
        indent = items[0][0].start_mark.column
        mine = next((i for i, (k, _) in enumerate(items) if getattr(k, "value", None) == name), None)
        new = _entry_lines(name, body, indent)
        if mine is not None:  # replaced in place
            nxt = items[mine + 1][0] if mine + 1 < len(items) else following
            start, end = _span(lines, items[mine][0], items[mine][1], nxt, indent)
            lines[start:end] = new
        else:  # after the section's last entry
            _, end = _span(lines, items[-1][0], items[-1][1], following, indent)
            lines[end:end] = new
        return "\n".join(lines) + "\n", True
    # `clouds:` empty, or in flow style: the section's lines written again in block style
    start, end = _span(lines, key, value, following, 0)
    data = yaml.safe_load(text) or {}
    old = {k: v for k, v in (data.get(section) or {}).items() if k != name}
    lines[start:end] = _with_section([], section, old, name, body).splitlines()
    flow = isinstance(value, yaml.MappingNode | yaml.SequenceNode) and bool(value.flow_style) and bool(value.value)
    return "\n".join(lines) + "\n", not flow


def _with_section(before: list[str], section: str, old: Mapping[str, Any], name: str, body: list[str]) -> str:
    import yaml  # noqa: PLC0415

    out = [*before, f"{section}:"]
    if old:
        out += _indented(yaml.safe_dump(dict(old), sort_keys=False).splitlines(), 2)
    out += _entry_lines(name, body, 2)
    return "\n".join(out) + "\n"


def checked(text: str, path: Path, expected: Mapping[str, Any]) -> None:
    """The merged text must parse to ``expected`` (the old document with the one entry set) and pass the config's
    validation; a ZenopsError otherwise (nothing is written then)."""
    import yaml  # noqa: PLC0415

    data = validate(yaml.safe_load(text), str(path))
    if data != dict(expected):
        raise ZenopsError(
            f"{path}: merging the new entry would change other keys of the file; nothing was written",
            hint="a zenops bug: please report it with the file; meanwhile add the entry by hand (see --dry-run)",
        )


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (a reader sees the old file or the new one), keeping its mode;
    a new file is created 0600 (a config file may name keys) with its directory. A symlink's target is replaced."""
    path = path.resolve() if path.is_symlink() else path
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
