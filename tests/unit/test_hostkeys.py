"""The pinned host keys' comparison (pure), and the check's refusal, with ssh-keygen's real known_hosts handling."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from zenops import hostkeys
from zenops.errors import ExitCode

ED_A = "AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
ED_B = "AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
RSA = "AAAAB3NzaC1yc2EAAAADAQABAAABAQC"


def test_a_pinned_key_type_offered_with_another_key_is_a_change():
    pinned = hostkeys.parse_keys(f"|1|salt|hash ssh-ed25519 {ED_A}\n")
    assert not hostkeys.changed(pinned, {("ssh-ed25519", ED_A), ("ssh-rsa", RSA)})
    assert hostkeys.changed(pinned, {("ssh-ed25519", ED_B)})
    assert not hostkeys.changed(pinned, {("ssh-rsa", RSA)})  # a type never pinned proves nothing
    assert not hostkeys.changed(pinned, set())  # no answer: left to the playbook


def test_keyscan_and_known_hosts_lines_parse_alike():
    text = f"# 10.0.0.5:22 SSH-2.0-OpenSSH_9.2\n10.0.0.5 ssh-ed25519 {ED_A}\n10.0.0.5 ssh-rsa {RSA} comment\n"
    assert hostkeys.parse_keys(text) == {("ssh-ed25519", ED_A), ("ssh-rsa", RSA)}


def test_check_refuses_a_changed_key_naming_the_file_and_the_re_trust_command(tmp_path: Path, monkeypatch):
    known = tmp_path / "demo.known_hosts"
    known.write_text(f"uuid-1 ssh-ed25519 {ED_A}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)  # hashed, as Debian does
    offered = {"10.0.0.5": {("ssh-ed25519", ED_B)}, "10.0.0.6": {("ssh-ed25519", ED_A)}}
    monkeypatch.setattr(hostkeys, "_offered", lambda address, timeout: offered[address])  # TEST DOUBLE: ssh-keyscan
    with pytest.raises(hostkeys.HostKeyChangedError) as e:
        hostkeys.check(known, [hostkeys.Pinned("zenops-demo-1", "uuid-1", "10.0.0.5")])
    assert e.value.exit_code == ExitCode.UNREACHABLE
    assert str(known) in e.value.message
    assert f"`ssh-keygen -R uuid-1 -f {known}`" in (e.value.hint or "")
    # the same key, or a server with nothing pinned yet (a new one: accept-new records it): no refusal
    hostkeys.check(known, [hostkeys.Pinned("zenops-demo-1", "uuid-1", "10.0.0.6")])
    hostkeys.check(known, [hostkeys.Pinned("zenops-demo-2", "uuid-2", "10.0.0.5")])
