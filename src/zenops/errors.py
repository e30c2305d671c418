"""One exception root for zenops. Library code raises; only the CLI edge turns an error into an exit code."""

from __future__ import annotations

from dataclasses import dataclass, field


class ExitCode:
    OK = 0
    FAILURE = 1  # a generic, unexpected failure
    USAGE = 2  # bad flags or input (same code click uses)
    CONFIG = 3  # the configuration file is invalid
    NOT_IMPLEMENTED = 4  # a documented flag whose feature has not landed yet
    RUN_FAILED = 5  # an Ansible run failed on a host
    UNREACHABLE = 6  # a host could not be reached
    CANCELED = 130  # Ctrl-C (128 + SIGINT)


class ZenopsError(Exception):
    """Root of every error zenops reports to the operator. ``hint`` names the fix."""

    exit_code: int = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict[str, object]:
        return {"error": type(self).__name__, "message": self.message, "hint": self.hint, "exit_code": self.exit_code}


class UsageError(ZenopsError):
    exit_code = ExitCode.USAGE


class ConfigError(ZenopsError):
    """The config file is invalid: the message names the file and the key, the hint the fix."""

    exit_code = ExitCode.CONFIG

    def __init__(self, path: str, key: str, problem: str, *, hint: str | None = None) -> None:
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {problem}", hint=hint)
        self.path = path
        self.key = key


class NotImplementedYetError(ZenopsError):
    exit_code = ExitCode.NOT_IMPLEMENTED


@dataclass(frozen=True)
class HostFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class RunFailedError(ZenopsError):
    """An Ansible run ended badly. ``failures`` names each failing host, task and message."""

    playbook: str
    failures: list[HostFailure] = field(default_factory=list)
    status: str = "failed"
    rc: int | None = None
    run_dir: str | None = None

    def __post_init__(self) -> None:
        lines = [f"{self.playbook} {self.status} (rc={self.rc})"]
        for f in self.failures:
            kind = "unreachable" if f.unreachable else "failed"
            lines.append(f"  {f.host}: {kind} at task '{f.task}': {f.message}")
        if not self.failures:
            lines.append("  no failing task was reported; see the run's events")
        hint = f"run directory (events, stdout): {self.run_dir}" if self.run_dir else None
        ZenopsError.__init__(self, "\n".join(lines), hint=hint)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        if self.failures and all(f.unreachable for f in self.failures):
            return ExitCode.UNREACHABLE
        return ExitCode.RUN_FAILED

    def __str__(self) -> str:
        return self.message

    def __hash__(self) -> int:
        return id(self)

    def to_dict(self) -> dict[str, object]:
        d = super().to_dict()
        d["failures"] = [f.__dict__ for f in self.failures]
        d["status"] = self.status
        d["rc"] = self.rc
        return d


class CanceledError(ZenopsError):
    exit_code = ExitCode.CANCELED
