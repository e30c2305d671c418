"""Both classifiers of OpenStack errors on one table of cases (tests/fixtures/openstack_errors.py): the collection's
``error_kind`` (plugins/module_utils/zenops_openstack.py) and the CLI's ``classify`` (zenops.cloud.errors), with what
each retries."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.openstack_errors import CASES, KINDS, ErrorCase, load_zenops_openstack
from zenops.cloud.errors import (
    CloudAuthError,
    CloudError,
    CloudNotFoundError,
    CloudTransientError,
    QuotaExceededError,
    classify,
    retrying,
)
from zenops.errors import ExitCode

module_utils = load_zenops_openstack()

# the CLI's error of each kind, and the exit code the operator sees
CLI_ERRORS: dict[str, tuple[type[CloudError], int]] = {
    "quota": (QuotaExceededError, ExitCode.QUOTA),
    "auth": (CloudAuthError, ExitCode.CLOUD),
    "not_found": (CloudNotFoundError, ExitCode.USAGE),
    "transient": (CloudTransientError, ExitCode.CLOUD),
    "error": (CloudError, ExitCode.CLOUD),
}

ROWS = [pytest.param(c, id=c.id) for c in CASES]


def test_the_table_covers_every_kind_on_both_sides():
    assert sorted(CLI_ERRORS) == sorted(KINDS)
    assert {c.module for c in CASES} == set(KINDS)
    assert {c.cli for c in CASES} == set(KINDS)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("row", ROWS)
def test_module_utils_error_kind(row: ErrorCase):
    assert module_utils.error_kind(row.make()) == row.module


@pytest.mark.parametrize("row", ROWS)
def test_cli_classify(row: ErrorCase):
    err = classify(row.make(), "flex")
    assert isinstance(err, CloudError)
    assert err.kind == row.cli
    cls, code = CLI_ERRORS[row.cli]
    assert type(err) is cls
    assert err.exit_code == code
    assert "flex" in err.message  # the message names the cloud


def attempts(call_with_retries: Callable[[Callable[[], None]], object], row: ErrorCase) -> int:
    """How many times ``call_with_retries(fn)`` calls an ``fn`` that always raises the row's error."""
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise row.make()

    with pytest.raises(type(row.make())):
        call_with_retries(failing)
    return len(calls)


@pytest.mark.parametrize("row", ROWS)
def test_module_utils_retries_what_the_table_says(row: ErrorCase, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(module_utils.time, "sleep", lambda _s: None)
    module = module_utils.ZenopsOpenStackModule.__new__(module_utils.ZenopsOpenStackModule)  # no AnsibleModule
    module.params = {"api_retries": 3}
    assert attempts(module.call, row) == (3 if row.retried else 1)


@pytest.mark.parametrize("row", ROWS)
def test_cli_retries_what_the_table_says(row: ErrorCase):
    assert attempts(lambda fn: retrying(fn, attempts=3, sleep=lambda _s: None), row) == (3 if row.retried else 1)
