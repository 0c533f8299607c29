"""How Baton's HTTP apps are served: one uvicorn configuration for ``baton serve`` and for
the baselines ``make bench`` compares it with (same event loop, same HTTP parser)."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psutil
import uvicorn
from litestar import Litestar

# Dashboard streams never end by themselves: give them this long to close on shutdown.
GRACEFUL_SHUTDOWN_SECONDS = 3
# How many more allocations than frees start a collection of the young generation.
# CPython's 700 is less than what 32 requests in flight hold at once: under load it
# collected every few dozen requests, each collection walking what those requests held
# (docs/benchmarks.md, "Ninth round").
YOUNG_GENERATION_THRESHOLD = 10_000


class PortInUse(OSError):
    """The address ``baton serve`` was asked to listen on is taken: the one line to print."""


def check_port(host: str, port: int) -> None:
    """Raise :class:`PortInUse`, naming the process that holds it where it can be seen,
    unless ``host:port`` can be bound now (as uvicorn binds it: ``SO_REUSEADDR``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn picks it
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        raise PortInUse(
            f"cannot listen on {host}:{port}: {error.strerror or error}{_holder(port)}; "
            "stop it or pass --port"
        ) from None


def _holder(port: int) -> str:
    """`` (held by NAME, pid N: COMMAND)`` for the process listening on ``port``, or ``""``."""
    try:
        listening = [
            each.pid
            for each in psutil.net_connections(kind="tcp")
            if each.status == psutil.CONN_LISTEN and each.laddr and each.laddr.port == port
        ]
        if not listening or listening[0] is None:
            return ""
        holder = psutil.Process(listening[0])
        command = " ".join(holder.cmdline())[:120]
        return f" (held by {holder.name()}, pid {holder.pid}: {command})"
    except (psutil.Error, OSError):
        return ""


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
        app, host=host, port=port, workers=workers, factory=factory, **_options(trusted_proxies)
    )


def _options(trusted_proxies: Sequence[str] = ()) -> dict[str, Any]:
    """The uvicorn settings every Baton server runs with."""
    return {
        "loop": "auto",
        "http": "auto",
        "access_log": False,
        "log_config": None,
        "proxy_headers": bool(trusted_proxies),
        "forwarded_allow_ips": list(trusted_proxies) or None,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS,
    }


@contextlib.contextmanager
def served_in_thread(app: Litestar, host: str = "127.0.0.1") -> Iterator[str]:
    """``app`` served in a thread of this process on a free port of ``host``, with the same
    settings as :func:`serve`; yields its base URL once it answers, stops it on exit."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.bind((host, 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **_options()))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="baton-api", daemon=True
    )
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("Baton's API stopped while starting; its log says why")
            time.sleep(0.01)
        yield f"http://{f'[{host}]' if ':' in host else host}:{port}"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()


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
