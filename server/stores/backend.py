"""What a Baton process holds: one :class:`Backend` (Redis clients, scripts, limits and the
dispatcher), and cheap :class:`Namespace` views of it that own each namespace's stores.

:func:`connect` is the one wiring function: the API, the MCP server, RQ workers, the CLI and
the tests all build their backend with it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property

from redis.asyncio import Redis
from redis.typing import EncodableT

from baton.queue.dispatch import RQDispatcher
from baton.server.model.errors import QuotaReached
from baton.server.model.identity import token_of_acting
from baton.server.model.keys import NAMESPACES, Keys, token_namespaces_key
from baton.server.model.validation import check_namespace
from baton.server.retrieval.analysis import Analyzer
from baton.server.retrieval.lexical import LEXICAL_VERSION
from baton.server.retrieval.search import LEXICAL, IndexCall, SearchIndex, SearchTurns
from baton.server.retrieval.vectors import Vectors, vectors_for
from baton.server.runtime.batch import Batch
from baton.server.runtime.connection import (
    BatonRedis,
    async_redis,
    queue_url,
    redis_url,
    sync_redis,
)
from baton.server.runtime.dispatcher import Dispatcher
from baton.server.runtime.durability import AppendOnlyBarrier
from baton.server.runtime.scripts import Scripts
from baton.server.runtime.settings import HandoffPolicy, Limits, Settings
from baton.server.runtime.signing import InstallationKey
from baton.server.stores.activity import Activity
from baton.server.stores.as_of import AsOf
from baton.server.stores.audit import AuditLog
from baton.server.stores.context_builder import ContextBuilder
from baton.server.stores.dashboard import Dashboard
from baton.server.stores.grant_store import GrantStore
from baton.server.stores.handoffs import HandoffStore
from baton.server.stores.item_expiry import ItemExpiry
from baton.server.stores.memories import MemoryStore
from baton.server.stores.notices import NoticeStore
from baton.server.stores.outcomes import OutcomeStore
from baton.server.stores.records import HeadHints, RecordStore
from baton.server.stores.recount import COUNTED
from baton.server.stores.sessions import SessionStore
from baton.server.stores.store_base import Topology
from baton.server.stores.threads import ThreadStore
from baton.server.stores.token_bytes import TokenQuota
from baton.server.stores.topology import topology_of
from baton.server.stores.verify import Verifier

# Namespace views are kept for reuse; past this many the cache starts over.
NAMESPACES_CACHED = 256
NEWLY_ADMITTED = 2  # admit_namespace.lua's answer for a namespace it added just now
# A process registers a namespace again after this long (it may have been forgotten since).
ADMITTED_SECONDS = 60.0


@dataclass(eq=False)
class Backend:
    """The Redis client, its scripts, the limits and the dispatcher of one process."""

    redis: Redis
    limits: Limits = field(default_factory=Limits)
    dispatcher: Dispatcher | None = None
    policy: HandoffPolicy = field(default_factory=HandoffPolicy)
    scripts: Scripts = field(init=False)
    topology: Topology = field(init=False)
    namespaces: dict[str, Namespace] = field(init=False, default_factory=dict)
    # namespaces registered by this process (Namespace.admit), and when (time.monotonic)
    admitted: dict[str, float] = field(init=False, default_factory=dict)
    search_turns: SearchTurns = field(init=False)  # every namespace's searches take turns
    vectors: Vectors | None = None  # the process's vector search (BATON_VECTORS)
    analyzer: Analyzer = field(init=False)  # every namespace's texts, analysed for search
    token_quota: TokenQuota = field(init=False)  # BATON_MAX_TOKEN_BYTES, across namespaces
    # seals the audit log; by default this environment's (BATON_SIGNING_KEY, the data dir)
    key: InstallationKey = field(default_factory=lambda: InstallationKey(Settings.from_env()))
    # where write operations wait for Redis's append-only file (None: they need not)
    barrier: AppendOnlyBarrier | None = None

    def __post_init__(self) -> None:
        self.search_turns = SearchTurns(self.limits.search_share)
        self.analyzer = Analyzer(self.vectors)
        self.scripts = Scripts(self.redis)
        self.topology = topology_of(self.redis)
        self.token_quota = TokenQuota(self.redis, self.limits.max_token_bytes)

    def namespace(self, name: str) -> Namespace:
        """The view of namespace ``name`` (checked; kept for reuse)."""
        found = self.namespaces.get(name)
        if found is None:
            if len(self.namespaces) >= NAMESPACES_CACHED:
                self.namespaces.clear()
            found = self.namespaces[name] = Namespace(self, name)
        return found

    async def aclose(self) -> None:
        """Close what :func:`connect` opened."""
        await self.redis.aclose()
        if self.dispatcher is not None:
            await self.dispatcher.aclose()


class Namespace:
    """One namespace of a backend: its keys, search index and activity, and (built on first
    use) its stores. Stores take the namespace and reach each other through it; they know
    it only by the parts they use (``baton.server.stores.store_base.NamespaceParts``)."""

    def __init__(self, backend: Backend, name: str) -> None:
        self.backend = backend
        self.name = check_namespace(name)
        self.redis = backend.redis
        self.limits = backend.limits
        self.scripts = backend.scripts
        self.dispatcher = backend.dispatcher
        self.policy = backend.policy
        self.topology = backend.topology
        self.keys = Keys(self.name)
        self.search = SearchIndex(
            self.redis,
            backend.scripts,
            self.keys,
            self.limits.max_index_terms,
            backend.search_turns,
            self.limits.max_namespace_bytes,
            backend.vectors,
            backend.analyzer,
        )
        self.activity = Activity(self.redis, self.scripts, self.keys, self.name, self.batch)
        self.heads = HeadHints()

    def batch(self, *, transaction: bool = False) -> Batch:
        return self.topology.batch(self.redis, transaction=transaction)

    async def durable(self) -> None:
        if self.backend.barrier is not None:
            await self.backend.barrier.passed()

    async def admit(self) -> None:
        """Register this namespace before its first write, or ``QuotaReached`` when it is
        new and the server already holds ``max_namespaces`` (each costs the sweeps a visit),
        or the agent token the request acts with created ``max_namespaces_per_token``;
        a namespace admitted is known to this process for a minute (``baton forget-namespace``
        may delete it, another process's doing; a write then registers it anew). A namespace new and
        empty has its quota counts marked exact (every write counts from its first) and its
        search index as built by today's lexical rules, so neither needs a rebuild."""
        if (
            time.monotonic() - self.backend.admitted.get(self.name, -ADMITTED_SECONDS)
            < ADMITTED_SECONDS
        ):
            return
        limit, per_token = self.limits.max_namespaces, self.limits.max_namespaces_per_token
        keys: list[str] = [NAMESPACES]
        args: list[EncodableT] = [self.name, limit]
        if (token := token_of_acting()) is not None:
            keys, args = [NAMESPACES, token_namespaces_key(token)], [self.name, limit, per_token]
        admitted = await self.scripts.admit_namespace(keys=keys, args=args)
        if admitted == 0:
            raise QuotaReached.of(
                "the server's namespaces", limit, "BATON_MAX_NAMESPACES", namespace=self.name
            )
        if admitted == -1:
            raise QuotaReached.of(
                "the namespaces this token created",
                per_token,
                "BATON_MAX_NAMESPACES_PER_TOKEN",
                namespace=self.name,
            )
        if admitted == NEWLY_ADMITTED:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zcard(self.keys.refs)
            pipe.hlen(self.keys.search_docs)
            pipe.exists(self.keys.search_stats)
            if not any(await pipe.execute()):
                await self.redis.hset(
                    self.keys.search_stats, mapping={COUNTED: 1, LEXICAL: LEXICAL_VERSION}
                )
        self.backend.admitted[self.name] = time.monotonic()

    async def check_room(self) -> None:
        """``QuotaReached`` when a write here would pass a quota, as last read: the
        namespace's (its search index, its stored values) or, for a request made with an
        agent token, that token's stored values. Checked before a write, so a refused write
        writes nothing."""
        await self.search.check_room()
        await self.backend.token_quota.check(token_of_acting())

    def count_written(self, index: IndexCall | None, value_bytes: int, token: str | None) -> None:
        """Add a write this process made (or, negative, a forget) to the quota counts it
        keeps between reads, so its own writes are counted at once."""
        self.search.noted(index, value_bytes)
        self.backend.token_quota.spent(token, value_bytes)

    @cached_property
    def context(self) -> ContextBuilder:
        """What a session start or a tool use is given to read (agentmemory's context)."""
        return ContextBuilder(self.sessions)

    @cached_property
    def audit(self) -> AuditLog:
        return AuditLog(self.redis, self.keys, self.name, self.backend.key)

    @cached_property
    def grants(self) -> GrantStore:
        return GrantStore(self.redis, self.keys, self.audit)

    @cached_property
    def records(self) -> RecordStore:
        return RecordStore(self)

    @cached_property
    def verifier(self) -> Verifier:
        return Verifier(self)

    @cached_property
    def handoffs(self) -> HandoffStore:
        return HandoffStore(self)

    @cached_property
    def outcomes(self) -> OutcomeStore:
        return OutcomeStore(self)

    @cached_property
    def sessions(self) -> SessionStore:
        return SessionStore(self)

    @cached_property
    def memories(self) -> MemoryStore:
        return MemoryStore(self)

    @cached_property
    def notices(self) -> NoticeStore:
        return NoticeStore(self, self.handoffs)

    @cached_property
    def as_of(self) -> AsOf:
        return AsOf(self)

    @cached_property
    def item_expiry(self) -> ItemExpiry:
        return ItemExpiry(self)

    @cached_property
    def threads(self) -> ThreadStore:
        return ThreadStore(self)

    @cached_property
    def dashboard(self) -> Dashboard:
        return Dashboard(self)


def connect(settings: Settings, *, dispatch: bool = True) -> Backend:
    """The backend of ``settings``: the data Redis (the embedded one is started if needed)
    and, with ``dispatch``, the queue Redis RQ runs on. Close it with ``Backend.aclose``."""
    vectors = vectors_for(settings.vectors, settings.vector_floor)
    data_url = redis_url(settings)
    client = async_redis(data_url)
    dispatcher = None
    if dispatch:
        rq_url = queue_url(settings)
        shared = rq_url == data_url
        dispatcher = RQDispatcher(
            sync_redis(rq_url),
            settings.handoffs,
            client if shared else async_redis(rq_url),
            shares_data_redis=shared,
        )
    return Backend(
        client,
        settings.limits,
        dispatcher,
        settings.handoffs,
        vectors,
        InstallationKey(settings),
        AppendOnlyBarrier(client) if isinstance(client, BatonRedis) else None,  # not a cluster
    )


@asynccontextmanager
async def open_backend(settings: Settings, *, dispatch: bool = True) -> AsyncIterator[Backend]:
    """:func:`connect`, closed on exit."""
    backend = connect(settings, dispatch=dispatch)
    try:
        yield backend
    finally:
        await backend.aclose()
