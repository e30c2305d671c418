"""The scaling loop's wheelhouse: zenops and its runtime dependencies as wheels, built on the controller and cached,
so that the gateway's server installs the loop's venv with ``pip install --no-index --find-links`` (it needs no
package index; roles/scaler).

* ``pip wheel --no-deps`` of zenops itself (its source tree when zenops runs from one, else ``zenops==<version>``
  from the index) and ``pip download`` of its runtime requirements as wheels for the host (CPython 3.11 on
  x86_64 Linux: Debian 12's python3, :data:`TARGET`);
* into ``~/.cache/zenops/scaler-wheels/<key>`` (``XDG_CACHE_HOME``), ``<key>``: a hash of zenops's version, its
  source's commit (and uncommitted changes), the requirement set and the target; a complete wheelhouse has a
  ``.complete`` marker and is reused, an interrupted one is built again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from zenops.errors import ZenopsError

TARGET: dict[str, str] = {"python_version": "3.11", "platform": "manylinux2014_x86_64", "implementation": "cp"}
MARKER = ".complete"
Runner = Callable[..., Any]  # subprocess.run's shape: (argv, check=..., ...) -> CompletedProcess


@dataclass(frozen=True)
class Wheelhouse:
    key: str
    path: Path


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zenops" / "scaler-wheels"


def requirements(dist: str = "zenops") -> list[str]:
    """The runtime requirements of ``dist`` (no extras), sorted: what the loop's venv needs beside zenops."""
    out = []
    for req in metadata.requires(dist) or []:
        if "extra ==" in req.replace('"', "").replace("'", "") or "extra==" in req:
            continue
        out.append(req.strip())
    return sorted(set(out))


def source_tree() -> Path | None:
    """zenops's source tree when it runs from one (a pyproject.toml two levels above the package), else None."""
    import zenops  # noqa: PLC0415

    root = Path(zenops.__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def source_id(root: Path | None, run: Runner = subprocess.run) -> str:
    """The commit of the source tree and a hash of its uncommitted changes ("" outside git or without a tree)."""
    if root is None:
        return ""
    try:
        head = run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        diff = run(["git", "-C", str(root), "diff", "HEAD", "--", "src"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    dirty = hashlib.sha256(str(diff.stdout).encode()).hexdigest()[:12] if str(diff.stdout).strip() else ""
    return str(head.stdout).strip() + (f"+{dirty}" if dirty else "")


def key(version: str, source: str, reqs: Sequence[str], target: dict[str, str] | None = None) -> str:
    """The wheelhouse's cache key: what changes its wheels (zenops's version and source, the requirements, the
    host's Python and platform)."""
    blob = json.dumps(
        {"version": version, "source": source, "requirements": sorted(reqs), "target": target or TARGET},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def commands(
    python: str,
    dest: Path,
    reqs: Sequence[str],
    *,
    root: Path | None,
    version: str,
    target: dict[str, str] | None = None,
) -> list[list[str]]:
    """The pip command lines that fill ``dest``: zenops's own wheel, then its requirements' wheels for the host."""
    t = target or TARGET
    own = [str(root)] if root is not None else [f"zenops=={version}"]
    wheel = [python, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest), *own]
    download = [
        python, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:",
        "--python-version", t["python_version"], "--platform", t["platform"], "--implementation", t["implementation"],
        *reqs,
    ]  # fmt: skip
    return [wheel, download]


def ensure(
    config: Any = None,
    *,
    note: Callable[[str], None] = lambda _: None,
    run: Runner = subprocess.run,
    python: str | None = None,
    root: Path | bool | None = True,
    cache: Path | None = None,
) -> Wheelhouse:
    """The wheelhouse of this zenops, from the cache or built (pip, ``run``: the test seam). ``root`` True: the
    source tree zenops runs from (:func:`source_tree`); a path or None: that one, or the index's release."""
    import sys  # noqa: PLC0415

    from zenops import __version__  # noqa: PLC0415

    tree = source_tree() if root is True else (root or None)
    reqs = requirements()
    k = key(__version__, source_id(tree, run), reqs)
    dest = (cache or cache_root()) / k
    if (dest / MARKER).is_file():
        return Wheelhouse(k, dest)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    note(f"scaling: building the loop's wheelhouse {k} (zenops {__version__} and {len(reqs)} requirement(s))")
    try:
        for argv in commands(python or sys.executable, partial, reqs, root=tree, version=__version__):
            proc = run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join(str(proc.stderr or proc.stdout).strip().splitlines()[-5:])
                raise ZenopsError(
                    f"building the scaling loop's wheelhouse failed: {' '.join(argv[:4])} ...: {tail}",
                    hint="the controller needs pip and the package index (once; the wheels are cached in "
                    f"{cache_root()})",
                )
        (partial / MARKER).write_text(k + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Wheelhouse(k, dest)
