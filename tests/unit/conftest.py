"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Provisioning, serving and playbook runs, recorded instead of done."""
    called: list[str] = []

    def record(name: str):  # type: ignore[no-untyped-def]
        def _called(*_a: object, **_k: object) -> None:
            called.append(name)
            raise AssertionError(f"{name} ran")

        return _called

    monkeypatch.setattr("zenops.deployment.provision.up_cloud", record("up_cloud"))
    monkeypatch.setattr("zenops.serve.serve_inventory", record("serve_inventory"))
    monkeypatch.setattr("zenops.runner.run_playbook", record("run_playbook"))
    return called
