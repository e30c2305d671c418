"""The private role zenops.inference._common (what docker, gateway, metrics and expiry_switch include for their
distribution check and their apt installs), run by real Ansible on this machine (connection local) in check mode.

Its preflight passes on this Debian host and refuses another distribution (facts given as play vars, which win over
gathered ones) with the message naming the role, the host and the distribution; install_packages hands its package
list to apt: installed packages are ``ok``, a package apt does not know fails naming it. The apt cache is taken as
fresh (a cache_valid_time of years): nothing is fetched. Molecule's _common scenario converges both on a fresh host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.runner import ansible_json_env, run_playbook, tail
from zenops.paths import collection_root

SYSTEM_PYTHON = Path("/usr/bin/python3")  # apt's Python bindings (python3-apt) are the system Python's
NO_SUCH_PACKAGE = "zenops-no-such-package"
CACHE_FRESH_FOR_YEARS = 10 * 365 * 24 * 3600
ROLE_PREFIX = "zenops.inference._common : "


def _has_apt() -> bool:
    if shutil.which("apt-get") is None or not SYSTEM_PYTHON.is_file():
        return False
    probe = subprocess.run([str(SYSTEM_PYTHON), "-c", "import apt"], capture_output=True, check=False)
    return probe.returncode == 0 and any(Path("/var/lib/apt/lists").glob("*_Packages*"))


pytestmark = pytest.mark.skipif(not _has_apt(), reason="needs a Debian-family host with apt, python3-apt, and lists")


def _run(tmp_path: Path, tasks: list[dict[str, Any]], play_vars: dict[str, Any] | None = None) -> tuple[int, dict]:
    """One play on this host in check mode: (exit status, the ansible.posix.json document)."""
    assert (collection_root() / "roles" / "_common").is_dir(), "the collection under test has no roles/_common"
    play = {"name": "The _common role", "hosts": "all", "gather_facts": False, "vars": play_vars or {}, "tasks": tasks}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"testhost ansible_connection=local ansible_python_interpreter={SYSTEM_PYTHON}\n")
    proc = run_playbook(playbook, inventory, ansible_json_env(tmp_path / "ansible-tmp"), args=["--check"], timeout=300)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON document:\n{tail(proc)}")
    return proc.returncode, doc


def _results(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Task name (without the role's prefix) -> testhost's result, for the tasks that ran."""
    out: dict[str, dict[str, Any]] = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            if "testhost" in task["hosts"]:
                out[task["task"]["name"].removeprefix(ROLE_PREFIX)] = task["hosts"]["testhost"]
    return out


def _include(entry: str, **args: Any) -> dict[str, Any]:
    return {
        "name": f"Include _common's {entry}",
        "ansible.builtin.include_role": {"name": "zenops.inference._common", "tasks_from": entry},
        "vars": args,
    }


def test_preflight_passes_on_this_debian_host_with_gathered_facts(tmp_path: Path) -> None:
    rc, doc = _run(tmp_path, [_include("preflight", _common_role="zenops.inference.test")])
    results = _results(doc)
    assert rc == 0, json.dumps(results, indent=1)[-4000:]
    gathered = results["Gather the facts this role needs"]
    assert not gathered.get("skipped"), "no facts were there: preflight must gather them"
    assert gathered["ansible_facts"]["ansible_distribution"] == "Debian"
    assert results["Assert a supported distribution"].get("failed") is not True


@pytest.mark.parametrize(
    ("facts", "args", "message"),
    [
        pytest.param(
            {"distribution": "Fedora", "distribution_version": "40"},
            {},
            "zenops.inference.test supports Debian and Ubuntu hosts only; testhost runs Fedora 40.",
            id="fedora",
        ),
        pytest.param(  # expiry_switch's variant: systemd required, the service manager named
            {"distribution": "Debian", "distribution_version": "12", "service_mgr": "sysvinit"},
            {"_common_require_systemd": True},
            "zenops.inference.test supports Debian and Ubuntu hosts run by systemd only; testhost runs Debian 12 "
            "(sysvinit).",
            id="no-systemd",
        ),
        pytest.param(
            {"distribution": "Ubuntu", "distribution_version": "24.04"},
            {"_common_supported_distributions": ["Debian"]},
            "zenops.inference.test supports Debian hosts only; testhost runs Ubuntu 24.04.",
            id="narrower-list",
        ),
    ],
)
def test_preflight_refuses_an_unsupported_host_naming_role_host_and_distribution(
    tmp_path: Path, facts: dict[str, str], args: dict[str, Any], message: str
) -> None:
    rc, doc = _run(
        tmp_path, [_include("preflight", _common_role="zenops.inference.test", **args)], {"ansible_facts": facts}
    )
    results = _results(doc)
    assert rc != 0
    assert results["Gather the facts this role needs"].get("skipped") is True, "the given facts must be used as is"
    failed = results["Assert a supported distribution"]
    assert failed["failed"] is True
    assert failed["msg"] == message


def test_preflight_passes_a_systemd_debian_host_when_systemd_is_required(tmp_path: Path) -> None:
    facts = {"distribution": "Ubuntu", "distribution_version": "24.04", "service_mgr": "systemd"}
    rc, doc = _run(
        tmp_path,
        [_include("preflight", _common_role="zenops.inference.test", _common_require_systemd=True)],
        {"ansible_facts": facts},
    )
    assert rc == 0, json.dumps(_results(doc), indent=1)[-4000:]


def test_preflight_requires_the_role_name(tmp_path: Path) -> None:
    rc, doc = _run(tmp_path, [_include("preflight")])
    assert rc != 0
    assert "_common_role" in json.dumps(doc)


def test_install_packages_hands_the_list_to_apt(tmp_path: Path) -> None:
    installed = ["ca-certificates", "python3-apt"]  # both on this host (python3-apt: the skip condition's probe)
    rc, doc = _run(
        tmp_path,
        [_include("install_packages", _common_packages=installed, _common_apt_cache_valid_time=CACHE_FRESH_FOR_YEARS)],
    )
    results = _results(doc)
    assert rc == 0, json.dumps(results, indent=1)[-4000:]
    assert results["Look for apt package lists"]["matched"] > 0
    update = results["Update the apt cache"]
    assert update.get("skipped") is not True
    assert update["changed"] is False
    install = results["Install ca-certificates, python3-apt"]
    assert install.get("skipped") is not True
    assert install["changed"] is False, "packages already installed: apt must report ok"


def test_install_packages_fails_on_a_package_apt_does_not_know(tmp_path: Path) -> None:
    rc, doc = _run(
        tmp_path,
        [
            _include(
                "install_packages",
                _common_packages=["ca-certificates", NO_SUCH_PACKAGE],
                _common_apt_update_cache=False,
                _common_install_recommends=False,
            )
        ],
    )
    results = _results(doc)
    assert rc != 0
    assert results["Look for apt package lists"].get("skipped") is True  # no cache update asked for
    failed = results[f"Install ca-certificates, {NO_SUCH_PACKAGE}"]
    assert failed["failed"] is True
    assert NO_SUCH_PACKAGE in failed["msg"]


def test_install_packages_with_no_packages_only_updates_the_cache(tmp_path: Path) -> None:
    rc, doc = _run(tmp_path, [_include("install_packages", _common_apt_cache_valid_time=CACHE_FRESH_FOR_YEARS)])
    results = _results(doc)
    assert rc == 0, json.dumps(results, indent=1)[-4000:]
    assert results["Update the apt cache"]["changed"] is False
    assert results["Install "]["skipped"] is True
