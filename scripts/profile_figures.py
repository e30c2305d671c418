#!/usr/bin/env python3
"""Helpers of scripts/profile-serving: the engine image, the plan as docker arguments, the server's token counter,
and where py-spy's samples went.

python3 scripts/profile_figures.py engine-image                  the engine image zenops builds with --image-source pip
python3 scripts/profile_figures.py engine-vllm                   its vLLM version (the plan's --vllm)
python3 scripts/profile_figures.py engine-tarball                its tarball in the image cache ('' when absent)
python3 scripts/profile_figures.py docker-args PLAN MODEL PORT   the plan's container settings, one argument per line
python3 scripts/profile_figures.py engine-args PLAN MODEL PORT   the plan's engine arguments, one per line
python3 scripts/profile_figures.py metrics PORT                  vllm:generation_tokens_total now
python3 scripts/profile_figures.py report PLAN C BEFORE AFTER T0 T1 SAMPLES...
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import urllib.request
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

# Where a main-thread sample went, by the frames of its stack (py-spy's "function (file:line)"): the first rule that
# matches wins, so the specific ones (attention, called from inside the compiled graph) come before the general ones.
RULES: tuple[tuple[str, str], ...] = (
    ("waiting for the other process (shm message queue: spins in sched_yield)", r"SpinCondition\.wait|acquire_read"),
    ("model: attention + KV cache write (cpu_attn)", r"CPUAttentionBackendImpl|cpu_attn|reshape_and_cache"),
    ("model: slot mapping", r"slot_mapping"),
    ("model: sampling", r"Sampler|sampler|TopKTopP|_sample\b|sample_tokens"),
    (
        "model: logits / linear layers outside the graph",
        r"compute_logits|unquantized_gemm|WNA16|scaled_mm|apply_weights",
    ),
    ("model: compiled graph (linear layers, norms, rotary, activations)", r"CompiledFxGraph|compiled_fx|Runner\.call"),
    ("model: other forward", r"\bforward\b|execute_model|_model_forward"),
    ("engine: input preparation", r"_prepare_inputs|_update_states|input_batch"),
    ("engine: scheduler", r"Scheduler\.|\bschedule\b"),
    ("engine: output processing / IPC", r"OutputProcessor|process_outputs|update_from_output|Socket\.send|enqueue"),
    ("frontend: tokenizer / detokenizer", r"tokeniz|detokeniz"),
    ("frontend: HTTP / streaming", r"starlette|uvicorn|fastapi|serving|completion"),
    ("frontend: event loop (uvloop: epoll, idle or callbacks)", r"Runner\.run$|run_forever|_run_once"),
)


def engine_image() -> str:
    from zenops import compat  # noqa: PLC0415

    return compat.table().default.image_tag


def engine_vllm() -> str:
    from zenops import compat  # noqa: PLC0415

    return compat.table().default.vllm


def engine_tarball() -> str:
    cache = pathlib.Path(
        os.environ.get("ZENOPS_IMAGE_CACHE")
        or pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "zenops" / "images"
    )
    name = engine_image().replace("/", "_").replace(":", "_")
    found = sorted(cache.glob(f"{name}-*.tar"))
    return str(found[-1]) if found else ""


def _instance(plan_file: str) -> tuple[dict, dict]:
    plan = json.loads(pathlib.Path(plan_file).read_text())
    plan = plan["plans"][0] if plan.get("plans") else plan
    return plan, plan["instances"][0]


def docker_args(plan_file: str) -> list[str]:
    _plan, inst = _instance(plan_file)
    c = inst["container"]
    out = ["--cpuset-cpus", c["cpuset_cpus"], "--cpuset-mems", c["cpuset_mems"], "--shm-size", c["shm_size"]]
    for cap in c.get("cap_add") or []:
        out += ["--cap-add", cap]
    for opt in c.get("security_opts") or []:
        out += ["--security-opt", opt]
    for k, v in sorted(inst["env"].items()):
        out += ["-e", f"{k}={v}"]
    return out


def engine_args(plan_file: str, model: str, port: str) -> list[str]:
    _plan, inst = _instance(plan_file)
    args = list(inst["args"])
    args[args.index("--port") + 1] = port
    return [model, "--host", "127.0.0.1", *args]


def metrics(port: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:generation_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def classify(stack: str) -> str:
    frames = ";".join(f.split(" (", 1)[0] for f in stack.split(";"))
    for label, pattern in RULES:
        if re.search(pattern, frames):
            return label
    return "other"


def _process(stacks: Counter[str]) -> str:
    text = " ".join(stacks)
    if "WorkerProc" in text:
        return "worker (model runner: the OpenMP threads' host)"
    if "run_engine_core" in text:
        return "engine core (scheduler; hands each step to the worker)"
    if "ServeSubcommand" in text or "uvloop" in text:
        return "API server (HTTP, tokenizer, detokenizer)"
    return "other process"


def read_samples(path: str) -> Counter[str]:
    """The main thread's stacks (those from ``<module>``): py-spy with --idle samples every thread at every tick, so
    the main thread's share of a label is its share of the wall time; helper threads (monitors, sockets) idle."""
    out: Counter[str] = Counter()
    for line in pathlib.Path(path).read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack.startswith("<module>") and count.isdigit():
            out[stack] += int(count)
    return out


def report(plan_file: str, c: str, before: str, after: str, t0: str, t1: str, files: list[str]) -> str:
    seconds = float(t1) - float(t0)
    tok_s = (float(after) - float(before)) / seconds if seconds > 0 else 0.0
    lines = [
        f"served {tok_s:.1f} output tok/s at concurrency {c} (the server's own token counter over {seconds:.0f} s)"
    ]
    from zenops.report.loading import ceiling  # noqa: PLC0415  (what `zenops bench` compares with)

    plan, _inst = _instance(plan_file)
    roof = ceiling(plan, 0, concurrency=int(c), context_tokens=128 + 64)
    if roof:
        pct = tok_s / roof["ceiling_tok_s"]
        lines.append(f"the plan's ceiling at C={c}: {roof['ceiling_tok_s']:.1f} tok/s ({roof['binding']} bound, "
                     f"{roof['bandwidth_gbps']:.1f} GB/s): {pct:.0%} of it")  # fmt: skip
    else:
        lines.append("no ceiling: measure this machine first (`zenops facts --bandwidth --local`)")
    for f in files:
        stacks = read_samples(f)
        total = sum(stacks.values())
        if not total:
            continue
        by: Counter[str] = Counter()
        for stack, n in stacks.items():
            by[classify(stack)] += n
        lines.append(f"  {_process(stacks)}, pid {pathlib.Path(f).stem.split('-')[-1]}: {total} samples")
        lines.extend(f"    {n / total:6.1%}  {label}" for label, n in by.most_common())
    return "\n".join(lines)


def main() -> int:
    what, args = sys.argv[1], sys.argv[2:]
    if what == "engine-image":
        print(engine_image())
    elif what == "engine-vllm":
        print(engine_vllm())
    elif what == "engine-tarball":
        print(engine_tarball())
    elif what == "docker-args":
        print("\n".join(docker_args(args[0])))
    elif what == "engine-args":
        print("\n".join(engine_args(*args[:3])))
    elif what == "metrics":
        print(metrics(args[0]))
    elif what == "report":
        print(report(*args[:6], files=args[6:]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
