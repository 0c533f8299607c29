"""What every store of one namespace starts from: the parts of the namespace it is given.

Stores depend on :class:`NamespaceParts`, a protocol defined here, below them, never on
``baton.server.stores.backend.Namespace``, the object that builds them (it satisfies the protocol
by its shape). Its :class:`Topology` (one Redis or a cluster, ``baton.server.stores.topology``)
writes the changes that reach Redis differently on each. A store that needs another store
says so in a protocol of its own module that extends this one (``handoffs`` needs
``records``, ``sessions`` needs ``memories``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.typing import EncodableT

    from baton.server.model.keys import Keys
    from baton.server.model.models import Pin
    from baton.server.retrieval.search import IndexCall, SearchIndex
    from baton.server.runtime.batch import Batch
    from baton.server.runtime.dispatcher import Dispatcher
    from baton.server.runtime.scripts import Scripts
    from baton.server.runtime.settings import HandoffPolicy, Limits
    from baton.server.stores.activity import Activity
    from baton.server.stores.audit import AuditLog
    from baton.server.stores.changes import Command, NewPacket, Seen, VersionWrite, Wanted, Written


class Topology(Protocol):
    """How the stores' multi-key changes reach Redis."""

    transactions: bool
    """Whether a MULTI/EXEC can span a namespace's keys."""

    def batch(self, redis: Redis, *, transaction: bool = False) -> Batch:
        """Commands and scripts sent together (``transaction``: in one MULTI/EXEC, only
        where :attr:`transactions`)."""
        ...

    async def write_versions(
        self, ns: NamespaceParts, writes: list[VersionWrite], then: list[Command]
    ) -> Written:
        """One attempt at ``writes`` (each a version with what follows it), then, once all
        are written, ``then``: on one Redis all in one step or nothing; on a cluster in
        steps, each record's own (a refusal leaves the writes before it written)."""
        ...

    async def read_version(
        self, ns: NamespaceParts, keys: list[str], args: list[EncodableT], seen: Seen | None
    ) -> tuple[list[Any], bool]:
        """One attempt at ``recall.lua`` (``keys`` and ``args`` are its own); with ``seen``,
        the session's touch of what it found too, where it goes in the same call. The reply,
        and whether the touch was made (if not, the store makes it)."""
        ...

    async def forget_versions(
        self,
        ns: NamespaceParts,
        keys: list[str],
        args: list[EncodableT],
        removal: IndexCall,
        then: Sequence[Command],
    ) -> list[Any]:
        """One attempt at ``forget_record.lua`` (its reply says what it did), the value bytes
        it freed taken off the namespace's count, the record's search document removed
        (``removal``), then ``then``: on one Redis in the same call."""
        ...

    async def create_packet(
        self, ns: NamespaceParts, new: NewPacket, wanted: Wanted | None
    ) -> tuple[str, list[Pin]]:
        """Store a new packet with its pins resolved (``wanted`` None: the session's touched
        records): its id and pins. A refused pin writes nothing (``InvalidInput``)."""
        ...


class NamespaceParts(Protocol):
    """What one namespace shares among its stores."""

    @property
    def name(self) -> str: ...
    @property
    def redis(self) -> Redis: ...
    @property
    def keys(self) -> Keys: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def search(self) -> SearchIndex: ...
    @property
    def activity(self) -> Activity: ...
    @property
    def audit(self) -> AuditLog: ...
    @property
    def scripts(self) -> Scripts: ...
    @property
    def topology(self) -> Topology: ...
    @property
    def dispatcher(self) -> Dispatcher | None: ...
    @property
    def policy(self) -> HandoffPolicy: ...

    def batch(self, *, transaction: bool = False) -> Batch: ...

    async def admit(self) -> None:
        """Register the namespace before its first write (its quota)."""

    async def check_room(self) -> None:
        """``QuotaReached`` when a write here would pass a quota (the namespace's, the
        acting token's)."""

    def count_written(self, index: IndexCall | None, value_bytes: int, token: str | None) -> None:
        """Add a write (or, negative, a forget) to the quota counts kept between reads."""

    async def durable(self) -> None:
        """Return once what was written so far is in Redis's append-only file, where Redis
        answers before (``baton.server.runtime.durability``): before a write is acknowledged."""


class NamespaceStore:
    """A store of one namespace (records, packets, sessions, memories, …)."""

    def __init__(self, namespace: NamespaceParts) -> None:
        self.ns = namespace
        self.namespace = namespace.name
        self.redis = namespace.redis
        self.keys = namespace.keys
        self.limits = namespace.limits
        self.scripts = namespace.scripts
        self.activity = namespace.activity
