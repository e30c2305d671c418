"""The README's quickstart, run as written (tests/quickstart.py extracts it) on the sandbox cloud, from a fresh venv
with `pip install .` and no test extras: the substitutions the sandbox needs are the table in tests/quickstart.py,
each with its reason. Expected cost on the 2-core CI machine: ~2-4 min for the venv (offline wheels), ~8-12 min for
`up` (a sandbox server, Docker, the engine image loaded from the machine's cache, the tiny model served), ~1 min for
`down`: it runs in the cloud lane after the integration tests and the expiry switch (scripts/test).

The engine image route is configured, not typed: the sandbox has no registry or internet, so ./zenops.yaml (the
project file, beside the user file `zenops config init` writes) sets `defaults.up` to the pip route on the locally
built base image, as scripts/demo passes it by flags."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from tests import quickstart
from tests.conftest import REPO
from tests.e2e.bounded import run_bounded
from zenops.tinymodel import generate

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
CLOUDS = Path(os.environ.get("ZENOPS_SANDBOX_DIR", REPO / ".cache" / "sandbox")) / "clouds.yaml"
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
DEPLOYMENT = "qwen"  # the README's --deployment
TRANSCRIPT = REPO / ".cache" / "e2e" / "quickstart.txt"


def test_the_readme_quickstart_runs_on_the_sandbox(tmp_path: Path) -> None:
    if not CLOUDS.is_file():
        if os.environ.get("ZENOPS_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox cloud is required but {CLOUDS} is missing: run scripts/sandbox up")
        pytest.skip("the sandbox cloud is not running (scripts/sandbox up)")
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    assert quickstart.uncovered(quickstart.commands()) == []
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    tiny = work / "tiny-llama"
    generate(tiny)  # this process has numpy and sentencepiece; the venv under test installs no extras
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    (work / "zenops.yaml").write_text(
        "defaults:\n  up:\n    image_source: pip\n    base_image: zenops/bookworm-slim:latest\n"
        f"    base_image_archive: {BASE_ARCHIVE}\n"
    )
    drop = (
        "ZENOPS_CONFIG",
        "ZENOPS_COLLECTION_ROOT",
        "ZENOPS_COLLECTIONS_PATH",
        "ANSIBLE_COLLECTIONS_PATH",
        "OS_CLIENT_CONFIG_FILE",
        "OS_CLOUD",
        "VIRTUAL_ENV",
        "PYTHONPATH",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HOME=str(home), PATH=f"{env_dir / 'bin'}:{os.environ['PATH']}")
    for var in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env.pop(var, None)  # the README's paths are under ~: HOME is the test's
    script = quickstart.script(tiny=str(tiny), repo=str(REPO), clouds=str(CLOUDS))
    (work / "quickstart.sh").write_text(script)
    zenops = env_dir / "bin" / "zenops"
    try:
        proc = run_bounded(["bash", str(work / "quickstart.sh")], env=env, cwd=work, timeout=2400)
        TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
        TRANSCRIPT.write_text(proc.stdout + proc.stderr)  # what a new user sees, command by command
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        # the chat completion curl printed (the one JSON object with choices in the output)
        answers = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{") and '"choices"' in x]
        assert answers, proc.stdout[-3000:]
        assert answers[0]["choices"], answers
        assert '"usage"' in proc.stdout
        # nothing of the deployment is left (down ran last), and its API key file is gone
        status = subprocess.run(
            [str(zenops), "--json", "status"], env=env, cwd=work, capture_output=True, text=True, check=True
        )
        deps = json.loads(status.stdout.splitlines()[-1])["deployments"]
        assert DEPLOYMENT not in {d["name"] for d in deps}, deps
        assert not list((home / ".local" / "state" / "zenops" / "secrets").glob("*.api-key"))
    finally:
        # whatever failed, the sandbox is left as found
        subprocess.run(
            [str(zenops), "down", "--deployment", DEPLOYMENT, "--cloud", "sandbox", "--yes"],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
