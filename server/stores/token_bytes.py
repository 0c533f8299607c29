"""What each agent token stores: the value bytes of the record and memory versions it wrote,
so that one token cannot fill Redis's memory for everyone (``BATON_MAX_TOKEN_BYTES``).

A version written with an agent token names it (its ``token`` field), and the token's count
in :data:`TOKEN_BYTES` moves with the write; a forget gives the bytes back to the token
that wrote each version. Both are commands of the write's or forget's own change (on one
Redis in the same step). Operators' writes (admin tokens, open mode, local processes) count
against no token.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from baton.server.model.errors import QuotaReached
from baton.server.model.keys import TOKEN_BYTES
from baton.server.retrieval.search import COUNTS_REFRESH_SECONDS, NEAR_QUOTA
from baton.server.stores.changes import Command, VersionWrite

DEFAULT_SHARE = 10  # of Redis's maxmemory: one token may store a tenth
DEFAULT_BYTES = 2**30  # when Redis has no maxmemory to take a share of (or is a cluster)


def charges(writes: Sequence[VersionWrite]) -> list[Command]:
    """The commands that count ``writes`` against the tokens they are written with: each
    new version names its token, and the token's count grows by its value's bytes.
    Operators' writes (no token) have none."""
    named = [
        Command("HSET", write.keys[1], ("token", write.token)) for write in writes if write.token
    ]
    spent: Counter[str] = Counter()
    for write in writes:
        if write.token:
            spent[write.token] += write.value_bytes
    return [
        *named,
        *(Command("HINCRBY", TOKEN_BYTES, (token, size)) for token, size in spent.items()),
    ]


def refunds(versions: Iterable[tuple[str | None, int]]) -> list[Command]:
    """The commands that give back, to the token that wrote each of ``versions`` (its
    token or None, its value's bytes), what a forget frees."""
    freed: Counter[str] = Counter()
    for token, size in versions:
        if token:
            freed[token] += size
    return [Command("HINCRBY", TOKEN_BYTES, (token, -size)) for token, size in freed.items()]


class TokenQuota:
    """``BATON_MAX_TOKEN_BYTES`` for one process: each token's count as last read (every few
    seconds, and before every write once near the quota, as the namespace quotas) plus what
    this process wrote with it since."""

    def __init__(self, redis: Redis, limit: int | None) -> None:
        self.redis = redis
        self.limit = limit  # None: a share of Redis's maxmemory, read on first use
        self.counts: dict[str, tuple[float, int]] = {}

    async def check(self, token: str | None) -> None:
        """``QuotaReached`` when ``token``'s versions hold its quota of value bytes;
        operators (None) have none."""
        if token is None:
            return
        limit = self.limit if self.limit is not None else await self._default_limit()
        read_at, stored = self.counts.get(token, (0.0, 0))
        near = stored >= NEAR_QUOTA * limit  # then read before every write, as the others
        if near or time.monotonic() - read_at >= COUNTS_REFRESH_SECONDS:
            stored = int(await self.redis.hget(TOKEN_BYTES, token) or 0)
            self.counts[token] = (time.monotonic(), stored)
        if stored >= limit:
            raise QuotaReached.of(
                "the values this token stored", limit, "BATON_MAX_TOKEN_BYTES", bytes=stored
            )

    def spent(self, token: str | None, size: int) -> None:
        """Note ``size`` bytes written (or, negative, freed) with ``token`` by this process."""
        if token is not None and token in self.counts:
            read_at, stored = self.counts[token]
            self.counts[token] = (read_at, stored + size)

    async def _default_limit(self) -> int:
        """A tenth of Redis's ``maxmemory``, or 1 GiB when it has none or is a cluster."""
        try:
            info = await self.redis.info("memory")
            maxmemory = int(info.get("maxmemory") or 0)
        except (ResponseError, TypeError, ValueError, AttributeError):  # INFO renamed away
            maxmemory = 0
        self.limit = maxmemory // DEFAULT_SHARE if maxmemory else DEFAULT_BYTES
        return self.limit
