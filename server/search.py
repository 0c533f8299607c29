"""A BM25 full-text index kept in Redis, shared by every API replica and worker.

Documents are memories (``m:<id>``), observations (``o:<session>:<id>``) and the text of
fact values (``f:<ref>``). The index is updated in the same request as the write, so what
was saved is found at once. All keys of a namespace's index share one hash tag
(``{idx:<ns>}``, see ``keys.py``): updates pipeline to one node of a cluster, and scoring is
one Lua script (``SEARCH``) next to the postings — a query costs one round trip.

Each posting stores the term's length-normalised part of BM25, tf·(k1+1)/(tf+k1·(1−b+b·len/
avglen)), computed when the document is indexed with the average length known then (read
every few seconds); a query weights each term's postings by its idf and sums them with one
ZUNIONSTORE, leaving out (MaxScore pruning) the common terms that cannot lift a document into
the result on their own. The ranking is exact BM25 up to the drift of the average length
between the moments documents were indexed.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.typing import EncodableT

from baton.server.batch import Batch
from baton.server.codec import pack
from baton.server.keys import Keys
from baton.server.scripts import Scripts

K1 = 1.2
B = 0.75
PRUNE_ABOVE_POSTINGS = 2_000  # below this many postings a plain union is as cheap as pruning
AVERAGE_REFRESH_SECONDS = 5.0
_averages: dict[str, tuple[float, float]] = {}  # stats key -> (read at, average doc length)
TOKEN = re.compile(r"[a-z0-9][a-z0-9/._-]*[a-z0-9]|[a-z0-9]")
MIN_TOKEN = 2


def stem(token: str) -> str:
    """Light stemming of plain words: plurals and -ing/-ed endings, keeping 3+ letters."""
    if not token.isalpha() or len(token) <= 4:
        return token  # paths, versions, identifiers and short words stay exact
    if token.endswith("ies"):
        return token[:-3] + "y"
    if token.endswith(("sses", "xes", "zes", "ches", "shes")):
        return token[:-2]
    if token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    for suffix in ("ing", "ed"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            return token[: -len(suffix)]
    return token


def tokenize(text: str) -> list[str]:
    """Lower-case; split on anything but letters, digits and the path characters ``/ . _ -``
    (kept inside tokens, trimmed at their ends); drop tokens shorter than 2; light stemming."""
    return [stem(token) for token in TOKEN.findall(text.lower()) if len(token) >= MIN_TOKEN]


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


class Hit(msgspec.Struct, kw_only=True):
    doc: str
    kind: str
    score: float
    project: str | None
    agent: str | None


class SearchIndex:
    """The BM25 index of one namespace."""

    def __init__(self, redis: Redis, scripts: Scripts, keys: Keys) -> None:
        self.redis = redis
        self.script = scripts.search
        self.index_script = scripts.index_doc
        self.meta_key = keys.search_meta
        self.scratch_key = keys.search_scratch
        self.docs_key = keys.search_docs
        self.stats_key = keys.search_stats
        self.keys = keys
        self.term_prefix = keys.search_term_prefix
        self.index_keys = [self.docs_key, self.meta_key, self.stats_key, self.term_prefix]
        self.prune_above = PRUNE_ABOVE_POSTINGS

    def queue_index(
        self,
        batch: Batch,
        doc: str,
        text: str,
        *,
        kind: str,
        project: str | None = None,
        agent: str | None = None,
    ) -> None:
        """Queue the one script call that (re)indexes ``doc`` on ``batch`` (call
        :meth:`refresh_average` first now and then: the length normalisation uses it)."""
        args = self.index_args(doc, text, kind=kind, project=project, agent=agent)
        batch.script(self.index_script, self.index_keys, args)

    def index_args(
        self,
        doc: str,
        text: str,
        *,
        kind: str,
        project: str | None = None,
        agent: str | None = None,
    ) -> list[EncodableT]:
        """What ``index_document`` (``lua/index.lua``) takes to (re)index ``doc``: the doc,
        its entry, meta and length, then its term / posting score pairs."""
        terms = Counter(tokenize(text))
        length = sum(terms.values())
        entry = {
            "kind": kind,
            "project": project or "",
            "agent": agent or "",
            "len": length,
            "terms": sorted(terms),
        }
        average = _averages.get(self.stats_key, (0.0, 0.0))[1] or float(length or 1)
        norm = K1 * (1 - B + B * length / average)
        # Each posting holds the term's BM25 part but for idf, normalised by the doc's length.
        postings = [
            item
            for term, count in terms.items()
            for item in (term, count * (K1 + 1) / (count + norm))
        ]
        meta = f"{kind}\t{project or ''}\t{agent or ''}"
        return [doc, pack(entry), meta, length, *postings]

    async def refresh_average(self) -> None:
        """Re-read the average document length the length normalisation uses (cached for a
        few seconds per process: it drifts slowly)."""
        read_at, _ = _averages.get(self.stats_key, (0.0, 0.0))
        if time.monotonic() - read_at < AVERAGE_REFRESH_SECONDS:
            return
        docs, total = await self.redis.hmget(self.stats_key, "docs", "total_length")
        average = int(total or 0) / int(docs) if docs and int(docs) > 0 else 0.0
        _averages[self.stats_key] = (time.monotonic(), average)

    async def index(self, doc: str, text: str, **fields: Any) -> None:
        await self.refresh_average()
        batch = Batch(self.redis)
        self.queue_index(batch, doc, text, **fields)
        await batch.execute()

    def queue_remove(self, batch: Batch, doc: str) -> None:
        """Queue taking ``doc`` out of the index on ``batch`` (the indexing script, given no
        entry)."""
        batch.script(self.index_script, self.index_keys, [doc, "", "", 0])

    async def remove(self, docs: Iterable[str]) -> int:
        """Take documents out of the index; returns how many were in it."""
        batch = Batch(self.redis)
        for doc in docs:
            self.queue_remove(batch, doc)
        return sum(int(result) for result in await batch.execute())

    async def search(
        self,
        query: str,
        *,
        limit: int = 10,
        kinds: Sequence[str] = (),
        project: str | None = None,
        agent: str | None = None,
    ) -> list[Hit]:
        """The best ``limit`` documents for ``query`` by BM25 (k1 1.2, b 0.75).

        With ``project``, only documents of that project or of none (unscoped memories are
        shared); with ``agent``, only that agent's documents.
        """
        terms = list(dict.fromkeys(tokenize(query)))
        if not terms:
            return []
        keys = [
            self.stats_key,
            self.meta_key,
            self.scratch_key,
            *(self.keys.search_term(term) for term in terms),
        ]
        filters = [",".join(kinds), project or "", agent or ""]
        reply = await self.script(keys=keys, args=[limit, *filters, self.prune_above])
        hits = []
        for index in range(0, len(reply), 3):
            kind, doc_project, doc_agent = reply[index + 2].decode().split("\t")
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
