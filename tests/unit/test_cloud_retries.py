"""The CLI's retries of the cloud's transient failures (zenops.cloud.errors, ops.wait_until_404): Retry-After, the
message of a failure that outlasts them, polls through 5xx/429/timeouts."""

from __future__ import annotations

import email.utils

import pytest
from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from tests.fixtures.openstack_errors import answered, load_zenops_openstack, raised_from
from zenops.cloud import errors as cli_errors
from zenops.cloud import ops
from zenops.cloud.errors import CloudTransientError, classify, retrying
from zenops.errors import ExitCode


# the collection's modules run without the zenops package (plain ansible-playbook), so module_utils keeps its own
# copy of retry_after: both are held to the same cases here, so they cannot drift apart
@pytest.mark.parametrize(
    "retry_after", [cli_errors.retry_after, load_zenops_openstack().retry_after], ids=["cli", "module_utils"]
)
def test_retry_after_in_seconds_or_as_a_date_or_none(retry_after):
    assert retry_after(answered(429, retry_after="2")) == 2.0
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after(answered(503, retry_after=date), now=lambda: 1_000_000.0) == 30.0
    assert retry_after(answered(503, retry_after="soon")) is None
    assert retry_after(answered(503)) is None
    assert retry_after(ksa.ConnectTimeout("timed out")) is None
    assert retry_after(raised_from(sdk.SDKException("wrapped"), answered(429, retry_after="3"))) == 3.0


def failing_then(errors: list[BaseException]) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return calls, call


def test_retrying_waits_at_least_what_retry_after_asks_capped():
    slept: list[float] = []
    calls, call = failing_then([answered(429, retry_after="5"), answered(503, retry_after="3600")])
    assert retrying(call, sleep=slept.append) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 3
    assert slept[0] >= 5.0
    assert slept[1] == 60.0  # a longer wait is the operator's call: re-run


def test_retrying_retries_timeouts_dropped_connections_and_keystoneauth_5xx():
    slept: list[float] = []
    errors = [ksa.ConnectTimeout("Request to x timed out"), ksa.ConnectFailure("reset"), ksa.ServiceUnavailable("x")]
    calls, call = failing_then(errors)  # type: ignore[arg-type]
    assert retrying(call, sleep=slept.append) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 4
    assert all(s < 8 for s in slept)  # no Retry-After: the back-off alone


@pytest.mark.parametrize(
    ("url", "service"),
    [
        ("http://127.0.0.1:8774/v2.1/servers", "compute (Nova) at http://127.0.0.1:8774/v2.1/servers"),
        ("http://127.0.0.1:9696/v2.0/ports", "network (Neutron) at http://127.0.0.1:9696/v2.0/ports"),
        ("https://cloud.example/image/v2/images", "image (Glance) at https://cloud.example/image/v2/images"),
        ("https://api.example:443/x/y", "API at https://api.example:443/x/y"),
    ],
)
def test_a_failure_that_outlasts_the_retries_names_the_service_and_the_status(url: str, service: str):
    err = classify(answered(503, url=url), "sandbox")
    assert isinstance(err, CloudTransientError)
    assert err.exit_code == ExitCode.CLOUD
    assert err.message.startswith(f"cloud 'sandbox': the {service} failed with HTTP 503, also when tried again")
    assert "re-run" in str(err.hint)


def test_a_timeout_that_outlasts_the_retries_says_so():
    err = classify(ksa.ConnectTimeout("Request to http://127.0.0.1:8774/v2.1/servers timed out"), "sandbox")
    assert err.exit_code == ExitCode.CLOUD
    assert err.message.startswith("cloud 'sandbox': no answer in time, also when tried again: Request to")


def test_the_wait_for_a_404_polls_through_transient_failures():
    now, slept = [0.0], []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    answers = iter(
        [answered(503), ksa.ConnectTimeout("t"), answered(429, retry_after="7"), None, sdk.NotFoundException("gone")]
    )

    def fetch() -> None:
        a = next(answers)
        if a is not None:
            raise a

    ops.wait_until_404(fetch, "server x", 60, sleep=sleep, clock=lambda: now[0])
    assert slept == [2.0, 2.0, 7.0, 2.0]


def test_the_wait_for_a_404_raises_other_errors_and_transient_ones_past_its_deadline():
    def forbidden() -> None:
        raise sdk.ForbiddenException("no")

    with pytest.raises(sdk.ForbiddenException):
        ops.wait_until_404(forbidden, "server x", 60, sleep=lambda _s: None, clock=lambda: 0.0)
    now = [0.0]

    def unavailable() -> None:
        now[0] += 5
        raise answered(503)

    with pytest.raises(sdk.HttpException):
        ops.wait_until_404(unavailable, "server x", 10, sleep=lambda _s: None, clock=lambda: now[0])
