"""Batches run in the order they were queued, on one Redis and on a cluster alike."""

from __future__ import annotations

import pytest
from redis.exceptions import ResponseError

from baton.server.stores.backend import Backend

pytestmark = pytest.mark.anyio


async def test_a_batch_applies_commands_and_scripts_in_queue_order(backend: Backend) -> None:
    """A script sees what plain commands queued before it wrote, and commands queued after a
    script see what it did; replies come back in queue order. (On a cluster scripts run in
    their own stage: "index first" in a write depends on this order.)"""
    lock = "bench:{batch-test}:lock"
    await backend.scripts.load(backend.redis)  # as at start-up (see PipelineBatch)
    batch = backend.topology.batch(backend.redis)
    batch.pipe.set(lock, "mine")
    batch.script(backend.scripts.release_lock, [lock], ["mine"])  # deletes it if still "mine"
    batch.pipe.get(lock)
    batch.script(backend.scripts.release_lock, [lock], ["mine"])  # nothing left to delete
    assert len(batch) == 4
    assert await batch.execute() == [True, 1, None, 0]


async def test_a_script_redis_had_to_load_again_keeps_its_error_in_place(
    backend: Backend,
) -> None:
    """A script missing from Redis' cache is loaded and run after its pipeline; if it then
    fails, its error is its reply like any other's (``raise_on_error=False``), and raised
    otherwise."""
    failing = backend.redis.register_script("return redis.error_reply('refused here')")
    for raise_on_error in (False, True):
        await backend.redis.script_flush()
        batch = backend.topology.batch(backend.redis)
        batch.pipe.set("batch:before", "x")
        batch.script(failing, [], [])
        if raise_on_error:
            with pytest.raises(ResponseError, match="refused here"):
                await batch.execute()
        else:
            before, refused = await batch.execute(raise_on_error=False)
            assert before is True
            assert isinstance(refused, ResponseError)
