#!/usr/bin/python
"""Ensure tags on a Neutron resource (openstack.cloud's network, subnet, router, security group and floating IP
modules cannot set tags)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: openstack_tags
short_description: Ensure tags on a Neutron resource
description:
  - Adds the given tags to a network, subnet, router, port, security group or floating IP. Existing tags stay.
  - zenops marks everything it creates this way so that C(zenops down) and C(zenops leaks) can find it.
options:
  resource:
    description: Kind of resource.
    type: str
    required: true
    choices: [network, subnet, router, port, security_group, floating_ip]
  id: {description: ID of the resource., type: str, required: true}
  tags: {description: Tags that must be present., type: list, elements: str, required: true}
extends_documentation_fragment: [zenops.inference.openstack]
author: zenops developers
"""

EXAMPLES = r"""
- name: Mark the network as zenops's
  zenops.inference.openstack_tags:
    cloud: sandbox
    resource: network
    id: "{{ net.id }}"
    tags: [zenops, "zenops:deployment=demo"]
"""

RETURN = r"""
tags:
  description: The resource's tags afterwards.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.zenops.inference.plugins.module_utils.zenops_openstack import (  # noqa: E402
    ZenopsOpenStackModule,
)

FINDERS = {
    "network": "get_network",
    "subnet": "get_subnet",
    "router": "get_router",
    "port": "get_port",
    "security_group": "get_security_group",
    "floating_ip": "get_ip",
}


class OpenStackTagsModule(ZenopsOpenStackModule):
    argument_spec = {
        "resource": {"type": "str", "required": True, "choices": list(FINDERS)},
        "id": {"type": "str", "required": True},
        "tags": {"type": "list", "elements": "str", "required": True},
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        res = self.call(getattr(self.conn.network, FINDERS[self.params["resource"]]), self.params["id"])
        changed, tags = self.ensure_tags(res, self.params["tags"])
        self.ansible.exit_json(changed=changed, tags=tags)


def main():
    OpenStackTagsModule()()


if __name__ == "__main__":
    main()
