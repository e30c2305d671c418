"""`zenops up --replicas` and the scaler's options (zenops.scaling.request): checked before anything is created, each
refusal naming its fix; what a range makes of `up` (MIN servers, the gateway and the metrics on, the cap); and the
same through the CLI (the cloud is a TEST DOUBLE: up_cloud records the CloudRequest, serve_request_for the
ServeRequest, and the run stops there)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from zenops.cli.main import cli
from zenops.cloud import ledger
from zenops.errors import UsageError
from zenops.scaling import request as r

SERVE = {"gateway": "auto", "metrics": "off"}


def _check(flags: r.ScalerFlags, **kw: Any) -> r.Scaling | None:
    args: dict[str, Any] = {
        "cloud": True, "count": 1, "count_given": False, "with_model": True, "serve": SERVE, "given": frozenset(),
        "prices": r.Prices("f1", 0.5),
    }  # fmt: skip
    return r.check(flags, **{**args, **kw})


def test_no_replicas_is_up_as_before():
    assert _check(r.ScalerFlags()) is None


def test_a_range_starts_min_servers_and_turns_the_gateway_and_the_metrics_on_saying_so():
    s = _check(r.ScalerFlags(replicas="2..4"))
    assert s is not None
    assert s.loop
    assert s.count == 2
    assert dict(s.serve) == {"gateway": "on", "metrics": "on", "replicas": "2..4"}
    assert [n.split(":")[0] for n in s.notes] == ["--replicas 2..4", "--replicas 2..4"]
    assert "--gateway on" in s.notes[0]
    assert "--metrics on" in s.notes[1]


def test_a_plain_n_is_a_fixed_fleet_of_n_without_a_loop():
    s = _check(r.ScalerFlags(replicas="3"))
    assert s is not None
    assert not s.loop
    assert (s.count, dict(s.serve), s.capped) == (3, {}, None)


def test_the_price_cap_lowers_max_and_says_why():
    s = _check(r.ScalerFlags(replicas="1..8", max_price_per_hour=2.0), prices=r.Prices("f1", 0.5, "g1", 0.5))
    assert s is not None
    assert s.capped is not None
    assert str(s.capped.replicas) == "1..3"  # 3 x $0.50 + the gateway's $0.50 = $2.00
    assert s.serve["replicas"] == "1..3"
    assert "MAX 8 lowered to 3" in s.notes[-1]


@pytest.mark.parametrize(
    ("flags", "kw", "said", "fix"),
    [
        (r.ScalerFlags(replicas="1..3"), {"cloud": False}, "goes with --cloud", "leave out --replicas"),
        (r.ScalerFlags(replicas="1..3"), {"count": 2, "count_given": True}, "--count 2 and --replicas 1..3",
         "leave out --count"),
        (r.ScalerFlags(replicas="3"), {"count": 2, "count_given": True}, "--count 2 and --replicas 3", "--count 3"),
        (r.ScalerFlags(replicas="1..3"), {"with_model": False}, "goes with --model", "add --model"),
        (r.ScalerFlags(replicas="1..3"), {"serve": {"gateway": "off", "metrics": "on"}, "given": {"gateway"}},
         "needs --gateway on", "drop --gateway off"),
        (r.ScalerFlags(replicas="1..3"), {"given": {"metrics"}}, "needs --metrics on", "drop --metrics off"),
        (r.ScalerFlags(replicas="2", max_price_per_hour=3.0), {}, "--max-price-per-hour sets the scaling loop",
         "give a range"),
        (r.ScalerFlags(scale_cooldown=60), {}, "--scale-cooldown sets the scaling loop", "give a range"),
        (r.ScalerFlags(replicas="1..3", scale_out_waiting=2, scale_in_load=4), {}, "not below the scale-out",
         "lower"),
        (r.ScalerFlags(replicas="0..3"), {}, "keeps at least one replica", "1..3"),
        (r.ScalerFlags(replicas="1..3", max_price_per_hour=1.0), {"prices": r.Prices("f1", None)}, "unknown",
         "price_per_hour"),
    ],
)  # fmt: skip
def test_refusals_name_the_fix(flags, kw, said, fix):
    kw = {k: frozenset(v) if k == "given" else v for k, v in kw.items()}
    with pytest.raises(UsageError) as e:
        _check(flags, **kw)
    assert said in e.value.message
    assert fix in (e.value.hint or "")


def test_the_policy_takes_the_overrides_and_keeps_the_defaults_from_the_seats():
    p = r.policy(seats=8, overrides={"scale_in_load": 1.5, "scale_cooldown": 30})
    assert (p.scale_out.metric, p.scale_out.value) == ("waiting", 4.0)  # seats x 0.5
    assert (p.scale_in.metric, p.scale_in.value) == ("load", 1.5)
    assert p.cooldown_s == 30.0


# --- through `zenops up` ----------------------------------------------------------------------------------------


@pytest.fixture
def asked(isolated_home, tmp_path, monkeypatch) -> dict[str, Any]:
    """TEST DOUBLE of the cloud: up_cloud records its request and answers a ledger entry; serve_request_for records
    the serving request and stops the command (exit 0)."""
    seen: dict[str, Any] = {}

    def up_cloud(_ctx: Any, req: Any, **_kw: Any) -> Any:
        seen["cloud"] = req
        return None, ledger.Deployment("d1", "c1", "f1", "debian-12", req.count, "provider")

    def serve_request_for(req: Any, _dep: Any) -> Any:
        seen["serve"] = req
        raise SystemExit(0)

    monkeypatch.setattr("zenops.deployment.provision.up_cloud", up_cloud)
    monkeypatch.setattr("zenops.deployment.provision.serve_request_for", serve_request_for)
    monkeypatch.delenv("OS_CLOUD", raising=False)
    monkeypatch.chdir(tmp_path)
    return seen


def test_up_with_a_range_provisions_min_and_serves_with_the_gateway_the_metrics_and_the_range(asked):
    args = ["up", "--cloud", "c1", "--flavor", "f1", "--deployment", "d1", "-m", "Qwen/Qwen3-0.6B", "--yes"]
    res = CliRunner().invoke(cli, [*args, "--replicas", "2..5", "--scale-cooldown", "90s"])
    assert res.exit_code == 0, res.output
    assert asked["cloud"].count == 2
    req = asked["serve"]
    assert (req.gateway, req.metrics, req.replicas, req.scale_cooldown) == ("on", "on", "2..5", 90)
    assert "--metrics on (the scaling loop reads them)" in res.output


def test_up_refuses_a_range_with_metrics_off_before_any_server_exists(asked, run):
    args = ["up", "--cloud", "c1", "--flavor", "f1", "-m", "Qwen/Qwen3-0.6B", "--replicas", "1..3", "--metrics", "off"]
    res = run(args)
    assert res.exit_code == 2, res.output
    assert "needs --metrics on" in res.output
    assert asked == {}


def test_up_refuses_a_range_on_own_hosts(asked, tmp_path, run):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1:\n      ansible_host: 192.0.2.1\n")
    res = run(["up", "-i", str(inv), "-m", "Qwen/Qwen3-0.6B", "--replicas", "1..3"])
    assert res.exit_code == 2, res.output
    assert "goes with --cloud" in res.output
    assert asked == {}
