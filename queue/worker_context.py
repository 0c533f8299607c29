"""What a worker process keeps between jobs: settings, one event loop, one Redis client.

RQ jobs are plain functions; the store is asyncio. Each worker process runs every job's
store calls on one long-lived event loop, so connections are reused instead of being
opened per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from functools import cache
from typing import Any, TypeVar

from baton.agents.client import BatonClient
from baton.server.runtime.settings import Settings
from baton.server.runtime.signing import load_signing_key
from baton.server.stores.backend import Backend, connect, open_backend
from baton.server.stores.handoffs import HandoffStore

T = TypeVar("T")


class WorkerContext:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clients: dict[tuple[str, str], BatonClient] = {}
        self.held: tuple[str, str, str] | None = None  # the packet a handler is running for
        self.runner = asyncio.Runner()
        self.backend: Backend = self.run(self._connect())
        self.signing_key = load_signing_key(settings)

    async def _connect(self) -> Backend:
        return connect(self.settings)  # on the runner's loop, where its clients will be used

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coroutine)

    def client(self, agent: str, namespace: str) -> BatonClient:
        """The client handed to handlers, kept for the worker's life: building an HTTP client
        (TLS context, connection pool) per packet would dominate a short handler."""
        key = (agent, namespace)
        if key not in self.clients:
            self.clients[key] = BatonClient(
                self.settings.base_url, agent=agent, namespace=namespace, token=self.settings.token
            )
        return self.clients[key]

    def handoffs(self, namespace: str) -> HandoffStore:
        return self.backend.namespace(namespace).handoffs

    @contextlib.contextmanager
    def holding(self, namespace: str, agent: str, packet_id: str, job: str) -> Iterator[None]:
        """While the block (a handler) runs: keep renewing the lease of the packet ``job``
        holds, so a handler longer than the lease is never handed to anyone else (a thread
        of its own, with its own event loop and Redis client: the worker's loop is blocked
        by the handler), and remember the packet for :meth:`give_back`."""
        self.held = (namespace, agent, packet_id)
        stop = threading.Event()
        lease = self.settings.handoffs.lease_seconds

        def beat() -> None:
            async def renew_until_stopped() -> None:
                async with open_backend(self.settings, dispatch=False) as backend:
                    handoffs = backend.namespace(namespace).handoffs
                    while await handoffs.renew_lease(agent, packet_id, job, lease):
                        if await asyncio.to_thread(stop.wait, lease / 3):
                            return

            if not stop.wait(lease / 3):  # a short handler ends before a renewal is due
                asyncio.run(renew_until_stopped())

        thread = threading.Thread(target=beat, name=f"baton-lease-{packet_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self.held = None
            stop.set()
            thread.join(timeout=10)

    def give_back(self, reason: str) -> str | None:
        """Put the packet a running handler holds back in its queue (the worker is stopping
        before the handler ends); the packet id, or None when nothing is held. Runs on a
        thread of its own, with its own client."""
        held = self.held
        if held is None:
            return None
        namespace, agent, packet_id = held

        async def release() -> None:
            async with open_backend(self.settings) as backend:
                await backend.namespace(namespace).handoffs.release(packet_id, agent, reason=reason)

        asyncio.run(release())
        return packet_id


@cache
def worker_context() -> WorkerContext:
    """The process's context, created on first use from ``BATON_*`` settings."""
    return WorkerContext(Settings.from_env())
