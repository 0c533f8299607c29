"""Putting handoff packets on RQ queues: one queue per receiving agent.

RQ jobs carry only ``(namespace, agent, packet_id)``; the packet itself lives in the agent's
inbox in Redis, and the job claims it through the same claim path as ``resume``. Jobs are
made and dropped through RQ's public API (``Queue.enqueue_call``, ``Queue.remove``,
``Job.delete``). RQ's
default serializer is kept so that RQ's own tools (``rq info``, ``rq requeue``) work as is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from functools import partial

import redis
import structlog
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job

from baton.server.errors import describe
from baton.server.keys import job_id, queue_name
from baton.server.settings import HandoffPolicy

log = structlog.get_logger("baton.dispatch")
DELIVER = "baton.queue.jobs.deliver_packet"
SWEEP = "baton.queue.jobs.sweep"
MAINTENANCE_QUEUE = "baton-maintenance"
# Finished jobs are kept an hour (visible in rq info); failed ones a week (our dead letter).
RESULT_TTL = 3600
FAILURE_TTL = 7 * 24 * 3600
# Fire-and-forget tasks are kept referenced until they finish (asyncio keeps weak refs only).
_background: set[asyncio.Task[None]] = set()


class RQDispatcher:
    """The RQ side of handoffs, through RQ's public API on a plain (binary, non-cluster)
    Redis connection. RQ's calls block, so the event loop hands them to a thread.

    A packet is written (with its inbox entry) before its job: the job only tells a worker
    to claim it. If the process dies in between, ``resume`` still finds the packet and the
    periodic sweep enqueues the missing job (``HandoffStore.sweep``)."""

    def __init__(self, connection: redis.Redis, policy: HandoffPolicy) -> None:
        self.connection = connection
        self.policy = policy

    def queue(self, namespace: str, agent: str) -> Queue:
        return Queue(queue_name(namespace, agent), connection=self.connection)

    async def enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        await asyncio.to_thread(self._enqueue, namespace, agent, packet_id, seq)

    def _enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
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
        )

    def drop_job_later(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """Drop the job of a packet ``resume`` claimed, off the caller's path, so queue
        depths stay true: only a job still waiting in its queue goes; one a worker has
        taken is left to run, and finds its packet claimed. A failure is logged."""

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
            Job.fetch(identifier, connection=self.connection).delete(remove_from_queue=False)

    async def depth(self, namespace: str, agent: str) -> int:
        queue = self.queue(namespace, agent)
        return await asyncio.to_thread(lambda: queue.count)

    async def missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        return await asyncio.to_thread(partial(self._missing, namespace, jobs))

    def _missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        identifiers = [job_id(namespace, packet_id, seq) for packet_id, seq in jobs]
        found = Job.fetch_many(identifiers, connection=self.connection)
        return [index for index, job in enumerate(found) if job is None]

    async def aclose(self) -> None:
        self.connection.close()
