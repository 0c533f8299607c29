"""LangGraph's checkpointer on Baton: LangGraph's own conformance suite, real graphs that
stop in one saver and go on in another, and what only Baton's can do (a verifiable history).
Each runs against a real ``baton serve``, on one Valkey and on a Redis Cluster."""

from __future__ import annotations

import asyncio
import operator
import random
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import httpx
import pytest
import redis
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from baton.agents import BatonClient
from baton.agents.langgraph import BatonSaver, BatonStore, TooLongForBaton, item_ref
from baton.server import operations as ops
from baton.server.model.keys import Keys
from baton.server.stores.threads import ENTRY, PACK, entry_hash, member, thread_digest
from tests.conftest import REPO, run_baton, running_server


@pytest.fixture
def api(data_url: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    """A Baton on one Valkey, then on a cluster (the store is flushed before each)."""
    with running_server(data_url, tmp_path / "serve.log", BATON_QUEUE_URL=redis_url) as url:
        yield url


@pytest.fixture
def saver(api: str) -> Iterator[BatonSaver]:
    saver = BatonSaver(api, agent="planner")
    yield saver
    saver.close()


def conformance(api: str) -> CapabilityReport:
    @checkpointer_test(name="BatonSaver")
    async def baton_saver() -> AsyncIterator[BatonSaver]:
        saver = BatonSaver(api, agent="conformance")
        yield saver
        await saver.aclose()
        saver.close()

    return asyncio.run(validate(baton_saver))


def test_langgraphs_conformance_suite_passes_in_full(api: str) -> None:
    """Every capability of langgraph-checkpoint-conformance, base and extended, is detected
    and passes: put, put_writes, get_tuple, list, delete_thread, delete_for_runs,
    copy_thread, prune."""
    report = conformance(api)
    failures = {name: r.failures for name, r in report.results.items() if not r.passed}
    assert failures == {}
    assert {name for name, r in report.results.items() if not r.detected} == set()
    assert report.passed_all() and len(report.results) == 8


class Tally(TypedDict):
    steps: Annotated[list[str], operator.add]
    total: int


def counting_graph(saver: BatonSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Two deterministic nodes; the graph stops before ``double`` for a person to look."""

    def add(state: Tally) -> dict[str, Any]:
        return {"steps": ["add"], "total": state["total"] + 5}

    def double(state: Tally) -> dict[str, Any]:
        return {"steps": ["double"], "total": state["total"] * 2}

    builder = StateGraph(Tally)
    builder.add_node("add", add)
    builder.add_node("double", double)
    builder.add_edge(START, "add")
    builder.add_edge("add", "double")
    builder.add_edge("double", END)
    return builder.compile(checkpointer=saver, interrupt_before=["double"])


def test_a_graph_stopped_in_one_saver_goes_on_in_another(api: str) -> None:
    """A graph interrupted before its second node, then resumed through a new saver (a new
    process would see the same), ends as if it had never stopped; its history lists every
    step newest first."""
    thread = {"configurable": {"thread_id": f"t-{uuid4()}"}}
    first = BatonSaver(api, agent="planner")
    stopped = counting_graph(first).invoke({"steps": [], "total": 1}, thread)
    assert stopped == {"steps": ["add"], "total": 6}
    assert counting_graph(first).get_state(thread).next == ("double",)
    first.close()

    second = BatonSaver(api, agent="planner")
    graph = counting_graph(second)
    assert graph.invoke(None, thread) == {"steps": ["add", "double"], "total": 12}
    history = list(graph.get_state_history(thread))
    assert [state.values.get("total") for state in history] == [12, 6, 1, None]
    assert history[0].next == ()
    second.close()


def test_an_async_graph_runs_on_the_async_methods(api: str) -> None:
    """``ainvoke`` goes through the asyncio client, with the same results."""

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        saver = BatonSaver(api, agent="planner")
        graph = counting_graph(saver)
        thread = {"configurable": {"thread_id": f"t-{uuid4()}"}}
        stopped = await graph.ainvoke({"steps": [], "total": 2}, thread)
        done = await graph.ainvoke(None, thread)
        await saver.aclose()
        return stopped, done

    stopped, done = asyncio.run(run())
    assert stopped == {"steps": ["add"], "total": 7}
    assert done == {"steps": ["add", "double"], "total": 14}


def test_listing_pages_through_a_long_thread(saver: BatonSaver) -> None:
    """A thread of 250 checkpoints lists whole, newest first, across the pages the client
    asks for; a filter with a limit reaches past the first page to fill it."""
    thread_id = f"long-{uuid4()}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    ids = []
    for step in range(250):
        checkpoint_id = f"{step:06d}"
        checkpoint = {
            "v": 4,
            "id": checkpoint_id,
            "ts": "2026-12-07T00:00:00+00:00",
            "channel_values": {"step": step},
            "channel_versions": {"step": step + 1},
            "versions_seen": {},
            "updated_channels": ["step"],
        }
        config = saver.put(config, checkpoint, {"step": step, "even": step % 2 == 0}, {})  # type: ignore[arg-type]
        ids.append(checkpoint_id)
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config_of(thread_id))]
    assert listed == ids[::-1]
    odd = list(saver.list(config_of(thread_id), filter={"even": False}, limit=120))
    assert [t.metadata["step"] for t in odd] == list(range(249, 10, -2))
    assert odd[0].parent_config == config_of(thread_id, "", ids[-2])
    even = list(saver.list(config_of(thread_id), filter={"even": True}, limit=120))
    assert [t.metadata["step"] for t in even] == list(range(248, 9, -2))


def test_a_tasks_writes_keep_the_first_and_special_ones_the_last(saver: BatonSaver) -> None:
    """A task's regular write stored again (a retried task) keeps the value stored first; a
    special one (an error) is replaced; each write stays with its own checkpoint."""
    config = config_of(f"t-{uuid4()}", "")
    checkpoint = {
        "v": 4,
        "id": "1",
        "ts": "2026-12-07T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }
    stored = saver.put(config, checkpoint, {}, {})  # type: ignore[arg-type]
    saver.put_writes(stored, [("out", "first"), ("__error__", "boom")], "task-1")
    saver.put_writes(stored, [("out", "again"), ("__error__", "boom twice")], "task-1")
    later = saver.put(stored, {**checkpoint, "id": "2"}, {}, {})  # type: ignore[arg-type]
    first = saver.get_tuple(stored)
    assert first is not None
    assert sorted(first.pending_writes) == [
        ("task-1", "__error__", "boom twice"),
        ("task-1", "out", "first"),
    ]
    newest = saver.get_tuple(later)
    assert newest is not None and newest.pending_writes == []


def config_of(thread_id: str, ns: str | None = None, checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        configurable["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def test_verify_finds_a_checkpoint_changed_behind_batons_back(
    saver: BatonSaver, data_redis: redis.Redis
) -> None:
    """A thread's history verifies; a checkpoint edited in Redis is named, and so is its
    child once the edited one is written back under a new hash (the chain moved). A pruned
    thread verifies again, its kept checkpoint detached from the parents it dropped."""
    thread_id = f"t-{uuid4()}"
    graph = counting_graph(saver)
    thread = config_of(thread_id)
    graph.invoke({"steps": [], "total": 1}, thread)
    graph.invoke(None, thread)
    verified = saver.verify(thread_id)
    assert (verified.ok, verified.checkpoints, verified.detached) == (True, 4, 0)

    entries = Keys("default").thread(thread_digest(thread_id)).entries
    history = list(graph.get_state_history(thread))
    middle = member("", history[2].config["configurable"]["checkpoint_id"])
    entry = ENTRY.decode(data_redis.hget(entries, middle))
    entry.checkpoint.data += b"\xc0"
    data_redis.hset(entries, middle, PACK.encode(entry))
    verified = saver.verify(thread_id)
    assert [(p.checkpoint_id, p.problem) for p in verified.problems] == [
        (history[2].config["configurable"]["checkpoint_id"], "its entry does not match its hash")
    ]

    entry.hash = entry_hash("", middle.partition("\0")[2], entry)
    data_redis.hset(entries, middle, PACK.encode(entry))
    verified = saver.verify(thread_id)
    assert [(p.checkpoint_id, p.problem) for p in verified.problems] == [
        (
            history[1].config["configurable"]["checkpoint_id"],
            "its parent is not the one it was written on",
        )
    ]

    saver.prune([thread_id])
    verified = saver.verify(thread_id)
    assert (verified.ok, verified.checkpoints, verified.detached) == (True, 1, 1)


def test_bad_input_is_refused_naming_the_field(api: str) -> None:
    """A NUL in an id, an unknown prune strategy, a page size of 0: each is a 422 naming
    the field, and nothing is written."""
    with httpx.Client(base_url=api, headers={"X-Baton-Agent": "planner"}) as http:
        blob = {"type": "json", "data": "e30="}
        bad_put = http.post(
            "/v1/langgraph/checkpoints",
            json={"thread_id": "a\0b", "checkpoint_id": "1", "checkpoint": blob, "metadata": blob},
        )
        bad_prune = http.post(
            "/v1/langgraph/threads/prune", json={"thread_ids": ["t"], "strategy": "all"}
        )
        bad_page = http.post(
            "/v1/langgraph/checkpoints/search", json={"thread_id": "t", "limit": 0}
        )
    for response, field in ((bad_put, "thread_id"), (bad_prune, "strategy"), (bad_page, "limit")):
        assert response.status_code == 422, response.text
        assert field in response.text


def test_an_import_that_replaces_the_namespace_keeps_its_threads(
    saver: BatonSaver, data_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A dump does not carry LangGraph threads, so ``baton import --replace`` keeps them
    while it replaces the records; ``baton forget-namespace`` deletes them with the rest."""
    thread = config_of(f"t-{uuid4()}")
    counting_graph(saver).invoke({"steps": [], "total": 1}, thread)
    saver.client.remember("notes/a", "before the dump")
    env = {"BATON_REDIS_URL": data_url, "BATON_QUEUE_URL": redis_url}
    dump = tmp_path / "dump.jsonl"
    exported = run_baton("export", env=env)
    assert exported.returncode == 0, exported.stderr
    dump.write_text(exported.stdout)
    saver.client.remember("notes/b", "after the dump")
    replaced = run_baton("import", "--replace", str(dump), env=env)
    assert replaced.returncode == 0, replaced.stderr
    assert [r.ref for r in saver.client.list_records().records] == ["notes/a"]
    assert len(list(saver.list(thread))) == 3

    forgotten = run_baton("forget-namespace", "default", "--yes", env=env)
    assert forgotten.returncode == 0, forgotten.stderr
    assert list(saver.list(thread)) == []


def bare_checkpoint(checkpoint_id: str) -> Any:
    return {
        "v": 4,
        "id": checkpoint_id,
        "ts": "2026-12-07T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }


def test_listing_every_namespace_goes_by_id_and_takes_what_langgraph_takes(
    saver: BatonSaver,
) -> None:
    """Without a namespace, a thread lists newest first by id across namespaces (a subgraph's
    checkpoints between the root's); an empty thread id, a namespace of 600 characters and a
    filter on a key the metadata lacks (None) work as with LangGraph's own saver."""
    long_ns = "child:" + "x" * 600
    for checkpoint_id, ns in (("1", ""), ("2", long_ns), ("3", ""), ("4", long_ns), ("5", "")):
        saver.put(config_of("", ns), bare_checkpoint(checkpoint_id), {"step": 1}, {})
    listed = [
        (t.config["configurable"]["checkpoint_id"], t.config["configurable"]["checkpoint_ns"])
        for t in saver.list(config_of(""), limit=4)
    ]
    assert listed == [("5", ""), ("4", long_ns), ("3", ""), ("2", long_ns)]
    assert len(list(saver.list(config_of(""), filter={"absent": None}))) == 5
    assert list(saver.list(config_of(""), filter={"step": 2})) == []


def test_the_async_methods_work_from_one_event_loop_after_another(api: str) -> None:
    """One saver serves ``asyncio.run`` after ``asyncio.run`` (a notebook, a test per loop):
    each event loop gets its own connections."""
    saver = BatonSaver(api, agent="planner")
    graph = counting_graph(saver)
    thread = config_of(f"t-{uuid4()}")
    assert asyncio.run(graph.ainvoke({"steps": [], "total": 1}, thread))["total"] == 6
    assert asyncio.run(graph.ainvoke(None, thread))["total"] == 12
    saver.close()


def test_numbers_msgpack_cannot_hold_are_refused_or_left_unfiltered(api: str) -> None:
    """Metadata holding an integer past 64 bits is stored (and not filtered on); the REST
    surface refuses such a filter value or write index with a 422 naming the field."""
    saver = BatonSaver(api, agent="planner", serde=JsonPlusSerializer(pickle_fallback=True))
    thread = config_of(f"t-{uuid4()}", "")
    saver.put(thread, bare_checkpoint("1"), {"account": 2**70, "step": 3}, {})
    stored = saver.get_tuple(thread)
    assert stored is not None and stored.metadata["account"] == 2**70
    assert len(list(saver.list(thread, filter={"step": 3}))) == 1
    saver.close()
    blob = {"type": "json", "data": "e30="}
    with httpx.Client(base_url=api, headers={"X-Baton-Agent": "planner"}) as http:
        huge_filter = http.post(
            "/v1/langgraph/checkpoints",
            json={
                "thread_id": "t",
                "checkpoint_id": "1",
                "checkpoint": blob,
                "metadata": blob,
                "filters": {"n": 2**70},
            },
        )
        huge_index = http.post(
            "/v1/langgraph/writes",
            json={
                "thread_id": "t",
                "checkpoint_id": "1",
                "task_id": "x",
                "writes": [{"idx": 2**64, "channel": "c", "value": blob}],
            },
        )
    assert (huge_filter.status_code, huge_filter.json()["field"]) == (422, "filters")
    assert huge_index.status_code == 422 and "idx" in huge_index.text


def test_a_server_with_small_pages_serves_a_long_history(redis_url: str, tmp_path: Path) -> None:
    """With BATON_MAX_PAGE_SIZE below the clients' pages, a thread lists whole and in order
    in the server's pages, and the store searches: its items that match a query come first
    though more than a page of the namespace's other records match it better."""
    with running_server(redis_url, tmp_path / "serve.log", BATON_MAX_PAGE_SIZE="7") as url:
        saver = BatonSaver(url, agent="planner")
        config = config_of(f"t-{uuid4()}", "")
        for step in range(20):
            config = saver.put(config, bare_checkpoint(f"{step:03d}"), {}, {})
        thread = config_of(config["configurable"]["thread_id"])
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
        assert listed == [f"{step:03d}" for step in reversed(range(20))]
        saver.close()

        store = BatonStore(url, agent="graph")
        for n in range(12):
            store.client.remember(f"other/doc-{n}", {"text": "apple apple apple"})
        for n in range(5):
            store.put(("mine",), f"apple-{n}", {"text": "an apple"})
            store.put(("mine",), f"pear-{n}", {"text": "a pear"})
        first = store.search(("mine",), query="apple", limit=5)
        assert sorted(item.key for item in first) == [f"apple-{n}" for n in range(5)]
        assert len(store.search(("mine",), limit=100)) == 10
        store.close()


# -- BatonStore against LangGraph's InMemoryStore ---------------------------------------------

# What differs from InMemoryStore on purpose, and why (docs/langgraph.md says the same).
STORE_BY_DESIGN = {
    "search order": "InMemoryStore answers in the order its dicts were filled (no order is "
    "part of BaseStore's contract); Baton puts the most recently updated first, as "
    "LangGraph's Postgres store does: results are compared as sets, pages by their size",
    "empty namespaces": "InMemoryStore keeps listing a namespace whose items were all "
    "deleted; Baton lists namespaces that hold an item, as the Postgres store does",
    "created_at, updated_at": "each store's own clock",
}
NAMESPACES = [
    ("users",),
    ("users", "alice"),
    ("users", "bob"),
    ("docs", "a b"),
    ("docs", "ü:x|y", "deep"),
]
KEYS = ["k1", "k2", "", "a/b", "x y", "ü", "+2B"]


def random_op(rng: random.Random) -> Op:
    """One operation of a random session, from small pools so that they meet."""
    kind = rng.choices(["put", "delete", "get", "search", "namespaces"], [50, 12, 12, 18, 8])[0]
    namespace, key = rng.choice(NAMESPACES), rng.choice(KEYS)
    if kind == "put":
        value = {
            "n": rng.randint(0, 5),
            "tag": rng.choice("abc"),
            "nested": {"v": rng.randint(0, 2)},
        }
        return PutOp(namespace, key, value)
    if kind == "delete":
        return PutOp(namespace, key, None)
    if kind == "get":
        return GetOp(namespace, key)
    if kind == "search":
        filters = [
            None,
            {"n": rng.randint(0, 5)},
            {"n": {"$gt": rng.randint(0, 5)}},
            {"tag": {"$ne": rng.choice("abc")}},
            {"nested": {"v": rng.randint(0, 2)}},
            {"n": {"$lte": 3}, "tag": rng.choice("abc")},
        ]
        prefix = namespace[: rng.randint(0, len(namespace))]
        return SearchOp(prefix, rng.choice(filters), rng.choice([2, 100]), rng.choice([0, 0, 1]))
    conditions = rng.choice(
        [
            (),
            (MatchCondition("prefix", ("users",)),),
            (MatchCondition("suffix", ("deep",)),),
            (MatchCondition("prefix", ("*", "alice")),),
        ]
    )
    return ListNamespacesOp(
        conditions, rng.choice([None, 1, 2]), rng.choice([1, 100]), rng.choice([0, 1])
    )


def live_copy(reference: InMemoryStore) -> InMemoryStore:
    """The reference's items in a fresh InMemoryStore: no namespace emptied by deletes."""
    copy = InMemoryStore()
    for item in reference.search((), limit=10_000):
        copy.put(item.namespace, item.key, item.value)
    return copy


def shown(items: Any) -> Any:
    """What both stores must agree on in an answer (STORE_BY_DESIGN lists the rest)."""
    if items is None:
        return None
    if isinstance(items, Item):
        return (items.namespace, items.key, items.value)
    return sorted((item.namespace, item.key, repr(item.value)) for item in items)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_baton_store_answers_as_langgraphs_in_memory_store(api: str, seed: int) -> None:
    """A seeded random session of puts, deletes, gets, searches (filters with $gt, $ne,
    $lte and nested values; prefixes; limits and offsets) and namespace listings (prefix,
    suffix, wildcard, depth) gets the same answers from BatonStore as from InMemoryStore,
    but for what STORE_BY_DESIGN names."""
    rng = random.Random(seed)
    store = BatonStore(api, agent="graph", namespace=f"store{seed}")
    reference = InMemoryStore()
    for step in range(70):
        op = random_op(rng)
        if isinstance(op, ListNamespacesOp):
            expected = live_copy(reference).batch([op])[0]
        else:
            expected = reference.batch([op])[0]
        got = store.batch([op])[0]
        context = f"seed {seed}, step {step}: {op}"
        if isinstance(op, SearchOp) and op.offset == 0 and op.limit == 100:
            assert shown(got) == shown(expected), context
        elif isinstance(op, SearchOp):
            assert len(got) == len(expected), context
        elif isinstance(op, ListNamespacesOp):
            assert got == expected, context
        else:
            assert shown(got) == shown(expected), context
    store.close()


def test_a_store_item_is_a_baton_record_other_agents_read(api: str) -> None:
    """Each put is a version of a hash-chained record another agent reads; an update keeps
    the item's creation time; a delete is a version with no value, and a put after it
    creates the item anew."""
    store = BatonStore(api, agent="graph")
    store.put(("users", "alice"), "profile", {"likes": "tea"})
    first = store.get(("users", "alice"), "profile")
    store.put(("users", "alice"), "profile", {"likes": "coffee"})
    second = store.get(("users", "alice"), "profile")
    assert first is not None and second is not None
    assert second.created_at == first.created_at < second.updated_at
    with BatonClient(api, agent="reader") as reader:
        history = reader.history(item_ref(("users", "alice"), "profile"))
        assert [v.value for v in history.versions] == [{"likes": "tea"}, {"likes": "coffee"}]
        assert all(v.chain_ok for v in history.versions)
    store.delete(("users", "alice"), "profile")
    assert store.get(("users", "alice"), "profile") is None
    assert store.search(("users",)) == []
    store.put(("users", "alice"), "profile", {"likes": "water"})
    again = store.get(("users", "alice"), "profile")
    assert again is not None and again.created_at > second.updated_at
    store.close()


def test_search_without_a_query_puts_the_latest_update_first(api: str) -> None:
    """Without a query the most recently updated item comes first (as LangGraph's Postgres
    store orders them), and pages are slices of that order."""
    store = BatonStore(api, agent="graph")
    for key in ("a", "b", "c", "d"):
        store.put(("notes",), key, {"key": key})
    store.put(("notes",), "b", {"key": "b", "again": True})
    assert [item.key for item in store.search(("notes",))] == ["b", "d", "c", "a"]
    pages = [store.search(("notes",), limit=2, offset=offset) for offset in (0, 2, 4)]
    assert [[item.key for item in page] for page in pages] == [["b", "d"], ["c", "a"], []]
    store.close()


def test_what_the_store_cannot_hold_is_refused_and_what_others_wrote_is_skipped(
    api: str,
) -> None:
    """A key too long for a Baton ref is refused on put with the reason, and is simply
    absent for get and delete; a value that is not a dict is a TypeError, as in LangGraph's
    stores; a record another agent wrote under ``langgraph/`` that the store cannot read
    back as an item is skipped, not fatal to search and list_namespaces."""
    store = BatonStore(api, agent="graph")
    long_key = "é" * 200
    with pytest.raises(TooLongForBaton, match="past its 512"):
        store.put(("notes",), long_key, {"a": 1})
    assert store.get(("notes",), long_key) is None
    store.delete(("notes",), long_key)
    with pytest.raises(TypeError, match="dict values"):
        store.put(("notes",), "list", [1, 2])  # type: ignore[arg-type]
    store.put(("users", "bob"), "profile", {"likes": "tea"})
    store.client.remember("langgraph/users/bob+x", {"written": "by hand"})
    assert [item.key for item in store.search(("users",))] == ["profile"]
    assert store.list_namespaces() == [("users", "bob")]
    store.close()


def test_a_batch_reads_before_it_writes_and_racing_puts_keep_the_creation_time(
    api: str,
) -> None:
    """As in LangGraph's own stores, a batch answers its reads from the store before its
    puts; puts racing on a new item all land, and the item keeps its first version's time."""
    store = BatonStore(api, agent="graph")
    read_first = store.batch([PutOp(("n",), "k", {"v": 1}), GetOp(("n",), "k"), SearchOp(("n",))])
    assert read_first == [None, None, []]
    assert store.get(("n",), "k") is not None

    def put(n: int) -> None:
        store.put(("race",), "item", {"n": n})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(16)))
    item = store.get(("race",), "item")
    history = store.client.history(item_ref(("race",), "item"))
    assert item is not None and len(history.versions) == 16
    assert item.created_at == datetime.fromisoformat(history.versions[0].created_at)
    store.close()


def test_a_query_ranks_the_items_that_match_it_first(api: str) -> None:
    """With a query, Baton's search puts the items that match it first; the others follow,
    as InMemoryStore fills a page with items it cannot score. ``asearch`` answers the same."""
    store = BatonStore(api, agent="graph")
    store.put(("docs",), "fruit", {"text": "apples and pears in the orchard"})
    store.put(("docs",), "cars", {"text": "engines and wheels"})
    store.put(("docs",), "pie", {"text": "an apple pie recipe"})
    found = [item.key for item in store.search(("docs",), query="apple")]
    assert set(found[:2]) == {"fruit", "pie"} and found[2:] == ["cars"]
    assert [item.key for item in asyncio.run(store.asearch(("docs",), query="apple"))] == found
    store.close()


def append(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Items(TypedDict):
    items: Annotated[list[str], DeltaChannel(append)]


def test_keep_latest_refuses_a_thread_whose_graph_uses_a_delta_channel(saver: BatonSaver) -> None:
    """A DeltaChannel's value lives in the writes of earlier checkpoints, so ``keep_latest``
    refuses a request naming such a thread, before pruning any thread of it, with the
    NotImplementedError LangGraph's Postgres saver raises; the state is intact, and
    ``delete`` still deletes."""
    builder = StateGraph(Items)
    builder.add_node("step", lambda state: {"items": ["step"]})
    builder.add_edge(START, "step")
    graph = builder.compile(checkpointer=saver)
    delta, plain = config_of(f"d-{uuid4()}"), config_of(f"p-{uuid4()}")
    for round_ in range(3):
        graph.invoke({"items": [f"in{round_}"]}, delta)
    counting_graph(saver).invoke({"steps": [], "total": 1}, plain)
    before = graph.get_state(delta).values
    assert before["items"] == ["in0", "step", "in1", "step", "in2", "step"]

    threads = [plain["configurable"]["thread_id"], delta["configurable"]["thread_id"]]
    with pytest.raises(NotImplementedError, match="DeltaChannel"):
        saver.prune(threads)
    assert graph.get_state(delta).values == before
    assert len(list(saver.list(plain))) == 3  # not pruned either

    saver.prune(threads, strategy="delete")
    assert list(saver.list(delta)) == [] and list(saver.list(plain)) == []


def test_the_readme_lines_give_a_graph_whose_thread_and_memory_live_in_baton(api: str) -> None:
    """The lines README gives under "Use from LangGraph" compile a graph whose thread is
    checkpointed in Baton and whose store writes Baton records."""
    section = (REPO / "README.md").read_text().split("### Use from LangGraph", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len([line for line in code.splitlines() if line.strip()]) == 3

    def remember_total(state: Tally, *, store: BaseStore) -> dict[str, Any]:
        store.put(("tallies",), "last", {"total": state["total"]})
        return {"steps": ["noted"]}

    builder = StateGraph(Tally)
    builder.add_node("note", remember_total)
    builder.add_edge(START, "note")
    namespace: dict[str, Any] = {"builder": builder}
    exec(code.replace("http://127.0.0.1:8765", api), namespace)
    thread = config_of(f"t-{uuid4()}")
    namespace["graph"].invoke({"steps": [], "total": 3}, thread)
    with BatonClient(api, agent="reader") as baton:
        assert baton.recall(item_ref(("tallies",), "last")).value == {"total": 3}
    assert namespace["graph"].get_state(thread).values["steps"] == ["noted"]


def deadline_of(store: BatonStore, namespace: tuple[str, ...], key: str) -> str | None:
    answer = store.client.perform(ops.ITEM_EXPIRY, refs=[item_ref(namespace, key)], action="read")
    return answer.deadlines[item_ref(namespace, key)]


def test_a_ttl_is_refreshed_by_reads_and_ends_in_a_null_version_the_sweep_writes(
    api: str,
) -> None:
    """An item put with a ttl gets a deadline; a read refreshes it (not with
    ``refresh_ttl=False``), a put without one clears it; once the deadline passes, Baton's
    sweep deletes the item as the store does, with a null version by ``baton``, and an item
    without a ttl stays."""
    store = BatonStore(api, agent="graph", ttl={"refresh_on_read": True})
    store.put(("t",), "kept", {"b": 2})
    assert deadline_of(store, ("t",), "kept") is None
    store.put(("t",), "read", {"a": 1}, ttl=10)
    first = deadline_of(store, ("t",), "read")
    assert first is not None
    time.sleep(0.01)
    store.get(("t",), "read", refresh_ttl=False)
    assert deadline_of(store, ("t",), "read") == first
    store.search(("t",))
    refreshed = deadline_of(store, ("t",), "read")
    assert refreshed is not None and refreshed > first
    store.put(("t",), "read", {"a": 2})
    assert deadline_of(store, ("t",), "read") is None

    store.put(("t",), "short", {"c": 3}, ttl=0.001)
    ref = item_ref(("t",), "short")
    deadline = time.monotonic() + 60
    while store.client.recall(ref).value is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    last = store.client.recall(ref)
    assert (last.value, last.author, last.version) == (None, "baton", 2)
    assert store.get(("t",), "short") is None and deadline_of(store, ("t",), "short") is None
    assert store.get(("t",), "kept") is not None
    store.close()


def test_only_the_stores_items_take_an_expiry(api: str) -> None:
    """The expiry operation names records of LangGraph's store only: the sweep writes a null
    version at expiry, which no other record of the namespace is to get that way."""
    with httpx.Client(base_url=api, headers={"X-Baton-Agent": "graph"}) as http:
        refused = http.post(
            "/v1/langgraph/store/expiry",
            json={"refs": ["listing/553/assessment"], "action": "set", "ttl_seconds": 1},
        )
        unpaired = http.post(
            "/v1/langgraph/store/expiry", json={"refs": ["langgraph/a/b"], "action": "set"}
        )
    assert (refused.status_code, refused.json()["field"]) == (422, "refs")
    assert (unpaired.status_code, unpaired.json()["field"]) == (422, "ttl_seconds")


def test_an_expired_item_is_omitted_before_the_sweep_when_asked(
    redis_url: str, tmp_path: Path
) -> None:
    """With ``omit_expired``, an item past its deadline is left out of get and search before
    any sweep deletes it; without it, it is still read until the sweep."""
    with running_server(redis_url, tmp_path / "serve.log", BATON_SWEEP_SECONDS="86400") as url:
        omitting = BatonStore(url, agent="graph", ttl={"omit_expired": True})
        plain = BatonStore(url, agent="graph", ttl={"refresh_on_read": False})
        omitting.put(("t",), "gone", {"a": 1}, ttl=0.001)
        omitting.put(("t",), "here", {"b": 2})
        time.sleep(0.2)
        assert omitting.get(("t",), "gone") is None
        assert [item.key for item in omitting.search(("t",))] == ["here"]
        assert plain.get(("t",), "gone") is not None
        omitting.close()
        plain.close()
