"""`baton reindex`: a search index built by older lexical rules rebuilt from what is stored."""

from __future__ import annotations

import json

import pytest
import redis

from baton.server.maintenance.backup import dump_lines, import_dump, read_dump
from baton.server.maintenance.reindex import reindex, stale_indexes
from baton.server.model.keys import Keys
from baton.server.model.memory_models import ObserveInput
from baton.server.retrieval.lexical import LEXICAL_VERSION
from baton.server.retrieval.search import LEXICAL
from baton.server.stores.backend import Backend
from baton.server.stores.sessions import SessionStore
from tests.conftest import as_agent, run_baton

pytestmark = pytest.mark.anyio


async def populate(backend: Backend, name: str) -> None:
    """A namespace holding each kind of search document: a fact, a memory, a superseded
    memory, a forgotten record and an observation."""
    ns = backend.namespace(name)
    await ns.records.remember("deploy/runner", {"image": "macos-22", "arch": "arm64"}, agent="ci")
    await ns.records.remember("old/secret", "rotate me", agent="ci")
    await ns.records.forget("old/secret", agent="ci", reason="leaked")
    await ns.memories.save("The refund handler lives in src/payments/refund.py")
    await ns.memories.save("Staging deploys ship from the release branch on Fridays")
    await ns.memories.save("Staging deploys ship from the release branch on Fridays only")
    sessions: SessionStore = ns.sessions
    await sessions.observe(
        ObserveInput(
            hook_type="post_tool_use",
            session_id="s-1",
            project="app",
            cwd="/repo",
            timestamp="2026-12-01T10:00:00Z",
            data={"tool_name": "Edit", "tool_input": {"file_path": "/repo/src/getUserName.ts"}},
        ),
        caller=as_agent("claude"),
    )


def index_of(client: redis.Redis, name: str) -> tuple[object, ...]:
    """A namespace's index: its documents' entries, metas and totals, and which documents
    each term's postings hold (scores follow the average length as documents were added)."""
    keys = Keys(name)
    postings = {
        key.decode().rpartition(":t:")[2]: sorted(client.zrange(key, 0, -1))
        for key in client.scan_iter(keys.search_terms)
    }
    stats = client.hgetall(keys.search_stats)
    totals = {field: stats.get(field) for field in (b"docs", b"total_length", b"terms")}
    return client.hgetall(keys.search_docs), client.hgetall(keys.search_meta), totals, postings


async def test_an_index_built_by_older_rules_is_rebuilt_as_a_fresh_one_would_be(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """A namespace whose index older rules built (documents with other terms, one nothing
    holds any more, no version recorded) is named stale; a reindex leaves exactly the index
    importing the same data builds (the same documents, terms and postings; superseded and
    forgotten ones out), records today's rules, and is stale no more."""
    await populate(backend, "old")
    ns = backend.namespace("old")
    [memory] = [m for m in await ns.memories.latest() if "refund" in m.content]
    await ns.search.index(f"m:{memory.id}", "written-by-older-rules", kind="memory")
    await ns.search.index("m:mem_gone", "a memory nothing holds any more", kind="memory")
    data_redis.hdel(Keys("old").search_stats, LEXICAL)
    assert await stale_indexes(backend) == ["old"]
    assert [hit.doc for hit in await ns.search.search("refund")] == []  # old terms: no parts

    lines = read_dump([line async for line in dump_lines(ns)])
    await import_dump(backend.namespace("fresh"), lines)
    done = await reindex(ns)

    assert (done.namespace, done.removed) == ("old", 1)
    assert index_of(data_redis, "old") == index_of(data_redis, "fresh")
    assert [hit.doc for hit in await ns.search.search("refund")] == [f"m:{memory.id}"]
    assert data_redis.hget(Keys("old").search_stats, LEXICAL) == str(LEXICAL_VERSION).encode()
    assert await stale_indexes(backend) == []


def test_baton_reindex_and_status_name_what_is_stale(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """`baton status` lists the namespaces whose index other rules built; `baton reindex`
    rebuilds those (one line each), after which there are none and a second run says so."""
    keys = Keys("default")
    sync_redis.sadd("baton:namespaces", "default")
    sync_redis.hset(keys.search_stats, mapping={"docs": 0, "total_length": 0})
    environment = {"BATON_REDIS_URL": redis_url}
    before = json.loads(run_baton("status", env=environment).stdout)
    rebuilt = run_baton("reindex", env=environment)
    after = json.loads(run_baton("status", env=environment).stdout)
    again = run_baton("reindex", env=environment)
    assert before["reindex_needed"] == ["default"]
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.splitlines() == [
        "baton: reindexed default: 0 documents, 0 no longer stored taken out"
    ]
    assert after["reindex_needed"] == []
    assert (
        again.stdout.strip() == "baton: every search index is current; --force rebuilds them anyway"
    )


async def test_an_import_cut_short_before_its_index_is_named_and_finished_by_reindex(
    backend: Backend, data_redis: redis.Redis
) -> None:
    """An import writes its data in one step and rebuilds the search index after it, in
    bounded batches. Cut between the two (``index=False`` stops there), the data is all
    there, the namespace's index is named stale (``baton status``), and a reindex makes it
    the index a whole import builds."""
    await populate(backend, "source")
    lines = read_dump([line async for line in dump_lines(backend.namespace("source"))])
    cut = backend.namespace("cut")
    await import_dump(cut, lines, atomic=True, index=False)
    assert (await cut.records.recall("deploy/runner")).value["arch"] == "arm64"
    assert await stale_indexes(backend) == ["cut"]
    assert await cut.search.search("refund") == []

    await import_dump(backend.namespace("whole"), lines, atomic=True)
    assert "whole" not in await stale_indexes(backend)
    await reindex(cut)
    assert await stale_indexes(backend) == []
    assert index_of(data_redis, "cut") == index_of(data_redis, "whole")
    assert len(await cut.search.search("refund")) == 1
