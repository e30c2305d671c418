"""Filters of the vllm_server role's ``bench`` entry point: the benchmark client's command line and what zenops
records of a server.

A thin adapter: the logic lives in the zenops Python package (zenops.bench.client), which runs on the controller,
with its unit tests. There is no second copy of it here.
"""

from __future__ import annotations

# The documentation of each filter is its own file next to this one, plugins/filter/<filter name>.yml:
# ansible-doc reads those only while this file has no DOCUMENTATION (see tests/unit/test_ansible_doc.py).
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from zenops.bench import client

    HAS_ZENOPS = True
except ImportError:  # pragma: no cover - only without the zenops package
    HAS_ZENOPS = False


def _need() -> None:
    if not HAS_ZENOPS:
        raise AnsibleFilterError("the vllm_bench filters need the zenops Python package on the controller")


def vllm_bench_argv(run: Mapping[str, Any], **kwargs: Any) -> list[str]:
    _need()
    try:
        return client.bench_argv(run, **kwargs)
    except (KeyError, TypeError, ValueError) as e:
        raise AnsibleFilterError(f"vllm_bench_argv: {e}") from e


def vllm_bench_server(inspect: Mapping[str, Any]) -> dict[str, Any]:
    _need()
    return client.server_view(inspect)


def vllm_bench_free_cpus(online: str, used: list[str]) -> str:
    _need()
    try:
        return client.free_cpus(online, used)
    except ValueError as e:
        raise AnsibleFilterError(f"vllm_bench_free_cpus: {e}") from e


def vllm_bench_stem(run: Mapping[str, Any], platform: str) -> str:
    _need()
    return client.result_stem(platform, run)


def vllm_bench_describe(servers: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    _need()
    return client.describe_servers(servers, **kwargs)


def vllm_bench_failures(results: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    _need()
    return client.run_failures(results, **kwargs)


def vllm_bench_artifacts(paths: list[str], result_dir: str) -> list[str]:
    _need()
    try:
        return client.artifact_paths(paths, result_dir)
    except ValueError as e:
        raise AnsibleFilterError(f"vllm_bench_artifacts: {e}") from e


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "vllm_bench_argv": vllm_bench_argv,
            "vllm_bench_server": vllm_bench_server,
            "vllm_bench_free_cpus": vllm_bench_free_cpus,
            "vllm_bench_stem": vllm_bench_stem,
            "vllm_bench_describe": vllm_bench_describe,
            "vllm_bench_failures": vllm_bench_failures,
            "vllm_bench_artifacts": vllm_bench_artifacts,
        }
