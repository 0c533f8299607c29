"""What a worker process keeps between jobs: settings, one event loop, one Redis client.

RQ jobs are plain functions; the store is asyncio. Each worker process runs every job's
store calls on one long-lived event loop, so connections are reused instead of being
opened per job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from functools import cache
from typing import Any, TypeVar

from baton.agents.client import BatonClient
from baton.queue.dispatch import RQDispatcher
from baton.server.checkpoints import load_signing_key
from baton.server.connection import async_redis, queue_url, redis_url, sync_redis
from baton.server.handoffs import HandoffStore
from baton.server.settings import Settings
from baton.server.store import Backend

T = TypeVar("T")


class WorkerContext:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clients: dict[tuple[str, str], BatonClient] = {}
        self.runner = asyncio.Runner()
        self.dispatcher = RQDispatcher(sync_redis(queue_url(settings)), settings.handoffs)
        url = redis_url(settings)
        self.backend: Backend = self.run(self._backend(url))
        self.signing_key = load_signing_key(settings.data_dir, settings.signing_key)

    async def _backend(self, url: str) -> Backend:
        return Backend(
            async_redis(url), self.settings.limits, self.dispatcher, self.settings.handoffs
        )

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coroutine)

    def client(self, agent: str, namespace: str) -> BatonClient:
        """The client handed to handlers, kept for the worker's life: building an HTTP client
        (TLS context, connection pool) per packet would dominate a short handler."""
        key = (agent, namespace)
        if key not in self.clients:
            self.clients[key] = BatonClient(self.settings.base_url, agent=agent,
                                            namespace=namespace, token=self.settings.token)  # fmt: skip
        return self.clients[key]

    def handoffs(self, namespace: str) -> HandoffStore:
        return HandoffStore(self.backend.store(namespace))


@cache
def worker_context() -> WorkerContext:
    """The process's context, created on first use from ``BATON_*`` settings."""
    return WorkerContext(Settings.from_env())
