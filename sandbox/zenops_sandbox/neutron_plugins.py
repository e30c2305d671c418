"""Neutron plugins for the sandbox, which runs no Neutron agents.

SandboxMechanismDriver  ML2 mechanism driver: binds every port (VIF_TYPE_OVS, status ACTIVE), whatever the segment
                        type (flat provider networks and tenant vxlan networks alike), so Nova's boots succeed.
SandboxL3RouterPlugin   the stock L3 router plugin plus what an L3 agent would do for floating IPs: status ACTIVE when
                        associated (DOWN when not), and one iptables DNAT rule per associated floating IP -> fixed IP
                        in the nat chain ZENOPS-SANDBOX-FIP, hooked into PREROUTING and OUTPUT, so this machine reaches
                        a server through its floating IP. The chain is rebuilt from the database after every change.
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import threading
import time

from neutron.objects import router as l3_obj
from neutron.services.l3_router import l3_router_plugin
from neutron_lib import constants as n_const
from neutron_lib import context as n_context
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api

from zenops_sandbox import FIP_CHAIN

LOG = logging.getLogger(__name__)


class SandboxMechanismDriver(api.MechanismDriver):
    """Bind every port on its first segment; nothing is plugged anywhere (the compute driver does the wiring)."""

    def initialize(self):
        LOG.info("zenops sandbox mechanism driver: binding every port (vif_type ovs)")

    @property
    def connectivity(self):
        return portbindings.CONNECTIVITY_L2

    def bind_port(self, context):
        for segment in context.segments_to_bind:
            context.set_binding(
                segment[api.ID],
                portbindings.VIF_TYPE_OVS,
                {portbindings.CAP_PORT_FILTER: True},
                status=n_const.PORT_STATUS_ACTIVE,
            )
            return


def _iptables(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, check=check)


def dnat_ruleset(pairs: list[tuple[str, str]]) -> str:
    """iptables-restore input that replaces the chain's rules with one DNAT per (floating IP, fixed IP)."""
    lines = ["*nat", f":{FIP_CHAIN} - [0:0]"]
    for floating, fixed in sorted(pairs):
        ipaddress.IPv4Address(floating)  # refuse anything that is not a plain IPv4 address
        ipaddress.IPv4Address(fixed)
        lines.append(f"-A {FIP_CHAIN} -d {floating}/32 -j DNAT --to-destination {fixed}")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def apply_dnat(pairs: list[tuple[str, str]]) -> None:
    if _iptables("iptables", "-t", "nat", "-n", "-L", FIP_CHAIN, check=False).returncode != 0:
        _iptables("iptables", "-t", "nat", "-N", FIP_CHAIN, check=False)
    for hook in ("PREROUTING", "OUTPUT"):
        if _iptables("iptables", "-t", "nat", "-C", hook, "-j", FIP_CHAIN, check=False).returncode != 0:
            _iptables("iptables", "-t", "nat", "-I", hook, "1", "-j", FIP_CHAIN)
    # --noflush keeps every other chain; declaring our chain flushes just it, so the swap is atomic.
    _iptables("iptables-restore", "--noflush", stdin=dnat_ruleset(pairs))


class SandboxL3RouterPlugin(l3_router_plugin.L3RouterPlugin):
    """L3RouterPlugin whose floating IPs work without an L3 agent (status + DNAT on this machine)."""

    _sync_lock = threading.Lock()

    def __init__(self):
        super().__init__()
        # The database is up before neutron starts (scripts/sandbox orders it), but retry in the background anyway:
        # the chain must match the database again after a restart or a `down`.
        threading.Thread(target=self._initial_sync, name="zenops-fip-sync", daemon=True).start()

    def _initial_sync(self):
        for attempt in range(30):
            try:
                self.sync_floatingips()
                return
            except Exception:
                LOG.warning("zenops sandbox: floating IP sync failed (attempt %d)", attempt + 1, exc_info=True)
                time.sleep(2)

    def sync_floatingips(self):
        """Make statuses and the DNAT chain match the database: ACTIVE + one rule per associated floating IP."""
        with self._sync_lock:
            ctx = n_context.get_admin_context()
            pairs = []
            for fip in l3_obj.FloatingIP.get_objects(ctx):
                associated = bool(fip.fixed_port_id and fip.fixed_ip_address)
                if associated:
                    pairs.append((str(fip.floating_ip_address), str(fip.fixed_ip_address)))
                want = n_const.FLOATINGIP_STATUS_ACTIVE if associated else n_const.FLOATINGIP_STATUS_DOWN
                if fip.status != want:
                    self.update_floatingip_status(ctx, fip.id, want)
            apply_dnat(pairs)
            LOG.info("zenops sandbox: %d floating IP DNAT rule(s) in %s", len(pairs), FIP_CHAIN)

    @staticmethod
    def _status_for(fip: dict) -> str:
        if fip.get("port_id") and fip.get("fixed_ip_address"):
            return n_const.FLOATINGIP_STATUS_ACTIVE
        return n_const.FLOATINGIP_STATUS_DOWN

    def create_floatingip(self, context, floatingip):
        fip = super().create_floatingip(context, floatingip)
        self.sync_floatingips()
        fip["status"] = self._status_for(fip)
        return fip

    def update_floatingip(self, context, id, floatingip):
        fip = super().update_floatingip(context, id, floatingip)
        self.sync_floatingips()
        fip["status"] = self._status_for(fip)
        return fip

    def delete_floatingip(self, context, id):
        super().delete_floatingip(context, id)
        self.sync_floatingips()

    def disassociate_floatingips(self, context, port_id, *args, **kwargs):
        result = super().disassociate_floatingips(context, port_id, *args, **kwargs)
        # Called inside the port delete; the rule must go even if the caller's transaction is still open, so
        # sync from a short-lived thread after it (the database is the source of truth; a later sync also fixes it).
        threading.Thread(target=self._deferred_sync, daemon=True).start()
        return result

    def _deferred_sync(self):
        time.sleep(0.5)
        try:
            self.sync_floatingips()
        except Exception:
            LOG.exception("zenops sandbox: floating IP sync after disassociate failed")
