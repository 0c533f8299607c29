"""What the dashboard shows, computed from the store. The JSON endpoints return these
views and the HTML pages are rendered from the very same objects."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import msgspec

from baton.server.models import (
    AgentSummary,
    Event,
    History,
    OutcomeEntry,
    Packet,
    StalePin,
)
from baton.server.records import NamespaceWithRecords

if TYPE_CHECKING:
    from baton.server.handoffs import HandoffStore

PAGE = 100


class PendingPacket(msgspec.Struct, kw_only=True):
    """A queued or claimed packet with its staleness computed now."""

    packet: Packet
    age_seconds: float
    stale: list[StalePin]
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


class PinView(msgspec.Struct, kw_only=True):
    ref: str
    pinned_version: int
    current_version: int | None
    stale: bool


class PacketView(msgspec.Struct, kw_only=True):
    namespace: str
    packet: Packet
    pins: list[PinView]


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


class DeadLetter(msgspec.Struct, kw_only=True):
    packet: Packet
    reason: str


class FailedView(msgspec.Struct, kw_only=True):
    namespace: str
    packets: list[DeadLetter]


class ActivityView(msgspec.Struct, kw_only=True):
    namespace: str
    events: list[Event]


def _seconds_until(stamp: str | None, now: float) -> float | None:
    if stamp is None:
        return None
    return round(datetime.fromisoformat(stamp).timestamp() - now, 1)


class DashboardParts(NamespaceWithRecords, Protocol):
    """What the dashboard reads: the namespace's parts, records and packets."""

    @property
    def handoffs(self) -> HandoffStore: ...


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

    async def _current_versions(self, refs: list[str]) -> dict[str, int | None]:
        unique = sorted(set(refs))
        pipe = self.redis.pipeline(transaction=False)
        for ref in unique:
            pipe.hget(self.keys.head(ref), "version")
        return {
            ref: None if version is None else int(version)
            for ref, version in zip(unique, await pipe.execute(), strict=True)
        }

    async def pending(self) -> PendingView:
        """Every agent's held, queued and claimed packets, oldest first, stale pins flagged
        live."""
        summaries = await self.handoffs.agents()
        busy = [s for s in summaries if s.queued or s.claimed or s.held]
        pipe = self.redis.pipeline(transaction=False)
        for summary in busy:
            pipe.zrange(self.keys.held(summary.agent), 0, PAGE - 1)
            pipe.zrange(self.keys.queued(summary.agent), 0, PAGE - 1)
            pipe.zrange(self.keys.claimed(summary.agent), 0, PAGE - 1)
        replies = await pipe.execute()
        by_agent: dict[str, list[Packet]] = {}
        for index, summary in enumerate(busy):
            ids = [raw.decode() for part in replies[3 * index : 3 * index + 3] for raw in part]
            by_agent[summary.agent] = await self._packets(ids)
        current = await self._current_versions(
            [pin.ref for packets in by_agent.values() for p in packets for pin in p.pins]
        )
        now = time.time()
        queues = []
        for summary in busy:
            pending = []
            for packet in sorted(by_agent[summary.agent], key=lambda p: p.created_at):
                stale = [
                    StalePin(
                        ref=pin.ref,
                        pinned_version=pin.version,
                        current_version=current[pin.ref] or 0,
                    )
                    for pin in packet.pins
                    if current[pin.ref] != pin.version
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
            queued=sum(s.queued for s in summaries),
            claimed=sum(s.claimed for s in summaries),
            failed=sum(s.failed for s in summaries),
            agents=queues,
        )

    async def packet(self, packet_id: str) -> PacketView:
        packet = await self.handoffs.get(packet_id)
        current = await self._current_versions([pin.ref for pin in packet.pins])
        pins = [
            PinView(
                ref=pin.ref,
                pinned_version=pin.version,
                current_version=current[pin.ref],
                stale=current[pin.ref] != pin.version,
            )
            for pin in packet.pins
        ]
        return PacketView(namespace=self.namespace, packet=packet, pins=pins)

    async def record(self, ref: str) -> RecordView:
        """A record's versions with chain status, its outcomes, and confidence over time."""
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
        return RecordView(
            namespace=self.namespace, history=history, outcomes=outcomes, confidence=points
        )

    async def failed(self) -> FailedView:
        """Dead letters: failed and expired packets, newest first."""
        summaries = await self.handoffs.agents()
        letters: list[DeadLetter] = []
        for summary in summaries:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrevrange(self.keys.failed(summary.agent), 0, PAGE - 1)
            pipe.zrevrange(self.keys.expired(summary.agent), 0, PAGE - 1)
            failed_ids, expired_ids = await pipe.execute()
            ids = [raw.decode() for raw in failed_ids + expired_ids]
            for packet in await self._packets(ids):
                reason = packet.error or (
                    "expired before anyone claimed it" if packet.state == "expired" else "failed"
                )
                letters.append(DeadLetter(packet=packet, reason=reason))
        letters.sort(key=lambda letter: letter.packet.updated_at, reverse=True)
        return FailedView(namespace=self.namespace, packets=letters[:PAGE])

    async def activity(self, limit: int = 50) -> ActivityView:
        return ActivityView(namespace=self.namespace, events=await self.ns.activity.recent(limit))
