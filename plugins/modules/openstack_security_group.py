#!/usr/bin/python
"""Ensure a security group, its tags and its ingress TCP rules in one module run (one SDK connection), instead of
one openstack.cloud module run per rule: every `zenops up --cloud` ensures the group and its rules, and each module
run on the controller starts Python, imports openstacksdk and authenticates again."""

from __future__ import annotations

DOCUMENTATION = r"""
module: openstack_security_group
short_description: Ensure a security group with its tags and ingress TCP rules
description:
  - Creates the security group when no group of that name exists in the project (else updates its description),
    adds the given tags (existing tags stay), then makes each listed ingress TCP rule present or absent. Rules that
    are not listed are left alone (Neutron's default egress rules among them).
  - A rule opens a port range to an address range (I(remote_ip_prefix)) or to the members of the group itself
    (I(remote_group=self)); its ether type follows the address range (IPv4 without one).
  - zenops marks everything it creates with tags so that C(zenops down) and C(zenops leaks) can find it.
options:
  name: {description: Name of the security group., type: str, required: true}
  description: {description: Description of the group (set when it differs)., type: str, default: ""}
  tags: {description: Tags that must be present on the group., type: list, elements: str, default: []}
  rules:
    description: Ingress TCP rules.
    type: list
    elements: dict
    default: []
    suboptions:
      port_range_min: {description: First port., type: int, required: true}
      port_range_max: {description: Last port., type: int, required: true}
      remote_ip_prefix: {description: The address range allowed in (CIDR)., type: str}
      remote_group:
        description: C(self) allows the members of this group in.
        type: str
        choices: [self]
      state: {description: Whether the rule must exist., type: str, choices: [present, absent], default: present}
extends_documentation_fragment: [zenops.inference.openstack]
author: zenops developers
"""

EXAMPLES = r"""
- name: Ensure the deployment's security group and its rules
  zenops.inference.openstack_security_group:
    cloud: sandbox
    name: zenops-demo
    description: "zenops deployment demo"
    tags: [zenops, "zenops:deployment=demo"]
    rules:
      - {port_range_min: 22, port_range_max: 22, remote_ip_prefix: 203.0.113.7/32}
      - {port_range_min: 8000, port_range_max: 8015, remote_group: self}
      - {port_range_min: 8000, port_range_max: 8015, remote_ip_prefix: 203.0.113.7/32, state: absent}
"""

RETURN = r"""
security_group:
  description: The group afterwards (id, name, tags).
  returned: always
  type: dict
rules:
  description: What was done to each listed rule, in order (created, deleted, present, absent).
  returned: always
  type: list
  elements: str
"""

import ipaddress  # noqa: E402

from ansible_collections.zenops.inference.plugins.module_utils.zenops_openstack import (  # noqa: E402
    ZenopsOpenStackModule,
)


def _network(prefix):
    return ipaddress.ip_network(prefix, strict=False) if prefix else None


def _key(rule, group_id):
    """What tells two ingress TCP rules apart: port range, ether type and who may come in."""
    net = _network(rule.get("remote_ip_prefix"))
    remote_group = group_id if rule.get("remote_group") == "self" else rule.get("remote_group_id")
    ethertype = rule.get("ether_type") or ("IPv6" if net is not None and net.version == 6 else "IPv4")
    return (
        int(rule["port_range_min"]),
        int(rule["port_range_max"]),
        ethertype,
        str(net) if net is not None else None,
        remote_group,
    )


class OpenStackSecurityGroupModule(ZenopsOpenStackModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "description": {"type": "str", "default": ""},
        "tags": {"type": "list", "elements": "str", "default": []},
        "rules": {
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "port_range_min": {"type": "int", "required": True},
                "port_range_max": {"type": "int", "required": True},
                "remote_ip_prefix": {"type": "str"},
                "remote_group": {"type": "str", "choices": ["self"]},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            },
            "mutually_exclusive": [["remote_ip_prefix", "remote_group"]],
            "required_one_of": [["remote_ip_prefix", "remote_group"]],
        },
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        net = self.conn.network
        check = self.ansible.check_mode
        changed = False
        group = self.call(net.find_security_group, self.params["name"], ignore_missing=True)
        if group is None:
            changed = True
            if check:  # nothing exists yet: every listed rule would be created, the absent ones are absent
                done = ["created" if r["state"] == "present" else "absent" for r in self.params["rules"]]
                self.ansible.exit_json(
                    changed=True, security_group={"id": None, "name": self.params["name"]}, rules=done
                )
            group = self.call(
                net.create_security_group, name=self.params["name"], description=self.params["description"]
            )
        elif self.params["description"] and group.description != self.params["description"]:
            changed = True  # the operator's range in it changed
            if not check:
                group = self.call(net.update_security_group, group, description=self.params["description"])
        tagged, tags = self.ensure_tags(group, self.params["tags"])
        changed = changed or tagged
        existing = {}
        for rule in self.call(lambda: list(net.security_group_rules(security_group_id=group.id, direction="ingress"))):
            if (rule.protocol or "").lower() == "tcp" and rule.port_range_min is not None:
                existing.setdefault(_key(rule.to_dict(), group.id), []).append(rule)
        done = []
        for wanted in self.params["rules"]:
            key = _key(wanted, group.id)
            found = existing.get(key, [])
            if wanted["state"] == "present" and not found:
                changed = True
                new = None
                if not check:
                    new = self.call(
                        net.create_security_group_rule,
                        security_group_id=group.id,
                        direction="ingress",
                        protocol="tcp",
                        ether_type=key[2],
                        port_range_min=key[0],
                        port_range_max=key[1],
                        remote_ip_prefix=key[3],
                        remote_group_id=key[4],
                    )
                existing[key] = [new]  # listed twice: created once
                done.append("created")
            elif wanted["state"] == "absent" and found:
                changed = True
                if not check:
                    for rule in found:
                        self.call(net.delete_security_group_rule, rule, ignore_missing=True)
                existing[key] = []
                done.append("deleted")
            else:
                done.append(wanted["state"])
        self.ansible.exit_json(
            changed=changed, security_group={"id": group.id, "name": group.name, "tags": tags}, rules=done
        )


def main():
    OpenStackSecurityGroupModule()()


if __name__ == "__main__":
    main()
