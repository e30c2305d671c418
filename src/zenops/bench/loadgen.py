"""zenops's own load client, the light alternative to `vllm bench serve` (BenchRequest.client "zenops"; the rollout's
performance gate uses it): the same command-line flags (the ones it needs; the others are accepted and ignored), the
same result JSON keys and text summary, so the report, the gate and the artifacts read it as they read vllm's.

It runs inside the bench client container as the engine image's python3 (its source is a ``-c`` program: standard
library only, nothing of zenops), so it starts in about a second: `vllm bench serve` imports torch and vLLM and loads
the tokenizer first, 14 s of a 16 s gate run on an idle 2-core AVX2 EPYC (2026-11-27, a tiny model, 8 prompts).

What it sends, like vLLM's random dataset: ``--num-prompts`` completions of ``--random-input-len`` random token ids
(from the model's config.json vocab_size, under the --tokenizer directory when it is one; ids below 100 are left out:
special tokens live there), ``--random-output-len`` tokens each with ``--ignore-eos``, streamed, at most
``--max-concurrency`` at once, after ``--num-warmups`` unmeasured ones. Unlike vLLM's seed-0 dataset, every run draws
new prompts: a rollout's baseline runs and its canary's run meet the same prefix cache (none), not one that earlier
runs warmed. Token counts are the server's (``stream_options.include_usage``); TTFT is the first token's arrival,
ITL the gaps between streamed tokens, TPOT (end-to-end - TTFT) / (output tokens - 1), as vLLM computes them.
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

VOCAB_FLOOR = 100  # token ids below this are left out (special tokens)
FALLBACK_VOCAB = 1000  # a model whose config.json is not found: ids in [100, 1000), valid in every real vocabulary


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="zenops-load", add_help=False)
    for name in ("bench", "serve"):  # `vllm bench serve`'s subcommand words, when given
        p.add_argument(name, nargs="?")
    p.add_argument("--base-url", required=True)
    p.add_argument("--endpoint", default="/v1/completions")
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer", default="")
    p.add_argument("--random-input-len", type=int, default=64)
    p.add_argument("--random-output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--num-warmups", type=int, default=0)
    p.add_argument("--save-result", action="store_true")
    p.add_argument("--result-dir", default=".")
    p.add_argument("--result-filename", default="result.json")
    p.add_argument("--metadata", nargs="*", default=[])
    args, _ignored = p.parse_known_args(argv)
    return args


def vocab_size(tokenizer: str) -> int:
    try:
        with open(os.path.join(tokenizer, "config.json")) as f:
            cfg = json.load(f)
        size = int(cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        size = 0
    return size if size > VOCAB_FLOOR + 1 else FALLBACK_VOCAB


def prompts(count: int, length: int, vocab: int, rng: random.Random) -> list[list[int]]:
    return [[rng.randrange(VOCAB_FLOOR, vocab) for _ in range(length)] for _ in range(count)]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default, which vLLM uses)."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def one_request(url: str, key: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One streamed completion: its timings (s) and the server's token counts, or its error."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    out: dict[str, Any] = {"ok": False, "ttft": 0.0, "itl": [], "latency": 0.0, "prompt_tokens": 0, "output_tokens": 0}
    start = time.perf_counter()
    last = start
    chunks = 0
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if msg.get("usage"):
                    out["prompt_tokens"] = int(msg["usage"].get("prompt_tokens") or 0)
                    out["output_tokens"] = int(msg["usage"].get("completion_tokens") or 0)
                if any(c.get("text") for c in msg.get("choices") or []):
                    now = time.perf_counter()
                    if chunks == 0:
                        out["ttft"] = now - start
                    else:
                        out["itl"].append(now - last)
                    last = now
                    chunks += 1
        out["latency"] = time.perf_counter() - start
        out["ok"] = chunks > 0 and out["output_tokens"] > 0
        if not out["ok"]:
            out["error"] = "no tokens streamed"
    except (urllib.error.URLError, OSError, ValueError) as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def run_all(url: str, key: str, bodies: list[dict[str, Any]], concurrency: int, timeout: float) -> list[dict[str, Any]]:
    """Send ``bodies`` with at most ``concurrency`` in flight; results in the bodies' order."""
    results: list[dict[str, Any]] = [{} for _ in bodies]
    next_index = [0]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(bodies):
                return
            results[i] = one_request(url, key, bodies[i], timeout)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, len(bodies))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarize(results: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    """vLLM's result keys (ms, tok/s) from the measured requests."""
    ok = [r for r in results if r.get("ok")]
    ttft = [r["ttft"] * 1000 for r in ok]
    itl = [x * 1000 for r in ok for x in r["itl"]]
    e2el = [r["latency"] * 1000 for r in ok]
    tpot = [(r["latency"] - r["ttft"]) * 1000 / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    total_in = sum(r["prompt_tokens"] for r in ok)
    total_out = sum(r["output_tokens"] for r in ok)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        out[f"mean_{name}_ms"] = statistics.fmean(values) if values else 0.0
        out[f"median_{name}_ms"] = percentile(values, 50)
        out[f"std_{name}_ms"] = statistics.pstdev(values) if len(values) > 1 else 0.0
        out[f"p99_{name}_ms"] = percentile(values, 99)
    return out


def text_summary(result: dict[str, Any]) -> str:
    """The "Serving Benchmark Result" block vLLM prints (zenops.report.parsing reads it too)."""
    rows = [
        ("Successful requests:", result["completed"]),
        ("Failed requests:", result["failed"]),
        ("Maximum request concurrency:", result["max_concurrency"]),
        ("Benchmark duration (s):", f"{result['duration']:.2f}"),
        ("Total input tokens:", result["total_input_tokens"]),
        ("Total generated tokens:", result["total_output_tokens"]),
        ("Request throughput (req/s):", f"{result['request_throughput']:.2f}"),
        ("Output token throughput (tok/s):", f"{result['output_throughput']:.2f}"),
        ("Total token throughput (tok/s):", f"{result['total_token_throughput']:.2f}"),
    ]
    for name in ("ttft", "tpot", "itl"):
        rows += [
            (f"{s.capitalize()} {name.upper()} (ms):", f"{result[f'{s}_{name}_ms']:.2f}") for s in ("mean", "median")
        ]
        rows.append((f"P99 {name.upper()} (ms):", f"{result[f'p99_{name}_ms']:.2f}"))
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines += [f"{label:<40} {value:<10}" for label, value in rows]
    lines.append("=" * 50)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    key = os.environ.get("OPENAI_API_KEY", "")
    url = args.base_url.rstrip("/") + args.endpoint
    rng = random.Random()  # a new draw every run (see the module's docstring)
    vocab = vocab_size(args.tokenizer)
    print(
        f"zenops-load: {args.num_prompts} prompts of {args.random_input_len} random token ids (vocabulary {vocab}), "
        f"{args.random_output_len} output tokens, at most {args.max_concurrency} at once, {url}",
        flush=True,
    )

    def bodies(count: int) -> list[dict[str, Any]]:
        return [
            {
                "model": args.model,
                "prompt": p,
                "max_tokens": args.random_output_len,
                "temperature": args.temperature,
                "ignore_eos": bool(args.ignore_eos),
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            for p in prompts(count, args.random_input_len, vocab, rng)
        ]

    timeout = 600.0
    if args.num_warmups > 0:
        warm = run_all(url, key, bodies(args.num_warmups), args.max_concurrency, timeout)
        print(f"warm-up: {sum(1 for r in warm if r.get('ok'))} of {len(warm)} ok", flush=True)
    start = time.perf_counter()
    results = run_all(url, key, bodies(args.num_prompts), args.max_concurrency, timeout)
    duration = time.perf_counter() - start
    result: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "zenops-load",
        "model_id": args.model,
        "tokenizer_id": args.tokenizer or None,
        "num_prompts": args.num_prompts,
        "max_concurrency": args.max_concurrency,
        "request_rate": "inf",
        **summarize(results, duration),
    }
    for item in args.metadata:  # vLLM's --metadata KEY=VALUE: top-level keys of the result
        k, sep, v = item.partition("=")
        if sep:
            result[k] = v
    errors = sorted({r.get("error", "") for r in results if not r.get("ok")})
    if errors:
        result["errors"] = errors[:10]
    print(text_summary(result), flush=True)
    if args.save_result:
        os.makedirs(args.result_dir, exist_ok=True)
        with open(os.path.join(args.result_dir, args.result_filename), "w") as f:
            json.dump(result, f)
    return 0 if result["completed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
