"""The arithmetic of `zenops top` (zenops.metrics): the Prometheus text format, rates from counters across resets,
percentiles from histogram buckets over a window, CPU from /proc/stat, and the rows built from snapshots."""

from __future__ import annotations

import math

import pytest

from zenops.metrics import promtext, series
from zenops.metrics.probe import HostSnapshot, Instance, instances_of
from zenops.metrics.server import line, server_figures
from zenops.metrics.top import rows

# the shape vLLM's /metrics has (prometheus_client): _total counters, per-model labels, cumulative buckets
METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="tiny"}} 1.0
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} 0.25
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {generated}
vllm:prompt_tokens_total{{engine="0",model_name="tiny"}} 50.0
vllm:num_preemptions_total{{engine="0",model_name="tiny"}} {preempted}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="tiny"}} {t1}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.5",model_name="tiny"}} {t5}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="tiny"}} {tinf}
vllm:time_to_first_token_seconds_count{{engine="0",model_name="tiny"}} {tinf}
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.01",model_name="tiny"}} 0.0
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.02",model_name="tiny"}} 100.0
vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="tiny"}} 100.0
"""


def metrics(running=2.0, generated=100.0, preempted=0.0, t1=0.0, t5=0.0, tinf=0.0) -> str:
    return METRICS.format(running=running, generated=generated, preempted=preempted, t1=t1, t5=t5, tinf=tinf)


def test_parse_reads_names_labels_and_values_and_skips_what_it_cannot():
    text = metrics() + 'odd{a="x \\" y\\\\",b="two\\nlines"} 3 1700000000\nnot a line\nbad{a="1"} NaNx\n'
    samples = promtext.parse(text)
    assert promtext.total(samples, "vllm:num_requests_running") == 2.0
    assert promtext.total(samples, "vllm:generation_tokens_total") == 100.0
    odd = next(s for s in samples if s.name == "odd")
    assert odd.label("a") == 'x " y\\'
    assert odd.label("b") == "two\nlines"
    assert odd.value == 3.0  # the timestamp is not the value
    assert not any(s.name in ("not", "bad") for s in samples)
    assert promtext.buckets(samples, "vllm:time_to_first_token_seconds") == {0.1: 0.0, 0.5: 0.0, math.inf: 0.0}
    assert promtext.total(samples, "vllm:absent") is None


def test_buckets_of_several_label_sets_add_up():
    text = (
        'h_bucket{m="a",le="1"} 1\nh_bucket{m="b",le="1"} 2\nh_bucket{m="a",le="+Inf"} 3\nh_bucket{m="b",le="+Inf"} 4\n'
    )
    assert promtext.buckets(promtext.parse(text), "h") == {1.0: 3.0, math.inf: 7.0}


def test_quantile_interpolates_inside_the_bucket_as_prometheus_does():
    b = {0.1: 10.0, 0.5: 30.0, 1.0: 40.0, math.inf: 40.0}
    assert series.quantile(0.25, b) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert series.quantile(0.5, b) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)  # rank 20, halfway in (0.1, 0.5]
    assert series.quantile(0.95, b) == pytest.approx(0.5 + 0.5 * (38 - 30) / 10)
    assert series.quantile(0.1, b) == pytest.approx(0.04)  # the first bucket starts at 0
    assert series.quantile(0.99, {0.1: 0.0, 0.5: 1.0, math.inf: 10.0}) == 0.5  # in +Inf: the highest finite bound
    assert series.quantile(0.5, {0.1: 0.0, math.inf: 0.0}) is None  # no observation
    assert series.quantile(0.5, {}) is None
    with pytest.raises(ValueError, match="not between 0 and 1"):
        series.quantile(1.5, b)


def test_counters_that_went_back_count_from_zero():
    assert series.increase(100, 160) == 60
    assert series.increase(100, 40) == 40  # the server restarted: its counter began again
    assert series.increase(None, 40) is None
    assert series.rate(100, 160, 10) == 6.0
    assert series.rate(100, 160, 0) is None
    grown = series.bucket_increase({0.1: 5, math.inf: 9}, {0.1: 7, math.inf: 15})
    assert grown == {0.1: 2, math.inf: 6}
    assert series.bucket_increase({0.1: 5, math.inf: 9}, {0.1: 1, math.inf: 2}) == {0.1: 1, math.inf: 2}  # reset


def test_cpu_busy_is_the_share_of_time_not_idle_or_waiting():
    before = [100, 0, 100, 800, 0, 0, 0, 0]
    after = [150, 0, 150, 900, 100, 0, 0, 0]  # +50 user +50 system +100 idle +100 iowait: 300 ticks
    assert series.cpu_busy(before, after) == pytest.approx(100 / 300)
    assert series.cpu_busy(before, before) is None
    assert series.cpu_busy([], after) is None


ENDPOINTS = {"h1": [{"instance": 0, "port": 8000, "url": "http://10.0.0.1:8000/v1"},
                    {"instance": 1, "port": 8001, "url": "http://10.0.0.1:8001/v1", "listen": "10.9.9.9"}]}  # fmt: skip


def test_instances_are_asked_at_the_address_they_listen_on():
    assert instances_of(ENDPOINTS) == [
        Instance("h1", 0, 8000, "http://127.0.0.1:8000/metrics"),  # bound to every address: the loopback
        Instance("h1", 1, 8001, "http://10.9.9.9:8001/metrics"),
    ]


def snap(t: float, texts: dict[int, str], cpu: list[int], **kw) -> dict[str, HostSnapshot]:
    return {"h1": HostSnapshot("h1", t, metrics=texts, cpu=cpu, mem_total=1000, mem_available=250, **kw)}


def test_rows_from_snapshots_rates_percentiles_and_a_restarted_server():
    insts = instances_of(ENDPOINTS)
    cpu0, cpu1, cpu2 = [0, 0, 0, 100, 0], [50, 0, 0, 150, 0], [100, 0, 0, 200, 0]
    history = [
        snap(0.0, {0: metrics(generated=100, tinf=0), 1: metrics(generated=5000)}, cpu0),
        snap(50.0, {0: metrics(generated=200, t1=0, t5=0, tinf=0), 1: metrics(generated=6000)}, cpu1),
        snap(60.0, {0: metrics(generated=700, t1=4, t5=8, tinf=10, preempted=2), 1: metrics(generated=30)}, cpu2),
    ]
    r0, r1 = rows(history, insts, window_s=30)
    assert (r0.running, r0.waiting, r0.kv_cache_pct) == (2.0, 1.0, 25.0)
    assert r0.generated_tok_s == 50.0  # (700 - 200) / 10 s: between the two newest
    assert r0.host_cpu_pct == 50.0
    assert r0.host_mem_pct == 75.0
    # the window (30 s) starts at t=50: 10 TTFTs in it, 4 under 0.1 s, 8 under 0.5 s
    assert r0.window_s == 10.0
    assert r0.ttft_p50_ms == pytest.approx(1000 * (0.1 + 0.4 * (5 - 4) / 4))
    assert r0.ttft_p95_ms == pytest.approx(500.0)  # rank 9.5 is in +Inf: the highest finite bound
    assert r0.itl_p50_ms is None  # its histogram did not grow in the window: nothing to tell (not its lifetime's)
    assert (r0.preemptions, r0.preemptions_in_window) == (2.0, 2.0)
    assert r1.generated_tok_s == 3.0  # restarted (6000 -> 30): 30 tokens since, over 10 s
    wide = rows(history, insts, window_s=600)[0]
    assert wide.window_s == 60.0  # the oldest snapshot inside a wide window


def test_rows_say_what_could_not_be_read():
    insts = instances_of(ENDPOINTS)
    history = [{"h1": HostSnapshot("h1", 0.0, metrics={0: metrics()}, errors={1: "HTTP Error 401: Unauthorized"})}]
    r0, r1 = rows(history, insts)
    assert r0.error is None
    assert r0.generated_tok_s is None  # one snapshot: gauges only
    assert r1.error == "HTTP Error 401: Unauthorized"
    down = rows([{"h1": HostSnapshot("h1", 0.0, error="ssh: connect to host 10.0.0.1 port 22: No route")}], insts)
    assert [r.error for r in down] == ["ssh: connect to host 10.0.0.1 port 22: No route"] * 2


# --- a benchmark run's server side (zenops.bench.sampler, zenops.metrics.server) --------------------------------------


def test_the_sampler_reads_the_servers_metrics_around_and_during_the_run_and_keeps_vllms_status(tmp_path):
    """The client's wrapper program, run by a real python3 with a real HTTP server standing in for vLLM's /metrics
    (it requires the key) and a stand-in `vllm` (a TEST DOUBLE: no engine here) that runs 1.5 s and exits 3."""
    import http.server  # noqa: PLC0415
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from zenops.bench import SAMPLER  # noqa: PLC0415

    served = {"n": 0}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != "Bearer k-1":
                self.send_response(401)
                self.end_headers()
                return
            served["n"] += 1
            body = metrics(running=float(served["n"]), generated=100.0 * served["n"]).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "vllm $*"; sleep 1.5; exit 3\n')
    fake.chmod(0o755)
    out = tmp_path / "zen-c4.server.json"
    url = f"http://127.0.0.1:{httpd.server_port}/metrics"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "OPENAI_API_KEY": "k-1", "ZENOPS_METRICS_EVERY": "0.3",
           "ZENOPS_METRICS_URL": url, "ZENOPS_METRICS_OUT": str(out)}  # fmt: skip
    try:
        proc = subprocess.run([sys.executable, "-c", SAMPLER, "bench", "serve"], env=env, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
    finally:
        httpd.shutdown()
    assert proc.returncode == 3  # vllm's status is the client's
    assert proc.stdout.strip() == "vllm bench serve"
    read = json.loads(out.read_text())
    assert read["errors"] == []
    assert "vllm:num_requests_running" in read["before"]
    assert len(read["gauges"]) >= 2
    assert read["gauges"][0]["running"] == 2.0  # the first sample after the "before" read
    assert read["gauges"][0]["kv"] == 0.25
    assert "k-1" not in out.read_text()
    figures = server_figures(read)
    assert figures["running_peak"] == max(g["running"] for g in read["gauges"])
    assert figures["kv_peak_pct"] == 25.0
    # without the key every read fails: recorded, and the run is still vllm's
    env["OPENAI_API_KEY"] = "wrong"
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    env["ZENOPS_METRICS_URL"] = f"http://127.0.0.1:{httpd.server_port}/metrics"
    try:
        proc = subprocess.run([sys.executable, "-c", SAMPLER], env=env, capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
    finally:
        httpd.shutdown()
    assert proc.returncode == 3
    denied = json.loads(out.read_text())
    assert denied["before"] is None
    assert any("401" in e for e in denied["errors"])
    assert server_figures(denied)["preemptions"] is None


def test_server_figures_from_two_reads_and_the_samples():
    before = metrics(generated=100, preempted=1) + (
        "vllm:request_queue_time_seconds_sum 2.0\nvllm:request_queue_time_seconds_count 10\n"
        "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 10\nvllm:request_success_total 10\n"
    )
    after = metrics(generated=900, preempted=4) + (
        "vllm:request_queue_time_seconds_sum 2.5\nvllm:request_queue_time_seconds_count 30\n"
        "vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 60\nvllm:request_success_total 30\n"
    )
    gauges = [{"t": 1, "running": 0.0, "waiting": 0.0, "kv": 0.1}, {"t": 2, "running": 4.0, "waiting": 2.0, "kv": 0.6},
              {"t": 3, "running": 3.0, "waiting": 0.0, "kv": 0.5}]  # fmt: skip
    f = server_figures({"before": before, "after": after, "gauges": gauges, "errors": []})
    assert f["preemptions"] == 3.0
    assert f["kv_peak_pct"] == 60.0
    assert f["running_mean"] == 3.5  # the samples with work: an idle sample is not a batch
    assert (f["running_peak"], f["waiting_peak"]) == (4.0, 2.0)
    assert f["queue_ms_mean"] == 25.0  # 0.5 s over 20 requests
    assert f["prefix_cache_hit_pct"] == 25.0  # 50 hits of 200 queries
    assert f["requests"] == 20.0
    assert line(f) == ("server: KV peak 60.0%, 3 preemptions, queue 25.0 ms, mean batch 3.5, prefix cache hits 25%")
    assert line(None) == ""
    # an older engine without the queue histogram: that figure is unknown, not zero
    bare = server_figures({"before": metrics(), "after": metrics(), "gauges": []})
    assert bare["queue_ms_mean"] is None
    assert bare["running_mean"] is None


def test_the_report_shows_the_server_side_of_a_run_directory(tmp_path, run):
    import json  # noqa: PLC0415

    d = tmp_path / "runs" / "r1" / "h1" / "0"
    d.mkdir(parents=True)
    result = {"completed": 8, "failed": 0, "output_throughput": 120.0, "total_token_throughput": 300.0,
              "request_throughput": 2.0, "median_ttft_ms": 30.0, "median_tpot_ms": 8.0, "max_concurrency": 4,
              "num_prompts": 8, "model_id": "tiny", "duration": 4.0, "host": "h1", "instance": "0"}  # fmt: skip
    (d / "zen-c4.json").write_text(json.dumps(result))
    read = {"before": metrics(preempted=0), "after": metrics(preempted=2), "errors": [],
            "gauges": [{"t": 1, "running": 4.0, "waiting": 0.0, "kv": 0.4}]}  # fmt: skip
    (d / "zen-c4.server.json").write_text(json.dumps(read))
    r = run(["report", str(tmp_path / "runs" / "r1"), "--format", "md"])
    assert r.exit_code == 0, r.output
    assert "Server side" in r.output
    assert "| h1/0 | 4 | 40.0 | 2 |" in r.output
    r = run(["report", str(tmp_path / "runs" / "r1"), "--json"])
    out = json.loads(r.output.strip().splitlines()[-1])
    (row,) = out["results"]
    assert row["server"]["preemptions"] == 2.0
    assert out["skipped"] == []  # the read is not taken for a result, nor passed over as one


def test_merged_server_figures_of_instances_or_repeats():
    from zenops.metrics.server import merged  # noqa: PLC0415

    a = {"preemptions": 1.0, "kv_peak_pct": 40.0, "running_mean": 2.0, "queue_ms_mean": 10.0, "requests": 8.0}
    b = {"preemptions": 2.0, "kv_peak_pct": 70.0, "running_mean": 3.0, "queue_ms_mean": 20.0, "requests": None}
    m = merged([a, b, None])
    assert m is not None
    assert (m["preemptions"], m["kv_peak_pct"], m["running_mean"], m["queue_ms_mean"]) == (3.0, 70.0, 2.5, 15.0)
    assert m["requests"] is None  # one run did not say: the sum is unknown, not 8
    assert merged([None, None]) is None


def test_a_server_restarted_inside_the_window_counts_from_its_restart():
    """Its new counts overtook the old ones before the newest read: only the requests counter, which went back
    between two reads, tells the restart; the window's figures are the new server's own."""
    insts = instances_of({"h1": [{"instance": 0, "port": 8000}]})

    def at(t: float, done: float, le1: float, le5: float, inf: float, preempted: float) -> dict[str, HostSnapshot]:
        text = metrics(t1=le1, t5=le5, tinf=inf, preempted=preempted) + f"vllm:request_success_total {done}\n"
        return snap(t, {0: text}, [0, 0, 0, int(t), 0])

    history = [at(0, 100, 4, 8, 10, 5), at(30, 5, 1, 2, 2, 0), at(60, 40, 30, 30, 30, 1)]
    (row,) = rows(history, insts, window_s=90)
    assert row.window_s == 60.0
    assert row.ttft_p50_ms == pytest.approx(50.0)  # all 30 under 0.1 s: the new server's histogram alone
    assert row.preemptions_in_window == 1.0  # since the restart, not 1 - 5


def test_a_client_killed_by_a_signal_exits_as_its_shell_would(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from zenops.bench import SAMPLER  # noqa: PLC0415

    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\nkill -TERM $$\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}  # no ZENOPS_METRICS_URL: nothing sampled
    proc = subprocess.run([sys.executable, "-c", SAMPLER], env=env, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 143  # 128 + SIGTERM, as before the sampler (not 241)


def test_top_without_the_api_key_file_names_the_fix(run, isolated_home, tmp_path):
    from zenops.config import load  # noqa: PLC0415
    from zenops.deployment.record import ServingRecord  # noqa: PLC0415
    from zenops.deployment.store import Store  # noqa: PLC0415

    inv = tmp_path / "hosts.ini"
    inv.write_text("h1 ansible_host=192.0.2.1\n")
    Store(load(), inv).save_record(
        ServingRecord(endpoints={"h1": [{"instance": 0, "port": 8000}]}, api_key_file=str(tmp_path / "gone"))
    )
    r = run(["top", "-i", str(inv), "--json"])
    assert r.exit_code == 2, r.output
    assert "API key file" in r.output
    assert "zenops up --inventory" in " ".join(r.output.split())


# llama-server --metrics (b11434: tools/server/server-task.cpp to_metrics): counters and gauges, no labels
LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {busy}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred {deferred}
"""


def test_server_figures_count_the_tokens_either_engine_generated():
    vllm = server_figures({"before": metrics(generated=100), "after": metrics(generated=612), "gauges": []})
    assert vllm["output_tokens"] == 512.0
    before = LLAMACPP_METRICS.format(prompt=25, predicted=64, busy=0, deferred=0)
    after = LLAMACPP_METRICS.format(prompt=1049, predicted=576, busy=0, deferred=0)
    llama = server_figures({"before": before, "after": after, "gauges": []})
    assert llama["output_tokens"] == 512.0
    assert llama["requests"] is None  # llama.cpp counts no requests: unknown, not 0
    assert server_figures({"before": before, "after": None, "gauges": []})["output_tokens"] is None
    from zenops.metrics.server import merged  # noqa: PLC0415

    both = merged([vllm, llama])
    assert both is not None
    assert both["output_tokens"] == 1024.0


def test_the_sampler_reads_llama_cpp_busy_slots_and_waiting_requests():
    from zenops.bench.sampler import gauges  # noqa: PLC0415

    busy = LLAMACPP_METRICS.format(prompt=0, predicted=0, busy=3, deferred=2)
    assert gauges(busy) == {"running": 3.0, "waiting": 2.0}
    assert gauges(metrics(running=4.0)) == {"running": 4.0, "waiting": 1.0, "kv": 0.25}  # vLLM's, as before


def _llamacpp_run(tmp_path, *, predicted: int, warmups: int | None = 0):
    """A run directory as zenops bench leaves it for a llama.cpp server: the client's result (its figures as vllm
    bench 0.32 computed them from 618 re-tokenized tokens) and the sampler's read of the server (512 generated:
    8 requests x 64). The figures are a real run's (2-vCPU Zen 5, 200M model, Q8_0, C=1, 2026-11-29)."""
    import json  # noqa: PLC0415

    d = tmp_path / "runs" / "r1" / "h1" / "0"
    d.mkdir(parents=True, exist_ok=True)
    result = {"completed": 8, "failed": 0, "num_prompts": 8, "max_concurrency": 1, "duration": 4.0,
              "total_input_tokens": 1024, "total_output_tokens": 618, "output_throughput": 154.5,
              "total_token_throughput": 410.5, "request_throughput": 2.0, "median_ttft_ms": 100.0,
              "median_tpot_ms": 5.0, "mean_tpot_ms": 5.0, "p99_tpot_ms": 6.0, "model_id": "tiny", "host": "h1",
              "instance": "0", "engine": "llama.cpp", "weights": "q8_0",
              **({} if warmups is None else {"num_warmups": str(warmups)})}  # fmt: skip
    (d / "llamacpp-c1.json").write_text(json.dumps(result))
    before = LLAMACPP_METRICS.format(prompt=0, predicted=4, busy=0, deferred=0)
    after = LLAMACPP_METRICS.format(prompt=1024, predicted=4 + predicted, busy=0, deferred=0)
    (d / "llamacpp-c1.server.json").write_text(json.dumps({"before": before, "after": after, "gauges": []}))
    return tmp_path / "runs" / "r1"


def test_output_tokens_are_the_servers_count_when_the_client_counted_otherwise(tmp_path):
    from zenops.report import load  # noqa: PLC0415

    (r,) = load([_llamacpp_run(tmp_path, predicted=512)]).results
    assert r.output_tok_s == pytest.approx(154.5 * 512 / 618)  # 128.0: 512 tokens in 4 s
    assert r.output_len == 64.0
    assert r.total_tok_s == pytest.approx(410.5 - 154.5 * 106 / 618)
    # TPOT = (latency - TTFT) / (tokens - 1): the same time over 63 gaps, not 76.25
    assert r.median_tpot_ms == pytest.approx(5.0 * (618 / 8 - 1) / 63)
    assert r.p99_tpot_ms == pytest.approx(6.0 * (618 / 8 - 1) / 63)
    assert r.metadata["output_tokens"] == "512 by the server's count (618 counted by the client)"


def test_the_clients_count_stands_when_it_agrees_or_warm_ups_blur_the_servers(tmp_path):
    from zenops.report import load  # noqa: PLC0415

    (same,) = load([_llamacpp_run(tmp_path / "a", predicted=618)]).results
    assert same.output_tok_s == 154.5
    assert "output_tokens" not in same.metadata
    # 8 warm-up requests: the server's 1130 tokens include them, the measured run's share is unknown
    (warm,) = load([_llamacpp_run(tmp_path / "b", predicted=1130, warmups=8)]).results
    assert warm.output_tok_s == 154.5
    (older,) = load([_llamacpp_run(tmp_path / "c", predicted=512, warmups=None)]).results
    assert older.output_tok_s == pytest.approx(128.0)  # results from before zenops recorded warm-ups: vllm's 0
