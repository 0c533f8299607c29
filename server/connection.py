"""Where Baton's Redis is: ``BATON_REDIS_URL``, or the embedded server of the data dir.

RQ's connection is ``BATON_QUEUE_URL`` when set (RQ does not run on Redis Cluster), else the
same server.
"""

from __future__ import annotations

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from baton.server.embedded import EmbeddedServer
from baton.server.settings import Settings


def embedded_server(settings: Settings) -> EmbeddedServer:
    return EmbeddedServer(settings.data_dir, settings.appendfsync)


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
# Requests beyond this many concurrent Redis calls wait (up to POOL_TIMEOUT s) for a free
# connection instead of failing.
MAX_CONNECTIONS = 256
POOL_TIMEOUT = 5.0
# How long one read or write to Redis may take before the connection is given up.
IO_TIMEOUT = 30.0


def is_cluster(url: str) -> bool:
    """``redis+cluster://host:port`` (or ``rediss+cluster://``) names a Redis Cluster."""
    return url.startswith(CLUSTER_SCHEMES)


def async_redis(url: str) -> Redis:
    """A binary (msgpack-safe) client that fails fast when Redis is away instead of hanging;
    a cluster client for ``redis+cluster://`` URLs. Beyond ``MAX_CONNECTIONS`` concurrent
    calls a caller waits for a free connection (redis-py's ``BlockingConnectionPool``)."""
    if is_cluster(url):
        cluster: Redis = RedisCluster.from_url(  # type: ignore[assignment]
            url.replace("+cluster", "", 1), socket_connect_timeout=2, socket_timeout=IO_TIMEOUT
        )
        return cluster
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_TIMEOUT,
        socket_connect_timeout=2,
        socket_timeout=IO_TIMEOUT,
        # No retries: a command or script whose reply was lost may have run, and sending it
        # again could apply it twice (a packet, a job): the request fails (503) and its
        # client decides.
        retry=AsyncRetry(NoBackoff(), 0),
    )
    return Redis(connection_pool=pool)


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
