"""The notifier: every ``baton serve`` process reads each namespace's new activity events
as one consumer of the ``notices`` group and turns the writes among them into notices
(``baton.server.notices``), and webhook jobs for agents that have a webhook.

A notice is derived from the write, never from the memory of the process that took it: the
write's event is written with the version on one Redis, and the consumer group is Redis
Streams' own piece for sharing work: each event goes to one process, and an event a process
took but never acknowledged, because it died, is taken over by another after
:data:`RECLAIM_MS`.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import structlog
from redis.exceptions import RedisError, ResponseError

from baton.server import codec
from baton.server.activity import parse_event
from baton.server.backend import Backend
from baton.server.keys import NAMESPACES

log = structlog.get_logger("baton.notices")

GROUP = "notices"  # the consumer group on each namespace's events stream
RECLAIM_MS = 5_000  # an event taken and not acknowledged this long is taken over
READ_COUNT = 200  # events a process takes from one namespace per round
POLL_SECONDS = 0.25  # between rounds that found nothing


class Notifier:
    """Reads every namespace's new events as one consumer of its ``notices`` group and
    turns them into notices, and webhook jobs for agents that have a webhook."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.redis = backend.redis
        self.consumer = f"{int(time.time())}-{secrets.token_hex(4)}"  # this process

    async def round(self) -> int:
        """One pass over every namespace; how many events it handled."""
        handled = 0
        for raw in await self.redis.smembers(NAMESPACES):
            handled += await self._namespace(codec.text(raw))
        return handled

    async def _namespace(self, namespace: str) -> int:
        ns = self.backend.namespace(namespace)
        stream = ns.keys.events
        try:
            _, reclaimed, *_ = await self.redis.xautoclaim(
                stream, GROUP, self.consumer, RECLAIM_MS, "0-0", count=READ_COUNT
            )
            fresh = await self.redis.xreadgroup(
                GROUP, self.consumer, {stream: ">"}, count=READ_COUNT
            )
        except ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            await self._create_group(stream)
            return await self._namespace(namespace)
        entries = [e for e in codec.entries(reclaimed) if e[1]]  # trimmed ones come back empty
        entries += codec.read_entries(fresh)
        if not entries:
            return 0
        made = await ns.notices.derive([parse_event(eid, fields) for eid, fields in entries])
        dispatcher = self.backend.dispatcher
        if dispatcher is not None:
            for agent, notice in made:
                if await ns.notices.target(agent) is not None:
                    await dispatcher.enqueue_webhook(namespace, agent, notice.id)
        await self.redis.xack(stream, GROUP, *(eid for eid, _ in entries))
        return len(entries)

    async def _create_group(self, stream: str) -> None:
        """The group, reading from the oldest event kept: none written before a notifier
        first saw the namespace is missed (a pin that moved then is still stale)."""
        try:
            await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):  # another process made it meanwhile
                raise

    async def run_forever(self) -> None:
        """Rounds until cancelled; a round that fails is logged and the next one tried."""
        while True:
            try:
                handled = await self.round()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as error:
                log.warning("notices round failed; trying again", error=str(error))
                handled = 0
            if not handled:
                await asyncio.sleep(POLL_SECONDS)
