"""OpenStack errors, classified into what the operator can act on."""

from __future__ import annotations

import difflib
import random
import re
import time
from collections.abc import Callable, Iterable
from typing import ClassVar, TypeVar

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
    if isinstance(exc, ksa.ConnectFailure | ksa.ConnectTimeout | ksa.RetriableConnectionFailure):
        return True
    if isinstance(exc, sdk.HttpException):
        code = exc.status_code or 0
        return code >= 500 or code == 429
    return False


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
    if isinstance(exc, ksa.ConnectFailure | ksa.ConnectTimeout | ksa.DiscoveryFailure):
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
            return CloudTransientError(
                f"cloud '{cloud}': the API failed ({code}): {text}",
                hint="transient: re-run the command; zenops resumes where it stopped",
            )
    return CloudError(f"cloud '{cloud}': {type(exc).__name__}: {text}")


def retrying(
    call: Callable[[], T], *, attempts: int = 4, base_delay: float = 1.0, sleep: Callable[[float], None] = time.sleep
) -> T:
    """Call, retrying transient failures with exponential back-off and jitter; other errors pass through."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            sleep(base_delay * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")
