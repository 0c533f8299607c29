"""What the dashboard shows, computed from the store. The JSON endpoints return these
views and the HTML pages are rendered from the very same objects."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple, Protocol

import msgspec

from baton.server.model.keys import NAMESPACES
from baton.server.model.memory_models import Memory
from baton.server.model.models import (
    AgentSummary,
    Contest,
    Event,
    History,
    Observation,
    OutcomeEntry,
    Packet,
    RecallHit,
    RecordVersion,
    Session,
    StalePin,
    Webhook,
)
from baton.server.runtime import codec
from baton.server.stores.records import NamespaceWithRecords

if TYPE_CHECKING:
    from baton.server.stores.as_of import AsOf
    from baton.server.stores.handoffs import HandoffStore
    from baton.server.stores.memories import MemoryStore
    from baton.server.stores.notices import NoticeStore
    from baton.server.stores.sessions import SessionStore

PAGE = 100


class StaleView(msgspec.Struct, kw_only=True):
    """A pin that moved, with who wrote the version it moved to, and when (the pending
    list's badge; a packet's page explains each in full, as ``resume`` does)."""

    ref: str
    pinned_version: int
    current_version: int
    changed_by: str | None
    changed_at: str | None


class PendingPacket(msgspec.Struct, kw_only=True):
    """A held, queued or claimed packet with its staleness computed now."""

    packet: Packet
    age_seconds: float
    stale: list[StaleView]
    lease_seconds_left: float | None
    expires_in_seconds: float | None


class AgentQueue(msgspec.Struct, kw_only=True):
    summary: AgentSummary
    packets: list[PendingPacket]


class PendingView(msgspec.Struct, kw_only=True):
    namespace: str
    queued: int
    claimed: int
    failed: int
    agents: list[AgentQueue]
    held: int = 0


class PinView(msgspec.Struct, kw_only=True):
    ref: str
    pinned_version: int
    current_version: int | None
    stale: bool
    contested: Contest | None = None


class Current(NamedTuple):
    """A pinned record as it is now: its version (None once gone) and its contest."""

    version: int | None
    contested: Contest | None


class PacketView(msgspec.Struct, kw_only=True):
    namespace: str
    packet: Packet
    pins: list[PinView]
    stale: list[StalePin]  # the pins that moved, explained as resume explains them (now)
    as_of: str | None = None  # pins as they stood then: current_version and stale then


class ConfidencePoint(msgspec.Struct, kw_only=True):
    at: str
    version: int
    confidence: float
    cause: str


class RecordView(msgspec.Struct, kw_only=True):
    namespace: str
    history: History
    outcomes: list[OutcomeEntry]
    confidence: list[ConfidencePoint]
    as_of: str | None = None
    then: RecordVersion | None = None  # with as_of: the version current then, if any


class DeadLetter(msgspec.Struct, kw_only=True):
    packet: Packet
    reason: str


class FailedView(msgspec.Struct, kw_only=True):
    namespace: str
    packets: list[DeadLetter]


class WebhooksView(msgspec.Struct, kw_only=True):
    """Every agent's webhook (never its secret) and newest deliveries."""

    namespace: str
    webhooks: list[Webhook]


class ActivityView(msgspec.Struct, kw_only=True):
    namespace: str
    events: list[Event]


class SessionsView(msgspec.Struct, kw_only=True):
    """Recent sessions, or with ``query`` the memories and observations that match it."""

    namespace: str
    sessions: list[Session]
    query: str | None = None
    hits: list[RecallHit] = []


class SessionView(msgspec.Struct, kw_only=True):
    """One session: what the hooks recorded of it and the memories drawn from that."""

    namespace: str
    session: Session
    observations: list[Observation]
    memories: list[RecallHit]


class MemoriesView(msgspec.Struct, kw_only=True):
    """The latest saved memories, newest first, or with ``query`` those that match it."""

    namespace: str
    memories: list[Memory]
    query: str | None = None
    hits: list[RecallHit] = []


def _seconds_until(stamp: str | None, now: float) -> float | None:
    if stamp is None:
        return None
    return round(datetime.fromisoformat(stamp).timestamp() - now, 1)


class DashboardParts(NamespaceWithRecords, Protocol):
    """What the dashboard reads: the namespace's parts, records and packets."""

    @property
    def handoffs(self) -> HandoffStore: ...

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def memories(self) -> MemoryStore: ...

    @property
    def as_of(self) -> AsOf: ...

    @property
    def notices(self) -> NoticeStore: ...


class Dashboard:
    """Read-only views over one namespace."""

    def __init__(self, namespace: DashboardParts) -> None:
        self.ns = namespace
        self.handoffs = namespace.handoffs
        self.redis = namespace.redis
        self.keys = namespace.keys
        self.namespace = namespace.name

    async def _packets(self, ids: list[str]) -> list[Packet]:
        found = await self.handoffs.get_many(ids)
        return [found[packet_id] for packet_id in ids if packet_id in found]

    async def _current_versions(self, refs: list[str]) -> dict[str, Current]:
        """Each record's current version (None for a record that is gone) and contest."""
        unique = sorted(set(refs))
        pipe = self.redis.pipeline(transaction=False)
        for ref in unique:
            pipe.hmget(self.keys.head(ref), "version", "contested", "contested_base")
        return {
            ref: Current(None if head[0] is None else int(head[0]), codec.contest(*head[1:]))
            for ref, head in zip(unique, await pipe.execute(), strict=True)
        }

    async def pending(self) -> PendingView:
        """Every agent's held, queued and claimed packets, oldest first, stale pins flagged
        live."""
        summaries = await self.handoffs.agents()
        busy = [s for s in summaries if s.queued or s.claimed or s.held]
        pipe = self.redis.pipeline(transaction=False)
        for summary in busy:
            inbox = self.keys.inbox(summary.agent)
            for waiting in (inbox.held, inbox.queued, inbox.claimed):
                pipe.zrange(waiting, 0, PAGE - 1)
        replies = await pipe.execute()
        by_agent: dict[str, list[Packet]] = {}
        for index, summary in enumerate(busy):
            ids = [raw.decode() for part in replies[3 * index : 3 * index + 3] for raw in part]
            by_agent[summary.agent] = await self._packets(ids)
        current = await self._current_versions(
            [pin.ref for packets in by_agent.values() for p in packets for pin in p.pins]
        )
        moved = await self._writers(
            sorted(
                {
                    (pin.ref, version)
                    for packets in by_agent.values()
                    for p in packets
                    for pin in p.pins
                    if (version := current[pin.ref].version) is not None and version != pin.version
                }
            )
        )
        now = time.time()
        queues = []
        for summary in busy:
            pending = []
            for packet in sorted(by_agent[summary.agent], key=lambda p: p.created_at):
                stale = [
                    StaleView(
                        ref=pin.ref,
                        pinned_version=pin.version,
                        current_version=current[pin.ref].version or 0,
                        changed_by=moved.get(pin.ref, (None, None))[0],
                        changed_at=moved.get(pin.ref, (None, None))[1],
                    )
                    for pin in packet.pins
                    if current[pin.ref].version != pin.version
                ]
                pending.append(
                    PendingPacket(
                        packet=packet,
                        age_seconds=max(0.0, -(_seconds_until(packet.created_at, now) or 0.0)),
                        stale=stale,
                        lease_seconds_left=_seconds_until(packet.lease_until, now),
                        expires_in_seconds=_seconds_until(packet.expires_at, now),
                    )
                )
            queues.append(AgentQueue(summary=summary, packets=pending))
        return PendingView(
            namespace=self.namespace,
            held=sum(s.held for s in summaries),
            queued=sum(s.queued for s in summaries),
            claimed=sum(s.claimed for s in summaries),
            failed=sum(s.failed for s in summaries),
            agents=queues,
        )

    async def _writers(
        self, versions: list[tuple[str, int]]
    ) -> dict[str, tuple[str | None, str | None]]:
        """Who wrote each (ref, version), and when."""
        pipe = self.redis.pipeline(transaction=False)
        for ref, version in versions:
            pipe.hmget(self.keys.version(ref, version), "author", "created_at")
        return {
            ref: (
                None if author is None else author.decode(),
                None if at is None else at.decode(),
            )
            for (ref, _), (author, at) in zip(versions, await pipe.execute(), strict=True)
        }

    async def namespaces(self) -> list[str]:
        """Every namespace that holds data, for the picker."""
        return sorted(codec.text(raw) for raw in await self.redis.smembers(NAMESPACES))

    async def sessions(self, query: str | None = None) -> SessionsView:
        recent = await self.ns.sessions.recent(PAGE)
        if not query or not query.strip():
            return SessionsView(namespace=self.namespace, sessions=recent)
        found = await self.ns.memories.recall(query, limit=50, format="compact")
        return SessionsView(
            namespace=self.namespace, sessions=recent, query=query, hits=found.results
        )

    async def session(self, session_id: str) -> SessionView:
        session = await self.ns.sessions.get(session_id)
        observations = await self.ns.sessions.observations(session_id)
        memories = await self.ns.memories.drawn_from([o.id for o in observations])
        return SessionView(
            namespace=self.namespace,
            session=session,
            observations=observations,
            memories=memories,
        )

    async def memories(self, query: str | None = None) -> MemoriesView:
        latest = sorted(await self.ns.memories.latest(), key=lambda m: m.created_at)[::-1]
        if not query or not query.strip():
            return MemoriesView(namespace=self.namespace, memories=latest[:PAGE])
        found = await self.ns.memories.recall(query, limit=50, kinds=("memory",))
        return MemoriesView(
            namespace=self.namespace, memories=latest[:PAGE], query=query, hits=found.results
        )

    async def packet(self, packet_id: str, as_of: str | None = None) -> PacketView:
        """A packet with its pins pinned vs current, and the stale ones explained; with
        ``as_of``, its pins as they stood then (and nothing explained)."""
        packet = await self.handoffs.get(packet_id)
        if as_of is not None:
            numbers = await self.ns.as_of.numbers([pin.ref for pin in packet.pins], as_of)
            now = await self._current_versions([pin.ref for pin in packet.pins])
            pins = [
                PinView(
                    ref=pin.ref,
                    pinned_version=pin.version,
                    current_version=then,
                    stale=then != pin.version,
                    contested=now[pin.ref].contested,
                )
                for pin, then in zip(packet.pins, numbers, strict=True)
            ]
            return PacketView(
                namespace=self.namespace, packet=packet, pins=pins, stale=[], as_of=as_of
            )
        current = await self._current_versions([pin.ref for pin in packet.pins])
        pins = [
            PinView(
                ref=pin.ref,
                pinned_version=pin.version,
                current_version=current[pin.ref].version,
                stale=current[pin.ref].version != pin.version,
                contested=current[pin.ref].contested,
            )
            for pin in packet.pins
        ]
        stale = await self.handoffs.stale_pins(packet) if any(pin.stale for pin in pins) else []
        return PacketView(namespace=self.namespace, packet=packet, pins=pins, stale=stale)

    async def record(self, ref: str, as_of: str | None = None) -> RecordView:
        """A record's versions with chain status, its outcomes, and confidence over time;
        with ``as_of``, also the version current then."""
        history = await self.ns.records.history(ref)
        outcomes = await self.ns.records.outcomes(ref)
        points: list[ConfidencePoint] = []
        for version in history.versions:
            moves = [entry for entry in outcomes if entry.version == version.version]
            start = moves[0].before if moves else version.confidence
            points.append(
                ConfidencePoint(
                    at=version.created_at,
                    version=version.version,
                    confidence=start,
                    cause=f"v{version.version} written",
                )
            )
            points += [
                ConfidencePoint(
                    at=entry.created_at,
                    version=entry.version,
                    confidence=entry.after,
                    cause=f"{entry.outcome} ({entry.outcome_ref})",
                )
                for entry in moves
            ]
        then = None if as_of is None else (await self.ns.as_of.read([ref], as_of))[0]
        return RecordView(
            namespace=self.namespace,
            history=history,
            outcomes=outcomes,
            confidence=points,
            as_of=as_of,
            then=then,
        )

    async def failed(self) -> FailedView:
        """Dead letters: failed and expired packets, newest first."""
        summaries = await self.handoffs.agents()
        letters: list[DeadLetter] = []
        for summary in summaries:
            pipe = self.redis.pipeline(transaction=False)
            inbox = self.keys.inbox(summary.agent)
            pipe.zrevrange(inbox.failed, 0, PAGE - 1)
            pipe.zrevrange(inbox.expired, 0, PAGE - 1)
            failed_ids, expired_ids = await pipe.execute()
            ids = [raw.decode() for raw in failed_ids + expired_ids]
            for packet in await self._packets(ids):
                reason = packet.error or (
                    "expired before anyone claimed it" if packet.state == "expired" else "failed"
                )
                letters.append(DeadLetter(packet=packet, reason=reason))
        letters.sort(key=lambda letter: letter.packet.updated_at, reverse=True)
        return FailedView(namespace=self.namespace, packets=letters[:PAGE])

    async def webhooks(self) -> WebhooksView:
        """The webhooks of the namespace's agents, with their newest deliveries (an agent
        whose webhook was removed, with its log)."""
        found = [await self.ns.notices.webhook(s.agent) for s in await self.handoffs.agents()]
        return WebhooksView(
            namespace=self.namespace,
            webhooks=[hook for hook in found if hook.url or hook.deliveries],
        )

    async def activity(self, limit: int = 50) -> ActivityView:
        return ActivityView(namespace=self.namespace, events=await self.ns.activity.recent(limit))
