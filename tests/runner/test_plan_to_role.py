"""Facts -> planner -> the vllm_server role's container settings, for both kinds of host, on every machine.

The hosts are fixture facts (tests/fixtures/facts/): an AVX-512 Zen 4 VM, which must get the zen platform with
zentorch visible, and an AMD EPYC VM with AVX2 but no AVX-512, which must get the stock CPU platform with zentorch
hidden. The plans come from ``zenops.serve.make_plans`` (what `zenops up` calls), and the role renders them through
real Ansible: the server play of playbooks/serve.yml, unchanged, run by ``ansible-playbook --check`` against
localhost. Only the Docker API is replaced: a stand-in ``community.docker`` collection records the parameters
``docker_container`` is called with (env, command, cpuset, volumes) instead of talking to an engine. No Docker needed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.runner import ansible_json_env, json_of, run_playbook
from zenops import catalog
from zenops.config import load
from zenops.cpulist import parse_cpulist
from zenops.errors import ExitCode
from zenops.planner import PlanOptions, PlanRefusedError
from zenops.serve import ServeRequest, make_plans, resolve_engine

FACTS = REPO / "tests" / "fixtures" / "facts"
MODEL = "Qwen/Qwen3-4B"
# roles/vllm_server/vars/main.yml: the directory whose zentorch.py raises ImportError, first on PYTHONPATH
NO_ZENTORCH = "/opt/zenops/no-zentorch"
LIB = "/opt/zenops/lib"  # the API-key middleware (files/zenops_auth.py), on PYTHONPATH of every server
HIDER_TASK = "Write the module that hides zentorch (plan platform cpu)"

# The Docker API, recorded: each call appends {"module": ..., "params": ...} to $ZENOPS_TEST_DOCKER_RECORD.
_FAKE_MODULE = """#!/usr/bin/python
import json
import os

from ansible.module_utils.basic import AnsibleModule, _load_params

MODULE = "__MODULE__"
# whatever the role passes is accepted as it is (raw), recorded, and answered like the real module would
raw = {k: {"type": "raw"} for k in _load_params() if not k.startswith("_ansible_")}
module = AnsibleModule(argument_spec=raw, supports_check_mode=True)
params = {k: module.params[k] for k in raw}
with open(os.environ["ZENOPS_TEST_DOCKER_RECORD"], "a") as f:
    f.write(json.dumps({"module": MODULE, "params": params}) + "\\n")
if MODULE == "docker_container":
    module.exit_json(changed=True, container={"Name": "/" + params["name"], "State": {"Running": True}})
module.exit_json(changed=False, can_talk_to_docker=True, containers=[], host_info={})
"""


def host_facts(name: str) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())
    return facts


def stand_in_docker(root: Path) -> Path:
    """A collections dir whose community.docker has only docker_container and docker_host_info, both recorders."""
    modules = root / "ansible_collections" / "community" / "docker" / "plugins" / "modules"
    modules.mkdir(parents=True)
    (modules.parent.parent / "galaxy.yml").write_text("namespace: community\nname: docker\nversion: 0.0.0\n")
    for module in ("docker_container", "docker_host_info"):
        (modules / f"{module}.py").write_text(_FAKE_MODULE.replace("__MODULE__", module))
    return root


def server_play() -> dict[str, Any]:
    """The play of playbooks/serve.yml that includes the vllm_server role (the image play is not this test's)."""
    plays = yaml.safe_load((REPO / "playbooks" / "serve.yml").read_text())
    found = [
        p
        for p in plays
        if any((t.get("ansible.builtin.include_role") or {}).get("name") == "zenops.inference.vllm_server"
               for t in p.get("tasks", []))
    ]  # fmt: skip
    assert len(found) == 1, "playbooks/serve.yml should have one play that includes zenops.inference.vllm_server"
    return dict(found[0])


def render(tmp_path: Path, plans: dict[str, dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Run the server play in check mode for these plans; host -> docker_container params of each of its instances
    (exactly as many as planned), and the json callback's output (task results)."""
    playbook = tmp_path / "serve-servers.yml"
    playbook.write_text(yaml.safe_dump([server_play()], sort_keys=False))
    api_key = tmp_path / "api-key"
    api_key.write_text("not-a-real-key\n")
    api_key.chmod(0o600)
    hosts = {h: {"vllm_server_data_dir": str(tmp_path / h / "data")} for h in plans}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": hosts,
                    "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                }
            }
        )
    )
    extravars = tmp_path / "vars.json"
    extravars.write_text(
        json.dumps(
            {
                # what zenops.serve.serve_inventory passes to serve.yml
                "zenops_plans": plans,
                "vllm_server_api_key_file": str(api_key),
                "vllm_server_model": MODEL,
                "vllm_server_model_dir": "",
                "vllm_server_deployment": "hosts",
                # set by the vllm_image role's play in a real run
                "vllm_image_ref": "zenops/vllm-zen:test",
                # nothing runs in check mode, so there is nothing to wait for; and no sudo needed on localhost
                "vllm_server_health": False,
                "ansible_become": False,
            }
        )
    )
    record = tmp_path / "docker-calls.jsonl"
    collections = stand_in_docker(tmp_path / "stand-in")
    env = ansible_json_env(
        tmp_path / "ansible-tmp", collections=str(collections), ZENOPS_TEST_DOCKER_RECORD=str(record)
    )
    output = json_of(run_playbook(playbook, inventory, env, extra=f"@{extravars}", args=["--check"], timeout=300))
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert {c["module"] for c in calls} == {"docker_container", "docker_host_info"}, "the stand-in was not used"
    started: dict[str, list[dict[str, Any]]] = {h: [] for h in plans}
    for call in calls:
        if call["module"] == "docker_container":
            # the host is known by its data dir (the volumes name it)
            host = next(h for h in plans if any(v.startswith(hosts[h]["vllm_server_data_dir"] + "/")
                                                for v in call["params"]["volumes"]))  # fmt: skip
            started[host].append(call["params"])
    for host, containers in started.items():
        planned = len(plans[host]["instances"])
        assert len(containers) == planned, f"{host}: {planned} instance(s) planned, {len(containers)} started"
    return started, output


def task_results(output: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """host -> result of the task called ``name`` (the json callback's output)."""
    for play in output["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] in (name, f"zenops.inference.vllm_server : {name}"):
                return dict(task["hosts"])
    raise AssertionError(f"no task {name!r} ran")


def plan_for(facts: dict[str, Any], platform: str = "auto", **options: Any) -> dict[str, Any]:
    """The plan `zenops up --model Qwen/Qwen3-4B [--platform P] [--objective O ...]` makes for these facts
    (zenops.serve's own code)."""
    combo = resolve_engine(ServeRequest(model=MODEL, platform=platform), lambda _w: None).combo
    opts = PlanOptions(platform=platform, vllm_version=combo.vllm, **options)
    plans = make_plans({"h": facts}, catalog.get_model(MODEL), opts, load())
    return plans["h"].to_dict()


# The two kinds of host this project draws, and what each must get.
ZEN4 = "zen4-vm-hotplug"  # AMD EPYC (Zen 4) VM with AVX-512: zen, zentorch visible
AVX2 = "epyc-7763-vm"  # AMD EPYC (Zen 3) VM with AVX2 and no AVX-512: cpu, zentorch hidden


def test_the_fixtures_are_the_two_kinds_of_host():
    zen4, avx2 = host_facts(ZEN4), host_facts(AVX2)
    assert zen4["vendor"] == avx2["vendor"] == "AuthenticAMD"
    assert {"avx2", "avx512f", "avx512_bf16"} <= set(zen4["flags"])
    assert "avx2" in avx2["flags"]
    assert not [f for f in avx2["flags"] if f.startswith("avx512")]


def test_both_kinds_of_host_from_facts_to_container_settings(tmp_path):
    plans = {
        "zen4": plan_for(host_facts(ZEN4)),
        # what `zenops bench --compare-platforms` switches an AVX-512 host to for its second half
        "zen4-as-cpu": plan_for(host_facts(ZEN4), platform="cpu"),
        "avx2": plan_for(host_facts(AVX2)),
    }
    assert {h: p["platform"] for h, p in plans.items()} == {"zen4": "zen", "zen4-as-cpu": "cpu", "avx2": "cpu"}
    started, output = render(tmp_path, plans)
    assert set(started) == set(plans)
    hider = task_results(output, HIDER_TASK)

    for host, p in plans.items():
        inst = p["instances"][0]
        (params,) = started[host]
        data_dir = tmp_path / host / "data"
        hidden = p["platform"] == "cpu"
        env = params["env"]
        # zentorch: hidden exactly when the plan chose the stock CPU platform, by all three parts of the hider
        assert env["PYTHONPATH"] == (f"{NO_ZENTORCH}:{LIB}" if hidden else LIB), (host, env)
        assert (f"{data_dir}/no-zentorch:{NO_ZENTORCH}:ro" in params["volumes"]) is hidden, params["volumes"]
        assert hider[host].get("skipped", False) is not hidden, (host, hider[host])
        # the plan's settings reach the container as they are
        assert {k: env[k] for k in inst["env"]} == {k: str(v) for k, v in inst["env"].items()}
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == inst["omp_threads_bind"]
        # then vLLM's --shutdown-timeout (the role's default, 30 s: in-flight requests finish on stop), and Docker's
        # stop timeout above it, so vLLM is not killed before they do
        assert params["command"] == [
            MODEL, "--served-model-name", MODEL, "--host", "0.0.0.0", *inst["args"],
            "--middleware", "zenops_auth.RequireKey", "--shutdown-timeout", "30",
        ]  # fmt: skip
        assert int(params["stop_timeout"]) == 45, params.get("stop_timeout")
        assert str(inst["kv_cache_bytes"]) in params["command"]
        assert params["cpuset_cpus"] == inst["cpuset"] == inst["container"]["cpuset_cpus"]
        assert params["cpuset_mems"] == inst["container"]["cpuset_mems"]
        assert params["capabilities"] == ["SYS_NICE"]
        assert params["security_opts"] == ["seccomp=unconfined"]
        assert params["privileged"] is False
        assert params["network_mode"] == "host"
        assert params["labels"]["io.zenops.port"] == str(inst["port"])
        # the key: a file in a root-only directory, mounted read-only and read by the middleware at start; never in
        # the container's configuration (no env file either: docker inspect shows what it held)
        assert "VLLM_API_KEY" not in env
        assert "env_file" not in params or not params["env_file"], params.get("env_file")
        assert env["ZENOPS_API_KEY_FILE"] == "/run/zenops/secrets/api-key"
        assert f"{data_dir}/secrets/zenops-vllm:/run/zenops/secrets:ro" in params["volumes"], params["volumes"]

    # the host's own CPUs: every instance CPU is one the facts allow; the same host plans the same CPUs either way
    for host, name in (("zen4", ZEN4), ("zen4-as-cpu", ZEN4), ("avx2", AVX2)):
        allowed = set(host_facts(name)["allowed_cpus"])
        assert set(plans[host]["instances"][0]["cpus"]) <= allowed
    assert plans["zen4"]["instances"][0]["cpuset"] == plans["zen4-as-cpu"]["instances"][0]["cpuset"]


def test_zen_on_the_avx2_host_is_refused_before_any_host_is_touched():
    """`zenops bench --compare-platforms` on an AVX2-only host asks for the zen platform; the planner refuses it
    (exit 7, naming the fix), which bench reports as 'only the deployed platform was measured'."""
    with pytest.raises(PlanRefusedError) as info:
        plan_for(host_facts(AVX2), platform="zen")
    assert info.value.code == "zen_unsupported"
    assert info.value.exit_code == ExitCode.PLAN_REFUSED
    assert "no AVX-512" in info.value.message
    assert "--platform cpu" in str(info.value.hint)


@pytest.mark.parametrize("name", [ZEN4, AVX2])
def test_the_role_would_start_the_same_containers_for_a_plan_made_twice(name, tmp_path):
    """Plans are made anew on every `zenops up`; the facts' live memory must not make the role restart servers."""
    facts = host_facts(name)
    again = json.loads(json.dumps(facts))
    node = again["numa_nodes"][0]
    node["memory_total_kib"] = node["memory_total_kib"] * 2 // 3  # node 0's meminfo moved (hot-plugged memory)
    node["memory_free_kib"] = min(node["memory_free_kib"], node["memory_total_kib"])
    again["memory_available_kib"] = again["memory_available_kib"] // 2
    assert plan_for(facts) == plan_for(again)


def test_every_planned_instance_becomes_its_own_container(tmp_path):
    """Big hosts plan several instances (one per NUMA node; several per node for throughput): the role starts one
    container per instance, each with its own CPUs, memory node, port and name, as the plan says."""
    plans = {
        "two-socket": plan_for(host_facts("epyc-9755-2s"), objective="latency"),
        "zen5-throughput": plan_for(host_facts("epyc-9965-1s"), objective="throughput", concurrency=32),
    }
    assert len(plans["two-socket"]["instances"]) >= 2
    assert len(plans["zen5-throughput"]["instances"]) >= 2
    started, _ = render(tmp_path, plans)
    for host, p in plans.items():
        containers = started[host]
        by_port = {c["labels"]["io.zenops.port"]: c for c in containers}
        assert len(by_port) == len(p["instances"])  # one port each
        assert len({c["name"] for c in containers}) == len(containers)
        cpus_seen: set[int] = set()
        for inst in p["instances"]:
            params = by_port[str(inst["port"])]
            assert params["cpuset_cpus"] == inst["cpuset"]
            assert params["cpuset_mems"] == inst["container"]["cpuset_mems"]
            assert params["env"]["VLLM_CPU_OMP_THREADS_BIND"] == inst["omp_threads_bind"]
            # the key's middleware and the role's stop grace come after the plan's args
            tail = ["--middleware", "zenops_auth.RequireKey", "--shutdown-timeout", "30"]
            assert params["command"][-len(inst["args"]) - len(tail) :] == [*inst["args"], *tail]
            assert f"--port={inst['port']}" in params["command"] or str(inst["port"]) in params["command"]
            omp = set(parse_cpulist(inst["omp_threads_bind"].replace("|", ",")))
            assert omp == set(inst["cpus"])
            assert not omp & cpus_seen, f"{host}: instances share OpenMP CPUs"
            cpus_seen |= omp


# Every fixture host and the platform `zenops up` plans for it (auto): zen only on AMD with AVX-512. The CPUs the CI
# machines had (AVX2 EPYC, Intel Xeon, AMD Zen 4/5 with AVX-512) all here, whichever CPU runs the tests.
PLATFORM_OF = {
    "epyc-7763-2s": "cpu",  # AMD Zen 3, AVX2 only
    "epyc-7763-vm": "cpu",
    "epyc-9654-2s-nps4": "zen",  # AMD Zen 4
    "epyc-9755-2s": "zen",  # AMD Zen 5
    "epyc-9965-1s": "zen",
    "gp-5-24-96": "zen",
    "vm-8-smt-adjacent": "zen",
    "vm-8-smt-interleaved": "zen",
    "zen4-vm-hotplug": "zen",
    "xeon-8480-2s": "cpu",  # Intel with AVX-512 (and AMX): zentorch is AMD's
    "xeon-e5-2680v4-2s": "cpu",  # Intel, AVX2 only
}


def test_every_fixture_host_is_in_the_platform_table():
    assert sorted(PLATFORM_OF) == sorted(p.stem for p in FACTS.glob("*.json"))


@pytest.mark.parametrize("name", sorted(PLATFORM_OF))
def test_each_fixture_host_gets_the_platform_its_cpu_allows(name):
    p = plan_for(host_facts(name))
    assert p["platform"] == PLATFORM_OF[name], p["platform_reason"]


def test_zen_on_an_intel_host_with_avx512_is_refused_naming_amd():
    with pytest.raises(PlanRefusedError) as info:
        plan_for(host_facts("xeon-8480-2s"), platform="zen")
    assert info.value.code == "zen_unsupported"
    assert "zentorch is AMD's plugin and this is GenuineIntel" in info.value.message
    assert "--platform cpu" in str(info.value.hint)
