"""What a command is about to spend on a cloud, or stop spending, said before it does: the servers and other
resources it creates or deletes, per hour and per month (zenops.cost: HOURS_PER_MONTH), and for a campaign
its projected total against its cap. Plain data and text: zenops.cli.confirm shows it and asks the operator."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from zenops.cloud.ledger import Deployment
from zenops.cost import HOURS_PER_MONTH, cost_per_month

Action = Literal["create", "delete"]


def usd(amount: float) -> str:
    """$0.79, $576.70, $2,190.00; a price under a cent keeps its digits ($0.0042)."""
    if 0 < abs(amount) < 0.01:
        return f"${amount:.6f}".rstrip("0")
    return f"${amount:,.2f}"


def hourly(per_hour: float) -> str:
    """``$0.79/h``: a price per hour."""
    return f"{usd(per_hour)}/h"


def rate(per_hour: float, *, hours: bool = False) -> str:
    """``$0.79/h, $576.70/month``: an hourly cost and what it comes to over a month kept up; ``hours``: and the
    month's hours, ``$0.79/h, $576.70/month (730 h)``. The one text of $/h and $/month (`plan`, `campaign plan`,
    what a command will spend)."""
    text = f"{hourly(per_hour)}, {usd(cost_per_month(per_hour) or 0.0)}/month"
    return f"{text} ({HOURS_PER_MONTH} h)" if hours else text


@dataclass(frozen=True)
class Item:
    """One line of what is created or deleted: ``count`` x a server of a flavor (``per_hour``: each one's price,
    None when unknown), or a resource by its name (a network, a keypair: not billed by the hour)."""

    kind: str  # server, network, router, floating_ip, keypair, ...
    name: str  # a flavor (created servers) or the resource's name (deleted)
    count: int = 1
    per_hour: float | None = None
    deployment: str | None = None
    note: str = ""  # e.g. "the gateway's own"

    def line(self) -> str:
        what = f"{self.count} x {self.kind} {self.name}" if self.count != 1 else f"{self.kind} {self.name}"
        extra = [self.note] if self.note else []
        if self.deployment:
            extra.append(f"deployment {self.deployment}")
        if self.per_hour is not None:
            extra.append(hourly(self.per_hour) + (" each" if self.count > 1 else ""))
        return what + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class Spend:
    """What ``command`` will create or delete on ``where`` and what it costs. ``per_hour``: what is created costs
    (all of the deployment once it is created; for a campaign, the servers that may be up at once), or what a deletion
    stops; None when a price is unknown (``unpriced`` names the flavors or deployments). ``expiry``: when what is
    created expires ("in 2h"), None: never (said as a warning where ``warn_no_expiry``)."""

    command: str
    action: Action
    where: str
    items: tuple[Item, ...]
    per_hour: float | None
    unpriced: tuple[str, ...] = ()
    expiry: str | None = None
    warn_no_expiry: bool = False
    projected_usd: float | None = None  # a campaign's projected total (spent included)
    cap_usd: float | None = None  # its budget.max_usd (None: no cap)
    campaign: bool = False
    ttl_hint: str = "--ttl 8h"  # how to give it an expiry
    until: str | None = None  # how long what is created costs, where it is not "until it expires / is removed"

    @property
    def per_month(self) -> float | None:
        return cost_per_month(self.per_hour)

    @property
    def servers(self) -> int:
        return sum(i.count for i in self.items if i.kind == "server")

    @property
    def asks(self) -> bool:
        """Whether there is anything to agree to: something is created or deleted."""
        return bool(self.items)

    def cost(self) -> str:
        """The money, in one phrase."""
        if self.campaign:
            total = usd(self.projected_usd or 0.0)
            cap = "no budget cap (budget.max_usd)"
            if self.cap_usd is not None:
                cap = f"budget.max_usd {usd(self.cap_usd)}"
            text = f"projected {total} in all, {cap}"
            if self.per_hour is not None:
                text += f"; at most {rate(self.per_hour)} while its servers are up"
            if self.unpriced:
                text += f"; no price for {', '.join(self.unpriced)} (counted as $0: set prices: in the file)"
            text += f"; every server expires {self.expiry}" if self.expiry else ""
        elif self.action == "delete" and not self.servers:
            text = "no server among them: nothing billed by the hour stops"
        elif self.per_hour is None:
            unknown = f" for {', '.join(self.unpriced)}" if self.unpriced else ""
            text = f"cost unknown: no price per hour{unknown} (price_per_hour of the flavor in zenops.yaml)"
        elif self.action == "create":
            text = rate(self.per_hour, hours=True)
            if self.until:
                text += f" {self.until}"
            else:
                text += f" until it expires {self.expiry}" if self.expiry else " until `zenops down`: no expiry"
        else:
            text = f"stops {rate(self.per_hour, hours=True)}"
            if self.unpriced:
                text += f" and what {', '.join(self.unpriced)} cost (no price known)"
        return text

    def summary(self) -> str:
        """``1 server and 3 other resources``: what is created or deleted, counted."""
        others = sum(i.count for i in self.items if i.kind != "server")
        parts = [f"{self.servers} server(s)"] if self.servers else []
        if others:
            parts.append(f"{others} other resource(s)")
        return " and ".join(parts) or "nothing"

    def lines(self) -> list[str]:
        """What the operator reads before agreeing: the head, one line per item, the cost."""
        verb = "will create" if self.action == "create" else "will delete"
        head = f"{self.command} {verb} on {self.where}:"
        return [head, *(f"  {i.line()}" for i in self.items), f"  cost: {self.cost()}"]

    def warning(self) -> str | None:
        """The warning for a deployment created without an expiry (it runs, billed, until `zenops down`)."""
        if not (self.warn_no_expiry and self.action == "create" and self.expiry is None):
            return None
        money = f"{usd(self.per_month)} a month" if self.per_month is not None else "its price"
        return (
            f"no expiry: the deployment costs {money} ({HOURS_PER_MONTH} h) until `zenops down`; pass "
            f"{self.ttl_hint} (or set defaults.up.ttl in zenops.yaml) and `zenops reap` removes it then"
        )

    def question(self) -> str:
        verb = "create" if self.action == "create" else "delete"
        money = f" ({hourly(self.per_hour)})" if self.per_hour is not None and not self.campaign else ""
        if self.campaign and self.projected_usd is not None:
            money = f" (projected {usd(self.projected_usd)})"
        return f"{verb} {self.summary()}{money}?"

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "where": self.where,
            "items": [
                {"kind": i.kind, "name": i.name, "count": i.count, "per_hour": i.per_hour, "deployment": i.deployment}
                for i in self.items
            ],
            "per_hour": self.per_hour,
            "per_month": self.per_month,
            "hours_per_month": HOURS_PER_MONTH,
            "expiry": self.expiry,
            "projected_usd": self.projected_usd,
            "cap_usd": self.cap_usd,
        }


def _add(prices: Iterable[tuple[str, float | None]]) -> tuple[float | None, tuple[str, ...]]:
    """The sum of the known prices (None when none is known), and the names of those unknown."""
    pairs = list(prices)
    known = [p for _, p in pairs if p is not None]
    unknown = tuple(dict.fromkeys(n for n, p in pairs if p is None))
    return (round(sum(known), 4) if known else None), unknown


def of_up(
    dep: Deployment, *, new_servers: int, new_gateway: bool, expiry: str | None, command: str = "zenops up --cloud"
) -> Spend:
    """What `up --cloud` creates for ``dep`` (the ledger entry as preflight made it: flavor, count, prices):
    ``new_servers`` serving servers beyond those it adopts, the gateway's own server when ``new_gateway``; the cost
    is the deployment's once created (Deployment.cost_per_hour)."""
    items = []
    if new_servers > 0:
        items.append(Item("server", dep.flavor, new_servers, dep.price_per_hour))
    if new_gateway and dep.gateway_flavor:
        items.append(Item("server", dep.gateway_flavor, 1, dep.gateway_price_per_hour, note="the gateway's own"))
    unpriced = [dep.flavor] if dep.price_per_hour is None else []
    if dep.gateway_flavor and dep.gateway_price_per_hour is None:
        unpriced.append(dep.gateway_flavor)
    return Spend(
        command=command,
        action="create",
        where=f"cloud {dep.cloud}, deployment {dep.name}",
        items=tuple(items),
        per_hour=dep.cost_per_hour(),
        unpriced=tuple(unpriced),
        expiry=expiry,
        warn_no_expiry=True,
    )


def of_surge(dep: Deployment, count: int = 1) -> Spend:
    """A rollout's new servers of the deployment's flavor while the new release passes its gates (a surge: one;
    blue/green: ``count``, a whole new set), then the old ones are deleted (the deployment costs what it did
    after)."""
    one = count == 1
    return Spend(
        command="zenops rollout",
        action="create",
        where=f"cloud {dep.cloud}, deployment {dep.name}",
        items=(
            Item(
                "server",
                dep.flavor,
                count,
                dep.price_per_hour,
                note="the surge's new server; the old one goes" if one else "the new set; the old one goes",
            ),
        ),
        per_hour=dep.price_per_hour * count if dep.price_per_hour is not None else None,
        unpriced=() if dep.price_per_hour is not None else (dep.flavor,),
        until="more while both servers run (the old one is deleted once the new one passed its gates)"
        if one
        else "more while both sets run (the old set is deleted once the new one passed its gates)",
    )


def of_teardown(
    command: str, cloud: str, resources: Sequence[dict[str, Any]], deployments: Sequence[Deployment]
) -> Spend:
    """What `down` (or `campaign down`, `reap`) deletes: ``resources`` as zenops.cloud.ops.teardown lists them
    (kind, name, deployment), and what that stops, from the ledger's ``deployments`` (a deployment this machine does
    not know, another controller's: its price is unknown)."""
    items = tuple(Item(str(r["kind"]), str(r["name"]), deployment=r.get("deployment") or None) for r in resources)
    known = {d.name: d for d in deployments}
    billed = sorted({str(r["deployment"]) for r in resources if r["kind"] == "server" and r.get("deployment")})
    per_hour, unpriced = _add((n, known[n].cost_per_hour() if n in known else None) for n in billed)
    return Spend(
        command=command, action="delete", where=f"cloud {cloud}", items=items, per_hour=per_hour, unpriced=unpriced
    )


def of_campaign(
    cloud: str,
    groups: Sequence[tuple[str, float | None]],
    *,
    parallel: int,
    projected_usd: float,
    cap_usd: float | None,
    ttl: str,
) -> Spend:
    """What `campaign run` creates: one server per flavor group still to run (``groups``: flavor, price per hour),
    ``parallel`` of them up at once at most; its projected total against its cap."""
    items = tuple(Item("server", g, 1, p, note="torn down after its cells") for g, p in groups)
    dearest = sorted(groups, key=lambda g: g[1] if g[1] is not None else 0.0, reverse=True)[: max(parallel, 1)]
    _, unpriced = _add(groups)
    per_hour = None if unpriced else _add(dearest)[0]
    return Spend(
        command="zenops campaign run",
        action="create",
        where=f"cloud {cloud}",
        items=items,
        per_hour=per_hour,
        unpriced=unpriced,
        expiry=f"after {ttl}",
        projected_usd=projected_usd,
        cap_usd=cap_usd,
        campaign=True,
    )
