from zenops.errors import ConfigError, ExitCode, HostFailure, RunFailedError, UsageError, ZenopsError


def test_every_error_carries_a_distinct_exit_code():
    assert ZenopsError("x").exit_code == ExitCode.FAILURE
    assert UsageError("x").exit_code == ExitCode.USAGE
    assert ConfigError("f.yaml", "a.b", "bad").exit_code == ExitCode.CONFIG
    codes = [v for k, v in vars(ExitCode).items() if not k.startswith("_")]
    assert len(codes) == len(set(codes))


def test_run_failed_names_hosts_and_picks_the_code():
    failed = RunFailedError(
        "up.yml",
        [HostFailure("a", "Install", "no space left"), HostFailure("b", "Connect", "timed out", unreachable=True)],
        rc=2,
    )
    assert failed.exit_code == ExitCode.RUN_FAILED
    assert "a: failed at task 'Install': no space left" in failed.message
    assert "b: unreachable at task 'Connect': timed out" in failed.message
    only_dark = RunFailedError("up.yml", [HostFailure("b", "Connect", "timed out", unreachable=True)], rc=4)
    assert only_dark.exit_code == ExitCode.UNREACHABLE
    assert only_dark.to_dict()["failures"] == [
        {"host": "b", "task": "Connect", "message": "timed out", "unreachable": True}
    ]


def test_config_error_message_names_file_and_key():
    err = ConfigError("/etc/z.yaml", "docker.source", "must be one of distro, upstream", hint="use distro")
    assert err.message == "/etc/z.yaml: docker.source: must be one of distro, upstream"
    assert err.to_dict()["hint"] == "use distro"


# what ssh prints (through Ansible's unreachable message) when a pinned host key changed, HostKeyAlias = server ID
_CHANGED_KEY = (
    "Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
    "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
    "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\r\n"
    "Add correct host key in /st/zenops/deployments/flex/demo.known_hosts to get rid of this message.\r\n"
    "Offending ED25519 key in /st/zenops/deployments/flex/demo.known_hosts:1\r\n"
    "  remove with:\r\n"
    '  ssh-keygen -f "/st/zenops/deployments/flex/demo.known_hosts" -R "6f1c0f7e-9b1a-4c47"\r\n'
    "Host key for 6f1c0f7e-9b1a-4c47 has changed and you have requested strict checking.\r\n"
    "Host key verification failed."
)


def test_a_changed_host_key_names_the_pinning_file_and_how_to_re_trust():
    err = RunFailedError("up.yml", [HostFailure("zenops-demo-1", "Wait", _CHANGED_KEY, unreachable=True)], rc=4)
    assert err.exit_code == ExitCode.UNREACHABLE
    assert err.hint is not None
    assert "zenops-demo-1's SSH host key is not the one pinned in /st/zenops/deployments/flex/demo.known_hosts" in (
        err.hint
    )
    assert "`ssh-keygen -R 6f1c0f7e-9b1a-4c47 -f /st/zenops/deployments/flex/demo.known_hosts`" in err.hint
    # any other unreachable host: no such hint
    other = RunFailedError("up.yml", [HostFailure("b", "Wait", "Connection timed out", unreachable=True)], rc=4)
    assert other.hint is None or "ssh-keygen" not in other.hint
