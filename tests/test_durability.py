"""Writes on the embedded server wait for its append-only file, sharing the questions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from baton.server.runtime.embedded import EmbeddedServer
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend

pytestmark = pytest.mark.anyio


def info_calls(url: str) -> int:
    """The INFO commands Redis ran before this one."""
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get("cmdstat_info", {}).get("calls", 0))


async def write(backend: Backend, n: int) -> None:
    """A write, and its wait at the barrier, as a write operation makes them."""
    await backend.namespace("default").records.remember(f"durable/{n}", n, agent="scout")
    assert backend.barrier is not None
    await backend.barrier.passed()


async def test_writes_finishing_together_share_questions(tmp_path: Path) -> None:
    """Fifty writes finishing together all pass the barrier, asking Redis far fewer than
    fifty times, and the barrier is idle afterwards; over a Redis that syncs its file before
    it answers (appendfsync always) no write waits."""
    server = EmbeddedServer(tmp_path / "data")
    url = server.ensure_running()
    try:
        settings = Settings(data_dir=tmp_path / "data", checkpoint_seconds=None)
        for policy, most in (("everysec", 24), ("always", 0)):
            redis.Redis.from_url(url).config_set("appendfsync", policy)
            async with open_backend(settings, dispatch=False) as backend:
                barrier = backend.barrier
                assert barrier is not None
                before = info_calls(url)
                await asyncio.gather(*(write(backend, n) for n in range(50)))
                asked = info_calls(url) - before - 1  # the first count is one of them
                assert asked <= most and (asked > 0) == (policy == "everysec"), (policy, asked)
                assert (barrier.asked, barrier.next) == (None, None)
    finally:
        server.stop()


async def test_a_cancelled_question_leaves_the_barrier_working(tmp_path: Path) -> None:
    """Writers cancelled while they wait (a client gone, the loop stopping) do not leave
    the barrier stuck: the next write passes."""
    server = EmbeddedServer(tmp_path / "data")
    server.ensure_running()
    try:
        settings = Settings(data_dir=tmp_path / "data", checkpoint_seconds=None)
        async with open_backend(settings, dispatch=False) as backend:
            barrier = backend.barrier
            assert barrier is not None
            await barrier.passed()  # the policy asked
            waiting = [asyncio.ensure_future(barrier.passed()) for _ in range(10)]
            await asyncio.sleep(0)
            assert barrier.asked is not None and barrier.next is not None
            for task in waiting:
                task.cancel()
            for asked in (barrier.asked, barrier.next):
                if asked is not None:
                    asked.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            await asyncio.wait_for(barrier.passed(), 5)
    finally:
        server.stop()
