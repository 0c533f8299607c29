"""Commands and scripts sent together, whatever the Redis topology.

On one Redis a :class:`Batch` is one pipeline: a round trip for everything. On a cluster
scripts cannot be pipelined across slots, so they run concurrently beside one pipeline of the
plain commands. Either way :meth:`Batch.execute` answers in the order things were queued, so
no caller branches on "is this a cluster".
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript

from baton.server.connection import queue_script


class Batch:
    """Plain commands go on :attr:`pipe`; scripts through :meth:`script`."""

    def __init__(self, redis: Redis, *, transaction: bool = False) -> None:
        """With ``transaction`` (one Redis only), everything runs in one MULTI/EXEC."""
        self.pipe: Pipeline = redis.pipeline(transaction=transaction)
        self.cluster = isinstance(redis, RedisCluster)
        # On a cluster: each script call with the number of plain commands queued before it.
        self.deferred: list[tuple[int, AsyncScript, list[Any], list[Any]]] = []

    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
        if self.cluster:
            self.deferred.append((len(self.pipe), script, keys, args))
        else:
            queue_script(self.pipe, script, keys, args)

    def __len__(self) -> int:
        return len(self.pipe) + len(self.deferred)

    async def execute(self) -> list[Any]:
        """Every reply, in the order the commands and scripts were queued."""
        if not self.deferred:
            return list(await self.pipe.execute()) if len(self.pipe) else []
        commands = self.pipe.execute() if len(self.pipe) else _nothing()
        *scripts, plain = await asyncio.gather(
            *(script(keys=keys, args=args) for _, script, keys, args in self.deferred), commands
        )
        replies: list[Any] = []
        taken = 0
        for (before, *_), reply in zip(self.deferred, scripts, strict=True):
            replies += plain[taken:before]
            replies.append(reply)
            taken = before
        replies += plain[taken:]
        return replies


async def _nothing() -> list[Any]:
    return []
