"""zenops bandwidth probe: the two roofs of one NUMA node, measured with the engine's own torch (and zentorch).

Run by the vllm_server role's ``bandwidth`` entry point inside a short-lived container of the engine image, pinned
with ``docker run --cpuset-cpus <the node's cores> --cpuset-mems <node>``:

* memory: a STREAM-triad (``a = b + s * c``) over float32 arrays far larger than the L3 caches the process can see,
  on one thread per core; the best of several passes, as STREAM reports it;
* compute: a bf16 GEMM (``torch.matmul``, what the engine's linear layers call; zentorch's ops when it is installed
  and exposes ``zentorch_mm``), on the same threads; the best of several.

Then the same with fewer threads (``scaling``: 1, 2, 4, ... and one less than all), each in a process of its own
bound to that many of the node's first cores, as a vLLM instance with that many OpenMP threads binds: a node's
bandwidth does not scale with its cores the same way everywhere (on a VM, one thread moved 19 GB/s and two 36), so
each instance's ceiling is read at its own thread count (zenops.planner.Measurement.at).

It prints one JSON object of raw timings (elements, bytes, seconds, matrix sizes); the controller computes GB/s and
GFLOP/s from them (zenops.bandwidth.parse_probe), so the arithmetic lives in tested code. Nothing else is printed
on stdout. Standard library + torch only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

MIB = 1024 * 1024


def _l3_bytes() -> int:
    """Sum of the distinct L3 caches of the CPUs this process may run on (sysfs), 0 when unknown."""
    seen: dict[str, int] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        base = f"/sys/devices/system/cpu/cpu{cpu}/cache"
        for index in glob.glob(f"{base}/index*"):
            try:
                with open(f"{index}/level") as f:
                    if f.read().strip() != "3":
                        continue
                with open(f"{index}/shared_cpu_list") as f:
                    key = f.read().strip()
                with open(f"{index}/size") as f:
                    raw = f.read().strip().upper()
            except OSError:
                continue
            unit = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(raw[-1:], 1)
            digits = raw.rstrip("KMGB")
            if digits.isdigit():
                seen[key] = int(digits) * unit
    return sum(seen.values())


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bf16 natively (AVX-512 BF16 or AMX BF16)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return True  # unknown: as before


def _best(fn, repeat: int, min_seconds: float) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Best wall time of ``fn`` over at least ``repeat`` calls and ``min_seconds`` in total (after one warm-up)."""
    fn()
    best = float("inf")
    runs = 0
    started = time.perf_counter()
    while runs < repeat or time.perf_counter() - started < min_seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best, runs


def thread_steps(threads: int) -> list[int]:
    """The thread counts measured besides all of them: the powers of two below, and one less than all (an instance
    that leaves a core to its frontend)."""
    steps = {1 << i for i in range(threads.bit_length()) if 1 << i < threads}
    if threads > 2:
        steps.add(threads - 1)
    return sorted(steps)


def _scaling(args, cpus: list[int]) -> list[dict]:  # type: ignore[no-untyped-def]
    """Each of :func:`thread_steps`: this probe again, in a process bound to that many of the first cores."""
    out = []
    for k in thread_steps(len(cpus)):
        argv = [sys.executable, os.path.abspath(__file__), "--node", str(args.node), "--threads", str(k),
                "--first-cpus", str(k), "--no-scale", "--repeat", "3", "--min-seconds", "0.3"]  # fmt: skip
        if not args.zentorch:
            argv.append("--no-zentorch")
        if args.array_mib:
            argv += ["--array-mib", str(args.array_mib)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the {k}-thread run failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        child = json.loads(lines[-1])
        out.append({"threads": k, "cpus": child["cpus"], "triad": child["triad"], "gemm": child["gemm"]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--threads", type=int, default=0, help="threads (default: the CPUs this process may use)")
    parser.add_argument(
        "--no-zentorch",
        dest="zentorch",
        action="store_false",
        help="never import zentorch (hosts that run the stock CPU platform: no AVX-512, or not AMD)",
    )
    parser.add_argument("--zentorch", dest="zentorch", action="store_true", help="use zentorch when present (default)")
    parser.add_argument("--array-mib", type=int, default=0, help="MiB per triad array (default: 4 x L3, >= 256)")
    parser.add_argument("--gemm", type=int, default=0, help="GEMM size n (n x n x n; default from the threads)")
    parser.add_argument("--first-cpus", type=int, default=0, help="bind to the first N CPUs allowed (a scaling run)")
    parser.add_argument("--no-scale", dest="scale", action="store_false", help="measure with all threads only")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    args = parser.parse_args()
    if args.first_cpus:  # before torch starts its threads: they inherit this binding
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.first_cpus])

    import torch

    zentorch_version = None
    if args.zentorch:
        try:
            import zentorch  # noqa: F401  (registers its ops)

            zentorch_version = getattr(zentorch, "__version__", "unknown")
        except Exception:  # noqa: BLE001 - absent or not loadable on this CPU: torch alone is the engine then
            pass

    cpus = sorted(os.sched_getaffinity(0))
    threads = args.threads or len(cpus)
    torch.set_num_threads(threads)

    l3 = _l3_bytes()
    array_bytes = args.array_mib * MIB if args.array_mib else max(256 * MIB, 4 * l3)
    available = _available_bytes()
    if available and 3 * array_bytes > available // 2:  # never crowd out the servers: at most half of what is free
        array_bytes = max(64 * MIB, available // 6)
    elements = array_bytes // 4
    a = torch.zeros(elements, dtype=torch.float32)
    b = torch.full((elements,), 1.0, dtype=torch.float32)
    c = torch.full((elements,), 2.0, dtype=torch.float32)

    def triad() -> None:
        torch.add(b, c, alpha=3.0, out=a)

    triad_s, triad_runs = _best(triad, args.repeat, args.min_seconds)
    if float(a[elements // 2]) != 7.0:
        print(json.dumps({"error": "triad gave a wrong result"}))
        return 1
    del a, b, c

    n = args.gemm or (4096 if threads >= 32 else 2048)
    # bf16 where the CPU computes it natively; elsewhere (AVX2, AVX-512 without BF16) torch's bf16 matmul falls to a
    # path 20-50x slower than float32 (0.4-1 GFLOP/s on a 2-vCPU AMD EPYC with AVX2, where float32 ran 17-20): the
    # engine's kernels convert bf16 to float32 there, so float32's rate is the compute roof, an upper bound
    gemm_dtype = torch.bfloat16 if native_bf16() else torch.float32
    x = torch.randn(n, n, dtype=torch.float32).to(gemm_dtype)
    y = torch.randn(n, n, dtype=torch.float32).to(gemm_dtype)
    mm = torch.matmul
    gemm_how = "torch.matmul"
    if zentorch_version is not None and hasattr(torch.ops, "zentorch") and hasattr(torch.ops.zentorch, "zentorch_mm"):
        try:
            torch.ops.zentorch.zentorch_mm(x[:64, :64], y[:64, :64])
            mm = torch.ops.zentorch.zentorch_mm
            gemm_how = "zentorch_mm"
        except Exception:  # noqa: BLE001 - fall back to torch's own matmul
            pass

    def gemm() -> None:
        mm(x, y)

    gemm_s, gemm_runs = _best(gemm, max(3, args.repeat // 2), args.min_seconds)
    del x, y
    try:
        scaling = _scaling(args, cpus) if args.scale else []
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        print(json.dumps({"error": f"scaling: {e}"}))
        return 1

    print(
        json.dumps(
            {
                "probe": "zenops-bandwidth",
                "schema": 2,
                "node": args.node,
                "cpus": cpus,
                "threads": threads,
                "l3_bytes": l3,
                "triad": {
                    "elements": elements,
                    "element_bytes": 4,
                    "arrays": 3,
                    "best_s": triad_s,
                    "runs": triad_runs,
                },
                "gemm": {
                    "m": n,
                    "n": n,
                    "k": n,
                    "dtype": str(gemm_dtype).removeprefix("torch."),
                    "op": gemm_how,
                    "best_s": gemm_s,
                    "runs": gemm_runs,
                },
                "scaling": scaling,
                "torch": torch.__version__,
                "zentorch": zentorch_version,
                "python": sys.version.split()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
