"""Where Baton's Redis is: ``BATON_REDIS_URL``, or the embedded server of the data dir.

RQ's connection is ``BATON_QUEUE_URL`` when set (RQ does not run on Redis Cluster), else the
same server.

The API's client (``BatonRedis``) shares one connection among a process's requests
(``multiplex.py``) and packs commands with hiredis, subclassing redis-py's client, pipeline,
pool and connections: kept by the speed rule, for the figures in ``multiplex.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import hiredis
import redis
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.commands.core import AsyncScript
from redis.exceptions import DataError, NoScriptError, RedisError, ResponseError
from redis.retry import Retry
from redis.typing import EncodableT, KeyT, ScriptTextT

from baton.server.runtime.embedded import EmbeddedServer, half_of_memory
from baton.server.runtime.multiplex import SharedConnection
from baton.server.runtime.settings import Settings


def embedded_server(settings: Settings) -> EmbeddedServer:
    maxmemory = settings.maxmemory if settings.maxmemory is not None else half_of_memory()
    return EmbeddedServer(settings.data_dir, settings.appendfsync, maxmemory)


def redis_url(settings: Settings) -> str:
    """The configured URL, or the embedded server's (started if it is not running)."""
    if settings.redis_url:
        return settings.redis_url
    return embedded_server(settings).ensure_running()


def queue_url(settings: Settings) -> str:
    """RQ's Redis: ``BATON_QUEUE_URL``, else the data Redis (which must then not be a
    cluster: RQ does not run on Redis Cluster)."""
    if settings.queue_url:
        return settings.queue_url
    url = redis_url(settings)
    if is_cluster(url):
        raise ValueError(
            "BATON_REDIS_URL is a Redis Cluster, which RQ cannot use: set BATON_QUEUE_URL to a "
            "plain Redis for the queues"
        )
    return url


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
# Requests beyond this many concurrent Redis calls wait (up to 5 s) for a free connection
# instead of failing.
MAX_CONNECTIONS = 256
# How long one read or write to Redis may take before the connection is given up.
IO_TIMEOUT = 30.0


def is_cluster(url: str) -> bool:
    """``redis+cluster://host:port`` (or ``rediss+cluster://``) names a Redis Cluster."""
    return url.startswith(CLUSTER_SCHEMES)


def packed(args: tuple[Any, ...]) -> bytes:
    """One command in Redis's protocol, packed by hiredis in C (redis-py's asyncio client packs
    in Python, a fifth of a write's CPU time), the bytes redis-py would send: str as UTF-8,
    int and float as ``repr``; None and bool are refused (``DataError``)."""
    name = args[0]
    if (" " in name) if isinstance(name, str) else (b" " in name):  # "SCRIPT LOAD": two words
        args = (*name.split(), *args[1:])
    try:
        command: bytes = hiredis.pack_command(args)
    except TypeError as error:
        raise DataError(str(error)) from None
    return command


class HiredisPacking:
    """Connections whose commands are packed by :func:`packed`."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return [packed(args)]


class TimerBoundIO:
    """Reads and writes of pooled connections (and the handshake of the shared one) bounded
    by ``IO_TIMEOUT`` seconds with a timer. redis-py bounds each write of a connection that
    has a ``socket_timeout`` with ``asyncio.wait_for``, which wraps it in a new task, a tenth
    of a round trip's CPU; these connections have no ``socket_timeout`` and put an
    ``asyncio.timeout`` (a timer, no task) around each write and read."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            async with asyncio.timeout(IO_TIMEOUT):
                await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except TimeoutError:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise redis.exceptions.TimeoutError("Timeout writing to socket") from None

    async def read_response(
        self, disable_decoding: bool = False, timeout: float | None = None, **options: Any
    ) -> Any:
        if timeout is not None:  # the caller's own bound (pub/sub): redis-py's handling
            return await super().read_response(disable_decoding, timeout, **options)  # type: ignore[misc]
        try:
            async with asyncio.timeout(IO_TIMEOUT):
                return await super().read_response(disable_decoding, **options)  # type: ignore[misc]
        except TimeoutError:
            # redis-py disconnected when the timer cancelled the read
            raise redis.exceptions.TimeoutError("Timeout reading from Redis") from None


class TCPConnection(HiredisPacking, TimerBoundIO, Connection):
    pass


class TLSConnection(HiredisPacking, TimerBoundIO, SSLConnection):
    pass


class UnixConnection(HiredisPacking, TimerBoundIO, UnixDomainSocketConnection):
    pass


LEAN_CONNECTIONS: dict[type[Any], type[Any]] = {
    Connection: TCPConnection,
    SSLConnection: TLSConnection,
    UnixDomainSocketConnection: UnixConnection,
}


class WaitingConnectionPool(ConnectionPool):
    """A pool that waits (up to ``timeout`` seconds) for a connection when all
    ``max_connections`` are in use, and costs nothing extra when one is free: redis-py's
    ``BlockingConnectionPool`` takes a condition and a timeout on every command, about 7 % of
    a simple request's CPU. Taking and giving back a connection skips the lock (nothing is
    awaited between checking the pool and taking from it) and redis-py's OpenTelemetry
    connection counts and release events: Baton exports its own metrics and uses no
    credential provider that listens for releases."""

    def __init__(self, *, timeout: float = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self.waiters: deque[asyncio.Future[None]] = deque()

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        """A connected connection: at once when one is free and nobody waits, else in turn
        (first come, first served) within ``timeout``."""
        deadline = None
        woken = False
        while True:
            # A newcomer does not overtake the tasks already waiting; a woken one goes first.
            if self.can_get_connection() and (woken or not self.waiters):
                connection = self.get_available_connection()  # type: ignore[no-untyped-call]
                try:
                    await self.ensure_connection(connection)
                except BaseException:
                    await self.release(connection)
                    raise
                return connection
            loop = asyncio.get_running_loop()
            deadline = deadline or loop.time() + self.timeout
            if loop.time() >= deadline:
                raise redis.exceptions.ConnectionError("No connection available.")
            waiter = loop.create_future()
            if woken:
                self.waiters.appendleft(waiter)  # beaten to it once: keep our place
            else:
                self.waiters.append(waiter)
            try:
                async with asyncio.timeout(deadline - loop.time()):
                    await waiter
                woken = True
            except TimeoutError:
                woken = False
            finally:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled() and not woken:
                    self._wake_next()  # woken but leaving (cancelled): pass the turn on

    async def release(self, connection: Any) -> None:
        self._in_use_connections.remove(connection)
        if connection.should_reconnect():
            await connection.disconnect()
        self._available_connections.append(connection)
        self._wake_next()

    def _wake_next(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class ScriptPipeline(Pipeline):
    """redis-py's pipeline, leaner where Baton's batches need it: plain pipelines (no
    MULTI, no WATCH) go over the client's shared connection in one exchange, and their
    scripts' EVALSHA is sent straight away (redis-py asks SCRIPT EXISTS before every pipeline
    that holds a script, one round trip more each time). Baton loads its scripts at startup;
    a script missing from the server's cache since (a restart, SCRIPT FLUSH) did not run, so
    it is loaded and run on its own after the rest of the pipeline. Transactions keep
    redis-py's path on a pooled connection (a re-run would not be part of the MULTI)."""

    owner: BatonRedis

    async def load_scripts(self) -> None:
        if self.is_transaction or self.explicit_transaction:
            await super().load_scripts()  # type: ignore[no-untyped-call]

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.is_transaction or self.explicit_transaction or self.watching:
            return await super().execute(raise_on_error)
        stack, self.command_stack = self.command_stack, []
        scripts, self.scripts = self.scripts, set()
        if not stack:
            return []
        raw = await self.owner.shared.exchange(
            b"".join(packed(args) for args, _ in stack), len(stack)
        )
        replies: list[Any] = []
        for (args, options), reply in zip(stack, raw, strict=True):
            try:
                replies.append(await self.owner.parsed(args[0], reply, options))
            except ResponseError as error:
                replies.append(error)
        missing = [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            sources: dict[str | bytes, ScriptTextT] = {
                script.sha: script.script for script in scripts
            }
            for index in missing:
                args, options = stack[index]
                await self.owner.script_load(sources[args[1]])
                try:
                    replies[index] = await self.owner.execute_command(*args, **options)
                except ResponseError as error:
                    replies[index] = error
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if raise_on_error and errors:
            raise errors[0]
        return replies


def queue_script(pipe: Pipeline, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
    """Queue one EVALSHA of ``script`` on ``pipe`` (synchronously; ``ScriptPipeline`` loads
    the script if the server lost it)."""
    # redis-py annotates the asyncio pipeline's scripts as sync Scripts; they are AsyncScripts.
    pipe.scripts.add(script)  # type: ignore[arg-type]
    pipe.evalsha(script.sha, len(keys), *keys, *args)


# Commands that hold their connection (blocking reads, waits) or change its state: never on
# the shared connection, where they would stall or change it for every caller.
BLOCKING = frozenset(
    {"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP"}
    | {"WAIT", "WAITAOF", "MONITOR", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"}
    | {"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "SELECT", "AUTH", "HELLO", "RESET"}
    | {"CLIENT", "QUIT"}
)


# Options redis-py's commands pass for its own use, not for their reply's callback.
UNPARSED_OPTIONS = frozenset({EMPTY_RESPONSE, NEVER_DECODE, "keys"})


def needs_own_connection(args: tuple[Any, ...]) -> bool:
    name = (args[0] if isinstance(args[0], str) else args[0].decode()).upper()
    if name in ("XREAD", "XREADGROUP"):
        return any(arg in ("BLOCK", b"BLOCK") for arg in args)
    return name.split(" ", 1)[0] in BLOCKING


class SharedScript(AsyncScript):
    """A script its client runs over the shared connection in one step: the EVALSHA packed
    and exchanged directly, without redis-py's per-call layers (about 10 µs of a call's
    17 µs when measured). A script the server lost (a restart, SCRIPT FLUSH) is loaded and
    run again. Called with another client, it runs through redis-py's own path."""

    registered_client: BatonRedis

    async def __call__(
        self,
        keys: Sequence[KeyT] | None = None,
        args: Iterable[EncodableT] | None = None,
        client: Redis | RedisCluster | None = None,
    ) -> Any:
        if client is not None and client is not self.registered_client:
            return await super().__call__(keys, args, client)
        keys, arguments = tuple(keys or ()), tuple(args or ())  # (sent twice after NOSCRIPT)
        command = ("EVALSHA", self.sha, len(keys), *keys, *arguments)
        (reply,) = await self.registered_client.shared.exchange(packed(command), 1)
        if isinstance(reply, NoScriptError):
            self.sha = await self.registered_client.script_load(self.script)
            command = ("EVALSHA", self.sha, len(keys), *keys, *arguments)
            (reply,) = await self.registered_client.shared.exchange(packed(command), 1)
        if isinstance(reply, RedisError):
            raise reply
        return reply


class BatonRedis(Redis):
    """redis-py's asyncio client whose commands share one connection, batched
    (:class:`~baton.server.runtime.multiplex.SharedConnection`), and whose pipelines are
    ``ScriptPipeline``s. Commands in :data:`BLOCKING`, transactions and pub/sub use the
    pool's connections, through redis-py's own path minus its per-command OpenTelemetry
    bookkeeping (Baton exports its own metrics). Replies are parsed by redis-py's callbacks."""

    def __init__(self, *args: Any, io_timeout: float = IO_TIMEOUT, **kwargs: Any) -> None:
        """redis-py's arguments (``Redis.client()`` and ``from_pool`` pass their own)."""
        super().__init__(*args, **kwargs)
        self.shared = SharedConnection(self.connection_pool, io_timeout)

    # (redis-py's typing names the sync Script for its asyncio client too)
    def register_script(self, script: ScriptTextT) -> SharedScript:  # type: ignore[override]
        return SharedScript(self, script)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if not needs_own_connection(args):
            (reply,) = await self.shared.exchange(packed(args), 1)
            return await self.parsed(args[0], reply, options)
        pool = self.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]

        async def send_and_read() -> Any:
            await connection.send_command(*args)
            return await self.parse_response(connection, args[0], **options)

        try:
            return await connection.retry.call_with_retry(
                send_and_read, lambda error: connection.disconnect(error=error)
            )
        finally:
            await pool.release(connection)

    async def parsed(self, command_name: Any, reply: Any, options: Mapping[str, Any]) -> Any:
        """A reply as ``Redis.parse_response`` makes it: an error reply raised (or the
        command's ``EMPTY_RESPONSE``), anything else through the command's callback."""
        if isinstance(reply, ResponseError):
            if EMPTY_RESPONSE in options:
                return options[EMPTY_RESPONSE]
            raise reply
        if isinstance(reply, RedisError):  # LOADING, MASTERDOWN…: redis-py's connection errors
            raise reply
        callback = self.response_callbacks.get(command_name)
        if callback is None:
            return reply
        options = {name: value for name, value in options.items() if name not in UNPARSED_OPTIONS}
        parsed = callback(reply, **options)
        return await parsed if inspect.iscoroutine(parsed) else parsed  # (none of the core's)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = ScriptPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.owner = self
        return pipe

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await self.shared.aclose()
        await super().aclose(close_connection_pool)


def async_redis(url: str) -> Redis:
    """A binary (msgpack-safe) client that fails fast when Redis is away instead of hanging;
    a cluster client for ``redis+cluster://`` URLs."""
    if is_cluster(url):
        cluster: Redis = RedisCluster.from_url(  # type: ignore[assignment]
            url.replace("+cluster", "", 1), socket_connect_timeout=2, socket_timeout=IO_TIMEOUT
        )
        return cluster
    pool = WaitingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=5,
        socket_connect_timeout=2,
        socket_timeout=None,  # reads and writes are bounded by TimerBoundIO
        # No retries: a command or script whose reply was lost may have run, and sending it
        # again could apply it twice (a packet, a job): the request fails (503) and its
        # client decides. (A sync Retry, given before, was never run: redis-py's asyncio
        # connections do not await it.)
        retry=AsyncRetry(NoBackoff(), 0),
    )
    pool.connection_class = LEAN_CONNECTIONS.get(pool.connection_class, pool.connection_class)
    return BatonRedis(connection_pool=pool, io_timeout=IO_TIMEOUT)


def sync_redis(url: str) -> redis.Redis:
    """The blocking client RQ needs (binary: RQ does not support decoded responses)."""
    return redis.Redis.from_url(url, socket_connect_timeout=2, retry=_retry())


def write_refused(error: redis.exceptions.ResponseError) -> tuple[int, str] | None:
    """Redis refusing writes for a reason of its own: (status, explanation), else None.
    A full disk (``MISCONF``, the append-only file cannot be written) is 507; out of memory
    and a read-only replica are 503 (retry later, or elsewhere)."""
    message = str(error).split("('", 1)[-1].rstrip("',)")
    if "MISCONF" in message:
        cause = "disk full" if "No space left" in message else "disk unwritable"
        return 507, f"{cause}: Baton's Redis cannot write to its disk right now ({message})"
    if "OOM" in message or isinstance(error, redis.exceptions.OutOfMemoryError):
        return 503, f"Baton's Redis is out of memory: {message}"
    if "READONLY" in message or isinstance(error, redis.exceptions.ReadOnlyError):
        return 503, f"Baton's Redis is a read-only replica: {message}"
    return None
