"""Concurrent writers from separate processes never lose or duplicate a version."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter

import pytest

from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import Limits
from baton.server.stores.backend import Backend

WRITER = """
import asyncio, sys
from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import Limits
from baton.server.stores.backend import Backend

async def main(url, name, count):
    client = async_redis(url)
    store = Backend(client, Limits()).namespace("default").records
    for i in range(count):
        await store.remember("race/counter", {"writer": name, "i": i}, agent=name)
    await client.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@pytest.mark.slow
def test_eight_processes_writing_one_ref_get_versions_1_to_2000(redis_url: str) -> None:
    """8 processes x 250 remember calls on one ref: versions exactly 1..2000, every write
    present once, and the chain verifies."""
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, redis_url, f"writer-{n}", "250"])
        for n in range(8)
    ]
    assert [writer.wait(timeout=300) for writer in writers] == [0] * 8

    async def check() -> None:
        client = async_redis(redis_url)
        store = Backend(client, Limits()).namespace("default").records
        history = await store.history("race/counter")
        stats = await store.ns.verifier.stats(verify=True)
        await client.aclose()

        assert [entry.version for entry in history.versions] == list(range(1, 2001))
        per_writer = Counter(entry.value["writer"] for entry in history.versions)
        assert per_writer == {f"writer-{n}": 250 for n in range(8)}
        written = {(entry.value["writer"], entry.value["i"]) for entry in history.versions}
        assert len(written) == 2000
        assert stats.broken == []

    asyncio.run(check())
