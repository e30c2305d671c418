"""A cloud deployment's serving servers as a rollout's strategy adds and removes them (zenops.rollout.steps.Servers),
through the deployment its command opened (zenops.deployment.lifecycle: add_server, add_servers, remove_server; its
lock held) and zenops.deployment.surge's read-only checks (surge_preflight, serving_server_names)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zenops.errors import ZenopsError

if TYPE_CHECKING:
    from zenops.cloud.ledger import Deployment
    from zenops.context import RunContext
    from zenops.deployment.store import Store


class CloudServers:
    def __init__(self, ctx: RunContext, store: Store, *, gateway_port: int) -> None:
        self.ctx = ctx
        self.store = store
        self.gateway_port = gateway_port

    @property
    def entry(self) -> Deployment:
        dep = self.store.cloud_entry()
        if dep is None:
            raise ZenopsError(
                f"the cloud deployment of {self.store.inventory} is no longer in this controller's ledger: the "
                "rollout cannot go on",
                hint="`zenops status` lists the deployments; `zenops rollout --abort` sends the fleet back",
            )
        return dep

    def preflight(self, more: int) -> None:
        from zenops.deployment import surge  # noqa: PLC0415

        if more == 1:
            surge.surge_preflight(self.ctx, self.entry)
        else:
            surge.surge_preflight(self.ctx, self.entry, more=more)

    def add(self, keep: list[str], more: int) -> dict[str, str | None]:
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        entry = self.entry
        opened = Deployment.of_entry(self.ctx.quiet(), entry)
        if len(keep) == 1 and more == 1:  # a surge: one server beside the one that serves
            name, dep = opened.add_server(entry, keep=keep[0], gateway_port=self.gateway_port)
            made = [name]
        else:
            made, dep = opened.add_servers(entry, keep=keep, more=more, gateway_port=self.gateway_port)
        return {
            n: next((s.get("fixed_ip") or s.get("address") for s in dep.servers if s["name"] == n), None) for n in made
        }

    def in_cloud(self) -> list[str]:
        from zenops.deployment import surge  # noqa: PLC0415

        dep = self.entry
        return sorted(set(surge.serving_server_names(dep)) | {str(s["name"]) for s in dep.servers})

    def retire(self, name: str) -> None:
        from zenops.deployment.lifecycle import Deployment  # noqa: PLC0415

        entry = self.entry
        Deployment.of_entry(self.ctx.quiet(), entry).remove_server(entry, name)
