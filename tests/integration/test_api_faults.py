"""zenops up/down under the cloud's real API faults: the sandbox's fault middleware (`scripts/sandbox fault api`)
answers Nova, Neutron and Glance requests of openstacksdk clients with 503, 429 + Retry-After, or too late. After
every case: nothing leaked.

The faults are the sandbox's, not this test's: another client of the sandbox using openstacksdk at the same time gets
them too. Every test clears them at its end, whatever happened.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import openstack
import pytest
import yaml
from openstack import exceptions as sdk

from tests.integration.conftest import CLOUDS, REPO, SMALL, no_leaks_of, ours
from zenops.errors import ExitCode

pytestmark = pytest.mark.integration

SANDBOX = REPO / "scripts" / "sandbox"
LOG = CLOUDS.parent / "log"
FAULT_LINE = "zenops-sandbox api fault: "


def fault_api(*args: str) -> str:
    env = {**os.environ, "ZENOPS_SANDBOX_DIR": str(CLOUDS.parent)}
    out = subprocess.run([str(SANDBOX), "fault", "api", *args], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def injected(service: str) -> int:
    """How many faults the service's API has injected since it started (its log says each one)."""
    try:
        return (LOG / f"{service}-api.log").read_text(errors="replace").count(FAULT_LINE)
    except FileNotFoundError:
        return 0


@pytest.fixture
def api_faults(admin: openstack.connection.Connection) -> Iterator[Callable[..., str]]:
    """``api_faults("503", "--every", "5", ...)`` adds a rule (scripts/sandbox fault api add); all are cleared after
    the test. First proves the running services load the middleware: a sandbox started before it existed ignores the
    rules, and these tests would pass without a single fault."""
    fault_api("clear")
    try:
        fault_api("add", "503", "--every", "1", "--limit", "1", "--service", "nova", "--path", "/flavors")
        try:
            status = admin.compute.get("/flavors").status_code
        except sdk.HttpException as e:
            status = e.status_code
        if status != 503:
            pytest.fail(
                f"the sandbox's Nova answered {status}, not the injected 503: its services run without "
                "the fault middleware; restart the sandbox (scripts/sandbox down && scripts/sandbox up)"
            )
        fault_api("clear")
        yield lambda *args: fault_api("add", *args)
    finally:
        fault_api("clear")


def no_leaks(zenops, admin, deployment: str) -> None:
    no_leaks_of(zenops, deployment)
    assert ours(admin, deployment) == []


def test_up_and_down_complete_when_a_fifth_of_the_api_calls_fail(zenops, admin, api_faults):
    """Every 10th openstacksdk request to Nova, Neutron and Glance answers 503, and of the others every 9th 429 with
    Retry-After: 1 (~20 % in all): `up` of one server and `down` complete, with one server (no twin) and no leak."""
    before = {s: injected(s) for s in ("nova", "neutron", "glance")}

    def faults_on() -> None:
        api_faults("503", "--every", "10")
        api_faults("429", "--every", "9", "--retry-after", "1")

    faults_on()
    code, _, err = zenops("up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itflt")
    fault_api("clear")  # this test's own SDK calls do not retry
    assert code == 0, err[-3000:]
    assert [x for x in ours(admin, "itflt") if x.startswith("server ")] == ["server zenops-itflt-1"]
    faults_on()
    code, _, err = zenops("down", "--deployment", "itflt", "--yes")
    fault_api("clear")
    assert code == 0, err[-3000:]
    no_leaks(zenops, admin, "itflt")
    faulted = {s: injected(s) - n for s, n in before.items()}
    assert faulted["nova"] > 0, faulted  # the run met faults (and Neutron's: the security group, the teardown)
    assert faulted["neutron"] > 0, faulted
    print(f"\nfaults injected: {faulted}")


@pytest.mark.full  # a failing up (seconds) then a whole up + down: the landing run keeps the case above
def test_a_fault_that_outlasts_the_retries_fails_clearly_then_a_rerun_completes(zenops, admin, api_faults):
    api_faults("503", "--every", "1", "--service", "nova")
    code, _, err = zenops("up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itdown")
    assert code == ExitCode.CLOUD, err[-3000:]
    assert "compute (Nova) at http://" in err
    assert "failed with HTTP 503, also when tried again" in err
    assert "re-run" in err
    fault_api("clear")
    code, _, err = zenops("up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itdown")
    assert code == 0, err[-3000:]
    code, _, err = zenops("down", "--deployment", "itdown", "--yes")
    assert code == 0, err[-3000:]
    no_leaks(zenops, admin, "itdown")


@pytest.mark.full  # one more up + down; its logic (adopt what a lost answer made) is unit-tested
def test_a_server_creation_answered_too_late_is_adopted_not_doubled(zenops, admin, api_faults, tmp_path: Path):
    """The first server creation is carried out but answered after the client's timeout (api_timeout 10 s in a copy
    of the sandbox's clouds.yaml): `up` finds the server the lost answer made and adopts it."""
    clouds = yaml.safe_load(CLOUDS.read_text())
    clouds["clouds"]["sandbox"]["api_timeout"] = 10
    mine = tmp_path / "clouds.yaml"
    mine.touch(mode=0o600)
    mine.write_text(yaml.safe_dump(clouds))
    zenops.env["OS_CLIENT_CONFIG_FILE"] = str(mine)
    before = injected("nova")
    api_faults("timeout", "--every", "1", "--limit", "1", "--delay", "25", "--service", "nova", "--method", "POST",
               "--path", "/servers$")  # fmt: skip
    code, _, err = zenops("up", "--yes", "--cloud", "sandbox", "--flavor", SMALL, "--deployment", "itlate")
    assert code == 0, err[-3000:]
    assert injected("nova") == before + 1
    assert [x for x in ours(admin, "itlate") if x.startswith("server ")] == ["server zenops-itlate-1"]
    code, _, err = zenops("down", "--deployment", "itlate", "--yes")
    assert code == 0, err[-3000:]
    no_leaks(zenops, admin, "itlate")
