"""Commands and scripts sent together, whatever the Redis topology.

On one Redis a :class:`Batch` is one pipeline: a round trip for everything, run in the order
queued. On a cluster scripts cannot be pipelined across slots, so the batch runs in stages:
each run of plain commands as one pipeline, each run of scripts concurrently, stage after
stage, so whatever was queued before something has been applied before it there too (the
"index first" rule of a write depends on it). Either way :meth:`Batch.execute` answers in
the order things were queued, so no caller branches on "is this a cluster".

One exception to the order: a script the server no longer has cached (after a restart or
SCRIPT FLUSH) is loaded and run after the rest of its pipeline (``ScriptPipeline``). Baton's
batches only rely on plain commands running *before* a script, which that keeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript
from redis.exceptions import DataError

from baton.server.connection import is_cluster_client, queue_script

ScriptCall = tuple[AsyncScript, list[Any], list[Any]]
AS_IS = frozenset({str, bytes})


def _wire(value: Any) -> str | bytes:
    """A command argument as redis-py sends it: text and bytes as they are, numbers as their
    ``repr``; anything else (None, bool) is refused, as redis-py refuses it."""
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    raise DataError(f"Invalid input of type: {type(value).__name__!r}")


class Batch:
    """Plain commands go on :attr:`pipe`; scripts through :meth:`script`."""

    def __init__(self, redis: Redis, *, transaction: bool = False) -> None:
        """With ``transaction`` (one Redis only), everything runs in one MULTI/EXEC."""
        self.redis = redis
        self.transaction = transaction
        self.cluster = is_cluster_client(redis)
        # One stage on a single Redis; on a cluster, pipelines and script runs in turn.
        self.stages: list[Pipeline | list[ScriptCall]] = []

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
            queue_script(self.pipe, script, keys, args)
        elif self.stages and isinstance(self.stages[-1], list):
            self.stages[-1].append((script, keys, args))
        else:
            self.stages.append([(script, keys, args)])

    def packed_for_script(self, names: dict[Any, str]) -> bytes:
        """This batch, unsent, as the list ``follow_ups.lua`` runs inside another script (one
        Redis only): plain commands as they are, scripts by the name ``names`` gives their
        sha."""
        commands: list[list[Any]] = []
        for stage in self.stages:
            assert not isinstance(stage, list), "one Redis only: a cluster stages its scripts"
            for args, _ in stage.command_stack:
                if args[0] == "EVALSHA":
                    args = (names[args[1]], *args[2:])
                # (str and bytes, most arguments, go as they are without a call each)
                commands.append([arg if type(arg) in AS_IS else _wire(arg) for arg in args])
        # Lua's cmsgpack knows msgpack's raw strings, not its bin type: bytes go as raw.
        packed: bytes = msgpack.packb(commands, use_bin_type=False)
        return packed

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
                replies += await stage.execute(raise_on_error=raise_on_error)
        return replies
