"""`zenops campaign` end to end on the sandbox cloud, all real: servers created by Nova (systemd containers reached over
SSH), Docker in them, the engine image from this machine's image cache (pip route), real vLLM servers with tiny
models made offline, real `vllm bench serve`, teardown through Neutron/Nova and a leak check by the SDK.

One campaign: measured flavors (one in the landing run, two with --full) x tiny models x variants (max-num-seqs 4,
and 2 with --full: machine-independent; zen vs cpu would be refused on a CPU without AVX-512), a short bench
(concurrency 1 and 2, 6 prompts of 16 tokens), servers with --enforce-eager (what is tested is the campaign, not the
engine's speed). Two more flavors in the same matrix carry the failure cases, so no extra server cycle is paid for
them:
- a flavor whose servers go to ERROR (the sandbox's fault injection, `zenops_test:fail=spawn` in its extra specs):
  its cells are recorded failed with the cloud's fault, the others complete;
- a flavor priced far over the budget: the campaign's projection is over budget.max_usd, so `run` refuses it (exit
  17, nothing created) and `run --within-budget` measures what the budget buys: that flavor's cells are skipped
  before any server is asked for, everything is torn down, exit 17, the report labelled partial.

Two shapes (a server of a measured flavor costs a boot, the Docker engine's install and the engine image's copy):
- landing (`scripts/test`): one measured flavor, one model, one variant, one flavor at a time (parallel: 1), in the
  order of the file; the first run is interrupted when the ERROR flavor's server is being asked for, after the
  measured flavor's cells are all done and its server torn down, so the resume provisions the measured flavor no
  more (asserted: one "provisioning" per measured flavor over both runs); the resume runs the rest (the ERROR
  flavor's cells, which fail) and skips the expensive one's. One measured server lifetime, not two: the second
  measured flavor cost CI6 about 400 s of its slowest lane;
- `scripts/test --full` (ZENOPS_E2E_FULL=1): two measured flavors, two models, two variants, two flavors at once
  (parallel: 2), interrupted after the first done cell: the resume provisions again what the interruption tore down
  and measures the rest.

1. `campaign plan` and `campaign run` over budget: exit 17, nothing created;
2. `campaign run --within-budget`, Ctrl-C (see above): exit 130, every server torn down, the done cells recorded;
3. `campaign run --within-budget` again: it continues the same campaign, the done cells are not re-run, the rest runs,
   the ERROR flavor's cells fail, the expensive one's are skipped, exit 17, everything is torn down, `leaks` of the
   campaign's mark is 0 (asked of the cloud by the SDK, not by zenops);
4. `campaign report`: the table, a best configuration per model, the failed and skipped cells, the tuned file.

Figures (wall times, spend) go to .cache/e2e/campaign.json for the record.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.bounded import run_bounded
from zenops.campaign.state import deployment_name
from zenops.tinymodel import generate

pytestmark = pytest.mark.e2e
ZENOPS = str(Path(sys.executable).parent / "zenops")
CLOUDS = Path(os.environ.get("ZENOPS_SANDBOX_DIR", REPO / ".cache" / "sandbox")) / "clouds.yaml"
IMAGE_DIR = Path(os.environ.get("ZENOPS_IMAGE_DIR", REPO / ".cache" / "images"))
BASE_ARCHIVE = IMAGE_DIR / "bookworm-slim.tar"
REPORT = REPO / ".cache" / "e2e" / "campaign.json"
FULL = os.environ.get("ZENOPS_E2E_FULL") == "1"
# measured: a server lifetime each (boot, the Docker engine's install, the engine image's copy, a vLLM server, the
# bench); the landing run measures one flavor before the interruption, --full a second one after the resume
MEASURED_PRICES = {"gp.5.2.8": 0.10, "gp.5.4.16": 0.20}  # USD per hour
FLAVORS = tuple(MEASURED_PRICES)[: 2 if FULL else 1]
BROKEN = "e2e.error.2.8"  # its servers go to ERROR (created by the test, removed after it)
EXPENSIVE = "gp.5.8.32"  # priced over the whole budget in the campaign file
MAX_USD = 5.0
PRICES = {BROKEN: 0.10, **MEASURED_PRICES, EXPENSIVE: 5000}
FIGURES: dict[str, Any] = {}
N_MODELS = 2 if FULL else 1
PARALLEL = 2 if FULL else 1
# variants: a vLLM server lifetime each per measured flavor; the landing run measures one, --full both
VARIANTS = {"seqs2": 2, "seqs4": 4} if FULL else {"seqs4": 4}


def campaign_file(tmp: Path, models: list[Path]) -> Path:
    path = tmp / "sweep.yaml"
    variants = "\n".join(f"  {k}: {{max_num_seqs: {v}}}" for k, v in VARIANTS.items())
    path.write_text(
        f"""\
name: e2e-sweep
cloud: sandbox
flavors: [{", ".join((FLAVORS[0], BROKEN, *FLAVORS[1:], EXPENSIVE))}]
models: [{", ".join(str(m) for m in models)}]
variants:
{variants}
engine:
  image_source: pip
  base_image: zenops/bookworm-slim:latest
  base_image_archive: {BASE_ARCHIVE}
  engine_args: [--enforce-eager]
  health_timeout: 600
bench: {{concurrency: [1, 2], input_len: 32, output_len: 16, prompts: 6, repeats: 1}}
budget: {{max_usd: {MAX_USD}, ttl: 2h}}
prices: {{{", ".join(f"{f}: {PRICES[f]}" for f in (BROKEN, *FLAVORS, EXPENSIVE))}}}
parallel: {PARALLEL}
"""
    )
    return path


def campaign_resources(campaign: str) -> list[str]:
    """Everything in the sandbox carrying the campaign's mark, asked of the cloud by the SDK (not by zenops)."""
    import openstack  # noqa: PLC0415

    conn = openstack.connect(cloud="sandbox-admin")
    tag = f"zenops:campaign={campaign}"
    found = [
        f"server {s.name}"
        for s in conn.compute.servers(details=True, all_projects=True)
        if (s.metadata or {}).get("zenops:campaign") == campaign
    ]
    for lister, kind in ((conn.network.networks, "network"), (conn.network.ports, "port"), (conn.network.ips, "fip")):
        found += [f"{kind} {r.id}" for r in lister(tags=tag)]
    # the expiry switches' application credentials (no tags: zenops-expiry-<deployment>.<server id>), the tenant's
    tenant = openstack.connect(cloud="sandbox")
    deployments = {deployment_name(campaign, g) for g in (BROKEN, *FLAVORS, EXPENSIVE)}
    found += [
        f"application_credential {c.name}"
        for c in tenant.identity.application_credentials(tenant.current_user_id)
        if str(c.name).startswith("zenops-expiry-")
        and str(c.name).removeprefix("zenops-expiry-").split(".", 1)[0] in deployments
    ]
    return found


@pytest.fixture(scope="module")
def broken_flavor(env: dict[str, str]) -> Any:
    """A flavor whose servers go to ERROR: the sandbox's fault injection from its extra specs."""
    import openstack  # noqa: PLC0415

    conn = openstack.connect(cloud="sandbox-admin")
    old = conn.compute.find_flavor(BROKEN, ignore_missing=True)
    if old is not None:
        conn.compute.delete_flavor(old)
    flavor = conn.compute.create_flavor(name=BROKEN, vcpus=2, ram=8192, disk=20, is_public=True)
    conn.compute.create_flavor_extra_specs(flavor, {"zenops_test:fail": "spawn"})
    yield flavor
    conn.compute.delete_flavor(flavor, ignore_missing=True)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not CLOUDS.is_file():
        if os.environ.get("ZENOPS_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox cloud is required but {CLOUDS} is missing: run scripts/sandbox up")
        pytest.skip("the sandbox cloud is not running (scripts/sandbox up)")
    if not BASE_ARCHIVE.is_file():
        pytest.fail(f"{BASE_ARCHIVE} is missing: run scripts/build-images")
    home = tmp_path_factory.mktemp("home")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(CLOUDS)
    out = {k: v for k, v in os.environ.items() if k not in ("ZENOPS_CONFIG", "ZENOPS_COLLECTION_ROOT")}
    out["OS_CLIENT_CONFIG_FILE"] = str(CLOUDS)
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        out[var] = str(home / sub)
    return out


def zenops(
    env: dict[str, str], *args: str, cwd: Path, rc: int | None = 0, timeout: float = 1800
) -> list[dict[str, Any]]:
    proc = run_bounded([ZENOPS, "--json", *args], env=env, cwd=cwd, timeout=timeout)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if rc is not None:
        assert proc.returncode == rc, f"exit {proc.returncode}: {json.dumps(lines[-3:])[-3000:]}\n{proc.stderr[-3000:]}"
    return lines


def interrupt_after(env: dict[str, str], spec: Path, cwd: Path, marker: str) -> tuple[int, list[dict[str, Any]], str]:
    """`campaign run --within-budget`, its output read by threads as it comes (a full pipe would block it); SIGINT
    once a note holds ``marker``; then wait for its teardown."""
    proc = subprocess.Popen(
        [ZENOPS, "--json", "campaign", "run", "--yes", str(spec), "--within-budget"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
    )  # fmt: skip
    lines: list[dict[str, Any]] = []
    err: list[str] = []
    done = threading.Event()

    def read_out() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if raw.startswith("{"):
                line = json.loads(raw)
                lines.append(line)
                if line.get("type") == "note" and marker in str(line.get("message")):
                    done.set()
        done.set()

    def read_err() -> None:
        assert proc.stderr is not None
        err.extend(proc.stderr)

    threads = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in threads:
        t.start()
    # the marker's wait: with --full two flavors serve at once beside the other lanes, and their first cells took 22 min
    # to reach their bench on a 2-core AVX2 EPYC (this stop's --full run interrupted them at the old 1800 s, none done)
    if not done.wait(3600 if FULL else 1800):
        print(f"interrupt_after: no note with {marker!r} in time; interrupting anyway", file=sys.stderr)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(900)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"campaign run did not stop within 900 s of Ctrl-C: {''.join(err)[-3000:]}")
    for t in threads:
        t.join(10)
    return rc, lines, "".join(err)


def check_cells(cell_states: list[dict[str, Any]]) -> None:
    """The measured flavors' cells done, the ERROR flavor's failed with the cloud's fault, the expensive one's
    skipped by the budget."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for c in cell_states:
        by_group.setdefault(c["group"], []).append(c)
    assert {c["status"] for g in FLAVORS for c in by_group[g]} == {"done"}
    for c in by_group[BROKEN]:
        assert (c["status"], c["failure"]) == ("failed", "server-error"), c
        assert "went to ERROR" in c["reason"], c["reason"]
        assert "zenops_test:fail=spawn" in c["reason"], c["reason"]  # the fault, as the cloud said it
    for c in by_group[EXPENSIVE]:
        assert c["status"] == "skipped", c
        assert c["reason"].startswith("budget: $"), c["reason"]


def check_provisioned_once(lines: list[dict[str, Any]]) -> None:
    """Each measured flavor's server was asked for once over both runs (the landing shape: the interruption came
    between groups, so the resume had nothing to provision again)."""
    provisioned = [
        str(x.get("message")) for x in lines if x.get("type") == "note" and ": provisioning " in str(x.get("message"))
    ]
    FIGURES["provisioned"] = provisioned
    for flavor in FLAVORS:
        assert sum(f"{flavor}: provisioning " in m for m in provisioned) == 1, provisioned


def check_report(env: dict[str, str], campaign: str, work: Path, models: list[Path]) -> None:
    """Every measured cell, a best configuration per model, the cells not measured, the tuned file."""
    tuned = work / "tuned.yaml"
    out = REPORT.parent / "campaign-report"  # kept for the record: report.md/.csv/.json and the Pareto PNG
    shutil.rmtree(out, ignore_errors=True)
    argv = ["campaign", "report", campaign, "--write-tuned", str(tuned), "--out", str(out), "--api-price", "0.60"]
    rep = zenops(env, *argv, cwd=work)[-1]
    FIGURES["report"] = {k: rep.get(k) for k in ("status", "best")}
    for name in ("report.md", "report.csv", "report.json"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["partial"] is True
    # measured flavors x models x variants x concurrency levels
    assert len(rep["rows"]) == len(FLAVORS) * N_MODELS * len(VARIANTS) * 2
    for model in models:
        assert rep["best"][str(model)] is not None, rep  # a local model: as the campaign file named it, resolved
    not_measured = {(c["flavor"], c["status"]) for c in rep["not_measured"]}
    assert not_measured == {(BROKEN, "failed"), (EXPENSIVE, "skipped")}
    assert tuned.is_file()
    assert all(str(m) in tuned.read_text() for m in models)
    # the tuned file pins the engine the cells ran (the file's engine named no pair: the pip route's default)
    from zenops.compat import table  # noqa: PLC0415

    pair = table().default
    for entry in yaml.safe_load(tuned.read_text())["models"].values():
        options = entry["options"]
        assert (options["vllm"], options["zentorch"], options["image_source"]) == (pair.vllm, pair.zentorch, "pip")


def test_campaign_over_budget_interrupted_resumed_reported_and_torn_down(env, broken_flavor, tmp_path):
    models = [generate(tmp_path / "models" / n, seed=i).path for i, n in enumerate(("tiny-a", "tiny-b")[:N_MODELS], 1)]
    work = tmp_path / "work"
    work.mkdir()
    spec = campaign_file(work, models)
    per_flavor = N_MODELS * len(VARIANTS)  # models x variants
    n_cells = (len(FLAVORS) + 2) * per_flavor  # the measured flavors, the ERROR one, the expensive one

    # 1. over budget (the expensive flavor): refused before anything is created
    plan = zenops(env, "campaign", "plan", str(spec), cwd=work, rc=17)
    result = next(x for x in plan if x.get("type") == "result")
    assert len(result["cells"]) == n_cells
    FIGURES["projected"] = result["projection"]  # per flavor, from the flavor prices and estimated durations
    assert "over budget.max_usd" in plan[-1]["message"]
    assert "--within-budget" in plan[-1]["hint"]
    zenops(env, "campaign", "run", "--yes", str(spec), cwd=work, rc=17)
    assert not zenops(env, "campaign", "status", cwd=work)[-1]["campaigns"]  # nothing started, nothing recorded

    # 2. run what the budget buys, Ctrl-C after the first done cell: torn down
    t0 = time.monotonic()
    # landing: when the next group (the ERROR flavor, cheap) asks for its server, the first measured flavor is done and
    # torn down (one flavor at a time)
    marker = ": done (serve" if FULL else f"{BROKEN}: provisioning"
    rc, first_lines, err = interrupt_after(env, spec, work, marker)
    FIGURES["first_run_s"] = round(time.monotonic() - t0, 1)
    assert rc == 130, err[-3000:]
    status = zenops(env, "campaign", "status", cwd=work)[-1]["campaigns"]
    assert len(status) == 1
    campaign = status[0]["campaign"]
    assert status[0]["status"] == "interrupted"
    assert status[0]["cells"].get("done", 0) >= (1 if FULL else per_flavor), status
    first = zenops(env, "campaign", "status", campaign, cwd=work)[-1]
    assert first["servers_running"] == []
    assert campaign_resources(campaign) == []
    done_before = {c["key"]: c for c in first["cell_states"] if c["status"] == "done"}

    # 3. again: the same campaign continues, done cells are not re-run; the ERROR flavor's cells fail, the
    # expensive flavor's are skipped by the budget: exit 17 after the teardown
    t1 = time.monotonic()
    # a hang's bound, not a timing: with --full the resume serves the rest of two flavors' cells, a cell 11-16 min on a
    # 2-vCPU Intel Xeon beside the other lanes (load average 20-40, 2026-11-30): the old 1800 s interrupted it with 3
    # of the 7 cells left done and 2 under way (its state file), so about 60 min in all
    out = zenops(
        env, "campaign", "run", "--yes", str(spec), "--within-budget", cwd=work, rc=17, timeout=5400 if FULL else 1800
    )
    FIGURES["resume_s"] = round(time.monotonic() - t1, 1)
    done_n, other_n = len(FLAVORS) * per_flavor, per_flavor
    final = zenops(env, "campaign", "status", campaign, cwd=work)[-1]
    why = [
        (c["group"], c["variant"], c["failure"], c["reason"]) for c in final["cell_states"] if c["status"] == "failed"
    ]
    assert f"stopped at its budget: {done_n} cell(s) done, {other_n} skipped, {other_n} failed" in out[-1]["message"], (
        out[-1],
        why,  # each failed cell's cause, for a failure here
    )
    FIGURES["final"] = {k: final[k] for k in ("status", "cells", "spent_usd", "leaks")}
    assert final["status"] == "over-budget", final
    assert final["cells"] == {"done": done_n, "failed": other_n, "skipped": other_n}
    if not FULL:
        check_provisioned_once(first_lines + out)
    check_cells(final["cell_states"])
    for key, before in done_before.items():
        after = next(c for c in final["cell_states"] if c["key"] == key)
        assert after["attempts"] == before["attempts"]  # not run again
        assert after["finished_at"] == before["finished_at"]
    assert any("continues" in json.dumps(x) or x.get("resumes") for x in out if x.get("type") == "plan")
    assert final["leaks"] == 0
    assert campaign_resources(campaign) == []
    assert 0 < final["spent_usd"] < MAX_USD

    # 4. the report; 5. a new campaign of the same flavors and image route, projected from this one's durations
    check_report(env, campaign, work, models)
    check_projection_from_history(env, spec, work, campaign, final)


def check_projection_from_history(env, spec: Path, work: Path, campaign: str, final: dict) -> None:
    """`campaign plan` of a new campaign of the same flavors and image route projects from what ``campaign``
    measured, and its projection for the measured flavors is put beside what they cost here (a figure for the
    notes, not a timed assertion)."""
    again = work / "again.yaml"
    again.write_text(spec.read_text().replace("name: e2e-sweep", "name: e2e-again"))
    out = zenops(env, "campaign", "plan", str(again), cwd=work, rc=17)
    projection = next(x for x in out if x.get("type") == "result")["projection"]
    assert projection["durations_from"] == campaign, projection
    projected_usd = sum(g["usd"] for g in projection["groups"] if g["group"] in FLAVORS)
    spent_usd = sum(s["cost_usd"] for s in final["servers"] if s["flavor"] in FLAVORS)
    FIGURES["projection_vs_spend"] = {"projected_usd": projected_usd, "spent_usd": spent_usd}
    print(f"\nmeasured flavors: projected ${projected_usd:.4f} from {campaign}'s durations, spent ${spent_usd:.4f}")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(FIGURES, indent=2))
