"""The run flow of `zenops bench`: playbooks/bench.yml (the vllm_server role's ``bench`` entry point) against every
server zenops started, once per platform with --compare-platforms, then the run directory assembled on the controller
(manifest, each host's facts and plan, secrets scrubbed) and read back as a report."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zenops
from zenops import catalog
from zenops import report as report_lib
from zenops.bench.client import RUN_ID
from zenops.bench.profiles import BenchRun, runs_for
from zenops.context import RunContext
from zenops.deployment import services
from zenops.deployment.identity import inventory_label
from zenops.deployment.record import ServingRecord
from zenops.deployment.store import Store
from zenops.errors import (
    NoBenchResultError,
    NoServerError,
    RunFailedError,
    UsageError,
    ZenopsError,
)
from zenops.facts import facts_path
from zenops.llamacpp import BUILD as LLAMACPP_BUILD
from zenops.llamacpp import LLAMA_CPP
from zenops.planner import PlanRefusedError
from zenops.request_options import LLAMACPP_KEY
from zenops.runner import RunSpec, scrub
from zenops.serve import HF_TOKEN_ENV, ServeRequest, request_from_dict, serve_inventory

NO_SERVER_MESSAGE = (
    "no zenops vLLM server"  # the role's words when a host runs none (roles/vllm_server/tasks/bench.yml)
)


# --- secrets --------------------------------------------------------------------------------------------------


def secret_values(*files: Path | None) -> list[str]:
    """The secrets no artifact may hold: $HF_TOKEN and the contents of the secret files (API key, HF token)."""
    out = [os.environ[n] for n in HF_TOKEN_ENV if os.environ.get(n)]
    for f in files:
        if f is not None and f.is_file():
            out.append(f.read_text().strip())
    return out


# --- the run --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRequest:
    profile: str = "seed"
    concurrency: tuple[int, ...] | None = None
    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    num_warmups: int | None = None  # unmeasured requests first (BenchRun.num_warmups)
    compare_platforms: bool = False
    runs_dir: Path = Path("runs")
    run_id: str | None = None
    flavor: str | None = None
    price_per_hour: float | None = None
    cloud: str | None = None
    deployment: str | None = None
    timeout: int = 3600
    log_lines: int = 200
    gateway: bool = False  # benchmark the deployment's endpoint (its gateway) instead of each server
    label: str | None = None  # the results' label (a campaign's variant name): reports group and compare by it
    campaign: str | None = None  # the campaign the run belongs to
    # one host after another instead of all at once: hosts that share a machine would otherwise measure each other
    one_at_a_time: bool = False
    answer_timeout: int = 120  # seconds each server may take to answer the check before the runs
    # the load client (zenops.bench.client.CLIENTS): vllm's `vllm bench serve`, or zenops's light one (the gates')
    client: str = "vllm"
    # host -> the platform its servers' health gate verified at their start: not asked again before the runs
    known_platforms: dict[str, str] = field(default_factory=dict)


@dataclass
class BenchOutcome:
    run_id: str
    run_dir: Path
    runs: list[BenchRun]
    phases: list[dict[str, Any]]
    report: report_lib.Report
    manifest: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "runs": [r.to_dict() for r in self.runs],
            "phases": self.phases,
            "results": [r.to_dict() for r in report_lib.ordered(self.report.results)],
            "host_totals": [r.to_dict() for r in report_lib.host_totals(self.report.results)],
            "flagged": len(self.report.flagged),
            "warnings": self.warnings,
        }


def new_run_id(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass
class _Run:
    """One `zenops bench` invocation: what every phase (platform) shares."""

    ctx: RunContext
    inventory: Path
    req: BenchRequest
    record: ServingRecord
    runs: list[BenchRun]
    run_id: str
    run_dir: Path
    api_key_file: Path | None
    metadata: Mapping[str, Any]
    limit: str | None = None

    def warn(self, text: str) -> None:
        self.ctx.warn(text)

    def serve(self, request: ServeRequest, *, record: bool = True, cancel: threading.Event | None = None) -> None:
        """Restart the servers as ``request`` says: a step of the benchmark, so serving's notes and warnings stay
        out of the benchmark's (its progress shows)."""
        serve_inventory(self.ctx.quiet(cancel=cancel), self.inventory, request, limit=self.limit, record=record)


def _phase(run: _Run) -> dict[str, Any]:
    """One run of playbooks/bench.yml: every run against every server; host -> what it benchmarked."""
    extravars: dict[str, Any] = {
        "vllm_server_bench_run_id": run.run_id,
        "vllm_server_bench_runs": [r.to_dict() for r in run.runs],
        "vllm_server_bench_dest": str(run.run_dir.resolve()),
        "vllm_server_bench_metadata": dict(run.metadata),
        "vllm_server_bench_timeout": run.req.timeout,
        "vllm_server_bench_log_lines": run.req.log_lines,
        "vllm_server_bench_answer_timeout": run.req.answer_timeout,
        "vllm_server_bench_client": run.req.client,
        "vllm_server_bench_known_platforms": dict(run.req.known_platforms),
        "vllm_server_deployment": inventory_label(run.inventory),
    }
    if run.req.one_at_a_time:
        extravars["zenops_bench_serial"] = 1
    if run.metadata.get("engine") == LLAMA_CPP:  # a campaign's llama.cpp cell: its servers, the same client
        extravars["vllm_server_bench_engine"] = "llamacpp"
        extravars["vllm_server_bench_client_compat"] = str(run.record.compat.get("id") or "")
    if run.api_key_file is not None:
        extravars["vllm_server_api_key_file"] = str(run.api_key_file)
    if run.req.gateway:
        gw = _endpoint(run.record, run.inventory)
        extravars["vllm_server_bench_endpoint_port"] = gw.port
        if gw.own_server:
            extravars["vllm_server_bench_endpoint_address"] = gw.address()
    spec = RunSpec(
        playbook="bench", inventory=run.inventory, extravars=extravars, limit=run.limit, verbosity=run.ctx.verbosity
    )
    try:
        result = run.ctx.run(spec)
    except RunFailedError as e:
        missing = [f for f in e.failures if NO_SERVER_MESSAGE in f.message]
        if missing and len(missing) == len(e.failures):
            raise NoServerError(
                "; ".join(f.message for f in missing),
                hint=f"start them again with `zenops up --inventory {run.inventory} --model ...`",
            ) from e
        raise
    hosts = {h: dict(result.host_facts.get(h, {}).get("zenops_bench") or {}) for h in sorted(result.stats)}
    for host, h in hosts.items():
        if h and not h.get("client_cpus"):
            run.warn(f"{host}: the servers hold every CPU, so the client shares them (its load is in the figures)")
    return {h: {**v, "ansible_run": str(result.run_dir)} for h, v in hosts.items() if v}


def engine_metadata(record: ServingRecord) -> dict[str, Any]:
    """What served, for the results: llama.cpp and its GGUF format for a campaign's llama.cpp cell (its serving
    record's request names the format; the vLLM pair is then only the client's image), else nothing (zenops's vLLM
    servers: the plan's weights label them)."""
    fmt = record.request.get(LLAMACPP_KEY)
    if not fmt:
        return {}
    client = record.compat.get("vllm")
    return {"engine": LLAMA_CPP, "weights": str(fmt), "llamacpp": LLAMACPP_BUILD, "vllm": None, "zentorch": None,
            "client_vllm": client}  # fmt: skip


def _endpoint(record: ServingRecord, inventory: Path) -> services.Drainable:
    """The service every request goes through (zenops.deployment.services: the gateway), or refused."""
    gw = services.drainable(record.services)
    if gw is None:
        raise UsageError(
            f"the deployment of {inventory} has no gateway to benchmark",
            hint=f"add one with `zenops up -i {inventory} --model ... --gateway on`, or bench each server",
        )
    return gw


def _gateway_target(record: ServingRecord, inventory: Path, req: BenchRequest, limit: str | None) -> str:
    """`zenops bench --through-gateway`: one client on the gateway's host, against the gateway's port."""
    gw = _endpoint(record, inventory)
    if gw.tls:
        raise UsageError(
            "--gateway with a TLS gateway: the client talks plain HTTP on the gateway's host",
            hint="bench the servers themselves (no --gateway)",
        )
    if limit or req.compare_platforms:
        raise UsageError("--gateway benchmarks the whole deployment: not with --limit or --compare-platforms")
    if gw.own_server:  # no engine image there: the client runs on a serving host, against the gateway's address
        return sorted(record.plans)[0]
    return gw.host


def bench_inventory(ctx: RunContext, inventory: Path, req: BenchRequest, *, limit: str | None = None) -> BenchOutcome:
    config, warn, first_warning = ctx.config, ctx.warn, len(ctx.warnings)

    # bad usage first, before any other check; an empty --run-id is refused, not replaced by the default
    run_id = new_run_id() if req.run_id is None else req.run_id
    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"--run-id {run_id!r}: letters, digits, '.', '_' and '-' only (64 at most)")
    runs = runs_for(
        req.profile,
        concurrency=req.concurrency,
        num_prompts=req.num_prompts,
        input_len=req.input_len,
        output_len=req.output_len,
        num_warmups=req.num_warmups,
    )
    record, api_key_file = _serving_record(Store(config, inventory), inventory)
    if req.gateway:
        limit = _gateway_target(record, inventory, req, limit)
    price = req.price_per_hour
    if price is None and req.flavor:
        price = catalog.get_flavor(req.flavor, config.flavors).price_per_hour

    run_dir = req.runs_dir / run_id
    if run_dir.exists():
        raise UsageError(f"{run_dir} exists already", hint="pass another --run-id, or move that directory away")
    run_dir.mkdir(parents=True)
    started = _now()
    combo = record.compat
    metadata = {
        **({"target": "gateway", "endpoint": _endpoint(record, inventory).url} if req.gateway else {}),
        "flavor": req.flavor,
        "cloud": req.cloud,
        "profile": req.profile,
        "vllm": combo.get("vllm"),
        "zentorch": combo.get("zentorch"),
        "compat": combo.get("id"),
        **engine_metadata(record),
    }

    run = _Run(
        ctx, inventory, req, record, runs, run_id, run_dir, api_key_file, metadata, limit=limit
    )  # fmt: skip
    phases: list[dict[str, Any]] = []
    status = "failed"
    try:
        hosts = _phase(run)
        phases.append({"platform": "as deployed", "hosts": hosts, "finished_at": _now()})
        if req.compare_platforms:
            phases.extend(_compare(run, hosts))
        status = "complete"
    finally:  # a failed run keeps what it fetched, with its manifest: the text summaries and logs say why
        manifest = _finish(run, phases, started, price, status)
        token_file = record.request.get("hf_token_file")
        leaked = scrub(run_dir, secret_values(api_key_file, Path(token_file) if token_file else None))
        if leaked:
            warn(f"secret values were found and hidden in: {', '.join(str(p) for p in leaked)}")

    rep = _read_report(ctx, run_dir, phases, len(runs))
    _warn_about_ceiling(rep, inventory, warn)
    return BenchOutcome(run_id, run_dir, runs, phases, rep, manifest, ctx.warnings[first_warning:])


def _serving_record(store: Store, inventory: Path) -> tuple[ServingRecord, Path | None]:
    """The serving record of the servers to bench and their API key file (None: no key); NoServerError, with the fix,
    when zenops started none or the key file is gone."""
    record = store.record()
    if record is None:
        raise NoServerError(
            f"zenops has not started servers for {inventory} (no serving record {store.record_path})",
            hint=f"start them with `zenops up --inventory {inventory} --model MODEL`, then benchmark",
        )
    api_key_file: Path | None = None
    if record.api_key_file:
        api_key_file = Path(record.api_key_file)
        if not api_key_file.is_file():
            raise NoServerError(
                f"the API key file of these servers is gone: {api_key_file}",
                hint=f"start them again with `zenops up --inventory {inventory} --model ...` (a new key is made)",
            )
    return record, api_key_file


def _read_report(ctx: RunContext, run_dir: Path, phases: list[dict[str, Any]], runs: int) -> report_lib.Report:
    """The finished run directory read back as a report; a warning when it holds fewer results than ``runs`` per
    server benched."""
    config = ctx.config
    try:
        rep = report_lib.load([run_dir], price_of=lambda f: catalog.get_flavor(f, config.flavors).price_per_hour)
    except NoBenchResultError as e:
        raise NoBenchResultError(
            f"vllm bench serve left no result in {run_dir}",
            hint="look at the *.txt summaries and server-*.log files there, and the run log under the state dir",
        ) from e
    expected = sum(len(h.get("servers") or []) for p in phases for h in p["hosts"].values()) * runs
    if len(rep.results) < expected:
        ctx.warn(f"{expected} results expected, {len(rep.results)} found in {run_dir}")
    return rep


def _warn_about_ceiling(rep: report_lib.Report, inventory: Path, warn: Callable[[str], None]) -> None:
    """No ceiling at all, or a result above its ceiling: a ceiling is measured once (the probe's best pass), and one
    measured while something else loaded the host is too low; both say how to measure it again."""
    again = f"`zenops facts --bandwidth --inventory {inventory}`, then `zenops up` again re-plans with it"
    none = bool(rep.results) and all(r.roofline_pct is None for r in rep.results)
    peer = next((r.metadata["layout"] for r in rep.results if r.metadata.get("layout", "zenops") != "zenops"), None)
    if none and peer:
        warn(f"no ceiling to compare with: the servers run {peer}'s settings (--layout), which zenops does not plan a "
             "ceiling for; compare them with zenops's own plan on the same host")  # fmt: skip
    elif none:
        warn(f"no ceiling to compare with: the servers' plan has no roofline (measure the hosts with {again}; "
             "or `zenops up --measure`)")  # fmt: skip
    above = [r for r in report_lib.ordered(rep.results) if r.roofline_pct is not None and r.roofline_pct > 100]
    for r in above:
        warn(
            f"{r.label or r.model} at concurrency {r.max_concurrency}: {r.output_tok_s:.1f} tok/s is "
            f"{r.roofline_pct:.0f}% of the plan's ceiling: the ceiling was measured too low (most often while "
            f"something else loaded the host); measure it again on a quiet host with {again}"
        )


def _finish(run: _Run, phases: list[dict[str, Any]], started: str, price: float | None, status: str) -> dict[str, Any]:
    """The provenance the controller holds (each host's facts and plan) and the run's manifest, run.json."""
    hosts = sorted({h for p in phases for h in p["hosts"]} | {d.name for d in run.run_dir.iterdir() if d.is_dir()})
    for host in hosts:
        fp = facts_path(run.ctx.config, host)
        if fp.is_file():
            (run.run_dir / host).mkdir(exist_ok=True)
            shutil.copyfile(fp, run.run_dir / host / "facts.json")
        if host in run.record.plans:
            _write_json(run.run_dir / host / "plan.json", run.record.plans[host])
    manifest: dict[str, Any] = {
        "run_id": run.run_id,
        "status": status,
        "zenops_version": zenops.__version__,
        "started_at": started,
        "finished_at": _now(),
        "profile": run.req.profile,
        "runs": [r.to_dict() for r in run.runs],
        "compare_platforms": run.req.compare_platforms,
        "target": "gateway" if run.req.gateway else "servers",
        "endpoint": _endpoint(run.record, run.inventory).url if run.req.gateway else None,
        "inventory": str(run.inventory.resolve()),
        "deployment": run.req.deployment or inventory_label(run.inventory),
        "cloud": run.req.cloud,
        "flavor": run.req.flavor,
        "price_per_hour": price,
        "label": run.req.label,
        "campaign": run.req.campaign,
        "model": run.record.model,
        "compat": dict(run.record.compat) or None,
        "serve_request": dict(run.record.request) or None,
        "hosts": hosts,
        "phases": phases,
    }
    manifest = {k: v for k, v in manifest.items() if v is not None}
    _write_json(run.run_dir / report_lib.MANIFEST, manifest)
    return manifest


def _platform_of(hosts: Mapping[str, Any]) -> set[str]:
    return {str(s.get("platform") or "unknown") for h in hosts.values() for s in h.get("servers") or []}


def _compare(run: _Run, first: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The same runs on the other platform (zentorch on <-> off): restart the servers that way, bench, and put them
    back as they were, whatever happened in between."""
    deployed = _platform_of(first)
    if deployed not in ({"zen"}, {"cpu"}):
        run.warn(f"--compare-platforms: the servers run on {', '.join(sorted(deployed))}: not one platform to swap")
        return []
    other = "cpu" if deployed == {"zen"} else "zen"
    original = request_from_dict(run.record.request)
    refused = False
    try:
        run.serve(replace(original, platform=other), record=False)
        return [{"platform": other, "hosts": _phase(run), "finished_at": _now()}]
    except PlanRefusedError as e:  # refused before anything was restarted: nothing to put back
        refused = True
        run.warn(f"--compare-platforms: no {other} platform here ({e.message}); only the deployed one was measured")
        return []
    finally:
        if not refused:  # the switch may have restarted some servers, even if it failed later
            _restore(run, original, other)


def _restore(run: _Run, original: ServeRequest, other: str) -> None:
    """Put the servers back as recorded, even after Ctrl-C (a fresh cancel event), or say where they were left."""
    try:
        run.serve(original, cancel=threading.Event())
    except ZenopsError as e:
        raise ZenopsError(
            f"--compare-platforms could not put the servers back: they may still run on the {other} platform "
            f"({e.message})",
            hint=f"start them as before with `zenops up --inventory {run.inventory} --model {original.model}`",
        ) from e
