"""One exception root for zenops. Library code raises; only the CLI edge turns an error into an exit code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum, unique


@unique
class ExitCode(IntEnum):
    """Every exit code of zenops, each with its meaning: the one source of the table in `zenops --help`
    (zenops.cli.main) and of each ZenopsError's code. A code added here shows there."""

    meaning: str

    def __new__(cls, value: int, meaning: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    OK = 0, "success"
    FAILURE = 1, "an unexpected failure"
    USAGE = 2, "bad flags or input: a value nothing can mean, options that contradict (click's code too)"
    CONFIG = 3, "the configuration file is invalid (the file and key are named)"
    NOT_IMPLEMENTED = 4, "a documented flag whose feature has not landed yet"
    RUN_FAILED = 5, "an Ansible run failed on a host (host, task and message are named)"
    UNREACHABLE = 6, "a host could not be reached"
    # the model does not fit, the CPU cannot run it, contradictory options (--tensor-parallel N the model or the NUMA
    # nodes cannot take: the valid sizes are named)
    PLAN_REFUSED = 7, "no sensible serving plan (the model does not fit, the CPU cannot run it, options it cannot take)"
    CLOUD = 8, "the cloud API failed or refused (auth, unreachable, not found)"
    QUOTA = 9, "the project's quota or absolute limits are too small"
    LEAKS = 10, "zenops-marked resources without a live deployment"
    # a vLLM release or vLLM/zentorch pair the compatibility table marks broken or does not know (`plan --vllm 9.9.9`
    # too): the message names the known releases or a working pair
    INCOMPATIBLE = 11, "a vLLM release or vLLM/zentorch pair the compatibility table marks broken or does not know"
    # a benchmark result with failed requests or none completed (`vllm bench serve` itself exits 0 even when every
    # request failed); `zenops report --allow-failed` reports such results without this code
    BENCH_FAILED = 12, "a benchmark result with failed requests, or none completed"
    NO_SERVER = 13, "a deployment zenops knows, but no server zenops started is known or running there"
    LOCKED = 14, "another zenops command holds the deployment's lock (it is named)"
    # the changed hosts went back (or not, with --no-revert); the message names the gate, the host and the figures
    ROLLOUT_GATE = 15, "`zenops rollout`: a health or performance gate failed"
    ROLLOUT_PAUSED = 16, "`zenops rollout`: the performance gate could not tell (too noisy); re-run to go on"
    # projected over budget.max_usd (nothing started), or the budget ran out during the run (what was measured is
    # reported, labelled partial, and everything was torn down)
    OVER_BUDGET = 17, "`zenops campaign`: the projected or spent cost is over budget.max_usd"
    CELLS_FAILED = 18, "`zenops campaign run`: it ended, torn down, but some cells failed (listed)"
    # `zenops status demo`, `down demo`, `bench demo`, ...: the same code on every command (`zenops status` lists them)
    UNKNOWN_DEPLOYMENT = 19, "no deployment of that name is recorded on this machine (in that cloud)"
    CANCELED = 130, "interrupted (Ctrl-C: 128 + SIGINT); what it started was stopped or put back"
    TERMINATED = 143, "stopped by SIGTERM (kill, systemctl stop), cleaned up as on Ctrl-C"


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
        self.problem = problem


class NotImplementedYetError(ZenopsError):
    exit_code = ExitCode.NOT_IMPLEMENTED


@dataclass(frozen=True)
class HostFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False


def in_one_line(message: str, width: int = 300) -> str:
    """A multi-line error message as one line for a status line or a table cell: its lines joined with `` / ``,
    whitespace collapsed, cut at ``width``. A RunFailedError's message keeps its cause so: the playbook, then each
    failing host, its task and the task's message (``serve.yml failed (rc=2) / web-1: failed at task 'Build the
    engine image': ... debian:bookworm-slim: ...``)."""
    text = " / ".join(" ".join(line.split()) for line in message.splitlines() if line.strip())
    return text if len(text) <= width else text[: width - 3] + "..."


class RunFailedError(ZenopsError):
    """An Ansible run ended badly. ``failures`` names each failing host, task and message."""

    def __init__(
        self,
        playbook: str,
        failures: list[HostFailure],
        *,
        status: str = "failed",
        rc: int | None = None,
        run_dir: str | None = None,
    ) -> None:
        lines = [f"{playbook} {status} (rc={rc})"]
        for f in failures:
            kind = "unreachable" if f.unreachable else "failed"
            lines.append(f"  {f.host}: {kind} at task '{f.task}': {f.message}")
        if not failures:
            lines.append("  no failing task was reported; see the run's events")
        hints = [h for h in (host_key_hint(f) for f in failures) if h]
        if run_dir:
            hints.append(f"run directory (events, stdout): {run_dir}")
        super().__init__("\n".join(lines), hint="; ".join(hints) or None)
        self.playbook = playbook
        self.failures = failures
        self.status = status
        self.rc = rc
        self.run_dir = run_dir
        unreachable_only = bool(failures) and all(f.unreachable for f in failures)
        self.exit_code = ExitCode.UNREACHABLE if unreachable_only else ExitCode.RUN_FAILED

    def to_dict(self) -> dict[str, object]:
        d = super().to_dict()
        d["failures"] = [f.__dict__ for f in self.failures]
        d["status"] = self.status
        d["rc"] = self.rc
        return d


_KEY_FILE = re.compile(r"Offending \S+ key in (\S+?):\d+")
_KEY_ALIAS = re.compile(r"Host key for (\S+) has changed")


def host_key_hint(failure: HostFailure) -> str | None:
    """What to do when ssh refused a host because its key is not the one pinned at the first connection (ssh says
    where: the known_hosts file and the entry's name, a cloud server's ID)."""
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" not in failure.message:
        return None
    found, alias = _KEY_FILE.search(failure.message), _KEY_ALIAS.search(failure.message)
    # (a long message is cut before ssh names the file)
    where = (
        found[1]
        if found
        else "its known_hosts file (a cloud deployment's: <state_dir>/deployments/CLOUD/NAME.known_hosts)"
    )
    name = alias[1] if alias else "HOST"
    return (
        f"{failure.host}'s SSH host key is not the one pinned in {where} at the first connection: something else may "
        f"answer at its address. If the server was rebuilt on purpose, re-trust it with "
        f"`ssh-keygen -R {name} -f {where}` and run again"
    )


class BenchFailedError(ZenopsError):
    """Benchmark results whose requests failed (or none completed): the numbers are not a measurement of serving."""

    exit_code = ExitCode.BENCH_FAILED


class NoBenchResultError(BenchFailedError):
    """No benchmark result where one was expected. `zenops bench` ran and left none: exit 12, like failed requests. A
    path the operator named that holds none (`zenops report PATH`) is bad input instead: ``usage=True``, exit 2."""

    def __init__(self, message: str, *, hint: str | None = None, usage: bool = False) -> None:
        super().__init__(message, hint=hint)
        if usage:
            self.exit_code = ExitCode.USAGE


class NoServerError(ZenopsError):
    """Nothing to benchmark: no server zenops started is known or running on the target."""

    exit_code = ExitCode.NO_SERVER


class UnknownDeploymentError(ZenopsError):
    """A deployment named on the command line (``zenops down demo``, ``--deployment demo``) that this machine has no
    record of: the same exit code on every command."""

    exit_code = ExitCode.UNKNOWN_DEPLOYMENT


class CanceledError(ZenopsError):
    exit_code = ExitCode.CANCELED


class LockedError(ZenopsError):
    exit_code = ExitCode.LOCKED


class RolloutGateError(ZenopsError):
    exit_code = ExitCode.ROLLOUT_GATE


class OverBudgetError(ZenopsError):
    exit_code = ExitCode.OVER_BUDGET


class CellsFailedError(ZenopsError):
    exit_code = ExitCode.CELLS_FAILED


class RolloutPausedError(ZenopsError):
    exit_code = ExitCode.ROLLOUT_PAUSED
