"""Base class for zenops.inference's OpenStack modules: owns the openstacksdk connection and maps its errors.

Each module subclasses ZenopsOpenStackModule, declares its own argument_spec and implements run(); connection,
retries of transient API errors and the classification of failures (quota, auth, not found, transient) live here.
"""

from __future__ import annotations

import email.utils
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
    status = getattr(exc, "status_code", None) or getattr(exc, "http_status", None) or 0  # sdk's, keystoneauth's
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


RETRY_AFTER_CAP = 60  # zenops.cloud.errors.RETRY_AFTER_CAP: a longer Retry-After is waited for this long only


def retry_after(exc, now=time.time):
    """The seconds the cloud asked to wait (the Retry-After header of the response behind the exception: seconds or
    an HTTP date), or None; zenops.cloud.errors.retry_after for the collection."""
    for e in (exc, exc.__cause__, exc.__context__):
        headers = getattr(getattr(e, "response", None), "headers", None)
        value = headers.get("Retry-After") if headers is not None else None
        if value is None:
            continue
        value = str(value).strip()
        try:
            return max(float(value), 0.0)
        except ValueError:
            pass
        try:
            return max(email.utils.parsedate_to_datetime(value).timestamp() - now(), 0.0)
        except (TypeError, ValueError):
            return None
    return None


def backoff(exc, attempt):
    """Seconds before attempt ``attempt + 1``: 1, 2, 4... (at most 10), and at least the Retry-After (capped)."""
    asked = retry_after(exc)
    delay = min(2 ** (attempt - 1), 10)
    return max(delay, min(asked, RETRY_AFTER_CAP)) if asked is not None else delay


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
        """Call the SDK, retrying transient failures with exponential back-off, waiting at least what a Retry-After
        asks. Only for calls that are safe to repeat (reads, a given resource's update or delete): a creation goes
        through create_or_adopt."""
        attempts = max(self.params["api_retries"], 1)
        for attempt in range(1, attempts + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if attempt == attempts or error_kind(exc) != "transient":
                    raise
                time.sleep(backoff(exc, attempt))
        return None

    def create_or_adopt(self, create, find, proxy=None):
        """Create a named resource, retrying transient failures like call; before each retry, ``find()`` looks for
        what the failed attempt may have made all the same (a timeout, a 502 or a dropped connection after the cloud
        carried the request out) and adopts it rather than making a twin. ``find`` returns the resource or None.
        ``proxy`` (the service's, e.g. conn.compute): its connection retries are off during ``create``, as
        keystoneauth counts a read timeout as a connection failure and sent the POST again by itself, before ``find``
        could look: a lost answer made a twin server on the sandbox."""
        attempts = max(self.params["api_retries"], 1)
        for attempt in range(1, attempts + 1):
            try:
                return self._once(create, proxy)
            except Exception as exc:
                if attempt == attempts or error_kind(exc) != "transient":
                    raise
                time.sleep(backoff(exc, attempt))
                found = self.call(find)
                if found is not None:
                    return found
        return None

    @staticmethod
    def _once(create, proxy):
        """``create()`` sent once: meanwhile every request of ``proxy`` goes with connect_retries=0 (openstacksdk's
        Proxy.request passes its own default, 1, to keystoneauth, whatever the adapter's attribute says)."""
        if proxy is None or not hasattr(proxy, "request"):
            return create()
        own = "request" in vars(proxy)
        request = proxy.request

        def once(url, method, *args, **kwargs):
            kwargs["connect_retries"] = 0
            return request(url, method, *args, **kwargs)

        proxy.request = once
        try:
            return create()
        finally:
            if own:
                proxy.request = request
            else:
                del proxy.request

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


__all__ = ["HAS_SDK", "ZenopsOpenStackModule", "backoff", "error_kind", "retry_after", "sdk_exc"]
