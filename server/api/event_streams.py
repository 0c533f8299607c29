"""Live event streams for the dashboard without a Redis connection per open stream.

One reader task per namespace with open streams blocks on its activity stream (``XREAD BLOCK``)
over a client of its own, and fans each event out to every subscriber's queue. However many
dashboards are open, they hold no connection of the request pool, so requests are never
starved; a caller may hold at most ``BATON_MAX_STREAMS`` streams at once (429 beyond).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

from baton.server.model.errors import TooManyStreams
from baton.server.model.keys import Keys
from baton.server.model.models import Event
from baton.server.stores.activity import follow, stream_end

WAIT_MS = 15_000
QUEUE_SIZE = 256


@dataclass
class _Reader:
    task: asyncio.Task[None]
    subscribers: set[asyncio.Queue[Event]] = field(default_factory=set)


class EventHub:
    """Fans each namespace's activity stream out to its subscribers."""

    def __init__(self, redis: Redis, per_caller: int) -> None:
        self.redis = redis
        self.per_caller = per_caller
        self.readers: dict[str, _Reader] = {}
        self.open: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def subscribe(self, namespace: str, caller: str) -> AsyncIterator[asyncio.Queue[Event]]:
        """A queue of every event of the namespace written from now on, while the context
        lasts. A namespace's first subscriber starts its reader at the stream's end as read
        here, before this returns: an event written the next moment is delivered, however
        late the reader task first runs."""
        if self.open[caller] >= self.per_caller:
            raise TooManyStreams(
                f"{caller} already has {self.per_caller} open streams; close "
                "one first (BATON_MAX_STREAMS)"
            )
        if namespace not in self.readers:
            after = await stream_end(self.redis, Keys(namespace))
            if namespace not in self.readers:  # nobody started one while we read
                self.readers[namespace] = _Reader(
                    asyncio.create_task(
                        self._read(namespace, after), name=f"baton-events-{namespace}"
                    )
                )
        self.open[caller] += 1
        queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        reader = self.readers[namespace]
        reader.subscribers.add(queue)
        try:
            yield queue
        finally:
            reader.subscribers.discard(queue)
            if not reader.subscribers and self.readers.get(namespace) is reader:
                del self.readers[namespace]  # its blocked read would hold a connection for ever
                reader.task.cancel()
            self.open[caller] -= 1
            if not self.open[caller]:
                del self.open[caller]

    async def _read(self, namespace: str, after: str) -> None:
        """Follow the namespace's stream after event ``after`` while it has subscribers (one
        blocked connection per namespace with open dashboards, whatever their number)."""
        reader = self.readers[namespace]
        async for event in follow(self.redis, Keys(namespace), WAIT_MS, after):
            for queue in list(reader.subscribers):
                if not queue.full():  # a stalled reader misses events, never blocks others
                    queue.put_nowait(event)

    async def close(self) -> None:
        for reader in self.readers.values():
            reader.task.cancel()
        await asyncio.gather(*(r.task for r in self.readers.values()), return_exceptions=True)
