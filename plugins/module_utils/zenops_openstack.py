"""Base class for zenops.inference's OpenStack modules: owns the openstacksdk connection and maps its errors.

Each module subclasses ZenopsOpenStackModule, declares its own argument_spec and implements run(); connection,
retries of transient API errors and the classification of failures (quota, auth, not found, transient) live here.
"""

from __future__ import annotations

import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import openstack
    from openstack import exceptions as sdk_exc

    HAS_SDK = True
    SDK_IMPORT_ERROR = None
except ImportError:
    HAS_SDK = False
    SDK_IMPORT_ERROR = traceback.format_exc()

# The arguments every OpenStack module takes, added to its own argument_spec by ZenopsOpenStackModule; documented once
# in plugins/doc_fragments/openstack.py (extends_documentation_fragment: zenops.inference.openstack).
# a resource's marks in its description, written at creation, before its tags (zenops.cloud.marks.DESCRIPTION_PREFIX:
# the same text, pinned by tests/unit/test_cloud.py)
MARKS_DESCRIPTION_PREFIX = "zenops marks: "

COMMON_ARGS = {
    "cloud": {"type": "str", "required": True},
    "api_retries": {"type": "int", "default": 4},
}


def error_kind(exc):
    """quota | auth | not_found | transient | error, from an openstacksdk / keystoneauth exception: the words of the
    CLI's zenops.cloud.errors (CloudError.kind); tests/fixtures/openstack_errors.py holds the cases of both."""
    status = getattr(exc, "status_code", None) or 0
    text = str(exc).lower()
    name = type(exc).__name__
    if status in (413,) or (status == 403 and "quota" in text):
        return "quota"
    if status in (401, 403) or name in ("Unauthorized", "ConfigException"):
        return "auth"
    if status == 404:
        return "not_found"
    if status >= 500 or status == 429 or name in ("ConnectFailure", "ConnectTimeout", "RetriableConnectionFailure"):
        return "transient"
    return "error"


class ZenopsOpenStackModule:
    argument_spec = {}
    module_kwargs = {}

    def __init__(self):
        spec = dict(COMMON_ARGS)
        spec.update(self.argument_spec)
        self.ansible = AnsibleModule(argument_spec=spec, **self.module_kwargs)
        self.params = self.ansible.params
        self.conn = None

    def call(self, fn, *args, **kwargs):
        """Call the SDK, retrying transient failures with exponential back-off."""
        attempts = max(self.params["api_retries"], 1)
        for attempt in range(1, attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if attempt == attempts or error_kind(exc) != "transient":
                    raise
                time.sleep(min(2 ** (attempt - 1), 10))
        return None

    def ensure_tags(self, resource, tags):
        """Add the missing ``tags`` to a Neutron resource (its other tags stay; nothing written in check mode).
        Returns (changed, the tags afterwards)."""
        current = list(resource.tags or [])
        missing = [t for t in tags if t not in current]
        if missing and not self.ansible.check_mode:
            self.call(self.conn.network.set_tags, resource, current + missing)
        return bool(missing), current + missing

    def fail(self, msg, kind="error", **kwargs):
        self.ansible.fail_json(msg=msg, zenops_error=kind, **kwargs)

    def __call__(self):
        if not HAS_SDK:
            self.ansible.fail_json(msg=missing_required_lib("openstacksdk"), exception=SDK_IMPORT_ERROR)
        cloud = self.params["cloud"]
        try:
            self.conn = openstack.connect(cloud=cloud)
            self.run()
        except Exception as exc:
            kind = error_kind(exc)
            prefix = {
                "quota": "quota exceeded",
                "auth": f"authentication or permission failed (check the '{cloud}' entry in clouds.yaml)",
                "not_found": "not found",
                "transient": "the cloud API failed repeatedly",
            }.get(kind, type(exc).__name__)
            self.fail(f"{prefix}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}", kind=kind)

    def run(self):
        raise NotImplementedError


__all__ = ["HAS_SDK", "ZenopsOpenStackModule", "error_kind", "sdk_exc"]
