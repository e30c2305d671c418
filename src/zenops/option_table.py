"""The one table of zenops's command options: every row says its flag, type, default, help, the commands that take it
(with a command's own variant: its help, ``required``, an old spelling), the request field it fills and the service
it configures. As molecule's ``CliOptions`` registry: an option is declared once, here, and each command picks rows.

* the serving and engine rows are zenops.request_options.OPTIONS (the campaign file and the rollout read them too);
* the rows of this module: target (which hosts), cloud (`up --cloud`), gateway (the fleet endpoint, its service's
  rows), scaler (`up --replicas`: the scaling loop's service), batch and gate (`rollout`), bench, and consent
  (--dry-run, --yes).

zenops.cli.options makes the click options of a command from its rows (``options(command, ...)``); a request
(ServeRequest, PlanOptions, RolloutRequest, BenchRequest, and the CLI's CloudFlags and GatewayFlags) is built from
the rows' values by :func:`request_from_rows`, never field by field. Pure: no click, no I/O, nothing imported that
--help must not load.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from zenops.request_options import OPTIONS, Option

T = TypeVar("T")

# the commands (their path below `zenops`) that take the target rows
_HOSTS = ("bench", "down", "facts", "logs", "plan", "rollout", "ssh", "status", "top", "up")
_DEPLOYMENT = ("bench", "down", "image bake", "logs", "rollout", "ssh", "status", "top", "up")
_CLOUD = (
    "bench",
    "config init",
    "down",
    "image bake",
    "leaks",
    "logs",
    "reap",
    "rollout",
    "ssh",
    "status",
    "top",
    "up",
)
_NAMES: dict[str, Any] = {
    "old": ("--name",)
}  # `up` and `down` name the deployment they make or remove; --name was its spelling
_DEFAULT_CLOUD_ENV: dict[str, Any] = {"envvar": "OS_CLOUD", "show_envvar": True}  # as the openstack CLI takes it

TARGET: tuple[Option, ...] = (
    Option(
        "inventory", "--inventory", "path", short="-i", commands=_HOSTS, group="target", requests=(),
        help="Ansible inventory (YAML or INI) of hosts you already have: bare metal or any SSH host.",
    ),
    Option(
        "deployment", "--deployment", "str", metavar="NAME", commands=_DEPLOYMENT, group="target",
        requests=("CloudFlags",),
        help="A deployment `zenops up --cloud` made (its inventory, flavor, price).",
        variants={
            "up": {"help": "Deployment name (default: from the flavor). Re-using a name adopts.", **_NAMES},
            "down": {"help": "The deployment to remove.", **_NAMES},
            "status": {"help": "Only this deployment (a name `zenops up --cloud` gave)."},
        },
    ),
    Option(
        "cloud", "--cloud", "str", metavar="NAME", commands=_CLOUD, group="target", requests=("CloudFlags",),
        help="clouds.yaml entry (e.g. flex, sandbox): where `up` creates servers (default with --flavor: $OS_CLOUD); "
        "for a deployment, the cloud it is in (default: where the ledger says).",
        variants={
            "config init": {"help": "The clouds.yaml entry to write a profile for.", "required": True},
            "down": {"help": "clouds.yaml entry (default: where the ledger says the deployment is)."},
            "leaks": {"help": "clouds.yaml entry to inspect.", "required": True, **_DEFAULT_CLOUD_ENV},
            "reap": {"help": "clouds.yaml entry to reap.", "required": True, **_DEFAULT_CLOUD_ENV},
            "status": {"help": "Only this cloud."},
        },
    ),
    Option(
        "limit", "--limit", "str", metavar="PATTERN", commands=("bench", "down", "facts", "logs", "plan", "up"),
        group="target", requests=(), help="Only these hosts/groups of the inventory.",
        variants={
            "plan": {
                "help": "Only these hosts: with --inventory, hosts/groups of it (an Ansible pattern); with a "
                "multi-host --facts file, one host's name.",
                "old": ("--host",),
            },
            "logs": {"help": "Only this host's servers.", "old": ("--host",), "metavar": "HOST"},
        },
    ),
)  # fmt: skip

CLOUD: tuple[Option, ...] = (
    Option(
        "count", "--count", "int", default=1, minimum=1, maximum=100, commands=("up",), group="cloud",
        requests=("CloudFlags",), help="Servers (with --cloud).",
    ),
    Option(
        "os_image", "--os-image", "str", metavar="IMAGE", commands=("config init", "up"), group="cloud",
        requests=("CloudFlags",), help="The Glance image cloud servers boot (name or ID).",
        variants={
            "up": {
                "help": "With --cloud: the Glance image the servers boot (default: the cloud profile's, debian-12). "
                "The engine image is set by --image-source/--image-ref.",
                "old": ("--image",),
            },
            "config init": {
                "help": "The Glance image the servers boot (name or ID), instead of the newest Debian 12 image."
            },
        },
    ),
    Option(
        "campaign", "--campaign", "str", metavar="ID", commands=("down", "up"), group="cloud",
        requests=("CloudFlags",), help="Campaign the deployment belongs to (marks its resources).",
        variants={"down": {"help": "Every deployment of this campaign."}},
    ),
    Option(
        "ttl", "--ttl", "duration", minimum=1, commands=("up",), group="cloud", requests=("CloudFlags",),
        help="With --cloud: the servers expire after this long (90m, 2h, 1d; metadata zenops:expires_at) and "
        "`zenops reap` removes them then; each server also gets a dead-man's switch that deletes it at its expiry "
        "(where the servers reach Keystone and Nova: the cloud profile's expiry_switch). Default: defaults.up.ttl "
        "in zenops.yaml, else no expiry; re-running without --ttl keeps the existing one.",
    ),
    Option(
        "network_mode", "--network-mode", "choice", choices=("provider", "floating"), commands=("up",),
        group="cloud", requests=("CloudFlags",),
        help="provider network, or tenant network + router + floating IPs (default: the cloud profile's).",
    ),
)  # fmt: skip

_GATEWAY: dict[str, Any] = {"group": "gateway", "service": "gateway", "commands": ("up",)}
GATEWAY: tuple[Option, ...] = (
    Option(
        "gateway", "--gateway", "choice", default="auto", choices=("auto", "on", "off"), param_name="gateway_mode",
        requests=("ServeRequest", "GatewayFlags"), **_GATEWAY,
        help="One endpoint for the deployment: HAProxy balancing every vLLM instance (least outstanding requests, "
        "/health checks; what `zenops rollout` drains). auto: on when there is more than one instance.",
    ),
    Option(
        "gateway_host", "--gateway-host", "str", metavar="HOST", requests=("ServeRequest", "GatewayFlags"),
        help="Inventory host that runs it (default: the first).", **_GATEWAY,
    ),
    Option(
        "gateway_flavor", "--gateway-flavor", "str", metavar="FLAVOR", requests=("GatewayFlags",), **_GATEWAY,
        help="With --cloud: run it on a small server of its own of this flavor (marked as the deployment's, "
        "removed by `down`), so the endpoint does not live on a serving server. Implies --gateway on.",
    ),
    Option(
        "gateway_port", "--gateway-port", "int", default=8080, minimum=1, maximum=65535,
        requests=("ServeRequest", "GatewayFlags"), help="Its port.", **_GATEWAY,
    ),
    Option(
        "gateway_tls_cert_file", "--gateway-tls-cert", "path", param_name="gateway_tls_cert",
        requests=("ServeRequest", "GatewayFlags"), **_GATEWAY,
        help="PEM file (certificate chain + key, mode 0600): the endpoint speaks HTTPS only.",
    ),
)  # fmt: skip

_SCALER: dict[str, Any] = {
    "group": "scaler", "service": "scaler", "commands": ("up",), "requests": ("ServeRequest", "ScalerFlags"),
}  # fmt: skip
SCALER: tuple[Option, ...] = (
    Option(
        "replicas", "--replicas", "str", metavar="N|MIN..MAX", **_SCALER,
        help="With --cloud: serving servers. N: a fixed fleet (as --count N). MIN..MAX: `up` starts MIN and a "
        "scaling loop on the gateway's server keeps between MIN and MAX: out when requests wait, in when the load "
        "is low (drained through the gateway first), a dead server replaced; it turns on --gateway and --metrics, "
        "which it needs. `down` removes it. Not on your own hosts (--inventory): they are a fixed fleet, healed "
        "only by a failed vLLM being restarted (its container's restart policy), never by a host added or removed.",
    ),
    Option(
        "max_price_per_hour", "--max-price-per-hour", "positive", metavar="USD", **_SCALER,
        help="With --replicas MIN..MAX: the most every server of the deployment may cost per hour together (the "
        "gateway's own included); lowers MAX to what it pays for (the flavors' price_per_hour).",
    ),
    Option(
        "scale_out_waiting", "--scale-out-waiting", "positive", metavar="N", **_SCALER,
        help="With --replicas MIN..MAX: scale out when more than N requests wait per replica (median over 60 s). "
        "Default: half the sequences a replica runs at once (the plan's max_num_seqs).",
    ),
    Option(
        "scale_in_load", "--scale-in-load", "positive", metavar="N", **_SCALER,
        help="With --replicas MIN..MAX: scale in when running + waiting requests per replica stay under N (p90 over "
        "300 s); below --scale-out-waiting. Default: a quarter of a replica's sequences.",
    ),
    Option(
        "scale_cooldown", "--scale-cooldown", "duration", minimum=0, **_SCALER,
        help="With --replicas MIN..MAX: no scaling step for this long after one (default 2m).",
    ),
)  # fmt: skip

_BATCH: dict[str, Any] = {"group": "batch", "commands": ("rollout",), "requests": ("RolloutRequest",)}
BATCH: tuple[Option, ...] = (
    Option(
        "batch", "--batch", "str", default="1", metavar="N|P%", help="Hosts per batch, or a percentage of the fleet.",
        **_BATCH,
    ),
    Option("canary", "--canary", "int", default=1, minimum=0, help="Hosts of the first batch (0: none).", **_BATCH),
    Option(
        "max_unavailable", "--max-unavailable", "int", minimum=1, metavar="N", **_BATCH,
        help="Instances out of rotation at once, at most (cuts batches). The last serving instance is never drained.",
    ),
    Option(
        "allow_downtime", "--allow-downtime", "bool", **_BATCH,
        help="Allow a batch that takes every instance out (a one-host fleet that cannot surge: replaced in place).",
    ),
    Option(
        "revert", "--revert/--no-revert", "bool", default=True, show_default=True, **_BATCH,
        help="Send changed hosts back when a gate fails.",
    ),
    Option(
        # auto and the names of zenops.rollout.strategies' registry (not imported here: --help stays light; a unit
        # test holds the two equal)
        "strategy", "--strategy", "choice", default="auto", choices=("auto", "in-place", "surge", "blue-green"),
        show_default=True, **_BATCH,
        help="How the batches go to the new release. auto: a one-server cloud deployment surges, any other rolls "
        "in place; blue-green: a cloud deployment gets a whole new set of servers, gated, then the gateway "
        "switches to it and the old set is deleted.",
    ),
)  # fmt: skip

_GATE: dict[str, Any] = {"group": "gate", "commands": ("rollout",), "requests": ("RolloutRequest",)}
GATE: tuple[Option, ...] = (
    Option(
        "drain_timeout", "--drain-timeout", "duration", default=600, minimum=0, **_GATE,
        help="The longest expected request: how long a drained server's in-flight requests may take to finish.",
    ),
    Option(
        "min_healthy", "--min-healthy", "duration", default=10, minimum=0, **_GATE,
        help="How long a new server must stay healthy after its first good answer.",
    ),
    Option(
        "perf_gate", "--perf-gate/--no-perf-gate", "bool", default=True, show_default=True, **_GATE,
        help="Benchmark new servers against the baseline.",
    ),
    Option(
        "limits.max_tps_drop", "--max-tps-drop", "float", default=0.10, minimum=0, maximum=1,
        param_name="max_tps_drop", **_GATE,
        help="Fail on output tok/s lower by more than this (fraction) beyond the measured spread.",
    ),
    Option(
        "limits.max_ttft_rise", "--max-ttft-rise", "float", default=0.25, minimum=0, param_name="max_ttft_rise",
        help="Fail on median TTFT higher by more than this (fraction) beyond the measured spread.", **_GATE,
    ),
    Option(
        "limits.max_spread", "--max-spread", "float", default=0.25, minimum=0, param_name="max_spread", **_GATE,
        help="Run-to-run spread above which the gate cannot tell: the rollout pauses (exit 16).",
    ),
    Option(
        "gate_concurrency", "--gate-concurrency", "int", default=4, minimum=1, help="The gate's concurrency.",
        **_GATE,
    ),
    Option(
        "gate_seconds", "--gate-seconds", "duration", default=10, minimum=1, **_GATE,
        help="Each measured gate run lasts at least this long: its prompts are sized from a first run's pace "
        "(a fixed count lasts 1 s on a tiny model, too short to tell a change from noise).",
    ),
    Option(
        "gate_prompts", "--gate-prompts", "int", default=32, minimum=1, **_GATE,
        help="Prompts of the first gate run, which measures the servers' pace (the least any run has).",
    ),
    Option(
        "answer_timeout", "--gate-answer-timeout", "duration", default=120, minimum=1,
        param_name="gate_answer_timeout", **_GATE,
        help="How long a server may take to answer the gate's first completion; longer: the fleet is too busy "
        "to measure and the rollout pauses (exit 16), nothing drained.",
    ),
    Option(
        "gate_output_len", "--gate-output-len", "int", default=64, minimum=1, help="Tokens per reply.", **_GATE,
    ),
    Option(
        "gate_warmups", "--gate-warmups", "int", default=8, minimum=0, **_GATE,
        help="Unmeasured requests before each gate run: a server just started answers its first requests slower.",
    ),
    Option(
        "gate_runs", "--gate-runs", "int", default=3, minimum=1, **_GATE,
        help="A batch's gate that fails on its figures alone (every request answered) measures again, up to this "
        "many runs in all, and judges their means: one run's noise is not a regression, a slower release stays "
        "slower in every run. A run far beyond the limits (tok/s down more than twice --max-tps-drop + spread, or "
        "TTFT up more than four times --max-ttft-rise + spread) fails at once.",
    ),
)  # fmt: skip

_BENCH: dict[str, Any] = {"group": "bench", "commands": ("bench",), "requests": ("BenchRequest",)}
BENCH: tuple[Option, ...] = (
    Option(
        "profile", "--profile", "profile", default="seed", **_BENCH,
        help="seed: the write-up's run (random 128 in/128 out, 20 prompts, concurrency 4, temperature 0.7); "
        "sweep: the same at concurrency 1, 2, 4, 8.",
    ),
    Option(
        "concurrency", "--concurrency", "levels", metavar="LEVELS", key="bench_concurrency", **_BENCH,
        help="Max concurrency levels, one run each (e.g. 1,2,4,8).",
    ),
    Option(
        "num_prompts", "--num-prompts", "int", minimum=1, metavar="N", help="Prompts per run (profile's default).",
        **_BENCH,
    ),
    Option("input_len", "--input-len", "int", minimum=1, metavar="N", help="Input tokens per prompt.", **_BENCH),
    Option("output_len", "--output-len", "int", minimum=1, metavar="N", help="Output tokens per prompt.", **_BENCH),
    Option(
        "num_warmups", "--warmups", "int", minimum=0, metavar="N", param_name="warmups", **_BENCH,
        help="Requests sent before each run's measured ones and left out of its figures (vllm bench serve "
        "--num-warmups): a server just started answers its first requests slower.",
    ),
    Option(
        "compare_platforms", "--compare-platforms", "bool", **_BENCH,
        help="Also run with zentorch off (or on): restart the servers on the other platform, benchmark, restore them.",
    ),
    Option(
        "gateway", "--through-gateway", "bool", param_name="through_gateway", old_flags=("--gateway",),
        commands=("bench", "logs"), group="bench", requests=("BenchRequest",), service="gateway",
        help="Benchmark the deployment's endpoint (its gateway, `up --gateway`): one client on the gateway's host, "
        "its requests balanced over every server, instead of each server on its own.",
        variants={"logs": {"help": "The gateway's HAProxy log instead of the vLLM servers'."}},
    ),
    Option(
        "one_at_a_time", "--one-at-a-time", "bool", **_BENCH,
        help="Benchmark the hosts one after another, not all at once: for hosts that share a machine (containers, VMs "
        "on one hypervisor), which would otherwise measure each other. `zenops rollout` does it by itself for hosts "
        "whose facts show one kernel.",
    ),
    Option(
        "runs_dir", "--runs-dir", "dir", default=Path("runs"), commands=("bench", "rollout"), group="bench",
        requests=("BenchRequest", "RolloutRequest"),
        help="Where run directories are written (<runs-dir>/<run-id>/<host>/<instance>/).",
        variants={"rollout": {"help": "Where the gates' bench artifacts go (<runs-dir>/<rollout id>/)."}},
    ),
    Option(
        "run_id", "--run-id", "str", metavar="ID", help="Name of the run directory (default: UTC date and time).",
        **_BENCH,
    ),
    Option(
        "flavor", "--flavor", "str", metavar="FLAVOR", commands=("bench", "plan", "report", "up"), group="bench",
        requests=("BenchRequest", "CloudFlags"),
        help="Flavor, e.g. gp.5.24.96 (catalogue or config `flavors:`): the servers --cloud creates, or the hosts' "
        "own; its price prices the results and labels them.",
    ),
    Option(
        "price_per_hour", "--price-per-hour", "positive", metavar="USD", commands=("bench", "report"),
        group="bench", requests=("BenchRequest",),
        help="Price of one host per hour (wins over the flavor's and run manifests').",
    ),
    Option(
        "timeout", "--timeout", "duration", default="1h", minimum=10, **_BENCH,
        help="How long one run may take (90s, 30m, 1h30m, or a number of seconds; at least 10s).",
    ),
    Option(
        "allow_failed", "--allow-failed", "bool", commands=("bench", "report"), group="bench", requests=(),
        help="Failed requests are warned about but do not fail the command.",
        variants={"report": {"help": "Results with failed requests are warned about but do not fail the command."}},
    ),
)  # fmt: skip

_TUNED_HELP = (
    "Deploy what a benchmark campaign measured: FILE is written by `zenops campaign report ID --write-tuned FILE` "
    "(the best configuration per model). The entry of --model supplies the options (platform, max-num-seqs, "
    "instances, engine pair and args, ...); flags you give win over it, it wins over config defaults. The "
    "plan's reasons name the campaign and its figures. A model the file does not have is refused (exit 2)."
)
CONSENT: tuple[Option, ...] = (
    Option(
        "tuned_file", "--tuned", "path", metavar="FILE", commands=("plan", "rollout", "up"), group="consent",
        requests=(), help=_TUNED_HELP,
    ),
    Option(
        "dry_run", "--dry-run", "bool", commands=("config init", "down", "reap", "rollout", "up"), group="consent",
        requests=("RolloutRequest",), help="Say what would be done; do nothing.",
        variants={
            "config init": {"help": "Print the profile; write nothing."},
            "down": {"help": "List what would be removed; remove nothing."},
            "reap": {"help": "List the expired deployments and what would be removed; remove nothing."},
            "rollout": {"help": "Print the batches and what changes on each host; change nothing."},
            "up": {
                "help": "Report what would change (on the hosts; with --cloud, the servers it would create and their "
                "cost); change nothing.",
                "old": ("--check",),
            },
        },
    ),
    Option(
        "abort", "--abort", "bool", commands=("rollout",), group="consent", requests=(),
        help="Send the hosts the rollout in progress changed back, and stop it.",
    ),
    Option(
        "yes", "--yes", "bool", short="-y", group="consent", requests=(),
        commands=("campaign down", "campaign run", "down", "reap", "rollout", "up"),
        help="Do not ask before creating or deleting cloud resources (needed without a terminal: scripts, CI, cron; "
        "as Terraform's -auto-approve). What is created or deleted, and its cost, is still said.",
    ),
)  # fmt: skip

TABLE: tuple[Option, ...] = (*OPTIONS, *TARGET, *CLOUD, *GATEWAY, *SCALER, *BATCH, *GATE, *BENCH, *CONSENT)
ROWS: Mapping[str, Option] = {o.name: o for o in TABLE}

# the fields of each request that no option sets: what the command (or the library) fills in itself
NOT_OPTIONS: Mapping[str, frozenset[str]] = {
    "ServeRequest": frozenset({"gateway_inventory", "gateway_addresses"}),  # the cloud's gateway server (deploy)
    "PlanOptions": frozenset({"vllm_version", "base_port", "tuned"}),  # the resolved pair; the tuned file's reason
    # what the rollout decides (the changes, the tuned reason) or keeps fixed (the baseline's sizing)
    "RolloutRequest": frozenset(
        {"changes", "gate_input_len", "baseline_repeats", "baseline_max_repeats", "baseline_time_limit", "tuned_reason"}
    ),
    # what the target says (cloud, deployment), and what a campaign or a gate sets (label, client, ...)
    "BenchRequest": frozenset(
        {"cloud", "deployment", "log_lines", "label", "campaign", "answer_timeout", "client", "known_platforms"}
    ),
}


def row(name: str) -> Option:
    """The table's row ``name`` (its parameter's name: ``cloud``, ``gateway_mode``, ``max_tps_drop``)."""
    return ROWS[name]


def rows_for(command: str, *, request: str | None = None, group: str | None = None) -> tuple[Option, ...]:
    """The rows ``command`` takes, in the table's order; only those filling ``request`` / of ``group`` if given."""
    return tuple(
        o
        for o in TABLE
        if o.takes(command) and (request is None or request in o.requests) and (group is None or o.group == group)
    )


def service_rows(service: str) -> tuple[Option, ...]:
    """The rows of the service named ``service`` (zenops.deployment.services): the options tagged with it."""
    return tuple(o for o in TABLE if o.service == service)


def request_rows(request: str) -> tuple[Option, ...]:
    """The rows whose field is a field of the request class named ``request``."""
    return tuple(o for o in TABLE if request in o.requests)


def field_default(request: str, field: str) -> Any:
    """The default of the row that fills ``request``'s ``field``: what a command gets without its flag. The request's
    dataclass declares it as its field's default (``concurrency: int = field_default("ServeRequest",
    "concurrency")``), so the value lives in the row only and a library caller means what the command means."""
    found = [o for o in request_rows(request) if o.field == field]
    if len(found) != 1:
        raise KeyError(f"{len(found)} rows fill {request}.{field}; expected one")
    o = found[0]
    if o.kind == "bool":
        return bool(o.default)
    if o.kind == "duration" and isinstance(o.default, str):
        from zenops import durations  # noqa: PLC0415

        return durations.parse(o.default)
    return o.default


def request_from_rows(cls: type[T], values: Mapping[str, Any], **extra: Any) -> T:
    """The one way a request is built: ``cls`` (a dataclass) from ``values`` (row field -> value; what is not a
    field of one of the rows of ``cls`` is left out), plus ``extra`` (what no option sets: NOT_OPTIONS). A dotted
    field (``limits.max_tps_drop``) fills the dataclass field ``limits`` is; a field no value is given for keeps its
    default."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for o in request_rows(cls.__name__):
        if o.field not in values:
            continue
        head, _, rest = o.field.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = values[o.field]
        else:
            top[head] = values[o.field]
    if nested:
        hints = typing.get_type_hints(cls)
        for head, sub in nested.items():
            kind = hints[head]
            assert isinstance(kind, type), (cls.__name__, head)
            assert dataclasses.is_dataclass(kind), (cls.__name__, head)
            top[head] = kind(**sub)
    return cls(**{**top, **extra})
