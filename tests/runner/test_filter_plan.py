"""The filter plugin zenops.inference.serving_plan in a real playbook gives exactly what the library plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zenops import catalog
from zenops.errors import RunFailedError
from zenops.planner import PlanOptions, Topology, plan
from zenops.runner import RunnerSettings, RunSpec, run_playbook

FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "facts" / "gp-5-24-96.json"

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Plan through the filter
      ansible.builtin.set_fact:
        zenops_plan: "{{ topology | zenops.inference.serving_plan(model=model, vllm_version='0.11.0') }}"
"""


def test_filter_matches_the_library(tmp_path, local_inventory):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    facts = json.loads(FACTS.read_text())
    result = run_playbook(
        RunSpec(playbook=pb, inventory=local_inventory, extravars={"topology": facts, "model": "Qwen/Qwen3-4B"}),
        RunnerSettings(state_dir=tmp_path / "state"),
    )
    got = result.host_facts["localhost"]["zenops_plan"]
    want = plan(Topology.from_facts(facts), catalog.get_model("Qwen/Qwen3-4B"), PlanOptions(vllm_version="0.11.0"))
    assert got == json.loads(json.dumps(want.to_dict()))
    assert got["instances"][0]["omp_threads_bind"] == "1-23"


def test_filter_refusal_fails_the_task_with_the_fix(tmp_path, local_inventory):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    facts = json.loads(FACTS.read_text())
    with pytest.raises(RunFailedError) as info:
        run_playbook(
            RunSpec(
                playbook=pb,
                inventory=local_inventory,
                extravars={"topology": facts, "model": "meta-llama/Llama-3.3-70B-Instruct"},
            ),
            RunnerSettings(state_dir=tmp_path / "state"),
        )
    message = info.value.failures[0].message
    assert "does not fit" in message
    assert "fix:" in message
