"""`zenops up --cloud`, `down`, `leaks` and `status`: deployments on OpenStack, created, tracked and removed.

Order of `up --cloud`: preflight (nothing is created before it passes) -> ledger entry (status provisioning) ->
playbooks/up.yml (role provision, then the same host steps as --inventory) -> ledger entry (ready, servers).
A failed or interrupted `up` leaves every created resource marked and the ledger entry in place, so a re-run adopts
what exists and `down` removes it.

Expiry (``CloudRequest.ttl_s``, `up --ttl`): new servers carry ``zenops:expires_at`` = now + ttl. Re-running `up` on
an existing deployment never moves its expiry silently: without a ttl the servers keep theirs (and new ones get the
same); with one, every server of the deployment gets the new expiry, and the note says it moved. `reap` asks the
cloud (not the ledger: the controller that made them may be gone) for deployments whose servers have all expired and
removes each as `down --deployment` does.

One module per job: common (the request, names, keys, inventories), provision (`up --cloud`), surge (a
rollout's extra server), teardown (`down`), reaping (`reap`), leakcheck (`leaks`), listing (`status`). What they
export is re-exported here: callers import ``zenops.deploy``.
"""

from __future__ import annotations

from zenops.deploy.common import (
    CloudRequest,
    Note,
    check_count,
    default_name,
    ensure_key,
    flavor_name,
    gateway_server_flavor,
    ignore,
    inventory_path,
    is_gateway,
    known_hosts_path,
    operator_cidr,
    ssh_pinning_args,
    tenant_cidr,
    write_inventory,
)
from zenops.deploy.leakcheck import LeaksFoundError, leaks
from zenops.deploy.listing import status
from zenops.deploy.provision import decide_expiry, serve_request_for, up_cloud
from zenops.deploy.reaping import Expiry, ReapFailedError, ReapResult, reap, select_expired
from zenops.deploy.surge import add_server, add_servers, retire_server, serving_server_names, surge_preflight
from zenops.deploy.teardown import DownResult, down, down_locked

__all__ = [
    "CloudRequest",
    "DownResult",
    "Expiry",
    "LeaksFoundError",
    "Note",
    "ReapFailedError",
    "ReapResult",
    "add_server",
    "add_servers",
    "check_count",
    "decide_expiry",
    "default_name",
    "down",
    "down_locked",
    "ensure_key",
    "flavor_name",
    "gateway_server_flavor",
    "ignore",
    "inventory_path",
    "is_gateway",
    "known_hosts_path",
    "leaks",
    "operator_cidr",
    "reap",
    "retire_server",
    "select_expired",
    "serve_request_for",
    "serving_server_names",
    "ssh_pinning_args",
    "status",
    "surge_preflight",
    "tenant_cidr",
    "up_cloud",
    "write_inventory",
]
