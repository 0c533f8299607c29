"""What the stores ask of whoever puts packets on the receivers' queues (RQ, in
``baton.queue.dispatch``): a protocol, so stores never import the queue layer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from baton.server.runtime.batch import Batch


class Dispatcher(Protocol):
    """Puts packets on the receivers' queues (RQ: ``baton.queue.dispatch``)."""

    async def enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """Ask a worker of ``agent`` to deliver the packet (idempotent per ``seq``)."""
        ...

    def queue_drop(
        self, batch: Batch, namespace: str, agent: str, packet_id: str, seq: int
    ) -> bool:
        """Queue on ``batch`` (on the data Redis) dropping the job of a packet ``resume``
        claimed, if no worker took it yet, so queue depths stay true; False when the queue
        is not on the data Redis (call :meth:`drop_job_later`)."""
        ...

    def drop_job_later(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """The same drop, off the caller's path."""
        ...

    async def enqueue_webhook(self, namespace: str, agent: str, notice_id: str) -> None:
        """Ask a worker to deliver the notice to ``agent``'s webhook."""
        ...

    async def depth(self, namespace: str, agent: str) -> int:
        """How many jobs wait in ``agent``'s queue."""
        ...

    async def missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        """Indexes of the (packet id, seq) pairs that have no job."""
        ...

    async def forget_queues(self, namespace: str, agents: Sequence[str]) -> int:
        """Delete the queues of ``agents`` in ``namespace`` and their jobs; how many jobs."""
        ...

    async def aclose(self) -> None:
        """Close the dispatcher's own connections."""
        ...
