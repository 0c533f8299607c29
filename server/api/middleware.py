"""ASGI middleware: one structured log line per request."""

from __future__ import annotations

import time

import structlog
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from baton.server.identity import CALLER

log = structlog.get_logger("baton.access")


def request_logging(app: ASGIApp) -> ASGIApp:
    """Log method, path, status, duration and resolved agent of every HTTP request."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, send_and_watch)
        finally:
            caller = scope.get("state", {}).get(CALLER)
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                agent=None if caller is None else caller.agent,
            )

    return middleware
