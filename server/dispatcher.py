"""What the stores ask of whoever puts packets on the receivers' queues (RQ, in
``baton.queue.dispatch``): a protocol, so stores never import the queue layer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Dispatcher(Protocol):
    """Puts packets on the receivers' queues (RQ: ``baton.queue.dispatch``)."""

    async def enqueue(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """Ask a worker of ``agent`` to deliver the packet (idempotent per ``seq``)."""
        ...

    def job_here(self, namespace: str, agent: str, packet_id: str, seq: int) -> bytes | None:
        """The packet's job as commands (``commands.lua``) for the script that writes the
        packet to run right after it, when the queue shares the data Redis; None when it
        cannot, and the caller calls :meth:`enqueue` once the packet is written."""
        ...

    def drop_job_here(
        self, namespace: str, agent: str, packet_id: str, seq: int | str
    ) -> list[str] | None:
        """The keys and id a script on the data Redis drops the packet's job with (if no
        worker took it yet: ``resume`` claimed the packet), when the queue shares that Redis;
        None when it cannot, and the caller calls :meth:`drop_job_later`."""
        ...

    def drop_job_later(self, namespace: str, agent: str, packet_id: str, seq: int) -> None:
        """The same drop, off the caller's path."""
        ...

    async def depth(self, namespace: str, agent: str) -> int:
        """How many jobs wait in ``agent``'s queue."""
        ...

    async def missing(self, namespace: str, jobs: Sequence[tuple[str, int]]) -> list[int]:
        """Indexes of the (packet id, seq) pairs that have no job."""
        ...

    async def aclose(self) -> None:
        """Close the dispatcher's own connections."""
        ...
