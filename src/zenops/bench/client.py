"""The benchmark client, as the vllm_server role's ``bench`` entry point runs it: its docker command line, the CPUs
it may use, result names, what is recorded of a server (``docker inspect`` without its environment) and why runs
failed. Pure: plugins/filter/vllm_bench.py calls these on the controller, the unit tests call them directly."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import zenops
from zenops.cpulist import format_cpulist, parse_cpulist
from zenops.metrics import server as server_metrics

BENCH_LABEL = "vllm-bench"
# llama.cpp's servers (roles/llamacpp_server): benched by the same client, run in the vLLM engine image
LLAMACPP_ROLE = "llamacpp-server"
LLAMACPP_ENGINE = "llama.cpp"  # zenops.llamacpp.LLAMA_CPP (not imported: it needs the planner)
CLIENT_RESULT_DIR = "/zenops-bench"  # the host's result directory, inside the bench container
# the client's entry point when the server requires a key: the key goes from its file into the environment of the
# client process only (a missing or unreadable file stops the run: no request goes out without it); then the
# sampler's program ($1) runs vllm with the rest
KEY_WRAPPER = (
    'set -e; key=$(cat "$0"); [ -n "$key" ]; export OPENAI_API_KEY="$key"; unset key; '
    'code=$1; shift; exec python3 -c "$code" "$@"'
)
# the program that runs `vllm bench serve` and reads the server's /metrics around and during it (zenops.bench.sampler)
SAMPLER = (Path(__file__).parent / "sampler.py").read_text()
# zenops's own load client, the sampler runs it instead of `vllm bench serve` (client "zenops"): zenops.bench.loadgen
LOADGEN = (Path(__file__).parent / "loadgen.py").read_text()
CLIENTS = ("vllm", "zenops")  # `vllm bench serve` (the published format); zenops's light client (starts in ~1 s)
SERVER_METRICS_SUFFIX = server_metrics.SUFFIX  # beside each run's result: <stem>.server.json


# --- the client's command line (used by the role through the filter plugin) -----------------------------------


def free_cpus(online: str, used: Iterable[str]) -> str:
    """The CPUs of ``online`` that no server's cpuset holds, as a cpulist; "" when the servers hold them all (the
    client then shares the servers' CPUs: on a host that small the figures include the client's own load)."""
    taken: set[int] = set()
    for u in used:
        taken.update(parse_cpulist(u))
    return format_cpulist([c for c in parse_cpulist(online) if c not in taken])


def result_stem(platform: str, run: Mapping[str, Any]) -> str:
    """File name (without suffix) of one run's result: ``<platform>-c<N>``, e.g. ``zen-c4``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", platform or "unknown")
    return f"{safe}-c{run['max_concurrency']}"


TIMED_OUT = (124, 137)  # timeout(1): the run outlasted its time (137: killed after the grace period)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def run_seed(run_id: str, stem: str) -> int:
    """`vllm bench serve --seed` of one run: a seed of its own per run id and level, so every run draws new random
    prompts. vLLM's default (seed 0) sends the same prompts every run, and a server's prefix cache (vLLM's, and
    llama.cpp's slots) can answer the repeats and the next levels from memory (with repeated prompts, on a 2-vCPU Zen 5
    with a 1B model, llama.cpp's median TTFT at 16 concurrent requests was 0.2 s against vLLM's 4.6 s). The same run id
    and level give the same seed (a re-run draws the same prompts)."""
    return int.from_bytes(hashlib.sha256(f"{run_id}/{stem}".encode()).digest()[:4], "big") & 0x7FFFFFFF


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
    key_file: str = "",
    metadata: Mapping[str, Any] | None = None,
    timeout: int = 3600,
    docker: str = "docker",
    client: str = "vllm",
) -> list[str]:
    """`docker run ... vllm bench serve ...` for one run against one server, in the server's own image; with
    ``client`` "zenops", zenops's own load client (zenops.bench.loadgen: the same flags and result keys, standard
    library only, no torch to import) in its place.

    The client shares the server's volumes (model directory, Hugging Face cache: the tokenizer is there, offline),
    uses the host's network (the server listens there), runs on ``cpuset`` when given. A llama.cpp server (its
    :func:`server_view` has ``client_image``, the vLLM engine image the role found on the host, and
    ``tokenizer_volume``, the copied Hugging Face directory) is benched from that image, the directory mounted
    read-only for the tokenizer; its secrets volume holds the key as the vLLM server's does. With ``key_file`` (a path
    inside the container: the server's secrets volume, read-only) a shell reads the API key into OPENAI_API_KEY (the
    variable vllm bench sends as a bearer token) just before it starts the client: the key is never on a command line
    nor in the container's configuration (``docker inspect``).
    """
    if client not in CLIENTS:
        raise ValueError(f"client {client!r} is not one of {', '.join(CLIENTS)}")
    stem = result_stem(platform, run)
    base_url = f"http://{server.get('address') or '127.0.0.1'}:{server['port']}"
    meta = _run_metadata(server, run_id=run_id, platform=platform, metadata=metadata)
    meta["num_warmups"] = int(run.get("num_warmups") or 0)  # the server counts them: zenops.report's token check
    argv = _docker_run(
        server,
        run_id=run_id,
        stem=stem,
        result_dir=result_dir,
        base_url=base_url,
        cpuset=cpuset,
        key_file=key_file,
        timeout=timeout,
        docker=docker,
    )
    if key_file:  # sh -c SCRIPT $0 $@: the key file is $0, the sampler's program $1, vllm's arguments follow
        argv += ["-c", KEY_WRAPPER, key_file, SAMPLER]
    else:
        argv += ["-c", SAMPLER]
    if client == "zenops":
        argv += ["--zenops-load", LOADGEN]
    argv += _bench_serve(run, server, run_id=run_id, stem=stem, base_url=base_url)
    argv += ["--metadata", *(f"{k}={v}" for k, v in meta.items())]
    return argv


def _run_metadata(
    server: Mapping[str, Any], *, run_id: str, platform: str, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The key=value pairs a run's result carries (``--metadata``): where it ran, against what, and ``metadata``."""
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
    return meta


def _docker_run(
    server: Mapping[str, Any],
    *,
    run_id: str,
    stem: str,
    result_dir: str,
    base_url: str,
    cpuset: str,
    key_file: str,
    timeout: int,
    docker: str,
) -> list[str]:
    """`timeout ... docker run ... IMAGE`: the bench container of :func:`bench_argv`, up to its image."""
    argv = [
        # a run that outlasts its time is stopped: the docker CLI passes SIGTERM on to the client (then --rm)
        "timeout",
        "--kill-after=30",
        str(int(timeout)),
        docker,
        "run",
        "--rm",
        "--init",  # an init as PID 1: the timeout's SIGTERM reaches the client, its children are reaped
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
        *(["--volume", str(server["tokenizer_volume"])] if server.get("tokenizer_volume") else []),
        "--volume",
        f"{result_dir}:{CLIENT_RESULT_DIR}:rw",
        "--env",
        "HF_HUB_OFFLINE=1",
        "--env",
        f"ZENOPS_METRICS_URL={base_url}/metrics",
        "--env",
        f"ZENOPS_METRICS_OUT={CLIENT_RESULT_DIR}/{stem}{SERVER_METRICS_SUFFIX}",
        "--entrypoint",
        "/bin/sh" if key_file else "python3",
    ]
    if cpuset:
        argv += ["--cpuset-cpus", cpuset]
    argv.append(server.get("client_image") or server.get("image_id") or server["image"])
    return argv


def _bench_serve(
    run: Mapping[str, Any], server: Mapping[str, Any], *, run_id: str, stem: str, base_url: str
) -> list[str]:
    """`bench serve ...`: the client's arguments for one run (vllm's flags, which zenops's load client takes too)."""
    argv = [
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        base_url,
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
    argv += ["--seed", str(run_seed(run_id, stem))]
    if server.get("engine") == LLAMACPP_ENGINE:
        # llama-server (cpp-httplib) closes kept-alive connections that the client's pool then reuses: 4-11 of 8-64
        # requests per run failed with ServerDisconnectedError (2-vCPU Zen 5, 2026-11-29), none with a connection
        # per request. One TCP connect per request on the host's own network costs well under a millisecond.
        argv += ["--header", "Connection=close"]
    warmups = int(run.get("num_warmups") or 0)
    if warmups > 0:
        argv += ["--num-warmups", str(warmups)]
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
    host = args[args.index("--host") + 1] if "--host" in args[:-1] else ""
    view: dict[str, Any] = {
        "name": name,
        # where the client reaches it on the host: the address it listens at, loopback when it listens everywhere
        "address": "127.0.0.1" if host in ("", "0.0.0.0", "::") else host,
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
        "engine": "vllm",
    }
    if labels.get("io.zenops.role") == LLAMACPP_ROLE:  # its argv is llama-server's: the tokenizer is the HF directory
        tokenizer, model_dir = labels.get("io.zenops.tokenizer", ""), labels.get("io.zenops.model-dir", "")
        view.update(engine=LLAMACPP_ENGINE, format=labels.get("io.zenops.format", ""), tokenizer=tokenizer,
                    tokenizer_volume=f"{model_dir}:{tokenizer}:ro" if model_dir and tokenizer else "")  # fmt: skip
    return view


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
            # llama.cpp's servers have no vLLM platform to check: theirs is llamacpp (the role's result names too)
            "platform": h.get("platform", "llamacpp" if s.get("engine") == LLAMACPP_ENGINE else "unknown"),
            "platform_evidence": h.get("platform_evidence", ""),
            "memory": h.get("memory", ""),
            "versions": by_image.get(str(s.get("image_id")), {}),
            "image_info": image_info.get(str(s.get("image_id")), {}),
            "client_cpus": client_cpus or "shared with the servers",
        }
    return out


def artifact_paths(paths: Iterable[str], result_dir: str) -> list[str]:
    """The artifacts a host listed, as paths relative to ``result_dir``, each checked before the controller writes
    to a path built from it: the list comes from the host, and ansible.builtin.fetch with ``flat`` does not check
    where its ``dest`` lands. A path outside ``result_dir`` (absolute elsewhere, or with a ``..`` part) raises
    ValueError naming it, so a compromised server cannot write above the run's results on the controller."""
    root = PurePosixPath(result_dir)
    out = []
    for raw in paths:
        path = PurePosixPath(str(raw))
        try:
            rel = path.relative_to(root)
        except ValueError:
            rel = None
        if (
            rel is None
            or not path.is_absolute()
            or ".." in path.parts
            or rel.parts in ((), (".",))
            or any(c in str(raw) for c in "\0\n\r")
        ):
            raise ValueError(
                f"refusing the artifact path {str(raw)!r} the host reported: it is not a file under {result_dir} "
                "(a compromised host may try to write elsewhere on the controller)"
            )
        out.append(str(rel))
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
