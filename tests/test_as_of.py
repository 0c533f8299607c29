"""The store as of a moment: reads, listings and searches answer with the versions that
were current then, and the confidence they had then. Against the real embedded server and
a cluster."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import httpx
import pytest
from mcp import Client

from baton.agents import BatonClient
from baton.server.mcp.mcp_server import Binding, create_mcp_server
from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.memory_models import SessionStartInput
from baton.server.model.validation import check_moment
from baton.server.stores.as_of import PROBES
from baton.server.stores.backend import Backend
from baton.server.stores.records import RecordStore
from tests.conftest import as_agent, handoff_input

pytestmark = pytest.mark.anyio

REF = "listing/553/assessment"


def just_before(stamp: str) -> str:
    """The moment one microsecond before ``stamp``."""
    return check_moment((datetime.fromisoformat(stamp) - timedelta(microseconds=1)).isoformat())


async def test_a_read_as_of_a_moment_answers_the_version_current_then(
    store: RecordStore,
) -> None:
    """Between v1 and v2 a read answers v1, with the confidence it had then (before the
    outcome recorded on it later); before v1 there is nothing yet; after v2, v2."""
    first = await store.remember(REF, {"verdict": "apply"}, agent="scout", confidence=0.8)
    await store.ns.outcomes.record("failure", "RUN-1", agent="executor", refs=[REF])
    second = await store.remember(REF, {"verdict": "skip"}, agent="scout")
    as_of = store.ns.as_of

    then = await as_of.recall(REF, first.created_at)
    assert (then.version, then.value, then.confidence) == (1, {"verdict": "apply"}, 0.8)
    assert then.current_version == 2
    assert (await as_of.recall(REF, just_before(second.created_at))).confidence == 0.52
    assert (await as_of.recall(REF, second.created_at)).value == {"verdict": "skip"}
    with pytest.raises(NotFound, match="had no version yet"):
        await as_of.recall(REF, just_before(first.created_at))
    with pytest.raises(NotFound, match="no record"):
        await as_of.recall("listing/1/none", second.created_at)


async def test_the_version_current_then_is_found_among_many(store: RecordStore) -> None:
    """A record of more versions than one round of probes reads: at each version's own
    time the answer is that version, one microsecond before it the version before."""
    times = [(await store.remember(REF, n, agent="scout")).created_at for n in range(1, 3 * PROBES)]
    at_times = await store.ns.as_of.numbers([REF] * len(times), times[-1])
    assert at_times == [len(times)] * len(times)
    for number in (1, 2, PROBES - 1, PROBES, PROBES + 1, 2 * PROBES + 7, len(times)):
        stamp = times[number - 1]
        assert await store.ns.as_of.numbers([REF], stamp) == [number]
        assert await store.ns.as_of.numbers([REF], just_before(stamp)) == [number - 1 or None]


async def test_a_listing_as_of_a_moment_shows_the_store_as_it_was(store: RecordStore) -> None:
    """Records written later are absent; tags and confidence filter on the versions current
    then; a record forgotten since shows its tombstone, as a listing of now does."""
    await store.remember("listing/1/a", "old", agent="s", tags=["hot"], confidence=0.9)
    await store.remember("listing/2/a", "kept", agent="s", tags=["hot"], confidence=0.9)
    mark = (await store.remember("listing/3/a", "gone", agent="s", tags=["hot"])).created_at
    await store.remember("listing/1/a", "new", agent="s", tags=["cold"], confidence=0.1)
    await store.remember("listing/4/a", "later", agent="s", tags=["hot"])
    await store.forget("listing/3/a", agent="s", reason="wrong")

    page = await store.ns.as_of.list_records(mark, scope="listing")
    assert [(r.ref, r.value, r.forgotten is None) for r in page.records] == [
        ("listing/1/a", "old", True),
        ("listing/2/a", "kept", True),
        ("listing/3/a", None, False),
    ]
    hot = await store.ns.as_of.list_records(mark, tags=["hot"], min_confidence=0.8)
    assert [r.ref for r in hot.records] == ["listing/1/a", "listing/2/a"]
    now = await store.list_records(tags=["hot"], min_confidence=0.8)
    assert [r.ref for r in now.records] == ["listing/2/a"]


async def test_a_search_as_of_a_moment_ranks_the_values_of_then(store: RecordStore) -> None:
    """A record whose value matched then is found though it no longer matches; one that
    matches only now is not; the better match ranks first."""
    await store.remember("fact/a", "rate limit sixty seconds", agent="s")
    await store.remember("fact/b", "rate limit rate limit burst", agent="s")
    mark = (await store.remember("other/c", "unrelated words", agent="s")).created_at
    await store.remember("fact/a", "no longer about that", agent="s")
    await store.remember("other/c", "rate limit now", agent="s")

    then = await store.ns.as_of.list_records(mark, query="rate limit")
    assert [(r.ref, r.version) for r in then.records] == [("fact/b", 1), ("fact/a", 1)]
    now = await store.list_records(query="rate limit")
    assert "fact/a" not in [r.ref for r in now.records]
    scoped = await store.ns.as_of.list_records(mark, query="rate limit", scope="other")
    assert scoped.records == []


def test_as_of_takes_any_iso_time_and_refuses_anything_else() -> None:
    """An offset is converted to UTC, no offset means UTC; text that is no time, or a time
    before 1970 or past 9999 in UTC, is refused naming ``as_of``."""
    assert check_moment("2026-12-07T12:00:00+02:00") == "2026-12-07T10:00:00.000000Z"
    assert check_moment("2026-12-07T10:00:00") == "2026-12-07T10:00:00.000000Z"
    for wrong in ("yesterday", "0999-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00"):
        with pytest.raises(InvalidInput, match="as_of"):
            check_moment(wrong)


def test_as_of_over_rest_the_client_and_its_mistakes(http: httpx.Client, api_url: str) -> None:
    """``as_of`` on a read and a listing over HTTP and through the Python client; a time
    that is none, or one given with ``version``, is a 422 naming ``as_of``."""
    first = http.post("/v1/records", json={"ref": REF, "value": "apply"}).json()
    http.post("/v1/records", json={"ref": REF, "value": "skip"})

    read = http.get(f"/v1/records/{REF}", params={"as_of": first["created_at"]}).json()
    assert (read["version"], read["value"]) == (1, "apply")
    listed = http.get("/v1/records", params={"as_of": first["created_at"], "scope": "listing"})
    assert [r["value"] for r in listed.json()["records"]] == ["apply"]
    with BatonClient(api_url, agent="reader") as client:
        assert client.recall(REF, as_of=first["created_at"]).value == "apply"
        assert client.list_records(as_of=first["created_at"]).records[0].version == 1
    for params in ({"as_of": "soon"}, {"as_of": first["created_at"], "version": 2}):
        answer = http.get(f"/v1/records/{REF}", params=params)
        assert (answer.status_code, answer.json()["field"]) == (422, "as_of"), params


async def test_what_an_agent_had_in_front_of_it_at_a_moment(store: RecordStore) -> None:
    """The packet the executor held then, its pin stale or not as it stood then, and the
    versions its open session had read by then; another agent's session is not its."""
    handoffs, as_of = store.ns.handoffs, store.ns.as_of
    await store.remember(REF, {"verdict": "apply"}, agent="scout")
    await store.remember("rules/fees", "2%", agent="scout")
    packet = await handoffs.handoff(
        handoff_input(to="executor", summary="apply?", pins=[{"ref": REF}]), from_agent="scout"
    )
    before_claim = utc_now()
    session = (await store.ns.sessions.start(SessionStartInput(), caller=as_agent("executor"))).id
    other = (await store.ns.sessions.start(SessionStartInput(), caller=as_agent("pricer"))).id
    await handoffs.resume("executor", session=session)
    await store.recall("rules/fees", agent="executor", session=session)
    await store.recall("rules/fees", agent="pricer", session=other)
    read = utc_now()
    moved = await store.remember(REF, {"verdict": "skip"}, agent="scout")
    await store.recall(REF, agent="executor", session=session)
    await handoffs.complete(packet.id, "executor", "done")
    done = utc_now()

    assert (await as_of.agent("executor", before_claim)).claimed == []
    then = await as_of.agent("executor", read)
    [held] = then.claimed
    assert held.packet.id == packet.id
    assert [(p.ref, p.version, p.current_version, p.stale) for p in held.pins] == [
        (REF, 1, 1, False)
    ]
    assert [(s.ref, s.version, s.session) for s in then.seen] == [
        (REF, 1, session),
        ("rules/fees", 1, session),
    ]
    [held] = (await as_of.agent("executor", moved.created_at)).claimed
    assert [(p.current_version, p.stale) for p in held.pins] == [(2, True)]
    after = await as_of.agent("executor", done)
    assert after.claimed == []
    assert [(s.ref, s.version) for s in after.seen] == [(REF, 2), ("rules/fees", 1)]


def test_what_an_agent_had_over_rest_shows_only_what_the_caller_may_read(
    http: httpx.Client, api_url: str
) -> None:
    """``GET /v1/agents/{agent}/as-of`` answers the packets and sightings; a time that is
    none is a 422 naming ``as_of``."""
    http.post("/v1/records", json={"ref": REF, "value": "apply"})
    http.post("/v1/handoffs", json={"to": "executor", "summary": "go", "pins": [{"ref": REF}]})
    with BatonClient(api_url, agent="executor", session="exec-1") as executor:
        executor.resume()
        executor.recall(REF)
    now = utc_now()
    then = http.get("/v1/agents/executor/as-of", params={"as_of": now}).json()
    assert [held["packet"]["summary"] for held in then["claimed"]] == ["go"]
    with BatonClient(api_url, agent="reader") as reader:
        assert [c.packet.summary for c in reader.agent_as_of("executor", now).claimed] == ["go"]
    assert [(s["ref"], s["version"], s["session"]) for s in then["seen"]] == [(REF, 1, "exec-1")]
    wrong = http.get("/v1/agents/executor/as-of", params={"as_of": "later"})
    assert (wrong.status_code, wrong.json()["field"]) == (422, "as_of")


def test_versions_written_at_once_are_in_the_order_of_their_times(
    http: httpx.Client, api_url: str
) -> None:
    """Eight writers at once on one record, each in its own session: every version's time
    is later than the one before, so as_of at a version's own time answers that version."""

    def write(n: int) -> None:
        with httpx.Client(
            base_url=api_url, headers={"X-Baton-Agent": f"w{n}", "X-Baton-Session": f"s{n}"}
        ) as client:
            for i in range(25):
                assert client.post("/v1/records", json={"ref": REF, "value": [n, i]}).is_success

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    times = [v["created_at"] for v in http.get(f"/v1/history/{REF}").json()["versions"]]
    assert len(times) == 200
    assert times == sorted(times) and len(set(times)) == 200
    for number in (17, 101, 200):
        read = http.get(f"/v1/records/{REF}", params={"as_of": times[number - 1]}).json()
        assert read["version"] == number


async def test_mcp_recall_of_one_record_as_of_a_moment(backend: Backend) -> None:
    """The MCP ``recall`` tool with a ref and as_of answers the version current then; with
    a version too, or a time that is none, an error result naming as_of."""
    binding = Binding(caller=as_agent("scout", session="scout-session"), backend=backend)
    ns = backend.namespace("default")
    first = await ns.records.remember(REF, "apply", agent="scout")
    await ns.records.remember(REF, "skip", agent="scout")
    async with Client(create_mcp_server(binding)) as client:
        then = await client.call_tool("recall", {"ref": REF, "as_of": first.created_at})
        assert then.structured_content is not None
        assert then.structured_content["version"] == 1
        for wrong in ({"as_of": "soon"}, {"as_of": first.created_at, "version": 2}):
            answer = await client.call_tool("recall", {"ref": REF, **wrong})
            assert answer.is_error and "as_of" in answer.content[0].text  # type: ignore[union-attr]
