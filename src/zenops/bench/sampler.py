"""The benchmark client's wrapper, run inside the client container by the engine image's python3 (its source is the
``-c`` program: standard library only, nothing of zenops): it reads the server's /metrics once before the run, then
every ``ZENOPS_METRICS_EVERY`` s (0.25) while `vllm bench serve` runs (the gauges: requests running and waiting, KV
cache usage), and once after, and writes them to ``ZENOPS_METRICS_OUT`` as JSON ({"before", "after": /metrics text,
"gauges": [{t, running, waiting, kv}], "errors"}). zenops.bench.server_figures turns that into the run's server-side
figures.

Its arguments are `vllm`'s (``bench serve ...``), or ``--zenops-load PROGRAM ARGS...``: zenops's own load client
(zenops.bench.loadgen's source, run by this python3 with the same arguments). The client's exit status is vllm's;
SIGTERM and SIGINT (the run's time limit, a cancel) are passed on to it. A
metrics read that fails is recorded in "errors", never a failed run. The API key, when the server needs one, is in
OPENAI_API_KEY (zenops.bench.client.KEY_WRAPPER put it there from its file).
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

GAUGES = {  # vLLM's names, then llama.cpp's (llama-server --metrics: slots busy, requests waiting for a slot)
    "running": ("vllm:num_requests_running", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "llamacpp:requests_deferred"),
    "kv": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}


def read(url: str, key: str) -> str:
    headers = {"Authorization": "Bearer " + key} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as answer:
        return str(answer.read().decode("utf-8"))


def gauges(text: str) -> dict[str, float]:
    """The GAUGES of a /metrics text (summed across label sets)."""
    found: dict[str, float] = {}
    present = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", text, re.MULTILINE))
    wanted = {key: next((n for n in names if n in present), "") for key, names in GAUGES.items()}  # the first name
    for line in text.splitlines():
        m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
        if not m:
            continue
        rest = line[line.index("}") + 1 :] if "}" in line else line[m.end() :]
        for key, name in wanted.items():
            if m.group(0) == name:
                with contextlib.suppress(ValueError, IndexError):
                    found[key] = found.get(key, 0.0) + float(rest.split()[0])
    return found


def main() -> None:
    url = os.environ.get("ZENOPS_METRICS_URL", "")
    out = os.environ.get("ZENOPS_METRICS_OUT", "")
    every = float(os.environ.get("ZENOPS_METRICS_EVERY", "0.25"))
    key = os.environ.get("OPENAI_API_KEY", "")
    record: dict[str, Any] = {"url": url, "before": None, "after": None, "gauges": [], "errors": []}
    stop = threading.Event()

    def attempt(what: str) -> str | None:
        try:
            return read(url, key)
        except Exception as e:  # any failure to read is recorded, never the run's
            record["errors"].append(f"{what}: {e}")
            return None

    def sample() -> None:
        while not stop.wait(every):
            text = attempt("sample")
            if text is not None:
                record["gauges"].append({"t": round(time.time(), 3), **gauges(text)})

    if url:
        record["before"] = attempt("before")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    client: subprocess.Popen[bytes] | None = None
    for sig in (signal.SIGTERM, signal.SIGINT):  # the time limit reaches vllm (set before it starts: no gap)
        signal.signal(sig, lambda signum, _frame: client.send_signal(signum) if client is not None else None)
    command = ["vllm", *sys.argv[1:]]
    if sys.argv[1:2] == ["--zenops-load"]:  # zenops's own load client (zenops.bench.loadgen): its program, its args
        command = [sys.executable, "-c", sys.argv[2], *sys.argv[3:]]
    client = subprocess.Popen(command)
    rc = client.wait()
    if url:
        stop.set()
        sampler.join(timeout=10)
        record["after"] = attempt("after")
        if out:
            try:
                with open(out, "w") as f:
                    json.dump(record, f)
            except OSError as e:
                sys.stderr.write(f"zenops: could not write the server's metrics to {out}: {e}\n")
    sys.exit(128 - rc if rc < 0 else rc)  # killed by a signal: its shell status (143 for SIGTERM), as before


if __name__ == "__main__":
    main()
