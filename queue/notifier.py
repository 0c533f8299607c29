"""The notifier: every ``baton serve`` process reads each namespace's new activity events
as one consumer of the ``notices`` group and turns the writes among them into notices
(``baton.server.stores.notices``), and webhook jobs for agents that have a webhook.

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
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from baton.server.model.keys import NAMESPACES
from baton.server.runtime import codec
from baton.server.runtime.codec import StreamEntry
from baton.server.stores.activity import parse_event
from baton.server.stores.backend import Backend
from baton.server.stores.topology import OneRedis

log = structlog.get_logger("baton.notices")

GROUP = "notices"  # the consumer group on each namespace's events stream
RECLAIM_MS = 5_000  # an event taken and not acknowledged this long is taken over
READ_COUNT = 200  # events a process takes from one namespace per round
POLL_SECONDS = 0.25  # between rounds that found nothing, on a cluster
WAIT_MS = 1_000  # on one Redis: how long a read waits for the next event


class Notifier:
    """Reads every namespace's new events as one consumer of its ``notices`` group and
    turns them into notices, and webhook jobs for agents that have a webhook. Given a
    client of its own (``waiting``), on one Redis a read waits for the next event of any
    namespace (``BLOCK``), so a notice is made as soon as its write lands; otherwise, and on
    a cluster, a round that found nothing is followed by a pause of :data:`POLL_SECONDS`."""

    def __init__(self, backend: Backend, waiting: Redis | None = None) -> None:
        self.backend = backend
        self.redis = backend.redis
        self.waiting = waiting if isinstance(backend.topology, OneRedis) else None
        self.consumer = f"{int(time.time())}-{secrets.token_hex(4)}"  # this process
        self.reclaim_at = 0.0  # when to look for events a dead consumer left next

    async def round(self) -> int:
        """One pass over every namespace: the events other processes took and left (at most
        once every :data:`RECLAIM_MS`), then the new ones; how many it handled."""
        names = sorted(codec.text(raw) for raw in await self.redis.smembers(NAMESPACES))
        taken: dict[str, list[StreamEntry]] = {}
        if time.monotonic() >= self.reclaim_at:
            self.reclaim_at = time.monotonic() + RECLAIM_MS / 1000
            for name in names:
                taken[name] = await self._reclaimed(name)
        for name, entries in (await self._fresh(names)).items():
            taken[name] = [*taken.get(name, []), *entries]
        handled = 0
        for name, entries in taken.items():
            handled += await self._handle(name, entries)
        return handled

    async def _reclaimed(self, name: str) -> list[StreamEntry]:
        """The events of namespace ``name`` that a consumer took and left unacknowledged
        for :data:`RECLAIM_MS` (it died), taken over."""
        stream = self.backend.namespace(name).keys.events
        try:
            _, reclaimed, *_ = await self.redis.xautoclaim(
                stream, GROUP, self.consumer, RECLAIM_MS, "0-0", count=READ_COUNT
            )
        except ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            await self._create_group(stream)
            return []
        return [entry for entry in codec.entries(reclaimed) if entry[1]]  # trimmed: empty

    async def _fresh(self, names: list[str]) -> dict[str, list[StreamEntry]]:
        """The new events of ``names``, by namespace: one read of every stream on one
        Redis; on a cluster one read a namespace (each stream is in a slot of its own). A
        stream without the group gets it (from its oldest event: the next round reads
        them)."""
        streams = {self.backend.namespace(name).keys.events: name for name in names}
        if not streams and self.waiting is not None:  # nothing to wait on yet
            await asyncio.sleep(POLL_SECONDS)
        if isinstance(self.backend.topology, OneRedis):  # every stream on one server
            reads = [list(streams)]
        else:
            reads = [[stream] for stream in streams]
        found: dict[str, list[StreamEntry]] = {}
        for read in reads:
            if not read:
                continue
            try:
                if self.waiting is not None:
                    reply = await self.waiting.xreadgroup(
                        GROUP,
                        self.consumer,
                        dict.fromkeys(read, ">"),
                        count=READ_COUNT,
                        block=WAIT_MS,
                    )
                else:
                    reply = await self.redis.xreadgroup(
                        GROUP, self.consumer, dict.fromkeys(read, ">"), count=READ_COUNT
                    )
            except ResponseError as error:
                if "NOGROUP" not in str(error):
                    raise
                for stream in read:
                    await self._create_group(stream)
                continue
            for key, entries in codec.read_streams(reply):
                found[streams[codec.text(key)]] = entries
        return found

    async def _handle(self, name: str, entries: list[StreamEntry]) -> int:
        """The notices ``entries`` (events of namespace ``name``) make, and their webhook
        jobs; then the events acknowledged."""
        if not entries:
            return 0
        ns = self.backend.namespace(name)
        made = await ns.notices.derive([parse_event(eid, fields) for eid, fields in entries])
        dispatcher = self.backend.dispatcher
        if dispatcher is not None:
            # One look per agent told, not per notice: a burst of writes tells few agents.
            told = {agent for agent, _ in made}
            hooked = {agent for agent in told if await ns.notices.target(agent) is not None}
            for agent, notice in made:
                if agent in hooked:
                    await dispatcher.enqueue_webhook(name, agent, notice.id)
        await self.redis.xack(ns.keys.events, GROUP, *(eid for eid, _ in entries))
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
                await asyncio.sleep(POLL_SECONDS)
                continue
            if not handled and self.waiting is None:
                await asyncio.sleep(POLL_SECONDS)
