"""Where Baton's Redis is: ``BATON_REDIS_URL``, or the embedded server of the data dir."""

from __future__ import annotations

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


def async_redis(url: str) -> Redis:
    """A binary (msgpack-safe) client that fails fast when Redis is away instead of hanging."""
    return Redis.from_url(
        url,
        socket_connect_timeout=2,
        socket_timeout=30,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
    )
