"""Handoffs across real processes: concurrent pulls, real RQ workers, kills and retries."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rq import Callback, Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry
from rq.utils import str_to_date

from baton.agents import BatonClient
from baton.queue.dispatch import (
    MAINTENANCE_QUEUE,
    STORED_BLOCK,
    RQDispatcher,
    queue_name,
    zlib_stored,
)
from baton.queue.job_guard import DELIVER, JOB_SERIALIZER, BatonJob
from baton.queue.worker import AgentWorker
from baton.server.model.keys import job_id
from baton.server.runtime.connection import async_redis
from baton.server.runtime.settings import HandoffPolicy, Settings
from baton.server.stores import handoffs as handoffs_module
from baton.server.stores.backend import open_backend
from baton.server.stores.handoffs import HandoffStore
from tests.conftest import REPO, baton_process, handoff_input

pytestmark = pytest.mark.anyio

PULLER = """
import json, sys
from baton.agents import BatonClient
claimed = []
with BatonClient(sys.argv[1], agent=sys.argv[2]) as baton:
    while True:
        resumed = baton.resume()
        if resumed.packet is None:
            break
        claimed.append([resumed.packet.id, resumed.packet.created_at])
        if sys.argv[3] == "handle":
            baton.remember(f"handled/{resumed.packet.id}", "pull")
        baton.complete(resumed.packet.id)
print(json.dumps(claimed))
"""


def pullers(api_url: str, agent: str, count: int, mode: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", PULLER, api_url, agent, mode],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]


async def queue_packets(
    handoffs: HandoffStore, agent: str, count: int, note: str = ""
) -> list[str]:
    return [
        (
            await handoffs.handoff(
                handoff_input(to=agent, summary=f"task {n}", note=note or None), from_agent="scout"
            )
        ).id
        for n in range(count)
    ]


def burst_worker(redis_url: str, api_url: str, **env: str) -> subprocess.Popen[str]:
    """`baton agent run tester --burst` with the test handlers: handles what is queued, exits."""
    return baton_process(
        "agent",
        "run",
        "tester",
        "-m",
        "tests.handlers",
        "--burst",
        redis_url=redis_url,
        api_url=api_url,
        **env,
    )


async def until_claimed(handoffs: HandoffStore, packet_id: str) -> None:
    """Wait (up to 30 s) until a worker has claimed the packet."""
    deadline = time.monotonic() + 30
    while (await handoffs.get(packet_id)).state != "claimed":
        assert time.monotonic() < deadline, "the worker never claimed the packet"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_four_pulling_processes_claim_each_packet_once_in_fifo_order(
    handoffs: HandoffStore, api_url: str
) -> None:
    """4 processes resume in a loop over 200 queued packets: every packet is claimed by
    exactly one of them, and each claimant sees its packets oldest first."""
    ids = await queue_packets(handoffs, "executor", 200)
    claims = [
        json.loads(p.communicate(timeout=120)[0]) for p in pullers(api_url, "executor", 4, "plain")
    ]

    claimed_ids = [packet_id for claim in claims for packet_id, _ in claim]
    assert sorted(claimed_ids) == sorted(ids)
    assert len(set(claimed_ids)) == 200
    for claim in claims:
        created = [created_at for _, created_at in claim]
        assert created == sorted(created)
    page = await handoffs.list(status="done", limit=500)
    assert len(page.packets) == 200


@pytest.mark.slow
async def test_pull_and_push_racing_never_handle_a_packet_twice(
    handoffs: HandoffStore, api_url: str, redis_url: str
) -> None:
    """An RQ agent worker and two pulling processes drain one queue together: each packet
    is handled exactly once (its handled/<id> record has one version)."""
    ids = await queue_packets(handoffs, "tester", 120)
    worker = burst_worker(redis_url, api_url)
    pulling = pullers(api_url, "tester", 2, "handle")
    pulled = [json.loads(p.communicate(timeout=120)[0]) for p in pulling]
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output

    with BatonClient(api_url, agent="checker") as baton:
        handled = {
            record.ref: record for record in baton.list_records(scope="handled", limit=500).records
        }
    assert sorted(handled) == sorted(f"handled/{packet_id}" for packet_id in ids)
    assert all(record.version == 1 for record in handled.values())
    pushed = [ref for ref, record in handled.items() if record.value == "push"]
    assert len(pushed) + sum(len(claim) for claim in pulled) == 120
    states = {packet.state for packet in (await handoffs.list(limit=500)).packets}
    assert states == {"done"}


@pytest.mark.slow
async def test_worker_killed_inside_a_handler_gets_the_packet_redelivered(
    handoffs: HandoffStore, api_url: str, redis_url: str
) -> None:
    """SIGKILL a worker mid-handler: once the lease runs out the sweep requeues the packet,
    a new worker completes it, and the redelivery count is 1."""
    [packet_id] = await queue_packets(handoffs, "tester", 1, note="hang")
    doomed = baton_process(
        "agent",
        "run",
        "tester",
        "-m",
        "tests.handlers",
        redis_url=redis_url,
        api_url=api_url,
        BATON_LEASE_SECONDS="3",
    )
    with BatonClient(api_url, agent="checker") as baton:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            packet = baton.get_handoff(packet_id)
            if packet.state == "claimed":
                break
            time.sleep(0.1)
        assert packet.state == "claimed"
        doomed.kill()
        doomed.wait(10)

        # The packet waits out its lease; then `baton worker` sweeps it back to the queue.
        time.sleep(3.2)
        sweep = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "worker", "--burst"],
            env={**os.environ, "BATON_REDIS_URL": redis_url},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sweep.returncode == 0, sweep.stderr
        assert baton.get_handoff(packet_id).state == "queued"

        # The handler hangs only on the first delivery; the second one completes.
        worker = burst_worker(redis_url, api_url)
        output = worker.communicate(timeout=60)[0]
        assert worker.returncode == 0, output
        packet = baton.get_handoff(packet_id)
        assert (packet.state, packet.redeliveries, packet.deliveries) == ("done", 1, 2)
        assert baton.recall(f"handled/{packet_id}").value == "push"


@pytest.mark.slow
async def test_a_handler_that_always_raises_is_retried_then_failed(
    handoffs: HandoffStore, api_url: str, redis_url: str, sync_redis: redis.Redis
) -> None:
    """A failing handler is tried 3 times; then the packet is failed with the error text and
    the job sits in RQ's failed registry (the dead letter)."""
    [packet_id] = await queue_packets(handoffs, "tester", 1, note="raise")
    worker = burst_worker(redis_url, api_url)
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output

    packet = await handoffs.get(packet_id)
    assert packet.state == "failed"
    assert packet.error == f"HandlerFailure: cannot handle {packet_id}"
    assert packet.deliveries == 3
    assert packet.log is not None
    assert [t.reason for t in packet.log if t.to_state == "claimed"] == ["worker", "retry", "retry"]
    queue = Queue(queue_name("default", "tester"), connection=sync_redis)
    assert FailedJobRegistry(queue=queue).count == 1


async def test_rq_requeue_of_a_dead_letter_really_retries_the_packet(
    handoffs: HandoffStore, api_url: str, redis_url: str, sync_redis: redis.Redis
) -> None:
    """A packet whose handler failed its tries is failed, its job in RQ's failed registry;
    `rq requeue` (RQ's own CLI) of that job puts the packet back in its queue and the next
    worker handles it."""
    [packet_id] = await queue_packets(handoffs, "tester", 1, note="until-fixed")
    worker = burst_worker(redis_url, api_url)
    assert worker.communicate(timeout=120)[0] is not None and worker.returncode == 0
    assert (await handoffs.get(packet_id)).state == "failed"

    await handoffs.ns.records.remember(f"fixed/{packet_id}/cause", "fixed", agent="operator")
    queue = queue_name("default", "tester")
    requeued = subprocess.run(
        [
            str(Path(sys.executable).with_name("rq")),
            "requeue",
            "--serializer",
            "json",
            "--all",
            "--queue",
            queue,
            "--url",
            redis_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert requeued.returncode == 0, requeued.stderr
    worker = burst_worker(redis_url, api_url)
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    packet = await handoffs.get(packet_id)
    assert packet.state == "done" and packet.log is not None, output
    assert "requeued with rq requeue" in [t.reason for t in packet.log]
    handled = await handoffs.ns.records.recall(f"handled/{packet_id}")
    assert handled.value == "push"


async def test_a_handler_longer_than_its_lease_keeps_its_packet(
    handoffs: HandoffStore, api_url: str, redis_url: str
) -> None:
    """A handler taking 6 s under a 2 s lease: the worker renews the lease while it runs, so
    the API's sweeps never put the packet back and pulls never get it; handled once."""
    [packet_id] = await queue_packets(handoffs, "tester", 1, note="sleep-6")
    worker = burst_worker(redis_url, api_url, BATON_LEASE_SECONDS="2")
    await until_claimed(handoffs, packet_id)
    with BatonClient(api_url, agent="tester") as puller:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and worker.poll() is None:
            assert puller.resume().packet is None  # never handed out twice
            time.sleep(0.5)
    output = worker.communicate(timeout=60)[0]
    assert worker.returncode == 0, output
    packet = await handoffs.get(packet_id)
    assert (packet.state, packet.deliveries) == ("done", 1)
    assert (await handoffs.ns.records.history(f"handled/{packet_id}")).versions[-1].version == 1


async def test_sigterm_stops_a_worker_stuck_in_a_handler_within_its_grace(
    handoffs: HandoffStore, api_url: str, redis_url: str
) -> None:
    """SIGTERM during a handler that would run 10 minutes: past the stop grace (3 s unless
    BATON_STOP_SECONDS says otherwise) the worker gives the packet back to its queue and
    exits; the next worker handles it."""
    [packet_id] = await queue_packets(handoffs, "tester", 1, note="hang")
    worker = baton_process(
        "agent",
        "run",
        "tester",
        "-m",
        "tests.handlers",
        redis_url=redis_url,
        api_url=api_url,
    )
    await until_claimed(handoffs, packet_id)
    stopping = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=30)[0]
    assert time.monotonic() - stopping < 10, output
    assert worker.returncode == 143, output
    packet = await handoffs.get(packet_id)
    assert packet.state == "queued" and packet.log is not None
    assert "stop grace" in packet.log[-1].reason

    again = burst_worker(redis_url, api_url)
    assert again.wait(60) == 0
    assert (await handoffs.get(packet_id)).state == "done"


def test_a_workers_scheduler_runs_inside_it_and_dies_with_it(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """The scheduler of a worker (RQ's, which enqueues retries once their interval is over)
    runs in the worker's own process, not in one forked from it: SIGKILL the worker (the OOM
    killer, kill -9) and nothing of it keeps writing to Redis (a forked scheduler used to
    heart-beat for ever)."""
    worker = baton_process("agent", "run", "tester", "-m", "tests.handlers", redis_url=redis_url)
    try:
        deadline = time.monotonic() + 30
        while not (schedulers := sync_redis.keys("rq:scheduler:*")):
            assert time.monotonic() < deadline and worker.poll() is None, "no scheduler"
            time.sleep(0.1)
        assert sync_redis.hget(schedulers[0], "pid") == str(worker.pid).encode()
    finally:
        worker.kill()
        worker.wait(10)
    last = sync_redis.hget(schedulers[0], "last_heartbeat")
    time.sleep(2.5)  # a live scheduler beats every second
    assert sync_redis.hget(schedulers[0], "last_heartbeat") == last


async def test_a_retry_waits_out_its_interval_then_the_scheduler_runs_it(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """A failing handler's retries wait in RQ's scheduled registry for their interval; the
    worker's scheduler enqueues them when it is over, so the packet gets all its tries and
    fails with deliveries 3. A stopped worker takes its scheduler's locks and key with it."""
    settings = Settings(redis_url=redis_url, handoffs=HandoffPolicy(retry_intervals=(1,)))
    async with open_backend(settings) as backend:
        handoffs = backend.namespace("default").handoffs
        [packet_id] = await queue_packets(handoffs, "tester", 1, note="raise")
        worker = baton_process(
            "agent", "run", "tester", "-m", "tests.handlers", redis_url=redis_url
        )
        try:
            deadline = time.monotonic() + 60
            while (packet := await handoffs.get(packet_id)).state != "failed":
                assert time.monotonic() < deadline and worker.poll() is None, packet
                await asyncio.sleep(0.2)
        finally:
            worker.terminate()
            output = worker.communicate(timeout=30)[0]
    assert packet.deliveries == 3 and packet.log is not None, output
    assert [t.reason for t in packet.log if t.to_state == "claimed"] == ["worker", "retry", "retry"]
    assert worker.returncode == 0, output
    assert sync_redis.keys("rq:scheduler*") == []


def test_agent_run_without_a_handler_says_how_to_register_one(redis_url: str) -> None:
    """Starting a worker for an agent nobody registered fails fast with a clear message."""
    worker = baton_process("agent", "run", "nobody", "-m", "tests.handlers", redis_url=redis_url)
    output = worker.communicate(timeout=60)[0]
    assert worker.returncode == 2
    assert "no handler for agent 'nobody' (registered: tester)" in output


@pytest.fixture
def data_url(redis_url: str) -> str:
    """Worker processes here use the plain embedded server, so the store does too."""
    return redis_url


@given(st.binary(max_size=300))
@example(b"")
@example(bytes(range(256)) * (STORED_BLOCK // 256) + b"x" * (STORED_BLOCK % 256))
@example(b"y" * (STORED_BLOCK + 1))
@example(os.urandom(2 * STORED_BLOCK + 1))
@settings(max_examples=50)
def test_a_stored_zlib_stream_reads_back_as_the_data(data: bytes) -> None:
    """What a job stores of its call is a zlib stream like any other: zlib (and so RQ)
    reads back exactly the bytes, whatever their length (one stored block holds 64 KiB, so
    lengths around a block's and two blocks' are tried), and the stream ends where it
    says."""
    reader = zlib.decompressobj()
    assert reader.decompress(zlib_stored(data)) == data
    assert reader.eof
    assert reader.unused_data == b""


def as_bytes(commands: list[list[str | bytes]]) -> list[list[bytes]]:
    """Commands with every argument as the bytes sent."""
    return [
        [arg.encode() if isinstance(arg, str) else arg for arg in command] for command in commands
    ]


def job_hash(commands: list[list[bytes]]) -> dict[bytes, bytes]:
    """The fields of the job's HSET with the most of them."""
    command = max((c for c in commands if c[0] == b"HSET"), key=len)
    return dict(zip(command[2::2], command[3::2], strict=True))


@pytest.mark.parametrize(("packet", "seq"), [("h_0000aaaa", 0), ("h_ffff0001", 12)])
def test_a_job_from_the_queue_template_is_byte_for_byte_rqs_own(
    redis_url: str, sync_redis: redis.Redis, packet: str, seq: int
) -> None:
    """The commands a handoff sends for its job (from the queue's template, built by RQ once)
    are exactly the commands RQ's own enqueue builds for that packet and delivery attempt,
    the encoded call and the description included; only the timestamps differ, and they are
    the job's own, not the template's, and the call is stored in zlib's format uncompressed
    rather than compressed."""
    dispatcher = RQDispatcher(sync_redis, HandoffPolicy(), async_redis(redis_url))  # never connects
    assert dispatcher._template("default", "worker-a") is not None
    before = datetime.now(UTC)
    time.sleep(0.01)  # a stamp left from building the template would be older than this
    ours = as_bytes(dispatcher.job_commands("default", "worker-a", packet, seq))
    theirs = as_bytes(dispatcher._built_by_rq("default", "worker-a", packet, seq))
    differ = {b"created_at", b"enqueued_at", b"data"}
    assert [c for c in ours if c[0] != b"HSET"] == [c for c in theirs if c[0] != b"HSET"]
    assert {k: v for k, v in job_hash(ours).items() if k not in differ} == {
        k: v for k, v in job_hash(theirs).items() if k not in differ
    }
    call = zlib.decompress(job_hash(theirs)[b"data"])
    assert job_hash(ours)[b"data"] == zlib_stored(call)
    stamps = differ - {b"data"}
    for stamp in stamps:
        assert str_to_date(job_hash(ours)[stamp]) >= before


@pytest.mark.parametrize(
    ("agent", "packet"),
    [
        ("worker-a", "h_0000aaaa"),
        ("worker-a", "imported-packet-7"),  # not the shape of Baton's ids: built by RQ
        ("has-h_5a4p1e00-inside", "h_0000aaaa"),  # the template's sample id in the queue
    ],
)
def test_every_job_calls_the_handler_with_its_own_packet(
    redis_url: str, sync_redis: redis.Redis, agent: str, packet: str
) -> None:
    """Whatever the packet id and the agent's name, the job's call (JSON: what a worker
    runs) names that namespace, agent and packet, and the job waits on that agent's queue."""
    dispatcher = RQDispatcher(sync_redis, HandoffPolicy(), async_redis(redis_url))  # never connects
    commands = as_bytes(dispatcher.job_commands("default", agent, packet, 3))
    function, _, args, _ = json.loads(zlib.decompress(job_hash(commands)[b"data"]))
    assert (function, args) == (DELIVER, ["default", agent, packet])
    queue = (Queue.redis_queue_namespace_prefix + queue_name("default", agent)).encode()
    assert [b"RPUSH", queue, job_id("default", packet, 3).encode()] in commands


async def test_a_handoffs_job_is_rqs_own_and_a_pull_drops_it(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """A handoff leaves a job RQ's own ``Job.fetch`` loads, calling the deliverer with that
    namespace, agent and packet, waiting in the agent's RQ queue; when the receiver pulls the
    packet with ``resume`` instead, the job leaves the queue and its hash goes (queue depths
    stay true)."""
    queue = Queue(queue_name("default", "worker-a"), connection=sync_redis)
    async with open_backend(Settings(redis_url=redis_url)) as backend:
        handoffs = backend.namespace("default").handoffs
        packet = await handoffs.handoff(
            handoff_input(to="worker-a", summary="s"), from_agent="scout"
        )
        ours = job_id("default", packet.id, 0)
        job = Job.fetch(ours, connection=sync_redis, serializer=JOB_SERIALIZER)
        assert (job.func_name, job.args, job.get_status()) == (
            DELIVER,
            ["default", "worker-a", packet.id],
            JobStatus.QUEUED,
        )
        assert queue.job_ids == [ours]
        assert backend.dispatcher is not None
        assert await backend.dispatcher.depth("default", "worker-a") == 1

        resumed = await handoffs.resume("worker-a")
        assert resumed.packet is not None and resumed.packet.id == packet.id
        for _ in range(200):  # the drop runs off the caller's path
            if not queue.job_ids and not Job.exists(ours, connection=sync_redis):
                break
            await asyncio.sleep(0.01)
        assert queue.job_ids == []
        assert not Job.exists(ours, connection=sync_redis)


@pytest.mark.parametrize(
    "command", [("agent", "run", "tester", "-m", "tests.handlers"), ("worker",)], ids=str
)
def test_sigterm_stops_an_idle_worker_within_seconds(
    redis_url: str, sync_redis: redis.Redis, command: tuple[str, ...]
) -> None:
    """SIGTERM to an idle `baton agent run` or `baton worker` ends it in seconds (about a
    tenth of one here), with exit 0 and its RQ registration gone (RQ's pubsub thread used
    to hold it a minute)."""
    for _ in range(2):
        worker = baton_process(*command, redis_url=redis_url)
        try:
            deadline = time.monotonic() + 30
            while not sync_redis.smembers("rq:workers"):
                assert time.monotonic() < deadline and worker.poll() is None, "never started"
                time.sleep(0.1)
            time.sleep(0.5)
            stopping = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=90)[0]
            took = time.monotonic() - stopping
        finally:
            worker.kill()
            worker.wait(10)
        assert worker.returncode == 0, output
        assert took < 20, f"took {took:.1f} s to stop:\n{output}"  # RQ alone: up to 60
        assert sync_redis.smembers("rq:workers") == set()


def test_a_worker_never_waits_on_its_command_thread_to_stop(redis_url: str) -> None:
    """A worker's stop does not wait on its pubsub thread (RQ's channel for commands) even
    when that thread has already seen the unsubscribe and waits for a new subscription (RQ
    alone then waits up to 60 s)."""
    connection = redis.Redis.from_url(redis_url)
    worker = AgentWorker([Queue("stop-test", connection=connection)], connection=connection)
    worker.subscribe()
    deadline = time.monotonic() + 10
    while not worker.pubsub.subscribed:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    worker.pubsub.unsubscribe()  # the thread reads this reply before it is told to stop
    while worker.pubsub.subscribed:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    stopping = time.monotonic()
    worker.unsubscribe()
    assert time.monotonic() - stopping < 10  # RQ alone: 60 s
    connection.close()


class RunsOnUnpickling:
    """A pickle payload that runs a shell command when loaded (the classic ``__reduce__``)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (self.command,))


def failure_of(connection: redis.Redis, identifier: str) -> str:
    """The failure RQ records for the job (what ``rq info`` and RQ's dashboards show)."""
    job = Job.fetch(identifier, connection=connection, serializer=JOB_SERIALIZER)
    result = job.latest_result()
    assert result is not None and result.exc_string is not None
    return result.exc_string


async def test_a_worker_runs_only_batons_jobs_from_json_data(
    handoffs: HandoffStore, api_url: str, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Jobs written into an agent's queue by someone with Redis access (a pickled payload, a
    JSON job naming ``os.system``, Baton's own job with a callback or the wrong arguments)
    are failed with the reason and nothing of them runs; the real packet queued behind them
    is handled by the same worker."""
    name = queue_name("default", "tester")
    marks = tmp_path / "marks"
    marks.mkdir()
    marker = marks / "ran"
    pickled = Queue(name, connection=sync_redis)  # RQ's default: pickle
    as_json = Queue(name, connection=sync_redis, serializer=JOB_SERIALIZER)
    planted = {
        "pickle": pickled.enqueue_call(DELIVER, args=(RunsOnUnpickling(f"touch {marker}1"),)),
        "os.system": as_json.enqueue_call("os.system", args=(f"touch {marker}2",)),
        "callback": as_json.enqueue_call(
            DELIVER,
            args=("default", "tester", "h_00000000"),
            on_failure=Callback("os.system"),
        ),
        "arguments": as_json.enqueue_call(DELIVER, args=("default", "tester", 3)),
    }
    [packet_id] = await queue_packets(handoffs, "tester", 1)
    worker = burst_worker(redis_url, api_url)
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    assert not list(marks.iterdir())
    failed = FailedJobRegistry(queue=as_json)
    assert sorted(failed.get_job_ids()) == sorted(job.id for job in planted.values())
    reasons = {kind: failure_of(sync_redis, job.id) for kind, job in planted.items()}
    assert "not a JSON job" in reasons["pickle"]
    assert "names 'os.system'" in reasons["os.system"]
    assert "callbacks" in reasons["callback"]
    assert "arguments are not those" in reasons["arguments"]
    assert all(reason.startswith("refused by Baton:") for reason in reasons.values())
    assert (await handoffs.get(packet_id)).state == "done"


async def test_a_delivery_job_pickled_before_the_upgrade_is_delivered_again(
    handoffs: HandoffStore,
    api_url: str,
    redis_url: str,
    sync_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A packet whose job an older Baton queued with pickled data (under Baton's own job
    id): the worker drops that job unrun (no failure to clean up), the sweep finds the
    packet without a job and queues it again as JSON, and the packet is handled."""
    [packet_id] = await queue_packets(handoffs, "tester", 1)
    identifier = job_id("default", packet_id, 0)
    Job.fetch(identifier, connection=sync_redis, serializer=JOB_SERIALIZER).delete()
    Queue(queue_name("default", "tester"), connection=sync_redis).enqueue_call(
        DELIVER, args=("default", "tester", packet_id), job_id=identifier
    )  # RQ's default serializer, pickle, as before the upgrade
    worker = burst_worker(redis_url, api_url)
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    assert not sync_redis.exists(Job.key_for(identifier))
    assert FailedJobRegistry(queue_name("default", "tester"), connection=sync_redis).count == 0
    assert (await handoffs.get(packet_id)).state == "queued"

    monkeypatch.setattr(handoffs_module, "REPAIR_AFTER_SECONDS", 0)
    assert (await handoffs.sweep()).repaired == [packet_id]
    worker = burst_worker(redis_url, api_url)
    output = worker.communicate(timeout=120)[0]
    assert worker.returncode == 0, output
    assert (await handoffs.get(packet_id)).state == "done"


def test_the_maintenance_worker_sweeps_on_its_interval(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """`baton worker` enqueues the sweep every ``BATON_SWEEP_SECONDS`` (as JSON, which its
    own guard accepts) and runs each one."""
    finished = FinishedJobRegistry(MAINTENANCE_QUEUE, connection=sync_redis)
    before = finished.count
    worker = baton_process("worker", redis_url=redis_url, BATON_SWEEP_SECONDS="1")
    try:
        deadline = time.monotonic() + 60
        while finished.count < before + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=30)[0]
    assert finished.count >= before + 2, output
    assert FailedJobRegistry(MAINTENANCE_QUEUE, connection=sync_redis).count == 0, output


def planted_callback(job: Job, connection: redis.Redis, *failure: object) -> None:
    """What someone with access to the queue's Redis would like a worker to run."""
    connection.set("planted:called", "1")


def test_rqs_registry_cleanup_never_calls_a_planted_callback(sync_redis: redis.Redis) -> None:
    """A job planted as started and abandoned, with a failure callback naming any function:
    RQ's registry cleanup (which calls an abandoned job's failure callback without the
    worker's check) calls nothing on Baton's queues."""
    queue = Queue(
        queue_name("default", "cleanup"),
        connection=sync_redis,
        serializer=JOB_SERIALIZER,
        job_class=BatonJob,
    )
    planted = Queue(queue.name, connection=sync_redis, serializer=JOB_SERIALIZER).enqueue_call(
        "os.getpid", on_failure=Callback("tests.test_queue.planted_callback")
    )
    planted.set_status(JobStatus.STARTED)
    sync_redis.zadd(queue.started_job_registry.key, {f"{planted.id}:x": 1})
    queue.started_job_registry.cleanup()
    assert sync_redis.get("planted:called") is None
