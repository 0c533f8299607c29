"""What every store of one namespace starts from: the namespace view and its shortcuts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from baton.server.backend import Namespace


class NamespaceStore:
    """A store of one namespace (records, packets, sessions, memories, …)."""

    def __init__(self, namespace: Namespace) -> None:
        self.ns = namespace
        self.namespace = namespace.name
        self.redis = namespace.redis
        self.keys = namespace.keys
        self.limits = namespace.limits
        self.scripts = namespace.backend.scripts
        self.activity = namespace.activity
