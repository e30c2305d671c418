"""`zenops rollout` end to end on one fleet behind its gateway (2 hosts; 3 with ZENOPS_E2E_FLEET_SIZE=3: there
test 1's batch after the canary holds two hosts at once), all real: systemd container hosts over SSH,
Docker inside, the engine image from the machine's image cache (pip route), real vLLM servers with tiny models made
offline, real HAProxy from Debian's packages, Prometheus. The fleet is shared by the tests of this module, in order:

1. rolling from model A to model B while a bounded load runs through the gateway (the canary, then a batch of the
   others: one host, or two at once with 3 hosts), interrupted (Ctrl-C) after the canary batch and resumed by the same
   command: zero failed requests, every host on B, the gateway serving them all, none left drained; then (1b) the
   metrics follow the new servers and `zenops top` reads them under load, and (1c) live traffic that saturates the
   fleet pauses a rollout (exit 16) before it changes anything;
2. the perimeter: every route the running servers expose (their /openapi.json), called without the key directly at
   each server and through the gateway, with a valid body: nothing but /health answers 2xx (the server's middleware
   answers 401; the gateway 404 off its allowlist, 401 on it); with the key the API works on both;
3. (`scripts/test --full` only) a release whose servers cannot start (a corrupt model: config fine, weights
   truncated) fails the health gate on the canary, is reverted, exit 15 names the health gate; zero failed requests;
4. the performance gates, last, on a quiet machine: scripts/test runs this module first, beside the lint and unit
   tiers and then beside its other lanes, and these tests wait until every other lane has ended (beside the
   campaign's servers CI17 measured a baseline spread of 87% and a control drift of x0.39: no verdict possible). The
   devhosts are containers on this machine: their facts show one kernel, so the rollout measures them one after
   another. (4b) A release that changes nothing (model A <-> B) passes its gate with the default limits (once; twice
   with --full); (4) a release that starts but is slower (--max-num-seqs 1 under a concurrency-4 gate) is
   stopped by the performance gate with its default limits and reverted, the message showing baseline vs new tok/s,
   every server back in rotation (the gate both ways in the landing run);
5. `down` takes the deployment and its metrics away.

Figures (load counts, wall time per batch) go to .cache/e2e/rollout.json for the record.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, lane_cpus, wait_for_a_quiet_machine
from tests.e2e.bounded import run_bounded
from zenops import devhost
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
REPORT = REPO / ".cache" / "e2e" / "rollout.json"
# every host of the fleet is a server lifetime in each scenario and a baseline measured one host after another: two
# by default (the canary, then a batch of one). ZENOPS_E2E_FLEET_SIZE=3 makes test 1's second batch two hosts at once:
# that variant passed in 7051 s on a 2-core AVX2 EPYC (stop 36), which does not fit a session beside `--full`'s other
# lanes, so --full keeps two hosts unless asked
FULL = os.environ.get("ZENOPS_E2E_FULL") == "1"
FLEET_SIZE = int(os.environ.get("ZENOPS_E2E_FLEET_SIZE", "2"))
SERVED = "tiny"  # one served model name for every release: clients keep working across a model change
FIGURES: dict[str, Any] = {}
# No torch.compile: what is tested here is the rollout, not the engine's speed (the serving e2e keeps the default).
# A tiny-model server then starts in 28 s instead of 50 s on an idle 2-core machine (one docker run each, measured),
# and every rollout batch is one start on the core the other hosts' servers share. A rollout keeps them (the record).
ENGINE_ARGS = ("--engine-arg=--enforce-eager",)
# Tests 4 and 4b's bound on one gated rollout (a hang guard, not a timing): a baseline of every host, then one or two
# server replacements and their gates. On a 2-vCPU Intel Xeon test 4 took 646 s in a `--full` run and did not end
# within 1800 s in the landing run of 2026-11-30 (its last event: a health gate): that VM's speed varies about
# 3x from run to run (the unit tier: 306 s, 513 s, 876 s).
ROLLOUT_BOUND_S = 2700


@dataclass
class Fleet:
    inventory: Path
    hosts: list[devhost.DevHost]
    env: dict[str, str]
    models: dict[str, Path]
    key: str = ""
    metrics_password: str = ""  # node_exporter's basic auth password (not the key)
    url: str = ""
    down: bool = False  # test 5's `down` passed: the fixture's teardown has no deployment to remove


def json_lines(out: str) -> list[dict[str, Any]]:
    """The objects zenops --json printed, one per line."""
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def run_zenops(fleet: Fleet, *args: str, rc: int | None = 0, timeout: float = 1800) -> tuple[int, dict[str, Any], str]:
    try:
        proc = run_bounded([ZENOPS, "--json", *args], env=fleet.env, timeout=timeout)
    except subprocess.TimeoutExpired as e:  # where it was: the last plays and tasks it reported
        out = e.output or ""  # run_bounded reads text
        where = [f"{x.get('play', '')} / {x.get('task', '')}" for x in json_lines(out) if x.get("type") == "event"]
        pytest.fail(f"zenops {args[0]} did not end within {timeout:.0f}s; its last steps: {where[-8:]}")
    lines = json_lines(proc.stdout)
    last = lines[-1] if lines else {}
    if rc is not None:
        assert proc.returncode == rc, f"exit {proc.returncode}: {json.dumps(last)[-3000:]}\n{proc.stderr[-3000:]}"
    notes = "\n".join(str(x.get("message", "")) for x in lines if x.get("type") == "note")
    return proc.returncode, last, notes


@dataclass
class Load:
    """A bounded client: ``workers`` threads sending short completions to the gateway until stopped, each pausing
    ``pause`` seconds between requests: about one request every 2.5 s, so a drain or a switch of the gateway (6-10 s)
    still sees two or more. Not denser: the fleet's hosts share this machine's last CPU (conftest.lane_cpus: every
    host's plan binds it), and a vLLM worker busy-polls its input for a second after each request (vllm's shm_broadcast
    SpinCondition, busy_loop_s=1, no setting): at one request every second (the former 2 s pause) each loaded server
    kept a core about 80% busy doing nothing (CI7 sampled 129 CPU-s of VLLM::Worker in 200 s), which slowed every
    other CI lane and starved the server being replaced on that core."""

    url: str
    key: str
    workers: int = 2
    pause: float = 5.0
    max_tokens: int = 8
    timeout: float = 120.0
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    log: list[tuple[float, float, bool]] = field(default_factory=list)  # each request's (sent, ended, ok), epoch s
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _one(self) -> None:
        sent = time.time()
        body = json.dumps(
            {"model": SERVED, "prompt": "The fleet", "max_tokens": self.max_tokens, "temperature": 0}
        ).encode()
        req = urllib.request.Request(
            f"{self.url}/completions",
            data=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
            good = bool(data.get("choices"))
            err = "" if good else f"no choices: {str(data)[:200]}"
        except (urllib.error.URLError, OSError, ValueError) as e:
            good, err = False, f"{type(e).__name__}: {getattr(e, 'code', '')} {e}"[:300]
        with self._lock:
            self.log.append((sent, time.time(), good))
            if good:
                self.ok += 1
            else:
                self.failed += 1
                self.errors.append(f"{time.strftime('%H:%M:%S')} {err}")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._one()
            self._stop.wait(self.pause)

    def __enter__(self) -> Load:
        for _ in range(self.workers):
            t = threading.Thread(target=self._loop, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 30)

    def summary(self) -> dict[str, Any]:
        return {"requests": self.ok + self.failed, "ok": self.ok, "failed": self.failed, "errors": self.errors[:5]}


class Reader:
    """A zenops process whose stdout (JSON lines) and stderr are read by threads as they come: a pipe nobody reads
    fills up (64 KiB) and blocks the writer, which would look like a rollout that never stops."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args, self.env = args, env
        self.lines: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Reader:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.proc.poll() is None:  # a failed assertion above: do not leave a rollout running into the next test
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for t in self._threads:
            t.join(10)

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = json.loads(raw) if raw.startswith("{") else {"type": "text", "message": raw}
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw)

    def wait_for(self, match: Any, timeout: float = 1800) -> dict[str, Any] | None:
        """The first stdout line matching, or None once the process has ended without one."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while time.monotonic() < deadline:
                for line in self.lines[seen:]:
                    if match(line):
                        return line
                seen = len(self.lines)
                if self.proc.poll() is not None and not self._threads[0].is_alive():
                    return None
                self._cond.wait(1)
        return None

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"zenops did not end within {timeout:.0f}s; its last output: {self.tail()}")

    def tail(self) -> str:
        out = [json.dumps(x)[:400] for x in self.lines[-15:]]
        return "\nstdout: " + "\n".join(out) + "\nstderr: " + "".join(self.stderr[-40:])[-3000:]


def in_host(container: str, *cmd: str) -> str:
    return subprocess.run(["docker", "exec", container, *cmd], capture_output=True, text=True, check=True).stdout


def served_models(fleet: Fleet) -> dict[str, str]:
    """Host -> the model directory its vLLM server was started with (the container command's first word)."""
    out = {}
    for h in fleet.hosts:
        inspect = json.loads(in_host(h.container, "docker", "inspect", "zenops-vllm-0"))[0]
        cmd = inspect["Config"]["Cmd"] or ["?"]  # the entrypoint is `vllm serve`; the command starts with the model
        out[h.name] = Path(cmd[0]).name
        assert inspect["State"]["Running"], (h.name, inspect["State"])
    return out


def backends(fleet: Fleet) -> list[dict[str, Any]]:
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory))
    return list(status["backends"])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if k not in ("ZENOPS_CONFIG", "ZENOPS_COLLECTION_ROOT")}
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        env[var] = str(home / sub)
    state = home / "state" / "zenops"
    models = {
        "a": generate(home / "models" / "tiny-a", seed=1).path,
        "b": generate(home / "models" / "tiny-b", seed=2).path,
    }
    # a release that cannot start: its config is fine (the plan passes), its weights are cut short
    broken = home / "models" / "tiny-broken"
    shutil.copytree(models["b"], broken)
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:4096])
    models["broken"] = broken
    name = f"fl{secrets.token_hex(2)}"
    inventory, hosts = devhost.up(state, name, count=FLEET_SIZE, cpus=lane_cpus())
    f = Fleet(inventory, hosts, env, models)
    t0 = time.monotonic()
    try:
        _rc, up, _notes = run_zenops(
            f,
            "up", "-i", str(inventory), "--model", str(models["a"]), "--served-model-name", SERVED,
            "--image-source", "pip", "--base-image", "zenops/bookworm-slim:latest",
            "--base-image-archive", str(BASE_ARCHIVE), "--gateway", "on", "--metrics", "on", *ENGINE_ARGS,
            # the health gate's bound (a hang guard; the default is 900 s): this `up` runs beside the unit tier, its two
            # servers on the machine's last CPU. In a landing run on a 2-vCPU Intel Xeon (2026-11-30) neither answered
            # /health within 900 s: vLLM's model-inspection subprocess was still importing after 460 s at 18% of that
            # CPU. Alone on that CPU the same server is ready in 46 s, two at once beside two CPU hogs in 90 s.
            "--health-timeout", "1800",
            timeout=3600,  # a cold image cache builds the engine image here: on a fresh Intel Xeon VM (2 vCPUs)
            # beside --full's lanes, that build alone took 1780 s in the serving e2e and this `up` passed 1800 s
        )  # fmt: skip
        FIGURES["up_s"] = round(time.monotonic() - t0, 1)
        assert up["gateway"], up
        assert up["services"]["metrics"]["host"] == up["gateway"]["host"], up["services"]
        assert len(up["gateway"]["backends"]) == FLEET_SIZE, up["gateway"]
        f.key = Path(up["api_key_file"]).read_text().strip()
        f.metrics_password = Path(up["services"]["metrics"]["password_file"]).read_text().strip()
        f.url = up["gateway"]["url"]
        yield f
    finally:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(FIGURES, indent=2))
        if not f.down:  # a failed or skipped test 5 (or one before it): the deployment is still there
            subprocess.run(
                [ZENOPS, "down", "-i", str(inventory)], env=env, capture_output=True, check=False, timeout=600
            )  # fmt: skip
        devhost.down(state, name)


def other_model(fleet: Fleet) -> str:
    """The release the fleet does not serve: tiny-a <-> tiny-b (one architecture, other weights: the same speed)."""
    now = set(served_models(fleet).values())
    assert len(now) == 1, now
    return "b" if now == {"tiny-a"} else "a"


def test_1_rollout_under_load_interrupted_then_resumed_fails_no_request(fleet: Fleet) -> None:
    """To the other model host by host while a load runs through the gateway; Ctrl-C after the canary batch, then
    the same command again: it resumes and finishes; zero failed requests all along; nothing left drained."""
    target = other_model(fleet)
    args = [
        ZENOPS, "--json", "rollout", "-i", str(fleet.inventory), "--model", str(fleet.models[target]),
        "--min-healthy", "5", "--no-perf-gate",  # here: requests and resumption (the gate: tests 4 and 4b)
        "--batch", "2",  # after the canary, the others at once (two with --full): the canary alone serves meanwhile
    ]  # fmt: skip
    t0 = time.monotonic()
    with Load(fleet.url, fleet.key) as load:
        time.sleep(3)
        with Reader(args, fleet.env) as run:
            interrupted_after = run.wait_for(
                lambda line: line.get("type") == "note" and " done in " in str(line.get("message"))
            )
            assert interrupted_after, f"the rollout ended before a batch was done: {run.tail()}"
            time.sleep(8)  # into the next batch: its server drained, being replaced
            run.proc.send_signal(signal.SIGINT)
            rc = run.wait(timeout=600)
        assert rc == 130, (rc, run.tail())
        t1 = time.monotonic()
        _rc, result, notes = run_zenops(fleet, *args[2:])
        time.sleep(2)
    FIGURES["rollout_a_to_b_interrupted_and_resumed"] = {
        "load": load.summary(),
        "wall_s": round(time.monotonic() - t0, 1),
        "resume_wall_s": round(time.monotonic() - t1, 1),
        "interrupted_after": interrupted_after["message"],
        "batches_s": [b["wall_s"] for b in result["batch_states"]],
        "notes": notes.splitlines()[-12:],
    }
    assert "resuming" in notes, notes
    assert load.failed == 0, load.summary()
    assert load.ok > 10, load.summary()
    assert result["status"] == "done", result
    assert set(served_models(fleet).values()) == {f"tiny-{target}"}
    states = backends(fleet)
    assert len(states) == FLEET_SIZE, states
    assert all(b["status"].startswith("UP") for b in states), states  # none left in DRAIN
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory), "--history", "50")
    assert "finished" in [h["event"] for h in status["history"]], status["history"]
    assert status["lock"] is None


def prometheus(fleet: Fleet, query: str = "") -> dict[str, Any]:
    """Ask the deployment's Prometheus on its host (it listens on that host's loopback only): its active targets, or
    an instant query."""
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory))
    host = status["services"]["metrics"]["state"]["host"]
    container = next(h.container for h in fleet.hosts if h.container == f"zenops-dev-{host}")  # devhost's naming
    path = f"/api/v1/query?query={urllib.parse.quote(query)}" if query else "/api/v1/targets?state=active"
    return dict(json.loads(in_host(container, "curl", "-fsS", f"http://127.0.0.1:9090{path}"))["data"])


def test_1b_metrics_follow_the_rollout_and_top_reads_them_under_load(fleet: Fleet) -> None:
    """After test 1's rollout (new servers on every host): Prometheus scrapes exactly the servers that run now (every
    target UP, none stale: the old ports are gone), every host's node_exporter and the gateway; under a bounded load
    through the gateway, `zenops top --json` (from Prometheus) shows generated tok/s and running requests on every
    instance."""
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory))
    endpoints = status["serving"]["endpoints"]
    want_vllm = sorted((h, str(ep["instance"]), int(ep["port"])) for h, eps in endpoints.items() for ep in eps)
    deadline = time.monotonic() + 90
    while True:  # Prometheus follows its target files within seconds, and scrapes every 10 s
        active = prometheus(fleet)["activeTargets"]
        vllm = sorted(
            (
                t["labels"]["zenops_host"],
                t["labels"]["zenops_instance"],
                int(t["scrapeUrl"].split(":")[2].split("/")[0]),
            )
            for t in active
            if t["labels"]["job"] == "vllm"
        )
        if (vllm == want_vllm and all(t["health"] == "up" for t in active)) or time.monotonic() > deadline:
            break
        time.sleep(5)
    jobs = sorted(t["labels"]["job"] for t in active)
    assert vllm == want_vllm, (vllm, want_vllm)  # the servers now: no stale target of the old ones
    assert jobs == sorted(["haproxy", "prometheus"] + ["node"] * FLEET_SIZE + ["vllm"] * len(want_vllm)), jobs
    assert {t["health"] for t in active} == {"up"}, [(t["scrapeUrl"], t["health"], t["lastError"]) for t in active]
    seen: list[dict[str, Any]] = []
    with Load(fleet.url, fleet.key, workers=2 * FLEET_SIZE, pause=0.0, max_tokens=96) as load:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(10)
            _rc, top, _n = run_zenops(fleet, "top", "-i", str(fleet.inventory))
            seen.append(top)
            rows = top["instances"]
            if all((r["generated_tok_s"] or 0) > 0 and (r["running"] or 0) > 0 for r in rows):
                break
    FIGURES["metrics_top"] = {"load": load.summary(), "reads": len(seen), "last": seen[-1]["instances"]}
    assert load.failed == 0, load.summary()
    assert seen[-1]["source"] == "prometheus", seen[-1]
    rows = seen[-1]["instances"]
    assert len(rows) == len(want_vllm), rows
    for r in rows:
        assert r["error"] is None, r
        assert r["generated_tok_s"] > 0, rows
        assert r["running"] > 0, rows
        assert r["host_cpu_pct"] is not None, r
        assert r["host_mem_pct"] is not None, r
    # samples in Prometheus for every vLLM instance and every host
    generated = prometheus(fleet, "vllm:generation_tokens_total")["result"]
    assert sorted((x["metric"]["zenops_host"], x["metric"]["zenops_instance"]) for x in generated) == [
        (h, i) for h, i, _p in want_vllm
    ], generated
    memory = prometheus(fleet, "node_memory_MemAvailable_bytes")["result"]
    assert sorted(x["metric"]["zenops_host"] for x in memory) == sorted(endpoints), memory


def call(url: str, method: str, key: str | None = None, auth: str | None = None) -> int:
    """The HTTP status of one request; a POST carries a valid completion body, so that a route that does not check
    the key would answer 2xx, not 422."""
    body = json.dumps({"model": SERVED, "prompt": "hi", "max_tokens": 1}).encode() if method == "POST" else None
    headers = {"Content-Type": "application/json"}
    if auth is not None or key is not None:
        headers["Authorization"] = auth if auth is not None else f"Bearer {key}"
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_1c_a_fleet_saturated_by_live_traffic_pauses_the_rollout_and_fails_no_request(fleet: Fleet) -> None:
    """Live traffic far beyond the servers' seats (requests queue at every server): the gate's first check cannot get
    an answer within --gate-answer-timeout, so the rollout pauses with exit 16 and says the fleet is too busy to
    measure, before anything changed; no request of the live load fails, no server is left drained; `--abort` then
    closes the paused rollout (it had changed nothing)."""
    before = served_models(fleet)
    target = other_model(fleet)
    args = ("rollout", "-i", str(fleet.inventory), "--model", str(fleet.models[target]), "--min-healthy", "2")
    server_args = json.loads(in_host(fleet.hosts[0].container, "docker", "inspect", "zenops-vllm-0"))[0]["Args"]
    seats = int(server_args[server_args.index("--max-num-seqs") + 1])
    # 2 requests per seat of every server, 256 tokens each: a wave queues behind the running one at every server, so
    # the gate's check (a completion sent to each server) waits a whole wave for a seat: seconds, longer than its 1 s.
    # Not deeper: a request sent late waits for every wave ahead of it, and with 4 waves of 512 tokens on a 2-core
    # AVX2 machine beside the other CI lanes that passed the client's 120 s (the landing of stop 35: 10 of 50
    # requests timed out in the client, none failed at the servers). The client waits up to 600 s: this test
    # checks that the servers fail no request, not how fast a saturated machine answers.
    with Load(fleet.url, fleet.key, workers=2 * seats * FLEET_SIZE, pause=0.0, max_tokens=256, timeout=600.0) as load:
        time.sleep(10)  # the queues fill
        t0 = time.monotonic()
        _rc, err, _notes = run_zenops(fleet, *args, "--gate-answer-timeout", "1", rc=16)
        paused_after = round(time.monotonic() - t0, 1)
    FIGURES["rollout_saturated"] = {
        "load": load.summary(), "paused_after_s": paused_after, "message": err.get("message", "")[:500],
    }  # fmt: skip
    assert "too busy to measure the baseline" in err["message"], err
    assert load.failed == 0, load.summary()
    assert load.ok > 0, load.summary()
    assert served_models(fleet) == before  # nothing changed
    states = backends(fleet)
    assert all(b["status"].startswith("UP") for b in states), states  # nothing drained
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory))
    assert status["rollout"]["status"] == "paused", status["rollout"]
    run_zenops(fleet, *args, "--abort")
    _rc, status, _n = run_zenops(fleet, "status", "-i", str(fleet.inventory))
    assert not status["rollout"] or status["rollout"]["status"] != "paused", status["rollout"]
    assert served_models(fleet) == before


def test_2_no_route_answers_without_the_key_directly_or_through_the_gateway(fleet: Fleet) -> None:
    gateway = fleet.url.removesuffix("/v1")
    servers = [f"http://{h.address}:8000" for h in fleet.hosts]
    assert call(f"{servers[0]}/openapi.json", "GET") == 401
    with urllib.request.urlopen(
        urllib.request.Request(f"{servers[0]}/openapi.json", headers={"Authorization": f"Bearer {fleet.key}"}),
        timeout=60,
    ) as resp:
        spec = json.loads(resp.read())
    routes = sorted(
        (path.replace("{", "").replace("}", ""), method.upper())
        for path, ops in spec["paths"].items()
        for method in ops
        if method.upper() in ("GET", "POST", "PUT", "DELETE", "PATCH")
    )
    assert {("/invocations", "POST"), ("/v1/completions", "POST")} <= set(routes), routes
    seen: dict[str, list[tuple[str, str, int]]] = {"server": [], "gateway": []}
    for path, method in routes:
        for where, base in (("server", servers[len(seen["server"]) % len(servers)]), ("gateway", gateway)):
            seen[where].append((path, method, call(base + path, method)))
    opened = {w: [r for r in rows if 200 <= r[2] < 300] for w, rows in seen.items()}
    FIGURES["perimeter"] = {
        "routes": len(routes),
        "opened_without_key": opened,
        "gateway_statuses": sorted({r[2] for r in seen["gateway"]}),
    }
    assert opened == {"server": [("/health", "GET", 200)], "gateway": [("/health", "GET", 200)]}, opened
    assert {r[2] for r in seen["server"] if r[0] != "/health"} == {401}, seen["server"]
    allowed = {"/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/responses"}
    assert {r[2] for r in seen["gateway"] if r[0] in allowed} == {401}, seen["gateway"]
    assert {r[2] for r in seen["gateway"] if r[0] not in allowed | {"/health"}} == {404}, seen["gateway"]
    # a wrong key and a wrong scheme are refused at both; the key opens the API at both
    for base in (servers[-1], gateway):
        assert call(f"{base}/v1/models", "GET", key=fleet.key + "x") == 401
        assert call(f"{base}/v1/models", "GET", auth=f"Basic {fleet.key}") == 401
        assert call(f"{base}/v1/models", "GET", key=fleet.key) == 200
        assert call(f"{base}/v1/completions", "POST", key=fleet.key) == 200
    assert call(f"{servers[-1]}/invocations", "POST", key=fleet.key) == 200  # the server's own routes, with the key
    assert call(f"{gateway}/invocations", "POST", key=fleet.key) == 404  # never through the gateway
    # the metrics open no door: node_exporter answers only with its own password (basic auth), never with the API
    # key; Prometheus and HAProxy's exporter listen on their host's loopback only
    assert fleet.metrics_password not in ("", fleet.key)
    for h in fleet.hosts:
        assert call(f"http://{h.address}:9100/metrics", "GET") == 401
        assert call(f"http://{h.address}:9100/metrics", "GET", auth=basic("zenops", fleet.key)) == 401
        assert call(f"http://{h.address}:9100/metrics", "GET", auth=basic("zenops", fleet.metrics_password)) == 200
        for port in (9090, 8405):
            with pytest.raises(urllib.error.URLError):
                call(f"http://{h.address}:{port}/metrics", "GET")


@pytest.mark.full  # a revert is test 4's (the performance gate); this is the health gate's variant
def test_3_release_that_cannot_start_fails_the_health_gate_on_the_canary_and_is_reverted(fleet: Fleet) -> None:
    before = served_models(fleet)
    with Load(fleet.url, fleet.key) as load:
        _rc, err, _notes = run_zenops(
            fleet, "rollout", "-i", str(fleet.inventory), "--model", str(fleet.models["broken"]),
            "--no-perf-gate", "--health-timeout", "120", rc=15,
        )  # fmt: skip
        time.sleep(2)
    FIGURES["rollout_broken"] = {"load": load.summary(), "message": err.get("message", "")[:600]}
    assert "health gate failed on" in err["message"], err
    assert "Reverted" in err["message"], err
    assert load.failed == 0, load.summary()
    assert served_models(fleet) == before  # the canary is back on B, the others were never touched
    states = backends(fleet)
    assert all(b["status"].startswith("UP") for b in states), states


def test_4_slower_release_is_stopped_by_the_performance_gate_and_reverted(fleet: Fleet) -> None:
    """(The landing run's gate both ways: this release must fail, test 4b's must pass; an always-pass or an inverted
    gate fails one of them.) Once
    the other lanes of scripts/test have ended (a quiet machine): max-num-seqs 1 under a concurrency-4 gate starts
    fine (the health gate passes) but queues 3 of every 4 requests: the performance gate, with its default limits and
    sizing (runs of at least 10 s, from a first run's pace), fails the canary against the baseline the rollout measured
    before it changed anything, reverts it, and exit 15 names the gate with the figures behind it."""
    FIGURES["waited_for_a_quiet_machine_s"] = round(wait_for_a_quiet_machine())
    before = served_models(fleet)
    t0 = time.monotonic()
    args = [
        ZENOPS, "--json", "rollout", "-i", str(fleet.inventory), "--max-num-seqs", "1", "--gate-concurrency", "4",
        "--min-healthy", "2",
    ]  # fmt: skip
    with Reader(args, fleet.env) as run:
        rc = run.wait(timeout=ROLLOUT_BOUND_S)
    assert rc == 15, (rc, run.tail())
    err = run.lines[-1]
    notes = "\n".join(str(x.get("message", "")) for x in run.lines if x.get("type") == "note")
    FIGURES["rollout_slow"] = {
        "wall_s": round(time.monotonic() - t0, 1),
        "message": err.get("message", "")[:800],
        "notes": notes.splitlines()[-10:],
    }
    assert "one machine (the same kernel): measured one after another" in notes, notes
    assert "each gate run has" in notes or "it counts" in notes, notes  # the runs sized by time
    assert "performance gate failed on" in err["message"], err
    assert "vs baseline" in err["message"], err  # the figures behind the verdict
    assert "Reverted" in err["message"], err
    assert served_models(fleet) == before
    # the canary is back: its server has the previous max-num-seqs
    canary = fleet.hosts[0]
    server_args = json.loads(in_host(canary.container, "docker", "inspect", "zenops-vllm-0"))[0]["Args"]
    assert server_args[server_args.index("--max-num-seqs") + 1] != "1", server_args
    states = backends(fleet)
    assert all(b["status"].startswith("UP") for b in states), states


def test_4b_a_release_that_changes_nothing_passes_its_gate_with_the_default_limits(fleet: Fleet) -> None:
    """Once the other lanes of scripts/test have ended (a quiet machine): to the other model (the same architecture
    and size, other random weights: no change in speed) with the performance gate's default limits; every batch's gate
    passes and the rollout finishes. `scripts/test --full`: then back, a second no-change release that must pass too
    (the landing run has one: each is a baseline and two gated batches, about 9 minutes on a 2-core AVX2 machine)."""
    waited = wait_for_a_quiet_machine()
    FIGURES.setdefault("waited_for_a_quiet_machine_s", round(waited))
    gates: list[dict[str, Any]] = []
    try:
        for k in range(2 if FULL else 1):
            target = other_model(fleet)
            t0 = time.monotonic()
            _rc, result, notes = run_zenops(
                fleet, "rollout", "-i", str(fleet.inventory), "--model", str(fleet.models[target]),
                "--min-healthy", "2", timeout=ROLLOUT_BOUND_S,
            )  # fmt: skip
            verdicts = [v for b in result["batch_states"] for v in b["verdicts"]]
            gates.append(
                {
                    "release": f"tiny-{target}",
                    "wall_s": round(time.monotonic() - t0, 1),
                    "baseline_spread": result.get("baseline_spread"),
                    "gate_prompts": result.get("gate_prompts"),
                    "baseline_runs": result.get("baseline_all"),
                    "baseline_s": result.get("baseline_s"),
                    "batches": [
                        {"hosts": b["hosts"], "wall_s": b["wall_s"], "phases": b["phases"]}
                        for b in result["batch_states"]
                    ],
                    "verdicts": [
                        {
                            k2: v["figures"].get(k2)
                            for k2 in ("new_tok_s", "expected_tok_s", "tok_s_change", "spread", "control", "drift")
                        }
                        | {"outcome": v["outcome"]}
                        for v in verdicts
                    ],
                    "notes": notes.splitlines()[-8:],
                }
            )
            assert result["status"] == "done", (k, result.get("message"), notes)
            assert verdicts, (k, result)
            assert all(v["outcome"] == "pass" for v in verdicts), (k, verdicts)
            # each batch measured with a control: batch 1 with the untouched host, the last (none left) with batch 1's
            # host, its release passed (a machine that slowed since the baseline is not read as a slower release)
            first, last = result["batch_states"][0]["hosts"], result["batch_states"][-1]["hosts"]
            controls = [str(v["figures"].get("control") or "").rsplit("-", 1)[0] for v in verdicts]
            assert controls == [last[0], first[0]], (k, [v["figures"] for v in verdicts])
            assert set(served_models(fleet).values()) == {f"tiny-{target}"}
    finally:
        FIGURES["rollout_no_change"] = gates
    states = backends(fleet)
    assert all(b["status"].startswith("UP") for b in states), states


def test_5_down_removes_prometheus_and_node_exporter_from_every_host(fleet: Fleet) -> None:
    """Last: `down` takes the deployment away, its metrics with it (the fixture then only removes the devhosts)."""
    run_zenops(fleet, "down", "-i", str(fleet.inventory))
    fleet.down = True
    for h in fleet.hosts:
        units = in_host(h.container, "systemctl", "list-units", "--all", "--no-legend", "prometheus*").strip()
        assert units == "", (h.name, units)
        packages = subprocess.run(
            ["docker", "exec", h.container, "dpkg-query", "-W", "-f", "${Package} ${Status}\n", "prometheus*"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        assert " installed" not in packages, (h.name, packages)
        assert in_host(h.container, "ls", "/etc/prometheus").strip() in ("",), h.name
