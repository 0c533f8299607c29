"""Writes on the embedded server wait for its append-only file, sharing the questions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from baton.server.backend import open_backend
from baton.server.embedded import EmbeddedServer
from baton.server.settings import Settings

pytestmark = pytest.mark.anyio


def info_calls(url: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get("cmdstat_info", {}).get("calls", 0))


async def test_writes_finishing_together_share_questions(tmp_path: Path) -> None:
    """Fifty writes finishing together all pass the barrier, asking Redis far fewer than
    fifty times, and the barrier is idle afterwards; over a Redis that is not this data
    dir's embedded server no write waits (its durability is its own configuration)."""
    server = EmbeddedServer(tmp_path / "data")
    url = server.ensure_running()
    try:
        settings = Settings(data_dir=tmp_path / "data", checkpoint_seconds=None)
        async with open_backend(settings, dispatch=False) as backend:
            barrier = backend.barrier
            assert barrier is not None
            records = backend.namespace("default").records

            async def write(n: int) -> None:
                await records.remember(f"durable/{n}", n, agent="scout")
                await barrier.passed()

            before = info_calls(url)
            await asyncio.gather(*(write(n) for n in range(50)))
            asked = info_calls(url) - before
            assert 1 <= asked < 25, asked
            assert (barrier.asked, barrier.next) == (None, None)
        elsewhere = Settings(redis_url=url, data_dir=tmp_path / "other")
        async with open_backend(elsewhere, dispatch=False) as backend:
            assert backend.barrier is None
    finally:
        server.stop()
