"""A BM25 full-text index kept in Redis, shared by every API replica and worker.

Documents are memories (``m:<id>``), observations (``o:<session>:<id>``) and the text of
fact values (``f:<ref>``). The index is updated in the same request as the write, so what
was saved is found at once. All keys of a namespace's index share one hash tag
(``{idx:<ns>}``, see ``keys.py``): updates pipeline to one node of a cluster, and scoring is
one Lua script (``SEARCH``) next to the postings — a query costs one round trip.

Text becomes terms through the lexical layer (``baton.server.retrieval.lexical``). Each
posting stores the term's length-normalised part of BM25,
tf·(k1+1)/(tf+k1·(1−b+b·len/avglen)), computed by the index script with the namespace's
average length as it is once the document is counted; a query weights each term's
postings by its idf and sums them (a ZUNIONSTORE, or
the threshold algorithm over long postings). The ranking is exact BM25 up to the drift of
the average length between the moments documents were indexed; equal scores rank the
document added later first, then by id.

Scoring runs inside the single-threaded Redis, so one search's work is bounded: a query is
scored on its 32 most selective terms, and the script stops after ``SEARCH_WORK_BUDGET``
postings read or parts looked up, answering the best of what it read (exact scores, the
best parts of every term's postings) — a few ms of the server's time, about 16 ms at a
million documents.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.typing import EncodableT

from baton.server.model.errors import QuotaReached, StoreUnavailable
from baton.server.model.keys import Keys
from baton.server.retrieval import lexical
from baton.server.retrieval.analysis import Analyzer
from baton.server.retrieval.vectors import Near, Vectors
from baton.server.runtime.batch import Batch
from baton.server.runtime.codec import pack, unpack
from baton.server.runtime.scripts import Scripts

PRUNE_ABOVE_POSTINGS = 2_000  # below this many postings a plain union is as cheap as pruning
# One search's work in the server (postings read plus parts looked up): it runs inside the
# single-threaded Redis, so this bounds how long one query holds everybody else's requests.
# make bench's growth set at 1M documents (two Zipf words, flat postings: the budget is
# spent): 15.8 ms p95 of the server's time, 99.9 % of the exact top 10 (scratch, 200 queries).
SEARCH_WORK_BUDGET = 10_000
MAX_QUERY_TERMS = 32  # a query is scored on this many of its terms, the most selective
# A query is read up to here (its analysis runs on the event loop: about 4 ms of tokenizing
# and as much embedding at most).
QUERY_CHARS = 4096
# Searches one process runs at once; the others wait their turn, and while some wait, a turn
# ends only once the search's share of the time is kept (BATON_SEARCH_SHARE, SearchTurns).
# make bench's fairness rows (20,000 memories, 4 clients looping worst-case searches,
# scratch runs): concurrent searches, another client's API read p50 16.5 ms (1.1 alone),
# 158 searches/s; one at a time 5.1 ms, 216/s; share 0.5: 1.8-2.2 ms (1.0-1.2 alone), 73/s;
# share 0.4 (the default): 1.2-1.4 x alone, 51/s.
SEARCHES_AT_ONCE = 1
# Reciprocal rank fusion's constant (Cormack et al.): how fast lower ranks count less.
RRF_K = 60
LEXICAL = "lexical"  # the stats hash field naming the lexical rules the index was built with
COUNTS_REFRESH_SECONDS = 5.0  # how stale the quota counts check_room reads may be
NEAR_QUOTA = 0.9  # past this share of a quota, its count is read again before every write
# stats key -> (read at, distinct terms, stored value bytes), as last read by this process
_counts: dict[str, tuple[float, int, int]] = {}
INDEXED_KEPT = 4096  # documents whose indexed terms a namespace's index keeps in memory
MAX_INDEX_ATTEMPTS = 5


def path_text(paths: Sequence[str]) -> str:
    """File paths as a document indexes them: each path whole and every suffix after a
    ``/``, so the full path, a path suffix (``payments/refund.py``) and the basename
    (``refund.py``) each find it."""
    terms: list[str] = []
    for path in paths:
        parts = path.strip("/").split("/")
        terms += ["/".join(parts[start:]) for start in range(len(parts))]
    return " ".join(dict.fromkeys(terms))


def text_of(value: Any) -> str:
    """Every string, key and number in a JSON value, as one text."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(f"{key} {text_of(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return " ".join(text_of(item) for item in value)
    return "" if value is None or isinstance(value, bool) else str(value)


class SearchTurns:
    """A process's searches take turns: at most :data:`SEARCHES_AT_ONCE` at once, and while
    others wait, a turn is held on for the rest of its ``share`` of the time (after a search
    that took t, the next waiting one starts t * (1 / share - 1) later). A lone client's
    searches never wait, and no answer is delayed: the next search is."""

    def __init__(self, share: float = 1.0) -> None:
        self.share = share
        self.free = asyncio.Semaphore(SEARCHES_AT_ONCE)
        self.waiting = 0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            await self.free.acquire()
        finally:
            self.waiting -= 1
        started = time.monotonic()
        try:
            yield
        finally:
            rest = (time.monotonic() - started) * (1 / self.share - 1) if self.waiting else 0
            if rest > 0:
                asyncio.get_running_loop().call_later(rest, self.free.release)
            else:
                self.free.release()


class Hit(msgspec.Struct, kw_only=True):
    doc: str
    kind: str
    score: float
    project: str | None
    agent: str | None


class IndexCall(msgspec.Struct, frozen=True):
    """One call of ``index_document`` (``lua/index.lua``): the postings it touches (after
    the docs, meta and stats hashes) and its arguments."""

    doc: str
    terms: list[str]  # its new terms, then the old ones whose postings it also takes
    args: list[EncodableT]


class SearchIndex:
    """The BM25 index of one namespace.

    A script touches only the keys it is given, so (re)indexing a document names the
    postings of its old terms too. They are taken from what this process last indexed or
    read of the document (:attr:`indexed`, a bounded cache; :meth:`prepare` reads them for
    documents it does not know); a script given too few refuses, writing nothing, and names
    the missing ones, and the call is made again with them."""

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts,
        keys: Keys,
        max_terms: int | None = None,
        turns: SearchTurns | None = None,
        max_bytes: int | None = None,
        vectors: Vectors | None = None,
        analyzer: Analyzer | None = None,
    ) -> None:
        self.redis = redis
        self.script = scripts.search
        self.index_script = scripts.index_doc
        self.meta_key = keys.search_meta
        self.scratch_key = keys.search_scratch
        self.docs_key = keys.search_docs
        self.stats_key = keys.search_stats
        self.keys = keys
        self.prune_above = PRUNE_ABOVE_POSTINGS
        self.work_budget = SEARCH_WORK_BUDGET
        self.max_terms = max_terms
        self.max_bytes = max_bytes
        self.turns = turns or SearchTurns()  # shared by a process's namespaces
        self.vectors = vectors  # the process's vector search, None for BM25 alone
        self.analyzer = analyzer or Analyzer(vectors)  # shared by a process's namespaces
        # doc -> its terms when last indexed here (or read), newest INDEXED_KEPT docs
        self.indexed: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    async def call(
        self,
        doc: str,
        text: str | None,
        *,
        kind: str = "",
        project: str | None = None,
        agent: str | None = None,
        added: str = "",
    ) -> IndexCall:
        """The call that (re)indexes ``doc`` with ``text``, or takes it out (None); the
        document's terms are noted as indexed. ``added``: when the document was first added
        (an ISO timestamp; among equal scores the newer ranks first). The text is analysed
        as :mod:`baton.server.retrieval.analysis` bounds it (a long one off the event loop)."""
        if text is None:
            old = self.indexed.get(doc, ())
            self._note(doc, ())
            return IndexCall(doc, list(old), [doc, "", "", 0, "", 0, *old])
        analysis = await self.analyzer.analyse(text)
        terms = analysis.counts
        old = self.indexed.get(doc, ())  # (read after the wait: another call may have noted)
        entry = {
            "kind": kind,
            "project": project or "",
            "agent": agent or "",
            "len": analysis.length,
            "terms": sorted(terms),
        }
        postings = [item for term, count in terms.items() for item in (term, count)]
        gone = [term for term in old if term not in terms]
        meta = f"{kind}\t{project or ''}\t{agent or ''}\t{added}"
        self._note(doc, tuple(terms))
        return IndexCall(
            doc,
            [*terms, *gone],
            [
                doc,
                pack(entry),
                meta,
                analysis.length,
                analysis.vector,
                len(terms),
                *postings,
                *gone,
            ],
        )

    @property
    def document_keys(self) -> list[str]:
        """The keys every ``index_document`` call takes before the postings."""
        keys = self.keys
        return [
            keys.search_docs,
            keys.search_meta,
            keys.search_stats,
            keys.search_vectors,
            keys.search_changes,
        ]

    def posting_keys(self, call: IndexCall) -> list[str]:
        """The postings ``call`` touches, in its order."""
        return [self.keys.search_term(term) for term in call.terms]

    def keys_of(self, call: IndexCall) -> list[str]:
        """The keys ``index_document`` takes for ``call``."""
        return [*self.document_keys, *self.posting_keys(call)]

    def with_missing(self, call: IndexCall, missing: Iterable[bytes | str]) -> IndexCall:
        """``call`` given the postings of ``missing`` too (terms a script named)."""
        terms = [term.decode() if isinstance(term, bytes) else term for term in missing]
        return IndexCall(call.doc, [*call.terms, *terms], [*call.args, *terms])

    def _note(self, doc: str, terms: tuple[str, ...]) -> None:
        self.indexed[doc] = terms
        self.indexed.move_to_end(doc)
        if len(self.indexed) > INDEXED_KEPT:
            self.indexed.popitem(last=False)

    async def prepare(self, docs: Sequence[str]) -> None:
        """Read the indexed terms of the ``docs`` this process does not know (one round
        trip), so that calls queued on a batch name every posting they touch."""
        unknown = [doc for doc in docs if doc not in self.indexed]
        if not unknown:
            return
        entries = await self.redis.hmget(self.docs_key, unknown)
        for doc, entry in zip(unknown, entries, strict=True):
            if isinstance(entry, str):  # (binary client: never, but typed so)
                entry = entry.encode()
            terms = () if entry is None else unpack(entry)["terms"]
            self._note(doc, tuple(terms))

    def queue(self, batch: Batch, call: IndexCall) -> None:
        """Queue ``call`` on ``batch`` (its reply: :meth:`run` explains it)."""
        batch.script(self.index_script, self.keys_of(call), call.args)

    async def run(self, call: IndexCall) -> bool:
        """Run ``call`` (again with the postings a refusal names); whether the document was
        indexed before."""
        for _ in range(MAX_INDEX_ATTEMPTS):
            reply = await self.index_script(keys=self.keys_of(call), args=call.args)
            if reply[0] != -1:
                return bool(reply[0])
            call = self.with_missing(call, reply[1:])
        raise StoreUnavailable(f"search document {call.doc}: too many concurrent writers")

    async def settle(self, calls: Sequence[IndexCall], replies: Sequence[Any]) -> None:
        """Run again, with the postings they named, the queued ``calls`` whose ``replies``
        refused (another process re-indexed the document in between)."""
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, list) and reply and reply[0] == -1:
                await self.run(self.with_missing(call, reply[1:]))

    async def refresh_counts(self) -> None:
        """Re-read the namespace's quota counts: cached for a few seconds per process, but
        read before every write once near a quota, so concurrent writers (8 at once, or
        several processes) pass it by at most the writes in flight, not seconds of them."""
        read_at, terms, stored = _counts.get(self.stats_key, (0.0, 0, 0))
        near = (self.max_terms is not None and terms >= NEAR_QUOTA * self.max_terms) or (
            self.max_bytes is not None and stored >= NEAR_QUOTA * self.max_bytes
        )
        if not near and time.monotonic() - read_at < COUNTS_REFRESH_SECONDS:
            return
        counted = await self.redis.hmget(self.stats_key, "terms", "bytes")
        _counts[self.stats_key] = (time.monotonic(), int(counted[0] or 0), int(counted[1] or 0))

    def noted(self, index: IndexCall | None, value_bytes: int) -> None:
        """Add a write this process made to the counts it last read: its value's bytes,
        and at most its document's terms (some may be in the index already; the next read
        has the exact count)."""
        if self.stats_key in _counts:
            read_at, terms, stored = _counts[self.stats_key]
            added = 0 if index is None else len(index.terms)
            _counts[self.stats_key] = (read_at, terms + added, stored + value_bytes)

    async def check_room(self) -> None:
        """``QuotaReached`` when the namespace is at a quota, as last read (every few
        seconds): its index holds ``max_terms`` distinct terms (each is a key), or its
        records' versions hold ``max_bytes`` of values (counted in the same stats hash by
        every write and forget). Checked before a write, so a refused write writes nothing."""
        await self.refresh_counts()
        _, terms, stored = _counts[self.stats_key]
        if self.max_terms is not None and terms >= self.max_terms:
            raise QuotaReached.of(
                "the namespace's search index", self.max_terms, "BATON_MAX_INDEX_TERMS", terms=terms
            )
        if self.max_bytes is not None and stored >= self.max_bytes:
            raise QuotaReached.of(
                "the namespace's stored values",
                self.max_bytes,
                "BATON_MAX_NAMESPACE_BYTES",
                bytes=stored,
            )

    async def index(self, doc: str, text: str, **fields: Any) -> None:
        await self.prepare([doc])
        await self.run(await self.call(doc, text, **fields))

    async def remove(self, docs: Iterable[str]) -> int:
        """Take documents out of the index; returns how many were in it."""
        docs = list(docs)
        await self.prepare(docs)
        return sum([await self.run(await self.call(doc, None)) for doc in docs])

    async def selective(self, terms: list[str]) -> list[str]:
        """At most :data:`MAX_QUERY_TERMS` of a query's ``terms``: all of them when they are
        few, else the rarest in the index, earlier ones first among equals (a pasted log or a
        whole memory as a query costs what a short query does; its rare words are what find
        its documents)."""
        if len(terms) <= MAX_QUERY_TERMS:
            return terms
        pipe = self.redis.pipeline(transaction=False)
        for term in terms:
            pipe.zcard(self.keys.search_term(term))
        sizes = await pipe.execute()
        ranked = sorted((size, order) for order, size in enumerate(sizes) if size)
        return [terms[order] for _, order in sorted(ranked[:MAX_QUERY_TERMS], key=lambda x: x[1])]

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        kinds: Sequence[str] = (),
        project: str | None = None,
        agent: str | None = None,
    ) -> list[Hit]:
        """The best ``limit`` documents for ``query``: by BM25 (k1 1.2, b 0.75), fused with
        the documents nearest it by meaning when the process has vectors (:meth:`_fused`).

        With ``project``, only documents of that project or of none (unscoped memories are
        shared); with ``agent``, only that agent's documents. Waits for its turn among the
        process's searches (:class:`SearchTurns`). The query is read up to its first
        :data:`QUERY_CHARS` characters.
        """
        query = query[:QUERY_CHARS]
        async with self.turns.turn():
            if self.vectors is None:
                return await self._scored(query, limit, kinds, project, agent)
            # the copy is brought up to date first: then the BM25 script runs in Redis while
            # this process computes the nearest vectors (in a thread for a large copy)
            # (both finish before the turn ends, also when one fails: the next search may
            # change the copy)
            copy = await self.vectors.copy_of(self.redis, self.keys)
            hits, near = await asyncio.gather(
                self._scored(query, limit, kinds, project, agent),
                self.vectors.nearest(copy, query, limit, frozenset(kinds), project, agent),
                return_exceptions=True,
            )
            if isinstance(hits, BaseException):
                raise hits
            if isinstance(near, BaseException):
                raise near
            return _fused(hits, near, limit)

    async def _scored(
        self,
        query: str,
        limit: int,
        kinds: Sequence[str],
        project: str | None,
        agent: str | None,
    ) -> list[Hit]:
        terms = await self.selective(list(dict.fromkeys(lexical.terms(query))))
        if not terms:
            return []
        keys = [
            self.stats_key,
            self.meta_key,
            self.scratch_key,
            *(self.keys.search_term(term) for term in terms),
        ]
        filters = [",".join(kinds), project or "", agent or ""]
        reply = await self.script(
            keys=keys, args=[limit, *filters, self.prune_above, self.work_budget]
        )
        hits = []
        for index in range(0, len(reply), 3):
            kind, doc_project, doc_agent = reply[index + 2].decode().split("\t")[:3]
            hits.append(
                Hit(
                    doc=reply[index].decode(),
                    kind=kind,
                    score=round(float(reply[index + 1]), 4),
                    project=doc_project or None,
                    agent=doc_agent or None,
                )
            )
        return hits


def _fused(hits: list[Hit], near: list[Near], limit: int) -> list[Hit]:
    """Reciprocal rank fusion of the BM25 ranking and the vector ranking (each document
    scores the sum of 1 / (RRF_K + its rank) over the lists it is in; only documents above
    the similarity floor are in the vector list, so a document unrelated to the query never
    enters): the best ``limit``, ``score`` the fused one. Equal scores keep BM25's order."""
    fused: dict[str, tuple[float, int, Hit]] = {}
    for rank, hit in enumerate(hits):
        fused[hit.doc] = (1 / (RRF_K + rank + 1), rank, hit)
    for rank, near_doc in enumerate(near):
        score, order, hit = fused.get(
            near_doc.doc,
            (
                0.0,
                len(hits) + rank,
                Hit(
                    doc=near_doc.doc,
                    kind=near_doc.kind,
                    score=0.0,
                    project=near_doc.project,
                    agent=near_doc.agent,
                ),
            ),
        )
        fused[near_doc.doc] = (score + 1 / (RRF_K + rank + 1), order, hit)
    ranked = sorted(fused.values(), key=lambda entry: (-entry[0], entry[1]))[:limit]
    for score, _, hit in ranked:
        hit.score = round(score, 6)
    return [hit for _, _, hit in ranked]
