"""OpenStack errors, classified into what the operator can act on."""

from __future__ import annotations

import difflib
import email.utils
import random
import re
import time
from collections.abc import Callable, Iterable
from typing import ClassVar, TypeVar
from urllib.parse import urlsplit

from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from zenops.errors import ExitCode, ZenopsError

T = TypeVar("T")


class CloudError(ZenopsError):
    """A failure of the cloud. ``kind`` names it in the words the collection's OpenStack modules use for theirs
    (``error_kind`` in plugins/module_utils/zenops_openstack.py, their ``zenops_error`` result): quota, auth,
    not_found, transient, or error for anything else."""

    exit_code = ExitCode.CLOUD
    kind: ClassVar[str] = "error"


class CloudAuthError(CloudError):
    kind = "auth"


class QuotaExceededError(CloudError):
    exit_code = ExitCode.QUOTA
    kind = "quota"


class CloudNotFoundError(CloudError):
    exit_code = ExitCode.USAGE
    kind = "not_found"


class CloudTransientError(CloudError):
    kind = "transient"


def close_matches(name: str, candidates: Iterable[str], n: int = 3) -> str:
    matches = difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.4)
    return ", ".join(matches) if matches else "none similar"


def is_transient(exc: BaseException) -> bool:
    """A failure worth trying again: no connection, no answer in time (keystoneauth's ConnectTimeout covers a read
    timeout too), an HTTP 5xx or 429 (openstacksdk's HttpException or keystoneauth's HttpError)."""
    if isinstance(exc, ksa.ConnectFailure | ksa.ConnectTimeout | ksa.RetriableConnectionFailure):
        return True
    if isinstance(exc, sdk.HttpException | ksa.HttpError):
        code = _status(exc)
        return code >= 500 or code == 429
    return False


RETRY_AFTER_CAP = 60.0  # a longer Retry-After is waited for this long only: re-running the command is the operator's


def retry_after(exc: BaseException, now: Callable[[], float] = time.time) -> float | None:
    """The seconds the cloud asked to wait before trying again (its Retry-After header: seconds or an HTTP date),
    from the response behind the exception; None when it said nothing."""
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


# the service behind an endpoint, by its path (devstack's /compute, /image...) or its usual port
_NOVA, _GLANCE, _NEUTRON, _KEYSTONE, _CINDER = (
    "compute (Nova)",
    "image (Glance)",
    "network (Neutron)",
    "identity (Keystone)",
    "block-storage (Cinder)",
)
_SERVICE_PATHS = {"compute": _NOVA, "image": _GLANCE, "network": _NEUTRON, "identity": _KEYSTONE, "volume": _CINDER}
_SERVICE_PORTS = {8774: _NOVA, 9292: _GLANCE, 9696: _NEUTRON, 5000: _KEYSTONE, 35357: _KEYSTONE, 8776: _CINDER}


def service_of(exc: BaseException) -> str | None:
    """The API an HTTP failure came from, named from its URL (``compute (Nova) at http://...``); None without one."""
    url = None
    for e in (exc, exc.__cause__, exc.__context__):
        url = getattr(e, "url", None) or getattr(getattr(e, "request", None), "url", None)
        if url:
            break
    if not url:
        found = re.search(r"for url: (\S+?),?(\s|$)", str(exc))
        url = found[1] if found else None
    if not url:
        return None
    parts = urlsplit(str(url))
    first = parts.path.strip("/").split("/")[0]
    try:
        port = parts.port
    except ValueError:
        port = None
    name = _SERVICE_PATHS.get(first) or (_SERVICE_PORTS.get(port) if port else None) or "API"
    return f"{name} at {parts.scheme}://{parts.netloc}{parts.path}"


def _status(exc: BaseException) -> int:
    """The HTTP status behind an exception: its own, its cause's, or the "(HTTP 401)" openstacksdk puts in the text
    when it wraps a keystoneauth error into a plain SDKException."""
    for e in (exc, exc.__cause__, exc.__context__):
        code = getattr(e, "status_code", None) or getattr(e, "http_status", None)
        if isinstance(code, int) and code:
            return code
    found = re.search(r"\(HTTP (\d{3})\)", str(exc))
    return int(found[1]) if found else 0


def classify(exc: BaseException, cloud: str) -> ZenopsError:
    """Turn an openstacksdk / keystoneauth exception into a zenops error that names the fix."""
    if isinstance(exc, ZenopsError):
        return exc
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    code = _status(exc)
    if isinstance(exc, sdk.ConfigException):
        return CloudAuthError(
            f"cloud '{cloud}': {text}",
            hint="add the entry to clouds.yaml (or set OS_CLIENT_CONFIG_FILE) and pass --cloud NAME",
        )
    if isinstance(exc, ksa.Unauthorized) or code == 401:
        return CloudAuthError(
            f"cloud '{cloud}': authentication failed: {text}",
            hint=f"check the credentials of the '{cloud}' entry in clouds.yaml",
        )
    if isinstance(exc, ksa.ConnectTimeout):
        return CloudTransientError(
            f"cloud '{cloud}': no answer in time, also when tried again: {text}",
            hint="transient: re-run the command; zenops resumes where it stopped (a raised api_timeout in clouds.yaml "
            "gives a slow cloud longer)",
        )
    if isinstance(exc, ksa.ConnectFailure | ksa.DiscoveryFailure):
        return CloudTransientError(
            f"cloud '{cloud}' is unreachable: {text}",
            hint=f"check auth_url of '{cloud}' in clouds.yaml and the network path to it",
        )
    if code:
        if (code == 403 and "quota" in text.lower()) or code == 413:
            return QuotaExceededError(
                f"cloud '{cloud}': quota exceeded: {text}",
                hint="free resources (zenops status / zenops down) or ask for a bigger quota",
            )
        if code == 403:
            return CloudAuthError(
                f"cloud '{cloud}': forbidden: {text}",
                hint="the project's role lacks this permission; ask the cloud's admin",
            )
        if code == 404:
            return CloudNotFoundError(f"cloud '{cloud}': not found: {text}")
        if code >= 500 or code == 429:
            where = service_of(exc) or "API"
            return CloudTransientError(
                f"cloud '{cloud}': the {where} failed with HTTP {code}, also when tried again: {text}",
                hint="transient: re-run the command; zenops resumes where it stopped",
            )
    return CloudError(f"cloud '{cloud}': {type(exc).__name__}: {text}")


def backoff(exc: BaseException, attempt: int, base_delay: float = 1.0) -> float:
    """How long to wait before attempt ``attempt + 1``: exponential with jitter, and at least what the cloud asked
    for (Retry-After, capped at RETRY_AFTER_CAP)."""
    delay: float = base_delay * 2.0 ** (attempt - 1) * (0.5 + random.random())
    asked = retry_after(exc)
    return max(delay, min(asked, RETRY_AFTER_CAP)) if asked is not None else delay


def retrying(
    call: Callable[[], T], *, attempts: int = 4, base_delay: float = 1.0, sleep: Callable[[float], None] = time.sleep
) -> T:
    """Call, retrying transient failures (is_transient) with exponential back-off and jitter, waiting at least what
    a Retry-After header asks; other errors pass through. Only for calls that are safe to repeat: reads, and deletes
    and updates of a given resource (a creation is retried by a caller that first adopts what a lost answer made)."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            sleep(backoff(exc, attempt, base_delay))
    raise AssertionError("unreachable")
