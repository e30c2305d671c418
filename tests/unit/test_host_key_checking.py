"""No inventory, playbook, role or Ansible configuration zenops ships turns SSH host key checking off (issue 46, N7):
a host's key is pinned (recorded at the first connection, checked at every later one), as `zenops up` pins a cloud
server's in its deployment's known_hosts file under the server's ID (zenops.deployment.common.ssh_pinning_args)."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
import yaml

from zenops.deployment.common import known_hosts_path, ssh_pinning_args

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("inventories", "playbooks", "roles", "plugins")
# molecule/ holds test containers; a file there that turns checking off must say why here
MOLECULE_ALLOWED: dict[str, str] = {}
CHECKING_OFF = re.compile(
    r"StrictHostKeyChecking\s*[= ]\s*(no|off|false)\b"
    r"|UserKnownHostsFile\s*[= ]\s*/dev/null"
    r"|host_key_checking\s*[:=]\s*[\"']?(false|no|off|0)\b",
    re.IGNORECASE,
)
SUFFIXES = {".yml", ".yaml", ".cfg", ".ini", ".j2", ".py", ".toml", ".sh", ""}


def files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def checking_off(path: Path) -> list[str]:
    text = path.read_text(errors="replace")
    return [m.group(0) for m in CHECKING_OFF.finditer(text)]


def test_the_pattern_finds_what_turns_checking_off():
    for off in (
        "-o StrictHostKeyChecking=no",
        "-o UserKnownHostsFile=/dev/null",
        "host_key_checking = False",
        "host_key_checking: false",
        "ANSIBLE_HOST_KEY_CHECKING: 'False'",
        "StrictHostKeyChecking no",
    ):
        assert CHECKING_OFF.search(off), off
    for on in ("-o StrictHostKeyChecking=accept-new", "host_key_checking = True", "host_key_checking: accept-new"):
        assert not CHECKING_OFF.search(on), on


def test_no_shipped_file_turns_host_key_checking_off():
    found = {str(p.relative_to(ROOT)): hits for p in files(*SHIPPED) if (hits := checking_off(p))}
    cfgs = [p for p in ROOT.rglob("ansible.cfg") if ".git" not in p.parts and ".venv" not in p.parts]
    found.update({str(p.relative_to(ROOT)): hits for p in cfgs if (hits := checking_off(p))})
    assert files("inventories", "roles"), "nothing scanned"
    assert found == {}, "host key checking turned off (pin the keys instead, as zenops up does)"


def test_molecule_turns_checking_off_only_with_a_reason():
    found = {str(p.relative_to(ROOT)) for p in files("molecule") if checking_off(p)}
    assert found <= set(MOLECULE_ALLOWED), f"say why in MOLECULE_ALLOWED: {sorted(found - set(MOLECULE_ALLOWED))}"


def test_the_openstack_example_pins_host_keys_where_zenops_up_does():
    example = yaml.safe_load((ROOT / "inventories" / "examples" / "openstack.yml").read_text())
    expr = example["compose"]["ansible_ssh_common_args"]
    server = {"id": "8d1f-id", "cloud": {"name": "sandbox"}, "metadata": {"zenops": "1", "zenops:deployment": "fle"}}
    args = jinja2.Environment().compile_expression(expr)(openstack=server)
    state_dir = Path("~/.local/state/zenops")  # zenops's default state_dir, as the example's SSH key path assumes
    assert args == ssh_pinning_args(known_hosts_path(state_dir, "sandbox", "fle"), "8d1f-id")


@pytest.mark.parametrize("known_hosts", ["/state/deployments/c/fle.known_hosts", ""])
def test_the_provision_role_pins_host_keys_by_server_id_with_or_without_a_known_hosts_file(known_hosts):
    role_vars = yaml.safe_load((ROOT / "roles" / "provision" / "vars" / "main.yml").read_text())
    args = jinja2.Template(role_vars["_provision_ssh_args"]).render(provision_known_hosts_file=known_hosts)
    args = args.replace("SERVER_ID", "8d1f-id")
    if known_hosts:
        assert args == ssh_pinning_args(Path(known_hosts), "8d1f-id")
    else:  # the controller user's own known_hosts
        assert args == "-o StrictHostKeyChecking=accept-new -o HostKeyAlias=8d1f-id"
