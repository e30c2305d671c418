"""Every file of zenops's state (ledger, serving records, facts, rollout and campaign state, inventories, the API key):
one writer, one reader.

Writing is atomic and durable: a temp file in the same directory, flushed and fsynced, renamed over the file, then
the directory fsynced, so a crash or a power cut leaves the old file or the new one, never a part. History files
(JSON lines) are appended through :func:`append_json_line`, which fsyncs too and never glues a line onto a partial
one a crash left behind.

Reading never ends in a traceback: a file that is missing is ``None``; one that is damaged (truncated, not JSON, not
the shape expected) raises :class:`DamagedStateError` naming it, or, where the caller can go on without it, is
reported through :func:`warn_damaged` (once per file and command) on the command's warning channel
(:func:`set_warning_sink`; stderr by default).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zenops.errors import ZenopsError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


class DamagedStateError(ZenopsError):
    """A state file zenops cannot read: truncated by a crash, or edited by hand. The message names the file."""

    def __init__(self, path: Path, reason: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: damaged state file ({reason})", hint=hint)
        self.path = path
        self.reason = reason


# --- writing --------------------------------------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(directory: Path) -> Path:
    """``directory`` (and its parents) made, and itself mode 0700."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(PRIVATE_DIR)
    return directory


def write_text(path: Path, text: str, *, mode: int = PRIVATE_FILE) -> Path:
    """Replace ``path`` with ``text`` atomically and durably (mode ``mode``, in a 0700 directory)."""
    private_dir(path.parent)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def write_json(path: Path, data: Any, *, mode: int = PRIVATE_FILE) -> Path:
    """``data`` as indented, key-sorted JSON (and a final newline), through :func:`write_text`."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", mode=mode)


def append_json_line(path: Path, data: Any) -> None:
    """Append ``data`` as one JSON line and fsync it. A last line a crash left without its newline is ended first,
    so the new line stays whole (the reader skips the partial one)."""
    line = json.dumps(data, sort_keys=True, default=str) + "\n"
    private_dir(path.parent)
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:  # the new file's name is in the directory
        _fsync_dir(path.parent)


# --- reading --------------------------------------------------------------------------------------------------------


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``; None when there is no such file; DamagedStateError when it cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise DamagedStateError(path, f"unreadable: {e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        what = "empty" if not text.strip() else f"not JSON, truncated? {e.msg} at line {e.lineno} column {e.colno}"
        raise DamagedStateError(path, what) from e


def read_json_object(path: Path) -> dict[str, Any] | None:
    """:func:`read_json` of a file that must hold one JSON object."""
    data = read_json(path)
    if data is not None and not isinstance(data, dict):
        raise DamagedStateError(path, f"expected a JSON object, found {type(data).__name__}")
    return data


def read_json_lines(path: Path) -> list[Any]:
    """Every JSON line of ``path`` ([] when it does not exist); a line that does not parse (the partial last line a
    crash left) is skipped with a warning naming the file and the line."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as e:
        warn_damaged(DamagedStateError(path, f"unreadable: {e}"))
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            warn_damaged(DamagedStateError(path, f"line {n} is not JSON (a partial write?); skipped"))
    return out


# --- the warning channel ----------------------------------------------------------------------------------------


def _stderr(text: str) -> None:
    sys.stderr.write(f"warning: {text}\n")


_sink: Callable[[str], None] = _stderr
_said: set[str] = set()


def set_warning_sink(sink: Callable[[str], None] | None) -> None:
    """Where damaged-state warnings go for the command now starting (None: stderr); each is said once."""
    global _sink  # noqa: PLW0603  (one channel per process: the command's, set at the CLI edge)
    _sink = sink or _stderr
    _said.clear()


def warn_damaged(err: DamagedStateError) -> None:
    """Say once that a state file is damaged and what zenops does about it (the error's message and hint)."""
    text = err.message + (f"; {err.hint}" if err.hint else "")
    if text not in _said:
        _said.add(text)
        _sink(text)
