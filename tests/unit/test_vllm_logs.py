"""Reading vLLM's log: which platform loaded, and the lines that explain a failed start (module_utils/vllm_logs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).parents[2] / "plugins" / "module_utils" / "vllm_logs.py"
_spec = importlib.util.spec_from_file_location("vllm_logs", _PATH)
assert _spec is not None
assert _spec.loader is not None
vllm_logs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_logs)

INFO = "INFO 11-21 10:00:00 [__init__.py:1] "


@pytest.mark.parametrize(
    ("line", "platform"),
    [
        ("AMD Zen CPU detected with zentorch installed, using ZenCpuPlatform.", "zen"),
        ("Platform plugin zentorch is activated", "zen"),
        ("Automatically detected platform cpu.", "cpu"),
        ("AMD Zen CPU detected but zentorch failed to import, falling back to CpuPlatform...", "cpu"),
        (
            "[zentorch] AVX-512 not detected; zentorch optimizations are disabled. Falling back to the stock vLLM "
            "CPU platform.",
            "cpu",
        ),
        ("Starting vLLM server on http://0.0.0.0:8000", "unknown"),
    ],
)
def test_platform_from_one_line(line, platform):
    detected, evidence = vllm_logs.detect_platform(["noise", INFO + line, "more noise"])
    assert detected == platform
    assert evidence == ("" if platform == "unknown" else (INFO + line).strip())


def test_a_fallback_wins_over_a_zen_mention():
    lines = [
        INFO + "AMD Zen CPU detected but zentorch failed to import, falling back to CpuPlatform...",
        INFO + "Automatically detected platform cpu.",
    ]
    assert vllm_logs.detect_platform(lines)[0] == "cpu"


@pytest.mark.parametrize(
    ("expected", "detected", "ok"),
    [
        ("zen", "zen", True),
        ("zen", "cpu", False),
        ("cpu", "zen", False),
        ("zen", "unknown", True),
        ("any", "cpu", True),
    ],
)
def test_platform_check(expected, detected, ok):
    problem = vllm_logs.check_platform(expected, detected)
    assert (problem is None) == ok
    if not ok:
        assert f"plan chose the {expected} platform but vLLM loaded the {detected}" in problem


def test_failure_hints_pick_the_telling_lines():
    lines = [
        "INFO loading weights",
        "ValueError: Available memory on node 0 (1.2/3.0 GiB) on startup is less than desired CPU memory utilization",
        "INFO shutting down",
    ]
    assert vllm_logs.failure_hints(lines) == [lines[1]]
    assert vllm_logs.failure_hints(["all fine"]) == []


@pytest.mark.parametrize(
    ("output", "platform"),
    [
        ("ZENOPS_PLATFORM vllm.platforms.zen_cpu ZenCpuPlatform\n", "zen"),
        ("some warning\nZENOPS_PLATFORM vllm.platforms.cpu CpuPlatform\n", "cpu"),
        ("ZENOPS_PLATFORM zentorch.vllm.platform ZentorchPlatform\n", "zen"),  # the out-of-tree plugin (< 0.18)
        ("ZENOPS_PLATFORM vllm.platforms.interface UnspecifiedPlatform\n", "unknown"),
        ("Traceback ...\n", "unknown"),
    ],
)
def test_platform_from_the_in_container_probe(output, platform):
    detected, evidence = vllm_logs.platform_from_probe(output)
    assert detected == platform
    if "ZENOPS_PLATFORM" in output:
        assert "current_platform in the container is" in evidence
