#!/usr/bin/python
"""Create or adopt a deployment's servers, wait for ACTIVE, replace servers that go to ERROR (bounded)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: openstack_servers
short_description: Ensure the servers of a zenops deployment exist and are ACTIVE
description:
  - Servers are named C(<name_prefix>-<index>) and carry the given metadata (zenops's ownership marks). Servers that
    already exist with the deployment's marks are adopted whatever their index (the lowest first, at most I(count)),
    never duplicated; new ones take the lowest free indexes (C(-1) .. C(-<count>) on a fresh deployment). A rollout's
    surge on a one-server deployment leaves C(-2) alone, and a re-run keeps it rather than creating C(-1) again.
  - Waits for ACTIVE up to I(timeout) seconds; a slow BUILD is only a failure once the timeout is over.
  - A server that goes to ERROR is reported with its fault, deleted (waiting until it is gone) and created again, at
    most I(retries) times.
  - With I(floating_network), each server gets a floating IP carrying I(tags), allocated and associated explicitly
    (and deleted by C(zenops down), unlike the openstack.cloud.server default which can leak them).
options:
  deployment: {description: Deployment name (value of the zenops:deployment mark)., type: str, required: true}
  name_prefix: {description: Server name prefix., type: str, required: true}
  count: {description: Number of servers., type: int, required: true}
  flavor: {description: Flavor name or ID., type: str, required: true}
  image: {description: Image name or ID., type: str, required: true}
  network: {description: Network name or ID for the servers' port., type: str, required: true}
  key_name: {description: Keypair name., type: str, required: true}
  security_groups: {description: Security group names., type: list, elements: str, default: []}
  metadata: {description: Server metadata (ownership marks)., type: dict, required: true}
  tags: {description: Tags for the floating IPs., type: list, elements: str, default: []}
  floating_network: {description: External network for floating IPs; none means no floating IP., type: str}
  timeout: {description: Seconds to wait for ACTIVE., type: int, default: 900}
  retries: {description: How many times a server in ERROR is replaced., type: int, default: 2}
extends_documentation_fragment: [zenops.inference.openstack]
author: zenops developers
"""

EXAMPLES = r"""
- name: Two servers for deployment demo
  zenops.inference.openstack_servers:
    cloud: sandbox
    deployment: demo
    name_prefix: zenops-demo
    count: 2
    flavor: gp.5.24.96
    image: debian-12
    network: provider
    key_name: zenops-demo
    metadata: {zenops: "1", "zenops:deployment": demo}
"""

RETURN = r"""
servers:
  description: One entry per server.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Server name., type: str}
    id: {description: Server ID., type: str}
    status: {description: Nova status., type: str}
    fixed_ip: {description: First fixed IPv4 address., type: str}
    floating_ip: {description: Floating IP, if any., type: str}
    address: {description: The address to reach it by (floating if any, else fixed)., type: str}
    replaced: {description: How many times it went to ERROR and was replaced., type: int}
    faults: {description: Faults of the replaced attempts., type: list, elements: str}
created:
  description: Names of servers created by this run.
  returned: always
  type: list
  elements: str
"""

import re  # noqa: E402
import time  # noqa: E402

from ansible_collections.zenops.inference.plugins.module_utils.zenops_openstack import (  # noqa: E402
    MARKS_DESCRIPTION_PREFIX,
    ZenopsOpenStackModule,
)


def _fixed_ip(server):
    for addrs in (server.addresses or {}).values():
        for a in addrs:
            if a.get("OS-EXT-IPS:type", "fixed") == "fixed" and a.get("version", 4) == 4:
                return a.get("addr")
    return None


def wanted_names(prefix, count, existing_names):
    """The servers to have: those of the deployment named C(<prefix>-<n>) (the lowest n first, at most count), then
    new ones at the lowest free indexes. Others (the gateway's C(<prefix>-gw-1)) are not counted."""
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)$")
    have = sorted(int(m.group(1)) for m in (pattern.match(n) for n in existing_names) if m)
    keep = set(have[:count])
    index = 1
    while len(keep) < count:
        if index not in have:
            keep.add(index)
        index += 1
    return [f"{prefix}-{i}" for i in sorted(keep)]


class Attempts:
    """What this run did to each wanted server: the names it created, how often each was replaced after going to
    ERROR, and the faults of those attempts."""

    def __init__(self, names):
        self.created = []
        self.replaced = dict.fromkeys(names, 0)
        self.faults = {n: [] for n in names}


class OpenStackServersModule(ZenopsOpenStackModule):
    argument_spec = {
        "deployment": {"type": "str", "required": True},
        "name_prefix": {"type": "str", "required": True},
        "count": {"type": "int", "required": True},
        "flavor": {"type": "str", "required": True},
        "image": {"type": "str", "required": True},
        "network": {"type": "str", "required": True},
        "key_name": {"type": "str", "required": True, "no_log": False},
        "security_groups": {"type": "list", "elements": "str", "default": []},
        "metadata": {"type": "dict", "required": True},
        "tags": {"type": "list", "elements": "str", "default": []},
        "floating_network": {"type": "str"},
        "timeout": {"type": "int", "default": 900},
        "retries": {"type": "int", "default": 2},
    }
    module_kwargs = {"supports_check_mode": True}

    def mine(self):
        out = {}
        for s in self.call(lambda: list(self.conn.compute.servers(details=True))):
            if (s.status or "").upper() == "DELETED":  # deleted, its record not removed yet: listed, never adopted
                continue
            meta = s.metadata or {}
            if meta.get("zenops") == "1" and meta.get("zenops:deployment") == self.params["deployment"]:
                out[s.name] = s
        return out

    def create(self, name):
        p = self.params
        kwargs = {
            "name": name,
            "flavor_id": self.flavor.id,
            "image_id": self.image.id,
            "networks": [{"uuid": self.network.id}],
            "key_name": p["key_name"],
            "metadata": p["metadata"],
        }
        if p["security_groups"]:
            kwargs["security_groups"] = [{"name": g} for g in p["security_groups"]]
        # a lost answer (timeout, 502, dropped connection) may hide a server the cloud made: adopted, not doubled
        return self.create_or_adopt(
            lambda: self.conn.compute.create_server(**kwargs), lambda: self.mine().get(name), proxy=self.conn.compute
        )

    def fault_of(self, server):
        for _ in range(5):  # the fault can lag the ERROR status
            s = self.call(self.conn.compute.get_server, server.id)
            fault = s.fault or {}
            if fault.get("message"):
                return "{} (code {})".format(fault.get("message"), fault.get("code"))
            time.sleep(1)
        return "no fault recorded"

    def delete_and_wait(self, server):
        self.call(self.conn.compute.delete_server, server, ignore_missing=True)
        # the wait polls the server: a transient failure of a poll starts the wait again (the deadline with it)
        self.call(self.conn.compute.wait_for_delete, server, wait=min(self.params["timeout"], 300))

    def floating_ip(self, server):
        net = self.conn.network
        ports = self.call(lambda: list(net.ports(device_id=server.id)))
        if not ports:
            self.fail(f"server {server.name} has no port for a floating IP")
        port = ports[0]
        existing = self.call(lambda: list(net.ips(port_id=port.id)))
        if existing:
            return existing[0].floating_ip_address, False
        ext = self.call(net.find_network, self.params["floating_network"], ignore_missing=False)
        # the marks go into the description at creation: a crash before the tags leaves a floating IP that
        # `zenops down` and `leaks` still find (zenops.cloud.marks.from_description)
        description = MARKS_DESCRIPTION_PREFIX + " ".join(self.params["tags"])

        def spare():  # one of the deployment's, not associated: a lost answer's, or a crashed run's
            free = [i for i in net.ips(floating_network_id=ext.id) if i.description == description and not i.port_id]
            return free[0] if free else None

        ip = self.create_or_adopt(
            lambda: net.create_ip(floating_network_id=ext.id, description=description), spare, proxy=net
        )
        if self.params["tags"]:
            self.call(net.set_tags, ip, list(self.params["tags"]))
        self.call(net.update_ip, ip, port_id=port.id)
        return ip.floating_ip_address, True

    def run(self):
        self.resolve_inputs()
        existing = self.mine()
        names = wanted_names(self.params["name_prefix"], self.params["count"], existing)
        if self.ansible.check_mode:
            self.ansible.exit_json(**self.check_mode_result(names, existing))
            return
        log = Attempts(names)
        pending = {n: self.keep_or_create(n, existing, log) for n in names}
        active = self.wait_until_active(pending, log)
        results = [self.result_of(n, active[n], log) for n in names]
        changed = bool(log.created) or any(ip_changed for _, ip_changed in results)
        self.ansible.exit_json(changed=changed, created=log.created, servers=[r for r, _ in results])

    def resolve_inputs(self):
        """Look up the flavor, image and network (each must exist)."""
        p = self.params
        self.flavor = self.call(self.conn.compute.find_flavor, p["flavor"], ignore_missing=False)
        self.image = self.call(self.conn.image.find_image, p["image"], ignore_missing=False)
        self.network = self.call(self.conn.network.find_network, p["network"], ignore_missing=False)

    def check_mode_result(self, names, existing):
        missing = [n for n in names if n not in existing]
        servers = [
            {
                "name": n,
                "id": existing[n].id if n in existing else None,
                "status": existing[n].status if n in existing else "would be created",
            }
            for n in names
        ]
        return {"changed": bool(missing), "created": missing, "servers": servers}

    def keep_or_create(self, name, existing, log):
        """The deployment's server of that name if it has one (adopted), else a new one."""
        if name in existing:
            return existing[name]
        server = self.create(name)
        log.created.append(name)
        return server

    def wait_until_active(self, pending, log):
        """Poll every 2 s until every server is ACTIVE, replacing those that go to ERROR; name -> ACTIVE server.
        Fails once the timeout is over (the servers are kept)."""
        pending = dict(pending)
        deadline = time.time() + self.params["timeout"]
        active = {}
        while pending:
            if time.time() > deadline:
                self.fail_timeout(pending, log)
            time.sleep(2)
            for n, old in list(pending.items()):
                s = self.call(self.conn.compute.get_server, old.id)
                if s.status == "ACTIVE":
                    active[n] = s
                    del pending[n]
                elif s.status == "ERROR":
                    pending[n] = self.replace_failed(n, s, log)
                else:
                    pending[n] = s
        return active

    def fail_timeout(self, pending, log):
        slow = ", ".join(f"{n} ({s.status})" for n, s in sorted(pending.items()))
        self.fail(
            "not ACTIVE after {}s: {}; the servers are kept (a slow BUILD is not an error): re-run to "
            "wait longer or raise the timeout, or remove them with zenops down".format(self.params["timeout"], slow),
            kind="timeout",
            created=log.created,
        )

    def replace_failed(self, name, server, log):
        """A server in ERROR: note its fault, delete it (waiting until it is gone) and create it again, at most
        the retries option's times; then fail."""
        fault = self.fault_of(server)
        log.faults[name].append(fault)
        self.delete_and_wait(server)
        if log.replaced[name] >= self.params["retries"]:
            self.fail(
                f"server {name} went to ERROR {log.replaced[name] + 1} time(s); last fault: {fault}. It was "
                "deleted; nothing of it is left",
                kind="server_error",
                created=log.created,
                faults=log.faults,
            )
        log.replaced[name] += 1
        return self.create(name)

    def result_of(self, name, server, log):
        """The returned entry of an ACTIVE server (its floating IP made first, with floating_network), and whether
        a floating IP was made."""
        fip, ip_changed = self.floating_ip(server) if self.params["floating_network"] else (None, False)
        fixed = _fixed_ip(server)
        entry = {
            "name": name,
            "id": server.id,
            "status": server.status,
            "fixed_ip": fixed,
            "floating_ip": fip,
            "address": fip or fixed,
            "replaced": log.replaced[name],
            "faults": log.faults[name],
        }
        return entry, ip_changed


def main():
    OpenStackServersModule()()


if __name__ == "__main__":
    main()
