"""The engine-arg guard reads a `vllm serve` argument as vLLM's parser does (issue 23, item 6): ``_`` as ``-``, a
prefix as the whole flag, ``--flag=value``; `zenops up` applies it before anything is provisioned, and a campaign
file's engine_args are checked when the file is read (`campaign plan`), not when a cell's servers are paid for."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.runner.test_plan_to_role import host_facts
from zenops import catalog
from zenops.campaign.state import Store
from zenops.cli.main import cli
from zenops.config import load
from zenops.errors import ConfigError, ExitCode, UsageError
from zenops.planner import ENGINE_FLAGS, PlanOptions
from zenops.serve import check_engine_args, make_plans

SECRET = "sk-value-never-echoed"


@pytest.mark.parametrize(
    ("arg", "flag"),
    [
        (f"--api_key={SECRET}", "--api-key"),  # the bypass: vLLM reads _ as -
        ("--max_num_seqs=99", "--max-num-seqs"),  # the other one
        ("--api_key", "--api-key"),
        (f"--api-k={SECRET}", "--api-key"),  # argparse takes a unique prefix for the flag
        ("--api-k", "--api-key"),
        ("--max-num", "--max-num-seqs"),
        ("--max_num=4", "--max-num-seqs"),
        ("--served_model_name", "--served-model-name"),
        ("--host=127.0.0.1", "--host"),
        ("--tensor_parallel_size=2", "--tensor-parallel-size"),
        ("-tp=2", "-tp"),
        ("-t", "-tp"),
        ("--kv_cache_memory_bytes=1", "--kv-cache-memory-bytes"),  # the plan's, known without a plan
        ("--gpu-memory-util=0.5", "--gpu-memory-utilization"),
        ("--dtype", "--dtype"),
    ],
)
def test_every_spelling_of_a_flag_zenops_sets_is_refused(arg: str, flag: str) -> None:
    with pytest.raises(UsageError) as e:
        check_engine_args(["--enforce-eager", arg, "x"])
    assert f"zenops sets {flag} itself" in e.value.message
    assert SECRET not in e.value.message + str(e.value.hint)


@pytest.mark.parametrize(
    "arg", ["--enforce-eager", "--seed=3", "--seed", "3", "--kv-cache-dtype", "--model-impl", "-O3", "-q", "--"]
)
def test_what_zenops_does_not_set_passes(arg: str) -> None:
    check_engine_args([arg])


def test_a_plans_own_flags_are_refused_too() -> None:
    plans = {"h": {"instances": [{"args": ["--some-future-flag", "1"]}]}}
    with pytest.raises(UsageError, match="zenops sets --some-future-flag itself"):
        check_engine_args(["--some_future_flag=2"], plans)


@pytest.mark.parametrize("vllm", ["0.11.0", "0.32.0"])
@pytest.mark.parametrize("facts", ["zen4-vm-hotplug", "epyc-7763-vm", "epyc-9755-2s", "epyc-9965-1s"])
def test_every_flag_a_plan_sets_is_known_without_a_plan(facts: str, vllm: str) -> None:
    """planner.ENGINE_FLAGS is what the guard refuses before any plan exists: every flag of every plan is in it."""
    for objective in ("latency", "throughput"):
        opts = PlanOptions(vllm_version=vllm, objective=objective, concurrency=32)
        plans = make_plans({"h": host_facts(facts)}, catalog.get_model("Qwen/Qwen3-4B"), opts, load())
        flags = {a for i in plans["h"].instances for a in i.args if a.startswith("-")}
        assert flags <= set(ENGINE_FLAGS), flags - set(ENGINE_FLAGS)


# --- before anything is provisioned -----------------------------------------------------------------------------


@pytest.mark.parametrize("arg", [f"--api_key={SECRET}", "--max_num_seqs=99"])
def test_up_refuses_the_bypass_before_provisioning(arg: str, nothing_runs: list[str]) -> None:
    argv = ["up", "--cloud", "sandbox", "--flavor", "gp.5.2.8", "--model", "Qwen/Qwen3-0.6B", f"--engine-arg={arg}"]
    r = CliRunner().invoke(cli, argv)
    assert isinstance(r.exception, UsageError), r.output
    assert r.exception.exit_code == ExitCode.USAGE
    assert "zenops sets" in r.exception.message
    assert SECRET not in r.exception.message
    assert nothing_runs == []


CAMPAIGN = """name: sweep
cloud: sandbox
flavors: [gp.5.2.8]
models: [Qwen/Qwen3-0.6B]
variants: {a: {max_num_seqs: 2}, b: {engine_args: [--enforce-eager]}}
engine: {image_source: pip, engine_args: [--seed=3]}
bench: {concurrency: [1], prompts: 8, output_len: 32}
budget: {max_usd: 1000}
prices: {gp.5.2.8: 1.0}
"""


@pytest.mark.parametrize(
    ("old", "new", "key", "flag"),
    [
        ("[--seed=3]", f"[--seed=3, --api_key={SECRET}]", "engine.engine_args[1]", "--api-key"),
        ("[--enforce-eager]", "[--max_num_seqs=99]", "variants.b.engine_args[0]", "--max-num-seqs"),
        ("[--enforce-eager]", "[--max-num, '4']", "variants.b.engine_args[0]", "--max-num-seqs"),
    ],
)
def test_campaign_plan_refuses_engine_args_zenops_sets(
    tmp_path: Path, nothing_runs: list[str], old: str, new: str, key: str, flag: str
) -> None:
    f = tmp_path / "sweep.yaml"
    f.write_text(CAMPAIGN)
    assert CliRunner().invoke(cli, ["campaign", "plan", str(f)]).exit_code == 0  # the file is fine without it
    f.write_text(CAMPAIGN.replace(old, new))
    for command in ("plan", "run"):
        r = CliRunner().invoke(cli, ["campaign", command, str(f)])  # (zenops.cli.main turns it into the exit code)
        assert isinstance(r.exception, ConfigError), r.output
        assert r.exception.exit_code == ExitCode.CONFIG
        text = str(r.exception) + str(r.exception.hint)
        assert key in text, text
        assert f"zenops sets {flag} itself" in text, text
        assert SECRET not in text + r.output
    assert nothing_runs == []
    assert Store(load()).all() == []  # nothing recorded, nothing to tear down
