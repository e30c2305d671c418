"""Filter zenops.inference.serving_plan: the zenops planner, for templates and playbooks.

A thin adapter: the arithmetic lives in the zenops Python package (zenops.planner), which runs on the controller
(ansible-playbook runs from zenops's own environment). There is no second copy of the planning rules here.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: serving_plan
short_description: Derive the vLLM CPU serving plan from hardware facts
description:
  - Takes the facts of M(zenops.inference.cpu_topology) and a model id, returns the plan that C(zenops plan) prints
    (platform, instances with CPU binding, KV cache, env, args, container settings, reasons).
  - Needs the C(zenops) Python package on the controller.
options:
  _input:
    description: The C(zenops_cpu_topology) fact.
    type: dict
    required: true
  model:
    description: Model id from the zenops catalogue (for example C(Qwen/Qwen3-4B)) or a local model directory.
    type: str
    required: true
  dtype: {description: Weight and KV dtype., type: str, default: bfloat16}
  max_model_len: {description: Maximum tokens per request; omitted means automatic., type: int}
  max_num_seqs: {description: Maximum concurrent sequences; omitted means concurrency + 1., type: int}
  concurrency: {description: Expected concurrent requests., type: int, default: 4}
  instances: {description: Number of instances; omitted means automatic., type: int}
  platform: {description: auto, zen or cpu., type: str, default: auto}
  vllm_version: {description: vLLM release the plan is for., type: str}
  base_port: {description: Port of the first instance., type: int, default: 8000}
"""

EXAMPLES = r"""
- name: Plan the server from the host's facts
  ansible.builtin.set_fact:
    zenops_plan: "{{ zenops_cpu_topology | zenops.inference.serving_plan(model='Qwen/Qwen3-4B') }}"
"""

RETURN = r"""
_value:
  description: The plan, as C(zenops plan --json) prints it.
  type: dict
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402

try:
    from zenops.catalog import get_model
    from zenops.errors import ZenopsError
    from zenops.planner import PlanOptions, Topology, plan

    HAS_ZENOPS = True
except ImportError:  # pragma: no cover - only without the zenops package
    HAS_ZENOPS = False


def serving_plan(facts: dict[str, Any], model: str, **options: Any) -> dict[str, Any]:
    if not HAS_ZENOPS:
        raise AnsibleFilterError("serving_plan needs the zenops Python package on the controller: pip install zenops")
    try:
        opts = PlanOptions(**{k: v for k, v in options.items() if v is not None})
    except TypeError as e:
        raise AnsibleFilterError(f"serving_plan: {e}") from e
    try:
        return plan(Topology.from_facts(facts), get_model(model), opts).to_dict()
    except ZenopsError as e:
        raise AnsibleFilterError(f"{e.message}" + (f" (fix: {e.hint})" if e.hint else "")) from e


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"serving_plan": serving_plan}
