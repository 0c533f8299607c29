"""Commands and scripts sent together, whatever the Redis topology.

On one Redis a :class:`Batch` is one pipeline: a round trip for everything, run in the order
queued. On a cluster scripts cannot be pipelined across slots, so the batch runs in stages:
each run of plain commands as one pipeline, each run of scripts concurrently, stage after
stage, so whatever was queued before something has been applied before it there too (the
"index first" rule of a write depends on it). Either way :meth:`Batch.execute` answers in
the order things were queued, so no caller branches on "is this a cluster".

Scripts go in a pipeline as EVALSHA. Baton loads its scripts at startup; one the server lost
since (a restart, SCRIPT FLUSH) did not run, so it is loaded and run on its own after the
rest of its pipeline (redis-py's own answer, asking SCRIPT EXISTS before every pipeline that
holds a script, costs a round trip each time). Baton's batches only rely on plain commands
running *before* a script, which that keeps. A transaction loads its scripts first: a re-run
would not be part of its MULTI.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

ScriptCall = tuple[AsyncScript, list[Any], list[Any]]


class Batch:
    """Plain commands go on :attr:`pipe`; scripts through :meth:`script`."""

    def __init__(self, redis: Redis, *, transaction: bool = False) -> None:
        """With ``transaction`` (one Redis only), everything runs in one MULTI/EXEC."""
        self.redis = redis
        self.transaction = transaction
        self.cluster = isinstance(redis, RedisCluster)
        # One stage on a single Redis; on a cluster, pipelines and script runs in turn.
        self.stages: list[Pipeline | list[ScriptCall]] = []
        # The scripts of the pipeline, by their position in it.
        self.piped: dict[int, ScriptCall] = {}

    @property
    def pipe(self) -> Pipeline:
        """The pipeline plain commands are queued on now."""
        if not self.stages or isinstance(self.stages[-1], list):
            self.stages.append(self.redis.pipeline(transaction=self.transaction))
        stage = self.stages[-1]
        assert not isinstance(stage, list)
        return stage

    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
        if not self.cluster:
            pipe = self.pipe
            self.piped[len(pipe)] = (script, keys, args)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        elif self.stages and isinstance(self.stages[-1], list):
            self.stages[-1].append((script, keys, args))
        else:
            self.stages.append([(script, keys, args)])

    def __len__(self) -> int:
        return sum(len(stage) for stage in self.stages)

    async def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Every reply, in the order the commands and scripts were queued; without
        ``raise_on_error``, a failed command's error is its reply."""
        replies: list[Any] = []
        for stage in self.stages:
            if isinstance(stage, list):
                replies += await asyncio.gather(
                    *(script(keys=keys, args=args) for script, keys, args in stage),
                    return_exceptions=not raise_on_error,
                )
            elif len(stage):
                replies += await self._run_pipeline(stage, raise_on_error)
        return replies

    async def _run_pipeline(self, pipe: Pipeline, raise_on_error: bool) -> list[Any]:
        if self.transaction:
            for script, _, _ in self.piped.values():
                await self.redis.script_load(script.script)  # (idempotent)
            return await pipe.execute(raise_on_error=raise_on_error)
        replies = await pipe.execute(raise_on_error=False)
        for index, (script, keys, args) in self.piped.items():
            if isinstance(replies[index], NoScriptError):
                try:
                    replies[index] = await script(keys=keys, args=args)  # loads it, runs it
                except RedisError as error:
                    replies[index] = error
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if raise_on_error and errors:
            raise errors[0]
        return replies
