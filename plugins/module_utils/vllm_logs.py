"""Read a vLLM server's log: which platform loaded (Zen with zentorch, or the stock CPU backend) and why it failed.

Pure functions over log lines, shared by the vllm_health module and unit-tested directly. The lines come from vLLM
0.11-0.33 (see the log lines in docs/reference/vllm-zentorch.md); the Zen platform line is DEBUG in 0.18/0.20,
so "unknown" is a possible, honest answer.
"""

from __future__ import annotations

import re

# first match wins: fallbacks mention "CpuPlatform" too, so they come before the Zen patterns
_PLATFORM_PATTERNS = (
    ("cpu", re.compile(r"zentorch failed to import, falling back to CpuPlatform", re.IGNORECASE)),
    ("cpu", re.compile(r"zentorch optimizations are disabled\. Falling back to the stock vLLM CPU platform")),
    ("zen", re.compile(r"using ZenCpuPlatform")),
    ("zen", re.compile(r"Platform plugin zentorch is activated")),
    ("cpu", re.compile(r"Automatically detected platform cpu\b")),
)

# lines that explain a failed start, worth showing first
_FAILURE_PATTERNS = (
    re.compile(r"Illegal instruction|SIGILL"),
    re.compile(r"is less than desired CPU memory utilization"),
    re.compile(r"less than requested memory for kv"),
    re.compile(r"KV cache is needed"),
    re.compile(r"get_mempolicy|set_mempolicy|Operation not permitted"),
    re.compile(r"No space left on device|/dev/shm"),
    re.compile(r"Unsupported vLLM"),
    re.compile(r"(Error|Exception):"),
)


def detect_platform(lines):
    """(platform, evidence): platform is zen, cpu or unknown; evidence is the log line that decided it."""
    for platform, pattern in _PLATFORM_PATTERNS:
        for line in lines:
            if pattern.search(line):
                return platform, line.strip()
    return "unknown", ""


# Printed by the probe below; vLLM 0.32 decides its platform before logging is set up, so its log has no line.
PROBE_CODE = (
    "from vllm.platforms import current_platform as p; print('ZENOPS_PLATFORM', type(p).__module__, type(p).__name__)"
)


def platform_from_probe(output):
    """(platform, evidence) from the output of PROBE_CODE run inside the server's container."""
    for line in output.splitlines():
        if line.startswith("ZENOPS_PLATFORM "):
            _tag, module, name = ([*line.split(), "", ""])[:3]
            evidence = f"vllm.platforms.current_platform in the container is {module}.{name}"
            if "Zen" in name or "zentorch" in module:
                return "zen", evidence
            if name == "CpuPlatform":
                return "cpu", evidence
            return "unknown", evidence
    return "unknown", ""


def failure_hints(lines, limit=5):
    """The log lines that most likely explain a failed start, in log order, at most ``limit``."""
    hits = [line.strip() for line in lines if any(p.search(line) for p in _FAILURE_PATTERNS)]
    return hits[-limit:]


def check_platform(expected, detected):
    """None if the detected platform is acceptable for the expected one, else the reason it is not."""
    if expected in ("", "any", None) or detected == expected:
        return None
    if detected == "unknown":
        return None  # the log does not say (DEBUG-only line in some releases): the caller warns
    return f"the plan chose the {expected} platform but vLLM loaded the {detected} platform"
