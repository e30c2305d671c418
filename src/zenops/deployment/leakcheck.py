"""`zenops leaks`: resources carrying zenops's marks that no deployment of this machine accounts for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zenops.cloud import ledger
from zenops.config import Config
from zenops.errors import ExitCode, ZenopsError

if TYPE_CHECKING:  # openstacksdk and ansible-runner are imported by the functions that use them: the CLI starts fast
    pass


class LeaksFoundError(ZenopsError):
    exit_code = ExitCode.LEAKS


def leaks(config: Config, cloud: str) -> list[dict[str, Any]]:
    """zenops-marked resources whose deployment is not alive in the ledger (exit non-zero through LeaksFoundError)."""
    from zenops.cloud import expiry_switch, ops, scaler_cred  # noqa: PLC0415

    listed = ledger.listing(config.state_dir, cloud)
    # a deployment whose ledger file is damaged (warned about, naming it) is still meant to be alive: not a leak
    alive = {d.name for d in listed.deployments} | {n for _, n in listed.damaged}
    from zenops.cloud.errors import classify, retrying  # noqa: PLC0415

    conn = ops.connect(cloud)
    try:
        keypairs = {k.name for k in retrying(lambda: list(conn.compute.keypairs())) if k.name.startswith("zenops-")}
    except Exception as e:
        raise classify(e, cloud) from e
    owned = ops.list_owned(conn, cloud, keypairs=keypairs)
    found = [ops.describe(k, r) for k, r in owned.items() if ops.describe(k, r)["deployment"] not in alive]
    # the expiry switch's application credentials (this user's: Keystone lists a user's own only)
    creds = [expiry_switch.describe(c) for c in expiry_switch.listed(conn, cloud)]
    creds += [scaler_cred.describe(c) for c in scaler_cred.listed(conn, cloud)]  # the scaling loop's
    return found + [c for c in creds if c["deployment"] not in alive]
