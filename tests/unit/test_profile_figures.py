"""scripts/profile_figures.py (the reader behind scripts/profile-serving): which py-spy samples count (the main
thread's) and where each goes. The fixture is five real collapsed stacks of a vLLM 0.32.0 worker at C=4 (py-spy 0.4.3
`--format raw --idle`, scripts/profile-serving on the 2-vCPU Zen 4 VM): attention, the compiled graph, slot mapping,
the shared-memory queue spin, and a helper thread (the death-pipe monitor) that must not count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("profile_figures", REPO / "scripts" / "profile_figures.py")
assert _spec is not None
assert _spec.loader is not None
pf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pf)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy" / "worker-c4.txt"


def test_only_the_main_threads_samples_count_and_each_lands_where_its_frames_say():
    samples = pf.read_samples(str(FIXTURE))
    assert sum(samples.values()) == 2 + 7 + 42 + 1  # the helper thread's 1846 idle samples are left out
    by_label = {pf.classify(stack): n for stack, n in samples.items()}
    assert by_label == {
        "model: attention + KV cache write (cpu_attn)": 2,
        "model: compiled graph (linear layers, norms, rotary, activations)": 7,
        "model: slot mapping": 42,
        "waiting for the other process (shm message queue: spins in sched_yield)": 1,
    }
    assert pf._process(samples) == "worker (model runner: the OpenMP threads' host)"


def test_an_unknown_stack_is_other_not_a_guess():
    assert pf.classify("<module> (x.py:1);main (x.py:2);something_else (y.py:3)") == "other"
