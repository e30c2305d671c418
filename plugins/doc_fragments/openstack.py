"""The options every zenops.inference OpenStack module takes (``extends_documentation_fragment:
zenops.inference.openstack``): the documentation of module_utils/zenops_openstack.py's COMMON_ARGS, which
ZenopsOpenStackModule adds to each module's argument_spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  cloud: {description: Name of the clouds.yaml entry., type: str, required: true}
  api_retries: {description: Attempts for transient API errors., type: int, default: 4}
"""
