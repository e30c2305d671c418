"""`zenops plan` through the console entry point: sources of facts, output, refusals and their exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.sysfs import load_cpu_topology
from zenops.errors import ExitCode

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def test_plan_from_facts_file_json(run):
    r = run(
        ["plan", "--facts", str(FIXTURES / "gp-5-24-96.json"), "--model", "Qwen/Qwen3-4B", "--vllm", "0.11.0", "--json"]
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.output.splitlines()[-1])  # after a warning: 0.11.0 is not a pair zenops's tests run
    assert data["platform"] == "zen"
    (inst,) = data["instances"]
    for key in ("cpus", "numa_node", "kv_cache_gib", "port", "env", "args"):
        assert key in inst
    assert inst["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "1-23"
    assert inst["kv_cache_gib"] == 29
    assert {r["topic"] for r in data["reasons"]} >= {"platform", "cpus", "kv_cache"}


def test_plan_projected_from_a_flavor_prints_table_and_reasons(run):
    r = run(["plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B"])
    assert r.exit_code == 0, r.output
    assert "1-23" in r.output
    assert "$0.79/h" in r.output
    assert "why" in r.output
    assert "kv_cache" in r.output


def test_plan_on_this_machine(run):
    r = run(["plan", "--local", "--model", "Qwen/Qwen3-0.6B", "--json"])
    assert r.exit_code in (0, ExitCode.PLAN_REFUSED), r.output
    last = json.loads(r.output.strip().splitlines()[-1])
    if r.exit_code == 0:
        assert last["plans"][0]["host"] == "localhost"
        assert last["instances"]
        # what this machine must get, from its own facts: zen on AMD with AVX-512, else the stock cpu platform
        facts = load_cpu_topology().gather()
        amd_avx512 = facts["vendor"] == "AuthenticAMD" and "avx512f" in facts["flags"]
        assert last["platform"] == ("zen" if amd_avx512 else "cpu"), (facts["vendor"], facts["flags"])
    else:
        assert last["code"] == "model_too_big"


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (
            ["--flavor", "gp.5.24.96", "--model", "meta-llama/Llama-3.3-70B-Instruct"],
            ExitCode.PLAN_REFUSED,
            "does not fit",
        ),
        (
            ["--facts", str(FIXTURES / "xeon-e5-2680v4-2s.json"), "--model", "Qwen/Qwen3-4B", "--platform", "zen"],
            ExitCode.PLAN_REFUSED,
            "--platform cpu",
        ),
        (
            ["--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B", "--max-model-len", "100000"],
            ExitCode.PLAN_REFUSED,
            "longer than",
        ),
        (["--model", "Qwen/Qwen3-4B"], ExitCode.USAGE, "no facts to plan from"),
        (
            ["--facts", str(FIXTURES / "gp-5-24-96.json"), "--local", "--model", "Qwen/Qwen3-4B"],
            ExitCode.USAGE,
            "one source of facts",
        ),
        (["--flavor", "gp.9.99", "--model", "Qwen/Qwen3-4B"], ExitCode.USAGE, "gp.5.24.96"),
        (["--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-5B"], ExitCode.USAGE, "did you mean"),
        (["--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B", "--instances", "many"], ExitCode.USAGE, "auto"),
    ],
)
def test_plan_refusals_and_usage_errors(run, args, code, fragment):
    r = run(["plan", *args])
    assert r.exit_code == code, r.output
    assert fragment in r.output.replace("\n", " ")


def test_refusal_in_json_mode_has_its_code(run):
    r = run(["--json", "plan", "--flavor", "gp.5.24.96", "--model", "meta-llama/Llama-3.3-70B-Instruct"])
    assert r.exit_code == ExitCode.PLAN_REFUSED
    error = json.loads(r.output.strip().splitlines()[0])
    assert error["code"] == "model_too_big"
    assert error["hint"]


def test_user_flavor_from_config_is_planned_and_priced(run, tmp_path, monkeypatch):
    (tmp_path / "zenops.yaml").write_text(
        "flavors:\n  big.64.512:\n    vcpus: 64\n    ram_gb: 512\n    disk_gb: 100\n    ephemeral_gb: 0\n"
        "    cpu_model: AMD EPYC 9654\n    cpu_vendor: AuthenticAMD\n    cpu_flags: [avx2, avx512f, avx512_bf16]\n"
        "    price_per_hour: 4.2\n"
    )
    monkeypatch.chdir(tmp_path)
    r = run(["plan", "--flavor", "big.64.512", "--model", "meta-llama/Llama-3.3-70B-Instruct", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["price_per_hour"] == 4.2
    assert data["instances"][0]["omp_threads_bind"] == "1-63"


def test_plan_objective_and_tensor_parallel_options(run):
    facts = str(FIXTURES / "epyc-9755-2s.json")
    r = run(["plan", "--facts", facts, "--model", "Qwen/Qwen3-8B", "--objective", "throughput", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["objective"] == "throughput"
    assert [i["numa_node"] for i in data["instances"]] == [0, 0, 1, 1]
    assert data["instances"][0]["roofline"]["source"].startswith("theoretical")
    r = run(["plan", "--facts", facts, "--model", "Qwen/Qwen3-8B", "--objective", "latency", "--concurrency", "32"])
    assert r.exit_code == 0, r.output
    assert "objective latency" in r.output
    assert "tok/s" in r.output  # the ceiling column
    r = run(["plan", "--facts", facts, "--model", "google/gemma-3-1b-it", "--tensor-parallel", "4", "--json"])
    assert r.exit_code == 0, r.output  # 4 heads: TP 4 is 2 ranks on each of 2 nodes
    data = json.loads(r.output)
    (inst,) = data["instances"]
    assert inst["tensor_parallel_size"] == 4
    assert inst["container"]["cpuset_mems"] == "0,1"
    for model, asked in (("google/gemma-3-1b-it", "8"), ("Qwen/Qwen3-8B", "3")):
        # refused before anything (issue 45: TP 3 silently became 2), naming the sizes it takes here
        r = run(["plan", "--facts", facts, "--model", model, "--tensor-parallel", asked])
        assert r.exit_code == ExitCode.PLAN_REFUSED, r.output
        assert f"--tensor-parallel {asked}: vLLM refuses it" in r.output
        assert "use --tensor-parallel 1 or 2" in " ".join(r.output.split())


def test_plan_prints_the_cost_per_hour_month_and_million_tokens_at_the_ceiling(run):
    r = run(["plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B"])
    assert r.exit_code == 0, r.output
    # gp.5.24.96 at $0.79/h, its theoretical ceiling 226.13 tok/s: 0.79 / (226.13 x 3600) x 1e6 = $0.97
    assert "$0.79/h, $576.70/month (730 h); at the ceiling of 226.13 tok/s*: $0.97 per 1M output tokens" in r.output
    r = run(["plan", "--flavor", "gp.5.24.96", "--model", "Qwen/Qwen3-4B", "--json"])
    data = json.loads(r.output)
    assert data["cost"] == {
        "per_hour": 0.79,
        "per_month": 576.7,
        "hours_per_month": 730,
        "ceiling_tok_s": 226.13,
        "per_million_output_tokens": 0.9704,
        "ceiling_theoretical": True,
    }
    # from facts, no flavor: no price, no cost (never a guess)
    r = run(["plan", "--facts", str(FIXTURES / "gp-5-24-96.json"), "--model", "Qwen/Qwen3-4B", "--json"])
    assert json.loads(r.output)["cost"] is None


@pytest.mark.parametrize("facts", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_the_plan_table_reads_in_100_columns(run, monkeypatch, facts):
    args = ["plan", "--facts", str(FIXTURES / facts), "--model", "Qwen/Qwen3-4B"]
    instances = len(json.loads(run([*args, "--json"]).output)["instances"])
    monkeypatch.setenv("COLUMNS", "100")  # after the run fixture's 200
    r = run(args)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(i for i, line in enumerate(lines) if "ceiling tok/s" in line)  # the header on one line
    rows = lines[head : head + 2 + instances]
    for row in rows:
        assert len(row.rstrip()) <= 100, row
        assert "…" not in row, row  # no cell cut short
    for row in rows[2:]:  # one line per instance: its ceiling on its own line
        assert row.split()[0].isdigit(), rows
        assert "@" in row or row.rstrip().endswith("-"), row
