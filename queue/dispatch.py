"""Putting handoff packets on RQ queues: one queue per receiving agent.

RQ jobs carry only ``(namespace, agent, packet_id)``; the packet itself lives in the agent's
inbox in Redis, and the job claims it through the same claim path as ``resume``. A job is
RQ's own enqueue's commands (from a template RQ builds once per queue), sent from the event
loop, and dropped after a pull by ``discard_job.lua`` or, with the queue on another Redis,
by RQ's ``Queue.remove`` and ``Job.delete``. Job data is JSON (RQ's ``JSONSerializer``,
``baton.queue.job_guard`` says why); RQ's own tools take it with ``--serializer json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial

import redis
import structlog
from redis.asyncio import Redis as AsyncRedis
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job

from baton.queue.job_guard import DELIVER, JOB_SERIALIZER, WEBHOOK, BatonJob
from baton.server.model.clock import iso, now_us
from baton.server.model.errors import describe
from baton.server.model.keys import job_id, queue_name
from baton.server.model.validation import PACKET_ID_PATTERN
from baton.server.runtime.batch import Batch
from baton.server.runtime.scripts import lua_source
from baton.server.runtime.settings import HandoffPolicy

log = structlog.get_logger("baton.dispatch")
MAINTENANCE_QUEUE = "baton-maintenance"  # sweeps and webhook deliveries (``baton worker``)


# Finished jobs are kept an hour (visible in rq info); failed ones a week (our dead letter).
RESULT_TTL = 3600
FAILURE_TTL = 7 * 24 * 3600
# Fire-and-forget tasks are kept referenced until they finish (asyncio keeps weak refs only).
_background: set[asyncio.Task[None]] = set()


# The packet a queue's job template is built for: as long as every packet id Baton makes
# (``PACKET_ID_PATTERN``, ASCII), so one can be swapped for another byte for byte inside the
# job's call.
SAMPLE_PACKET = "h_5a4p1e00"
SAMPLE_SEQ = 0
TIMESTAMP_FIELDS = frozenset({b"created_at", b"enqueued_at"})


STORED_BLOCK = 65535  # the most bytes one stored deflate block holds


def zlib_stored(data: bytes) -> bytes:
    """``data`` as a zlib stream of stored (uncompressed) deflate blocks (RFC 1950/1951):
    read by ``zlib.decompress``, and so by RQ, like the compressed stream RQ writes. Making
    it needs none of deflate's 256 KiB of state per call: ``zlib.compress`` of a job's small
    encoded call cost 27-74 µs here, a few percent of a handoff."""
    blocks = [
        struct.pack("<BHH", start + STORED_BLOCK >= len(data), len(chunk), len(chunk) ^ 0xFFFF)
        + chunk
        for start in range(0, max(len(data), 1), STORED_BLOCK)
        for chunk in [data[start : start + STORED_BLOCK]]
    ]
    return b"\x78\x01" + b"".join(blocks) + struct.pack(">I", zlib.adler32(data))


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """RQ's own commands for one queue's job, built by RQ once for a sample packet, with the
    places that differ from job to job marked: the job id (in keys and values), the packet
    id (in the description), the timestamps and the encoded call (JSON), whose packet id is swapped
    byte for byte (ids have one length) and which is stored uncompressed in zlib's format
    (:func:`zlib_stored`). Kept by the speed rule (it writes RQ's job as RQ would, not
    through RQ): ``make bench-ab`` against b1b9ce7, handoff at 32 connections, 0.68 x its
    throughput with RQ building each job, 0.82 x with the template. A test holds the
    template's job to RQ's own byte for byte, timestamps aside."""

    commands: tuple[tuple[str | bytes, ...], ...]
    sample_job: str
    call: bytes  # the encoded call, uncompressed
    timestamps: tuple[tuple[int, int], ...]  # (command, argument) positions
    data: tuple[int, int]
    # The text arguments naming the sample job or packet: (command, argument, text).
    named: tuple[tuple[int, int, str], ...]

    @classmethod
    def marked(
        cls,
        commands: list[list[str | bytes]],
        sample_job: str,
        call: bytes,
        timestamps: set[tuple[int, int]],
        data: tuple[int, int],
    ) -> JobTemplate:
        """The template of ``commands``, each argument that names the sample job or packet
        found once, so that a job copies the rest as it is."""
        named = tuple(
            (c, a, arg)
            for c, command in enumerate(commands)
            for a, arg in enumerate(command)
            if isinstance(arg, str)
            and (c, a) not in timestamps
            and (sample_job in arg or SAMPLE_PACKET in arg)
        )
        return cls(
            commands=tuple(tuple(command) for command in commands),
            sample_job=sample_job,
            call=call,
            timestamps=tuple(sorted(timestamps)),
            data=data,
            named=named,
        )

    def commands_for(self, packet_id: str, job: str) -> list[list[str | bytes]]:
        commands = [list(command) for command in self.commands]
        stamp = iso(now_us())  # RQ's utcformat(now()) in clock's cached way
        for c, a in self.timestamps:
            commands[c][a] = stamp
        call = self.call.replace(SAMPLE_PACKET.encode(), packet_id.encode())
        c, a = self.data
        commands[c][a] = zlib_stored(call)
        for c, a, text in self.named:
            commands[c][a] = text.replace(self.sample_job, job).replace(SAMPLE_PACKET, packet_id)
        return commands


class RQDispatcher:
    """The RQ side of handoffs: a plain (binary, non-cluster) Redis connection for RQ itself,
    and an asyncio one for the calls made from the event loop.

    A packet is written (with its inbox entry) before its job: the job only tells a worker
    to claim it. If the process dies in between, ``resume`` still finds the packet and the
    periodic sweep enqueues the missing job (``HandoffStore.sweep``)."""

    def __init__(
        self,
        connection: redis.Redis,
        policy: HandoffPolicy,
        async_connection: AsyncRedis,
        *,
        shares_data_redis: bool = False,
    ) -> None:
        self.connection = connection
        self.policy = policy
        self.async_connection = async_connection
        self.shares_data_redis = shares_data_redis
        self.discard_script = async_connection.register_script(lua_source("discard_job"))
        self.encoder = connection.get_encoder()

    async def enqueue_webhook(self, namespace: str, agent: str, notice_id: str) -> None:
        """Enqueue a delivery of the notice to the agent's webhook
        (``baton.queue.jobs.deliver_webhook``) on the maintenance queue, which
        ``baton worker`` works, through RQ's own ``enqueue``: retried as a handler is."""
        tries, intervals = self.policy.handler_tries, list(self.policy.retry_intervals)
        queue = Queue(
            MAINTENANCE_QUEUE,
            connection=self.connection,
            serializer=JOB_SERIALIZER,
            job_class=BatonJob,
        )
        await asyncio.to_thread(
            partial(
                queue.enqueue,
                WEBHOOK,
                namespace,
                agent,
                notice_id,
                retry=Retry(max=tries - 1, interval=intervals) if tries > 1 else None,
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
            )
        )

    def queue(self, namespace: str, agent: str) -> Queue:
        return Queue(
            queue_name(namespace, agent),
            connection=self.connection,
            serializer=JOB_SERIALIZER,
            job_class=BatonJob,
        )

    def job_commands(
        self, namespace: str, agent: str, packet_id: str, seq: int
    ) -> list[list[str | bytes]]:
        """RQ's own commands for the packet's job: from the queue's template, or built by RQ
        when there is none (a packet id of another shape, from an older version's export; a
        queue whose name holds the sample id)."""
        shaped = PACKET_ID_PATTERN.fullmatch(packet_id)
        template = self._template(namespace, agent) if shaped else None
        if template is not None:
            return template.commands_for(packet_id, job_id(namespace, packet_id, seq))
        return self._built_by_rq(namespace, agent, packet_id, seq)

    def _built_by_rq(
        self, namespace: str, agent: str, packet_id: str, seq: int
    ) -> list[list[str | bytes]]:
        """RQ's enqueue, handed a pipeline, queues its commands on it (and talks to Redis
        only for jobs with dependencies, which these never have, and once per connection
        for the server's version); the pipeline is never sent."""
        built = self.connection.pipeline()
        retries = max(self.policy.handler_tries - 1, 0)
        self.queue(namespace, agent).enqueue_call(
            DELIVER,
            args=(namespace, agent, packet_id),
            job_id=job_id(namespace, packet_id, seq),
            timeout=int(self.policy.lease_seconds),
            retry=Retry(max=retries, interval=list(self.policy.retry_intervals))
            if retries
            else None,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            pipeline=built,
        )
        return [
            [arg if isinstance(arg, str | bytes) else self._encode(arg) for arg in args]
            for args, _ in built.command_stack
        ]

    @lru_cache(maxsize=1024)  # noqa: B019 (one dispatcher per process, kept for its life)
    def _template(self, namespace: str, agent: str) -> JobTemplate | None:
        if SAMPLE_PACKET in namespace or SAMPLE_PACKET in agent:
            return None  # the sample id would be swapped inside the queue's own name
        commands = self._built_by_rq(namespace, agent, SAMPLE_PACKET, SAMPLE_SEQ)
        timestamps: set[tuple[int, int]] = set()
        data = (-1, -1)
        for c, command in enumerate(commands):
            if command[0] != "HSET":
                continue
            for a in range(2, len(command) - 1, 2):
                name = command[a]
                name = name.encode() if isinstance(name, str) else name
                if name in TIMESTAMP_FIELDS:
                    timestamps.add((c, a + 1))
                elif name == b"data":
                    data = (c, a + 1)
        if data == (-1, -1):
            return None  # not the job RQ writes today: let RQ build every job
        call = zlib.decompress(commands[data[0]][data[1]])  # type: ignore[arg-type]
        if call.count(SAMPLE_PACKET.encode()) != 1:
            return None  # (likewise)
        return JobTemplate.marked(
            commands, job_id(namespace, SAMPLE_PACKET, SAMPLE_SEQ), call, timestamps, data
        )

    def _encode(self, value: object) -> bytes:
        encoded: bytes = self.encoder.encode(value)  # type: ignore[no-untyped-call]
        return encoded

    async def enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """RQ's commands for the job, in RQ's order, sent in one pipeline on the asyncio
        connection: the event loop neither blocks nor hands RQ's call to a thread. Not in
        RQ's MULTI: Redis runs one connection's commands in order, so the job's hash is
        written before its id is queued, and a MULTI goes over a pooled connection of its
        own (make bench-ab, handoff row: in a thread 0.24 x the base build's throughput,
        in a MULTI 0.48 x, pipelined 0.74 x). Jobs come from a template (``JobTemplate``):
        RQ's enqueue per job was 20 % of the API's CPU in a handoff (py-spy); the template
        moved the handoff row from 0.68 x to 0.82 x of b1b9ce7's throughput."""
        pipe = self.async_connection.pipeline(transaction=False)
        for command in self.job_commands(namespace, agent, packet_id, seq):
            pipe.execute_command(*command)
        await pipe.execute()

    def queue_drop(
        self, batch: Batch, namespace: str, agent: str, packet_id: str, seq: int
    ) -> bool:
        """Queue on ``batch`` (on the data Redis) dropping the job of a packet ``resume``
        claimed, if no worker took it yet (``discard_job.lua``), when the queue shares the
        data Redis; False when it does not (call :meth:`drop_job_later`)."""
        if not self.shares_data_redis:
            return False
        identifier = job_id(namespace, packet_id, seq)
        keys = [self.queue(namespace, agent).key, Job.key_for(identifier)]
        batch.script(self.discard_script, keys, [identifier])
        return True

    def drop_job_later(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """The same drop off the caller's path, through RQ's own calls in a thread (the
        queue is on another Redis); a failure is logged."""

        async def discard() -> None:
            try:
                await asyncio.to_thread(self._drop_job, namespace, agent, packet_id, seq)
            except Exception as error:
                log.warning(
                    "could not drop the job of a pulled packet",
                    packet=packet_id,
                    error=describe(error),
                )

        task = asyncio.create_task(discard())
        _background.add(task)
        task.add_done_callback(_background.discard)

    def _drop_job(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        identifier = job_id(namespace, packet_id, seq)
        if not self.queue(namespace, agent).remove(identifier):
            return  # a worker has it (or it is gone)
        with contextlib.suppress(NoSuchJobError):
            Job.fetch(identifier, connection=self.connection, serializer=JOB_SERIALIZER).delete(
                remove_from_queue=False
            )

    async def depth(self, namespace: str, agent: str) -> int:
        return int(await self.async_connection.llen(self.queue(namespace, agent).key))

    async def missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        return await asyncio.to_thread(partial(self._missing, namespace, jobs))

    def _missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        identifiers = [job_id(namespace, packet_id, seq) for packet_id, seq in jobs]
        found = Job.fetch_many(identifiers, connection=self.connection, serializer=JOB_SERIALIZER)
        return [index for index, job in enumerate(found) if job is None]

    async def forget_queues(self, namespace: str, agents: Sequence[str]) -> int:
        return await asyncio.to_thread(partial(self._forget_queues, namespace, agents))

    def _forget_queues(self, namespace: str, agents: Sequence[str]) -> int:
        """Each queue emptied and deleted (RQ's ``Queue.delete``), and the jobs its
        registries keep (finished, failed, deferred, scheduled, canceled) deleted with them;
        a job a worker runs right now finishes, finding no packet."""
        jobs = 0
        for agent in agents:
            queue = self.queue(namespace, agent)
            jobs += queue.count
            for registry in (
                queue.finished_job_registry,
                queue.failed_job_registry,
                queue.deferred_job_registry,
                queue.scheduled_job_registry,
                queue.canceled_job_registry,
            ):
                for identifier in registry.get_job_ids():
                    registry.remove(identifier, delete_job=True)
                    jobs += 1
            queue.delete(delete_jobs=True)
        return jobs

    async def aclose(self) -> None:
        self.connection.close()
        if not self.shares_data_redis:
            await self.async_connection.aclose()
