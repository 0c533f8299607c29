"""How Baton's HTTP apps are served: one uvicorn configuration for ``baton serve`` and for
the baselines ``make bench`` compares it with (same event loop, same HTTP parser)."""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence

import uvicorn
from litestar import Litestar

# Dashboard streams never end by themselves: give them this long to close on shutdown.
GRACEFUL_SHUTDOWN_SECONDS = 3
# How many more allocations than frees start a collection of the young generation.
# CPython's 700 is less than what 32 requests in flight hold at once: under load it
# collected every few dozen requests, each collection walking what those requests held
# (docs/benchmarks.md, "Ninth round").
YOUNG_GENERATION_THRESHOLD = 10_000


def settle_heap() -> None:
    """Set up the cyclic garbage collector for a long-running server that has started:
    what start-up made (modules, routes, connections, scripts) is frozen, so that no
    collection walks it again, and the young generation is collected after 10,000 more
    allocations than frees rather than 700. Cycles made afterwards are still collected."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD)


def settled(app: Litestar) -> Litestar:
    """``app``, set to settle its heap (:func:`settle_heap`) once its start-up is over."""
    app.on_startup.append(settle_heap)
    return app


def serve(
    app: Litestar | str,
    *,
    host: str,
    port: int,
    workers: int = 1,
    factory: bool = False,
    trusted_proxies: Sequence[str] = (),
) -> None:
    """Serve ``app`` (a Litestar app, or with ``workers`` > 1 an import string) until stopped.
    uvloop and httptools are used when installed (they are Baton dependencies on Linux and
    macOS); with ``workers`` > 1, that many processes share the port. An app object settles
    its heap once started (:func:`settled`); each worker's factory settles its own
    (``create_worker_app``). ``X-Forwarded-For`` is believed only from ``trusted_proxies``
    (uvicorn would believe it from any loopback client)."""
    if isinstance(app, Litestar):
        settled(app)
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
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=list(trusted_proxies) or None,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


def serve_workers(
    app_factory: str, *, host: str, port: int, workers: int, trusted_proxies: Sequence[str] = ()
) -> None:
    """``workers`` processes, each building its app with ``app_factory`` (an import string)
    from the environment, which carries the host and port the parent was given."""
    os.environ["BATON_HOST"], os.environ["BATON_PORT"] = host, str(port)
    serve(
        app_factory,
        host=host,
        port=port,
        workers=workers,
        factory=True,
        trusted_proxies=trusted_proxies,
    )
