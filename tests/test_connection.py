"""How Baton talks to Redis: redis-py's asyncio client with a blocking pool, so callers
beyond the pool's size wait for a free connection rather than failing, a silent Redis fails
a call after the timeout instead of hanging it, and the client recovers from lost
connections and scripts."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.asyncio import BlockingConnectionPool
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from baton.server import connection
from baton.server.connection import async_redis


@pytest.mark.anyio
async def test_the_pool_waits_for_a_free_connection_instead_of_failing(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every connection busy, a command waits for one to come back (up to the pool's
    timeout) rather than failing: twelve blocking calls over four connections all finish."""
    monkeypatch.setattr(connection, "MAX_CONNECTIONS", 4)
    client = async_redis(redis_url)
    try:
        replies = await asyncio.gather(*(client.blpop(["nothing-here"], 0.2) for _ in range(12)))
        assert replies == [None] * 12
        assert isinstance(client.connection_pool, BlockingConnectionPool)
        assert client.connection_pool.max_connections == 4
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_the_pool_refuses_clearly_after_its_timeout(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that cannot get a connection within the timeout fails with redis-py's
    ConnectionError (answered 503 by the API), not by hanging."""
    monkeypatch.setattr(connection, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(connection, "POOL_TIMEOUT", 0.2)
    client = async_redis(redis_url)
    try:
        blocking = asyncio.create_task(client.blpop(["nothing-here"], 1))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionError, match="No connection available"):
            await client.get("anything")
        assert await blocking is None
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_read_redis_never_answers_fails_after_the_timeout(
    redis_url: str, sync_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands Redis does not answer in time fail with redis-py's TimeoutError (never a None
    reply, never a hang), and the client works again once Redis does."""
    monkeypatch.setattr(connection, "IO_TIMEOUT", 0.2)
    client = async_redis(redis_url)
    loop = asyncio.get_running_loop()
    try:
        await client.set("timer-bound", "before")
        sync_redis.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        try:
            sent = loop.time()
            replies = await asyncio.gather(
                client.get("timer-bound"), client.exists("timer-bound"), return_exceptions=True
            )
            assert [type(reply) for reply in replies] == [TimeoutError, TimeoutError]
            assert loop.time() - sent >= 0.2
        finally:
            sync_redis.execute_command("CLIENT", "UNPAUSE")
        assert await client.get("timer-bound") == b"before"
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_pipeline_answers_in_order_with_errors_in_place(redis_url: str) -> None:
    """A plain pipeline answers every command in order, parsed as redis-py parses it, with a
    failing command's error in its place; ``raise_on_error`` raises that error."""
    client = async_redis(redis_url)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.set("pipeline:text", "x")
        pipe.incr("pipeline:text")
        pipe.hset("pipeline:hash", mapping={"a": 1})
        pipe.hgetall("pipeline:hash")
        replies = await pipe.execute(raise_on_error=False)
        assert replies[0] is True
        assert isinstance(replies[1], ResponseError)
        assert replies[2:] == [1, {b"a": b"1"}]
        pipe.incr("pipeline:text")
        with pytest.raises(ResponseError, match="not an integer"):
            await pipe.execute()
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_script_survives_a_script_flush(redis_url: str, sync_redis: redis.Redis) -> None:
    """A registered script answers with its own reply and errors; one the server lost
    (SCRIPT FLUSH, a restart) is loaded and run again with all its arguments."""
    client = async_redis(redis_url)
    try:
        echo = client.register_script("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}")
        assert await echo(keys=["k"], args=["text", 41]) == [b"k", b"text", 42]
        failing = client.register_script("return redis.error_reply('refused here')")
        with pytest.raises(ResponseError, match="refused here"):
            await failing()
        sync_redis.script_flush()
        assert await echo(keys=["k"], args=["again", 1]) == [b"k", b"again", 2]
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_blocking_command_does_not_stall_the_others(redis_url: str) -> None:
    """BLPOP waits on a connection of its own: other commands are answered while it
    blocks."""
    client = async_redis(redis_url)
    try:
        blocking = asyncio.create_task(client.blpop(["nothing-here"], 1))
        await asyncio.sleep(0.05)
        assert await client.get("nothing-here") is None
        assert not blocking.done()
        assert await blocking is None
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_connections_redis_drops_are_made_anew(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """When Redis drops the client's connections (a restart, CLIENT KILL), a command in
    flight fails with redis-py's ConnectionError and the next command connects anew."""
    client = async_redis(redis_url)
    try:
        await client.set("dropped:kept", "yes")
        in_flight = asyncio.create_task(client.blpop(["nothing-here"], 5))
        await asyncio.sleep(0.05)
        sync_redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        with pytest.raises(ConnectionError):
            await in_flight
        assert await client.get("dropped:kept") == b"yes"
    finally:
        await client.aclose()
