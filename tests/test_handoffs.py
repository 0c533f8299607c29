"""Handoff packets in the store: pins, staleness, the state machine, leases and expiry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import jsonpatch
import msgpack
import pytest
import redis
from rq import Queue
from rq.job import Job
from structlog.testing import capture_logs

from baton.queue.dispatch import FAILURE_TTL, queue_name
from baton.queue.job_guard import DELIVER, JOB_SERIALIZER
from baton.server.model.errors import Forbidden, InvalidInput, NotFound, StateConflict
from baton.server.model.keys import NAMESPACES, Keys
from baton.server.model.memory_models import SessionEndInput, SessionStartInput
from baton.server.model.models import Pin
from baton.server.operations import HANDOFF
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from baton.server.stores.handoffs import HandoffStore, job_id
from baton.server.stores.records import RecordStore
from tests.conftest import as_agent, handoff_input

pytestmark = pytest.mark.anyio


async def hand(
    handoffs: HandoffStore, to: str = "executor", session: str | None = None, **options: object
) -> str:
    packet = await handoffs.handoff(
        handoff_input(to=to, summary="work", **options), from_agent="scout", session=session
    )
    return packet.id


async def test_packet_ids_and_fields(handoffs: HandoffStore) -> None:
    """A packet gets an id h_ + 8 hex digits and keeps what the sender wrote."""
    packet = await handoffs.handoff(
        handoff_input(
            to="executor",
            summary="Two listings worth an application",
            next=["Draft 482", "Draft 553"],
            open=["Is 60s enough?"],
            note="n",
        ),
        from_agent="scout",
    )
    assert len(packet.id) == 10 and packet.id.startswith("h_")
    int(packet.id[2:], 16)
    assert (packet.from_agent, packet.to_agent, packet.state) == ("scout", "executor", "queued")
    assert (packet.next, packet.open, packet.note) == (
        ["Draft 482", "Draft 553"],
        ["Is 60s enough?"],
        "n",
    )
    assert packet.log is not None
    assert [(t.from_state, t.to_state, t.agent) for t in packet.log] == [("new", "queued", "scout")]


async def test_stale_pin_is_flagged_and_serves_the_pinned_value(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """Pin v1, write v2, resume: the stale entry says {ref, 1, 2} and the value is v1's."""
    await store.remember(
        "listing/553/assessment", {"verdict": "apply"}, agent="scout", confidence=0.7
    )
    await store.remember("listing/482/assessment", {"verdict": "apply"}, agent="scout")
    await hand(
        handoffs,
        pins=[{"ref": "listing/553/assessment", "version": 1}, {"ref": "listing/482/assessment"}],
    )
    await store.remember("listing/553/assessment", {"verdict": "maybe"}, agent="scout")

    resumed = await handoffs.resume("executor")
    assert [(s.ref, s.pinned_version, s.current_version) for s in resumed.stale] == [
        ("listing/553/assessment", 1, 2)
    ]
    pins = {pin.ref: pin for pin in resumed.pins}
    assert pins["listing/553/assessment"].value == {"verdict": "apply"}
    assert pins["listing/553/assessment"].confidence == 0.7
    assert (pins["listing/482/assessment"].version, pins["listing/482/assessment"].stale) == (
        1,
        False,
    )


async def test_a_stale_pin_explains_what_moved_who_moved_it_and_what_came_of_it(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """A pin that moved seven times since the packet was made comes back explained: both
    values and the JSON Patch that turns one into the other, the count of versions since,
    who wrote the last five (author, session, time), the outcomes recorded since the packet
    (not the one before it), and the confidence then and now."""
    ref = "listing/553/assessment"
    await store.remember(ref, {"verdict": "apply", "budget": 600}, agent="scout", confidence=0.7)
    await store.ns.outcomes.record("success", "BEFORE-1", agent="executor", refs=[ref])
    await hand(handoffs, pins=[{"ref": ref}])
    for n in range(2, 9):
        writer, session = ("scout", "s-scout") if n % 2 else ("editor", None)
        value = {"verdict": "maybe", "budget": 600 - 25 * n, "notes": [f"edit {n}"]}
        await store.remember(ref, value, agent=writer, session=session)
    await store.ns.outcomes.record("failure", "AFTER-1", agent="auditor", refs=[ref])

    resumed = await handoffs.resume("executor")
    [stale] = resumed.stale
    assert (stale.pinned_version, stale.current_version, stale.moves) == (1, 8, 7)
    assert stale.pinned_value == {"verdict": "apply", "budget": 600}
    assert stale.current_value == {"verdict": "maybe", "budget": 400, "notes": ["edit 8"]}
    assert jsonpatch.apply_patch(stale.pinned_value, stale.patch) == stale.current_value
    assert {operation["path"] for operation in stale.patch} == {"/verdict", "/budget", "/notes"}
    assert [(v.version, v.author, v.session) for v in stale.versions] == [
        (4, "editor", None),
        (5, "scout", "s-scout"),
        (6, "editor", None),
        (7, "scout", "s-scout"),
        (8, "editor", None),
    ]
    assert all(v.created_at for v in stale.versions)
    assert [(o.outcome_ref, o.agent) for o in stale.outcomes] == [("AFTER-1", "auditor")]
    assert stale.pinned_confidence > stale.current_confidence == stale.outcomes[0].after


async def test_a_large_stale_value_gets_no_patch_and_a_mid_sized_one_gets_it_elsewhere(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """A pin whose values are over 16 KiB of JSON together comes back with both values and
    no patch (jsonpatch's list diff took 26 s on a 150,000-item list); a list of a few
    hundred items, past what is diffed on the event loop, gets its patch from the analysis
    process, and the patch turns the pinned value into the current one."""
    big, mid = list(range(5000)), list(range(300))
    await store.remember("r/big", big, agent="scout")
    await store.remember("r/mid", mid, agent="scout")
    await hand(handoffs, pins=[{"ref": "r/big"}, {"ref": "r/mid"}])
    await store.remember("r/big", big[::-1], agent="scout")
    await store.remember("r/mid", mid[::-1], agent="scout")

    stale = {entry.ref: entry for entry in (await handoffs.resume("executor")).stale}
    assert stale["r/big"].patch is None
    assert (stale["r/big"].pinned_value, stale["r/big"].current_value) == (big, big[::-1])
    assert stale["r/mid"].patch is not None
    assert jsonpatch.apply_patch(mid, stale["r/mid"].patch) == mid[::-1]


async def test_a_resolved_pin_shows_what_recall_shows_of_its_version(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """A pin shows its version's value, author, time and confidence exactly as recall reads
    that version: the confidence outcomes moved while it is the current version, and what it
    kept once the record moved on."""
    for ref in ("a/moving", "a/steady"):
        await store.remember(ref, f"{ref} v1", agent="scout", confidence=0.6)
    await store.ns.outcomes.record(
        "success", "RUN-1", agent="executor", refs=["a/moving", "a/steady"]
    )
    await hand(handoffs, pins=[{"ref": "a/moving"}, {"ref": "a/steady"}])
    await store.remember("a/moving", "a/moving v2", agent="other", confidence=0.9)

    resumed = await handoffs.resume("executor")
    assert [(pin.ref, pin.stale) for pin in resumed.pins] == [
        ("a/moving", True),
        ("a/steady", False),
    ]
    for pin in resumed.pins:
        shown = await store.recall(pin.ref, version=pin.version)
        assert (pin.value, pin.author, pin.created_at, pin.current_version) == (
            shown.value,
            shown.author,
            shown.created_at,
            shown.current_version,
        )
        assert pin.confidence == shown.confidence
    assert resumed.pins[1].confidence > 0.6  # moved by the outcome


async def test_default_pins_are_the_senders_touched_set(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """With pins omitted, every record the sender's session touched is pinned at the version
    that session last saw, even if the record moved on since, in the order Python sorts the
    refs (byte by byte: upper case first); a session that touched nothing pins nothing."""
    session = (await store.ns.sessions.start(SessionStartInput(), caller=as_agent("scout"))).id
    idle = (await store.ns.sessions.start(SessionStartInput(), caller=as_agent("scout"))).id
    for ref in ("a/one", "a_b/x", "B/upper", "a-b/x"):
        await store.remember(ref, 1, agent="scout", session=session)
    await store.remember("a/two", 1, agent="scout")
    await store.recall("a/two", agent="scout", session=session)
    await store.remember("a/two", 2, agent="other")
    await store.remember("a/untouched", 1, agent="scout")

    packet = await handoffs.handoff(
        handoff_input(to="executor", summary="s"), from_agent="scout", session=session
    )
    pinned = [(pin.ref, pin.version) for pin in packet.pins]
    assert pinned == [("B/upper", 1), ("a-b/x", 1), ("a/one", 1), ("a/two", 1), ("a_b/x", 1)]
    assert (await handoffs.get(packet.id)).pins == packet.pins
    nothing = await handoffs.handoff(
        handoff_input(to="executor", summary="s"), from_agent="scout", session=idle
    )
    assert nothing.pins == (await handoffs.get(nothing.id)).pins == []


async def test_resume_claims_the_oldest_first_and_then_answers_empty(
    handoffs: HandoffStore,
) -> None:
    """resume is FIFO by creation time; with nothing queued it says so without an error."""
    ids = [await hand(handoffs) for _ in range(3)]
    claimed = [(await handoffs.resume("executor")).packet for _ in range(3)]
    assert [packet.id for packet in claimed if packet] == ids
    empty = await handoffs.resume("executor")
    assert (empty.packet, empty.message) == (None, "no packets waiting for executor")


async def wait_for_empty_queue(client: redis.Redis, agent: str) -> None:
    """Until ``agent``'s RQ queue is empty (a job dropped off the request's path), 2 s at
    most; fails if it never empties."""
    queue = Queue(queue_name("default", agent), connection=client)
    for _ in range(100):
        if queue.count == 0:
            return
        await asyncio.sleep(0.02)
    assert queue.count == 0


async def test_pull_claim_removes_the_rq_job(
    handoffs: HandoffStore, sync_redis: redis.Redis
) -> None:
    """A packet claimed by resume no longer waits on the agent's RQ queue, and its job hash
    is gone (dropped inside the claim on one Redis, just after the answer when RQ has its own
    Redis)."""
    packet_id = await hand(handoffs)
    assert Queue(queue_name("default", "executor"), connection=sync_redis).count == 1
    await handoffs.resume("executor")
    await wait_for_empty_queue(sync_redis, "executor")
    assert not sync_redis.exists(Job.key_for(job_id("default", packet_id, 0)))


async def test_a_claim_is_announced_with_the_packet_it_took(handoffs: HandoffStore) -> None:
    """The claim's event names the packet resume picked (the oldest), which only the claim
    itself knew."""
    first = await hand(handoffs)
    await hand(handoffs)
    await handoffs.resume("executor")
    newest = (await handoffs.activity.recent())[0]
    assert (newest.kind, newest.agent, newest.packet) == ("claim", "executor", first)
    assert newest.text == f"executor claimed {first} (resume)"


async def test_a_failing_claim_follow_up_never_costs_the_claim(
    handoffs: HandoffStore, store: RecordStore, data_redis: redis.Redis, sync_redis: redis.Redis
) -> None:
    """If what follows a claim fails (here the activity stream's key holds a string), resume
    still answers the packet it claimed with its pins, its RQ job is still dropped, and the
    failure is logged with Redis' own message: only the event is missing."""
    await store.remember("follow/pin", {"note": "kept"}, agent="scout")
    packet_id = await hand(handoffs, pins=[{"ref": "follow/pin"}])
    data_redis.set(handoffs.keys.events, "not a stream")
    with capture_logs() as logs:
        resumed = await handoffs.resume("executor")
    assert resumed.packet is not None and resumed.packet.id == packet_id
    assert [(pin.ref, pin.value) for pin in resumed.pins] == [("follow/pin", {"note": "kept"})]
    assert (await handoffs.get(packet_id)).state == "claimed"
    await wait_for_empty_queue(sync_redis, "executor")
    failures = [entry for entry in logs if "failed" in entry["event"]]
    assert failures and all("WRONGTYPE" in entry["error"] for entry in failures)


async def test_a_failing_handoff_event_never_costs_the_packet_or_its_job(
    handoffs: HandoffStore, data_redis: redis.Redis, sync_redis: redis.Redis
) -> None:
    """If a handoff's event cannot be written (here the activity stream's key holds a
    string), the packet is stored and queued all the same, its RQ job waits in the
    receiver's queue, and the failure is logged with Redis' own message."""
    data_redis.set(handoffs.keys.events, "not a stream")
    with capture_logs() as logs:
        packet_id = await hand(handoffs)
    assert (await handoffs.get(packet_id)).state == "queued"
    queue = Queue(queue_name("default", "executor"), connection=sync_redis)
    assert queue.job_ids == [job_id("default", packet_id, 0)]
    failures = [
        entry for entry in logs if "failed" in entry["event"] or "not written" in entry["event"]
    ]
    assert failures and all("WRONGTYPE" in entry["error"] for entry in failures)


async def test_a_redelivered_packet_drops_the_job_of_its_delivery(
    handoffs: HandoffStore, sync_redis: redis.Redis
) -> None:
    """A released packet is queued again with a new RQ job (job_seq 1); resuming it drops
    that job, not the first one's id."""
    packet_id = await hand(handoffs)
    await handoffs.resume("executor")
    await handoffs.release(packet_id, "executor")
    assert sync_redis.exists(Job.key_for(job_id("default", packet_id, 1)))
    await handoffs.resume("executor")
    await wait_for_empty_queue(sync_redis, "executor")
    assert not sync_redis.exists(Job.key_for(job_id("default", packet_id, 1)))


async def test_resume_drops_the_job_when_rq_has_its_own_redis(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """With the queues on another Redis (here another database of the server), resume
    answers from one script on the data Redis and drops the job on the queue Redis just
    after."""
    queue_url = f"{redis_url}?db=2"
    queues = redis.Redis.from_url(queue_url)
    queues.flushdb()
    settings = Settings(redis_url=redis_url, queue_url=queue_url)
    async with open_backend(settings) as backend:
        handoffs = backend.namespace("default").handoffs
        packet_id = await hand(handoffs)
        assert Queue(queue_name("default", "executor"), connection=queues).count == 1
        resumed = await handoffs.resume("executor")
        assert resumed.packet is not None and resumed.packet.id == packet_id
        await wait_for_empty_queue(queues, "executor")
    assert not queues.exists(Job.key_for(job_id("default", packet_id, 0)))
    queues.flushdb()
    queues.close()


async def commands_sent(
    sync_redis: redis.Redis, redis_url: str, action: Callable[[], Awaitable[object]]
) -> list[str]:
    """The names of the commands clients sent to database 3 while ``action`` ran (Redis'
    MONITOR shows them, and apart from them what scripts ran)."""
    marker = redis.Redis.from_url(redis_url)
    marker.ping()  # connected before MONITOR starts: it sends only the ECHO below
    try:
        with sync_redis.monitor() as monitor:
            await action()
            marker.echo("done")
            sent = []
            for entry in monitor.listen():
                if entry["command"] == "ECHO done":
                    return sent
                if entry["db"] == 3 and entry["client_type"] != "lua":
                    sent.append(entry["command"].split()[0])
    finally:
        marker.close()
    raise AssertionError("MONITOR ended before the marker")


def own_url(redis_url: str) -> str:
    """Database 3: other Baton processes of the test session (an API server's sweeps) send
    commands to database 0 at any time."""
    return f"{redis_url}?db=3"


@asynccontextmanager
async def own_database(redis_url: str) -> AsyncIterator[Backend]:
    """A backend on a database of its own (see :func:`own_url`), with its scripts loaded."""
    url = own_url(redis_url)
    async with open_backend(Settings(redis_url=url, queue_url=url)) as backend:
        await backend.redis.flushdb()
        await backend.scripts.load(backend.redis)
        try:
            yield backend
        finally:
            await backend.redis.flushdb()


async def test_resume_claims_then_reads_the_pins_with_its_event(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """A resume reads the oldest packet's id, claims it with one script (given every key it
    touches), then reads the pins at their pinned versions and writes the claim's event in one
    pipeline; the packet's RQ job is dropped off the caller's path."""
    async with own_database(redis_url) as backend:
        ns = backend.namespace("default")
        for n in range(3):
            await ns.records.remember(f"one/{n}", n, agent="scout")
        await hand(ns.handoffs, pins=[{"ref": f"one/{n}"} for n in range(3)])
        resumed = None

        async def resume() -> None:
            nonlocal resumed
            resumed = await ns.handoffs.resume("executor")

        sent = await commands_sent(sync_redis, redis_url, resume)
        events = await ns.activity.recent(1)
        queue = Queue(
            queue_name("default", "executor"), connection=redis.Redis.from_url(own_url(redis_url))
        )
        for _ in range(200):
            if not queue.count:
                break
            await asyncio.sleep(0.01)
        queued_jobs = queue.count
    assert resumed is not None and [pin.value for pin in resumed.pins] == [0, 1, 2]
    assert sent[:6] == ["ZRANGE", "EVALSHA", "EVALSHA", "EVALSHA", "EVALSHA", "XADD"]
    assert [event.kind for event in events] == ["claim"]
    assert queued_jobs == 0


async def test_a_write_is_one_command_on_one_redis(redis_url: str, sync_redis: redis.Redis) -> None:
    """On one Redis a write with tags and a session is one script call that leaves the
    version, its listing entries (refs, agents, tags), the session's touch and listing, the
    namespace's registration for the sweep, the event and the search document."""
    async with own_database(redis_url) as backend:
        ns = backend.namespace("default")
        await ns.search.refresh_counts()  # read now: the write itself sends nothing else
        await ns.admit()  # the namespace quota's check: once per namespace and process

        async def write() -> None:
            await ns.records.remember(
                "one/fact", "gravel road", agent="scout", session="s-one", tags=["x", "y"]
            )

        sent = await commands_sent(sync_redis, redis_url, write)
        page = await ns.records.list_records(tags=["y"])
        session = await ns.sessions.get("s-one")
        [listed] = await ns.sessions.recent()
        registered = await backend.redis.sismember(NAMESPACES, "default")
        hits = await ns.search.search("gravel")
        events = await ns.activity.recent(1)
        agents = await backend.redis.smembers(ns.keys.agents)
    assert sent == ["EVALSHA"]
    assert [record.ref for record in page.records] == ["one/fact"]
    assert (session.touched, listed.id, registered) == ({"one/fact": 1}, "s-one", True)
    assert [hit.doc for hit in hits] == ["f:one/fact"]
    assert [(event.kind, event.ref) for event in events] == [("remember", "one/fact")]
    assert agents == {b"scout"}


async def test_a_handoff_is_one_script_then_rqs_own_enqueue(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """On one Redis a handoff's packet is one script call (its pins resolved, its id taken,
    the inbox's registration, the packet and its event), then RQ's own commands for its job
    follow in RQ's order (the job's hash before its id is queued); it answers the packet
    exactly as stored."""
    async with own_database(redis_url) as backend:
        ns = backend.namespace("default")
        await ns.records.remember("one/pin", 1, agent="scout")
        await hand(ns.handoffs)  # (RQ asks the server's version once per connection)
        packet = None

        async def handoff() -> None:
            nonlocal packet
            packet = await ns.handoffs.handoff(
                handoff_input(
                    to="executor", summary="s", pins=[{"ref": "one/pin"}], note="n", expires_in=60
                ),
                from_agent="scout",
            )

        sent = await commands_sent(sync_redis, redis_url, handoff)
        queue = Queue(
            queue_name("default", "executor"), connection=redis.Redis.from_url(own_url(redis_url))
        )
        job_ids = queue.job_ids
        inboxes = await backend.redis.smembers(ns.keys.inboxes)
        events = await ns.activity.recent(1)
        assert packet is not None
        stored = await ns.handoffs.get(packet.id)
        pins_field = await backend.redis.hget(ns.keys.inbox("executor").packet(packet.id), "pins")
    assert sent[0] == "EVALSHA"
    assert "MULTI" not in sent and sent.index("HSET") < sent.index("RPUSH")
    assert stored == packet and packet.pins == [Pin(ref="one/pin", version=1)]
    assert pins_field == msgpack.packb([["one/pin", 1]])  # whole numbers, as Python packs them
    assert job_ids[1:] == [job_id("default", packet.id, 0)]
    assert inboxes == {b"executor"}
    assert [(event.kind, event.packet) for event in events] == [("handoff", packet.id)]


async def test_handoff_enqueues_one_rq_job_with_the_policy(
    handoffs: HandoffStore, sync_redis: redis.Redis
) -> None:
    """The packet's RQ job names the packet, runs under the lease as its timeout, is
    retried as the policy says, and keeps its failure a week (the dead letter)."""
    packet_id = await hand(handoffs)
    job = Job.fetch(
        job_id("default", packet_id, 0), connection=sync_redis, serializer=JOB_SERIALIZER
    )
    policy = handoffs.policy
    assert job.func_name == DELIVER and job.args == ["default", "executor", packet_id]
    assert (job.timeout, job.retries_left, job.failure_ttl) == (
        int(policy.lease_seconds),
        policy.handler_tries - 1,
        FAILURE_TTL,
    )
    assert Queue(queue_name("default", "executor"), connection=sync_redis).job_ids == [job.id]


async def test_release_puts_the_packet_back_in_front(handoffs: HandoffStore) -> None:
    """A released packet is the next one resumed, before younger packets."""
    first, second = await hand(handoffs), await hand(handoffs)
    assert (await handoffs.resume("executor")).packet.id == first  # type: ignore[union-attr]
    released = await handoffs.release(first, "executor", reason="not now")
    assert released.state == "queued"
    assert released.log is not None and released.log[-1].reason == "not now"
    assert (await handoffs.resume("executor")).packet.id == first  # type: ignore[union-attr]
    assert (await handoffs.resume("executor")).packet.id == second  # type: ignore[union-attr]


async def test_invalid_transitions_are_refused(handoffs: HandoffStore) -> None:
    """Only a claimed packet can be completed, released or failed, only by its claimant."""
    packet_id = await hand(handoffs)
    with pytest.raises(StateConflict, match="is queued"):
        await handoffs.complete(packet_id, "executor")
    await handoffs.resume("executor")
    with pytest.raises(Forbidden, match="claimed by executor"):
        await handoffs.complete(packet_id, "intruder")
    done = await handoffs.complete(packet_id, "executor")
    assert done.state == "done"
    with pytest.raises(StateConflict, match="is done"):
        await handoffs.release(packet_id, "executor")
    with pytest.raises(NotFound):
        await handoffs.complete("h_00000000", "executor")


async def test_fail_keeps_the_error(handoffs: HandoffStore) -> None:
    """A failed packet carries the claimant's error and is counted as failed."""
    packet_id = await hand(handoffs)
    await handoffs.resume("executor")
    failed = await handoffs.fail(packet_id, "executor", "board unreachable")
    assert (failed.state, failed.error) == ("failed", "board unreachable")
    summary = {a.agent: a for a in await handoffs.agents()}["executor"]
    assert (summary.queued, summary.claimed, summary.failed) == (0, 0, 1)


async def test_lease_expiry_requeues_and_counts_redeliveries(
    handoffs: HandoffStore, sync_redis: redis.Redis
) -> None:
    """A lease that runs out puts the packet back with a redelivery counted and a new RQ job."""
    packet_id = await hand(handoffs)
    await handoffs.resume("executor", lease_seconds=0.05)
    await asyncio.sleep(0.1)
    report = await handoffs.sweep()
    assert report.requeued == [packet_id]
    packet = await handoffs.get(packet_id)
    assert (packet.state, packet.redeliveries, packet.deliveries) == ("queued", 1, 1)
    assert packet.log is not None and packet.log[-1].reason == "lease expired"
    assert sync_redis.exists(f"rq:job:{job_id('default', packet_id, 1)}")
    assert (await handoffs.sweep()).requeued == []  # idempotent


async def test_max_deliveries_fails_the_packet(handoffs: HandoffStore) -> None:
    """After the maximum number of deliveries an expiring lease fails the packet."""
    packet_id = await hand(handoffs)
    for _ in range(handoffs.policy.max_deliveries):
        assert (await handoffs.resume("executor", lease_seconds=0.01)).packet is not None
        await asyncio.sleep(0.03)
        await handoffs.sweep()
    packet = await handoffs.get(packet_id)
    assert (packet.state, packet.error, packet.deliveries) == (
        "failed",
        "max deliveries",
        handoffs.policy.max_deliveries,
    )


async def test_unclaimed_packets_expire(handoffs: HandoffStore) -> None:
    """expires_in makes an unclaimed packet expired, by the sweep or at the next resume."""
    swept = await hand(handoffs, expires_in=0.05)
    lazy = await hand(handoffs, to="other", expires_in=0.05)
    keeper = await hand(handoffs, to="other", expires_in=60)
    await asyncio.sleep(0.1)

    assert (await handoffs.resume("other")).packet.id == keeper  # type: ignore[union-attr]
    assert (await handoffs.get(lazy)).state == "expired"
    assert (await handoffs.sweep()).expired == [swept]
    assert (await handoffs.get(swept)).state == "expired"
    assert (await handoffs.resume("executor")).packet is None


async def test_a_taken_packet_id_is_never_reused(
    handoffs: HandoffStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handoff whose random id another packet holds takes a fresh one, and leaves that
    packet as it was."""
    first = await handoffs.handoff(
        handoff_input(to="executor", summary="first"), from_agent="scout"
    )
    ids = iter([first.id, "h_0000beef"])
    monkeypatch.setattr("baton.server.stores.topology.new_packet_id", lambda: next(ids))
    second = await handoffs.handoff(
        handoff_input(to="planner", summary="second"), from_agent="other"
    )
    assert second.id == "h_0000beef"
    assert await handoffs.get(first.id) == first
    assert (await handoffs.get(second.id)).summary == "second"


async def test_the_job_holding_a_claim_may_claim_again_and_no_other(
    handoffs: HandoffStore,
) -> None:
    """The RQ job that claimed a packet may claim it again (RQ's retry after its handler
    raised): the answer shows the renewed claim and one more delivery. Any other job is
    told the packet is claimed."""
    packet_id = await hand(handoffs)
    first = await handoffs.claim_for_job("executor", packet_id, "job-1")
    again = await handoffs.claim_for_job("executor", packet_id, "job-1")
    other = await handoffs.claim_for_job("executor", packet_id, "job-2")
    assert first.packet is not None and again.packet is not None
    assert (first.packet.deliveries, again.packet.deliveries) == (1, 2)
    assert (again.packet.state, again.packet.claimed_by) == ("claimed", "executor")
    assert again.lease_until is not None and first.lease_until is not None
    assert again.lease_until >= first.lease_until
    assert other.packet is None and other.message == f"packet {packet_id} is claimed, not queued"
    assert await handoffs.get(packet_id, with_log=False) == again.packet


async def test_a_job_finds_its_expired_packet_expired(handoffs: HandoffStore) -> None:
    """A packet that expired while queued is expired, not claimed, when its job comes."""
    packet_id = await hand(handoffs, expires_in=0.05)
    await asyncio.sleep(0.1)
    claimed = await handoffs.claim_for_job("executor", packet_id, "job-1")
    assert (
        claimed.packet is None and claimed.message == f"packet {packet_id} is expired, not queued"
    )
    assert (await handoffs.get(packet_id)).state == "expired"


async def test_bad_packets_are_refused_without_writing(
    handoffs: HandoffStore, store: RecordStore, data_redis: redis.Redis
) -> None:
    """Invalid fields and pins to missing records or versions are refused up front: what
    needs no stored state by the operation's input, the rest (a setting's limit, a pin's
    record) by the store."""
    await store.remember("a/b", 1, agent="scout")
    keys_before = data_redis.dbsize()
    for options, field in [
        ({"summary": " "}, "summary"),
        ({"summary": "a\x1b[2J"}, "summary"),
        ({"to": "two words"}, "to"),
        ({"to": "bob\n"}, "to"),  # Python's $ would let the newline through
        ({"next": ["ok", ""]}, "next[1]"),
        ({"pins": [{"ref": "a/b", "version": 0}]}, "pins[0].version"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            HANDOFF.decode({"to": "executor", "summary": "s", **options})
        assert caught.value.field == field
    for options, field in [
        ({"summary": "x" * 3000}, "summary"),
        ({"next": ["ok", "x" * 3000]}, "next[1]"),
        ({"pins": [{"ref": "no/such"}]}, "pins[0].ref"),
        ({"pins": [{"ref": "a/b", "version": 2}]}, "pins[0].version"),
        ({"pins": [{"ref": "a/b"}, {"ref": "no/such"}]}, "pins[1].ref"),
    ]:
        arguments = {"summary": "s", **options}
        with pytest.raises(InvalidInput) as caught:
            await handoffs.handoff(handoff_input(to="executor", **arguments), from_agent="scout")
        assert caught.value.field == field
    for expires_in in (-1, 0, 11 * 365 * 86_400):  # the operation's input bounds it
        with pytest.raises(InvalidInput) as caught:
            HANDOFF.decode({"to": "executor", "summary": "s", "expires_in": expires_in})
        assert caught.value.field == "expires_in"
    assert data_redis.dbsize() == keys_before


async def test_outcome_with_handoff_id_completes_the_packet(
    handoffs: HandoffStore, store: RecordStore
) -> None:
    """record_outcome(handoff_id=...) moves confidence and closes the claimed packet; a packet
    not claimed by the caller is refused before any confidence moves."""
    await store.remember("listing/482/assessment", "apply", agent="scout", confidence=0.8)
    packet_id = await hand(handoffs, pins=[{"ref": "listing/482/assessment"}])
    with pytest.raises(StateConflict):
        await handoffs.ns.outcomes.record(
            "success",
            "RUN-1",
            agent="executor",
            refs=["listing/482/assessment"],
            handoff_id=packet_id,
        )
    assert (await store.recall("listing/482/assessment")).confidence == 0.8

    await handoffs.resume("executor")
    report = await handoffs.ns.outcomes.record(
        "success",
        "RUN-1",
        agent="executor",
        refs=["listing/482/assessment"],
        handoff_id=packet_id,
    )
    assert report.handoff is not None and report.handoff.state == "done"
    assert report.moves[0].handoff_id == packet_id
    assert report.moves[0].after == pytest.approx(0.84)


async def test_racing_outcomes_for_one_packet_move_confidence_once(
    handoffs: HandoffStore, store: RecordStore, data_redis: redis.Redis
) -> None:
    """Outcomes sent at once for the same claimed packet: one closes it and moves the
    confidence; every other is refused and moves nothing (its refusal is not half-applied)."""
    await store.remember("listing/482/assessment", "apply", agent="scout", confidence=0.5)
    packet_id = await hand(handoffs, pins=[{"ref": "listing/482/assessment"}])
    await handoffs.resume("executor")

    results = await asyncio.gather(
        *(
            handoffs.ns.outcomes.record(
                "failure",
                f"RUN-{n}",
                agent="executor",
                refs=["listing/482/assessment"],
                handoff_id=packet_id,
            )
            for n in range(4)
        ),
        return_exceptions=True,
    )
    reports = [result for result in results if not isinstance(result, BaseException)]
    assert len(reports) == 1
    assert all(isinstance(result, StateConflict) for result in results if result not in reports)
    record = await store.recall("listing/482/assessment")
    assert record.confidence == pytest.approx(reports[0].moves[0].after)
    head = data_redis.hgetall(Keys("default").head("listing/482/assessment"))
    assert head[b"failures"] == b"1"
    assert data_redis.llen(Keys("default").outcomes("listing/482/assessment")) == 1


async def test_an_outcome_moves_at_most_as_many_refs_as_a_packet_pins(
    store: RecordStore,
) -> None:
    """An outcome naming more refs than the limit is refused with the field at fault, before
    any ref is looked up."""
    with pytest.raises(InvalidInput) as caught:
        await store.ns.outcomes.record(
            "success", "RUN-1", agent="scout", refs=[f"no/such/{n}" for n in range(201)]
        )
    assert caught.value.field == "refs"
    assert "201" in caught.value.detail


async def test_listing_filters_and_pages(handoffs: HandoffStore) -> None:
    """Packets list newest first, filter by state and receiver, and page without gaps."""
    ids = [await hand(handoffs, to="a" if i % 2 else "b") for i in range(7)]
    await handoffs.resume("a")

    everything, cursor = [], None
    while True:
        page = await handoffs.list(limit=3, cursor=cursor)
        everything += [packet.id for packet in page.packets]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert everything == ids[::-1]
    only_a = await handoffs.list(to_agent="a")
    assert [p.id for p in only_a.packets] == [ids[5], ids[3], ids[1]]
    claimed = await handoffs.list(status="claimed")
    assert [p.id for p in claimed.packets] == [ids[1]]


async def test_after_a_script_flush_a_handoff_still_writes_its_packet_before_its_job(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """When Redis lost its scripts (a restart, SCRIPT FLUSH), a handoff loads its script
    again and still writes its packet before its job: Redis' own command log shows the
    packet written before the job is pushed, and one job in the queue."""
    async with open_backend(Settings(redis_url=redis_url)) as backend:
        handoffs = backend.namespace("default").handoffs
        sync_redis.script_flush()
        sync_redis.config_set("slowlog-log-slower-than", 0)
        sync_redis.slowlog_reset()
        try:
            packet = await handoffs.handoff(
                handoff_input(to="executor", summary="s"), from_agent="scout"
            )
            log = [entry["command"] for entry in reversed(sync_redis.slowlog_get(128))]
        finally:
            sync_redis.config_set("slowlog-log-slower-than", 10_000)
    packet_key = Keys("default").inbox("executor").packet(packet.id).encode()
    queue = Queue(queue_name("default", "executor"), connection=sync_redis)
    written = next(i for i, command in enumerate(log) if command.startswith(b"HSET " + packet_key))
    pushed = next(i for i, command in enumerate(log) if command.startswith(b"RPUSH rq:queue:"))
    assert written < pushed
    assert queue.job_ids == [job_id("default", packet.id, 0)]


async def started(backend: Backend, agent: str = "scout") -> str:
    """A new active session of ``agent``."""
    session = await backend.namespace("default").sessions.start(
        SessionStartInput(), caller=as_agent(agent)
    )
    return session.id


async def test_a_packet_held_for_the_session_end_is_claimable_only_then(
    dispatching_backend: Backend, sync_redis: redis.Redis
) -> None:
    """deliver=session_end: the packet is held (pins resolved at the handoff), no one can
    claim it and it has no RQ job; once the sender's session ends it is queued at its
    hand-off time, gets its job, and its pins show what moved meanwhile."""
    ns = dispatching_backend.namespace("default")
    handoffs, records = ns.handoffs, ns.records
    session = await started(dispatching_backend)
    await records.remember("listing/553/assessment", {"verdict": "apply"}, agent="scout")
    earlier = await hand(handoffs)
    held = await handoffs.handoff(
        handoff_input(
            to="executor",
            summary="after my session",
            pins=[{"ref": "listing/553/assessment"}],
            deliver="session_end",
        ),
        from_agent="scout",
        session=session,
    )
    assert held.state == "held" and [(p.ref, p.version) for p in held.pins] == [
        ("listing/553/assessment", 1)
    ]
    assert [t.to_state for t in (await handoffs.get(held.id)).log or []] == ["held"]
    assert Queue(queue_name("default", "executor"), connection=sync_redis).job_ids == [
        job_id("default", earlier, 0)
    ]
    await records.remember("listing/553/assessment", {"verdict": "maybe"}, agent="scout")
    assert (await handoffs.resume("executor")).packet.id == earlier  # type: ignore[union-attr]
    assert (await handoffs.resume("executor")).packet is None
    assert (await handoffs.counts())["held"] == 1
    assert await handoffs.send_held(session) == []  # the session is still active

    await ns.sessions.end(SessionEndInput(session_id=session), caller=as_agent("scout"))
    assert await handoffs.send_held(session) == [held.id]
    assert await handoffs.send_held(session) == []  # sent once
    assert (
        job_id("default", held.id, 0)
        in Queue(queue_name("default", "executor"), connection=sync_redis).job_ids
    )
    resumed = await handoffs.resume("executor")
    assert resumed.packet is not None and resumed.packet.id == held.id
    assert [(s.ref, s.pinned_version, s.current_version) for s in resumed.stale] == [
        ("listing/553/assessment", 1, 2)
    ]
    log = (await handoffs.get(held.id)).log or []
    assert [t.to_state for t in log] == ["held", "queued", "claimed"]
    assert log[1].reason == "the sender's session ended"


async def test_the_sweep_sends_what_an_abandoned_session_held(
    dispatching_backend: Backend,
) -> None:
    """A session that goes idle is abandoned by the sweep, which then sends what it held;
    an active session's packet stays held."""
    ns = dispatching_backend.namespace("default")
    idle, busy = await started(dispatching_backend), await started(dispatching_backend)
    gone = await hand(ns.handoffs, session=idle, deliver="session_end")
    kept = await hand(ns.handoffs, session=busy, deliver="session_end")
    assert await ns.sessions.abandon_idle(-1) != []
    await ns.sessions.start(SessionStartInput(id=busy), caller=as_agent("scout"))  # active again
    report = await ns.handoffs.sweep()
    assert report.sent == [gone]
    assert (await ns.handoffs.get(gone)).state == "queued"
    assert (await ns.handoffs.get(kept)).state == "held"


async def test_holding_needs_an_active_session_of_the_sender(
    dispatching_backend: Backend,
) -> None:
    """deliver=session_end without a session, or with one that has ended, is a 422 naming
    deliver, and writes no packet."""
    ns = dispatching_backend.namespace("default")
    with pytest.raises(InvalidInput, match="needs a session") as refused:
        await hand(ns.handoffs, deliver="session_end")
    assert refused.value.field == "deliver"
    session = await started(dispatching_backend)
    await ns.sessions.end(SessionEndInput(session_id=session), caller=as_agent("scout"))
    with pytest.raises(InvalidInput, match="is not active"):
        await hand(ns.handoffs, session=session, deliver="session_end")
    assert (await ns.handoffs.list()).packets == []


async def test_a_held_packet_expires_once_sent_if_its_time_ran_out(
    dispatching_backend: Backend,
) -> None:
    """expires_in counts from the handoff: a held packet is not expired while held (its
    receiver could not have claimed it), and expires at the first sweep after it is sent."""
    ns = dispatching_backend.namespace("default")
    session = await started(dispatching_backend)
    packet = await hand(ns.handoffs, session=session, deliver="session_end", expires_in=0.05)
    await asyncio.sleep(0.1)
    assert (await ns.handoffs.sweep()).expired == []
    assert (await ns.handoffs.get(packet)).state == "held"
    await ns.sessions.end(SessionEndInput(session_id=session), caller=as_agent("scout"))
    report = await ns.handoffs.sweep()
    assert (report.sent, report.expired) == ([packet], [packet])


async def test_counts_say_how_many_packets_are_in_each_state(handoffs: HandoffStore) -> None:
    """GET /v1/stats' packet counts: one each queued, claimed, done and failed, over two
    inboxes; done is what the other states leave of every packet."""

    async def hand(to: str) -> str:
        return (await handoffs.handoff(handoff_input(to=to, summary="s"), from_agent="scout")).id

    for to in ("executor", "executor", "executor", "auditor"):
        await hand(to)
    done = (await handoffs.resume("executor")).packet
    failing = (await handoffs.resume("executor")).packet
    claimed = (await handoffs.resume("auditor")).packet
    assert done is not None and failing is not None and claimed is not None
    await handoffs.complete(done.id, "executor")
    await handoffs.fail(failing.id, "executor", "no network")
    assert await handoffs.counts() == {
        "held": 0,
        "queued": 1,
        "claimed": 1,
        "done": 1,
        "failed": 1,
        "expired": 0,
    }
