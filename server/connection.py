"""Where Baton's Redis is: ``BATON_REDIS_URL``, or the embedded server of the data dir.

RQ's connection is ``BATON_QUEUE_URL`` when set (RQ does not run on Redis Cluster), else the
same server.
"""

from __future__ import annotations

import redis
from redis.asyncio import Redis
from redis.backoff import ExponentialBackoff
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
    return settings.queue_url or redis_url(settings)


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), 2)


def async_redis(url: str) -> Redis:
    """A binary (msgpack-safe) client that fails fast when Redis is away instead of hanging."""
    return Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30, retry=_retry())


def sync_redis(url: str) -> redis.Redis:
    """The blocking client RQ needs (binary: RQ does not support decoded responses)."""
    return redis.Redis.from_url(url, socket_connect_timeout=2, retry=_retry())
