"""A BM25 full-text index kept in Redis, shared by every API replica and worker.

Documents are memories (``m:<id>``), observations (``o:<session>:<id>``) and the text of
fact values (``f:<ref>``). The index is updated in the same request as the write, so what
was saved is found at once. All keys of a namespace's index share one hash tag
(``{idx:<ns>}``, see ``keys.py``), so a pipeline of index updates stays on one node of a
cluster.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack
import msgspec
from redis.asyncio import Redis

from baton.server.keys import Keys

K1 = 1.2
B = 0.75
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

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.docs_key = keys.search_docs
        self.stats_key = keys.search_stats
        self.term_prefix = keys.search_term_prefix

    def queue_index(
        self, pipe: Any, doc: str, text: str, *, kind: str, project: str | None = None,
        agent: str | None = None, previous: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """Queue the commands that (re)index ``doc`` on ``pipe``; ``previous`` is its
        current entry (from :meth:`entries`) when it is being replaced."""
        if previous is not None:
            self._queue_remove(pipe, doc, previous)
        terms = Counter(tokenize(text))
        length = sum(terms.values())
        entry = {"kind": kind, "project": project or "", "agent": agent or "", "len": length,
                 "terms": sorted(terms)}  # fmt: skip
        pipe.hset(self.docs_key, doc, msgpack.packb(entry))
        pipe.hincrby(self.stats_key, "docs", 1)
        pipe.hincrby(self.stats_key, "total_length", length)
        for term, count in terms.items():
            pipe.zadd(self.term_prefix + term, {doc: count})

    def _queue_remove(self, pipe: Any, doc: str, entry: dict[str, Any]) -> None:
        pipe.hdel(self.docs_key, doc)
        pipe.hincrby(self.stats_key, "docs", -1)
        pipe.hincrby(self.stats_key, "total_length", -int(entry["len"]))
        for term in entry["terms"]:
            pipe.zrem(self.term_prefix + term, doc)

    async def entries(self, docs: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The index entries of ``docs`` that exist."""
        if not docs:
            return {}
        raw = await self.redis.hmget(self.docs_key, list(docs))
        return {doc: msgpack.unpackb(item) for doc, item in zip(docs, raw, strict=True) if item}

    async def index(self, doc: str, text: str, **fields: Any) -> None:
        previous = (await self.entries([doc])).get(doc)
        pipe = self.redis.pipeline(transaction=False)
        self.queue_index(pipe, doc, text, previous=previous, **fields)
        await pipe.execute()

    async def remove(self, docs: Iterable[str]) -> int:
        found = await self.entries(list(docs))
        if not found:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for doc, entry in found.items():
            self._queue_remove(pipe, doc, entry)
        await pipe.execute()
        return len(found)

    async def search(
        self, query: str, *, limit: int = 10, kinds: Sequence[str] = (),
        project: str | None = None, agent: str | None = None,
    ) -> list[Hit]:  # fmt: skip
        """The best ``limit`` documents for ``query`` by BM25 (k1 1.2, b 0.75).

        With ``project``, only documents of that project or of none (unscoped memories are
        shared); with ``agent``, only that agent's documents.
        """
        terms = list(dict.fromkeys(tokenize(query)))
        if not terms:
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.stats_key, "docs", "total_length")
        for term in terms:
            pipe.zrange(self.term_prefix + term, 0, -1, withscores=True)
        stats, *postings = await pipe.execute()
        total_docs = int(stats[0] or 0)
        if not total_docs:
            return []
        average = int(stats[1] or 0) / total_docs or 1.0
        candidates = {raw.decode() for posting in postings for raw, _ in posting}
        entries = await self.entries(sorted(candidates))
        allowed = {
            doc: entry for doc, entry in entries.items()
            if (not kinds or entry["kind"] in kinds)
            and (project is None or entry["project"] in ("", project))
            and (agent is None or entry["agent"] == agent)
        }  # fmt: skip
        scores: dict[str, float] = {}
        for posting in postings:
            frequency = len(posting)
            idf = math.log(1 + (total_docs - frequency + 0.5) / (frequency + 0.5))
            for raw, tf in posting:
                doc = raw.decode()
                entry = allowed.get(doc)
                if entry is None:
                    continue
                norm = K1 * (1 - B + B * entry["len"] / average)
                scores[doc] = scores.get(doc, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [
            Hit(doc=doc, kind=allowed[doc]["kind"], score=round(score, 4),
                project=allowed[doc]["project"] or None, agent=allowed[doc]["agent"] or None)  # fmt: skip
            for doc, score in best
        ]
