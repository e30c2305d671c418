"""zenops's own load client (zenops.bench.loadgen): its statistics, its result read by the report as vLLM's is, and
the program run by a real python3 against an HTTP server that streams as vLLM's completions endpoint does (a TEST
DOUBLE: the real engine is exercised by the rollout e2e, whose performance gate uses this client)."""

from __future__ import annotations

import http.server
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from zenops.bench import client as bench
from zenops.bench import loadgen
from zenops.report.parsing import parse_json_result, parse_text


def test_percentile_interpolates_between_closest_ranks_as_numpy_does():
    values = [10.0, 20.0, 30.0, 40.0]
    assert loadgen.percentile(values, 50) == 25.0
    assert loadgen.percentile(values, 0) == 10.0
    assert loadgen.percentile(values, 100) == 40.0
    assert loadgen.percentile(values, 99) == pytest.approx(39.7)
    assert loadgen.percentile([], 50) == 0.0
    assert loadgen.percentile([7.0], 99) == 7.0


def request(ttft: float, gaps: list[float], out: int, prompt: int = 64) -> dict[str, Any]:
    return {"ok": True, "ttft": ttft, "itl": gaps, "latency": ttft + sum(gaps), "prompt_tokens": prompt,
            "output_tokens": out}  # fmt: skip


def test_summarize_gives_vllms_keys_from_the_measured_requests():
    results = [
        request(0.1, [0.02, 0.02, 0.02], 4),
        request(0.3, [0.04, 0.04, 0.04], 4),
        {"ok": False, "error": "URLError: refused"},
    ]
    s = loadgen.summarize(results, duration=2.0)
    assert (s["completed"], s["failed"]) == (2, 1)
    assert s["total_output_tokens"] == 8
    assert s["total_input_tokens"] == 128
    assert s["output_throughput"] == 4.0
    assert s["request_throughput"] == 1.0
    assert s["total_token_throughput"] == 68.0
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_itl_ms"] == pytest.approx(30.0)
    # TPOT: (end-to-end - TTFT) / (output tokens - 1), per request: 20 and 40 ms
    assert s["median_tpot_ms"] == pytest.approx(30.0)
    assert s["p99_e2el_ms"] == pytest.approx(0.42 * 1000, rel=0.01)


def test_its_result_and_text_summary_are_read_by_the_report_as_vllms_are(tmp_path):
    s = loadgen.summarize([request(0.1, [0.02] * 7, 8), request(0.12, [0.03] * 7, 8)], duration=1.5)
    result = {"date": "20261127-120000", "backend": "zenops-load", "model_id": "tiny", "num_prompts": 2,
              "max_concurrency": 2, **s, "platform": "cpu", "host": "h1"}  # fmt: skip
    parsed = parse_json_result(result, "r.json")
    assert parsed.output_tok_s == pytest.approx(16 / 1.5)
    assert parsed.completed == 2
    assert parsed.median_ttft_ms == pytest.approx(110.0)
    assert parsed.max_concurrency == 2
    assert parsed.platform == "cpu"
    (text,) = parse_text("Model: tiny\n" + loadgen.text_summary(result), "r.txt")
    assert text.completed == 2
    assert text.output_tok_s == pytest.approx(round(16 / 1.5, 2))
    assert text.median_ttft_ms == pytest.approx(110.0)


def test_prompts_draw_ids_from_the_models_vocabulary_above_the_special_tokens(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 2000}))
    assert loadgen.vocab_size(str(tmp_path)) == 2000
    assert loadgen.vocab_size(str(tmp_path / "missing")) == loadgen.FALLBACK_VOCAB
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 151936}}))
    assert loadgen.vocab_size(str(tmp_path)) == 151936
    drawn = loadgen.prompts(3, 50, 2000, random.Random(1))
    assert [len(p) for p in drawn] == [50, 50, 50]
    assert all(loadgen.VOCAB_FLOOR <= t < 2000 for p in drawn for t in p)
    assert drawn != loadgen.prompts(3, 50, 2000, random.Random(2))


def test_the_argv_runs_zenopss_client_through_the_sampler_with_vllms_flags():
    server = {"name": "zenops-vllm-0", "instance": 0, "port": 8000, "model": "tiny", "tokenizer": "/models/tiny",
              "image": "img", "image_id": "sha256:abc"}  # fmt: skip
    run = {"max_concurrency": 4, "num_prompts": 8, "input_len": 64, "output_len": 16, "temperature": 0.0}
    argv = bench.bench_argv(run, server, run_id="r1", result_dir="/tmp/r", platform="cpu", client="zenops")
    i = argv.index(bench.SAMPLER)
    assert argv[i + 1 : i + 5] == ["--zenops-load", bench.LOADGEN, "bench", "serve"]
    vllm = bench.bench_argv(run, server, run_id="r1", result_dir="/tmp/r", platform="cpu")
    assert "--zenops-load" not in vllm
    assert [a for a in argv if a not in (bench.LOADGEN, "--zenops-load")] == vllm  # the same flags otherwise
    with pytest.raises(ValueError, match="not one of vllm, zenops"):
        bench.bench_argv(run, server, run_id="r1", result_dir="/tmp/r", platform="cpu", client="locust")


class StreamingCompletions(http.server.BaseHTTPRequestHandler):
    """Streams ``max_tokens`` one-token chunks, 5 ms apart, then a usage chunk and [DONE], as vLLM's /v1/completions
    does with stream_options.include_usage; requires the key."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer k-1":
            self.send_response(401)
            self.end_headers()
            return
        type(self).seen.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(0.02)  # the prefill
        for _ in range(body["max_tokens"]):
            self.wfile.write(b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n')
            self.wfile.flush()
            time.sleep(0.005)
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *_args: object) -> None:
        pass


def test_the_program_measures_streamed_completions_and_writes_vllms_result_keys(tmp_path: Path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 2000}))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StreamingCompletions)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    StreamingCompletions.seen = []
    args = ["bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{httpd.server_port}",
            "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer", str(model), "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", "6", "--num-prompts", "5", "--max-concurrency", "2",
            "--temperature", "0.0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm", "--save-result",
            "--result-dir", str(tmp_path), "--result-filename", "cpu-c2.json", "--ignore-eos", "--num-warmups", "2",
            "--metadata", "platform=cpu", "host=h1"]  # fmt: skip
    try:
        # as the bench container runs it: the sampler's program, given zenops's client and vllm's arguments
        proc = subprocess.run([sys.executable, "-c", bench.SAMPLER, "--zenops-load", bench.LOADGEN, *args],
                              capture_output=True, text=True, env={"OPENAI_API_KEY": "k-1", "PATH": "/usr/bin:/bin"},
                              timeout=60, check=False)  # fmt: skip
    finally:
        httpd.shutdown()
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "cpu-c2.json").read_text())
    assert (result["completed"], result["failed"]) == (5, 0)
    assert result["total_output_tokens"] == 30
    assert result["total_input_tokens"] == 160
    assert result["max_concurrency"] == 2
    assert (result["platform"], result["host"]) == ("cpu", "h1")
    assert 15 <= result["median_ttft_ms"] < 1000
    assert 3 <= result["median_itl_ms"] < 500
    assert result["output_throughput"] > 0
    # 2 warm-ups then 5 measured, each with 32 ids of the model's vocabulary, its settings, streamed with usage
    assert len(StreamingCompletions.seen) == 7
    body = StreamingCompletions.seen[-1]
    assert len(body["prompt"]) == 32
    assert all(100 <= t < 2000 for t in body["prompt"])
    assert (body["model"], body["max_tokens"], body["ignore_eos"], body["stream"]) == ("tiny", 6, True, True)
    assert body["stream_options"] == {"include_usage": True}
    assert "Serving Benchmark Result" in proc.stdout
    assert "k-1" not in proc.stdout + json.dumps(result)
    # a server that refuses every request (here: the wrong key): every request failed, a non-zero exit
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StreamingCompletions)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    args[args.index("--base-url") + 1] = f"http://127.0.0.1:{httpd.server_port}"
    try:
        denied = subprocess.run([sys.executable, "-c", bench.LOADGEN, *args], capture_output=True, text=True,
                                env={"OPENAI_API_KEY": "wrong", "PATH": "/usr/bin:/bin"}, timeout=60,
                                check=False)  # fmt: skip
    finally:
        httpd.shutdown()
    assert denied.returncode == 1
    failed = json.loads((tmp_path / "cpu-c2.json").read_text())
    assert (failed["completed"], failed["failed"]) == (0, 5)
    assert any("401" in e for e in failed["errors"])
