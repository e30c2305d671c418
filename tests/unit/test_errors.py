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
