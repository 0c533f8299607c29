"""Sessions, observations, saved memories and search against the real embedded server."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import pytest
import redis

from baton.server.model.errors import Forbidden, InvalidInput, NotFound, QuotaReached
from baton.server.model.keys import Keys
from baton.server.model.memory_models import ObserveInput, SessionEndInput, SessionStartInput
from baton.server.model.models import Observation, Session
from baton.server.operations import OBSERVE, SAVE_MEMORY
from baton.server.retrieval.lexical import terms
from baton.server.retrieval.search import MAX_QUERY_TERMS, PRUNE_ABOVE_POSTINGS, SearchIndex
from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import Limits
from baton.server.stores.backend import Backend
from baton.server.stores.memories import MemoryStore, jaccard
from baton.server.stores.observations import compress, concepts_of, open_question
from baton.server.stores.records import RecordStore
from baton.server.stores.sessions import SessionStore, within
from tests.conftest import as_agent

pytestmark = pytest.mark.anyio

BASE = "the refresh token rotation stores every device token in redis with a ttl"


@pytest.fixture
def memories(store: RecordStore) -> MemoryStore:
    return store.ns.memories


@pytest.fixture
def sessions(store: RecordStore) -> SessionStore:
    return store.ns.sessions


async def observe(
    sessions: SessionStore, session_id: str, cwd: str, hook: str = "post_tool_use", **data: object
) -> str:
    observed = await sessions.observe(
        ObserveInput(
            hook_type=hook,
            session_id=session_id,
            project="app",
            cwd=cwd,
            timestamp="2026-11-30T10:00:00Z",
            data=data,
        ),
        caller=as_agent("claude"),
    )
    return observed.observation.id


# -- search ----------------------------------------------------------------------------------


async def test_saved_memory_is_found_immediately(memories: MemoryStore) -> None:
    """memory_save returns after indexing: the next recall finds it, best match first."""
    await memories.save("Use pnpm, never npm, in the web workspace", type="preference")
    saved = await memories.save(BASE, type="architecture", concepts="jwt, rotation")
    assert saved.success and saved.memory is not None
    found = await memories.recall("device token rotation")
    assert [hit.id for hit in found.results][:1] == [saved.memory.id]
    assert found.results[0].concepts == ["jwt", "rotation"]


async def zipf_corpus(index: SearchIndex, count: int) -> list[str]:
    """Index ``count`` documents of 4 to 20 words over a Zipf-like vocabulary (common words
    are very common, as in real notes), of two kinds and three projects (none, p1, p2);
    returns 60 queries of one to three words."""
    rng = random.Random(11)
    vocabulary = [f"w{n}" for n in range(400)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    # One at a time: concurrent connection set-up makes redis-py's asyncio cluster client
    # now and then meet a closed writer ('NoneType' object has no attribute 'writelines'),
    # the family of redis/redis-py#3546 and #4287.
    for n in range(count):
        words = rng.choices(vocabulary, weights, k=rng.randint(4, 20))
        await index.index(
            f"m:{n}",
            " ".join(words),
            kind=("memory", "observation")[n % 2],
            project=(None, "p1", "p2")[n % 3],
        )
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(1, 3))) for _ in range(60)]


async def test_a_long_query_is_scored_on_its_rarest_terms(memories: MemoryStore) -> None:
    """A query of thousands of words (a pasted log, a whole memory) is scored on its 32 most
    selective terms (its rarest in the index; words no document holds are left out): it
    answers exactly as those terms alone do."""
    index = memories.index
    await zipf_corpus(index, 300)
    await index.index("m:rare", "w1 w2 quokka zebrafish", kind="memory")
    common = " ".join(f"w{n}" for n in range(400))
    query = f"quokka zebrafish {common} {' '.join(f'unseen{n}' for n in range(3000))}"
    hits = await index.search(query, limit=10)
    kept = await index.selective(list(dict.fromkeys(terms(query))))
    assert len(kept) == MAX_QUERY_TERMS and {"quokka", "zebrafish"} <= set(kept)
    assert not any(term.startswith("unseen") for term in kept) and hits
    assert [(h.doc, h.score) for h in await index.search(" ".join(kept), limit=10)] == [
        (h.doc, h.score) for h in hits
    ]


async def test_a_search_past_its_work_budget_answers_exact_scores(memories: MemoryStore) -> None:
    """A search that reaches its work budget stops and answers from the best parts of its
    terms' postings: at most ``limit`` hits, best first, each with its exact BM25 score
    (the same as when every posting is scored), and they pass the filters."""
    index = memories.index
    queries = await zipf_corpus(index, 2000)
    for query in queries[:20]:
        index.work_budget = 10**12
        exact = {h.doc: h.score for h in await index.search(query, limit=10**6, project="p1")}
        index.work_budget, index.prune_above = 50, 0
        cut = await index.search(query, limit=10, project="p1")
        index.prune_above = PRUNE_ABOVE_POSTINGS
        assert cut and len(cut) <= 10
        assert [h.score for h in cut] == sorted((h.score for h in cut), reverse=True)
        assert all(h.score == pytest.approx(exact[h.doc], abs=2e-4) for h in cut)
        assert all(h.project in (None, "p1") for h in cut)


async def test_the_work_budget_holds_for_a_large_limit(memories: MemoryStore) -> None:
    """The work budget bounds every read, not only each round: a query of 32 common words
    asking for 500 hits scores at most as many documents as the budget can pay for (a
    document scored costs one unit per term: its postings read plus its parts looked up),
    and still answers."""
    index = memories.index
    await zipf_corpus(index, 1500)
    query = " ".join(f"w{n}" for n in range(MAX_QUERY_TERMS))
    index.work_budget, index.prune_above = 3300, 0
    hits = await index.search(query, limit=500)
    index.prune_above = PRUNE_ABOVE_POSTINGS
    assert 0 < len(hits) <= 3300 // MAX_QUERY_TERMS


async def test_a_search_merges_postings_only_within_what_is_left_of_its_budget(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """A search that gives up on reading postings best part first falls back to merging
    them all only when that merge fits in what is left of its work budget; past it, it
    answers from what it read (no ZUNIONSTORE)."""
    client = async_redis(redis_url)
    index = Backend(client, Limits()).namespace("default").search
    rng = random.Random(5)
    for n in range(90):  # each document holds one of the three terms: none ranks high on all
        words = [f"w{n % 3}"] * rng.randint(1, 6) + ["filler"] * rng.randint(0, 40)
        await index.index(f"m:{n}", " ".join(words), kind="memory")
    # The first round reads 10 postings of each term and looks up their other two parts
    # (90 units of work), a third of the postings: the merge of all 90 would pass the 60
    # units left, so it reads on until the budget is spent.
    index.prune_above, index.work_budget = 0, 150
    sync_redis.config_resetstat()
    assert await index.search("w0 w1 w2", limit=10)
    assert "cmdstat_zunionstore" not in sync_redis.info("commandstats")
    await client.aclose()


async def test_searches_take_turns_and_keep_to_their_share(memories: MemoryStore) -> None:
    """While a search waits its turn, the one before holds the turn on for the rest of its
    share of the time (BATON_SEARCH_SHARE) after answering; a search nobody waits behind
    gives its turn back at once, also when it failed."""
    index = memories.index
    await zipf_corpus(index, 200)
    index.turns.share = 0.01  # a waiter starts 99 times as long after the search before it
    first = asyncio.create_task(index.search("w1 w2", limit=5))
    second = asyncio.create_task(index.search("w3", limit=5))
    assert await first
    assert index.turns.waiting == 1 and not second.done()
    assert await second
    assert not index.turns.free.locked()  # nobody waited behind the second
    with pytest.raises(TypeError):
        await index.search(None, limit=5)  # type: ignore[arg-type]
    assert not index.turns.free.locked()


@pytest.mark.parametrize("filters", [{}, {"kinds": ["memory"]}, {"project": "p1"}])
async def test_pruned_search_ranks_exactly_like_the_full_union(
    memories: MemoryStore, filters: dict[str, Any]
) -> None:
    """The threshold algorithm that skips most of the common words' postings returns the
    same ranking as scoring every posting, with and without kind and project filters: same
    scores, and the same documents above the last score (documents tied with it may
    differ)."""
    index = memories.index
    queries = await zipf_corpus(index, 2000)
    for query in queries:
        index.prune_above = 10**12
        full = await index.search(query, limit=10, **filters)
        index.prune_above = 0
        pruned = await index.search(query, limit=10, **filters)
        assert [hit.score for hit in pruned] == pytest.approx([hit.score for hit in full], abs=2e-4)
        if not full:
            continue
        floor = full[-1].score + 2e-4
        assert {h.doc for h in pruned if h.score > floor} == {
            h.doc for h in full if h.score > floor
        }
        assert all(filters.get("project") in (None, h.project) or h.project is None for h in pruned)
        assert all(h.kind in filters.get("kinds", [h.kind]) for h in pruned)


async def test_common_word_queries_do_not_merge_whole_postings(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """Queries of common words are answered from the heads of their postings: no
    ZUNIONSTORE over tens of thousands of entries (what made them slow)."""
    client = async_redis(redis_url)
    index = Backend(client, Limits()).namespace("default").search
    await zipf_corpus(index, 2000)
    sync_redis.config_resetstat()
    for query in ("w0 w1", "w0 w2 w3", "w1 w2 w7"):
        assert len(await index.search(query, limit=10)) == 10
    assert "cmdstat_zunionstore" not in sync_redis.info("commandstats")
    await client.aclose()


def index_state(sync_redis: redis.Redis, namespace: str, terms: list[str]) -> list[Any]:
    """Everything a namespace's search index holds for ``terms``: documents, meta, totals
    and each term's postings (which documents hold it)."""
    keys = Keys(namespace)
    return [
        sync_redis.hgetall(keys.search_docs),
        sync_redis.hgetall(keys.search_meta),
        sync_redis.hgetall(keys.search_stats),
        *(sorted(sync_redis.zrange(keys.search_term(term), 0, -1)) for term in terms),
    ]


async def test_reindexing_leaves_what_indexing_the_new_text_would(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """A document indexed again (terms kept, dropped and added, then one removed) leaves
    the index as indexing only the final texts would: no stale posting, the same postings,
    totals (the count of distinct terms too) and document entries. (A posting's score
    follows the average document length when it was written.)"""
    client = async_redis(redis_url)
    backend = Backend(client, Limits())
    edited, fresh = backend.namespace("edited").search, backend.namespace("fresh").search
    await edited.index("m:1", "alpha beta gamma gamma", kind="memory", project="p1")
    await edited.index("m:2", "beta delta", kind="memory")
    await edited.index("m:3", "gone soon", kind="memory")
    await edited.index("m:1", "beta gamma epsilon", kind="observation", agent="a")
    await edited.index("m:2", "beta delta", kind="memory")
    await edited.remove(["m:3"])
    await fresh.index("m:1", "beta gamma epsilon", kind="observation", agent="a")
    await fresh.index("m:2", "beta delta", kind="memory")

    terms = ["alpha", "beta", "gamma", "delta", "epsilon", "gone", "soon"]
    assert index_state(sync_redis, "edited", terms) == index_state(sync_redis, "fresh", terms)
    assert index_state(sync_redis, "edited", terms)[2] == {
        b"docs": b"2",
        b"total_length": b"5",
        b"terms": b"4",  # beta gamma epsilon delta: one posting key each
    }
    await client.aclose()


async def test_empty_content_is_not_saved(memories: MemoryStore) -> None:
    """Empty content gives success false and 'content is required'; content that is not a
    string never reaches the store (the operation's input refuses it, naming the field)."""
    for content in ("", "   "):
        saved = await memories.save(content)
        assert (saved.success, saved.error) == (False, "content is required")
    for content in (None, 42):
        with pytest.raises(InvalidInput) as caught:
            SAVE_MEMORY.decode({"content": content})
        assert caught.value.field == "content"


async def test_near_duplicate_supersedes_with_a_new_id(
    memories: MemoryStore, store: RecordStore
) -> None:
    """Jaccard > 0.7: as agentmemory does, the new content is a new memory (version 2, its
    parentId/supersedes naming the old one); the old one stays readable with both contents
    in its record's chain, is no longer latest, and only the new content is searchable."""
    first = await memories.save(BASE + " and a sliding expiry window")
    second = await memories.save(BASE + " and a fixed expiry window")
    assert first.memory and second.memory
    assert jaccard(first.memory.content, second.memory.content) > 0.7
    assert second.memory.id != first.memory.id
    assert (second.memory.version, second.memory.parent_id, second.memory.supersedes) == (
        2,
        first.memory.id,
        [first.memory.id],
    )
    old = await memories.get(first.memory.id)
    assert (old.is_latest, old.superseded_by, old.content) == (
        False,
        second.memory.id,
        first.memory.content,
    )
    history = await store.history(f"memory/{first.memory.id}")
    assert all(v.chain_ok for v in history.versions) and len(history.versions) == 2
    assert [hit.text for hit in (await memories.recall("sliding expiry")).results] == [
        second.memory.content
    ]
    third = await memories.save(BASE + " and a fixed expiry window!")
    assert third.memory and (third.memory.version, third.memory.parent_id) == (3, second.memory.id)


def test_dedupe_words_ignore_punctuation_and_keep_short_ids() -> None:
    """Punctuation does not defeat dedupe; short tokens with digits keep memories apart."""
    assert jaccard("restart the payment service.", "restart the payment service") == 1.0
    assert jaccard("rotate x4 kestrel keys", "rotate x7 kestrel keys") < 0.7


async def test_similar_memory_is_hinted_not_superseded(memories: MemoryStore) -> None:
    """0.4 < Jaccard <= 0.7: a new memory, with a similarTo hint rounded to 2 decimals."""
    first = await memories.save(BASE)
    second = await memories.save("the refresh token rotation stores every session in postgres")
    assert first.memory and second.memory and second.similar_to
    assert second.memory.id != first.memory.id
    similarity = jaccard(first.memory.content, second.memory.content)
    assert 0.4 < similarity <= 0.7
    assert (second.similar_to.id, second.similar_to.similarity) == (
        first.memory.id,
        round(similarity, 2),
    )


async def test_another_agents_near_copy_never_supersedes_a_memory(
    memories: MemoryStore, store: RecordStore
) -> None:
    """A near-copy saved by another agent is a new memory with a hint: bob's memory stays
    latest, unchanged and searchable. A memory record cannot be written as a record."""
    bobs = await memories.save(BASE + " and a sliding expiry window", agent_id="bob")
    alices = await memories.save(BASE + " and a sliding expiry window!", agent_id="alice")
    assert bobs.memory and alices.memory and alices.similar_to
    assert (alices.memory.version, alices.memory.supersedes) == (1, [])
    assert alices.similar_to.id == bobs.memory.id
    kept = await memories.get(bobs.memory.id)
    assert (kept.is_latest, kept.superseded_by) == (True, None)
    found = await memories.recall("sliding expiry", agent_id="bob")
    assert [hit.id for hit in found.results] == [bobs.memory.id]
    with pytest.raises(Forbidden):
        await store.remember(f"memory/{bobs.memory.id}", {"agent_id": "alice"}, agent="alice")
    assert (await store.recall(f"memory/{bobs.memory.id}")).version == 1


async def test_different_explicit_projects_never_supersede(memories: MemoryStore) -> None:
    """The same content in two explicit projects stays two memories; an unscoped old memory
    is a wildcard and is superseded by a project's save; an unscoped save never supersedes a
    project's memory (a memory never leaves its project)."""
    one = await memories.save(BASE, project="alpha")
    two = await memories.save(BASE, project="beta")
    assert one.memory and two.memory and one.memory.id != two.memory.id
    shared = await memories.save("a note that belongs to every project we run")
    again = await memories.save("a note that belongs to every project we run", project="alpha")
    assert shared.memory and again.memory and again.memory.supersedes == [shared.memory.id]
    unscoped = await memories.save(BASE)
    assert unscoped.memory and unscoped.memory.supersedes == []
    assert (await memories.get(one.memory.id)).is_latest


async def test_agent_filtered_recall_sees_shared_memories(memories: MemoryStore) -> None:
    """Recall filtered by agent returns that agent's memories and shared (unscoped) ones."""
    await memories.save("deploy with blue green switch", agent_id="alice")
    await memories.save("deploy with rolling restarts", agent_id="bob")
    await memories.save("deploy only on weekdays")
    found = await memories.recall("deploy", agent_id="alice")
    assert sorted(hit.text for hit in found.results) == [
        "deploy only on weekdays",
        "deploy with blue green switch",
    ]


async def test_project_filter_never_leaks_another_projects_memories(
    memories: MemoryStore,
) -> None:
    """Recall filtered by project returns that project's memories and unscoped ones only."""
    await memories.save("deploy with blue green switch", project="alpha")
    await memories.save("deploy with rolling restarts", project="beta")
    await memories.save("deploy only on weekdays")
    found = await memories.recall("deploy", project="alpha")
    assert sorted(hit.project or "-" for hit in found.results) == ["-", "alpha"]


async def test_formats_and_token_budget(memories: MemoryStore) -> None:
    """compact shows titles, narrative adds a text block, a token budget truncates."""
    topics = ["redis keys", "http etags", "cdn purges", "browser storage", "orm sessions"]
    for topic in topics:
        await memories.save(
            f"cache invalidation for {topic}: "
            + " ".join(f"{topic.split()[0]}{n}" for n in range(60))
        )
    compact = await memories.recall("cache invalidation", format="compact")
    assert all(hit.text == hit.title for hit in compact.results)
    narrative = await memories.recall("cache invalidation", format="narrative")
    assert narrative.narrative and narrative.narrative.count("- [memory]") == 5
    budget = await memories.recall("cache invalidation", token_budget=150)
    assert budget.truncated and budget.count < 5 and budget.tokens_used <= 150


async def test_forgotten_memory_is_never_found_and_chain_still_verifies(
    memories: MemoryStore, store: RecordStore
) -> None:
    """Forget removes the memory from search and reads, writes an audit entry, and leaves a
    tombstone whose hash covers the original: verify stays clean."""
    saved = await memories.save("temporary credentials live in the vault under ops/tmp")
    assert saved.memory
    result = await memories.forget(
        caller=as_agent("claude"), memory_id=saved.memory.id, reason="leaked"
    )
    assert result.memories == [saved.memory.id]
    assert (await memories.recall("temporary credentials vault")).results == []
    with pytest.raises(NotFound, match="forgotten"):
        await memories.get(saved.memory.id)
    history = await store.history(f"memory/{saved.memory.id}")
    assert history.versions[0].value is None
    assert history.versions[0].forgotten is not None and history.versions[0].chain_ok
    assert (await store.ns.verifier.stats(verify=True)).broken == []
    [entry] = await memories.ns.audit.newest(50)
    assert (entry.action, entry.target, entry.reason, entry.agent) == (
        "forget",
        f"memory/{saved.memory.id}",
        "leaked",
        "claude",
    )


async def test_ttl_expiry_forgets_and_audits(memories: MemoryStore) -> None:
    """A memory past its ttl_days is forgotten by the sweep, with an audit entry."""
    saved = await memories.save("short lived fact about the staging database", ttl_days=1e-6)
    keeper = await memories.save("the staging database runs postgres 16 on arm", ttl_days=30)
    assert saved.memory and keeper.memory and saved.memory.expires_at
    await asyncio.sleep(0.2)
    # The shared test API's own sweep (every few seconds, same code) may have been first.
    assert await memories.expire() in ([saved.memory.id], [])
    assert [hit.id for hit in (await memories.recall("staging database")).results] == [
        keeper.memory.id
    ]
    assert (await memories.ns.audit.newest(50))[0].reason == "ttl expired"


# -- sessions and observations --------------------------------------------------------------


def test_observations_are_compressed_without_an_llm() -> None:
    """Type from the tool name, title, narrative from input and output, files from input."""
    kind, title, narrative, files = compress(
        "post_tool_use",
        {
            "tool_name": "Edit",
            "tool_input": {"file_path": "src/auth.py", "old_string": "a"},
            "tool_response": "ok",
        },
    )
    assert (kind, title, files) == ("file_edit", "Edit", ["src/auth.py"])
    assert "src/auth.py" in narrative
    assert (
        compress("post_tool_use", {"tool_name": "Bash", "tool_input": {"command": "pytest"}})[0]
        == "command_run"
    )
    assert compress("prompt_submit", {"prompt": "why?"})[:3] == (
        "conversation",
        "prompt submit",
        "why?",
    )


async def test_identical_observations_within_five_minutes_are_stored_once(
    sessions: SessionStore,
) -> None:
    """The same event twice is deduplicated; observations are searchable at once."""
    first = await observe(
        sessions, "s1", "/repo", tool_name="Bash", tool_input={"command": "make lint"}
    )
    again = await observe(
        sessions, "s1", "/repo", tool_name="Bash", tool_input={"command": "make lint"}
    )
    assert first == again
    session = await sessions.get("s1")
    assert session.observation_count == 1
    hits = (await sessions.memories.recall("make lint")).results
    assert [(hit.kind, hit.id, hit.session) for hit in hits] == [("observation", first, "s1")]


async def test_session_end_and_idle_sweep(sessions: SessionStore) -> None:
    """End completes a session; ending again (agentmemory's Stop after every turn) moves its
    end time and summary on; an unknown one is ended: false. Idle sessions become abandoned
    and new activity reopens them."""
    await sessions.start(
        SessionStartInput(id="s-end", project="app", cwd="/repo"), caller=as_agent("claude")
    )
    first = await sessions.end(
        SessionEndInput(session_id="s-end", summary="turn one"), caller=as_agent("claude")
    )
    assert first.ended and first.session is not None and first.session.status == "completed"
    await asyncio.sleep(0.01)
    again = await sessions.end(
        SessionEndInput(session_id="s-end", summary="turn two"), caller=as_agent("claude")
    )
    assert again.ended and again.session is not None
    assert again.session.summary == "turn two"
    assert again.session.ended_at > first.session.ended_at  # type: ignore[operator]
    assert not (
        await sessions.end(SessionEndInput(session_id="s-unknown"), caller=as_agent("claude"))
    ).ended

    await sessions.start(
        SessionStartInput(id="s-idle", project="app", cwd="/repo"), caller=as_agent("claude")
    )
    await asyncio.sleep(0.05)
    assert await sessions.abandon_idle(0.01) == ["s-idle"]
    assert (await sessions.get("s-idle")).status == "abandoned"
    await observe(sessions, "s-idle", "/repo", tool_name="Read", tool_input={"path": "x.py"})
    assert (await sessions.get("s-idle")).status == "active"


def test_directory_boundary_matching() -> None:
    """Equal, descendant and ancestor directories match; siblings sharing a prefix do not."""
    assert within("/repo-a", "/repo-a")
    assert within("/repo-a/src", "/repo-a")
    assert within("/repo-a", "/repo-a/src")
    assert not within("/repo-a-staging", "/repo-a")
    assert not within("/repo-a", "/repo-a-staging")


async def test_worked_example_resumes_with_the_open_question_first(
    sessions: SessionStore,
) -> None:
    """The reference example: one completed session in /Users/dev/app; the answer opens with
    'Resuming 7f3a9c2 "Auth refresh rework".', puts the open question next, recalls with the
    session's concepts, and ends with one next step."""
    await sessions.start(
        SessionStartInput(
            id="7f3a9c21", project="app", cwd="/Users/dev/app", title="Auth refresh rework"
        ),
        caller=as_agent("claude"),
    )
    await observe(
        sessions,
        "7f3a9c21",
        "/Users/dev/app",
        tool_name="Edit",
        tool_input={"file_path": "src/auth/refresh.ts"},
    )
    await sessions.memories.save(
        "jwt-refresh-rotation: rotate on every use, 7 day family ttl", project="app"
    )
    await sessions.end(
        SessionEndInput(
            session_id="7f3a9c21",
            concepts=["jwt-refresh-rotation", "logout"],
            summary="Reworked refresh rotation. Open: should logout revoke all device tokens?",
        ),
        caller=as_agent("claude"),
    )

    answer = await sessions.resume_here("/Users/dev/app")
    lines = answer.text.splitlines()
    assert lines[0] == 'Resuming 7f3a9c2 "Auth refresh rework".'
    assert lines[1] == "Open question: should logout revoke all device tokens?"
    assert (
        lines[-1].startswith("Next step: ")
        and sum(line.startswith("Next step") for line in lines) == 1
    )
    assert answer.question == "should logout revoke all device tokens?"
    assert "src/auth/refresh.ts" in answer.files
    assert any("jwt-refresh-rotation" in hit.text for hit in answer.recalled)
    assert (answer.fallback, answer.empty) == (False, False)


async def test_empty_session_gets_the_honest_answer(sessions: SessionStore) -> None:
    """A matching session without observations: nothing is invented."""
    await sessions.start(
        SessionStartInput(id="c98f110e", project="app", cwd="/srv/app"), caller=as_agent("claude")
    )
    answer = await sessions.resume_here("/srv/app")
    assert answer.empty and answer.recalled == [] and answer.files == []
    assert answer.text == (
        "The most recent session `c98f110` for this project has no recorded observations. "
        "Nothing to hand off. Want to start fresh from the current state?"
    )


async def test_sibling_descendant_ancestor_override_and_fallback(sessions: SessionStore) -> None:
    """/repo-a never matches /repo-a-staging; descendants and ancestors match; a relative
    override resolves against the caller's cwd; no match falls back and says so."""
    for session_id, cwd in (("s-staging", "/w/repo-a-staging"), ("s-sub", "/w/repo-a/api")):
        await sessions.start(
            SessionStartInput(id=session_id, project="p", cwd=cwd), caller=as_agent("claude")
        )
        await observe(sessions, session_id, cwd, tool_name="Read", tool_input={"path": f"{cwd}/x"})
        await sessions.end(SessionEndInput(session_id=session_id), caller=as_agent("claude"))
    assert (await sessions.resume_here("/w/repo-a")).session.id == "s-sub"  # type: ignore[union-attr]
    assert (await sessions.resume_here("/w/repo-a/api/handlers")).session.id == "s-sub"  # type: ignore[union-attr]
    assert (await sessions.resume_here("/w", override="repo-a-staging")).session.id == "s-staging"  # type: ignore[union-attr]
    resolved = await sessions.resume_here("/w/repo-a/api", override="../../repo-a-staging")
    assert (resolved.project_path, resolved.session.id) == ("/w/repo-a-staging", "s-staging")  # type: ignore[union-attr]

    elsewhere = await sessions.resume_here("/somewhere/else")
    assert elsewhere.fallback
    assert elsewhere.text.startswith("No session matched /somewhere/else; falling back")
    assert elsewhere.session is not None


async def test_completed_is_preferred_and_the_callers_session_skipped(
    sessions: SessionStore,
) -> None:
    """Among matches a completed session beats a more recent abandoned one, and the caller's
    own live session is never the answer."""
    await sessions.start(
        SessionStartInput(id="s-done", project="p", cwd="/r"), caller=as_agent("claude")
    )
    await observe(sessions, "s-done", "/r", tool_name="Read", tool_input={"path": "/r/a"})
    await sessions.end(SessionEndInput(session_id="s-done"), caller=as_agent("claude"))
    await asyncio.sleep(0.01)
    await sessions.start(
        SessionStartInput(id="s-gone", project="p", cwd="/r"), caller=as_agent("claude")
    )
    await observe(sessions, "s-gone", "/r", tool_name="Read", tool_input={"path": "/r/b"})
    await sessions.abandon_idle(0)
    await sessions.start(
        SessionStartInput(id="s-live", project="p", cwd="/r"), caller=as_agent("claude")
    )
    answer = await sessions.resume_here("/r", caller_session="s-live")
    assert answer.session is not None and answer.session.id == "s-done"


async def test_bad_observations_are_refused(sessions: SessionStore) -> None:
    """Unknown hook types, blank projects and bad session ids are refused by the input, as
    agentmemory's hooks name the field; a relative working directory by the store."""
    event = {"sessionId": "s1", "project": "app", "timestamp": "t", "hookType": "stop"}
    for field, value, said in (
        ("hookType", "made_up", "must be one of session_start, prompt_submit"),
        ("project", "  ", "must not be blank"),
        ("sessionId", "s 1", "a session id is 1-128 letters"),
        ("sessionId", "s1\n", "a session id is 1-128 letters"),
    ):
        with pytest.raises(InvalidInput, match=said) as caught:
            OBSERVE.decode({**event, field: value}, "agentmemory")
        assert caught.value.field == field
    with pytest.raises(InvalidInput, match="cwd"):
        await observe(sessions, "s1", "relative/dir")


async def test_smart_search_gives_compact_hits_then_expands_chosen_ids(
    sessions: SessionStore,
) -> None:
    """Compact hits carry titles only; expanding their ids returns the full texts."""
    saved = await sessions.memories.save("the payment webhook retries five times " + "x" * 200)
    observation = await observe(
        sessions, "s-x", "/repo", tool_name="Bash", tool_input={"command": "curl payment webhook"}
    )
    compact = await sessions.memories.smart_search(query="payment webhook")
    assert {hit.id for hit in compact.results} == {saved.memory.id, observation}  # type: ignore[union-attr]
    assert all(hit.text == hit.title for hit in compact.results)
    full = await sessions.memories.smart_search(expand_ids=[saved.memory.id, observation])  # type: ignore[union-attr]
    assert [hit.kind for hit in full.results] == ["memory", "observation"]
    assert full.results[0].text.endswith("x" * 200)


# -- what a session says: concepts and open questions ---------------------------------------


def test_concepts_are_whole_words_of_the_work_not_of_the_machinery() -> None:
    """Hook and tool names, payload keys, paths and stop-words never become concepts;
    words are kept whole (no stems)."""
    observations = [
        observation("prompt_submit", "Rework the staging deploy: staging needs the rollback"),
        observation(
            "post_tool_use",
            "rollback staging deploy",
            title="Edit",
            files=["/repo/deploy/staging.yml"],
        ),
        observation("session_start", "session start", title="session start"),
    ]
    concepts = concepts_of(observations)
    assert concepts[:3] == ["staging", "deploy", "rollback"]
    assert not {"stag", "session", "start", "edit", "prompt", "submit", "repo"} & set(concepts)


def test_an_open_question_is_one_nobody_answered() -> None:
    """The assistant's question with no prompt after it is open; a question answered by a
    later prompt is not; the user's own prompts never are; a question inside a summary is."""
    asked = observation("stop", "Tests pass. Should I also migrate the staging database?")
    assert open_question(session(), [observation("prompt_submit", "fix it"), asked]) == (
        "Should I also migrate the staging database?"
    )
    answered = [asked, observation("prompt_submit", "yes, migrate it")]
    assert open_question(session(), answered) is None
    assert open_question(session(), [observation("prompt_submit", "why does it fail?")]) is None
    summarised = session(summary="Done. Open: use A or B? Then ship.")
    assert open_question(summarised, []) == "use A or B?"


def observation(
    hook: str, narrative: str, *, title: str | None = None, files: list[str] | None = None
) -> Observation:
    return Observation(
        id="o",
        session="s",
        agent="a",
        project="p",
        cwd="/repo",
        hook_type=hook,
        type="event",
        title=title or hook.replace("_", " "),
        narrative=narrative,
        files=files or [],
        timestamp="t",
        created_at="2026-11-30T10:00:00Z",
    )


def session(summary: str | None = None) -> Session:
    return Session(id="s", agent="a", started_at="2026-11-30T09:00:00Z", summary=summary)


async def test_forgetting_observations_scrubs_what_was_derived_from_them(
    sessions: SessionStore,
) -> None:
    """A forgotten prompt leaves no trace in the session's title, concepts, files or the next
    "where were we", nor in search."""
    await sessions.start(
        SessionStartInput(id="s-leak", project="app", cwd="/repo"), caller=as_agent("claude")
    )
    leaked = await observe(
        sessions,
        "s-leak",
        "/repo",
        hook="prompt_submit",
        prompt="deploy with password hunter2secret to prod",
    )
    await observe(sessions, "s-leak", "/repo", hook="prompt_submit", prompt="tidy the changelog")
    await observe(
        sessions,
        "s-leak",
        "/repo",
        tool_name="Read",
        tool_input={"file_path": "/repo/CHANGELOG.md"},
    )
    await sessions.end(SessionEndInput(session_id="s-leak"), caller=as_agent("claude"))
    assert "hunter2secret" in (await sessions.get("s-leak")).title  # type: ignore[operator]

    await sessions.memories.forget(
        caller=as_agent("claude"), session_id="s-leak", observation_ids=[leaked]
    )
    scrubbed = await sessions.get("s-leak")
    assert scrubbed.title == "tidy the changelog"
    assert "hunter2secret" not in " ".join(scrubbed.concepts)
    answer = await sessions.resume_here("/repo")
    assert "hunter2secret" not in answer.text and "tidy the changelog" in answer.text
    assert (await sessions.memories.recall("hunter2secret")).results == []


async def test_forgetting_observations_counts_only_what_the_session_held(
    sessions: SessionStore, data_redis: redis.Redis
) -> None:
    """Forgetting observations lowers the session's count by the ones it really deleted
    (unknown ids and repeats count nothing); an unknown session is refused, and nothing is
    written for it, not even a counter."""
    caller = as_agent("claude")
    await sessions.start(SessionStartInput(id="s-count", project="app", cwd="/repo"), caller=caller)
    first = await observe(sessions, "s-count", "/repo", hook="prompt_submit", prompt="one")
    await observe(sessions, "s-count", "/repo", hook="prompt_submit", prompt="two")
    forgotten = await sessions.memories.forget(
        caller=caller, session_id="s-count", observation_ids=[first, first, "o_nope"]
    )
    assert forgotten.observations == 1
    again = await sessions.memories.forget(
        caller=caller, session_id="s-count", observation_ids=[first]
    )
    assert again.observations == 0 and again.audit_ids == []
    assert (await sessions.get("s-count")).observation_count == 1

    audited = data_redis.xlen(Keys("default").audit)
    for observation_ids in (["o_x"], None):
        with pytest.raises(NotFound):
            await sessions.memories.forget(
                caller=caller, session_id="ghost-1", observation_ids=observation_ids
            )
    assert not data_redis.keys(f"{Keys('default').session('ghost-1')}*")
    assert data_redis.xlen(Keys("default").audit) == audited


async def test_a_memory_named_with_a_session_forgets_the_memory_only(
    sessions: SessionStore,
) -> None:
    """memoryId with a sessionId and no observation ids forgets the memory, and the session
    and its observations stay (agentmemory's rule)."""
    caller = as_agent("claude")
    await sessions.start(SessionStartInput(id="s-keep", project="app", cwd="/repo"), caller=caller)
    await observe(sessions, "s-keep", "/repo", hook="prompt_submit", prompt="keep me")
    saved = await sessions.memories.save("forget this note", agent_id="claude")
    assert saved.memory is not None
    forgotten = await sessions.memories.forget(
        caller=caller, memory_id=saved.memory.id, session_id="s-keep"
    )
    assert (forgotten.memories, forgotten.sessions) == ([saved.memory.id], [])
    assert (await sessions.get("s-keep")).observation_count == 1


async def test_a_session_hash_without_a_start_is_not_a_session(
    sessions: SessionStore, data_redis: redis.Redis
) -> None:
    """A counter left without a session (by earlier versions' forgetting) reads as no session:
    404, not a crash, and it is not listed."""
    keys = Keys("default")
    data_redis.hset(keys.session("ghost-2"), "observation_count", -2)
    data_redis.zadd(keys.sessions, {"ghost-2": 1e12})
    with pytest.raises(NotFound):
        await sessions.get("ghost-2")
    assert "ghost-2" not in [session.id for session in await sessions.recent(10)]
    ended = await sessions.end(SessionEndInput(session_id="ghost-2"), caller=as_agent("claude"))
    assert not ended.ended
    assert data_redis.hkeys(keys.session("ghost-2")) == [b"observation_count"]


async def test_text_people_read_is_bounded_and_has_no_control_characters(
    sessions: SessionStore, store: RecordStore
) -> None:
    """Forget reasons, working directories and overrides are refused when too long or when
    they hold a NUL or an escape, with the field named; nothing is written."""
    await store.remember("a/b", 1, agent="s")
    for reason in ("x" * 4001, "bad\x00reason", "\x1b[31mred"):
        with pytest.raises(InvalidInput) as caught:
            await store.forget("a/b", agent="s", reason=reason)
        assert caught.value.field == "reason"
    assert (await store.recall("a/b")).value == 1
    for cwd, override, field in (
        ("/" + "d" * 5000, None, "cwd"),
        ("/repo\x00", None, "cwd"),
        ("/repo", "x" * 5000, "override"),
    ):
        with pytest.raises(InvalidInput) as caught:
            await sessions.resume_here(cwd, override=override)
        assert caught.value.field == field


async def test_events_without_a_working_directory_are_kept(sessions: SessionStore) -> None:
    """A hook that sends cwd "" or none loses nothing: the event is stored, the session's
    directory stays unknown until an event names one."""
    for cwd in ("", None):
        observed = await sessions.observe(
            ObserveInput(
                hook_type="notification",
                session_id="s-nocwd",
                project="app",
                cwd=cwd,
                timestamp="t",
                data={"message": "waiting"},
            ),
            caller=as_agent("claude"),
        )
        assert observed.observation.cwd == ""
    assert (await sessions.get("s-nocwd")).cwd is None
    await observe(sessions, "s-nocwd", "/repo", tool_name="Read", tool_input={"path": "/repo/a"})
    assert (await sessions.get("s-nocwd")).cwd == "/repo"


async def test_a_supersede_flags_memories_sharing_its_concepts(memories: MemoryStore) -> None:
    """As agentmemory's cascade-update: when a save supersedes a memory, the latest memories
    sharing two of its concepts are flagged for review in the audit log (left unchanged);
    one sharing a single concept is not."""
    old = await memories.save(
        "tokens expire after one hour in the gateway", concepts=["auth", "gateway", "ttl"]
    )
    near = await memories.save("refresh happens at the gateway", concepts=["Auth", "gateway"])
    far = await memories.save("gateway logs go to loki", concepts=["gateway", "logs"])
    new = await memories.save(
        "tokens expire after one hour in the gateway!", concepts=["auth", "gateway", "ttl"]
    )
    assert old.memory and near.memory and far.memory and new.memory
    assert new.memory.supersedes == [old.memory.id]
    [entry] = [e for e in await memories.ns.audit.newest(20) if e.action == "cascade"]
    assert entry.target == old.memory.id
    assert entry.details == {"superseded_by": new.memory.id, "siblings": [near.memory.id]}
    assert (await memories.get(near.memory.id)).content == "refresh happens at the gateway"


async def test_a_save_or_consolidation_a_quota_refuses_writes_nothing(store: RecordStore) -> None:
    """A save that would supersede a memory whose history is full (BATON_MAX_VERSIONS), and
    a consolidation that would, are refused before their first write: no new memory, the
    old ones unchanged, the quota named."""
    limited = Backend(store.ns.backend.redis, Limits(max_versions=2)).namespace("default")
    memories = limited.memories
    old = (await memories.save(BASE, concepts="jwt, rotation")).memory
    assert old is not None
    await memories.update(old.id, caller=as_agent("claude"), content=BASE + " per device")
    with pytest.raises(QuotaReached, match="BATON_MAX_VERSIONS"):
        await memories.save(BASE + " per device", concepts="jwt, rotation")
    assert [(m.id, m.version) for m in await memories.latest()] == [(old.id, 2)]

    older = (await memories.save("canary deploys go to 5% first")).memory
    newer = (await memories.save("pager rota lives in the wiki")).memory
    assert older is not None and newer is not None
    await memories.update(  # now a near-duplicate, at its history's limit
        newer.id, caller=as_agent("claude"), content="canary deploys go to 5% first!"
    )
    before = sorted((m.id, m.version) for m in await memories.latest())
    with pytest.raises(QuotaReached, match="BATON_MAX_VERSIONS"):
        await memories.consolidate(caller=as_agent("claude"), apply=True)
    assert sorted((m.id, m.version) for m in await memories.latest()) == before


async def test_a_namespaces_first_documents_are_length_normalised(memories: MemoryStore) -> None:
    """From its first document on, a namespace normalises by document length: of two
    documents holding a word once, the longer (written second) scores by BM25 with the
    average length of the two (k1 1.2, b 0.75), below the shorter."""
    index = memories.index
    await index.index("m:short", "rollback plan", kind="memory")
    await index.index("m:long", "rollback " + " ".join(f"step{n}" for n in range(9)), kind="memory")
    short, long = await index.search("rollback", limit=2)
    assert (short.doc, long.doc) == ("m:short", "m:long")
    idf = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))
    part = 2.2 / (1 + 1.2 * (1 - 0.75 + 0.75 * 10 / 6))  # tf 1, length 10, average 6
    assert long.score == pytest.approx(idf * part, abs=1e-4)


async def test_the_same_memories_loaded_twice_rank_the_same(store: RecordStore) -> None:
    """The same memories saved in the same order into two namespaces (their ids differ)
    rank identically for every query, ties included: equal scores put the memory saved
    later first."""
    rng = random.Random(3)
    contents = [
        f"{rng.choice(['deploy', 'rollback'])} {rng.choice(['staging', 'prod'])} ticket{n} owner{n}"
        for n in range(40)
    ]
    rankings = []
    for name in ("first", "second"):
        memories = store.ns.backend.namespace(name).memories
        for content in contents:
            assert (await memories.save(content)).success
        found = [await memories.recall(query, limit=10) for query in ("deploy", "prod rollback")]
        rankings.append([[hit.text for hit in each.results] for each in found])
    assert rankings[0] == rankings[1]
    deploys = [c for c in contents if c.startswith("deploy")]
    assert rankings[0][0] == deploys[::-1][:10]  # all tied: the latest saved first


async def test_two_saves_superseding_one_memory_at_once_both_stay_latest(
    memories: MemoryStore,
) -> None:
    """Two near-duplicates each decided to supersede the same memory before either was
    written (here the second's decision is the same as the first's, taken before the first
    landed): the memory is marked once, by the first, and never rewritten for the second;
    both new memories are latest."""
    old = (await memories.save(BASE)).memory
    assert old is not None
    first = (await memories.save(BASE + " per device")).memory
    assert first is not None and first.supersedes == [old.id]
    fields = {
        "content": BASE + " per user",
        "type": "fact",
        "title": BASE,
        "concepts": [],
        "files": [],
        "project": None,
        "agent_id": None,
        "source_observation_ids": [],
    }
    second = (await memories._save(fields, None, old, None)).memory
    assert second is not None
    history = await memories.records.history(f"memory/{old.id}")
    assert len(history.versions) == 2
    assert (await memories.get(old.id)).superseded_by == first.id
    assert {memory.id for memory in await memories.latest()} == {first.id, second.id}
