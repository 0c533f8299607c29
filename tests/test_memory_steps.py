"""A memory operation is one step in Redis: cut the connection after any number of its
commands, and the store holds all of it or none of it, search agreeing with the records."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import redis

from baton.server.model.errors import BatonError
from baton.server.model.memory_models import ObserveInput
from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import Limits
from baton.server.stores.backend import Backend
from baton.server.stores.memories import Memory, MemoryStore
from tests.conftest import as_agent

pytestmark = pytest.mark.anyio

ADMIN = as_agent("admin", admin=True)


@pytest.fixture
async def memories(redis_url: str) -> AsyncIterator[MemoryStore]:
    """Memories on one Redis (the embedded server): where a memory operation is one step.
    (On a cluster each record has a slot of its own; docs/architecture.md says how a change
    goes there.)"""
    client = async_redis(redis_url)
    yield Backend(client, Limits()).namespace("default").memories
    await client.aclose()


MAX_COMMANDS = 60  # more than any of these operations sends


class Cut(Exception):
    """The proxy cut the connection (the operation was interrupted)."""


class CuttingProxy:
    """A TCP proxy in front of Redis that forwards the client's first ``allowed`` commands
    (counted over every connection, in Redis's own protocol), then closes every connection
    and refuses new ones: the process lost Redis between two of its commands."""

    def __init__(self, upstream: str, allowed: int) -> None:
        self.upstream = upstream.removeprefix("unix://")
        self.allowed = allowed
        self.sent = 0
        self.cut = False
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        if self.cut:
            to_client.close()
            return
        server, to_server = await asyncio.open_unix_connection(self.upstream)
        self.writers += [to_client, to_server]
        back = asyncio.create_task(self._pipe(server, to_client))
        pending = b""
        try:
            while not self.cut and (data := await client.read(65536)):
                pending += data
                while not self.cut and (end := _command_end(pending)):
                    to_server.write(pending[:end])
                    pending = pending[end:]
                    self.sent += 1
                    if self.sent >= self.allowed:
                        await to_server.drain()
                        self.close_all()
                await to_server.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.close_all() if self.cut else None
            back.cancel()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if self.cut:
                    return
                writer.write(data)
                await writer.drain()

    def close_all(self) -> None:
        self.cut = True
        for writer in self.writers:
            writer.close()


def _command_end(buffer: bytes) -> int:
    """Where the first whole command of ``buffer`` ends (0: not whole yet). Commands are
    RESP arrays of bulk strings, as redis-py sends them."""
    line = buffer.find(b"\r\n")
    if line < 0:
        return 0
    at = line + 2
    for _ in range(int(buffer[1:line])):
        line = buffer.find(b"\r\n", at)
        if line < 0:
            return 0
        at = line + 2 + int(buffer[at + 1 : line]) + 2
        if at > len(buffer):
            return 0
    return at


@asynccontextmanager
async def cut_after(redis_url: str, allowed: int) -> AsyncIterator[MemoryStore]:
    """A memory store whose connection to Redis is cut after ``allowed`` commands."""
    proxy = CuttingProxy(redis_url, allowed)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = async_redis(f"redis://127.0.0.1:{port}")
    try:
        yield Backend(client, Limits()).namespace("default").memories
    finally:
        proxy.close_all()
        server.close()
        with contextlib.suppress(Exception):
            await client.aclose()


async def state(memories: MemoryStore) -> dict[str, object]:
    """What a reader sees: each current memory (latest or not, its successor, what it
    supersedes, its content), what search finds for the test's words, and the audit log's
    actions."""
    page = await memories.records.list_records(scope="memory", limit=500)
    ids = [record.ref.removeprefix("memory/") for record in page.records]
    found = {
        memory.id: (
            memory.is_latest,
            memory.superseded_by,
            tuple(memory.supersedes),
            memory.content,
        )
        for memory in (await memories.get_many(ids)).values()
    }
    hits = await memories.index.search("invoice retries", limit=50, kinds=("memory",))
    backoff = await memories.index.search("backoff", limit=50, kinds=("memory",))
    audit = [entry.action for entry in await memories.ns.audit.newest(100)]
    return {
        "memories": found,
        "found": sorted(hit.doc for hit in hits),
        "backoff": sorted(hit.doc for hit in backoff),
        "audit": audit,
    }


def consistent(seen: dict[str, object]) -> None:
    """Search agrees with the records: it finds every latest memory and no superseded one."""
    memories = seen["memories"]
    assert isinstance(memories, dict)
    latest = sorted(
        f"m:{memory_id}" for memory_id, (is_latest, *_) in memories.items() if is_latest
    )
    assert seen["found"] == latest
    for memory_id, (is_latest, successor, *_) in memories.items():
        if not is_latest:
            assert successor in memories, f"{memory_id} superseded by a memory that is not there"


async def interrupted(
    redis_url: str,
    memories: MemoryStore,
    operation: Callable[[MemoryStore], Awaitable[object]],
) -> tuple[dict[str, object], dict[str, object]]:
    """Run ``operation`` cut after 1, 2, 3… commands until it runs whole: after every cut the
    store is as before or as after, consistent either way. The states before and after."""
    before = await state(memories)
    consistent(before)
    for allowed in range(1, MAX_COMMANDS):
        async with cut_after(redis_url, allowed) as cut:
            try:
                await operation(cut)
            except (BatonError, redis.RedisError, OSError):
                now = await state(memories)
                consistent(now)
                if now == before:
                    continue
                after = now  # the last command ran, its reply lost: the whole of it is in
                break
            after = await state(memories)
            break
    else:
        pytest.fail(f"the operation did not finish within {MAX_COMMANDS} commands")
    consistent(after)
    assert after != before
    return before, after


async def test_a_save_that_supersedes_is_whole_or_not_at_all(
    redis_url: str, memories: MemoryStore
) -> None:
    """A save superseding a near-duplicate, cut after any number of its commands: the old
    memory is latest and found, and nothing else is there; or the new one is latest and
    found, the old one superseded by it and out of search, the cascade's audit entry
    written. Never two latest, never a successor missing, never a memory search misses."""
    await memories.save("invoice retries use exponential backoff", concepts=["billing", "retries"])
    await memories.save("invoice retries notify billing", concepts=["billing", "retries"])
    before, after = await interrupted(
        redis_url,
        memories,
        lambda cut: cut.save(
            "invoice retries use exponential backoff!", concepts=["billing", "retries"]
        ),
    )
    assert len(after["memories"]) == len(before["memories"]) + 1  # type: ignore[arg-type]
    assert after["audit"] == ["cascade"]


async def test_an_update_is_whole_or_not_at_all(redis_url: str, memories: MemoryStore) -> None:
    """An update cut after any number of its commands: the memory and its search document
    are both the old ones or both the new, and its audit entry is there only with the new."""
    saved = await memories.save("invoice retries use a fixed delay")
    assert saved.memory is not None
    memory_id = saved.memory.id

    async def update(cut: MemoryStore) -> Memory:
        return await cut.update(
            memory_id, caller=ADMIN, content="invoice retries use exponential backoff"
        )

    before, after = await interrupted(redis_url, memories, update)
    assert before["backoff"] == []
    assert after["backoff"] == [f"m:{memory_id}"]
    assert after["audit"] == ["update"]


async def test_a_consolidation_is_whole_or_not_at_all(
    redis_url: str, memories: MemoryStore
) -> None:
    """A consolidation cut after any number of its commands: each merge is whole (the merged
    memories superseded by the kept one and out of search, its audit entry written) or not
    done at all."""
    await memories.save("invoice retries use exponential backoff")
    other = (await memories.save("the pager rota lives in the wiki")).memory
    assert other is not None
    await memories.update(  # now a near-duplicate (an update does not dedupe)
        other.id, caller=ADMIN, content="invoice retries use exponential backoff!"
    )
    before, after = await interrupted(
        redis_url, memories, lambda cut: cut.consolidate(caller=ADMIN, apply=True)
    )
    latest = [key for key, (is_latest, *_) in after["memories"].items() if is_latest]  # type: ignore[union-attr]
    assert len(latest) == 1
    assert after["audit"][0] == "consolidate"  # type: ignore[index]
    assert before["audit"] == ["update"]


async def test_a_forget_is_whole_or_not_at_all(redis_url: str, memories: MemoryStore) -> None:
    """A memory's forget cut after any number of its commands: the memory is readable and
    found, with no audit entry; or it is gone from reads and search, its expiry dropped, and
    its sealed audit entry written (what lets the next checkpoint excuse it)."""
    saved = await memories.save("invoice retries use exponential backoff", ttl_days=30)
    assert saved.memory is not None
    memory_id = saved.memory.id
    before, after = await interrupted(
        redis_url, memories, lambda cut: cut.forget(caller=ADMIN, memory_id=memory_id)
    )
    assert before["found"] == [f"m:{memory_id}"]
    assert after == {"memories": {}, "found": [], "backoff": [], "audit": ["forget"]}
    assert await memories.redis.zscore(memories.keys.memory_expiry, memory_id) is None


async def test_a_session_forget_is_whole_or_not_at_all(
    redis_url: str, memories: MemoryStore
) -> None:
    """A whole session's forget cut after any number of its commands: its observations are
    all readable and found, with no audit entry; or the session, its observations and their
    search documents are all gone, its audit entry written."""
    sessions = memories.ns.sessions
    for command in ("retry invoice 1", "retry invoice 2"):
        await sessions.observe(
            ObserveInput(
                hook_type="post_tool_use",
                session_id="s1",
                project="app",
                cwd="/app",
                timestamp="2026-11-30T10:00:00Z",
                data={"tool_name": "Bash", "tool_input": {"command": command}},
            ),
            caller=as_agent("claude"),
        )

    async def observed(store: MemoryStore) -> tuple[int, list[str], bool]:
        hits = await store.index.search("invoice", limit=10, kinds=("observation",))
        return (
            await store.redis.llen(store.keys.observations("s1")),
            sorted(hit.doc for hit in hits),
            bool(await store.redis.exists(store.keys.session("s1"))),
        )

    before = await observed(memories)
    assert before[0] == 2 and len(before[1]) == 2 and before[2]
    for allowed in range(1, MAX_COMMANDS):
        async with cut_after(redis_url, allowed) as cut:
            try:
                await cut.forget(caller=ADMIN, session_id="s1")
            except (BatonError, redis.RedisError, OSError):
                now = await observed(memories)
                audit = [entry.action for entry in await memories.ns.audit.newest(10)]
                if now == before:
                    assert audit == []
                    continue
                assert now == (0, [], False) and audit == ["forget"]
                break
            break
    assert await observed(memories) == (0, [], False)
    assert [entry.action for entry in await memories.ns.audit.newest(10)] == ["forget"]
