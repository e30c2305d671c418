"""Every option a row (zenops.option_table): the commands' options come from the table's rows (a row added reaches
the commands tagged for it, with their variant), and each request is built from its rows by one function,
request_from_rows: every field of a request is a row's, or one the table names as set by no option."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from zenops import durations, option_table
from zenops.bench.run import BenchRequest
from zenops.cli import options as cli_options
from zenops.cli.main import cli
from zenops.cli.options import GatewayFlags, Rows, RowValues, TableOption, options
from zenops.cli.up import CloudFlags
from zenops.option_table import NOT_OPTIONS, ROWS, TABLE, Option, request_from_rows, row
from zenops.planner import PlanOptions
from zenops.rollout import GateLimits, RolloutRequest
from zenops.scaling.request import ScalerFlags
from zenops.serve import ServeRequest, plan_options

REQUESTS: dict[str, type[Any]] = {
    "ServeRequest": ServeRequest,
    "PlanOptions": PlanOptions,
    "RolloutRequest": RolloutRequest,
    "BenchRequest": BenchRequest,
    "CloudFlags": CloudFlags,
    "GatewayFlags": GatewayFlags,
    "ScalerFlags": ScalerFlags,
}


def _commands() -> dict[str, click.Command]:
    """Every command below `zenops` by its path (`bench`, `config init`)."""
    out: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name in group.list_commands(click.Context(group)):
            cmd = group.get_command(click.Context(group), name)
            assert cmd is not None
            path = f"{prefix} {name}".strip()
            if isinstance(cmd, click.Group):
                walk(cmd, path)
            else:
                out[path] = cmd

    walk(cli, "")
    return out


def _top_fields(request: str) -> set[str]:
    return {o.field.split(".", 1)[0] for o in option_table.request_rows(request)}


@pytest.mark.parametrize("path", sorted(_commands()))
def test_a_commands_table_options_are_the_rows_tagged_for_it(path: str):
    cmd = _commands()[path]
    declared = [p for p in cmd.params if isinstance(p, TableOption)]
    assert sorted(p.row.name for p in declared) == sorted(o.name for o in TABLE if o.takes(path))
    for p in declared:
        variant = p.row.variants.get(path, {})
        assert p.help == variant.get("help", p.row.help)  # the row's help, or the command's variant of it
        assert p.name == p.row.param  # the config key (defaults.<command>.<key>) stays the parameter's


def test_every_row_is_taken_by_a_command_it_names():
    paths = set(_commands())
    for o in TABLE:
        assert set(o.commands) <= paths, o.name
        assert set(o.variants) <= set(o.commands), o.name


def test_the_table_declares_each_flag_once():
    """--cloud, --dry-run, --limit, --runs-dir, ... one row each, whatever help a command gives it."""
    flags = [o.flag.split("/")[0] for o in TABLE]
    assert sorted({f for f in flags if flags.count(f) > 1}) == ["--concurrency"]  # plan/up/rollout's and bench's
    assert {o.name for o in TABLE if o.flag == "--concurrency"} == {"concurrency", "bench_concurrency"}
    assert not {o.takes(c) for c in ("plan", "up", "rollout") for o in (row("bench_concurrency"),)} - {False}


def test_the_option_helpers_of_before_are_gone():
    """One way to declare an option: a row (no click.option for --cloud, --dry-run, ... beside the table)."""
    for name in ("cloud_option", "cloud_option_for", "dry_run_option", "limit_option_for", "option_group",
                 "through_gateway_option", "deployment_name_option", "os_image_option"):  # fmt: skip
        assert not hasattr(cli_options, name), name


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_every_field_of_a_request_is_a_rows_or_set_by_no_option(request_name: str):
    cls = REQUESTS[request_name]
    names = {f.name for f in dataclasses.fields(cls)}
    rows = _top_fields(request_name)
    unset = NOT_OPTIONS.get(request_name, frozenset())
    assert rows <= names, rows - names  # a row names a field the request has
    assert not rows & unset
    assert names == rows | unset, names - rows - unset  # a field nothing fills is a field to add a row for


def _field_default(cls: type[Any], name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_the_table_and_the_request_agree_on_each_default(request_name: str):
    """A row's default (what the command gets without its flag) is its request field's default: one value, so a
    request built by a library caller (a campaign, a gate) means what the command means."""
    cls = REQUESTS[request_name]
    for o in option_table.request_rows(request_name):
        head, _, rest = o.field.partition(".")
        want = _field_default(cls, head)
        if want is dataclasses.MISSING:  # the command always gives it (CloudFlags, GatewayFlags; model)
            continue
        if rest:
            want = getattr(want, rest)
        got = bool(o.default) if o.kind == "bool" else o.default
        if o.kind == "duration" and isinstance(got, str):
            got = durations.parse(got)
        assert got == want, (request_name, o.name)


def test_request_from_rows_fills_each_field_of_its_rows_and_a_nested_one():
    values = {o.field: o.default for o in option_table.request_rows("RolloutRequest")}
    values.update({"limits.max_tps_drop": 0.5, "answer_timeout": 99, "batch": "25%", "dry_run": True})
    req = request_from_rows(RolloutRequest, values, changes={"dtype": "float32"}, tuned_reason="t")
    assert req.limits == GateLimits(max_tps_drop=0.5, max_ttft_rise=0.25, max_spread=0.25)
    assert (req.answer_timeout, req.batch, req.dry_run, req.tuned_reason) == (99, "25%", True, "t")
    assert req.changes == {"dtype": "float32"}
    # what is no field of the request's rows is left out (the serving rows' values on a BenchRequest)
    bench = request_from_rows(BenchRequest, {"num_warmups": 3, "dtype": "float32", "gateway": True})
    assert (bench.num_warmups, bench.gateway) == (3, True)


def test_plan_options_of_a_serve_request_are_its_plan_rows():
    req = ServeRequest(model="m", dtype="float32", max_num_seqs=3, layout="writeup", tensor_parallel=2, instances=2)
    opts = plan_options(req, "0.11.0", tuned="r")
    assert opts == PlanOptions(
        dtype="float32", max_num_seqs=3, layout="writeup", tensor_parallel=2, instances=2, vllm_version="0.11.0",
        tuned="r",
    )  # fmt: skip


def _bench_row(field: str = "log_lines") -> Option:
    return Option(field, "--log-lines", "int", default=200, minimum=1, metavar="N", help="Log lines kept.",
                  group="bench", commands=("bench",), requests=("BenchRequest",))  # fmt: skip


def test_a_row_added_for_a_request_reaches_the_command_and_the_request(monkeypatch: pytest.MonkeyPatch):
    """Add a row to the table, tagged for `bench` and BenchRequest: the command's request group declares it, and
    the request built from the group's values carries it (nothing else changed)."""
    monkeypatch.setattr(option_table, "TABLE", (*TABLE, _bench_row()))
    got: list[BenchRequest] = []

    @click.command()
    @options("bench", Rows("request", request="BenchRequest"))
    def probe(request: RowValues) -> None:
        got.append(request_from_rows(BenchRequest, request.values))

    assert "--log-lines" in [o for p in probe.params for o in getattr(p, "opts", [])]
    result = CliRunner().invoke(probe, ["--log-lines", "7", "--warmups", "2"])
    assert result.exit_code == 0, result.output
    assert (got[0].log_lines, got[0].num_warmups) == (7, 2)
    result = CliRunner().invoke(probe, ["--log-lines", "0"])
    assert result.exit_code == 2
    assert "--log-lines" in result.output


def test_a_row_tagged_for_a_command_not_taking_it_is_refused():
    with pytest.raises(ValueError, match="reap"):
        options("reap", "limit")


def test_a_rows_command_variant_changes_only_that_command():
    @click.command()
    @options("plan", "limit")
    def plan_probe(limit: str | None) -> None:
        click.echo(f"limit={limit}")

    @click.command()
    @options("bench", "limit")
    def bench_probe(limit: str | None) -> None:
        click.echo(f"limit={limit}")

    r = CliRunner().invoke(plan_probe, ["--host", "a"])  # plan's old spelling, with its warning
    assert r.exit_code == 0
    assert "limit=a" in r.output
    assert "deprecated" in r.output
    assert CliRunner().invoke(bench_probe, ["--host", "a"]).exit_code == 2  # not bench's
    assert "Only these hosts: with --inventory" in CliRunner().invoke(plan_probe, ["--help"]).output
    assert "Only these hosts/groups of the inventory." in CliRunner().invoke(bench_probe, ["--help"]).output


def test_config_defaults_stay_defaults_and_flags_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """defaults.rollout.gate_runs (a row's parameter) becomes the default; --gate-runs wins."""
    seen: list[RolloutRequest] = []

    def fake_rollout(_ctx: Any, _inventory: Any, req: RolloutRequest, **_kw: Any) -> Any:
        seen.append(req)
        raise click.exceptions.Exit(0)

    monkeypatch.setattr("zenops.rollout.rollout", fake_rollout)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1}\n")
    (tmp_path / "zenops.yaml").write_text("defaults:\n  rollout:\n    gate_runs: 5\n    max_tps_drop: 0.3\n")
    monkeypatch.chdir(tmp_path)
    base = ["rollout", "-i", str(inv), "--dry-run"]
    for args in (base, [*base, "--gate-runs", "2"]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, r.output
    assert [(r.gate_runs, r.limits.max_tps_drop, r.dry_run) for r in seen] == [(5, 0.3, True), (2, 0.3, True)]


def test_rows_are_named_uniquely_and_the_gateway_rows_are_the_gateway_services():
    assert len(ROWS) == len(TABLE)
    assert {o.name for o in TABLE if o.service == "gateway"} == {
        "gateway_mode", "gateway_host", "gateway_flavor", "gateway_port", "gateway_tls_cert", "through_gateway",
    }  # fmt: skip
    assert {o.name for o in TABLE if o.service == "metrics"} == {"metrics"}
    assert {o.name for o in TABLE if o.service == "scaler"} == {
        "replicas", "max_price_per_hour", "scale_out_waiting", "scale_in_load", "scale_cooldown",
    }  # fmt: skip


def test_the_strategy_row_offers_auto_and_every_registered_strategy():
    """The row's choices are written out (the table imports nothing heavy); the registry is the truth they follow."""
    from zenops.option_table import TABLE  # noqa: PLC0415
    from zenops.rollout import strategies  # noqa: PLC0415

    [row] = [o for o in TABLE if o.field == "strategy"]
    assert list(row.choices) == [strategies.AUTO, *strategies.names()]


def test_a_requests_field_default_is_its_rows_and_an_unknown_field_is_refused():
    """ServeRequest's defaults are read from the rows (option_table.field_default): a row's default changed is the
    request's default changed, with nothing else to edit."""
    assert option_table.field_default("ServeRequest", "concurrency") == row("concurrency").default
    assert ServeRequest(model="m").concurrency == row("concurrency").default
    assert ServeRequest(model="m").force_unsupported is False  # a bool row: a bool
    with pytest.raises(KeyError, match=r"0 rows fill ServeRequest\.no_such_field"):
        option_table.field_default("ServeRequest", "no_such_field")
