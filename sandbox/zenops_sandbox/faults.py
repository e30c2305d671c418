"""API faults: a WSGI middleware around each OpenStack API of the sandbox that answers some requests with an HTTP error
(500, 502, 503, 429 with Retry-After), a late answer (``timeout``: the request is carried out, its answer comes
``delay`` seconds later, after the client's own timeout) or no answer at all (``drop``: carried out, then the
connection is closed). Off by default; ``scripts/sandbox fault api add|clear|show`` writes the rules (see
sandbox/README.md).

The rules live in one JSON file (``<sandbox dir>/state/api-faults.json``, or ZENOPS_SANDBOX_API_FAULTS), read again
whenever it changes, so they take effect at once in the running services:

    {"rules": [{"services": ["nova"], "fault": "503", "every": 5, "methods": ["POST"]},
               {"services": ["neutron", "glance"], "fault": "429", "probability": 0.2, "seed": 1, "retry_after": 1}]}

A rule matches a request of one of its ``services`` (nova, neutron, glance, placement, keystone), of one of its
``methods`` (all when empty), whose path matches ``path`` (a regular expression; any when absent). Version documents
(``/``, ``/v2.1``, ``/v2.0/``) are left alone unless ``discovery`` is true: clients read them once per connection. The
rule takes only the requests whose User-Agent matches ``agent`` (default ``openstacksdk``: zenops, Ansible's
OpenStack modules, the openstack CLI; not the services' calls to each other; empty: all), and never a request that
carries a service token (X-Service-Token: a service acting for a user). The
rule then fires on every ``every``-th matching request (the ``every``-th, the 2x``every``-th...) or with
``probability`` drawn from a random generator seeded with ``seed``; ``limit`` caps how often it fires. Counters and
generators are per service process and start again whenever the file changes: the same rules and the same sequence
of requests give the same faults. The first rule that fires wins.

Every fault is logged to the service's log (``log/<service>-api.log``): "zenops-sandbox api fault: ...".
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SERVICES = ("nova", "neutron", "glance", "placement", "keystone")
DEFAULT_SERVICES = ("nova", "neutron", "glance")  # keystone (auth) and placement only when named
STATUS_FAULTS = {
    "500": "Internal Server Error",
    "502": "Bad Gateway",
    "503": "Service Unavailable",
    "429": "Too Many Requests",
}
FAULTS = (*STATUS_FAULTS, "timeout", "drop")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
# only the requests of openstacksdk clients (zenops, Ansible's OpenStack modules, the openstack CLI) by default: the
# services' calls to each other (Nova's to Neutron and Glance) are not faulted, nor any request carrying a service token
DEFAULT_AGENT = "openstacksdk"
VERSION_DOC = re.compile(r"^/*(v\d+(\.\d+)?/*)?$")
MESSAGE = "fault injected by the zenops sandbox (scripts/sandbox fault api)"


def faults_file() -> Path:
    explicit = os.environ.get("ZENOPS_SANDBOX_API_FAULTS")
    if explicit:
        return Path(explicit)
    base = os.environ.get("ZENOPS_SANDBOX_DIR") or Path(__file__).resolve().parents[2] / ".cache" / "sandbox"
    return Path(base) / "state" / "api-faults.json"


class RuleError(ValueError):
    """A rule that cannot be used: the message names the field and what it takes."""


def check_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """The rule with its defaults filled in, or RuleError naming what is wrong."""
    known = {"services", "fault", "every", "probability", "seed", "methods", "path", "retry_after", "delay", "limit",
             "discovery", "agent"}  # fmt: skip
    unknown = sorted(set(rule) - known)
    if unknown:
        raise RuleError(f"unknown field(s) {', '.join(unknown)}; a rule takes {', '.join(sorted(known))}")
    out = dict(rule)
    services = out.setdefault("services", list(DEFAULT_SERVICES))
    if not services or any(s not in SERVICES for s in services):
        raise RuleError(f"services {services}: each one of {', '.join(SERVICES)}")
    fault = str(out.get("fault", ""))
    if fault not in FAULTS:
        raise RuleError(f"fault {fault!r}: one of {', '.join(FAULTS)}")
    out["fault"] = fault
    every, prob = out.get("every"), out.get("probability")
    if (every is None) == (prob is None):
        raise RuleError("give either every (every N-th request) or probability (0 < p <= 1), not both or none")
    if every is not None and (not isinstance(every, int) or every < 1):
        raise RuleError(f"every {every!r}: a whole number >= 1")
    if prob is not None and not (isinstance(prob, int | float) and 0 < prob <= 1):
        raise RuleError(f"probability {prob!r}: a number in (0, 1]")
    out.setdefault("seed", 0)
    methods = [str(m).upper() for m in out.get("methods") or []]
    if any(m not in METHODS for m in methods):
        raise RuleError(f"methods {methods}: each one of {', '.join(METHODS)}")
    out["methods"] = methods
    out.setdefault("agent", DEFAULT_AGENT)
    for key in ("path", "agent"):
        if out.get(key) is not None:
            try:
                re.compile(out[key])
            except re.error as e:
                raise RuleError(f"{key} {out[key]!r}: not a regular expression ({e})") from e
    out.setdefault("retry_after", 1 if fault == "429" else None)
    ra = out["retry_after"]
    if ra is not None and (not isinstance(ra, int) or ra < 0):
        raise RuleError(f"retry_after {ra!r}: whole seconds >= 0")
    out.setdefault("delay", 60.0 if fault == "timeout" else 0.0)
    if not isinstance(out["delay"], int | float) or out["delay"] < 0:
        raise RuleError(f"delay {out['delay']!r}: seconds >= 0")
    limit = out.setdefault("limit", None)
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise RuleError(f"limit {limit!r}: a whole number >= 1")
    out["discovery"] = bool(out.get("discovery", False))
    return out


class _Rule:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.path = re.compile(spec["path"]) if spec.get("path") else None
        self.agent = re.compile(spec["agent"]) if spec.get("agent") else None
        self.rng = random.Random(spec["seed"])
        self.seen = 0  # matching requests
        self.fired = 0

    def matches(self, service: str, method: str, path: str, agent: str) -> bool:
        s = self.spec
        if service not in s["services"] or (s["methods"] and method not in s["methods"]):
            return False
        if self.agent is not None and not self.agent.search(agent):
            return False
        if not s["discovery"] and VERSION_DOC.match(path):
            return False
        return self.path is None or bool(self.path.search(path))

    def fires(self) -> bool:
        """Count one matching request; whether the fault hits it."""
        s = self.spec
        self.seen += 1
        if s["limit"] is not None and self.fired >= s["limit"]:
            return False
        hit = self.seen % s["every"] == 0 if s.get("every") is not None else self.rng.random() < s["probability"]
        if hit:
            self.fired += 1
        return hit


def load_rules(text: str) -> list[dict[str, Any]]:
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict) or not isinstance(data.get("rules", []), list):
        raise RuleError('the file holds {"rules": [...]}')
    return [check_rule(r) for r in data.get("rules", [])]


class FaultMiddleware:
    """Wraps one service's WSGI app. ``path`` is the rules file; ``sleep`` and ``log`` are for the tests."""

    def __init__(
        self,
        service: str,
        app: Callable[..., Iterable[bytes]],
        path: Path,
        *,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.service, self.app, self.path = service, app, path
        self.sleep = sleep
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.lock = threading.Lock()
        self.stamp: tuple[int, int, int] | None = None
        self.rules: list[_Rule] = []

    def _current(self) -> list[_Rule]:
        """The rules, read again when the file changed (a new inode: `write` replaces it; its mtime or size); none
        when it is absent or broken."""
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self.stamp:
            self.stamp = stamp
            try:
                specs = load_rules(self.path.read_text()) if stamp else []
            except (OSError, ValueError) as e:  # a broken file injects nothing rather than breaking the service
                self.log(f"zenops-sandbox api fault: ignoring {self.path}: {e}")
                specs = []
            self.rules = [_Rule(s) for s in specs]
        return self.rules

    def pick(self, method: str, path: str, agent: str = "") -> dict[str, Any] | None:
        with self.lock:
            for rule in self._current():
                if rule.matches(self.service, method, path, agent) and rule.fires():
                    return rule.spec
        return None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = str(environ.get("PATH_INFO", "") or "/")
        # a service's call on behalf of a user (Nova's to Neutron) carries its service token: never faulted
        service_call = "HTTP_X_SERVICE_TOKEN" in environ
        rule = None if service_call else self.pick(method, path, str(environ.get("HTTP_USER_AGENT", "")))
        if rule is None:
            return self.app(environ, start_response)
        fault = rule["fault"]
        self.log(f"zenops-sandbox api fault: {self.service} {method} {path} -> {fault}")
        if fault in STATUS_FAULTS:
            if rule["delay"]:
                self.sleep(float(rule["delay"]))
            return self._status(int(fault), rule["retry_after"], start_response)
        # timeout / drop: the request is carried out; its answer comes too late, or never
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            captured["status"], captured["headers"] = status, headers
            return lambda _data: None

        result = self.app(environ, capture)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        if fault == "drop":
            sock = environ.get("gunicorn.socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            # no answer: the server's write fails on the closed socket (or, without one, the server answers 500)
            raise ConnectionAbortedError(f"{MESSAGE}: {self.service} {method} {path}: connection dropped")
        self.sleep(float(rule["delay"]))
        start_response(captured.get("status", "500 Internal Server Error"), captured.get("headers", []))
        return [body]

    @staticmethod
    def _status(code: int, retry_after: int | None, start_response: Callable[..., Any]) -> list[bytes]:
        title = STATUS_FAULTS[str(code)]
        body = json.dumps({"error": {"code": code, "title": title, "message": MESSAGE}}).encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if retry_after is not None:
            headers.append(("Retry-After", str(retry_after)))
        start_response(f"{code} {title}", headers)
        return [body]


def wrap(service: str, app: Callable[..., Iterable[bytes]]) -> FaultMiddleware:
    return FaultMiddleware(service, app, faults_file())


# --- the rules file, for `scripts/sandbox fault api` -------------------------------------------------------------


def read(path: Path) -> list[dict[str, Any]]:
    try:
        return load_rules(path.read_text())
    except FileNotFoundError:
        return []


def write(path: Path, rules: list[dict[str, Any]]) -> None:
    """Write atomically (the services read the file while it changes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"rules": rules}, indent=1) + "\n")
    os.replace(tmp, path)


def describe(rule: dict[str, Any]) -> str:
    rate = (
        f"every {rule['every']}th" if rule.get("every") is not None else f"p={rule['probability']} seed={rule['seed']}"
    )
    parts = [",".join(rule["services"]), rule["fault"], rate, ",".join(rule["methods"]) or "all methods"]
    if rule.get("path"):
        parts.append(f"path ~ {rule['path']}")
    if rule.get("retry_after") is not None:
        parts.append(f"Retry-After {rule['retry_after']}")
    if rule.get("delay"):
        parts.append(f"delay {rule['delay']}s")
    if rule.get("limit"):
        parts.append(f"at most {rule['limit']}")
    if rule.get("discovery"):
        parts.append("version documents too")
    parts.append(f"clients ~ {rule['agent']}" if rule.get("agent") else "all clients")
    return "  ".join(parts)
