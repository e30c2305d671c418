"""The vLLM middleware that requires the API key on every path but /health (roles/vllm_server/files/zenops_auth.py),
driven as vLLM drives it: an ASGI app wrapped by the class, called with HTTP and WebSocket scopes. The fleet e2e
(tests/e2e/test_rollout_fleet.py) calls every route of a real server the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, load_file_module

auth = load_file_module("zenops_auth", REPO / "roles/vllm_server/files/zenops_auth.py")

KEY = "s3cret-key-0123456789"


class Inner:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls.append(scope.get("path") or scope["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def call(app: Any, path: str, *, method: str = "POST", header: bytes | None = None, kind: str = "http") -> list[Any]:
    sent: list[Any] = []
    headers = [(b"host", b"x")] + ([(b"Authorization", header)] if header is not None else [])
    scope = {"type": kind, "path": path, "method": method, "headers": headers}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    asyncio.run(app(scope, receive, send))
    return sent


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Inner]:
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    monkeypatch.setenv(auth.KEY_FILE_ENV, str(key_file))
    inner = Inner()
    return auth.RequireKey(inner), inner


@pytest.mark.parametrize(
    "path", ["/invocations", "/tokenize", "/metrics", "/version", "/openapi.json", "/v1/completions", "/docs", "/"]
)
def test_every_path_but_health_needs_the_key(app, path):
    mw, inner = app
    for method in ("GET", "POST", "OPTIONS"):
        sent = call(mw, path, method=method)
        assert sent[0]["status"] == 401, (path, method)
        assert (b"www-authenticate", b"Bearer") in sent[0]["headers"]
    assert call(mw, path, header=f"Bearer {KEY}".encode())[0]["status"] == 200
    assert inner.calls == [path]  # only the request with the key reached vLLM


@pytest.mark.parametrize(
    "header", [b"", b"Bearer", b"Bearer ", b"Bearer wrong", f"Basic {KEY}".encode(), f"Bearer {KEY}x".encode(),
               KEY.encode()],
)  # fmt: skip
def test_a_wrong_or_malformed_key_is_refused(app, header):
    mw, inner = app
    assert call(mw, "/v1/models", method="GET", header=header)[0]["status"] == 401
    assert inner.calls == []


def test_the_scheme_is_case_insensitive_as_in_rfc_6750(app):
    mw, _ = app
    assert call(mw, "/v1/models", header=f"bearer {KEY}".encode())[0]["status"] == 200


def test_health_answers_without_the_key_for_get_and_head_only(app):
    mw, inner = app
    assert call(mw, "/health", method="GET")[0]["status"] == 200
    assert call(mw, "/health", method="HEAD")[0]["status"] == 200
    assert call(mw, "/health", method="POST")[0]["status"] == 401
    assert call(mw, "/health/", method="GET")[0]["status"] == 401
    assert inner.calls == ["/health", "/health"]


def test_a_websocket_without_the_key_is_closed(app):
    mw, inner = app
    assert call(mw, "/v1/realtime", kind="websocket") == [{"type": "websocket.close", "code": 1008}]
    assert inner.calls == []


def test_lifespan_passes(app):
    mw, inner = app
    call(mw, "", kind="lifespan")
    assert inner.calls == ["lifespan"]


def test_no_key_file_stops_the_server_from_starting(tmp_path, monkeypatch):
    monkeypatch.delenv(auth.KEY_FILE_ENV, raising=False)
    with pytest.raises(RuntimeError, match="names no file"):
        auth.RequireKey(Inner())
    with pytest.raises(RuntimeError, match="cannot read"):
        auth.RequireKey(Inner(), key_file=str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(RuntimeError, match="is empty"):
        auth.RequireKey(Inner(), key_file=str(tmp_path / "empty"))
