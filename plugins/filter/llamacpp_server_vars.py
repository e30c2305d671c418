"""Filter zenops.inference.llamacpp_server_vars: the llama.cpp peer's role variables from a serving plan.

A thin adapter: the llama.cpp facts live in the zenops Python package (zenops.llamacpp, zenops.llamacpp_deploy),
which runs on the controller (ansible-playbook runs from zenops's own environment). There is no second copy here.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: llamacpp_server_vars
short_description: The llama.cpp peer's variables (role zenops.inference.llamacpp_server) from a serving plan
description:
  - Takes a serving plan (as C(zenops plan --json) or the C(zenops.inference.serving_plan) filter give it) and returns
    the variables role C(zenops.inference.llamacpp_server) reads - C(llamacpp_server_mounts),
    C(llamacpp_server_conversions) and C(llamacpp_server_instances) - with one llama-server per plan instance on the
    same cores, memory node, context and seats.
  - Needs the C(zenops) Python package on the controller.
options:
  _input:
    description: The serving plan.
    type: dict
    required: true
  model_name:
    description: The model's name (the last component of its Hugging Face directory); names the GGUF files.
    type: str
    required: true
  served_name:
    description: The name clients use (llama-server's --alias).
    type: str
    required: true
  format:
    description: The GGUF format served (bf16, q8_0, q4_k_m).
    type: str
    required: true
  concurrency:
    description: The highest concurrency to be measured (llama-server gets at least as many slots).
    type: int
    required: true
  convert:
    description: More GGUF formats to convert to besides O(format).
    type: list
    elements: str
    default: []
  host:
    description: The address llama-server listens on.
    type: str
    default: 0.0.0.0
"""

EXAMPLES = r"""
- name: The llama.cpp peer of this host's plan
  ansible.builtin.set_fact:
    zenops_llamacpp: >-
      {{ zenops_plan | zenops.inference.llamacpp_server_vars(model_name='tiny-llama', served_name='tiny-llama',
         format='q8_0', concurrency=4) }}
"""

RETURN = r"""
_value:
  description: The role's variables (llamacpp_server_mounts, llamacpp_server_conversions, llamacpp_server_instances).
  type: dict
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402

try:
    from zenops.errors import ZenopsError
    from zenops.llamacpp_deploy import role_vars

    IMPORT_ERROR = ""
except ImportError as e:  # pragma: no cover - only without the zenops package (or with one older than the filter)
    IMPORT_ERROR = str(e)


def llamacpp_server_vars(
    plan: dict[str, Any],
    model_name: str,
    served_name: str,
    format: str,  # the option's documented name (shadows the builtin here only)
    concurrency: int,
    convert: list[str] | None = None,
    host: str = "0.0.0.0",
) -> dict[str, Any]:
    if IMPORT_ERROR:
        raise AnsibleFilterError(
            f"llamacpp_server_vars needs the zenops Python package of this collection on the controller "
            f"({IMPORT_ERROR}): install zenops from the same checkout or release as the collection"
        )
    try:
        return role_vars(dict(plan), model_name=model_name, served_name=served_name, fmt=format,
                         concurrency=int(concurrency), convert=list(convert or []), host=host)  # fmt: skip
    except ZenopsError as e:
        raise AnsibleFilterError(f"{e.message}" + (f" (fix: {e.hint})" if e.hint else "")) from e


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamacpp_server_vars": llamacpp_server_vars}
