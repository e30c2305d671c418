"""The sandbox's API fault middleware (sandbox/zenops_sandbox/faults.py), with a dummy WSGI app: deterministic."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sandbox"))

from zenops_sandbox import faults  # noqa: E402

SDK_AGENT = "openstacksdk/4.14.0 keystoneauth1/5.11.0 python-requests/2.32.3 CPython/3.11.2"


class App:
    """Answers 200 with the path; counts the requests that reached it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.calls.append((environ["REQUEST_METHOD"], environ["PATH_INFO"]))
        start_response("202 Accepted", [("Content-Type", "application/json")])
        return [b'{"ok": ', b"true}"]


class Client:
    def __init__(self, tmp_path: Path, service: str = "nova") -> None:
        self.app = App()
        self.file = tmp_path / "state" / "api-faults.json"
        self.slept: list[float] = []
        self.logged: list[str] = []
        self.mw = faults.FaultMiddleware(service, self.app, self.file, sleep=self.slept.append, log=self.logged.append)

    def rules(self, *rules: dict[str, Any]) -> None:
        faults.write(self.file, [faults.check_rule(r) for r in rules])

    def request(self, method: str = "GET", path: str = "/v2.1/servers/detail", **env: Any) -> tuple[int, dict, bytes]:
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            got["status"], got["headers"] = status, dict(headers)

        environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "HTTP_USER_AGENT": SDK_AGENT, **env}
        body = b"".join(self.mw(environ, start_response))
        return int(got["status"].split()[0]), got["headers"], body

    def statuses(self, n: int, method: str = "GET", path: str = "/v2.1/servers/detail") -> list[int]:
        return [self.request(method, path)[0] for _ in range(n)]


def test_no_rules_file_passes_everything_through(tmp_path: Path) -> None:
    c = Client(tmp_path)
    assert c.statuses(5) == [202] * 5
    assert len(c.app.calls) == 5


def test_every_nth_request_answers_503_without_reaching_the_app(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "503", "every": 3})
    assert c.statuses(7) == [202, 202, 503, 202, 202, 503, 202]
    assert len(c.app.calls) == 5  # the faulted requests were not carried out
    code, headers, body = c.request()  # the 8th
    assert code == 202
    code, headers, body = c.request()  # the 9th
    assert code == 503
    assert "Retry-After" not in headers
    assert json.loads(body)["error"]["code"] == 503
    assert "zenops sandbox" in json.loads(body)["error"]["message"]
    assert c.logged[-1] == "zenops-sandbox api fault: nova GET /v2.1/servers/detail -> 503"


def test_429_carries_retry_after(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "429", "every": 1, "retry_after": 2})
    code, headers, _ = c.request()
    assert (code, headers["Retry-After"]) == (429, "2")
    c.rules({"fault": "429", "every": 1})
    assert c.request()[1]["Retry-After"] == "1"  # the default


def test_probability_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "502", "probability": 0.3, "seed": 7})
    first = c.statuses(200)
    c.rules({"fault": "502", "probability": 0.3, "seed": 7})  # rewritten: counters and generator start again
    assert c.statuses(200) == first
    assert 30 < first.count(502) < 90  # about 60 of 200
    c.rules({"fault": "502", "probability": 0.3, "seed": 8})
    assert c.statuses(200) != first


def test_filters_by_service_method_and_path(tmp_path: Path) -> None:
    nova, keystone = Client(tmp_path, "nova"), Client(tmp_path, "keystone")
    nova.rules({"fault": "500", "every": 1, "methods": ["post", "DELETE"], "path": "/servers"})
    assert nova.request("GET")[0] == 202
    assert nova.request("POST", "/v2.1/os-keypairs")[0] == 202
    assert nova.request("POST", "/v2.1/servers")[0] == 500
    assert nova.request("DELETE", "/v2.1/servers/x")[0] == 500
    assert keystone.request("POST", "/v3/servers")[0] == 202  # not among the default services
    neutron = Client(tmp_path, "neutron")
    assert neutron.request("POST", "/v2.0/servers")[0] == 500  # neutron is (the path is only a filter)


def test_only_sdk_clients_and_never_service_calls_by_default(tmp_path: Path) -> None:
    c = Client(tmp_path, "neutron")
    c.rules({"fault": "503", "every": 1})
    assert c.request("POST", "/v2.0/ports")[0] == 503
    assert c.request("POST", "/v2.0/ports", HTTP_USER_AGENT="python-neutronclient")[0] == 202  # Nova's own
    assert c.request("PUT", "/v2.0/ports/p", HTTP_X_SERVICE_TOKEN="t")[0] == 202  # Nova for a user
    c.rules({"fault": "503", "every": 1, "agent": ""})  # every client
    assert c.request("POST", "/v2.0/ports", HTTP_USER_AGENT="python-neutronclient")[0] == 503
    assert c.request("PUT", "/v2.0/ports/p", HTTP_X_SERVICE_TOKEN="t")[0] == 202  # still never


def test_keystone_only_when_named(tmp_path: Path) -> None:
    keystone = Client(tmp_path, "keystone")
    keystone.rules({"fault": "503", "every": 1, "services": ["keystone"]})
    assert keystone.request("POST", "/v3/auth/tokens")[0] == 503


def test_version_documents_are_left_alone_unless_asked(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "503", "every": 1})
    assert [c.request("GET", p)[0] for p in ("/", "/v2.1", "/v2.1/", "/v2.0/", "")] == [202] * 5
    c.rules({"fault": "503", "every": 1, "discovery": True})
    assert c.request("GET", "/v2.1/")[0] == 503


def test_limit_caps_the_faults(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "503", "every": 1, "limit": 2})
    assert c.statuses(4) == [503, 503, 202, 202]


def test_first_firing_rule_wins_and_clear_stops_faults(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "429", "every": 2}, {"fault": "500", "every": 1})
    assert c.statuses(4) == [500, 429, 500, 429]
    faults.write(c.file, [])
    assert c.statuses(3) == [202] * 3


def test_timeout_carries_the_request_out_then_answers_late(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.rules({"fault": "timeout", "every": 1, "delay": 45})
    code, _, body = c.request("POST", "/v2.1/servers")
    assert (code, body) == (202, b'{"ok": true}')
    assert c.app.calls == [("POST", "/v2.1/servers")]  # created: a client that gave up must find and adopt it
    assert c.slept == [45.0]


def test_drop_carries_the_request_out_then_closes_the_connection(tmp_path: Path) -> None:
    class Sock:
        how: int | None = None

        def shutdown(self, how: int) -> None:
            self.how = how

    c = Client(tmp_path)
    c.rules({"fault": "drop", "every": 1})
    sock = Sock()
    with pytest.raises(ConnectionAbortedError):
        c.request("DELETE", "/v2.0/ports/p1", **{"gunicorn.socket": sock})
    assert sock.how is not None
    assert c.app.calls == [("DELETE", "/v2.0/ports/p1")]


def test_a_broken_file_injects_nothing(tmp_path: Path) -> None:
    c = Client(tmp_path)
    c.file.parent.mkdir(parents=True)
    c.file.write_text('{"rules": [{"fault": "418", "every": 1}]}')
    assert c.statuses(2) == [202, 202]
    assert "ignoring" in c.logged[0]


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"fault": "503"}, "either every"),
        ({"fault": "503", "every": 2, "probability": 0.5}, "either every"),
        ({"fault": "504", "every": 2}, "one of 500"),
        ({"fault": "503", "every": 0}, "every 0"),
        ({"fault": "503", "probability": 1.5}, "probability 1.5"),
        ({"fault": "503", "every": 1, "services": ["swift"]}, "services"),
        ({"fault": "503", "every": 1, "path": "("}, "not a regular expression"),
        ({"fault": "503", "every": 1, "rate": 3}, "unknown field(s) rate"),
        ({"fault": "503", "every": 1, "agent": "[x"}, "agent '[x': not a regular expression"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(rule: dict[str, Any], fragment: str) -> None:
    with pytest.raises(faults.RuleError, match=re.escape(fragment)):
        faults.check_rule(rule)


def test_scripts_sandbox_fault_api_add_show_clear(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "ZENOPS_SANDBOX_DIR": str(tmp_path), "ZENOPS_SANDBOX_VENV": str(tmp_path / "v")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(REPO / "scripts" / "sandbox"), "fault", "api", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)

    out = run("add", "429", "--probability", "0.2", "--seed", "4", "--method", "post", "--retry-after", "1")
    assert out.returncode == 0, out.stderr
    assert "nova,neutron,glance  429  p=0.2 seed=4  POST  Retry-After 1  clients ~ openstacksdk" in out.stdout
    (rule,) = faults.read(tmp_path / "state" / "api-faults.json")
    assert rule["services"] == ["nova", "neutron", "glance"]
    assert run("add", "503", "--every", "5", "--service", "keystone").returncode == 0
    assert "api fault 2: keystone  503  every 5th" in run("show").stdout
    bad = run("add", "503", "--every", "0")
    assert bad.returncode == 2
    assert "every 0" in bad.stderr
    assert run("clear").stdout.strip() == "api faults: none"
    assert faults.read(tmp_path / "state" / "api-faults.json") == []
