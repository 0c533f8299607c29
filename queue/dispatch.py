"""Putting handoff packets on RQ queues: one queue per receiving agent.

RQ jobs carry only ``(namespace, agent, packet_id)``; the packet itself lives in the agent's
inbox in Redis, and the job claims it through the same claim path as ``resume``. RQ's
default serializer is kept so that RQ's own tools (``rq info``, ``rq requeue``) work as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import redis
from baton.server.handoffs import job_id
from baton.server.settings import HandoffPolicy
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript
from rq import Queue, Retry
from rq.job import Job

DELIVER = "baton.queue.jobs.deliver_packet"
SWEEP = "baton.queue.jobs.sweep"
MAINTENANCE_QUEUE = "baton-maintenance"
# Finished jobs are kept an hour (visible in rq info); failed ones a week (our dead letter).
RESULT_TTL = 3600
FAILURE_TTL = 7 * 24 * 3600


# KEYS[1] the RQ queue list   KEYS[2] the job hash   ARGV[1] the job id
# Removes a job that no worker has taken yet, and its hash.
DISCARD_JOB: Final = """
if redis.call('LREM', KEYS[1], 0, ARGV[1]) > 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""


def queue_name(namespace: str, agent: str) -> str:
    """The RQ queue of one agent, e.g. ``baton:default:executor``."""
    return f"baton:{namespace}:{agent}"


class RQDispatcher:
    """The RQ side of handoffs, on a plain (binary, non-cluster) Redis connection."""

    def __init__(
        self, connection: redis.Redis, policy: HandoffPolicy,
        async_connection: AsyncRedis | None = None,
    ) -> None:  # fmt: skip
        self.connection = connection
        self.policy = policy
        self.async_connection = async_connection
        self.discard_script = (
            None if async_connection is None else async_connection.register_script(DISCARD_JOB)
        )

    def queue(self, namespace: str, agent: str) -> Queue:
        return Queue(queue_name(namespace, agent), connection=self.connection)

    def _enqueue_on(
        self, pipe: redis.client.Pipeline, namespace: str, agent: str, packet_id: str, seq: int
    ) -> None:
        """Queue RQ's own commands for the packet's job on ``pipe`` (idempotent per ``seq``).
        Given a pipeline, RQ talks to Redis only for jobs with dependencies, which ours never
        have (and once per connection for the server's version)."""
        retries = max(self.policy.handler_tries - 1, 0)
        self.queue(namespace, agent).enqueue_call(
            DELIVER,
            args=(namespace, agent, packet_id),
            job_id=job_id(namespace, packet_id, seq),
            timeout=int(self.policy.lease_seconds),
            retry=Retry(max=retries, interval=list(self.policy.retry_intervals)) if retries else None,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            pipeline=pipe,
        )

    def enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """Ask a worker of ``agent`` to deliver the packet: one MULTI/EXEC round trip."""
        pipe = self.connection.pipeline()
        self._enqueue_on(pipe, namespace, agent, packet_id, seq)
        pipe.execute()

    async def enqueue_async(self, namespace: str, agent: str, packet_id: str, seq: int) -> bool:
        """``enqueue`` on the asyncio connection, so the event loop neither blocks nor hands
        the call to a thread: RQ builds its commands on a pipeline that is never executed, and
        they are sent as the same MULTI/EXEC. False without an asyncio connection."""
        if self.async_connection is None:
            return False
        built = self.connection.pipeline()
        self._enqueue_on(built, namespace, agent, packet_id, seq)
        pipe = self.async_connection.pipeline(transaction=True)
        for args, options in built.command_stack:
            pipe.execute_command(*args, **options)
        await pipe.execute()
        return True

    def discard_call(
        self, namespace: str, agent: str, packet_id: str, seq: int
    ) -> tuple[AsyncScript, list[str], list[str]] | None:
        """The script call that drops the job of a packet claimed by ``resume``, so queue
        depths stay true: only a job still waiting in the queue is deleted (atomically, on the
        queue Redis); one a worker has already taken is left to run, and it finds its packet
        claimed and does nothing."""
        if self.discard_script is None:
            return None
        identifier = job_id(namespace, packet_id, seq)
        queue_key = Queue.redis_queue_namespace_prefix + queue_name(namespace, agent)
        return self.discard_script, [queue_key, Job.key_for(identifier)], [identifier]

    def missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        pipe = self.connection.pipeline(transaction=False)
        for packet_id, seq in jobs:
            pipe.exists(Job.key_for(job_id(namespace, packet_id, seq)))
        return [index for index, exists in enumerate(pipe.execute()) if not exists]
