"""A namespace's quota counts recounted from what it stores, once.

The counts ``BATON_MAX_NAMESPACE_BYTES`` and ``BATON_MAX_INDEX_TERMS`` read (``bytes`` and
``terms`` in the namespace's search stats hash) are moved by every write; a namespace written
before Baton kept them starts without them. The sweep recounts each namespace once (the
``counted`` field marks it done): the stored value of every version and every term's
postings key. A write landing during the recount may be counted twice, so the counts err
high (refusing a little early), never low.
"""

from __future__ import annotations

import secrets

from baton.server import codec
from baton.server.keys import ref_of
from baton.server.records import BATCH, NamespaceWithRecords

COUNTED = "counted"  # the stats hash field that marks a namespace recounted
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
        terms = 0
        async for _ in redis.scan_iter(ns.keys.search_terms, 1000):
            terms += 1
        pipe = redis.pipeline(transaction=False)  # one key: one slot on a cluster too
        pipe.hincrby(stats, "bytes", stored - int(counted_bytes or 0))
        pipe.hincrby(stats, "terms", terms - int(counted_terms or 0))
        pipe.hset(stats, COUNTED, 1)
        await pipe.execute()
        return stored, terms
    finally:
        await ns.scripts.release_lock(keys=[ns.keys.recount_lock], args=[token])


async def _stored_bytes(ns: NamespaceWithRecords) -> int:
    """The value bytes of every version of every record, as stored (found by SCAN)."""
    total, refs = 0, []
    async for key in ns.redis.scan_iter(ns.keys.heads, 1000):
        refs.append(ref_of(codec.text(key)))
        if len(refs) == BATCH:
            total += await _bytes_of(ns, refs)
            refs = []
    return total + await _bytes_of(ns, refs)


async def _bytes_of(ns: NamespaceWithRecords, refs: list[str]) -> int:
    heads = ns.batch()
    for ref in refs:
        heads.pipe.hget(ns.keys.head(ref), "version")
    sizes = ns.batch()
    for ref, version in zip(refs, await heads.execute(), strict=True):
        for number in range(1, int(version or 0) + 1):
            sizes.pipe.hstrlen(ns.keys.version(ref, number), "value")
    return sum(await sizes.execute())
