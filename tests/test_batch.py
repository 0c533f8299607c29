"""Batches run in the order they were queued, on one Redis and on a cluster alike."""

from __future__ import annotations

import pytest

from baton.server.backend import Backend
from baton.server.batch import Batch

pytestmark = pytest.mark.anyio


async def test_a_batch_applies_commands_and_scripts_in_queue_order(backend: Backend) -> None:
    """A script sees what plain commands queued before it wrote, and commands queued after a
    script see what it did; replies come back in queue order. (On a cluster scripts run in
    their own stage: "index first" in a write depends on this order.)"""
    lock = "bench:{batch-test}:lock"
    await backend.scripts.load(backend.redis)  # as at start-up (see Batch on NOSCRIPT)
    batch = Batch(backend.redis)
    batch.pipe.set(lock, "mine")
    batch.script(backend.scripts.release_lock, [lock], ["mine"])  # deletes it if still "mine"
    batch.pipe.get(lock)
    batch.script(backend.scripts.release_lock, [lock], ["mine"])  # nothing left to delete
    assert len(batch) == 4
    assert await batch.execute() == [True, 1, None, 0]
