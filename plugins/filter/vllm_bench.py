"""Filters of the vllm_server role's ``bench`` entry point: the benchmark client's command line and what zenops
records of a server.

A thin adapter: the logic lives in the zenops Python package (zenops.bench), which runs on the controller, with its
unit tests. There is no second copy of it here.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_bench_argv
short_description: The docker command line of one vllm bench serve run against one zenops server
description:
  - Returns C(docker run ... vllm bench serve ...) as a list, for M(ansible.builtin.command) C(argv).
  - The client runs in the server's image, with the server's volumes (model, Hugging Face cache), on the host
    network, pinned to O(cpuset) when given, reading the API key from O(env_file) (never from the command line).
  - The companion filters are C(vllm_bench_server) (a server's C(docker inspect) data without its environment),
    C(vllm_bench_free_cpus) (online CPUs no server holds), C(vllm_bench_stem) (a result's file name),
    C(vllm_bench_describe) (a server's record) and C(vllm_bench_failures) (why runs failed).
options:
  _input:
    description: One run (C(zenops.bench.BenchRun.to_dict())).
    type: dict
    required: true
  server: {description: The server (output of C(vllm_bench_server))., type: dict, required: true}
  run_id: {description: The benchmark run id., type: str, required: true}
  result_dir: {description: Directory on the host that receives the result., type: str, required: true}
  platform: {description: The platform the server runs (zen or cpu)., type: str, required: true}
  cpuset: {description: CPUs of the client; empty means unpinned., type: str, default: ""}
  env_file: {description: Root-only env file with OPENAI_API_KEY., type: str, default: ""}
  metadata: {description: Extra KEY=VALUE metadata of the result., type: dict}
"""

EXAMPLES = r"""
- name: Run the benchmark
  ansible.builtin.command:
    argv: "{{ run | zenops.inference.vllm_bench_argv(server=srv, run_id=id, result_dir=dir, platform='zen') }}"
"""

RETURN = r"""
_value:
  description: The argv of C(docker run).
  type: list
  elements: str
"""

from collections.abc import Mapping  # noqa: E402
from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402

try:
    from zenops import bench

    HAS_ZENOPS = True
except ImportError:  # pragma: no cover - only without the zenops package
    HAS_ZENOPS = False


def _need() -> None:
    if not HAS_ZENOPS:
        raise AnsibleFilterError("the vllm_bench filters need the zenops Python package on the controller")


def vllm_bench_argv(run: Mapping[str, Any], **kwargs: Any) -> list[str]:
    _need()
    try:
        return bench.bench_argv(run, **kwargs)
    except (KeyError, TypeError) as e:
        raise AnsibleFilterError(f"vllm_bench_argv: {e}") from e


def vllm_bench_server(inspect: Mapping[str, Any]) -> dict[str, Any]:
    _need()
    return bench.server_view(inspect)


def vllm_bench_free_cpus(online: str, used: list[str]) -> str:
    _need()
    try:
        return bench.free_cpus(online, used)
    except ValueError as e:
        raise AnsibleFilterError(f"vllm_bench_free_cpus: {e}") from e


def vllm_bench_stem(run: Mapping[str, Any], platform: str) -> str:
    _need()
    return bench.result_stem(platform, run)


def vllm_bench_describe(servers: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    _need()
    return bench.describe_servers(servers, **kwargs)


def vllm_bench_failures(results: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    _need()
    return bench.run_failures(results, **kwargs)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_bench_argv": vllm_bench_argv,
            "vllm_bench_server": vllm_bench_server,
            "vllm_bench_free_cpus": vllm_bench_free_cpus,
            "vllm_bench_stem": vllm_bench_stem,
            "vllm_bench_describe": vllm_bench_describe,
            "vllm_bench_failures": vllm_bench_failures,
        }
