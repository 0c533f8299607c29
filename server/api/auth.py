"""Token authentication for every surface: REST, MCP over HTTP, the dashboard and the
agentmemory-compatible routes.

With no token defined the server is in open mode (``baton serve`` allows that only on
loopback). Once a token exists every request needs ``Authorization: Bearer <token>`` (or
the dashboard's ``baton_token`` cookie). An agent token acts only as its agent: the
``X-Baton-Agent`` header is replaced by the token's agent before any handler sees it, so
writes are attributed to it, and it can resume and settle only its own packets. Admin tokens
may name any agent and may requeue dead letters.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any
from urllib.parse import parse_qs

from baton.server.api.deps import AGENT_HEADER, NAMESPACE_HEADER
from baton.server.errors import Forbidden
from baton.server.tokens import Token, TokenStore
from litestar.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = ("/healthz", "/readyz", "/agentmemory/livez", "/login", "/static/", "/schema")
COOKIE = "baton_token"
TOKENS_CHECK_SECONDS = 2.0


def identity_of(scope: Scope) -> Token | None:
    """The token that authenticated this request; None in open mode."""
    state: dict[str, Any] = scope.get("state", {})  # type: ignore[assignment]
    return state.get("identity")


def require_admin(scope: Scope) -> None:
    """Operator actions (requeue) need an admin token once tokens exist."""
    identity = identity_of(scope)
    if identity is not None and not identity.admin:
        raise Forbidden(f"{identity.agent}'s token is not an admin token", agent=identity.agent)


def _secret(scope: Scope) -> str | None:
    headers = dict(scope["headers"])
    value = headers.get(b"authorization", b"").decode("latin-1")
    if value.lower().startswith("bearer "):
        return value[7:].strip()
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, cookie = part.strip().partition("=")
        if name == COOKIE and cookie:
            return cookie
    return None


async def _refuse(send: Send, scope: Scope, status: int, detail: str) -> None:
    agentmemory = scope["path"].startswith("/agentmemory/")
    if agentmemory:
        body = b'{"error":"unauthorized"}' if status == 401 else (
            b'{"error":"forbidden"}')  # fmt: skip
        media = b"application/json"
    else:
        title = "Unauthorized" if status == 401 else "Forbidden"
        body = json.dumps({"status": status, "title": title, "detail": detail}).encode()
        media = b"application/problem+json"
    headers = [(b"content-type", media), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="baton"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def token_auth(app: ASGIApp) -> ASGIApp:
    """ASGI middleware resolving the caller's token (see the module docstring)."""
    cache: dict[str, float | bool] = {"checked": 0.0, "enabled": False}

    async def tokens_enabled(tokens: TokenStore) -> bool:
        now = time.monotonic()
        if now - float(cache["checked"]) > TOKENS_CHECK_SECONDS:
            cache["enabled"], cache["checked"] = await tokens.any(), now
        return bool(cache["enabled"])

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        state = scope["app"].state
        tokens = TokenStore(state.backend.redis)
        path = scope["path"]
        always_open = any(
            path == p or path.startswith(p if p.endswith("/") else p + "/") for p in OPEN_PATHS
        )
        if always_open or not await tokens_enabled(tokens):
            await app(scope, receive, send)
            return
        secret = _secret(scope)
        legacy = state.agentmemory_secret
        if path.startswith("/agentmemory/") and legacy and secret and hmac.compare_digest(
            secret.encode(), legacy.encode()
        ):
            await app(scope, receive, send)  # agentmemory's own secret, as agentmemory allows
            return
        token = None if secret is None else await tokens.check(secret)
        if token is None:
            await _refuse(send, scope, 401, "a valid token is required: Authorization: Bearer <token>")
            return
        headers = [(k, v) for k, v in scope["headers"] if k != AGENT_HEADER.encode()]
        namespace = dict(scope["headers"]).get(NAMESPACE_HEADER.encode(), b"").decode() or (
            parse_qs(scope.get("query_string", b"").decode()).get("namespace", [""])[0]
        )
        if namespace and not token.allows(namespace):
            await _refuse(send, scope, 403, f"this token may not use namespace {namespace}")
            return
        given = dict(scope["headers"]).get(AGENT_HEADER.encode())
        agent = given if token.admin and given else token.agent.encode()
        scope["headers"] = [*headers, (AGENT_HEADER.encode(), agent)]
        scope.setdefault("state", {})["identity"] = token  # type: ignore[typeddict-item]
        await app(scope, receive, send)

    return middleware
