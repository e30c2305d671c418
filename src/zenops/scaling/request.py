"""What `zenops up` makes of the scaler's options (``--replicas``, ``--max-price-per-hour``, the policy overrides):
checked before anything is created, with the fix named, and turned into what `up` provisions and serves.

The choices (zenops.deployment.services.scaler installs the loop from them):

* a plain ``--replicas N`` is a fixed fleet of N servers: ``--count N``, no loop;
* a range ``MIN..MAX`` provisions MIN servers (``--count``, when given too, must be MIN) and installs the loop, which
  needs the metrics (it reads them) and a gateway (it drains and adds servers through it): `up` turns both on and
  says so; ``--metrics off`` or ``--gateway off`` given with a range is refused;
* a range needs ``--cloud`` (servers to create and delete) and ``--model`` (what the servers serve): on your own hosts
  a fleet is fixed, refused with the fix;
* ``--max-price-per-hour`` lowers MAX to what it pays for (zenops.scaling.replicas.cap, with the flavors' prices);
  it and the policy overrides go with a range only (a fixed fleet has no loop that would read them).

Pure: the CLI passes the flags and the prices; nothing here reads a file or the cloud.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zenops.errors import UsageError
from zenops.scaling import decide
from zenops.scaling.replicas import CAP_FLAG, REPLICAS_FLAG, Capped, Replicas, cap, parse

# the policy overrides: flag -> the Policy field it sets (zenops.scaling.decide.Policy)
OVERRIDES: Mapping[str, str] = {
    "scale_out_waiting": "--scale-out-waiting",
    "scale_in_load": "--scale-in-load",
    "scale_cooldown": "--scale-cooldown",
}


@dataclass(frozen=True)
class ScalerFlags:
    """The scaler's rows on `up` (zenops.option_table, ``service="scaler"``), as one ``scaler`` argument; the fields
    are the rows' (ServeRequest's)."""

    replicas: str | None = None
    max_price_per_hour: float | None = None
    scale_out_waiting: float | None = None
    scale_in_load: float | None = None
    scale_cooldown: int | None = None

    def overrides(self) -> dict[str, Any]:
        """The policy overrides given (field -> value)."""
        return {f: getattr(self, f) for f in OVERRIDES if getattr(self, f) is not None}


@dataclass(frozen=True)
class Prices:
    """The prices the cap needs ($/h): the serving flavor's and the gateway's own server's (None: unknown)."""

    flavor: str
    price_per_hour: float | None
    gateway_flavor: str | None = None
    gateway_price_per_hour: float | None = None


@dataclass(frozen=True)
class Scaling:
    """What `up` does with the scaler's flags: ``count`` servers provisioned; with a range, ``capped`` (the replicas
    after the price cap) and the loop installed; ``serve``: the serving options it sets (gateway, metrics, the range);
    ``notes``: what it chose and says."""

    replicas: Replicas
    count: int
    capped: Capped | None = None
    serve: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def loop(self) -> bool:
        return not self.replicas.fixed


def policy_check(overrides: Mapping[str, Any]) -> None:
    """The overrides that can be checked before the plan sizes a replica: an in-target not below the out-target
    (both given) has no hysteresis (decide.Policy's own refusal, with its fix)."""
    out, in_ = overrides.get("scale_out_waiting"), overrides.get("scale_in_load")
    if out is not None and in_ is not None:
        policy(seats=1, overrides=overrides)


def policy(*, seats: int, overrides: Mapping[str, Any]) -> decide.Policy:
    """The loop's policy: decide.default_policy from a replica's ``seats`` (the plan's max_num_seqs, summed), the
    targets and cooldown given in ``overrides`` (ScalerFlags.overrides) instead of the defaults."""
    base = decide.default_policy(seats)
    fields: dict[str, Any] = {}
    if overrides.get("scale_out_waiting") is not None:
        t = base.scale_out
        fields["scale_out"] = decide.Target(t.metric, float(overrides["scale_out_waiting"]), t.window_s, t.quantile)
    if overrides.get("scale_in_load") is not None:
        t = base.scale_in
        fields["scale_in"] = decide.Target(t.metric, float(overrides["scale_in_load"]), t.window_s, t.quantile)
    if overrides.get("scale_cooldown") is not None:
        fields["cooldown_s"] = float(overrides["scale_cooldown"])
    return decide.default_policy(seats, **fields)


def _fixed_only(flags: ScalerFlags, replicas: Replicas | None) -> None:
    """A cap or a policy override without a range: nothing would read it."""
    given = ([CAP_FLAG] if flags.max_price_per_hour is not None else []) + [OVERRIDES[f] for f in flags.overrides()]
    if given and (replicas is None or replicas.fixed):
        said = f"{REPLICAS_FLAG} {replicas}" if replicas else f"no {REPLICAS_FLAG}"
        raise UsageError(
            f"{', '.join(given)} set{'s' * (len(given) == 1)} the scaling loop, and {said} is a fixed fleet (no loop)",
            hint=f"give a range, e.g. {REPLICAS_FLAG} 1..4, or leave out {', '.join(given)}",
        )


def check(
    flags: ScalerFlags,
    *,
    cloud: bool,
    count: int,
    count_given: bool,
    with_model: bool,
    serve: Mapping[str, Any],
    given: frozenset[str],
    prices: Prices | None,
) -> Scaling | None:
    """`up`'s scaler flags checked (UsageError naming the fix; nothing created yet). ``serve``: the serving options
    (``gateway``, ``metrics``), ``given``: those set by a flag or a config default; ``prices``: the flavors' (with
    ``cloud``). None: no ``--replicas``, `up` as before."""
    replicas = parse(flags.replicas) if flags.replicas is not None else None
    _fixed_only(flags, replicas)
    if replicas is None:
        return None
    if not cloud:
        raise UsageError(
            f"{REPLICAS_FLAG} {replicas} goes with --cloud: on your own hosts zenops creates no server, the "
            "inventory's hosts are the fleet",
            hint="leave out --replicas: on your own hosts self-healing is a failed vLLM restarted (its container's "
            f"restart policy); for a scaled fleet use --cloud C --flavor F {REPLICAS_FLAG} {replicas}",
        )
    if count_given and count != replicas.min:
        raise UsageError(
            f"--count {count} and {REPLICAS_FLAG} {replicas}: `up` starts "
            + (f"MIN = {replicas.min}" if not replicas.fixed else str(replicas.min))
            + " server(s)",
            hint=f"leave out --count ({REPLICAS_FLAG} says it), or give --count {replicas.min}",
        )
    if replicas.fixed:
        return Scaling(replicas, replicas.min)
    if not with_model:
        raise UsageError(
            f"{REPLICAS_FLAG} {replicas} scales serving servers: it goes with --model",
            hint=f"add --model MODEL, or use --count {replicas.min} for servers that serve nothing yet",
        )
    return _range(flags, replicas, serve=serve, given=given, prices=prices)


def _range(
    flags: ScalerFlags, replicas: Replicas, *, serve: Mapping[str, Any], given: frozenset[str], prices: Prices | None
) -> Scaling:
    """A range: the gateway and the metrics on (refused when turned off by a flag), the cap applied."""
    for name, flag in (("gateway", "--gateway"), ("metrics", "--metrics")):
        if serve.get(name) == "off" and name in given:
            raise UsageError(
                f"{REPLICAS_FLAG} {replicas} needs {flag} on: the loop "
                + ("drains and adds servers through the gateway" if name == "gateway" else "scales on the metrics"),
                hint=f"drop {flag} off, or use a fixed {REPLICAS_FLAG} {replicas.min}",
            )
    notes = [
        f"{REPLICAS_FLAG} {replicas}: {flag} on (the scaling loop {why})"
        for name, flag, why in (
            ("gateway", "--gateway", "drains and adds servers through it"),
            ("metrics", "--metrics", "reads them"),
        )
        if serve.get(name) != "on"
    ]
    policy_check(flags.overrides())
    if flags.max_price_per_hour is not None and prices is None:
        raise UsageError(f"{CAP_FLAG} needs the flavor's price", hint="give --flavor (with --cloud)")
    capped = cap(
        replicas,
        flags.max_price_per_hour,
        flavor=prices.flavor if prices else "",
        price_per_hour=prices.price_per_hour if prices else None,
        gateway_flavor=prices.gateway_flavor if prices else None,
        gateway_price_per_hour=prices.gateway_price_per_hour if prices else None,
    )
    if capped.note:
        notes.append(capped.note)
    sets = {"gateway": "on", "metrics": "on", "replicas": str(capped.replicas)}
    return Scaling(replicas, replicas.min, capped, serve=sets, notes=tuple(notes))
