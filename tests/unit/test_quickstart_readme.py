"""The README's quickstart and the landing e2e that runs it (tests/e2e/test_quickstart_sandbox.py) cannot drift: every
command of the README's block is found, run as written or changed by one row of the explicit substitution table, and
a command the e2e test does not know fails here, in the unit tier."""

from __future__ import annotations

import pytest

from tests import quickstart as qs


def test_the_readme_quickstart_has_every_step():
    cmds = qs.commands()
    programs = [qs.program(c) for c in cmds]
    assert programs[0] == "pip"
    assert any(c.startswith("zenops config init --cloud mycloud") for c in cmds)
    assert any(c.startswith("zenops plan ") for c in cmds)
    ups = [c for c in cmds if c.startswith("zenops up ")]
    assert [u.endswith("--dry-run") for u in ups] == [True, False]
    assert ups[1].endswith("--yes")
    assert "--ttl 8h" in ups[1]
    assert "zenops status qwen" in cmds  # the deployment by its name, as every command takes it
    assert any(c.startswith("curl ") for c in cmds)
    assert cmds[-1].startswith("zenops down qwen ")
    assert cmds[-1].endswith("--yes")


def test_every_readme_command_is_covered_by_the_substitution_table():
    assert qs.uncovered(qs.commands()) == []


def test_the_key_is_never_on_a_command_line():
    (curl,) = [c for c in qs.commands() if c.startswith("curl ")]
    assert "-H @<(printf " in curl  # bash's builtin writes the header: no argv holds the key
    assert "Bearer $(" not in curl.replace("Bearer %s", "")


def test_a_new_or_changed_command_is_caught():
    readme = qs.README.read_text()
    assert qs.uncovered(qs.commands(readme.replace("zenops status qwen\n", "zenops status qwen\nwget http://x\n")))
    assert qs.uncovered(qs.commands(readme.replace("Qwen/Qwen3-4B", "Qwen/Qwen3-8B")))  # left unsubstituted


def test_the_extraction_joins_continuations_and_skips_comments():
    text = (
        "x\n## Quickstart\n\n```sh\n# a comment\nzenops a \\\n  --b c\n\npip install .  # here\n```\n"
        "```sh\nnot me\n```\n"
    )
    assert qs.commands(text) == ["zenops a --b c", "pip install .  # here"]
    with pytest.raises(ValueError, match="no ```sh block"):
        qs.commands("# zenops\n")


def test_the_sandbox_script_fills_every_placeholder():
    script = qs.script(tiny="/t/tiny-llama", repo="/r", clouds="/c/clouds.yaml")
    assert script.startswith("set -euo pipefail\nexec 2>&1\n")
    assert "printf '\\n$ %s\\n' 'zenops status qwen'\nzenops status qwen\n" in script  # each command shown, then run
    assert "--cloud sandbox" in script
    assert "-m /t/tiny-llama" in script
    assert '"model": "tiny-llama"' in script
    assert "pip install -q /r" in script
    assert "cp /c/clouds.yaml" in script
    with pytest.raises(ValueError, match="placeholders"):
        qs.script(tiny="/t")
