"""The README's quickstart, as written: its commands (the ```sh block under `## Quickstart`) and the substitutions that
run them on the sandbox cloud. The landing e2e (tests/e2e/test_quickstart_sandbox.py) runs exactly these; the unit test
(tests/unit/test_quickstart_readme.py) checks that every command is covered, so the README and the test cannot drift.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
HEADING = "## Quickstart"


@dataclass(frozen=True)
class Sub:
    readme: str  # text of a README command
    sandbox: str  # what runs instead; {tiny}, {repo}, {clouds} are filled in by the e2e test
    why: str


# Applied in order to every command; each must apply to at least one (a stale row fails the unit test).
SUBSTITUTIONS = (
    Sub(
        '"model": "Qwen/Qwen3-4B"',
        '"model": "tiny-llama"',
        "vLLM serves a local model directory under its base name, and the test serves the tiny model from ./tiny-llama",
    ),
    Sub(
        "Qwen/Qwen3-4B",
        "{tiny}",
        "no Hugging Face download in CI: the 0.8M-parameter model `zenops tiny-model` makes offline (a 4B model would "
        "not load on 2 cores within the budget)",
    ),
    Sub("mycloud", "sandbox", "the sandbox cloud's clouds.yaml entry is `sandbox`"),
    Sub(
        "inventories/examples/clouds.yaml",
        "{clouds}",
        "the example's <placeholders> cannot authenticate: the sandbox's own clouds.yaml (an entry named `sandbox`) is "
        "copied to the same place instead",
    ),
    Sub("pip install .", "pip install -q {repo}", "the test runs in a scratch directory, not in the checkout"),
)

# Text a README command may hold only if a substitution replaced it (it names the user's cloud or model).
README_ONLY = ("mycloud", "Qwen/", "inventories/examples/clouds.yaml", "pip install .")

# The programs the quickstart may call; a new one fails the unit test until the e2e test is taught about it.
PROGRAMS = {"pip", "mkdir", "chmod", "zenops", "serving=", "read", "curl"}


def commands(text: str | None = None) -> list[str]:
    """The quickstart's commands: the first ```sh block after the `## Quickstart` heading, continuation lines joined,
    blank lines and whole-line comments left out."""
    text = README.read_text() if text is None else text
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(HEADING))
        fence = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```sh")
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```")
    except StopIteration:
        raise ValueError(f"README.md: no ```sh block under a {HEADING!r} heading") from None
    out: list[str] = []
    pending = ""
    for line in lines[fence + 1 : end]:
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        out.append((pending + line.strip()).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return out


def program(command: str) -> str:
    """The command's program: its first word (an assignment counts as `name=`)."""
    first = command.split(maxsplit=1)[0]
    return first.split("=")[0] + "=" if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", first) else first


def substituted(cmds: list[str]) -> tuple[list[str], set[Sub]]:
    """The commands with SUBSTITUTIONS applied, and the substitutions that applied to some command."""
    used: set[Sub] = set()
    out = []
    for cmd in cmds:
        done = cmd
        for sub in SUBSTITUTIONS:
            if sub.readme in done:
                done = done.replace(sub.readme, sub.sandbox)
                used.add(sub)
        out.append(done)
    return out, used


def uncovered(cmds: list[str]) -> list[str]:
    """Why the sandbox run would not be the README's: unknown programs, README-only text left, stale substitutions."""
    problems = [f"unknown program {program(c)!r} in {c!r}" for c in cmds if program(c) not in PROGRAMS]
    done, used = substituted(cmds)
    problems += [f"{token!r} left in {c!r}" for c in done for token in README_ONLY if token in c]
    problems += [f"substitution {s.readme!r} applies to no command" for s in SUBSTITUTIONS if s not in used]
    return problems


def script(**fill: str) -> str:
    """The bash script the e2e test runs: the substituted commands in order, each ``{name}`` replaced by ``fill``'s
    value (literally: the commands hold JSON), stopping at the first failure."""
    done, _ = substituted(commands())
    for name, value in fill.items():
        done = [c.replace("{" + name + "}", value) for c in done]
    left = [c for c in done if re.search(r"\{(tiny|repo|clouds)\}", c)]
    if left:
        raise ValueError(f"placeholders not filled in: {left}")
    # each command is shown as written before it runs (not `set -x`, which would print the key the curl line reads),
    # and stderr joins stdout: the transcript reads as a user's terminal
    shown = [f"printf '\\n$ %s\\n' {shlex.quote(c)}\n{c}" for c in done]
    return "set -euo pipefail\nexec 2>&1\n" + "\n".join(shown) + "\n"
