"""A write acknowledged only once Redis has written it to its append-only file.

With ``appendfsync everysec`` Redis answers a write after trying to write it to its
append-only file in the same turn of its event loop, whether or not that worked. On a full
disk the write fails, the answer goes out all the same, and the write waits in Redis's
memory only until the disk has room: a kill of Redis then loses what it acknowledged
(docs/operations.md, Durability). So after a write operation Baton waits at
:class:`AppendOnlyBarrier` before it answers, and a write the file may not hold is answered
507, not acknowledged.

The barrier asks Redis, after the write was answered, whether its last write of the file
worked (``INFO persistence``: ``aof_last_write_status``). Redis retries a failed write of
the file at every turn, all of it, so "ok" means the file holds everything answered before
the question. Callers share questions as a database shares a log flush (group commit): one
in flight, and whoever comes meanwhile waits for the next, sent once it is answered.
``WAITAOF`` would also cover a write Redis postpones behind a slow background fsync, but it
waits for that fsync: 0.19 x the throughput of writes on this project's machine (the note
of the durability issue).

Only where needed: a Redis (not a cluster) with an append-only file and ``everysec``, asked
once. With ``always`` Redis stops rather than answer a write it could not write; with
``no``, or no append-only file, nothing is promised.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from baton.server.model.errors import BatonError
from baton.server.runtime.connection import packed

if TYPE_CHECKING:
    from baton.server.runtime.connection import BatonRedis

QUESTION = packed(("INFO", "persistence"))


class NotDurable(BatonError):
    """A write Redis applied but could not write to its append-only file."""

    status_code = 507
    title = "Insufficient storage"
    kind = "refused"


class AppendOnlyBarrier:
    """Where a write operation waits until its writes are in Redis's append-only file."""

    def __init__(self, redis: BatonRedis) -> None:
        self.redis = redis
        self.asked: asyncio.Future[None] | None = None  # the question in flight
        self.next: asyncio.Future[None] | None = None  # the one sent once it is answered
        self.needed: bool | None = None  # whether Redis answers before its file has a write

    async def passed(self) -> None:
        """Return once everything written before the call is in the file; ``NotDurable``
        when Redis could not write it there."""
        if self.needed is None:
            self.needed = await self._answers_first()
        if not self.needed:
            return
        if self.asked is None or self.asked.done():  # nothing in flight: ask now
            self.asked, self.next = asyncio.ensure_future(self._ask()), None
            await asyncio.shield(self.asked)
            return
        if self.next is None or self.next.done():  # the one in flight may precede this write
            self.next = asyncio.ensure_future(self._ask_after(self.asked))
        await asyncio.shield(self.next)

    async def _answers_first(self) -> bool:
        """Whether this Redis answers writes before its file has them: an append-only file
        with ``everysec`` (a Redis that hides its configuration is taken at its word)."""
        try:
            config = await self.redis.config_get("append*")
        except ResponseError:
            return False
        return config.get("appendonly") == "yes" and config.get("appendfsync") == "everysec"

    async def _ask_after(self, asked: asyncio.Future[None]) -> None:
        await asyncio.wait({asked})  # however it ended: its callers have its answer
        if self.next is asyncio.current_task():
            self.asked, self.next = self.next, None
        await self._ask()

    async def _ask(self) -> None:
        try:
            (persistence,) = await self.redis.shared.exchange(QUESTION, 1)
        finally:
            if self.asked is asyncio.current_task() and self.next is None:
                self.asked = None
        if isinstance(persistence, Exception):
            raise persistence
        if b"aof_last_write_status:ok" not in persistence:
            raise NotDurable(
                "disk full or failing: Redis applied the write but could not write it to its "
                "append-only file, so it is not acknowledged (it is kept only if the disk "
                "recovers before Redis stops); free space, then read before writing again"
            )
