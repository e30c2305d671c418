"""llama.cpp as a peer engine in campaigns: the `variants: engines` preset, the llama.cpp cells of quantized models
left out by the plan, the serve step that puts llama.cpp's server in place of zenops's vLLM servers (its playbook's
extra vars from real plans of fixture hosts; Ansible is a TEST DOUBLE here), the bench run that drives those servers
with the same client, and the report's engine and weights of each row. The role's own tasks are Molecule's
(llamacpp_server) and tests/runner/test_bench_llamacpp.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_bench import KEY, _served_in, bench_playbook, inspect_data
from tests.unit.test_campaign_cli import result_of
from tests.unit.test_planner import fixture
from zenops import llamacpp, llamacpp_deploy, llamacpp_serve
from zenops import serve as serve_lib
from zenops.bench import client as bench_client
from zenops.bench import run as bench_run
from zenops.campaign import engines
from zenops.campaign.plan import Cell
from zenops.campaign.report import CellOutcome, build_report
from zenops.campaign.spec import load_spec
from zenops.config import Config
from zenops.context import RunContext
from zenops.deployment.identity import DeploymentId
from zenops.deployment.lifecycle import Deployment
from zenops.deployment.store import Store
from zenops.errors import RunFailedError, UsageError
from zenops.report import load as load_results
from zenops.runner import HostStats, RunResult, RunSpec, check_no_secrets
from zenops.tinymodel import generate

# --- the preset and the plan's left-out cells ------------------------------------------------------------------


def test_the_engines_preset_is_zenops_and_llamacpp_in_each_gguf_format(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("name: e\ncloud: sandbox\nflavors: [f]\nmodels: [m]\nvariants: engines\n")
    spec = load_spec(f)
    assert [(v.name, dict(v.options)) for v in spec.variants] == [
        ("zenops", {}),
        ("llamacpp-bf16", {"llamacpp": "bf16"}),
        ("llamacpp-q8_0", {"llamacpp": "q8_0"}),
        ("llamacpp-q4_k_m", {"llamacpp": "q4_k_m"}),
    ]


def _cell(model: str, variant: str, **request: Any) -> Cell:
    return Cell(f"k-{Path(model).name}-{variant}", "g", None, model, variant, {"model": model, **request})


def test_llamacpp_cells_of_a_quantized_model_are_left_out_with_the_reason_one_line_each():
    cells = [
        _cell("/m/bf16", "zenops"),
        _cell("/m/bf16", "llamacpp-q8_0", llamacpp="q8_0"),
        _cell("/m/w8a8", "zenops"),
        _cell("/m/w8a8", "llamacpp-bf16", llamacpp="bf16"),
        _cell("/m/w8a8", "llamacpp-q8_0", llamacpp="q8_0"),
    ]
    asked: list[str] = []

    def refusal(model: str) -> str | None:
        asked.append(model)
        return "its weights are already quantized (w8a8)" if model.endswith("w8a8") else None

    kept, notes = engines.leave_out(cells, refusal)
    assert [c.key for c in kept] == ["k-bf16-zenops", "k-bf16-llamacpp-q8_0", "k-w8a8-zenops"]
    assert notes == [
        "g / w8a8 / llamacpp-bf16: left out (llama.cpp bf16): its weights are already quantized (w8a8)",
        "g / w8a8 / llamacpp-q8_0: left out (llama.cpp q8_0): its weights are already quantized (w8a8)",
    ]
    assert asked == ["/m/bf16", "/m/w8a8"]  # each model read once, the vLLM cells never


def test_llamacpp_cannot_serve_quantized_weights_nor_a_catalogue_id(tmp_path: Path):
    generate(tmp_path / "tiny-a", seed=0)
    generate(tmp_path / "tiny-q", seed=0, quant="w4a16")
    assert engines.llamacpp_refusal(str(tmp_path / "tiny-a")) is None
    assert "already quantized (w4a16)" in str(engines.llamacpp_refusal(str(tmp_path / "tiny-q")))
    assert "catalogue id" in str(engines.llamacpp_refusal("Qwen/Qwen3-0.6B"))


def test_campaign_plan_leaves_out_llamacpp_cells_of_a_quantized_model_and_says_so(run, tmp_path: Path):
    generate(tmp_path / "tiny-a", seed=0)
    generate(tmp_path / "tiny-q", seed=0, quant="w8a8")
    f = tmp_path / "engines.yaml"
    f.write_text(
        "name: eng\ncloud: sandbox\nflavors: [gp.5.2.8]\nmodels: [./tiny-a, ./tiny-q]\nvariants: engines\n"
        "engine: {image_source: pip}\nbudget: {max_usd: 1000}\nprices: {gp.5.2.8: 1.0}\n"
    )
    r = run(["--json", "campaign", "plan", str(f)])
    assert r.exit_code == 0, r.output  # a left-out cell is no failure
    data = result_of(r.output)
    cells = [(Path(c["model"]).name, c["variant"]) for c in data["cells"]]
    assert cells == [("tiny-a", v) for v in ("zenops", "llamacpp-bf16", "llamacpp-q8_0", "llamacpp-q4_k_m")] + [
        ("tiny-q", "zenops")
    ]
    assert [line.split(":")[0] for line in data["left_out"]] == [
        f"gp.5.2.8 / tiny-q / llamacpp-{fmt}" for fmt in ("bf16", "q8_0", "q4_k_m")
    ]
    assert all("already quantized (w8a8)" in line for line in data["left_out"])
    assert all("(llama.cpp " in line for line in data["left_out"])
    r = run(["campaign", "plan", str(f)])
    assert "gp.5.2.8 / tiny-q / llamacpp-q4_k_m: left out" in r.output


# --- serving a cell: which engine, the other one stopped first -------------------------------------------------


def test_serve_cell_picks_the_engine_and_stops_the_other_one_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple[str, Any]] = []
    serving = iter([True, False])  # what the deployment's serving record says before each vLLM cell
    monkeypatch.setattr(llamacpp_serve, "serve_llamacpp", lambda _c, inv, req: calls.append(("llamacpp", req)))
    monkeypatch.setattr(llamacpp_serve, "serving", lambda _c, inv: next(serving))
    monkeypatch.setattr(llamacpp_serve, "stop_llamacpp", lambda _c, inv: calls.append(("stop llamacpp", inv)))
    monkeypatch.setattr(serve_lib, "serve_inventory", lambda _c, inv, req: calls.append(("vllm", req.model)))
    inv = Path("hosts.yml")
    deployment = Deployment(RunContext(Config(state_dir=tmp_path)), DeploymentId("hosts", None, inv), check=False)
    deployment.serve_engine({"model": "/m", "llamacpp": "q8_0"})
    deployment.serve_engine({"model": "/m", "gateway": "off"})
    deployment.serve_engine({"model": "/m"})
    assert calls == [
        ("llamacpp", {"model": "/m", "llamacpp": "q8_0"}),
        ("stop llamacpp", inv),  # before vLLM serves: one engine at a time
        ("vllm", "/m"),
        ("vllm", "/m"),  # llama.cpp does not serve there: no extra playbook
    ]


@pytest.mark.parametrize("check", [False, True])
def test_up_stops_the_llamacpp_servers_a_record_names_before_vllm_serves(tmp_path, monkeypatch, check):
    """`zenops up` on a deployment whose serving record says llama.cpp serves (a campaign's llama.cpp cell that did
    not finish): Deployment.serve, the path `up` takes, stops them first (they hold the plan's ports), and says so; a
    dry run only says it would. A deployment vLLM serves gets no extra playbook."""
    config, inv = _llamacpp_record(tmp_path)
    calls: list[str] = []
    notes: list[str] = []
    monkeypatch.setattr(llamacpp_serve, "stop_llamacpp", lambda _c, i: calls.append(f"stop llamacpp {i.name}"))
    monkeypatch.setattr(serve_lib, "serve_inventory", lambda _c, i, req, **kw: calls.append(f"vllm {req.model}"))
    ctx = RunContext(config, note=notes.append)
    deployment = Deployment(ctx, DeploymentId("hosts", None, inv), check=check)
    deployment.serve(serve_lib.ServeRequest(model="/m/tiny-llama"))
    assert calls == (["vllm /m/tiny-llama"] if check else ["stop llamacpp hosts.yml", "vllm /m/tiny-llama"])
    [note] = notes
    assert "llama.cpp serves" in note
    assert ("would stop its llama.cpp servers" in note) if check else ("stopping its llama.cpp servers" in note)
    vllm_inv = tmp_path / "vllm.yml"
    vllm_inv.write_text("all: {}\n")
    _served_in(config, tmp_path, vllm_inv)
    calls.clear()
    Deployment(ctx, DeploymentId("vllm", None, vllm_inv), check=check).serve(serve_lib.ServeRequest(model="/m/x"))
    assert calls == ["vllm /m/x"]


def test_the_serving_record_tells_whether_llamacpp_serves(tmp_path: Path):
    config, inv = _llamacpp_record(tmp_path)
    assert llamacpp_serve.serving(RunContext(config), inv)
    other = tmp_path / "other.yml"
    other.write_text("all: {}\n")
    assert not llamacpp_serve.serving(RunContext(config), other)  # no record
    _served_in(config, tmp_path, other)
    assert not llamacpp_serve.serving(RunContext(config), other)  # vLLM's record


def test_stopping_llamacpp_keeps_the_gguf_files_for_the_next_cell():
    seen: list[RunSpec] = []

    class Ctx:
        verbosity = 0

        def run(self, spec: RunSpec) -> None:
            seen.append(spec)

    llamacpp_serve.stop_llamacpp(Ctx(), Path("/x/dep.yml"))  # type: ignore[arg-type]
    [spec] = seen
    assert spec.playbook == "llamacpp"
    assert spec.extravars == {
        "llamacpp_state": "absent",
        "llamacpp_server_deployment": "dep",
        "llamacpp_server_absent_gguf": False,
    }


HOST_FACTS = "gp-5-24-96"  # one instance, with a ceiling (the catalogue's figures)


def _plans(model_dir: Path, **opts: Any) -> dict[str, Any]:
    req = serve_lib.ServeRequest(model=str(model_dir), **opts)
    model, _ = serve_lib.resolve_model(str(model_dir))
    return serve_lib.make_plans({"h1": fixture(HOST_FACTS)}, model, serve_lib.plan_options(req, "0.32.0"), Config())


def test_the_serve_steps_extravars_come_from_the_plan(tmp_path: Path):
    generate(tmp_path / "tiny-a", seed=0)
    plans = _plans(tmp_path / "tiny-a", concurrency=3)
    p = plans["h1"]
    pip = {"vllm_image_pip_find_links": ["/wheels"], "vllm_image_pip_extra_index_urls": ["https://idx/cpu"],
           "vllm_image_pip_index_url": "https://other"}  # fmt: skip
    ev = llamacpp_deploy.serve_extravars(
        {h: q.to_dict() for h, q in plans.items()}, model_dir=str(tmp_path / "tiny-a"), served_name="tiny-a",
        fmt="q8_0", concurrency=3, api_key_file="/state/key", deployment="dep", pip=pip, kv_bytes_per_token=None,
    )  # fmt: skip
    assert ev["llamacpp_server_api_key_file"] == "/state/key"  # a path: the key is never a value
    check_no_secrets(ev)  # what the runner refuses before any playbook runs (no secret-named key, no secret value)
    assert ev["llamacpp_server_deployment"] == "dep"
    assert ev["llamacpp_server_image_pip_find_links"] == ["/wheels"]
    assert ev["llamacpp_server_image_pip_extra_index_urls"] == ["https://idx/cpu"]
    assert not any("index_url" in k and "extra" not in k for k in ev)  # the role takes no main index
    assert ev["llamacpp_server_model_dir"] == str(tmp_path / "tiny-a")
    [inst] = ev["zenops_llamacpp"]["h1"]["llamacpp_server_instances"]
    [planned] = p.instances
    argv = inst["argv"]
    assert inst["container"]["cpuset_cpus"] == planned.container["cpuset_cpus"]
    assert inst["container"]["cpuset_mems"] == planned.container["cpuset_mems"]
    assert argv[argv.index("-t") + 1] == str(len(planned.cpus))
    assert argv[argv.index("-np") + 1] == str(max(3, planned.max_num_seqs))  # the plan's seats
    assert argv[argv.index("-c") + 1] == str(max(3, planned.max_num_seqs) * p.max_model_len)
    assert argv[argv.index("-m") + 1] == "/gguf/tiny-a-q8_0.gguf"
    with pytest.raises(UsageError):
        llamacpp_deploy.serve_extravars({}, model_dir="/m/x", served_name="x", fmt="q8_0", concurrency=1,
                                        api_key_file="", deployment="d", kv_bytes_per_token=None)  # fmt: skip


def test_the_gguf_plans_ceiling_reads_the_weights_at_the_gguf_bits_per_weight(tmp_path: Path):
    generate(tmp_path / "tiny-a", seed=0)
    plan = _plans(tmp_path / "tiny-a")["h1"].to_dict()
    roof = plan["instances"][0]["roofline"]
    assert roof
    assert roof["weight_bytes"] > 0
    assert plan["weights"] == "bfloat16"
    for fmt in llamacpp.FORMATS.values():
        g = llamacpp_deploy.gguf_plan(plan, fmt.name)
        assert g["llamacpp"] == fmt.name
        got = g["instances"][0]["roofline"]["weight_bytes"]
        assert got == round(roof["weight_bytes"] * fmt.bits_per_weight / 16)
    assert plan["instances"][0]["roofline"]["weight_bytes"] == roof["weight_bytes"]  # the plan is not changed
    # weights llama.cpp does not convert from: no ceiling rather than a wrong one
    quantized = {**plan, "weights": "w8a8"}
    assert llamacpp_deploy.gguf_plan(quantized, "q8_0")["instances"][0]["roofline"] is None


class FakeAnsible:
    """TEST DOUBLE for ansible-runner (zenops.context.run_playbook): answers up.yml with the fixture host's facts and
    playbooks/llamacpp.yml with the endpoints the role reports; records every spec in order."""

    def __init__(self) -> None:
        self.specs: list[RunSpec] = []

    def __call__(self, spec: RunSpec, *_a: Any, **_kw: Any) -> RunResult:
        self.specs.append(spec)
        facts: dict[str, Any] = {}
        if spec.playbook == "up":
            facts = {"zenops_cpu_topology": fixture(HOST_FACTS)}
        if spec.playbook == "llamacpp":
            facts = {"zenops_llamacpp_endpoints": [{"instance": 0, "port": 8000, "image": "zenops/llamacpp:x"}]}
        return RunResult(
            run_id="fake", playbook=str(spec.playbook), status="successful", rc=0, run_dir=Path("/nonexistent"),
            started="", duration_s=0.0, stats={"h1": HostStats(ok=1)}, host_facts={"h1": facts},
        )  # fmt: skip


def _deployment(tmp_path: Path) -> tuple[Config, Path]:
    """The tiny model at tmp_path/tiny-a, a fresh state dir and a one-host inventory (dep.yml)."""
    generate(tmp_path / "tiny-a", seed=0)
    inv = tmp_path / "dep.yml"
    inv.write_text("all: {hosts: {h1: {}}}\n")
    return Config(state_dir=tmp_path / "state"), inv


def test_serve_llamacpp_stops_vllm_then_serves_the_plan_and_records_it(tmp_path: Path, monkeypatch):
    config, inv = _deployment(tmp_path)
    fake = FakeAnsible()
    monkeypatch.setattr("zenops.context.run_playbook", fake)
    monkeypatch.setattr(serve_lib, "pip_settings", lambda: {"vllm_image_pip_find_links": ["/wheels"]})
    archive = tmp_path / "bookworm-slim.tar"
    request = {"model": str(tmp_path / "tiny-a"), "image_source": "pip", "gateway": "off", "llamacpp": "q4_k_m",
               "base_image": "zenops/bookworm-slim:latest", "base_image_archive": str(archive)}  # fmt: skip
    endpoints = llamacpp_serve.serve_llamacpp(RunContext(config), inv, request)
    # the hosts' up (Docker, facts), then vLLM's servers go, then llama.cpp's start
    assert [s.playbook for s in fake.specs] == ["up", "down", "llamacpp"]
    assert fake.specs[1].extravars["zenops_remove_images"] is False  # the engine image stays: it runs the client
    ev = fake.specs[2].extravars
    key = Path(ev["llamacpp_server_api_key_file"])
    assert key.is_file()
    assert key.read_text() not in json.dumps(ev)
    assert ev["llamacpp_server_deployment"] == "dep"
    assert ev["llamacpp_server_image_pip_find_links"] == ["/wheels"]
    # the engine's base image and its archive: a host without a registry loads it instead of pulling debian's
    assert ev["llamacpp_server_image_base_image"] == "zenops/bookworm-slim:latest"
    assert ev["llamacpp_server_image_base_archive"] == str(archive.resolve())
    assert ev["zenops_llamacpp"]["h1"]["llamacpp_server_conversions"][0]["format"] == "q4_k_m"
    assert endpoints == {"h1": [{"instance": 0, "port": 8000, "image": "zenops/llamacpp:x"}]}
    record = Store(config, inv).record()
    assert record is not None
    # the slots checked against the plan's KV cache with the model's f16 KV bytes per token
    [inst] = ev["zenops_llamacpp"]["h1"]["llamacpp_server_instances"]
    model, _ = serve_lib.resolve_model(str(tmp_path / "tiny-a"))
    assert "not checked" not in inst["reason"]
    assert inst["context"] * model.kv_bytes_per_token("float16") <= record.plans["h1"]["instances"][0]["kv_cache_bytes"]
    assert record.request["llamacpp"] == "q4_k_m"
    assert record.api_key_file == str(key)
    assert record.plans["h1"]["llamacpp"] == "q4_k_m"  # the plan as llama.cpp served it: its ceiling in GGUF bits
    assert record.compat["id"]  # the pair whose engine image runs the bench client


def test_a_failed_llamacpp_serve_leaves_no_llamacpp_server(tmp_path: Path, monkeypatch):
    config, inv = _deployment(tmp_path)
    fake = FakeAnsible()

    def failing(spec: RunSpec, *a: Any, **kw: Any) -> RunResult:
        if spec.playbook == "llamacpp" and spec.extravars.get("llamacpp_state") != "absent":
            fake.specs.append(spec)
            raise RunFailedError("llamacpp", [])
        return fake(spec)

    monkeypatch.setattr("zenops.context.run_playbook", failing)
    monkeypatch.setattr(serve_lib, "pip_settings", dict)
    request = {"model": str(tmp_path / "tiny-a"), "image_source": "pip", "llamacpp": "q8_0"}
    with pytest.raises(RunFailedError):
        llamacpp_serve.serve_llamacpp(RunContext(config), inv, request)
    assert [(s.playbook, s.extravars.get("llamacpp_state")) for s in fake.specs][-2:] == [
        ("llamacpp", None),
        ("llamacpp", "absent"),  # what did start is removed: the next cell's ports and cores are free
    ]
    assert Store(config, inv).record() is None  # nothing says llama.cpp serves


def test_serve_llamacpp_refuses_quantized_weights_and_catalogue_ids_before_anything_runs(tmp_path, monkeypatch):
    generate(tmp_path / "tiny-q", seed=0, quant="w8a8")
    monkeypatch.setattr("zenops.context.run_playbook", lambda *a, **k: pytest.fail("nothing may run"))
    ctx = RunContext(Config(state_dir=tmp_path / "state"))
    with pytest.raises(UsageError, match="quantized weights"):
        llamacpp_serve.serve_llamacpp(ctx, tmp_path / "d.yml", {"model": str(tmp_path / "tiny-q"), "llamacpp": "bf16"})
    with pytest.raises(UsageError, match="not a local directory"):
        llamacpp_serve.serve_llamacpp(ctx, tmp_path / "d.yml", {"model": "Qwen/Qwen3-0.6B", "llamacpp": "bf16"})


# --- benching a llama.cpp cell with the same client ------------------------------------------------------------


def _llamacpp_record(tmp_path: Path, fmt: str = "q8_0") -> tuple[Config, Path]:
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    _served_in(config, tmp_path, inv)
    store = Store(config, inv)
    record = store.record()
    assert record is not None
    store.save_record(type(record)(**{**record.__dict__, "request": {**record.request, "llamacpp": fmt}}))
    return config, inv


def test_a_llamacpp_deployment_is_benched_as_llamacpp_with_its_gguf_format(tmp_path, monkeypatch):
    config, inv = _llamacpp_record(tmp_path)
    seen: list[RunSpec] = []
    good = {"model_id": "tiny-llama", "completed": 20, "failed": 0, "output_throughput": 50.0, "num_prompts": 20}
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(good, platform="llamacpp", seen=seen))
    req = bench_run.BenchRequest(concurrency=(1,), runs_dir=tmp_path / "runs", run_id="r1")
    bench_run.bench_inventory(RunContext(config), inv, req)
    ev = seen[0].extravars
    assert ev["vllm_server_bench_engine"] == "llamacpp"
    assert ev["vllm_server_bench_client_compat"] == "vllm-cpu-0.32.0-zentorch-2.13.0.1"  # the client's image
    meta = ev["vllm_server_bench_metadata"]
    assert (meta["engine"], meta["weights"]) == ("llama.cpp", "q8_0")
    assert meta["llamacpp"] == llamacpp.BUILD
    assert meta["vllm"] is None
    assert meta["client_vllm"] == "0.32.0"


def test_a_vllm_deployment_is_benched_as_before(tmp_path, monkeypatch):
    config = Config(state_dir=tmp_path / "state")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    _served_in(config, tmp_path, inv)
    seen: list[RunSpec] = []
    good = {"model_id": "tiny-llama", "completed": 20, "failed": 0, "output_throughput": 50.0, "num_prompts": 20}
    monkeypatch.setattr("zenops.context.run_playbook", bench_playbook(good, seen=seen))
    bench_run.bench_inventory(RunContext(config), inv, bench_run.BenchRequest(concurrency=(1,),
                              runs_dir=tmp_path / "runs", run_id="r1"))  # fmt: skip
    ev = seen[0].extravars
    assert "vllm_server_bench_engine" not in ev  # the role's default: vllm
    assert "engine" not in ev["vllm_server_bench_metadata"]


LLAMA_SERVER_ARGS = ["-m", "/gguf/tiny-llama-q8_0.gguf", "--host", "0.0.0.0", "--port", "8000", "-t", "2",
                     "--alias", "tiny-llama", "--api-key-file", "/run/zenops/secrets/api-key"]  # fmt: skip


def llamacpp_inspect() -> dict[str, Any]:
    """`docker inspect` of a llama.cpp server as roles/llamacpp_server/tasks/start.yml starts it."""
    return {
        "Name": "/zenops-llamacpp-0",
        "Image": "sha256:llama",
        "State": {"Running": True, "Status": "running"},
        "HostConfig": {"CpusetCpus": "0-1", "CpusetMems": "0"},
        "Config": {
            "Image": "zenops/llamacpp:11434.0.0-abc",
            "Entrypoint": ["llama-server"],
            "Cmd": LLAMA_SERVER_ARGS,
            "Labels": {
                "io.zenops.managed": "true",
                "io.zenops.role": "llamacpp-server",
                "io.zenops.deployment": "hosts",
                "io.zenops.instance": "0",
                "io.zenops.port": "8000",
                "io.zenops.model": "tiny-llama",
                "io.zenops.format": "q8_0",
                "io.zenops.model-dir": "/var/lib/zenops/models/tiny-llama",
                "io.zenops.tokenizer": "/models/tiny-llama",
            },
        },
    }


def test_the_client_benches_a_llamacpp_server_from_the_engine_image_with_the_models_tokenizer():
    view = bench_client.server_view(llamacpp_inspect())
    assert (view["engine"], view["format"], view["model"]) == ("llama.cpp", "q8_0", "tiny-llama")
    assert view["tokenizer"] == "/models/tiny-llama"  # the Hugging Face directory, not llama-server's -m GGUF
    view["client_image"] = "sha256:vllm"  # what bench_client_image.yml adds: the vLLM engine image on the host
    run = {"input_len": 128, "output_len": 64, "num_prompts": 8, "max_concurrency": 4, "temperature": 0}
    key_file = "/run/zenops/secrets/api-key"
    argv = bench_client.bench_argv(run, view, run_id="r1", result_dir="/d/0", platform="llamacpp",
                                   key_file=key_file, metadata={"engine": "llama.cpp"})  # fmt: skip
    assert argv[argv.index("-c") - 1] == "sha256:vllm"  # the client runs in vLLM's image, not llama.cpp's
    assert "sha256:llama" not in argv
    assert "/var/lib/zenops/models/tiny-llama:/models/tiny-llama:ro" in argv  # the tokenizer, read-only
    assert argv[argv.index("--volumes-from") + 1] == "zenops-llamacpp-0:ro"  # its secrets volume: the key file
    assert argv[argv.index("--tokenizer") + 1] == "/models/tiny-llama"
    assert argv[argv.index("--model") + 1] == "tiny-llama"
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8000"
    assert "engine=llama.cpp" in argv
    assert "platform=llamacpp" in argv
    assert argv[argv.index("--header") + 1] == "Connection=close"  # llama-server drops reused kept-alive connections
    assert argv.index("--header") < argv.index("--metadata")  # a flag of vllm bench, not a metadata pair
    assert KEY not in " ".join(argv)
    described = bench_client.describe_servers([view], health=[], versions=[], images=[], client_cpus="")
    assert described["zenops-llamacpp-0"]["platform"] == "llamacpp"


def test_a_vllm_server_view_is_unchanged_by_the_llamacpp_branch():
    view = bench_client.server_view(inspect_data())
    assert view["engine"] == "vllm"
    assert "tokenizer_volume" not in view
    assert "client_image" not in view


# --- the report: engine, weights and the ceiling in GGUF bits --------------------------------------------------


def _run_dir(root: Path, cell: str, plan: dict[str, Any], tok_s: float, **meta: str) -> Path:
    d = root / f"{cell}-r1"
    (d / "h1" / "0").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": f"{cell}-r1", "label": cell, "price_per_hour": 1.0}))
    (d / "h1" / "plan.json").write_text(json.dumps(plan))
    result = {"model_id": "tiny-a", "completed": 8, "failed": 0, "output_throughput": tok_s, "num_prompts": 8,
              "max_concurrency": 1, "median_ttft_ms": 100.0, "median_tpot_ms": 20.0, "mean_tpot_ms": 21.0,
              "total_input_tokens": 8 * 128, "total_output_tokens": 8 * 64, "instance": 0, **meta}  # fmt: skip
    (d / "h1" / "0" / "c1.json").write_text(json.dumps(result))
    return d


def test_report_json_rows_carry_engine_weights_and_the_gguf_ceiling(tmp_path: Path):
    generate(tmp_path / "tiny-a", seed=0)
    plan = _plans(tmp_path / "tiny-a")["h1"].to_dict()
    z = _run_dir(tmp_path, "zz", plan, 40.0)
    ll = _run_dir(tmp_path, "ll", llamacpp_deploy.gguf_plan(plan, "q8_0"), 60.0, engine="llama.cpp", weights="q8_0")
    results = list(load_results([z, ll]).results)
    cells = [CellOutcome("zz", "g", "tiny-a", "zenops", "done", None, str(z)),
             CellOutcome("ll", "g", "tiny-a", "llamacpp-q8_0", "done", None, str(ll))]  # fmt: skip
    rep = build_report(results, cells, max_tpot_ms=None, api_price=None)
    rows = {r["variant"]: r for r in rep.to_dict()["rows"]}
    zr, lr = rows["zenops"], rows["llamacpp-q8_0"]
    assert (zr["engine"], zr["weights"]) == ("zenops", "bfloat16")
    assert (lr["engine"], lr["weights"]) == ("llama.cpp", "q8_0")
    for r in (zr, lr):
        for k in ("model", "concurrency", "output_throughput", "median_ttft_ms", "median_tpot_ms",
                  "output_throughput_spread", "roofline_pct"):  # fmt: skip
            assert k in r
    assert zr["roofline_pct"]
    assert lr["roofline_pct"]
    # the same host and bandwidth: llama.cpp's ceiling is the plan's with 8.5 bits per weight read instead of 16
    assert lr["ceiling_tok_s"] > zr["ceiling_tok_s"]
    same = llamacpp_deploy.gguf_plan(plan, "bf16")
    bf = _run_dir(tmp_path, "bf", same, 40.0, engine="llama.cpp", weights="bf16")
    [bf_result] = load_results([bf]).results
    assert bf_result.roofline is not None
    assert bf_result.roofline["ceiling_tok_s"] == pytest.approx(zr["ceiling_tok_s"], rel=1e-3)
    # zenops deploys what it serves: the best configuration is never llama.cpp's row, however fast
    assert rep.best["tiny-a"] is not None
    assert rep.best["tiny-a"].variant == "zenops"
    assert "engine" in rep.csv().splitlines()[0]


# --- `zenops down` removes llama.cpp's servers too --------------------------------------------------------------


def test_down_removes_the_llamacpp_servers_and_their_secrets():
    """playbooks/down.yml removes every container carrying its label filter and the secrets under /var/lib/zenops:
    the llama.cpp servers (and a conversion left running) carry those labels and keep their key there."""
    import yaml  # noqa: PLC0415

    from tests.conftest import REPO  # noqa: PLC0415

    [play] = yaml.safe_load((REPO / "playbooks" / "down.yml").read_text())
    tasks = {t["name"]: t for t in play["tasks"][1]["block"]}
    wanted = set(tasks["List zenops's containers and images"]["community.docker.docker_host_info"]
                 ["containers_filters"]["label"])  # fmt: skip
    role = yaml.safe_load((REPO / "roles" / "llamacpp_server" / "vars" / "main.yml").read_text())
    server_labels = {f"{k}={v}" for k, v in role["_llamacpp_server_labels"].items()}
    assert wanted <= server_labels  # `down` finds the llama.cpp servers
    convert = (REPO / "roles" / "llamacpp_server" / "tasks" / "convert.yml").read_text()
    assert all(f"'--label', '{label}'" in convert for label in wanted)  # and a conversion container left running
    secrets = tasks["Remove the servers' secret environment files (API key, HF token)"]["ansible.builtin.file"]
    defaults = yaml.safe_load((REPO / "roles" / "llamacpp_server" / "defaults" / "main.yml").read_text())
    assert secrets["path"] == f"{defaults['llamacpp_server_data_dir']}/secrets"  # the llama.cpp keys are under it
    assert role["_llamacpp_server_secrets_dir"].startswith("{{ llamacpp_server_data_dir }}/secrets/")
