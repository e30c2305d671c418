#!/usr/bin/python
# Copyright: zenops developers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module zenops.inference.vllm_health: prove a vLLM server container healthy, or fail with its last logs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Health gate for a vLLM OpenAI-compatible server running in a Docker container
version_added: "0.1.0"
description:
  - Waits until C(GET /health) answers 200, probing with short HTTP timeouts (vLLM opens its socket before the
    engine is ready), and fails early when the container exits or restarts.
  - Then checks that C(GET /v1/models) lists O(served_model_name), that one real completion returns tokens, and
    which platform vLLM loaded (Zen platform with zentorch, or the stock CPU platform). The log tells when it says
    so; otherwise the module asks C(vllm.platforms.current_platform) inside the same container (vLLM 0.32 decides
    the platform before its logging is set up, so its log has no such line).
  - On any failure the last O(log_lines) lines of the container's log are returned and shown in the message.
  - Never changes anything.
author:
  - zenops developers
options:
  container:
    description: Name of the server's Docker container on this host.
    type: str
    required: true
  port:
    description: Port the server listens on.
    type: int
    required: true
  address:
    description: Address to probe from this host.
    type: str
    default: 127.0.0.1
  api_key:
    description: The server's API key (sent as a bearer token). Never logged.
    type: str
  served_model_name:
    description: Model name that C(/v1/models) must list and the completion uses.
    type: str
    required: true
  expect_platform:
    description:
      - Platform the plan chose. C(any) skips the comparison. When the log does not say (the Zen line is DEBUG in
        vLLM 0.18 and 0.20), the result has C(platform=unknown) and a warning, not a failure.
    type: str
    choices: [zen, cpu, any]
    default: any
  known_platform:
    description:
      - The platform this server's health gate verified when it started (a benchmark run of zenops's rollout gate
        passes it). When the log does not say, it is taken as the answer instead of asking vLLM in the container
        (C(docker exec) of a python3 that imports torch and vLLM, seconds of the measured server's CPUs right before
        a measurement). Empty (the default) asks.
    type: str
    choices: ["", zen, cpu]
    default: ""
  timeout:
    description: Seconds to wait for C(/health) (a cold start takes about a minute on small hosts).
    type: int
    default: 900
  min_healthy:
    description:
      - Seconds the server must stay healthy after the checks passed (like Nomad's C(min_healthy_time)).
      - C(/health) is probed every 2 seconds and the container watched; one failed probe, a restart or an exit
        fails the gate. 0 (the default) ends the gate at the first pass.
    type: int
    default: 0
  probe_timeout:
    description: Seconds each HTTP probe may take before it counts as not ready.
    type: float
    default: 3
  completion_timeout:
    description: Seconds the test completion may take.
    type: float
    default: 120
  prompt:
    description: Prompt of the test completion.
    type: str
    default: The capital of France is
  max_tokens:
    description: Tokens the test completion asks for.
    type: int
    default: 8
  log_lines:
    description: Log lines returned (and shown on failure).
    type: int
    default: 40
attributes:
  check_mode:
    support: full
    description: Only reads; in check mode it reports what it would probe and probes nothing.
  diff_mode:
    support: none
    description: Nothing changes.
  platform:
    platforms: posix
    support: full
    description: Needs the C(docker) CLI on the host.
"""

EXAMPLES = r"""
- name: Prove the server healthy
  zenops.inference.vllm_health:
    container: zenops-vllm-0
    port: 8000
    api_key: "{{ lookup('ansible.builtin.file', api_key_file) }}"
    served_model_name: Qwen/Qwen3-4B
    expect_platform: zen
  no_log: false
"""

RETURN = r"""
ready_after_s:
  description: Seconds until C(/health) answered 200.
  type: float
  returned: success
healthy_probes:
  description: C(/health) probes that answered 200 during O(min_healthy) (0 when it is 0).
  type: int
  returned: success
models:
  description: Model ids C(/v1/models) listed.
  type: list
  elements: str
  returned: success
completion:
  description: The test completion's text and token count.
  type: dict
  returned: success
platform:
  description: zen, cpu or unknown, from the server log.
  type: str
  returned: always
platform_evidence:
  description: The log line that decided RV(platform).
  type: str
  returned: always
memory:
  description: Resident memory summed over the container's processes (RSS counts shared pages once per process).
  type: str
  returned: success
log_tail:
  description: The last log lines of the container.
  type: list
  elements: str
  returned: always
"""

import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.zenops.inference.plugins.module_utils.vllm_logs import (  # noqa: E402
    PROBE_CODE,
    check_platform,
    detect_platform,
    failure_hints,
    platform_from_probe,
)


class Gate:
    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.base = f"http://{self.p['address']}:{self.p['port']}"
        self.docker = module.get_bin_path("docker", required=True)

    def _docker(self, *args):
        proc = subprocess.run([self.docker, *args], capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def logs(self, tail=2000):
        _rc, out, err = self._docker("logs", "--tail", str(tail), self.p["container"])
        return (out + err).splitlines()

    def state(self):
        rc, out, err = self._docker(
            "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}", self.p["container"]
        )
        if rc != 0:
            return "missing", None, 0, err.strip()
        status, code, restarts = ([*out.split(), "", "0", "0"])[:3]
        return status, int(code), int(restarts), ""

    def memory(self):
        """RSS summed over the container's processes (docker stats reads 0 where the memory cgroup is not enabled)."""
        rc, out, _err = self._docker("top", self.p["container"], "-o", "pid,rss")
        rows = [line.split() for line in out.splitlines()[1:]] if rc == 0 else []
        values = [int(r[1]) for r in rows if len(r) > 1 and r[1].isdigit()]
        if not values:
            return ""
        return f"{sum(values) / 1024:.0f} MiB RSS ({len(values)} processes)"

    def request(self, path, body=None, timeout=None):
        headers = {"Content-Type": "application/json"}
        if self.p["api_key"]:
            headers["Authorization"] = "Bearer " + self.p["api_key"]
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        with urllib.request.urlopen(req, timeout=timeout or self.p["probe_timeout"]) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)

    def fail(self, msg, lines=None, **extra):
        lines = lines if lines is not None else self.logs()
        tail = lines[-self.p["log_lines"] :]
        platform, evidence = detect_platform(lines)
        hints = failure_hints(lines)
        text = msg
        if hints:
            text += "\nmost telling log lines:\n  " + "\n  ".join(hints)
        joined = "\n  ".join(tail)
        text += f"\nlast {len(tail)} log lines of {self.p['container']}:\n  {joined}"
        self.m.fail_json(msg=text, log_tail=tail, platform=platform, platform_evidence=evidence, **extra)

    def wait_healthy(self):
        start = time.monotonic()
        deadline = start + self.p["timeout"]
        last_error = "no answer yet"
        restarts_before = None  # restarts of earlier lives (an old OOM kill) do not fail this gate; new ones do
        while True:
            status, code, restarts, err = self.state()
            if status == "missing":
                self.fail(f"container {self.p['container']} does not exist: {err}", lines=[])
            if restarts_before is None:
                restarts_before = restarts
            restarts -= restarts_before
            if status in ("exited", "dead") or restarts > 0:
                self.fail(
                    f"container {self.p['container']} stopped before the server was ready "
                    f"(state {status}, exit code {code}, restarts {restarts})"
                )
            try:
                http_status, _ = self.request("/health")
                if http_status == 200:
                    self.restarts_at_ready = restarts + restarts_before
                    return time.monotonic() - start
                last_error = f"HTTP {http_status}"
            except urllib.error.HTTPError as e:
                last_error = f"HTTP {e.code}"
            except (urllib.error.URLError, OSError, ValueError) as e:
                last_error = str(getattr(e, "reason", e))
            if time.monotonic() >= deadline:
                self.fail(f"{self.base}: /health did not answer 200 within {self.p['timeout']}s (last: {last_error})")
            time.sleep(2)

    def stay_healthy(self, restarts_before):
        """Probe /health and the container for min_healthy seconds; fail on the first bad sign."""
        end = time.monotonic() + self.p["min_healthy"]
        probes = 0
        while time.monotonic() < end:
            status, code, restarts, _err = self.state()
            if status != "running" or restarts > restarts_before:
                self.fail(
                    f"container {self.p['container']} did not stay up for min_healthy={self.p['min_healthy']}s "
                    f"(state {status}, exit code {code}, restarts {restarts - restarts_before})"
                )
            try:
                http_status, _ = self.request("/health")
            except urllib.error.HTTPError as e:
                http_status = e.code
            except (urllib.error.URLError, OSError, ValueError) as e:
                self.fail(f"{self.base}/health failed during the minimum healthy time: {getattr(e, 'reason', e)}")
            if http_status != 200:
                self.fail(f"{self.base}/health answered HTTP {http_status} during the minimum healthy time")
            probes += 1
            time.sleep(min(2, max(0, end - time.monotonic())))
        return probes

    def run(self):
        if self.m.check_mode:
            self.m.exit_json(
                changed=False,
                msg="check mode: would probe " + self.base,
                platform="unknown",
                platform_evidence="",
                log_tail=[],
            )
        ready = self.wait_healthy()
        name = self.p["served_model_name"]
        try:
            _, listing = self.request("/v1/models", timeout=10)
        except urllib.error.HTTPError as e:
            self.fail(f"{self.base}/v1/models answered HTTP {e.code}" + (" (wrong API key?)" if e.code == 401 else ""))
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.fail(f"{self.base}/v1/models failed: {e}")
        models = [m.get("id") for m in (listing or {}).get("data", [])]
        if name not in models:
            self.fail(f"{self.base}/v1/models lists {models}, not {name}")
        body = {"model": name, "prompt": self.p["prompt"], "max_tokens": self.p["max_tokens"], "temperature": 0}
        t0 = time.monotonic()
        try:
            _, answer = self.request("/v1/completions", body, timeout=self.p["completion_timeout"])
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            self.fail(f"{self.base}/v1/completions answered HTTP {e.code}: {detail}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            self.fail(f"{self.base}/v1/completions failed: {e}")
        tokens = ((answer or {}).get("usage") or {}).get("completion_tokens") or 0
        choices = (answer or {}).get("choices") or []
        if not choices or tokens < 1:
            self.fail(f"{self.base}/v1/completions returned no tokens: {json.dumps(answer)[:300]}")
        completion = {"text": choices[0].get("text", ""), "tokens": tokens, "seconds": round(time.monotonic() - t0, 2)}

        lines = self.logs()
        platform, evidence = detect_platform(lines)
        if platform == "unknown" and self.p["known_platform"]:
            platform = self.p["known_platform"]
            evidence = "as its health gate verified when the server started (known_platform; not asked again)"
        elif platform == "unknown":
            # the log does not say (vLLM 0.32 picks the platform before logging is set up): ask vLLM itself, in the
            # same container, with the same environment, CPU flags and installed packages
            rc, out, err = self._docker("exec", self.p["container"], "python3", "-c", PROBE_CODE)
            platform, evidence = platform_from_probe(out)
            if rc != 0:
                evidence = "platform probe failed: {}".format((err.strip().splitlines() or ["?"])[-1])
        problem = check_platform(self.p["expect_platform"], platform)
        if problem:
            self.fail(problem + f" (log: {evidence})", lines=lines)
        if platform == "unknown" and self.p["expect_platform"] != "any":
            self.m.warn(
                "{}: the log does not say which platform vLLM loaded (expected {})".format(
                    self.p["container"], self.p["expect_platform"]
                )
            )
        healthy_probes = self.stay_healthy(self.restarts_at_ready) if self.p["min_healthy"] > 0 else 0
        memory = self.memory()
        self.m.exit_json(
            changed=False,
            ready_after_s=round(ready, 1),
            healthy_probes=healthy_probes,
            models=models,
            completion=completion,
            platform=platform,
            platform_evidence=evidence,
            memory=memory,
            log_tail=lines[-self.p["log_lines"] :],
        )


def main():
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "address": {"type": "str", "default": "127.0.0.1"},
            "api_key": {"type": "str", "no_log": True},
            "served_model_name": {"type": "str", "required": True},
            "expect_platform": {"type": "str", "choices": ["zen", "cpu", "any"], "default": "any"},
            "known_platform": {"type": "str", "choices": ["", "zen", "cpu"], "default": ""},
            "timeout": {"type": "int", "default": 900},
            "min_healthy": {"type": "int", "default": 0},
            "probe_timeout": {"type": "float", "default": 3},
            "completion_timeout": {"type": "float", "default": 120},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_tokens": {"type": "int", "default": 8},
            "log_lines": {"type": "int", "default": 40},
        },
        supports_check_mode=True,
    )
    Gate(module).run()


if __name__ == "__main__":
    main()
