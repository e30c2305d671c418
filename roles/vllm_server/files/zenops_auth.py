"""zenops's API-key guard for vLLM's OpenAI server, loaded with ``--middleware zenops_auth.RequireKey``.

vLLM's own ``--api-key`` guards only the paths under /v1 (and a few other prefixes): /invocations, /tokenize,
/metrics, /version, /openapi.json and the rest answer anyone who reaches the port, and the key itself has to be on the
command line or in the container's environment (both visible: ``ps``, ``docker inspect``). This middleware instead
requires ``Authorization: Bearer <key>`` on every HTTP and WebSocket request, whatever its path or method, except
``GET``/``HEAD /health`` (the health checks of zenops and of the gateway). The key is read once, at start, from the
file named by ZENOPS_API_KEY_FILE (mounted read-only, mode 0400): a missing or empty file stops the server from
starting instead of serving without a key.

Plain ASGI, standard library only: vLLM adds a class given to --middleware with ``app.add_middleware(cls)`` (no
arguments), the last one added runs first, so this check runs before any of vLLM's routes or middlewares.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_FILE_ENV = "ZENOPS_API_KEY_FILE"
OPEN_PATHS = frozenset({"/health"})
OPEN_METHODS = frozenset({"GET", "HEAD"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def read_key(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            key = f.read().strip()
    except OSError as e:
        raise RuntimeError(f"zenops_auth: cannot read the API key file {path}: {e.strerror}") from None
    if not key:
        raise RuntimeError(f"zenops_auth: the API key file {path} is empty")
    return key


class RequireKey:
    def __init__(self, app: ASGIApp, key_file: str | None = None) -> None:
        self.app = app
        path = key_file or os.environ.get(KEY_FILE_ENV, "")
        if not path:
            raise RuntimeError(f"zenops_auth: {KEY_FILE_ENV} names no file: the server will not start without a key")
        self._digest = hashlib.sha256(read_key(path)).digest()

    def allowed(self, scope: Scope) -> bool:
        path = scope.get("path", "")
        if scope["type"] == "http" and path in OPEN_PATHS and scope.get("method") in OPEN_METHODS:
            return True
        header = b""
        for name, value in scope.get("headers") or ():
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(hashlib.sha256(token.strip()).digest(), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation; the server answers 403
            return
        body = json.dumps({"error": "Unauthorized: send the deployment's API key as a bearer token"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
