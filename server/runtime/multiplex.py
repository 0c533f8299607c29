"""One connection to Redis that every request of a process shares, its writes batched.

Redis answers the commands of a connection in the order it received them, so any number of
callers can share one connection: each caller's commands are queued, everything queued is
written in one go once per turn of the event loop, and the replies are handed back in order
(what ioredis calls auto-pipelining). A round trip through a pooled connection costs a write,
a read and a wakeup for every caller on both sides, about 70 µs of the API's CPU at 32
concurrent callers on this project's 2-core machine; on the shared connection it is about 6.

Commands that hold a connection (BLPOP, XREAD BLOCK, …) or change its state (MULTI, WATCH,
SELECT, SUBSCRIBE, …) must not go here: ``connection.BatonRedis`` sends those through its pool.

Kept by the speed rule (docs/benchmarks.md): it reads and writes the streams of a connection
redis-py made, which is redis-py's private state. ``make bench-ab`` against b1b9ce7, the
same build with redis-py's own ``BlockingConnectionPool`` instead and with this (and
``connection.BatonRedis``): remember 0.65 -> 0.80 and recall 0.50 -> 0.74 of b1b9ce7's
throughput at 32 connections; resume's p50 at one connection 4.0 -> 1.65 x b1b9ce7's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import hiredis
from redis import exceptions
from redis._parsers.base import BaseParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import ConnectionPool
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError, InvalidResponse, RedisError

READ_SIZE = 65536


@dataclass(slots=True)
class Exchange:
    """One caller's commands in flight: ``count`` replies are due, in order, by ``deadline``
    (the event loop's clock)."""

    answered: asyncio.Future[list[Any]]
    count: int
    deadline: float
    replies: list[Any] = field(default_factory=list)


class SharedConnection:
    """A connection made (and authenticated, and its database selected) exactly like the
    pool's own, then driven by one reader task. Losing it fails every exchange in flight
    with redis-py's ``ConnectionError`` (a reply may have been lost: nothing is sent again);
    the next exchange connects anew, every caller waiting on that one attempt."""

    def __init__(self, pool: ConnectionPool, timeout: float) -> None:
        self.pool = pool
        self.timeout = timeout
        self.connection: AbstractConnection | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.reader_task: asyncio.Task[None] | None = None
        self.outgoing: list[bytes] = []
        self.waiting: deque[Exchange] = deque()
        self.flush_scheduled = False
        self.watchdog: asyncio.TimerHandle | None = None

    async def exchange(self, packed: bytes, count: int) -> list[Any]:
        """The replies to the ``count`` commands in ``packed``, a failed command's error in
        its place, within ``timeout`` seconds (else redis-py's ``TimeoutError``; the
        connection is given up, since a late reply could not be matched, and what else was
        in flight on it fails too)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout  # connecting included
        if self.connection is None or self.loop is not loop:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._connected(loop)
            except TimeoutError:
                raise exceptions.TimeoutError("Timeout talking to Redis") from None
            if self.connection is None:  # lost between the handshake and this caller's turn
                raise ConnectionError("Connection closed by server.")
        answered: asyncio.Future[list[Any]] = loop.create_future()
        self.waiting.append(Exchange(answered, count, deadline))
        self.outgoing.append(packed)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            loop.call_soon(self._flush)
        if self.watchdog is None:
            self.watchdog = loop.call_at(deadline, self._check_deadline)
        return await answered

    def _check_deadline(self) -> None:
        """One timer per connection instead of one per exchange: replies come in order, so
        the oldest exchange in flight is the first one late."""
        self.watchdog = None
        if not self.waiting or self.loop is None:
            return
        oldest = self.waiting[0].deadline
        if self.loop.time() >= oldest:
            self._give_up(exceptions.TimeoutError("Timeout talking to Redis"))
        else:
            self.watchdog = self.loop.call_at(oldest, self._check_deadline)

    async def aclose(self) -> None:
        if self.connecting is not None:
            self.connecting.cancel()
        self._give_up(ConnectionError("Connection closed by the client."))  # closes it

    async def _connected(self, loop: asyncio.AbstractEventLoop) -> None:
        """Connected, by an attempt every caller waits on (a caller that gives up leaves it
        running for the others). A caller that came while another caller's attempt was under
        way makes one of its own if that one fails (Redis may be back by now); nothing was
        sent, so trying again is safe."""
        if self.loop is not loop:  # made in another event loop (a test's, a CLI call's)
            self._give_up(ConnectionError("The event loop changed."))
            self.loop, self.connecting = loop, None
        if self.connecting is not None:
            with contextlib.suppress(RedisError):
                await asyncio.shield(self.connecting)
            if self.connection is not None:
                return
        if self.connecting is None:
            self.connecting = loop.create_task(self._connect(loop))
            self.connecting.add_done_callback(self._attempt_over)
        await asyncio.shield(self.connecting)

    def _attempt_over(self, attempt: asyncio.Task[None]) -> None:
        if self.connecting is attempt:
            self.connecting = None
        if not attempt.cancelled():
            attempt.exception()  # retrieved: a failure nobody awaited is not "never retrieved"

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> None:
        connection = self.pool.make_connection()  # type: ignore[no-untyped-call]
        try:
            await connection.connect()  # redis-py's connect and handshake, bounded
        except BaseException:
            await connection.disconnect(nowait=True)
            raise
        # The streams redis-py opened, read and written here instead of by its parser.
        stream, writer = connection._reader, connection._writer
        assert stream is not None and writer is not None
        self.connection, self.writer = connection, writer
        self.reader_task = loop.create_task(self._read(connection, stream))

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.writer is not None and self.outgoing:
            try:
                self.writer.write(b"".join(self.outgoing))
            except (OSError, RuntimeError) as error:  # closed under us: fail, never hang
                self._give_up(ConnectionError(f"Error writing to Redis: {error}"))
        self.outgoing.clear()

    async def _read(self, connection: AbstractConnection, stream: asyncio.StreamReader) -> None:
        replies = hiredis.Reader(
            protocolError=InvalidResponse,
            replyError=BaseParser.parse_error,
            notEnoughData=NOT_ENOUGH_DATA,
        )
        try:
            while True:
                data = await stream.read(READ_SIZE)
                if not data:
                    raise ConnectionError("Connection closed by server.")
                replies.feed(data)
                while (reply := replies.gets()) is not NOT_ENOUGH_DATA:
                    if not isinstance(reply, hiredis.PushNotification):  # out of band (RESP3)
                        self._hand_over(reply)
        except Exception as error:  # the connection is unusable, whatever broke it
            if self.connection is connection:
                if not isinstance(error, RedisError):
                    error = ConnectionError(f"Error reading from Redis: {error}")
                self._give_up(error)

    def _hand_over(self, reply: Any) -> None:
        if not self.waiting:
            raise InvalidResponse("Redis sent a reply nobody asked for")
        exchange = self.waiting[0]
        exchange.replies.append(reply)
        if len(exchange.replies) == exchange.count:
            self.waiting.popleft()
            if not exchange.answered.done():  # its caller may have given up (cancelled)
                exchange.answered.set_result(exchange.replies)

    def _give_up(self, error: RedisError) -> None:
        """Drop the connection; every exchange in flight fails with ``error``."""
        connection, self.connection, self.writer = self.connection, None, None
        waiting, self.waiting = self.waiting, deque()
        self.outgoing.clear()
        self.flush_scheduled = False  # a flush still due finds nothing to write
        reader_task, self.reader_task = self.reader_task, None
        watchdog, self.watchdog = self.watchdog, None
        with contextlib.suppress(RuntimeError):  # the loop they ran in may be closed
            if watchdog is not None:
                watchdog.cancel()
            for exchange in waiting:
                if not exchange.answered.done():  # each its own error (and traceback)
                    exchange.answered.set_exception(type(error)(*error.args))
            if reader_task is not None and reader_task is not asyncio.current_task():
                reader_task.cancel()
            if connection is not None:
                connection._close()  # type: ignore[no-untyped-call]  # redis-py's: closes, forgets the stream
