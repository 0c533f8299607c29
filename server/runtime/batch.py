"""Commands and scripts sent together: :class:`PipelineBatch` on one Redis, :class:`StagedBatch`
on a cluster (the topology picks, ``baton.server.stores.topology``).

Either way a caller queues plain commands on :attr:`Batch.pipe` and scripts with
:meth:`Batch.script`, and :meth:`Batch.execute` answers in the order things were queued,
with whatever was queued before something applied before it (the "index first" rule of a
write depends on it).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from baton.server.runtime.connection import queue_script

ScriptCall = tuple[AsyncScript, list[Any], list[Any]]


class Batch(ABC):
    """Plain commands go on :attr:`pipe`; scripts through :meth:`script`."""

    @property
    @abstractmethod
    def pipe(self) -> Pipeline:
        """The pipeline plain commands are queued on now."""

    @abstractmethod
    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
        """Queue one call of ``script``."""

    @abstractmethod
    def __len__(self) -> int:
        """How many commands and scripts are queued."""

    @abstractmethod
    async def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        """Every reply, in the order the commands and scripts were queued; without
        ``raise_on_error``, a failed command's error is its reply."""


class PipelineBatch(Batch):
    """One Redis: everything in one pipeline (or MULTI/EXEC), one round trip, run in the
    order queued. A script the server lost since startup is loaded and run after the rest of
    its pipeline (``connection.ScriptPipeline``); Baton's batches only rely on plain commands
    running *before* a script, which that keeps."""

    def __init__(self, redis: Redis, *, transaction: bool = False) -> None:
        """With ``transaction``, everything runs in one MULTI/EXEC."""
        self._pipe = redis.pipeline(transaction=transaction)

    @property
    def pipe(self) -> Pipeline:
        return self._pipe

    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
        queue_script(self._pipe, script, keys, args)

    def __len__(self) -> int:
        return len(self._pipe)

    async def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        if not len(self._pipe):
            return []
        return await self._pipe.execute(raise_on_error=raise_on_error)


class StagedBatch(Batch):
    """A cluster: scripts cannot be pipelined across slots, so the batch runs in stages,
    each run of plain commands as one pipeline, each run of scripts concurrently, stage
    after stage."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.stages: list[Pipeline | list[ScriptCall]] = []

    @property
    def pipe(self) -> Pipeline:
        if not self.stages or isinstance(self.stages[-1], list):
            self.stages.append(self.redis.pipeline(transaction=False))
        stage = self.stages[-1]
        assert not isinstance(stage, list)
        return stage

    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
        if self.stages and isinstance(self.stages[-1], list):
            self.stages[-1].append((script, keys, args))
        else:
            self.stages.append([(script, keys, args)])

    def __len__(self) -> int:
        return sum(len(stage) for stage in self.stages)

    async def execute(self, *, raise_on_error: bool = True) -> list[Any]:
        replies: list[Any] = []
        for stage in self.stages:
            if isinstance(stage, list):
                replies += await asyncio.gather(
                    *(script(keys=keys, args=args) for script, keys, args in stage),
                    return_exceptions=not raise_on_error,
                )
            elif len(stage):
                replies += await stage.execute(raise_on_error=raise_on_error)
        return replies
