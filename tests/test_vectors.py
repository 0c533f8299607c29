"""Vectors beside BM25 (the vectors extra): kept in step with the search documents, scoped
like BM25, followed by every process, fused with BM25 above a similarity floor."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis

from baton.server.model.keys import Keys
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from tests.conftest import as_agent
from tests.retrieval_set import MEMORIES

pytestmark = pytest.mark.anyio

PARAPHRASE = "when do phone app versions go out"  # no word of the memory it wants
WANTED = next(m.content for m in MEMORIES if m.key == "mobile-release-train")
UNRELATED = "the weather in paris"


@pytest.fixture
async def hybrid(data_url: str) -> AsyncIterator[Backend]:
    """A process with vectors on (BATON_VECTORS=on), on the data server."""
    async with open_backend(Settings(redis_url=data_url, vectors="on"), dispatch=False) as opened:
        yield opened


@pytest.fixture
async def lexical(data_url: str) -> AsyncIterator[Backend]:
    """A process with vectors off, on the same data."""
    async with open_backend(Settings(redis_url=data_url, vectors="off"), dispatch=False) as opened:
        yield opened


async def saved(backend: Backend, content: str, project: str | None = "mobile") -> str:
    memory = (await backend.namespace("default").memories.save(content, project=project)).memory
    assert memory is not None
    return memory.id


async def found(
    backend: Backend, query: str, project: str | None = "mobile", **filters: str
) -> list[str]:
    recalled = await backend.namespace("default").memories.recall(
        query, limit=10, project=project, **filters
    )
    return [hit.id for hit in recalled.results]


async def test_a_paraphrase_is_found_and_an_unrelated_query_finds_nothing(
    hybrid: Backend, lexical: Backend
) -> None:
    """A query sharing no word with the memory it wants misses it by BM25 alone and finds
    it with vectors; a query about something else finds nothing (every memory is below the
    similarity floor); a query BM25 answers keeps BM25's first answer first."""
    for memory in MEMORIES:
        if memory.project == "mobile":
            await saved(hybrid, memory.content)
    wanted = [
        m.id for m in await hybrid.namespace("default").memories.latest() if m.content == WANTED
    ]
    assert wanted[0] not in await found(lexical, PARAPHRASE)
    assert wanted[0] in (await found(hybrid, PARAPHRASE))[:5]
    assert await found(hybrid, UNRELATED) == []
    assert (await found(hybrid, "offline cart changes"))[:1] == (
        await found(lexical, "offline cart changes")
    )[:1]


async def test_vectors_are_kept_in_step_with_the_memories(
    hybrid: Backend, data_redis: redis.Redis
) -> None:
    """A memory's vector is stored when it is saved, replaced when it is updated, and taken
    out when it is superseded or forgotten, with its search document."""
    vectors = Keys().search_vectors
    memories = hybrid.namespace("default").memories
    first = await saved(hybrid, "Self-hosted runners ran out of disk space on Mondays")
    stored = data_redis.hget(vectors, f"m:{first}")
    assert stored is not None and len(stored) == 64 * 2  # float16
    await memories.update(first, caller=as_agent("ops"), content="Runners now prune images nightly")
    assert data_redis.hget(vectors, f"m:{first}") not in (None, stored)
    second = await saved(hybrid, "Runners now prune images nightly, every night")
    assert not data_redis.hexists(vectors, f"m:{first}")  # superseded by the second
    await memories.forget(caller=as_agent("ops"), memory_id=second, reason="test")
    assert data_redis.hlen(vectors) == 0


async def test_vector_hits_are_scoped_like_bm25(hybrid: Backend) -> None:
    """A memory of another project, or another agent's, never comes back through the
    vectors of a search scoped to a project or an agent; shared memories do."""
    other = await saved(hybrid, WANTED, project="infra")
    shared = await saved(hybrid, WANTED + " Shared with every project.", project=None)
    assert other not in await found(hybrid, PARAPHRASE, project="mobile")
    assert shared in await found(hybrid, PARAPHRASE, project="mobile")
    mine = (
        await hybrid.namespace("default").memories.save(WANTED, project="mobile", agent_id="alice")
    ).memory
    assert mine is not None
    assert mine.id not in await found(hybrid, PARAPHRASE, project="mobile", agent_id="bob")


async def test_another_process_sees_what_was_saved_and_forgotten(
    data_url: str, hybrid: Backend, data_redis: redis.Redis
) -> None:
    """Each process keeps its own copy of the vectors: one that already searched finds a
    memory another process saved since, and no longer finds it once forgotten, also after
    the changes it had not read were trimmed from the stream."""
    await saved(hybrid, "Deep links use the scheme shop:// and universal links")
    async with open_backend(Settings(redis_url=data_url, vectors="on"), dispatch=False) as other:
        assert await found(hybrid, PARAPHRASE) == []
        memory = await saved(other, WANTED)
        assert memory in await found(hybrid, PARAPHRASE)
        await other.namespace("default").memories.forget(
            caller=as_agent("ops"), memory_id=memory, reason="test"
        )
        later = await saved(other, WANTED + " Again.")
        data_redis.xtrim(Keys().search_changes, maxlen=0)  # what the copy had not read is gone
        assert await found(hybrid, PARAPHRASE) == [later]


async def test_without_vectors_nothing_is_embedded(
    lexical: Backend, data_redis: redis.Redis
) -> None:
    """With BATON_VECTORS=off a save stores no vector and search is BM25 alone."""
    await saved(lexical, WANTED)
    assert data_redis.hlen(Keys().search_vectors) == 0
    assert await found(lexical, PARAPHRASE) == []


async def test_the_copy_ranks_like_the_exact_cosine_and_holds_what_it_needs(
    hybrid: Backend, data_redis: redis.Redis
) -> None:
    """A process's copy keeps each vector in a quarter of its float32 size, yet the
    similarities it answers are the cosines of the stored vectors within 0.01, in the same
    order; filled from the namespace it holds one row per document (no room doubled)."""
    import numpy as np

    for memory in MEMORIES:
        await saved(hybrid, memory.content, memory.project)
    vectors = hybrid.vectors
    assert vectors is not None
    keys = Keys()
    stored = {
        doc.decode(): np.frombuffer(vector, dtype="<f2").astype(np.float32)
        for doc, vector in data_redis.hgetall(keys.search_vectors).items()
    }
    fresh = vectors.copies.pop(keys.base, None)  # the next search fills a new copy
    assert fresh is not None
    copy = await vectors.copy_of(hybrid.namespace("default").redis, keys)
    assert len(copy.matrix) == len(stored) == len(MEMORIES)
    for query in ("when do phone app versions go out", "flaky integration test", "payments"):
        near = await vectors.nearest(copy, query, 20, frozenset(), None, None)
        embedded = vectors.embedder.embed(query)
        assert embedded is not None and near
        exact = {doc: float(vector @ embedded) for doc, vector in stored.items()}
        assert all(abs(hit.similarity - exact[hit.doc]) < 0.01 for hit in near)
        ranked = sorted(exact, key=lambda doc: -exact[doc])[: len(near)]
        assert [hit.doc for hit in near][:3] == ranked[:3]
