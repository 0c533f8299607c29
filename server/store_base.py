"""What every store of one namespace starts from: the parts of the namespace it is given.

Stores depend on :class:`NamespaceParts`, a protocol defined here, below them, never on
``baton.server.backend.Namespace``, the object that builds them (it satisfies the protocol
by its shape). A store that needs another store says so in a protocol of its own module
that extends this one (``handoffs`` needs ``records``, ``sessions`` needs ``memories``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from baton.server.activity import Activity
    from baton.server.batch import Batch
    from baton.server.dispatcher import Dispatcher
    from baton.server.keys import Keys
    from baton.server.scripts import Scripts
    from baton.server.search import SearchIndex
    from baton.server.settings import HandoffPolicy, Limits


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
    def scripts(self) -> Scripts: ...
    @property
    def cluster(self) -> bool: ...
    @property
    def dispatcher(self) -> Dispatcher | None: ...
    @property
    def policy(self) -> HandoffPolicy: ...

    def batch(self) -> Batch: ...


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
