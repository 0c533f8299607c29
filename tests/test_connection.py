"""How Baton talks to Redis: commands packed in C must be the bytes redis-py would send,
concurrent callers share one connection and each gets its own reply, and the connection pool
(for blocking commands and transactions) waits for a free connection rather than failing."""

from __future__ import annotations

import asyncio

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError, DataError, ResponseError, TimeoutError

from baton.server.runtime import connection
from baton.server.runtime.connection import (
    SharedScript,
    TCPConnection,
    WaitingConnectionPool,
    async_redis,
    packed,
)
from baton.server.runtime.multiplex import SharedConnection

ARGUMENT = st.one_of(
    st.text(),
    st.binary(),
    st.integers(),
    st.floats(allow_nan=False),
    st.floats(),
)


@given(
    name=st.sampled_from(["SET", "EVALSHA", "SCRIPT LOAD", b"HSET", b"CONFIG GET"]),
    args=st.lists(ARGUMENT, max_size=12),
)
def test_hiredis_packing_sends_the_same_bytes_as_redis_py(
    name: str | bytes, args: list[object]
) -> None:
    """Every str, bytes, int and float argument (command names of two words included) is
    packed exactly as redis-py's own packer does."""
    ours = b"".join(TCPConnection().pack_command(name, *args))
    theirs = b"".join(Connection().pack_command(name, *args))
    assert ours == theirs


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}])
def test_values_redis_cannot_hold_are_refused(bad: object) -> None:
    """None, booleans and containers raise DataError, as with redis-py's packer."""
    with pytest.raises(DataError):
        TCPConnection().pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", bad)


@pytest.mark.anyio
async def test_the_pool_waits_for_a_free_connection_instead_of_failing(redis_url: str) -> None:
    """With every connection busy, a command waits for one to come back (up to the pool's
    timeout) rather than failing: twelve blocking calls over four connections all finish."""
    pool = WaitingConnectionPool.from_url(redis_url, max_connections=4, timeout=5)
    client = Redis(connection_pool=pool)
    try:
        replies = await asyncio.gather(*(client.blpop(["nothing-here"], 0.2) for _ in range(12)))
        assert replies == [None] * 12
        assert len(pool._in_use_connections) == 0  # every connection went back
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_the_pool_refuses_clearly_after_its_timeout(redis_url: str) -> None:
    """A command that cannot get a connection within the timeout fails with redis-py's
    ConnectionError (answered 503 by the API), not by hanging."""
    pool = WaitingConnectionPool.from_url(redis_url, max_connections=1, timeout=0.2)
    client = Redis(connection_pool=pool)
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
    reply), every one in flight on the shared connection with them; the connection is given
    up (a late reply could not be matched), a new one cannot time out more slowly, and the
    client works again once Redis does."""
    monkeypatch.setattr(connection, "IO_TIMEOUT", 0.2)
    client = async_redis(redis_url)
    try:
        await client.set("timer-bound", "before")
        given_up = client.shared.connection
        sync_redis.execute_command("CLIENT", "PAUSE", 5000, "ALL")
        try:
            replies = await asyncio.gather(
                client.get("timer-bound"), client.exists("timer-bound"), return_exceptions=True
            )
            assert [type(reply) for reply in replies] == [TimeoutError, TimeoutError]
            assert client.shared.connection is None
            pipe = client.pipeline(transaction=False)
            pipe.get("timer-bound")
            # (a new connection: its handshake is what Redis leaves unanswered)
            with pytest.raises((TimeoutError, ConnectionError), match="Timeout"):
                await pipe.execute()
        finally:
            sync_redis.execute_command("CLIENT", "UNPAUSE")
        assert await client.get("timer-bound") == b"before"
        assert client.shared.connection not in (None, given_up)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_each_command_gets_its_whole_timeout(
    redis_url: str, sync_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One timer serves the connection, yet a command sent after an earlier one still gets
    its whole timeout: it fails no sooner than ``IO_TIMEOUT`` after it was sent."""
    monkeypatch.setattr(connection, "IO_TIMEOUT", 0.4)
    client = async_redis(redis_url)
    loop = asyncio.get_running_loop()
    try:
        await client.set("timer-bound", "before")  # arms the timer for its own deadline
        await asyncio.sleep(0.2)
        sync_redis.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        try:
            sent = loop.time()
            with pytest.raises(TimeoutError):
                await client.get("timer-bound")
            assert loop.time() - sent >= 0.4
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


def connections_received(sync_redis: redis.Redis) -> int:
    return int(sync_redis.info("stats")["total_connections_received"])


@pytest.mark.anyio
async def test_a_script_answers_as_through_redis_py_and_survives_a_script_flush(
    redis_url: str, sync_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registered script runs over the shared connection and answers as redis-py's own
    call does, errors included; a script the server lost (SCRIPT FLUSH) is loaded and run
    again with all its arguments, even given as a generator; another client named for one
    call is the one that runs it."""
    client = async_redis(redis_url)
    other = Redis.from_url(redis_url)
    try:
        echo = client.register_script("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}")
        assert isinstance(echo, SharedScript)
        assert await echo(keys=["k"], args=["text", 41]) == [b"k", b"text", 42]
        failing = client.register_script("return redis.error_reply('refused here')")
        with pytest.raises(ResponseError, match="refused here"):
            await failing()
        sync_redis.script_flush()
        arguments = (value for value in ["again", 1])
        assert await echo(keys=["k"], args=arguments) == [b"k", b"again", 2]
        ran_by_other: list[tuple[object, ...]] = []
        evalsha = other.evalsha

        async def counted(*args: object) -> object:
            ran_by_other.append(args)
            return await evalsha(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(other, "evalsha", counted)
        assert await echo(keys=["k"], args=["other", 2], client=other) == [b"k", b"other", 3]
        assert len(ran_by_other) == 1
    finally:
        await client.aclose()
        await other.aclose()


@pytest.mark.anyio
async def test_a_connection_lost_before_a_callers_turn_fails_only_that_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared connection lost between its handshake and the first caller's command fails
    that command with ConnectionError (it was never sent); the next caller connects anew
    and gets its own reply, not one meant for the first."""
    client = async_redis(redis_url)
    connect = SharedConnection._connect

    async def connect_then_lose(self: SharedConnection, loop: asyncio.AbstractEventLoop) -> None:
        await connect(self, loop)
        self._give_up(ConnectionError("Connection closed by server."))

    try:
        await client.set("lost:first", "one")
        await client.set("lost:second", "two")
        await client.shared.aclose()
        monkeypatch.setattr(SharedConnection, "_connect", connect_then_lose)
        with pytest.raises(ConnectionError):
            await client.get("lost:first")
        monkeypatch.setattr(SharedConnection, "_connect", connect)
        assert await client.get("lost:second") == b"two"
        assert not client.shared.waiting
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_concurrent_callers_share_one_connection_and_get_their_own_replies(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """Two hundred concurrent writes and reads (commands, scripts and pipelines) take one
    connection to Redis between them, and every caller gets the reply to its own command."""
    client = async_redis(redis_url)
    script = client.register_script("return redis.call('GET', KEYS[1])")
    before = connections_received(sync_redis)
    try:
        await asyncio.gather(*(client.set(f"shared:{n}", n) for n in range(200)))

        async def read(n: int) -> list[object]:
            pipe = client.pipeline(transaction=False)
            pipe.get(f"shared:{n}")
            pipe.exists(f"shared:{n}", "nothing-here")
            return [await client.get(f"shared:{n}"), await script(keys=[f"shared:{n}"])] + (
                await pipe.execute()
            )

        replies = await asyncio.gather(*(read(n) for n in range(200)))
        assert replies == [[str(n).encode()] * 3 + [1] for n in range(200)]
        assert connections_received(sync_redis) - before == 1
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_caller_that_gives_up_does_not_shift_the_replies_of_the_others(
    redis_url: str,
) -> None:
    """Callers cancelled while their commands are in flight leave the others' replies in
    place: each remaining caller still reads its own key."""
    client = async_redis(redis_url)
    try:
        await asyncio.gather(*(client.set(f"shared:{n}", n) for n in range(100)))
        reads = [asyncio.create_task(client.get(f"shared:{n}")) for n in range(100)]
        await asyncio.sleep(0)
        for cancelled in reads[::2]:
            cancelled.cancel()
        assert await asyncio.gather(*reads[1::2]) == [str(n).encode() for n in range(1, 100, 2)]
        assert await client.get("shared:0") == b"0"
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_blocking_command_does_not_stall_the_shared_connection(redis_url: str) -> None:
    """BLPOP waits on a pooled connection of its own: other commands are answered while it
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
async def test_losing_the_shared_connection_fails_what_is_in_flight_and_reconnects(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """When Redis drops the shared connection, a command in flight fails with redis-py's
    ConnectionError (never another caller's reply), and the next command connects anew."""
    client = async_redis(redis_url)
    try:
        await client.set("shared:kept", "yes")
        # A reply held back by Redis: a BLPOP sent on the shared connection on purpose.
        in_flight = asyncio.create_task(
            client.shared.exchange(packed(("BLPOP", "nothing-here", 5)), 1)
        )
        await asyncio.sleep(0.05)
        sync_redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        with pytest.raises(ConnectionError):
            await in_flight
        assert await client.get("shared:kept") == b"yes"
    finally:
        await client.aclose()


def test_a_client_used_from_a_new_event_loop_connects_anew(redis_url: str) -> None:
    """A client whose shared connection was made in an event loop that has since closed (a
    CLI call's, a test's) connects again in the next one instead of hanging or failing."""
    client = async_redis(redis_url)
    asyncio.run(client.set("loops", "first"))
    assert asyncio.run(client.get("loops")) == b"first"
    asyncio.run(client.aclose())


@pytest.mark.anyio
async def test_messages_redis_pushes_on_its_own_are_not_taken_for_replies(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """Out-of-band messages Redis pushes on the shared connection (RESP3: here invalidations of
    client-side caching, in production a managed Redis' maintenance notices) are skipped:
    every caller still gets the reply to its own command."""
    client = async_redis(redis_url)
    try:
        await client.set("pushed:a", "1")
        (tracking,) = await client.shared.exchange(packed(("CLIENT", "TRACKING", "ON")), 1)
        assert tracking == b"OK"
        for round_ in range(3):
            assert await client.get("pushed:a") == str(round_ + 1).encode()  # now tracked
            sync_redis.incr("pushed:a")  # Redis pushes an invalidation to the shared connection
            await asyncio.sleep(0.02)
            assert await client.exists("pushed:a", "pushed:b") == 1
    finally:
        await client.aclose()
