"""`zenops bench`: run `vllm bench serve` against every server zenops started, from inside the server's own image,
and bring the results home with their provenance.

The pure parts (profiles, the client's docker command line, the CPUs it may use, the server descriptions taken from
``docker inspect`` without their environment, secret scrubbing) are plain functions: the role's filter plugin
(plugins/filter/vllm_bench.py) and the unit tests call them. ``bench_inventory`` runs the playbook
(playbooks/bench.yml, the vllm_server role's ``bench`` entry point) and writes the run directory::

    runs/<run-id>/run.json                          the manifest: profile, runs, flavor and price, versions, timing
    runs/<run-id>/<host>/facts.json, plan.json     the host's CPU topology and its serving plan
    runs/<run-id>/<host>/<instance>/<platform>-c<N>.json / .txt    the bench result and text summary, per level
    runs/<run-id>/<host>/<instance>/server-<platform>.json / .log  the server (image, versions inside it), log tail

`zenops report runs/<run-id>` reads it back (run.json prices the results).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zenops
from zenops import catalog
from zenops import report as report_lib
from zenops.config import Config
from zenops.errors import BenchFailedError, ConfigError, NoServerError, RunFailedError, UsageError, ZenopsError
from zenops.facts import facts_path
from zenops.planner import PlanRefusedError, cpulist
from zenops.runner import ProgressSink, RunSpec, run_playbook, settings_from_config
from zenops.serve import (
    HF_TOKEN_ENV,
    ServeRequest,
    load_serving_record,
    request_from_dict,
    serve_inventory,
    serving_record_path,
)

BENCH_LABEL = "vllm-bench"
NO_SERVER_MESSAGE = (
    "no zenops vLLM server"  # the role's words when a host runs none (roles/vllm_server/tasks/bench.yml)
)
CLIENT_RESULT_DIR = "/zenops-bench"  # the host's result directory, inside the bench container


class NoBenchResultError(BenchFailedError):
    """`vllm bench serve` ran but left no result."""


# --- profiles -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRun:
    """One `vllm bench serve` invocation against one server."""

    max_concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    temperature: float
    ignore_eos: bool = True
    dataset: str = "random"

    @property
    def name(self) -> str:
        return f"c{self.max_concurrency}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    dataset: str
    input_len: int
    output_len: int
    num_prompts: int
    concurrency: tuple[int, ...]
    temperature: float
    ignore_eos: bool


def _pos_int(where: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(where, key, f"{value!r} is not a whole number above 0")
    return value


def profiles() -> dict[str, Profile]:
    """The profiles of zenops/catalog/bench.yaml."""
    where, entries = catalog._load_resource("bench.yaml", "profiles")
    out = {}
    for name, e in entries.items():
        levels = e.get("concurrency")
        if not isinstance(levels, list) or not levels:
            raise ConfigError(where, f"{name}.concurrency", "must be a non-empty list")
        out[name] = Profile(
            name=name,
            description=str(e.get("description", "")),
            dataset=str(e.get("dataset", "random")),
            input_len=_pos_int(where, f"{name}.input_len", e.get("input_len")),
            output_len=_pos_int(where, f"{name}.output_len", e.get("output_len")),
            num_prompts=_pos_int(where, f"{name}.num_prompts", e.get("num_prompts")),
            concurrency=tuple(_pos_int(where, f"{name}.concurrency", c) for c in levels),
            temperature=float(e.get("temperature", 0.0)),
            ignore_eos=bool(e.get("ignore_eos", True)),
        )
    return out


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> ``(1, 2, 4, 8)``: concurrency levels, each a whole number above 0, in the order given."""
    levels: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"--concurrency {text}: {part!r} is not a whole number above 0", hint="e.g. 1,2,4,8")
        if int(part) not in levels:
            levels.append(int(part))
    if not levels:
        raise UsageError("--concurrency is empty", hint="e.g. --concurrency 1,2,4,8")
    return tuple(levels)


def runs_for(
    profile: str,
    *,
    concurrency: Sequence[int] | None = None,
    num_prompts: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
) -> list[BenchRun]:
    """The runs of ``profile``, one per concurrency level; flags that are set win over the profile's values."""
    known = profiles()
    if profile not in known:
        raise UsageError(f"unknown profile {profile!r}", hint=f"use one of: {', '.join(sorted(known))}")
    p = known[profile]
    for flag, value in (("--num-prompts", num_prompts), ("--input-len", input_len), ("--output-len", output_len)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: must be above 0")
    return [
        BenchRun(
            max_concurrency=level,
            num_prompts=num_prompts or p.num_prompts,
            input_len=input_len or p.input_len,
            output_len=output_len or p.output_len,
            temperature=p.temperature,
            ignore_eos=p.ignore_eos,
            dataset=p.dataset,
        )
        for level in (concurrency or p.concurrency)
    ]


# --- the client's command line (used by the role through the filter plugin) -----------------------------------


def parse_cpus(text: str) -> list[int]:
    """A cpulist (``0-3,8``) as numbers; empty text -> []."""
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        item = raw.strip()
        if not item:
            continue
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a cpu list: {text!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def free_cpus(online: str, used: Iterable[str]) -> str:
    """The CPUs of ``online`` that no server's cpuset holds, as a cpulist; "" when the servers hold them all (the
    client then shares the servers' CPUs: on a host that small the figures include the client's own load)."""
    taken: set[int] = set()
    for u in used:
        taken.update(parse_cpus(u))
    return cpulist([c for c in parse_cpus(online) if c not in taken])


def result_stem(platform: str, run: Mapping[str, Any]) -> str:
    """File name (without suffix) of one run's result: ``<platform>-c<N>``, e.g. ``zen-c4``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", platform or "unknown")
    return f"{safe}-c{run['max_concurrency']}"


TIMED_OUT = (124, 137)  # timeout(1): the run outlasted its time (137: killed after the grace period)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def client_name(run_id: str, server: Mapping[str, Any], stem: str) -> str:
    """The benchmark client's container name: one per run, instance and level (never two alike at once)."""
    return f"zenops-bench-{run_id}-{server['instance']}-{stem}"


def bench_argv(
    run: Mapping[str, Any],
    server: Mapping[str, Any],
    *,
    run_id: str,
    result_dir: str,
    platform: str,
    cpuset: str = "",
    env_file: str = "",
    metadata: Mapping[str, Any] | None = None,
    timeout: int = 3600,
    docker: str = "docker",
) -> list[str]:
    """`docker run ... vllm bench serve ...` for one run against one server, in the server's own image.

    The client shares the server's volumes (model directory, Hugging Face cache: the tokenizer is there, offline),
    uses the host's network (the server listens there), runs on ``cpuset`` when given, and reads the API key from
    ``env_file`` (as OPENAI_API_KEY, the variable vllm bench sends as a bearer token): never on the command line.
    """
    stem = result_stem(platform, run)
    meta = {
        "platform": platform or "unknown",
        "run_id": run_id,
        "instance": server["instance"],
        "server": server["name"],
        "image": server.get("image", ""),
        "zenops": zenops.__version__,
        **{k: v for k, v in (metadata or {}).items() if v not in (None, "")},
    }
    if meta["platform"] != "zen":
        meta.pop("zentorch", None)  # installed in the image, but not what served these requests
    argv = [
        # a run that outlasts its time is stopped: the docker CLI passes SIGTERM on to the client (then --rm)
        "timeout",
        "--kill-after=30",
        str(int(timeout)),
        docker,
        "run",
        "--rm",
        "--name",
        client_name(run_id, server, stem),
        "--label",
        "io.zenops.managed=true",
        "--label",
        f"io.zenops.role={BENCH_LABEL}",
        "--label",
        f"io.zenops.run={run_id}",
        "--label",
        f"io.zenops.deployment={server.get('deployment', '')}",
        "--network",
        "host",
        "--volumes-from",
        f"{server['name']}:ro",
        "--volume",
        f"{result_dir}:{CLIENT_RESULT_DIR}:rw",
        "--env",
        "HF_HUB_OFFLINE=1",
        "--entrypoint",
        "vllm",
    ]
    if cpuset:
        argv += ["--cpuset-cpus", cpuset]
    if env_file:
        argv += ["--env-file", env_file]
    argv += [
        server.get("image_id") or server["image"],
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{server['port']}",
        "--endpoint",
        "/v1/completions",
        "--model",
        server["model"],
        "--tokenizer",
        server["tokenizer"],
        "--dataset-name",
        str(run.get("dataset", "random")),
        "--random-input-len",
        str(run["input_len"]),
        "--random-output-len",
        str(run["output_len"]),
        "--num-prompts",
        str(run["num_prompts"]),
        "--max-concurrency",
        str(run["max_concurrency"]),
        "--temperature",
        str(run["temperature"]),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        CLIENT_RESULT_DIR,
        "--result-filename",
        f"{stem}.json",
    ]
    if run.get("ignore_eos", True):
        argv.append("--ignore-eos")
    argv += ["--metadata", *(f"{k}={v}" for k, v in meta.items())]
    return argv


def server_view(inspect: Mapping[str, Any]) -> dict[str, Any]:
    """What zenops records of one server container (``docker inspect`` data): its identity, image, CPUs, model and
    command line. Never its environment: that holds the API key and the HF token."""
    cfg = inspect.get("Config") or {}
    labels = cfg.get("Labels") or {}
    state = inspect.get("State") or {}
    host_cfg = inspect.get("HostConfig") or {}
    # Config.Cmd is the command after the entrypoint (`vllm serve`): the model first. (docker's top-level Args
    # starts with the entrypoint's own arguments, "serve".)
    args = list(cfg.get("Cmd") or [])
    name = str(inspect.get("Name", "")).lstrip("/")
    port = labels.get("io.zenops.port")
    return {
        "name": name,
        "instance": int(labels.get("io.zenops.instance", 0)),
        "port": int(port) if port else None,
        "model": labels.get("io.zenops.model", ""),
        "deployment": labels.get("io.zenops.deployment", ""),
        "tokenizer": args[0] if args else labels.get("io.zenops.model", ""),
        "entrypoint": list(cfg.get("Entrypoint") or []),
        "args": args,
        "image": cfg.get("Image", ""),
        "image_id": inspect.get("Image", ""),
        "cpuset": host_cfg.get("CpusetCpus", ""),
        "cpuset_mems": host_cfg.get("CpusetMems", ""),
        "running": bool(state.get("Running")),
        "status": state.get("Status", ""),
        "exit_code": state.get("ExitCode"),
        "restarts": inspect.get("RestartCount", 0),
        "started_at": state.get("StartedAt", ""),
    }


def describe_servers(
    servers: Sequence[Mapping[str, Any]],
    *,
    health: Sequence[Mapping[str, Any]],
    versions: Sequence[Mapping[str, Any]],
    images: Sequence[Mapping[str, Any]],
    client_cpus: str,
) -> dict[str, dict[str, Any]]:
    """Server name -> its description for the run directory: the server (``server_view``), the platform and
    readiness its health check saw, the versions inside its image, the image's tags and labels, the client's CPUs.

    ``health`` and ``versions`` are the registered loop results of the role's tasks (``item`` is the server, resp.
    the image id; a version probe prints one JSON object)."""
    by_image: dict[str, dict[str, Any]] = {}
    for r in versions:
        try:
            found = json.loads(str(r.get("stdout") or "{}"))
        except json.JSONDecodeError:
            found = {"error": str(r.get("stdout"))[:200]}
        by_image[str(r.get("item"))] = found if isinstance(found, dict) else {}
    image_info = {
        str(i.get("Id")): {
            "tags": list(i.get("RepoTags") or []),
            "labels": dict((i.get("Config") or {}).get("Labels") or {}),
            "created": i.get("Created"),
        }
        for i in images
    }
    checks = {str((h.get("item") or {}).get("name")): h for h in health}
    out = {}
    for s in servers:
        h = checks.get(str(s["name"]), {})
        out[str(s["name"])] = {
            **s,
            "platform": h.get("platform", "unknown"),
            "platform_evidence": h.get("platform_evidence", ""),
            "memory": h.get("memory", ""),
            "versions": by_image.get(str(s.get("image_id")), {}),
            "image_info": image_info.get(str(s.get("image_id")), {}),
            "client_cpus": client_cpus or "shared with the servers",
        }
    return out


def run_failures(
    results: Sequence[Mapping[str, Any]], *, result_dir: str, platforms: Mapping[str, str], files: Sequence[str]
) -> list[str]:
    """Why runs of the role's bench loop failed (non-zero exit, timeout, no result file); empty when none did.

    ``results`` are the registered loop results (``item`` is [server, run])."""
    present = set(files)
    out = []
    for r in results:
        server, run = r["item"][0], r["item"][1]
        stem = result_stem(platforms.get(server["name"], "unknown"), run)
        what = f"{server['name']} {stem}"
        rc = r.get("rc")
        if rc != 0:
            text = str(r.get("stderr") or r.get("msg") or "")
            tail = " / ".join(line.strip() for line in text.splitlines()[-3:] if line.strip())
            why = "timed out (--timeout)" if rc is None or rc in TIMED_OUT else f"exit {rc}"
            out.append(f"{what}: {why}" + (f": {tail}" if tail else ""))
        elif f"{result_dir}/{server['instance']}/{stem}.json" not in present:
            out.append(f"{what}: exit 0 but no result file")
    return out


# --- secrets --------------------------------------------------------------------------------------------------


def scrub(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Replace every secret value in the files under ``root`` by ``<hidden>``; the files that held one."""
    values = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)
    if not values:
        return []
    hit = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            data = path.read_bytes()
            if any(v.encode() in data for v in values):
                path.unlink()  # a binary file holding a secret: not worth keeping
                hit.append(path)
            continue
        new = text
        for v in values:
            new = new.replace(v, "<hidden>")
        if new != text:
            path.write_text(new, encoding="utf-8")
            hit.append(path)
    return hit


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
    compare_platforms: bool = False
    runs_dir: Path = Path("runs")
    run_id: str | None = None
    flavor: str | None = None
    price_per_hour: float | None = None
    cloud: str | None = None
    deployment: str | None = None
    timeout: int = 3600
    log_lines: int = 200


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

    config: Config
    inventory: Path
    req: BenchRequest
    record: Mapping[str, Any]
    runs: list[BenchRun]
    run_id: str
    run_dir: Path
    api_key_file: Path | None
    metadata: Mapping[str, Any]
    limit: str | None = None
    verbosity: int = 0
    sink: ProgressSink | None = None
    cancel: threading.Event | None = None
    warn: Callable[[str], None] = lambda _text: None

    def serve(self, request: ServeRequest, *, record: bool = True, cancel: threading.Event | None = None) -> None:
        serve_inventory(
            self.config, self.inventory, request, limit=self.limit, verbosity=self.verbosity, sink=self.sink,
            cancel=cancel or self.cancel, record=record,
        )  # fmt: skip


def _phase(run: _Run) -> dict[str, Any]:
    """One run of playbooks/bench.yml: every run against every server; host -> what it benchmarked."""
    extravars: dict[str, Any] = {
        "vllm_server_bench_run_id": run.run_id,
        "vllm_server_bench_runs": [r.to_dict() for r in run.runs],
        "vllm_server_bench_dest": str(run.run_dir.resolve()),
        "vllm_server_bench_metadata": dict(run.metadata),
        "vllm_server_bench_timeout": run.req.timeout,
        "vllm_server_bench_log_lines": run.req.log_lines,
        "vllm_server_deployment": run.inventory.stem,
    }
    if run.api_key_file is not None:
        extravars["vllm_server_api_key_file"] = str(run.api_key_file)
    spec = RunSpec(
        playbook="bench", inventory=run.inventory, extravars=extravars, limit=run.limit, verbosity=run.verbosity
    )
    try:
        result = run_playbook(spec, settings_from_config(run.config), run.sink, run.cancel)
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


def bench_inventory(
    config: Config,
    inventory: Path,
    req: BenchRequest,
    *,
    limit: str | None = None,
    verbosity: int = 0,
    sink: ProgressSink | None = None,
    cancel: threading.Event | None = None,
    note: Callable[[str], None] = lambda _text: None,
) -> BenchOutcome:
    warnings: list[str] = []

    def warn(text: str) -> None:
        warnings.append(text)
        note(text)

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
    )
    record = load_serving_record(config, inventory)
    if record is None:
        raise NoServerError(
            f"zenops has not started servers for {inventory} (no serving record"
            f" {serving_record_path(config, inventory)})",
            hint=f"start them with `zenops up --inventory {inventory} --model MODEL`, then benchmark",
        )
    api_key_file: Path | None = None
    if record.get("api_key_file"):
        api_key_file = Path(record["api_key_file"])
        if not api_key_file.is_file():
            raise NoServerError(
                f"the API key file of these servers is gone: {api_key_file}",
                hint=f"start them again with `zenops up --inventory {inventory} --model ...` (a new key is made)",
            )
    price = req.price_per_hour
    if price is None and req.flavor:
        price = catalog.get_flavor(req.flavor, config.flavors).price_per_hour

    run_dir = req.runs_dir / run_id
    if run_dir.exists():
        raise UsageError(f"{run_dir} exists already", hint="pass another --run-id, or move that directory away")
    run_dir.mkdir(parents=True)
    started = _now()
    combo = record.get("compat") or {}
    metadata = {
        "flavor": req.flavor,
        "cloud": req.cloud,
        "profile": req.profile,
        "vllm": combo.get("vllm"),
        "zentorch": combo.get("zentorch"),
        "compat": combo.get("id"),
    }

    run = _Run(
        config, inventory, req, record, runs, run_id, run_dir, api_key_file, metadata,
        limit=limit, verbosity=verbosity, sink=sink, cancel=cancel, warn=warn,
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
        token_file = (record.get("request") or {}).get("hf_token_file")
        leaked = scrub(run_dir, secret_values(api_key_file, Path(token_file) if token_file else None))
        if leaked:
            warn(f"secret values were found and hidden in: {', '.join(str(p) for p in leaked)}")

    try:
        rep = report_lib.load([run_dir], price_of=lambda f: catalog.get_flavor(f, config.flavors).price_per_hour)
    except report_lib.NoBenchResultError as e:
        raise NoBenchResultError(
            f"vllm bench serve left no result in {run_dir}",
            hint="look at the *.txt summaries and server-*.log files there, and the run log under the state dir",
        ) from e
    expected = sum(len(h.get("servers") or []) for p in phases for h in p["hosts"].values()) * len(runs)
    if len(rep.results) < expected:
        warn(f"{expected} results expected, {len(rep.results)} found in {run_dir}")
    _warn_without_ceiling(rep, inventory, warn)
    return BenchOutcome(run_id, run_dir, runs, phases, rep, manifest, warnings)


def _warn_without_ceiling(rep: report_lib.Report, inventory: Path, warn: Callable[[str], None]) -> None:
    if rep.results and all(r.roofline_pct is None for r in rep.results):
        warn(
            "no ceiling to compare with: the servers' plan has no roofline (measure the hosts with "
            f"`zenops facts --bandwidth --inventory {inventory}`, then `zenops up` again re-plans with it; "
            "or `zenops up --measure`)"
        )


def _finish(run: _Run, phases: list[dict[str, Any]], started: str, price: float | None, status: str) -> dict[str, Any]:
    """The provenance the controller holds (each host's facts and plan) and the run's manifest, run.json."""
    hosts = sorted({h for p in phases for h in p["hosts"]} | {d.name for d in run.run_dir.iterdir() if d.is_dir()})
    for host in hosts:
        fp = facts_path(run.config, host)
        if fp.is_file():
            (run.run_dir / host).mkdir(exist_ok=True)
            shutil.copyfile(fp, run.run_dir / host / "facts.json")
        if host in (run.record.get("plans") or {}):
            _write_json(run.run_dir / host / "plan.json", run.record["plans"][host])
    manifest: dict[str, Any] = {
        "run_id": run.run_id,
        "status": status,
        "zenops_version": zenops.__version__,
        "started_at": started,
        "finished_at": _now(),
        "profile": run.req.profile,
        "runs": [r.to_dict() for r in run.runs],
        "compare_platforms": run.req.compare_platforms,
        "inventory": str(run.inventory.resolve()),
        "deployment": run.req.deployment or run.inventory.stem,
        "cloud": run.req.cloud,
        "flavor": run.req.flavor,
        "price_per_hour": price,
        "model": run.record.get("model"),
        "compat": run.record.get("compat"),
        "serve_request": run.record.get("request"),
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
    original = request_from_dict(run.record.get("request") or {})
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
