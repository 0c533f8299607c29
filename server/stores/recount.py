"""A namespace's quota counts recounted from what it stores, once.

The counts ``BATON_MAX_NAMESPACE_BYTES`` and ``BATON_MAX_INDEX_TERMS`` read (``bytes`` and
``terms`` in the namespace's search stats hash) are moved by every write and forget; a
namespace written before Baton kept them starts without them. A namespace created since is
marked exact when it is first admitted (``Namespace.admit``); the sweep recounts any other
once (the ``counted`` field marks it done): the stored value of every version of every
listed record and the distinct terms of every indexed document, read from the namespace's
own keys. A write or forget landing on a record while it is being recounted may be counted
twice, so the counts can be off by what changed in those seconds.
"""

from __future__ import annotations

import secrets

from baton.server.runtime import codec
from baton.server.stores.records import BATCH, NamespaceWithRecords

COUNTED = "counted"  # the stats hash field that marks a namespace's counts exact
RECOUNT_LEASE_SECONDS = 3600  # a recounting process that died frees the namespace after this


async def recount_once(ns: NamespaceWithRecords) -> tuple[int, int] | None:
    """The namespace's stored value bytes and search terms, recounted into its counts if it
    never was; None when it was, or while another process recounts it."""
    stats, redis = ns.keys.search_stats, ns.redis
    if await redis.hexists(stats, COUNTED):
        return None
    token = secrets.token_hex(8)
    if not await redis.set(ns.keys.recount_lock, token, nx=True, ex=RECOUNT_LEASE_SECONDS):
        return None
    try:
        counted_bytes, counted_terms = await redis.hmget(stats, "bytes", "terms")
        stored = await _stored_bytes(ns)
        terms: set[str] = set()
        async for _, entry in redis.hscan_iter(ns.keys.search_docs, count=1000):
            terms.update(codec.unpack(entry)["terms"])
        pipe = redis.pipeline(transaction=False)  # one key: one slot on a cluster too
        pipe.hincrby(stats, "bytes", stored - int(counted_bytes or 0))
        pipe.hincrby(stats, "terms", len(terms) - int(counted_terms or 0))
        pipe.hset(stats, COUNTED, 1)
        await pipe.execute()
        return stored, len(terms)
    finally:
        await ns.scripts.release_lock(keys=[ns.keys.recount_lock], args=[token])


async def _stored_bytes(ns: NamespaceWithRecords) -> int:
    """The value bytes of every version of every record the refs index lists."""
    total, refs = 0, []
    async for ref, _ in ns.redis.zscan_iter(ns.keys.refs, count=1000):
        refs.append(codec.text(ref))
        if len(refs) == BATCH:
            total += await _bytes_of(ns, refs)
            refs = []
    return total + await _bytes_of(ns, refs)


async def _bytes_of(ns: NamespaceWithRecords, refs: list[str]) -> int:
    """The value bytes of every version of ``refs``, read ``BATCH`` versions a round trip."""
    heads = ns.batch()
    for ref in refs:
        heads.pipe.hget(ns.keys.head(ref), "version")
    total: int = 0
    sizes = ns.batch()
    for ref, version in zip(refs, await heads.execute(), strict=True):
        for number in range(1, int(version or 0) + 1):
            sizes.pipe.hstrlen(ns.keys.version(ref, number), "value")
            if len(sizes) == BATCH:
                total += sum(await sizes.execute())
                sizes = ns.batch()
    return total + int(sum(await sizes.execute()))
