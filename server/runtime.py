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
    data_url, rq_url = redis_url(settings), queue_url(settings)
    client = async_redis(data_url)
    queue_client = client if rq_url == data_url else async_redis(rq_url)
    queue_connection = sync_redis(rq_url)
    try:
        yield Backend(
            client,
            settings.limits,
            RQDispatcher(queue_connection, settings.handoffs, queue_client),
            settings.handoffs,
        )
    finally:
        await client.aclose()
        if queue_client is not client:
            await queue_client.aclose()
        queue_connection.close()
