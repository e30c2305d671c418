"""Which platform branch this machine's CPU lets the e2e tests serve, and why the other one is not proven here.

zenops serves the zen platform (vLLM + zentorch) on an AMD CPU with AVX-512, and the stock CPU platform elsewhere
(README; zenops.planner.choose_platform). A real deployment on one machine proves only its own branch (and, on a zen
machine, the stock one too in `scripts/test --full`, whose `bench --compare-platforms` sweep restarts the server on
it). The e2e tests take one test per branch; the one this machine cannot take is a pytest SKIP whose reason says so, and
scripts/ci-timings lists it under "not proven on this machine" (tests/conftest.py writes the skips)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import REPO, load_file_module

BRANCHES = ("zen", "cpu")
# where the branch a machine cannot serve is checked all the same, from fixture facts (no Docker, no such CPU needed)
STAND_IN = "its plan and container settings are checked from fixture facts in tests/runner/test_plan_to_role.py"


def platform_for(cpu: dict[str, Any]) -> str:
    """What a host must get, from its facts or its /proc/cpuinfo (README: zentorch only on AMD with AVX-512; else the
    stock platform)."""
    amd_avx512 = cpu["vendor"] == "AuthenticAMD" and "avx512f" in cpu["flags"]
    return "zen" if amd_avx512 else "cpu"


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """This machine's CPU (vendor, model name, flags), read as the cpu_topology module reads a host's."""
    parser = load_file_module("_zenops_cpu_topology", REPO / "plugins" / "module_utils" / "cpu_topology.py")
    parsed = parser.parse_cpuinfo(cpuinfo.read_text())
    flags = sorted(parsed["all_flags"] & parser.INTERESTING_FLAGS)  # as the facts keep them
    return {"vendor": parsed["vendor"], "model_name": parsed["model_name"], "flags": flags}


def not_proven_here(branch: str, cpu: dict[str, Any], full: bool) -> str | None:
    """Why a serving e2e on this CPU cannot prove ``branch`` (the skip reason), or None when it does: a zen CPU serves
    zen, and the stock platform in the --full sweep; any other CPU serves the stock platform only."""
    if branch not in BRANCHES:
        raise ValueError(f"unknown platform branch {branch!r}: one of {', '.join(BRANCHES)}")
    mine = platform_for(cpu)
    what = f"{cpu.get('model_name') or 'unknown model'}, {cpu['vendor'] or 'unknown vendor'}"
    if branch == mine:
        return None
    if branch == "zen":
        why = "is not AMD (zentorch is AMD's plugin)" if cpu["vendor"] != "AuthenticAMD" else "has no AVX-512"
        return f"zentorch not served: this CPU ({what}) {why}; {STAND_IN}"
    if full:
        return None  # a zen CPU: the --full sweep's --compare-platforms restarts the server on the stock platform
    return (
        f"stock platform not served: this CPU ({what}) takes zen; the --full --compare-platforms sweep serves it "
        f"(scripts/test --full); {STAND_IN}"
    )
