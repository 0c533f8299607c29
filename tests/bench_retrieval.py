"""make bench's retrieval table: Baton's memory search on a labelled set
(``tests/retrieval_set.py``) next to a textbook BM25 over the same texts in the same run.

The textbook BM25 is bm25s with Lucene's variant, its English stopwords and the Snowball
English stemmer (PyStemmer), searching all memories and keeping the query's project and
the shared ones, as Baton's project filter does. Baton is searched through the memory
store (``memory_recall``) on the embedded Valkey, each query with its project.

Measures per system: recall@5 (the share of each query's relevant memories in its first
5, averaged), MRR (of the first relevant one), nDCG@10 (binary relevance), contamination
(results from another project, all queries together), and p50/p95 of one query; then
recall@5 by kind of query. Baton's rankings are also compared across two loads of the same
memories (their ids differ): they must be identical.
"""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from statistics import quantiles

import bm25s
import Stemmer

from baton.server.runtime.embedded import EmbeddedServer
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from tests.retrieval_set import MEMORIES, QUERIES, UNRELATED, Query

Ranking = list[str]  # memory keys, best first
REPEATS = 5  # each query is timed this many times
PROJECT_OF = {memory.key: memory.project for memory in MEMORIES}


def recall_at(ranking: Ranking, query: Query, depth: int) -> float:
    return len(set(ranking[:depth]) & set(query.relevant)) / len(query.relevant)


def reciprocal_rank(ranking: Ranking, query: Query) -> float:
    ranks = [rank for rank, key in enumerate(ranking, 1) if key in query.relevant]
    return 1 / ranks[0] if ranks else 0.0


def ndcg_at(ranking: Ranking, query: Query, depth: int) -> float:
    gain = sum(
        1 / math.log2(rank + 1)
        for rank, key in enumerate(ranking[:depth], 1)
        if key in query.relevant
    )
    ideal = sum(1 / math.log2(rank + 1) for rank in range(1, min(len(query.relevant), depth) + 1))
    return gain / ideal


def contamination(ranking: Ranking, query: Query) -> int:
    return sum(PROJECT_OF[key] not in (None, query.project) for key in ranking)


class Result:
    """One system's rankings for every query, with the time each query took."""

    def __init__(
        self, name: str, rankings: list[Ranking], seconds: list[float], noise: int
    ) -> None:
        self.name, self.rankings, self.seconds, self.noise = name, rankings, seconds, noise

    def mean(self, measure: Callable[[Ranking, Query], float], kind: str | None = None) -> float:
        pairs = [
            (ranking, query)
            for ranking, query in zip(self.rankings, QUERIES, strict=True)
            if kind is None or query.kind == kind
        ]
        return sum(measure(ranking, query) for ranking, query in pairs) / len(pairs)

    def row(self) -> str:
        cuts = quantiles([s * 1000 for s in self.seconds], n=20)
        contaminated = sum(contamination(r, q) for r, q in zip(self.rankings, QUERIES, strict=True))
        return (
            f"| {self.name} | {self.mean(lambda r, q: recall_at(r, q, 5)):.3f} "
            f"| {self.mean(reciprocal_rank):.3f} | {self.mean(lambda r, q: ndcg_at(r, q, 10)):.3f} "
            f"| {contaminated} | {self.noise} | {cuts[9]:.2f} / {cuts[18]:.2f} ms |"
        )


async def measured(name: str, search: Callable[[Query], Awaitable[Ranking]]) -> Result:
    """Every query timed ``REPEATS`` times, and the results the unrelated queries get."""
    rankings, seconds = [], []
    for query in QUERIES:
        for _ in range(REPEATS):
            started = time.perf_counter()
            ranking = await search(query)
            seconds.append(time.perf_counter() - started)
        rankings.append(ranking)
    noise = sum([len(await search(query)) for query in UNRELATED])
    return Result(name, rankings, seconds, noise)


async def baton_search(backend: Backend, namespace: str) -> Callable[[Query], Awaitable[Ranking]]:
    """Load the set into ``namespace`` (in order) and answer a query's keys, best first."""
    memories = backend.namespace(namespace).memories
    key_of = {}
    for memory in MEMORIES:
        saved = await memories.save(memory.content, project=memory.project)
        assert saved.memory is not None and saved.memory.parent_id is None, memory.key
        key_of[saved.memory.id] = memory.key

    async def search(query: Query) -> Ranking:
        found = await memories.recall(query.text, limit=10, project=query.project)
        return [key_of[hit.id] for hit in found.results]

    return search


def textbook_search() -> Callable[[Query], Awaitable[Ranking]]:
    """bm25s (Lucene's BM25, English stopwords, Snowball), the same texts."""
    stemmer = Stemmer.Stemmer("english")
    corpus = bm25s.tokenize(
        [memory.content for memory in MEMORIES],
        stopwords="en",
        stemmer=stemmer,
        show_progress=False,
    )
    retriever = bm25s.BM25(method="lucene")
    retriever.index(corpus, show_progress=False)

    async def search(query: Query) -> Ranking:
        tokens = bm25s.tokenize(
            query.text, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )
        scores = retriever.get_scores(tokens[0]) if tokens and tokens[0] else [0.0] * len(MEMORIES)
        ranked = sorted(range(len(MEMORIES)), key=lambda i: -scores[i])
        return [
            MEMORIES[i].key
            for i in ranked
            if scores[i] > 0 and MEMORIES[i].project in (None, query.project)
        ][:10]

    return search


async def retrieval_table(lexical: Backend, hybrid: Backend | None) -> list[str]:
    """The retrieval tables (markdown lines), printed as they are measured: Baton with
    BM25 alone (``lexical``), Baton with vectors (``hybrid``, when the vectors extra is
    installed) and the textbook BM25."""
    results = [await measured("Baton, BM25 alone", await baton_search(lexical, "retrieval-a"))]
    reloaded = await measured("again", await baton_search(lexical, "retrieval-b"))
    if hybrid is not None:
        hybrid_search = await baton_search(hybrid, "retrieval-c")
        results.append(await measured("Baton, BM25 + vectors", hybrid_search))
    textbook = "textbook BM25 (bm25s, Lucene, stopwords, Snowball)"
    results.append(await measured(textbook, textbook_search()))
    for result in results:
        print(result.row(), flush=True)
    same = results[0].rankings == reloaded.rankings
    kinds = list(dict.fromkeys(query.kind for query in QUERIES))
    counts = {kind: sum(query.kind == kind for query in QUERIES) for kind in kinds}
    lines = [
        "### Retrieval",
        "",
        f"A labelled set of {len(MEMORIES)} memories of coding-agent work in three projects "
        f"and {len(QUERIES)} queries (`tests/retrieval_set.py`), each searched within its "
        "project; the textbook BM25 searches the same texts in the same run. recall@5: the "
        "share of a query's relevant memories in its first 5; MRR: of the first relevant one; "
        "nDCG@10: binary relevance; contamination: results from another project; unrelated: "
        f"the results of {len(UNRELATED)} queries about nothing saved (cooking, weather, pets, "
        "sport), all noise; the time of "
        "one query (Baton through the memory store on the embedded Valkey, the textbook in "
        f"memory). The same memories loaded twice rank "
        f"{'identically' if same else '**differently**'} in Baton.",
        "",
        "| system | recall@5 | MRR | nDCG@10 | contamination | unrelated | p50 / p95 |",
        "|---|---|---|---|---|---|---|",
        *(result.row() for result in results),
        "",
        "| recall@5 by kind of query | " + " | ".join(f"{k} ({counts[k]})" for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
        *(
            f"| {result.name} | "
            + " | ".join(f"{result.mean(lambda r, q: recall_at(r, q, 5), k):.2f}" for k in kinds)
            + " |"
            for result in results
        ),
    ]
    return lines


async def main() -> None:
    """The retrieval table alone, on an embedded Valkey of its own (make bench runs it too),
    with the vectors settings of the environment (BATON_VECTORS, BATON_VECTOR_FLOOR)."""
    work = Path(tempfile.mkdtemp(prefix="baton-retrieval-"))
    embedded = EmbeddedServer(work)
    url = embedded.ensure_running()
    configured = Settings.from_env({**os.environ, "BATON_REDIS_URL": url})
    try:
        async with (
            open_backend(replace(configured, vectors="off"), dispatch=False) as lexical,
            open_backend(configured, dispatch=False) as hybrid,
        ):
            print("\n".join(await retrieval_table(lexical, hybrid if hybrid.vectors else None)))
    finally:
        embedded.stop()


if __name__ == "__main__":
    asyncio.run(main())
