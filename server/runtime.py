"""Opening Baton's connections for a process: the store backend and the RQ dispatcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from baton.queue.dispatch import RQDispatcher
from baton.server.connection import async_redis, queue_url, redis_url, sync_redis
from baton.server.settings import Settings
from baton.server.store import Backend


@asynccontextmanager
async def open_backend(settings: Settings) -> AsyncIterator[Backend]:
    """Connect to the data Redis (starting the embedded one if needed) and to the queue
    Redis; close both on exit."""
    client = async_redis(redis_url(settings))
    queue_connection = sync_redis(queue_url(settings))
    try:
        yield Backend(
            client,
            settings.limits,
            RQDispatcher(queue_connection, settings.handoffs),
            settings.handoffs,
        )
    finally:
        await client.aclose()
        queue_connection.close()
