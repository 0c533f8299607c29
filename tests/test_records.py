"""The fact store against the real embedded server: versions, chains, outcomes, sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgpack
import pytest
import redis
from structlog.testing import capture_logs

from baton.server.model.errors import (
    InvalidInput,
    NotFound,
    QuotaReached,
    TooLarge,
    VersionConflict,
)
from baton.server.model.integrity import GENESIS_HASH
from baton.server.model.keys import Keys
from baton.server.model.memory_models import SessionStartInput
from baton.server.model.models import Event, RecordVersion
from baton.server.retrieval.analysis import MAX_DOCUMENT_TERMS
from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import Limits
from baton.server.stores.activity import follow
from baton.server.stores.backend import Backend
from baton.server.stores.changes import Plan, Planned
from baton.server.stores.records import BATCH, HeadHints, RecordStore
from baton.server.stores.recount import recount_once
from tests.conftest import as_agent

pytestmark = pytest.mark.anyio


async def test_remember_appends_versions_and_never_overwrites(store: RecordStore) -> None:
    """A second write to a ref is version 2; version 1 stays readable, marked superseded."""
    first = await store.remember("listing/553/assessment", {"verdict": "apply"}, agent="scout")
    second = await store.remember("listing/553/assessment", {"verdict": "maybe"}, agent="scout")

    assert (first.version, first.superseded, first.prev_hash) == (1, None, GENESIS_HASH)
    assert (second.version, second.superseded, second.prev_hash) == (2, 1, first.hash)
    old = await store.recall("listing/553/assessment", version=1)
    assert old.value == {"verdict": "apply"}
    assert old.superseded_by == 2
    current = await store.recall("listing/553/assessment")
    assert (current.version, current.value, current.superseded_by) == (
        2,
        {"verdict": "maybe"},
        None,
    )


def test_head_hints_keep_the_most_recently_noted_heads() -> None:
    """Full hints forget the head noted least recently: noting a head again keeps it, and a
    forgotten ref reads as a new record (the write script corrects that guess)."""
    hints = HeadHints(size=2)
    hints.note("a", 1, "ha")
    hints.note("b", 1, "hb")
    hints.note("a", 2, "ha2")
    hints.note("c", 1, "hc")
    assert hints.get("a") == (2, "ha2")
    assert hints.get("c") == (1, "hc")
    assert hints.get("b") == (0, GENESIS_HASH)
    assert len(hints.heads) == 2


async def test_values_round_trip_with_their_types(store: RecordStore) -> None:
    """Any JSON-compatible value comes back exactly as written."""
    value = {"n": 3, "x": 0.1, "s": "héllo", "l": [1, None, True], "nested": {"k": []}}
    await store.remember("a/b", value, agent="scout", tags=["t1", "t2"], confidence=0.7)

    record = await store.recall("a/b")
    assert record.value == value
    assert record.tags == ["t1", "t2"]
    assert record.confidence == 0.7
    assert record.author == "scout"


async def test_each_write_announces_its_version_on_the_event_stream(store: RecordStore) -> None:
    """Every remember event names the ref and the version it wrote (a watcher reading the
    stream late still knows which versions are new), on one Redis and on a cluster."""
    for value in ("a", "b", "c"):
        await store.remember("a/b", value, agent="scout")
    events = [
        (event.kind, event.ref, event.version) async for event in first_events(store, count=3)
    ]
    assert events == [("remember", "a/b", 1), ("remember", "a/b", 2), ("remember", "a/b", 3)]


async def first_events(store: RecordStore, count: int) -> AsyncIterator[Event]:
    """The namespace's first ``count`` events."""
    stream = follow(store.redis, store.keys, wait_ms=1000, after="0-0")
    for _ in range(count):
        yield await anext(stream)
    await stream.aclose()


async def test_expected_version_mismatch_writes_nothing(store: RecordStore) -> None:
    """A conditional write on a stale version is refused with the current version named."""
    await store.remember("a/b", 1, agent="scout")
    with pytest.raises(VersionConflict) as caught:
        await store.remember("a/b", 2, agent="scout", expected_version=0)

    assert caught.value.extra["current_version"] == 1
    assert (await store.history("a/b")).current_version == 1
    written = await store.remember("a/b", 2, agent="scout", expected_version=1)
    assert written.version == 2


async def test_bad_input_is_refused_before_anything_is_written(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """Invalid refs, values (NaN, bytes, sets, keys of mixed types, integers past 64 bits:
    nothing a canonical hash can be made of), confidences and tags raise clear errors and
    leave Redis empty."""
    with pytest.raises(InvalidInput, match="ref"):
        await store.remember("no-scope", 1, agent="scout")
    with pytest.raises(InvalidInput, match="value"):
        await store.remember("a/b", {"x": float("nan")}, agent="scout")
    for unhashable in (b"raw", {"x": {1, 2}}, {1: "a", "b": 2}, 2**64):
        with pytest.raises(InvalidInput, match="value"):
            await store.remember("a/b", unhashable, agent="scout")
    with pytest.raises(InvalidInput, match="confidence"):
        await store.remember("a/b", 1, agent="scout", confidence=1.5)
    with pytest.raises(InvalidInput, match="tags"):
        await store.remember("a/b", 1, agent="scout", tags=["has space"])
    assert data_redis.dbsize() == 0


async def test_value_over_the_limit_is_too_large(backend: Backend) -> None:
    """A value whose encoding exceeds max_value_bytes is refused with the limit named."""
    from baton.server.runtime.settings import Limits

    small = Backend(backend.redis, Limits(max_value_bytes=100)).namespace("default").records
    with pytest.raises(TooLarge, match="limit is 100"):
        await small.remember("a/b", "x" * 200, agent="scout")


async def test_recall_unknown_ref_or_version_is_not_found(store: RecordStore) -> None:
    """Unknown refs and versions are NotFound; a missing version names the current one."""
    with pytest.raises(NotFound, match="no record a/b"):
        await store.recall("a/b")
    await store.remember("a/b", 1, agent="scout")
    with pytest.raises(NotFound) as caught:
        await store.recall("a/b", version=3)
    assert caught.value.extra["current_version"] == 1


async def test_history_lists_every_version_with_verified_links(store: RecordStore) -> None:
    """History returns versions oldest first, each chained to the previous hash."""
    for value in ("one", "two", "three"):
        await store.remember("a/b", value, agent="scout")

    history = await store.history("a/b")
    assert [entry.value for entry in history.versions] == ["one", "two", "three"]
    assert all(entry.chain_ok for entry in history.versions)
    hashes = [GENESIS_HASH] + [entry.hash for entry in history.versions]
    assert [entry.prev_hash for entry in history.versions] == hashes[:-1]


async def test_superseded_version_keeps_the_confidence_it_had(store: RecordStore) -> None:
    """An outcome moves the current version's confidence; a later version starts afresh and
    the superseded one keeps the confidence it had when replaced."""
    await store.remember("a/b", "v1", agent="scout", confidence=0.8)
    await store.ns.outcomes.record("success", "RUN-1", agent="exec", refs=["a/b"])
    await store.remember("a/b", "v2", agent="scout", confidence=0.3)

    history = await store.history("a/b")
    assert [round(entry.confidence, 4) for entry in history.versions] == [0.84, 0.3]


async def test_outcomes_move_confidence_and_keep_before_after(store: RecordStore) -> None:
    """The demo numbers: success 0.80 -> 0.84, failure 0.60 -> 0.39, both logged and chained."""
    await store.remember("listing/482/assessment", "apply", agent="scout", confidence=0.8)
    await store.remember("source/boards-example/rate-limit", "60s", agent="scout", confidence=0.6)

    won = await store.ns.outcomes.record(
        "success", "RUN-42", agent="executor", refs=["listing/482/assessment"], note="sent"
    )
    lost = await store.ns.outcomes.record(
        "failure", "RUN-42", agent="executor", refs=["source/boards-example/rate-limit"]
    )

    assert (won.moves[0].before, round(won.moves[0].after, 10)) == (0.8, 0.84)
    assert (lost.moves[0].before, round(lost.moves[0].after, 10)) == (0.6, 0.39)
    assert round((await store.recall("listing/482/assessment")).confidence, 10) == 0.84
    log = await store.outcomes("listing/482/assessment")
    assert [(e.outcome, e.outcome_ref, e.note, e.agent) for e in log] == [
        ("success", "RUN-42", "sent", "executor")
    ]
    assert log[0].prev_hash == GENESIS_HASH
    history = await store.history("listing/482/assessment")
    assert (history.successes, history.failures) == (1, 0)


async def test_outcome_with_an_unknown_ref_changes_nothing(store: RecordStore) -> None:
    """If any ref is unknown the whole outcome is refused and no confidence moves."""
    await store.remember("a/b", 1, agent="scout", confidence=0.5)
    with pytest.raises(NotFound, match="x/y"):
        await store.ns.outcomes.record("success", "RUN-1", agent="e", refs=["a/b", "x/y"])
    assert (await store.recall("a/b")).confidence == 0.5
    assert await store.outcomes("a/b") == []


async def test_outcome_needs_refs_or_a_session(store: RecordStore) -> None:
    """Without refs and without a session there is nothing to apply the outcome to."""
    with pytest.raises(InvalidInput, match="refs"):
        await store.ns.outcomes.record("success", "RUN-1", agent="e")
    with pytest.raises(InvalidInput, match="outcome_ref"):
        await store.ns.outcomes.record("success", " ", agent="e", refs=["a/b"])


async def test_session_touched_set_defaults_outcome_refs(store: RecordStore) -> None:
    """Refs a session read or wrote, with the version seen, are the outcome's default refs."""
    await store.remember("a/b", 1, agent="scout", confidence=0.5)
    await store.remember("c/d", 1, agent="scout", confidence=0.5)
    await store.remember("e/f", 1, agent="scout", confidence=0.5)
    session = await store.ns.sessions.start(SessionStartInput(), caller=as_agent("executor"))
    await store.recall("a/b", agent="executor", session=session.id)
    await store.remember("c/d", 2, agent="executor", session=session.id)

    assert await store.activity.touched(session.id) == {"a/b": 1, "c/d": 2}
    report = await store.ns.outcomes.record(
        "success", "RUN-7", agent="executor", session=session.id
    )
    assert sorted(move.ref for move in report.moves) == ["a/b", "c/d"]
    assert (await store.recall("e/f")).confidence == 0.5


async def test_listing_filters_by_scope_boundary_tags_and_confidence(store: RecordStore) -> None:
    """Scope matches whole segments; tags all/any and min_confidence filter current versions."""
    await store.remember(
        "listing/482/assessment", 1, agent="s", tags=["job", "hot"], confidence=0.8
    )
    await store.remember("listing/553/assessment", 1, agent="s", tags=["job"], confidence=0.4)
    await store.remember("listings/x", 1, agent="s", tags=["job"])
    await store.remember("source/a/rate", 1, agent="s", tags=["hot"])

    def refs(page: object) -> list[str]:
        return [record.ref for record in page.records]  # type: ignore[attr-defined]

    assert refs(await store.list_records(scope="listing")) == [
        "listing/482/assessment",
        "listing/553/assessment",
    ]
    assert refs(await store.list_records(tags=["job", "hot"])) == ["listing/482/assessment"]
    assert refs(await store.list_records(tags=["job", "hot"], tags_mode="any")) == [
        "listing/482/assessment",
        "listing/553/assessment",
        "listings/x",
        "source/a/rate",
    ]
    assert refs(await store.list_records(min_confidence=0.6)) == ["listing/482/assessment"]


async def test_listing_tag_filter_follows_the_current_version(store: RecordStore) -> None:
    """A tag dropped by a newer version no longer matches the record."""
    await store.remember("a/b", 1, agent="s", tags=["draft"])
    await store.remember("a/b", 2, agent="s", tags=["final"])
    assert (await store.list_records(tags=["draft"])).records == []
    assert [r.value for r in (await store.list_records(tags=["final"])).records] == [2]


async def test_listing_pages_with_a_cursor_without_gaps(store: RecordStore) -> None:
    """Following next_cursor visits every record exactly once, in ref order."""
    refs = [f"scope/k{i:03d}" for i in range(23)]
    for ref in refs:
        await store.remember(ref, ref, agent="s")

    seen, cursor = [], None
    while True:
        page = await store.list_records(limit=5, cursor=cursor)
        seen += [record.ref for record in page.records]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == refs


async def test_a_cursor_never_widens_the_scope(store: RecordStore) -> None:
    """A cursor that sorts before the scope starts the page at the scope's first ref, one
    after it gives an empty page: the scope filter holds whatever cursor is sent; a cursor
    that is not a ref is refused with the field named."""
    for ref in ["a/x", "geo/berlin", "t/one", "t/two", "u/z"]:
        await store.remember(ref, ref, agent="s")
    before = await store.list_records(scope="t", cursor="a/x")
    assert [record.ref for record in before.records] == ["t/one", "t/two"]
    assert (await store.list_records(scope="t", cursor="u/a")).records == []
    paged = await store.list_records(scope="t", cursor="t/one")
    assert [record.ref for record in paged.records] == ["t/two"]
    with pytest.raises(InvalidInput) as caught:
        await store.list_records(scope="t", cursor="a\x00")
    assert caught.value.field == "cursor"


async def test_namespaces_are_isolated(backend: Backend) -> None:
    """The same ref in two namespaces are two independent records."""
    await backend.namespace("alpha").records.remember("a/b", "alpha", agent="s")
    with pytest.raises(NotFound):
        await backend.namespace("beta").records.recall("a/b")
    assert (await backend.namespace("alpha").records.recall("a/b")).value == "alpha"


async def test_stats_counts_records_versions_agents_and_outcomes(store: RecordStore) -> None:
    """Stats reflect what was written."""
    await store.remember("a/b", 1, agent="scout", confidence=0.2)
    await store.remember("a/b", 2, agent="executor", confidence=0.4)
    await store.remember("c/d", 1, agent="scout", confidence=0.8)
    await store.ns.outcomes.record("failure", "RUN-1", agent="executor", refs=["c/d"])

    stats = await store.ns.verifier.stats()
    assert (stats.refs, stats.versions, stats.agents, stats.outcomes) == (2, 3, 2, 1)
    assert stats.average_confidence == pytest.approx((0.4 + 0.8 * 0.65) / 2)


async def test_verify_finds_a_record_hidden_from_the_refs_index(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """The review's hiding trick: a current value edited (its hash kept) and its ref taken
    out of the refs index. verify walks what is stored, not only the index: the record is
    reported as unindexed and its edited version as a broken hash; scope still applies."""
    await store.remember("policy/deploy", "review before push", agent="ops")
    await store.remember("other/ref", "fine", agent="ops")
    keys = Keys()
    data_redis.hset(keys.version("policy/deploy", 1), "value", msgpack.packb("EVIL: push"))
    data_redis.zrem(keys.refs, "policy/deploy")
    stats = await store.ns.verifier.stats(verify=True)
    assert [(b.ref, b.kind) for b in stats.broken or []] == [
        ("policy/deploy", "unindexed"),
        ("policy/deploy", "hash"),
    ]
    assert stats.refs == 2
    assert (await store.ns.verifier.stats(verify=True, scope="other")).broken == []


async def test_verify_reports_exactly_the_tampered_version(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """Editing a stored value behind Baton's back breaks that version's hash, and only that,
    and the stats say the store is not verified; restoring it makes verify clean again."""
    for i in range(3):
        await store.remember("listing/553/assessment", {"i": i}, agent="scout")
    await store.remember("other/ref", "fine", agent="scout")
    key = Keys().version("listing/553/assessment", 2)
    original = data_redis.hget(key, "value")
    assert original is not None

    data_redis.hset(key, "value", msgpack.packb({"i": 99}))
    stats = await store.ns.verifier.stats(verify=True)
    assert stats.broken is not None
    assert [(b.ref, b.chain, b.version, b.kind) for b in stats.broken] == [
        ("listing/553/assessment", "versions", 2, "hash")
    ]
    assert stats.verified is False
    history = await store.history("listing/553/assessment")
    assert [entry.chain_ok for entry in history.versions] == [True, False, True]

    data_redis.hset(key, "value", original)
    restored = await store.ns.verifier.stats(verify=True)
    assert (restored.broken, restored.verified) == ([], True)


async def test_a_value_edited_into_what_json_cannot_hold_is_a_broken_hash(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """A value rewritten in Redis as raw bytes or NaN (no JSON form, so no hash) is reported
    as that version's broken hash, the next link still checked; verify does not fail."""
    for i in range(4):
        await store.remember("odd/ref", {"i": i}, agent="scout")
    data_redis.hset(Keys().version("odd/ref", 2), "value", msgpack.packb({"i": b"\x00raw"}))
    data_redis.hset(Keys().version("odd/ref", 3), "value", msgpack.packb({"i": float("nan")}))

    broken = (await store.ns.verifier.stats(verify=True)).broken
    assert broken is not None
    assert [(b.version, b.kind) for b in broken] == [(2, "hash"), (3, "hash")]
    assert all(b.found.startswith("nothing JSON can hold") for b in broken)
    history = await store.history("odd/ref")
    assert [entry.chain_ok for entry in history.versions] == [True, False, False, True]


async def test_verify_finds_edits_in_long_and_short_records_alike(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """A record longer than one read batch is streamed, short ones are checked many per
    round trip: an edit is reported at its exact version either way, and counts add up."""
    long_ref = "log/long"
    for i in range(BATCH + 20):
        await store.remember(long_ref, i, agent="scout")
    for n in range(30):
        await store.remember(f"short/{n}", n, agent="scout")
        await store.remember(f"short/{n}", n + 1, agent="scout")
    data_redis.hset(Keys().version(long_ref, BATCH + 7), "value", msgpack.packb("edited"))
    data_redis.hset(Keys().version("short/17", 2), "author", "mallory")

    stats = await store.ns.verifier.stats(verify=True)
    assert stats.broken is not None
    assert [(b.ref, b.version, b.kind) for b in stats.broken] == [
        (long_ref, BATCH + 7, "hash"),
        ("short/17", 2, "hash"),
    ]
    assert stats.checked_versions == BATCH + 20 + 60


async def test_verify_catches_a_rewritten_hash_at_the_next_link(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """Forging a version's hash too shows up as a broken link at the following version."""
    for i in range(3):
        await store.remember("a/b", i, agent="scout")
    key = Keys().version("a/b", 2)
    data_redis.hset(key, "value", msgpack.packb(42))
    forged = (await store.history("a/b")).versions[1]
    from baton.server.model.integrity import digest, version_body

    body = version_body(
        ref="a/b",
        version=2,
        value=42,
        author=forged.author,
        session=None,
        created_at=forged.created_at,
        tags=[],
        prev_hash=forged.prev_hash,
    )
    data_redis.hset(key, "hash", digest(body))

    broken = (await store.ns.verifier.stats(verify=True)).broken
    assert broken is not None
    assert [(b.version, b.kind) for b in broken] == [(3, "link")]


async def test_verify_checks_the_outcomes_chain(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """An outcome entry edited in place is reported in the outcomes chain."""
    await store.remember("a/b", 1, agent="scout", confidence=0.6)
    await store.ns.outcomes.record("failure", "RUN-1", agent="e", refs=["a/b"])
    await store.ns.outcomes.record("success", "RUN-2", agent="e", refs=["a/b"])
    log_key = Keys().outcomes("a/b")
    entry = msgpack.unpackb(data_redis.lindex(log_key, 0))
    entry["after"] = 0.9
    data_redis.lset(log_key, 0, msgpack.packb(entry))

    broken = (await store.ns.verifier.stats(verify=True)).broken
    assert broken is not None
    assert [(b.chain, b.version, b.kind) for b in broken] == [("outcomes", 1, "hash")]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"confidence": "0.99"}, "confidence"),
        ({"successes": "7"}, "successes"),
        ({"failures": "0"}, "failures"),
        ({"outcome_hash": "0" * 64}, "outcome_hash"),
        ({"version": "1"}, "version"),
        ({"hash": "0" * 64}, "hash"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
async def test_verify_holds_a_records_head_to_its_chains(
    store: RecordStore, data_redis: redis.Redis, edit: dict[str, str], field: str
) -> None:
    """A head edited behind Baton's back (confidence raised, an outcome counter changed, the
    outcomes chain's head replaced, the version set back to hide the newest, the hash
    swapped) is reported as a ``head`` problem naming the field first; an untouched record with
    outcomes on an older and on the current version verifies clean."""
    await store.remember("a/b", 1, agent="scout", confidence=0.6)
    await store.ns.outcomes.record("success", "RUN-1", agent="e", refs=["a/b"])
    await store.remember("a/b", 2, agent="scout", confidence=0.7)
    await store.ns.outcomes.record("failure", "RUN-2", agent="e", refs=["a/b"])
    assert (await store.ns.verifier.stats(verify=True)).broken == []

    data_redis.hset(Keys().head("a/b"), mapping=edit)
    broken = (await store.ns.verifier.stats(verify=True)).broken or []
    named = [(b.ref, b.kind, b.expected.split()[0]) for b in broken]
    if field == "version":  # the hash and confidence are then those of another version too
        assert named[0] == ("a/b", "head", "version") and {kind for _, kind, _ in named} == {"head"}
    else:
        assert named == [("a/b", "head", field)]


async def test_a_namespace_counts_the_value_bytes_it_stores(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """Every version's value counts towards its namespace's stored bytes (the quota
    BATON_MAX_NAMESPACE_BYTES reads), on one Redis and on a cluster alike; forgetting a
    record gives back all but its tombstones (one byte each)."""
    values = ["x" * 1000, {"text": "y" * 500}, "short"]
    for value in values[:2]:
        await store.remember("q/a", value, agent="scout")
    await store.remember("q/b", values[2], agent="scout")

    def stored() -> int:
        return int(data_redis.hget(Keys().search_stats, "bytes") or 0)

    assert stored() == sum(len(msgpack.packb(value)) for value in values)
    await store.forget("q/a", agent="scout", reason="test")
    assert stored() == len(msgpack.packb(values[2])) + 2 * len(msgpack.packb(None))


async def test_writes_survive_a_script_flush_without_asking_script_exists(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """Pipelines send their scripts straight away (no SCRIPT EXISTS round trip each time);
    after SCRIPT FLUSH the missing scripts are loaded and run, and nothing is lost or
    written twice: each write is one version, indexed and found by search."""
    client = async_redis(redis_url)
    store = Backend(client, Limits()).namespace("default").records
    session = "s-flush"
    await store.remember("flush/a", {"text": "before the flush"}, agent="scout", session=session)
    sync_redis.config_resetstat()
    sync_redis.script_flush()
    await store.remember("flush/a", {"text": "after the flush"}, agent="scout", session=session)
    await store.remember("flush/b", {"text": "another write"}, agent="scout", session=session)

    assert (await store.recall("flush/a")).version == 2
    assert [v.version for v in (await store.history("flush/a")).versions] == [1, 2]
    assert {h.doc for h in await store.search.search("flush another")} == {"f:flush/a", "f:flush/b"}
    stats = await store.ns.verifier.stats(verify=True)
    assert (stats.versions, stats.broken) == (3, [])
    assert "cmdstat_script|exists" not in sync_redis.info("commandstats")
    await client.aclose()


async def test_writers_with_stale_head_hints_still_append_in_order(
    store: RecordStore, data_url: str
) -> None:
    """Each process guesses a record's head from what it last saw (one round trip per
    write); when another process wrote in between, the guess is refused and the write is
    rebuilt on the real head: alternating writers through two processes' views still make
    versions 1..N with an unbroken chain, and expected_version still guards."""
    other_client = async_redis(data_url)
    other = Backend(other_client, Limits()).namespace("default").records
    try:
        written = []
        for n in range(6):
            writer = store if n % 2 == 0 else other
            written.append((await writer.remember("race/ref", n, agent="w")).version)
        assert written == [1, 2, 3, 4, 5, 6]
        history = await store.history("race/ref")
        assert [entry.chain_ok for entry in history.versions] == [True] * 6
        assert [entry.value for entry in history.versions] == list(range(6))
        with pytest.raises(VersionConflict) as refused:
            await store.remember("race/ref", "late", agent="w", expected_version=5)
        assert refused.value.extra["current_version"] == 6
        assert (await other.remember("race/ref", 6, agent="w", expected_version=6)).version == 7
    finally:
        await other_client.aclose()


async def test_a_forgotten_record_refuses_writes_even_from_a_stale_hint(
    store: RecordStore, data_url: str
) -> None:
    """A process that last saw a record before it was forgotten cannot write a new version
    on top of the tombstones."""
    other_client = async_redis(data_url)
    other = Backend(other_client, Limits()).namespace("default").records
    try:
        await other.remember("gone/ref", "v1", agent="w")
        await store.forget("gone/ref", agent="w", reason="test")
        with pytest.raises(VersionConflict, match="forgotten"):
            await other.remember("gone/ref", "v2", agent="w")
    finally:
        await other_client.aclose()


async def test_a_hint_with_the_right_number_but_another_hash_is_refused(
    store: RecordStore, data_url: str, data_redis: redis.Redis
) -> None:
    """A version can be written twice with different content (Redis lost its last second
    and another writer wrote the number again): a process whose hint names the lost version
    rebuilds on the real one, so the chain stays unbroken."""
    other_client = async_redis(data_url)
    other = Backend(other_client, Limits()).namespace("default").records
    keys = Keys("default")
    try:
        first = await store.remember("lost/ref", "v1", agent="a")
        await store.remember("lost/ref", "v2", agent="a")  # store's hint: version 2, its hash
        data_redis.delete(keys.version("lost/ref", 2))  # the write is lost: back to version 1
        data_redis.hset(keys.head("lost/ref"), mapping={"version": 1, "hash": first.hash})
        data_redis.hdel(keys.version("lost/ref", 1), "superseded_by")
        again = await other.remember("lost/ref", "v2 written again", agent="b")
        assert again.version == 2
        third = await store.remember("lost/ref", "v3", agent="a")
        assert (third.version, third.prev_hash) == (3, again.hash)
        history = await store.history("lost/ref")
        assert [entry.chain_ok for entry in history.versions] == [True, True, True]
        assert history.versions[1].value == "v2 written again"
    finally:
        await other_client.aclose()


async def test_only_a_write_that_wins_leaves_its_event_search_document_and_touch(
    store: RecordStore, data_url: str
) -> None:
    """A write that won is followed by its activity event, its search document and its
    session's touch (inside the write's script on one Redis, right after it on a cluster);
    a write refused by the script (another process wrote in between) leaves none of them."""
    await store.remember("follow/a", {"note": "zebra crossing"}, agent="scout", session="s-1")
    assert [(event.kind, event.ref) for event in await store.activity.recent()] == [
        ("remember", "follow/a")
    ]
    assert [hit.doc for hit in await store.search.search("zebra")] == ["f:follow/a"]
    assert await store.activity.touched("s-1") == {"follow/a": 1}

    other_client = async_redis(data_url)
    try:
        other = Backend(other_client, Limits()).namespace("default").records
        await other.remember("follow/a", "moved on", agent="other")
    finally:
        await other_client.aclose()
    with pytest.raises(VersionConflict):  # this process still guesses version 1
        await store.remember(
            "follow/a", {"note": "yak"}, agent="scout", session="s-2", expected_version=1
        )
    assert [event.agent for event in await store.activity.recent()] == ["other", "scout"]
    assert await store.search.search("yak") == []
    assert await store.activity.touched("s-2") == {}


async def test_a_write_opens_lists_and_reopens_its_session(store: RecordStore) -> None:
    """A session id first used by a write is created (by the writer, active) and listed
    among the sessions; a write in a session abandoned for idleness reopens it, and the
    session's touched set holds the version each write made."""
    await store.remember("open/a", 1, agent="scout", session="s-open")
    [listed] = await store.ns.sessions.recent()
    assert (listed.id, listed.agent, listed.status) == ("s-open", "scout", "active")
    assert listed.touched == {"open/a": 1}

    assert await store.ns.sessions.abandon_idle(0) == ["s-open"]
    assert (await store.ns.sessions.get("s-open")).status == "abandoned"
    await store.remember("open/a", 2, agent="executor", session="s-open")
    reopened = await store.ns.sessions.get("s-open")
    assert (reopened.agent, reopened.status, reopened.touched) == ("scout", "active", {"open/a": 2})
    assert await store.ns.sessions.abandon_idle(3600) == []  # active again, idle for no time


async def test_a_value_with_thousands_of_distinct_words_is_indexed_on_its_first_terms(
    store: RecordStore,
) -> None:
    """A large document (5,000 distinct words) is written once and indexed on its first
    ``MAX_DOCUMENT_TERMS`` distinct terms (the ref's come first), on one Redis inside the
    write's script as on a cluster after it: a term past them is not found, the value is
    whole."""
    words = [f"word{n}" for n in range(5_000)]
    written = await store.remember("big/doc", " ".join(words), agent="scout")
    assert written.version == 1
    found = await store.search.search(f"word{MAX_DOCUMENT_TERMS - 10}")
    assert [hit.doc for hit in found] == ["f:big/doc"]
    assert await store.search.search(f"word{MAX_DOCUMENT_TERMS + 10}") == []
    assert (await store.recall("big/doc")).value == " ".join(words)


async def test_a_failing_follow_up_never_costs_the_write(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """If a write's follow-up fails (here the activity stream's key holds a string), the
    version is written and answered all the same, the other follow-ups still run (the value
    is found by search), and the failure is logged with Redis' own message."""
    data_redis.set(store.keys.events, "not a stream")
    with capture_logs() as logs:
        written = await store.remember("follow/b", {"note": "kept"}, agent="scout")
    assert written.version == 1
    assert (await store.recall("follow/b")).value == {"note": "kept"}
    assert (await store.history("follow/b")).versions[0].chain_ok
    assert [hit.doc for hit in await store.search.search("kept")] == ["f:follow/b"]
    [warning] = [entry for entry in logs if entry["event"] == "a write's follow-ups failed"]
    assert "WRONGTYPE" in warning["error"]


async def test_a_write_between_a_head_and_its_chains_is_not_a_break(
    store: RecordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write landing after verify read a record's head and before it read the rest of
    the record (made to land exactly there) is not reported: the record is read again as of
    one instant."""
    for i in range(BATCH):
        await store.remember("live/long", {"i": i}, agent="ops")
    versions, landed = store.versions, []

    async def versions_then_a_write(
        ref: str, current: int, first: int = 1
    ) -> AsyncIterator[dict[bytes, bytes]]:
        async for fields in versions(ref, current, first):
            yield fields
        if not landed:
            landed.append(await store.remember(ref, {"i": "late"}, agent="ops"))

    monkeypatch.setattr(store, "versions", versions_then_a_write)
    assert (await store.ns.verifier.stats(verify=True)).broken == []
    assert [written.version for written in landed] == [BATCH + 1]


async def test_verify_during_live_writes_reports_nothing(store: RecordStore) -> None:
    """verify on a store taking writes (new versions and outcomes on the very records it
    reads) reports no broken link: a record whose head moved while its chains were read is
    read again, not reported."""
    for n in range(4):
        await store.remember(f"live/r{n}", {"i": 0}, agent="ops")
    await store.remember("live/long", {"i": 0}, agent="ops")
    for i in range(BATCH):  # long enough to be checked on its own, in several round trips
        await store.remember("live/long", {"i": i}, agent="ops")
    writing = True

    async def write() -> None:
        i = 0
        while writing:
            i += 1
            ref = ("live/long", *(f"live/r{n}" for n in range(4)))[i % 5]
            await store.remember(ref, {"i": i}, agent="ops")
            await store.ns.outcomes.record("success", f"RUN-{i}", agent="ops", refs=[ref])

    writer = asyncio.create_task(write())
    try:
        for _ in range(20):
            assert (await store.ns.verifier.stats(verify=True)).broken == []
    finally:
        writing = False
        await writer


async def test_new_namespaces_at_once_never_pass_the_limit(redis_url: str) -> None:
    """Twenty new namespaces written to at the same moment, with room for five: exactly
    five are admitted, the others are refused naming BATON_MAX_NAMESPACES, and the ones
    admitted take writes. (One script on one key: the same on a cluster, whose asyncio
    client is not driven with twenty connections opening at once: test_memories.zipf_corpus.)"""
    client = async_redis(redis_url)
    limited = Backend(client, Limits(max_namespaces=5))
    names = [f"team-{n}" for n in range(20)]
    outcomes = await asyncio.gather(
        *(limited.namespace(name).admit() for name in names), return_exceptions=True
    )
    admitted = [name for name, outcome in zip(names, outcomes, strict=True) if outcome is None]
    refused = [outcome for outcome in outcomes if outcome is not None]
    assert len(admitted) == 5
    assert all(isinstance(error, QuotaReached) for error in refused)
    assert all("BATON_MAX_NAMESPACES" in str(error) for error in refused)
    written = await limited.namespace(admitted[0]).records.remember("a/b", 1, agent="ops")
    assert written.version == 1
    await client.aclose()


async def test_eight_writers_at_once_pass_the_terms_quota_by_no_more_than_they_hold(
    redis_url: str,
) -> None:
    """Eight writers flooding a namespace with new words (50 a record) against a quota of
    2,000 distinct terms are refused once it is reached; what passes it is at most the
    eight writes in flight (counts are read before every write near the quota, and each
    process adds its own writes at once), not seconds of writes between two reads."""
    client = async_redis(redis_url)
    ns = Backend(client, Limits(max_index_terms=2_000)).namespace("terms-flood")

    async def writer(w: int) -> int:
        for n in range(200):  # 8 x 200 x 50: forty times the quota
            words = " ".join(f"t{w}x{n}y{k}" for k in range(50))
            try:
                await ns.records.remember(f"w{w}/{n}", words, agent="flood")
            except QuotaReached:
                return n
        return 200

    written = await asyncio.gather(*(writer(w) for w in range(8)))
    terms = int(await client.hget(ns.keys.search_stats, "terms") or 0)
    assert 2_000 <= terms <= 2_000 + 8 * 50, (terms, written)
    await client.aclose()


async def test_a_namespace_from_before_the_quota_counts_is_recounted_once(
    store: RecordStore, data_redis: redis.Redis
) -> None:
    """A namespace created now has its quota counts marked exact at its first write; one
    written before Baton kept them (no counts in its search stats hash) is recounted from
    what it stores: the same stored bytes and search terms the writes and forgets counted;
    a second recount does nothing."""
    await store.remember("q/a", "x" * 1000, agent="scout")
    await store.remember("q/a", {"text": "a second version of it"}, agent="scout")
    await store.remember("q/b", {"text": "alpha beta gamma"}, agent="scout")
    await store.remember("q/c", "forgotten soon", agent="scout")
    await store.forget("q/c", agent="scout", reason="test")
    await store.ns.memories.save("the cache keys expire after an hour in staging")
    stats = Keys().search_stats
    counted = [int(each) for each in data_redis.hmget(stats, "bytes", "terms")]
    assert all(counted)
    assert data_redis.hget(stats, "counted") == b"1"
    assert await recount_once(store.ns) is None
    data_redis.hdel(stats, "bytes", "terms", "counted")  # as a namespace from before them
    assert await recount_once(store.ns) == tuple(counted)
    assert [int(each) for each in data_redis.hmget(stats, "bytes", "terms")] == counted
    assert await recount_once(store.ns) is None


async def test_writing_several_records_follows_each_plan_on_the_current_versions(
    store: RecordStore,
) -> None:
    """``write_all`` makes each record's version from the version current when it writes:
    a record another writer moved is written on top of that one; a plan with nothing left
    to write (its record was forgotten meanwhile) is dropped and the others are written; a
    plan that refuses writes nothing at all."""
    await store.remember("plan/moved", {"n": 1}, agent="a")
    await store.remember("plan/gone", {"n": 1}, agent="a")
    await store.forget("plan/gone", agent="a", reason="test")

    def next_of(ref: str) -> Plan:
        def make(record: RecordVersion | None) -> Planned | None:
            if record is not None and record.forgotten is not None:
                return None
            n = 0 if record is None else record.value["n"]
            return Planned(ref, {"n": n + 1}, "b", [])

        return make

    await store.remember("plan/moved", {"n": 5}, agent="other")  # after the plans were made
    written = await store.write_all(
        [(ref, next_of(ref)) for ref in ("plan/new", "plan/moved", "plan/gone")], []
    )
    assert [(each.ref, each.version) for each in written] == [("plan/new", 1), ("plan/moved", 3)]
    assert (await store.recall("plan/moved")).value == {"n": 6}
    with pytest.raises(NotFound):
        await store.recall("plan/gone")

    def refuse(record: RecordVersion | None) -> Planned:
        raise VersionConflict("no")

    with pytest.raises(VersionConflict):
        await store.write_all([("plan/other", next_of("plan/other")), ("plan/new", refuse)], [])
    with pytest.raises(NotFound):
        await store.recall("plan/other")
