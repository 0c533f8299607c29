"""``baton reindex``: a namespace's search index rebuilt from what the namespace stores.

Search indexes a memory, a fact or an observation when it is written, with the lexical
layer's rules of that moment (``baton.server.retrieval.lexical``). When those rules change
(``LEXICAL_VERSION``), the documents indexed before keep their old terms until they are
indexed again. A reindex walks the namespace's records and sessions and indexes every
document again, in place (searches go on meanwhile), takes out the documents nothing holds
any more, and records the rules' version in the index's stats hash (``lexical``); a new
namespace records it when first admitted. ``baton status`` names an index built by other
rules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.asyncio.client import Pipeline

from baton.server.model.keys import NAMESPACES
from baton.server.retrieval.lexical import LEXICAL_VERSION
from baton.server.retrieval.search import LEXICAL, IndexCall
from baton.server.runtime import codec
from baton.server.stores.documents import IndexDocument, observed_document, record_document
from baton.server.stores.records import BATCH

if TYPE_CHECKING:
    from baton.server.stores.backend import Backend, Namespace

LEXICAL_BYTES = str(LEXICAL_VERSION).encode()


class Reindexed(NamedTuple):
    namespace: str
    documents: int  # indexed again
    removed: int  # held by the index, by nothing else


async def all_namespaces(backend: Backend) -> list[str]:
    """Every namespace the server holds, by name."""
    return sorted(codec.text(name) for name in await backend.redis.smembers(NAMESPACES))


async def stale_indexes(backend: Backend) -> list[str]:
    """The namespaces whose search index was built by other lexical rules than today's (or
    before the rules' version was recorded)."""
    names = await all_namespaces(backend)
    pipe = backend.redis.pipeline(transaction=False)
    for name in names:
        pipe.hget(backend.namespace(name).keys.search_stats, LEXICAL)
    built = await pipe.execute()
    return [name for name, version in zip(names, built, strict=True) if version != LEXICAL_BYTES]


class IndexingBatch:
    """A namespace's batch that also (re)indexes search documents: a document whose old
    terms changed since they were read (another writer) is indexed again after the batch."""

    def __init__(self, ns: Namespace, *, transaction: bool) -> None:
        self.batch = ns.batch(transaction=transaction)
        self.search = ns.search
        self.calls: list[tuple[int, IndexCall]] = []

    @property
    def pipe(self) -> Pipeline:
        return self.batch.pipe

    async def index(self, doc: str, text: str | None, **fields: Any) -> None:
        """Queue (re)indexing ``doc`` with ``text``, or taking it out (None)."""
        call = await self.search.call(doc, text, **fields)
        self.calls.append((len(self.batch), call))
        self.search.queue(self.batch, call)

    async def execute(self) -> list[Any]:
        replies = await self.batch.execute()
        await self.search.settle(
            [call for _, call in self.calls], [replies[at] for at, _ in self.calls]
        )
        return replies


async def reindex(
    ns: Namespace, on_progress: Callable[[int, int], None] | None = None
) -> Reindexed:
    """Index every document of the namespace again with today's rules; ``on_progress(done,
    total)`` after each batch (total: the documents the index held when it started)."""
    held = {codec.text(doc) async for doc, _ in ns.redis.hscan_iter(ns.keys.search_docs)}
    total, done = len(held), 0
    async for batch in _documents(ns):
        await ns.search.prepare([document.doc for document in batch])
        queued = IndexingBatch(ns, transaction=False)
        for document in batch:
            await queued.index(document.doc, document.text, **document.fields())
            held.discard(document.doc)
        await queued.execute()
        done += len(batch)
        if on_progress:
            on_progress(done, max(total, done))
    removed = await ns.search.remove(sorted(held))
    await ns.redis.hset(ns.keys.search_stats, LEXICAL, LEXICAL_VERSION)
    return Reindexed(ns.name, done, removed)


async def _documents(ns: Namespace) -> AsyncIterator[list[IndexDocument]]:
    """The namespace's search documents, in batches: its records' current versions, then
    its sessions' observations."""
    records = ns.records
    async for refs in records.candidate_refs(None, [], "all", None):
        found = await records.read_versions([(ref, None) for ref in refs])
        batch = [
            document
            for record in found
            if record is not None
            and record.forgotten is None
            and (
                document := record_document(
                    record.ref, record.value, record.tags, record.author, record.created_at
                )
            )
            is not None
        ]
        if batch:
            yield batch
    batch = []
    async for session_id, _ in ns.redis.zscan_iter(ns.keys.sessions):
        batch += map(observed_document, await ns.sessions.observations(codec.text(session_id)))
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
