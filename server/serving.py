"""How Baton's HTTP apps are served: one uvicorn configuration for ``baton serve`` and for
the baselines ``make bench`` compares it with (same event loop, same HTTP parser)."""

from __future__ import annotations

import os
from typing import Any

import uvicorn

# Dashboard streams never end by themselves: give them this long to close on shutdown.
GRACEFUL_SHUTDOWN_SECONDS = 3


def serve(app: Any, *, host: str, port: int, workers: int = 1, factory: bool = False) -> None:
    """Serve ``app`` (an ASGI app, or with ``workers`` > 1 an import string) until stopped.
    uvloop and httptools are used when installed (they are Baton dependencies on Linux and
    macOS); with ``workers`` > 1, that many processes share the port."""
    uvicorn.run(
        app,
        host=host,
        port=port,
        workers=workers,
        factory=factory,
        loop="auto",
        http="auto",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


def serve_workers(app_factory: str, *, host: str, port: int, workers: int) -> None:
    """``workers`` processes, each building its app with ``app_factory`` (an import string)
    from the environment, which carries the host and port the parent was given."""
    os.environ["BATON_HOST"], os.environ["BATON_PORT"] = host, str(port)
    serve(app_factory, host=host, port=port, workers=workers, factory=True)
