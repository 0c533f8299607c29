"""Handoff packets: written into the receiver's inbox, claimed by ``resume`` (pull) or by an
RQ job on the receiver's queue (push), settled by the claimant, swept when leases run out.

State machine::

    queued -> claimed -> done | failed
    claimed -> queued          (release, lease expiry, front position kept)
    queued -> expired          (expires_in passed before anyone claimed it)
    claimed -> failed          (max deliveries reached on lease expiry)

Every transition is one Lua script on the receiver's inbox slot and is appended to the
packet's log. The inbox is the single source of truth: an RQ job only *asks* to claim its
packet, so a packet claimed by ``resume`` is never also run by a worker, and vice versa.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import structlog

from baton.server.model.clock import iso, now, now_us
from baton.server.model.errors import (
    Forbidden,
    InvalidInput,
    NotFound,
    StateConflict,
    StoreUnavailable,
    describe,
)
from baton.server.model.keys import Inbox, job_id, pinned_member
from baton.server.model.models import (
    MAX_NOTE,
    PACKET_STATES,
    AgentSummary,
    Contest,
    HandoffInput,
    Packet,
    PacketPage,
    Pin,
    PinInput,
    RecordVersion,
    ResolvedPin,
    Resumed,
    StalePin,
    SweepReport,
)
from baton.server.model.validation import check_agent, check_ref, check_session_id
from baton.server.runtime import codec
from baton.server.runtime.batch import Batch
from baton.server.stores.changes import NewPacket
from baton.server.stores.records import BATCH, NamespaceWithRecords
from baton.server.stores.store_base import NamespaceStore

log = structlog.get_logger("baton.handoffs")
# How many times a resume tries the next oldest packet when others claim first.
MAX_CLAIM_ATTEMPTS = 50
MOVES_SHOWN = 5  # versions and outcomes a stale pin shows (it counts every version)
# A queued packet whose RQ job is missing this long after its last transition is repaired.
REPAIR_AFTER_SECONDS = 30


class Pinned(NamedTuple):
    """Of a pin's record and pinned version, what a resolved pin shows."""

    current_version: int
    value: Any
    author: str
    confidence: float
    created_at: str
    contested: Contest | None

    @classmethod
    def of(cls, record: RecordVersion | None) -> Pinned | None:
        if record is None:
            return None
        return cls(
            record.current_version,
            record.value,
            record.author,
            record.confidence,
            record.created_at,
            record.contested,
        )


def _resolved(pins: list[Pin], found: list[Pinned | None]) -> list[ResolvedPin]:
    """Each pin's pinned version, flagged stale when the record has moved on (computed at
    every claim, never cached)."""
    resolved = []
    for pin, record in zip(pins, found, strict=True):
        if record is None:
            raise NotFound(f"pinned record {pin.ref} v{pin.version} no longer exists")
        resolved.append(
            ResolvedPin(
                ref=pin.ref,
                version=pin.version,
                current_version=record.current_version,
                stale=record.current_version != pin.version,
                value=record.value,
                author=record.author,
                confidence=record.confidence,
                created_at=record.created_at,
                contested=record.contested,
            )
        )
    return resolved


def _within(items: Sequence[str], field: str, max_items: int, max_length: int) -> list[str]:
    """``items`` within the settings' count and length limits."""
    if len(items) > max_items:
        raise InvalidInput(field, f"has {len(items)} items; the limit is {max_items}")
    for index, item in enumerate(items):
        if len(item) > max_length:
            raise InvalidInput(f"{field}[{index}]", f"must be 1-{max_length} characters")
    return list(items)


class HandoffStore(NamespaceStore):
    """Handoff packets of one namespace."""

    ns: NamespaceWithRecords

    def __init__(self, namespace: NamespaceWithRecords) -> None:
        super().__init__(namespace)
        self.policy = namespace.policy

    # -- writing a packet ---------------------------------------------------------------------

    async def handoff(
        self, given: HandoffInput, *, from_agent: str, session: str | None = None
    ) -> Packet:
        """Put a packet in ``given.to``'s inbox and on its RQ queue, from ``from_agent``.

        A pin without a version means the current version now. With ``pins`` omitted, every
        record ``session`` touched is pinned at the version that session last saw (no
        session: no pins). With ``deliver="session_end"`` the packet is held (pins resolved
        now) and becomes claimable only when ``session`` ends (:meth:`send_held`), so the
        sender can finish its work before anyone acts on it.
        """
        summary, limits = given.summary, self.limits
        if len(summary) > limits.max_summary_length:
            raise InvalidInput(
                "summary", f"must be text of at most {limits.max_summary_length} characters"
            )
        await self.ns.admit()
        steps = _within(given.next, "next", limits.max_steps, limits.max_step_length)
        questions = _within(given.open, "open", limits.max_steps, limits.max_step_length)
        if given.deliver == "session_end":
            if session is None:
                raise InvalidInput(
                    "deliver", "session_end needs a session: start one and send X-Baton-Session"
                )
            if await self.redis.hget(self.keys.session(session), "status") != b"active":
                raise InvalidInput("deliver", f"session_end: session {session} is not active")
        wanted = self._check_pins(given.pins)
        created_us, created_at = now()
        expires_in = given.expires_in
        new = NewPacket(
            from_agent=from_agent,
            to_agent=given.to,
            summary=summary,
            steps=steps,
            questions=questions,
            note=given.note,
            session=session,
            created_us=created_us,
            created_at=created_at,
            expires_us=None if expires_in is None else created_us + int(expires_in * 1_000_000),
            held=given.deliver == "session_end",
        )
        packet_id, resolved = await self.ns.topology.create_packet(self.ns, new, wanted)
        # If the process dies here, the packet is queued without an RQ job: pull still sees
        # it, and the periodic sweep enqueues the missing job (see sweep()).
        if not new.held:
            await self._dispatch(given.to, packet_id, 0)
        return new.packet(packet_id, resolved)

    async def send_held(self, session: str | None = None) -> builtins.list[str]:
        """Make claimable every held packet whose sender's session is no longer active (only
        ``session``'s when given): each goes to its receiver's queue at the time it was handed
        off, and gets its RQ job. Called when a session ends, and by the sweep (for sessions
        abandoned, or ended by a process that died before sending). Idempotent."""
        receivers = sorted(codec.text(raw) for raw in await self.redis.smembers(self.keys.inboxes))
        pipe = self.redis.pipeline(transaction=False)
        for name in receivers:
            pipe.zrange(self.keys.inbox(name).held, 0, -1)
        held = [
            (name, codec.text(raw))
            for name, ids in zip(receivers, await pipe.execute(), strict=True)
            for raw in ids
        ]
        if not held:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for name, packet_id in held:
            pipe.hmget(self.keys.inbox(name).packet(packet_id), "session", "from")
        owners = await pipe.execute()
        sessions = {codec.text(raw[0]) for raw in owners if raw[0]}
        if session is not None:
            sessions &= {session}
        pipe = self.redis.pipeline(transaction=False)
        for each in sorted(sessions):
            pipe.hget(self.keys.session(each), "status")
        active = {
            each
            for each, status in zip(sorted(sessions), await pipe.execute(), strict=True)
            if status == b"active"
        }
        sent: list[str] = []
        for (name, packet_id), (owner, sender) in zip(held, owners, strict=True):
            owner_session = codec.text(owner) if owner else ""
            if owner_session not in sessions or owner_session in active:
                continue
            inbox = self.keys.inbox(name)
            keys = [inbox.packet(packet_id), inbox.log(packet_id), inbox.held, inbox.queued]
            sender_name = codec.text(sender) if sender else ""
            if await self.scripts.send_held(keys=keys, args=[packet_id, now()[1], sender_name]):
                await self.activity.emit(
                    "queued",
                    sender_name or "baton",
                    f"{packet_id}: {sender_name}'s session ended, it is claimable now",
                    packet=packet_id,
                )
                await self._dispatch(name, packet_id, 0)
                sent.append(packet_id)
        return sent

    def _check_pins(
        self, pins: Sequence[PinInput] | None
    ) -> builtins.list[tuple[str, int | None]] | None:
        """The pins asked for as (ref, version or None for the current one), within the
        settings' limits; None when omitted (the session's touched records are pinned)."""
        if pins is None:
            return None
        if len(pins) > self.limits.max_pins:
            raise InvalidInput("pins", f"has {len(pins)} pins; the limit is {self.limits.max_pins}")
        return [
            (check_ref(pin.ref, self.limits.max_ref_length, f"pins[{index}].ref"), pin.version)
            for index, pin in enumerate(pins)
        ]

    async def _dispatch(self, agent: str, packet_id: str, seq: int) -> None:
        """Enqueue the packet's job. The packet is already safe in its inbox, so a failure
        here is logged, not raised: the sweep enqueues missing jobs."""
        dispatcher = self.ns.dispatcher
        if dispatcher is None:
            return
        try:
            await dispatcher.enqueue(self.namespace, agent, packet_id, seq)
        except Exception as error:
            log.warning(
                "enqueue failed; the sweep will retry", packet=packet_id, error=describe(error)
            )

    # -- claiming -----------------------------------------------------------------------------

    async def resume(
        self, agent: str, *, lease_seconds: float | None = None, session: str | None = None
    ) -> Resumed:
        """Claim ``agent``'s oldest queued packet (pull), with its pins resolved."""
        agent = check_agent(agent)
        resumed = await self._claim(agent, "", agent, lease_seconds, "resume", job="")
        if resumed.packet is not None and session is not None:
            seen = {pin.ref: pin.version for pin in resumed.packet.pins}
            await self.activity.touch(check_session_id(session), agent, seen)
        return resumed

    async def renew_lease(self, agent: str, packet_id: str, job: str, lease_seconds: float) -> bool:
        """Extend the lease of a packet ``job`` holds for ``agent`` (a handler's heartbeat);
        False once the packet is no longer held by that job."""
        now_us, _ = now()
        lease_us = now_us + int(lease_seconds * 1_000_000)
        renewed = await self.scripts.renew_lease(
            keys=[self.keys.inbox(agent).packet(packet_id), self.keys.inbox(agent).claimed],
            args=[packet_id, agent, job, lease_us, iso(lease_us)],
        )
        return bool(renewed)

    async def claim_for_job(self, agent: str, packet_id: str, job: str) -> Resumed:
        """Claim one packet for the RQ job delivering it (push). ``packet`` is None when the
        packet is no longer queued: someone else has it, or it is settled or expired."""
        return await self._claim(agent, packet_id, agent, None, "worker", job=job)

    async def _claim(
        self,
        agent: str,
        packet_id: str,
        claimant: str,
        lease_seconds: float | None,
        reason: str,
        *,
        job: str,
    ) -> Resumed:
        """Claim a packet (the oldest with no ``packet_id``) and resolve its pins; a pull
        (``reason`` "resume") also drops the packet's RQ job."""
        lease = self.policy.lease_seconds if lease_seconds is None else lease_seconds
        now_us, now_iso = now()
        lease_us = now_us + int(lease * 1_000_000)
        dispatcher = self.ns.dispatcher
        pulled = reason == "resume" and dispatcher is not None

        claimed = None
        if packet_id:
            claimed = await self._claim_one(
                agent, packet_id, now_us, now_iso, lease_us, claimant, reason, job
            )
        else:
            # The oldest queued packet; one another claimant takes first (or that expires on
            # the way) gives way to the next.
            for _ in range(MAX_CLAIM_ATTEMPTS):
                oldest = codec.members(await self.redis.zrange(self.keys.inbox(agent).queued, 0, 0))
                if not oldest:
                    break
                claimed = await self._claim_one(
                    agent, oldest[0].decode(), now_us, now_iso, lease_us, claimant, reason, job
                )
                if not isinstance(claimed, str):
                    break
            else:
                raise StoreUnavailable(f"too many concurrent claims on {agent}'s inbox, try again")
        if claimed is None or isinstance(claimed, str):
            message = (
                f"no packets waiting for {agent}"
                if not packet_id
                else f"packet {packet_id} is {claimed or 'unknown'}, not queued"
            )
            return Resumed(
                agent=agent, packet=None, pins=[], stale=[], lease_until=None, message=message
            )
        packet = codec.packet(claimed)
        job_seq = int(claimed.get(b"job_seq", 0))
        wanted = [(pin.ref, pin.version) for pin in packet.pins]
        text = f"{claimant} claimed {packet.id} ({reason})"
        dropped = False

        def follow_ups(after: Batch) -> None:
            """The claim's event and, for a pull, dropping the packet's RQ job (it would only
            find its packet claimed)."""
            nonlocal dropped
            self.activity.event(after, "claim", claimant, text, packet=packet.id)
            if pulled:
                assert dispatcher is not None
                dropped = dispatcher.queue_drop(after, self.namespace, agent, packet.id, job_seq)

        try:
            # The pins are read right after the claim, with its follow-ups.
            versions = await self.ns.records.read_versions(wanted, follow_ups)
            found = [Pinned.of(version) for version in versions]
        finally:
            if pulled and not dropped:  # the job goes, even if a read failed
                assert dispatcher is not None
                dispatcher.drop_job_later(self.namespace, agent, packet.id, job_seq)
        pins = _resolved(packet.pins, found)
        return Resumed(
            agent=agent,
            packet=packet,
            pins=pins,
            stale=await self.explain([pin for pin in pins if pin.stale], packet.created_at),
            lease_until=packet.lease_until,
            message=f"packet {packet.id} from {packet.from_agent}: {packet.summary}",
        )

    async def explain(self, stale: list[ResolvedPin], since: str) -> list[StalePin]:
        """Each pin of ``stale`` (pins whose record moved on) explained (see
        :class:`StalePin`) as of the current version its claim read: what changed, who
        changed it, the outcomes recorded since ``since`` (the packet's creation); bounded
        to the last :data:`MOVES_SHOWN` versions and outcomes however often the record
        moved. One round trip for all of them."""
        if not stale:
            return []
        found = await self.ns.records.moves(
            [(pin.ref, pin.version, pin.current_version) for pin in stale], MOVES_SHOWN
        )
        return [
            StalePin(
                ref=pin.ref,
                pinned_version=pin.version,
                current_version=pin.current_version,
                moves=pin.current_version - pin.version,
                pinned_value=pin.value,
                current_value=moved.value,
                patch=await self.ns.search.analyzer.patch(pin.value, moved.value),
                versions=moved.versions,
                outcomes=[entry for entry in moved.outcomes if entry.created_at > since],
                pinned_confidence=pin.confidence,
                current_confidence=moved.confidence,
            )
            for pin, moved in zip(stale, found, strict=True)
        ]

    async def stale_pins(self, packet: Packet) -> list[StalePin]:
        """``packet``'s pins that moved on since it was made, explained (as ``resume``
        shows them; for the dashboard); a pin whose version is gone is left out."""
        versions = await self.ns.records.read_versions(
            [(pin.ref, pin.version) for pin in packet.pins]
        )
        found = [(pin, Pinned.of(v)) for pin, v in zip(packet.pins, versions, strict=True) if v]
        pins = _resolved([pin for pin, _ in found], [pinned for _, pinned in found])
        return await self.explain([pin for pin in pins if pin.stale], packet.created_at)

    async def _claim_one(
        self,
        agent: str,
        packet_id: str,
        now_us: int,
        now_iso: str,
        lease_us: int,
        claimant: str,
        reason: str,
        job: str,
    ) -> dict[bytes, bytes] | str:
        """Claim packet ``packet_id`` of ``agent``'s inbox: its fields, or the state it is in
        instead of queued ("" for an unknown packet)."""
        inbox = self.keys.inbox(agent)
        reply = await self.scripts.claim_packet(
            keys=[
                inbox.queued,
                inbox.claimed,
                inbox.expiring,
                inbox.expired,
                inbox.packet(packet_id),
                inbox.log(packet_id),
            ],
            args=[packet_id, now_us, now_iso, lease_us, iso(lease_us), claimant, reason, job],
        )
        if reply[0] == 0:
            return str(codec.text(reply[1]))
        return codec.pairs(reply[1])

    # -- settling -----------------------------------------------------------------------------

    async def complete(self, packet_id: str, agent: str, reason: str = "completed") -> Packet:
        return await self._settle(packet_id, agent, "claimed", "done", reason)

    async def release(self, packet_id: str, agent: str, reason: str = "released") -> Packet:
        """Give a claimed packet back: it is queued again at its old position."""
        return await self._settle(packet_id, agent, "claimed", "queued", reason)

    async def fail(self, packet_id: str, agent: str, error: str) -> Packet:
        if not error.strip():
            raise InvalidInput("error", "say why the packet failed")
        return await self._settle(packet_id, agent, "claimed", "failed", "failed", error=error)

    async def _settle(
        self,
        packet_id: str,
        agent: str,
        from_state: str,
        to_state: str,
        reason: str,
        error: str = "",
        *,
        dispatch: bool = True,
    ) -> Packet:
        to_agent = await self._inbox_of(packet_id)
        inbox = self.keys.inbox(to_agent)
        now_us, now_iso = now()
        reply = await self.scripts.settle_packet(
            keys=[
                inbox.packet(packet_id),
                inbox.queued,
                inbox.claimed,
                inbox.failed,
                inbox.expiring,
                inbox.expired,
                inbox.log(packet_id),
            ],
            args=[
                packet_id,
                from_state,
                to_state,
                agent,
                reason[:MAX_NOTE],
                now_iso,
                now_us,
                error[:MAX_NOTE],
            ],
        )
        status = reply[0]
        if status == -1:
            raise NotFound(f"no packet {packet_id}", packet=packet_id)
        if status == -2:
            raise Forbidden(
                f"packet {packet_id} is claimed by {reply[1].decode()}, not {agent}",
                packet=packet_id,
            )
        if status == 0:
            state = reply[1].decode()
            raise StateConflict(
                f"packet {packet_id} is {state}; only a {from_state} packet can become {to_state}",
                packet=packet_id,
                state=state,
            )
        if to_state == "queued" and dispatch:
            await self._dispatch(to_agent, packet_id, int(reply[2]))
        await self.activity.emit(
            to_state,
            agent,
            f"{agent}: {packet_id} {from_state} -> {to_state} ({error or reason})",
            packet=packet_id,
        )
        packet = await self.get(packet_id)
        members = [pinned_member(pin.ref, packet_id) for pin in packet.pins]
        if members and to_state in ("done", "failed"):  # its pins no longer tell anyone
            await self.redis.zrem(self.keys.pinned, *members)
        elif members and from_state in ("failed", "expired"):  # requeued: they do again
            await self.redis.zadd(self.keys.pinned, dict.fromkeys(members, 0))
        return packet

    async def requeue_dead_letter(self, packet_id: str, job: str) -> bool:
        """When RQ re-runs the job that failed ``packet_id`` (``rq requeue``, an operator
        retrying a dead letter the RQ way), put the packet back in its queue for that very
        job. False for any other job: a stale duplicate must not revive a packet."""
        to_agent = await self._inbox_of(packet_id)
        fields = await self.redis.hmget(
            self.keys.inbox(to_agent).packet(packet_id), "state", "job_seq"
        )
        if fields[0] != b"failed" or job != job_id(self.namespace, packet_id, int(fields[1] or 0)):
            return False
        await self._settle(
            packet_id, "rq", "failed", "queued", "requeued with rq requeue", dispatch=False
        )
        return True

    async def requeue(self, packet_id: str, agent: str) -> Packet:
        """Put a failed or expired packet back in its queue (an operator's action): a fresh
        start, with expiry and delivery count cleared."""
        packet = await self.get(packet_id, with_log=False)
        if packet.state not in ("failed", "expired"):
            raise StateConflict(
                f"packet {packet_id} is {packet.state}; only failed or expired packets can be "
                "requeued",
                packet=packet_id,
                state=packet.state,
            )
        return await self._settle(packet_id, agent, packet.state, "queued", f"requeued by {agent}")

    # -- reading ------------------------------------------------------------------------------

    async def _inbox_of(self, packet_id: str) -> str:
        if not isinstance(packet_id, str) or not packet_id.startswith("h_"):
            raise NotFound(f"no packet {packet_id}", packet=packet_id)
        to_agent = await self.redis.hget(self.keys.handoff_inbox, packet_id)
        if to_agent is None:
            raise NotFound(f"no packet {packet_id}", packet=packet_id)
        return codec.text(to_agent)

    async def get(self, packet_id: str, *, with_log: bool = True) -> Packet:
        to_agent = await self._inbox_of(packet_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.inbox(to_agent).packet(packet_id))
        pipe.lrange(self.keys.inbox(to_agent).log(packet_id), 0, -1)
        fields, log = await pipe.execute()
        if not fields:
            raise NotFound(f"no packet {packet_id}", packet=packet_id)
        packet = codec.packet(fields)
        if with_log:
            packet.log = codec.transitions(log)
        return packet

    async def get_many(self, packet_ids: Sequence[str]) -> dict[str, Packet]:
        """Packets by id, without their logs, in two round trips whatever their number;
        unknown ids are left out."""
        if not packet_ids:
            return {}
        agents = await self.redis.hmget(self.keys.handoff_inbox, list(packet_ids))
        known = [
            (pid, codec.text(agent)) for pid, agent in zip(packet_ids, agents, strict=True) if agent
        ]
        pipe = self.redis.pipeline(transaction=False)
        for packet_id, agent in known:
            pipe.hgetall(self.keys.inbox(agent).packet(packet_id))
        return {
            packet_id: codec.packet(fields)
            for (packet_id, _), fields in zip(known, await pipe.execute(), strict=True)
            if fields
        }

    async def list(
        self,
        *,
        status: str | None = None,
        to_agent: str | None = None,
        from_agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> PacketPage:
        """Packets newest first, filtered by state, receiver and sender."""
        if status is not None and status not in PACKET_STATES:
            raise InvalidInput("status", f"must be one of {', '.join(PACKET_STATES)}")
        if to_agent is not None:
            to_agent = check_agent(to_agent, field="to")
        if from_agent is not None:
            from_agent = check_agent(from_agent, field="from")
        self.limits.check_page(limit)
        index = self.keys.inbox(to_agent).all if to_agent else self.keys.handoffs
        top: str | int = "+inf"
        skip_until: str | None = None
        if cursor is not None:
            top_score, _, after_id = cursor.partition(":")
            if not top_score.isdigit() or not after_id:
                raise InvalidInput("cursor", "pass back a next_cursor from a previous page")
            top, skip_until = int(top_score), after_id

        packets: list[Packet] = []
        while True:
            batch = await self.redis.zrevrangebyscore(
                index, top, "-inf", start=0, num=BATCH + 1, withscores=True
            )
            entries = [(raw.decode(), int(score)) for raw, score in codec.scored(batch)]
            if skip_until is not None:
                entries = [
                    (pid, score) for pid, score in entries if score != top or pid < skip_until
                ]
            if not entries:
                return PacketPage(packets=packets, next_cursor=None)
            found = await self.get_many([packet_id for packet_id, _ in entries])
            for packet_id, score in entries:
                packet = found.get(packet_id)
                if (
                    packet is None
                    or (status and packet.state != status)
                    or (from_agent and packet.from_agent != from_agent)
                ):
                    continue
                packets.append(packet)
                if len(packets) == limit:
                    return PacketPage(packets=packets, next_cursor=f"{score}:{packet_id}")
            top, skip_until = entries[-1][1], entries[-1][0]

    async def counts(self) -> dict[str, int]:
        """Packets by state across every inbox (``done`` is what the others leave of all)."""
        receivers = sorted(codec.text(raw) for raw in await self.redis.smembers(self.keys.inboxes))
        pipe = self.redis.pipeline(transaction=False)
        for name in receivers:
            inbox = self.keys.inbox(name)
            for key in (*(inbox.of(state) for state in Inbox.STATES), inbox.all):
                pipe.zcard(key)
        replies = await pipe.execute()
        counts = dict.fromkeys(("held", "queued", "claimed", "done", "failed", "expired"), 0)
        width = len(Inbox.STATES) + 1
        for offset in range(0, len(replies), width):
            *by_state, every = replies[offset : offset + width]
            for state, count in zip(Inbox.STATES, by_state, strict=True):
                counts[state] += count
            counts["done"] += every - sum(by_state)
        return counts

    async def agents(self) -> builtins.list[AgentSummary]:
        """Every agent that has written or been handed a packet, with its inbox counts."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(self.keys.agents)
        pipe.smembers(self.keys.inboxes)
        writers, receivers = await pipe.execute()
        names = sorted({raw.decode() for raw in writers | receivers})
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            inbox = self.keys.inbox(name)
            pipe.zcard(inbox.queued)
            pipe.zcard(inbox.claimed)
            pipe.zcard(inbox.failed)
            pipe.zrange(inbox.queued, 0, 0, withscores=True)
            pipe.zcard(inbox.held)
        replies = await pipe.execute()
        moment = now_us()
        summaries = []
        for offset, name in enumerate(names):
            queued, claimed, failed, oldest, held = replies[5 * offset : 5 * offset + 5]
            summaries.append(
                AgentSummary(
                    agent=name,
                    queued=queued,
                    claimed=claimed,
                    failed=failed,
                    held=held,
                    oldest_queued_age_seconds=(
                        round((moment - oldest[0][1]) / 1e6, 3) if oldest else None
                    ),
                )
            )
        return summaries

    # -- maintenance --------------------------------------------------------------------------

    async def sweep(self) -> SweepReport:
        """Send held packets whose sender's session is over, expire leases and packets, and
        enqueue RQ jobs that went missing. Idempotent."""
        report = SweepReport(requeued=[], failed=[], expired=[], repaired=[])
        report.sent = await self.send_held()
        for raw in await self.redis.smembers(self.keys.inboxes):
            agent = codec.text(raw)
            now_us, now_iso = now()
            requeued, failed = await self._expire_leases(agent, now_us, now_iso)
            expired = await self._expire_packets(agent, now_us, now_iso)
            report.requeued += [item.decode() for item in requeued]
            report.failed += [item.decode() for item in failed]
            report.expired += [item.decode() for item in expired]
            for kind, ids, text in (
                ("queued", requeued, "lease ran out, queued again"),
                ("failed", failed, "failed: max deliveries"),
                ("expired", expired, "expired before anyone claimed it"),
            ):
                for raw_id in ids:
                    await self.activity.emit(
                        kind, "baton", f"{raw_id.decode()}: {text}", packet=raw_id.decode()
                    )
            for packet_id in requeued:
                seq = await self.redis.hget(
                    self.keys.inbox(agent).packet(packet_id.decode()), "job_seq"
                )
                await self._dispatch(agent, packet_id.decode(), int(seq or 0))
            report.repaired += await self._repair_jobs(agent, now_us)
        return report

    def _packets_keys(self, agent: str, ids: builtins.list[str]) -> builtins.list[str]:
        """Each packet's hash and log, in pairs (what the expiry scripts take)."""
        inbox = self.keys.inbox(agent)
        return [key for packet_id in ids for key in (inbox.packet(packet_id), inbox.log(packet_id))]

    async def _due(self, key: str, now_us: int) -> builtins.list[str]:
        """Up to ``BATCH`` ids of ``key`` (a sorted set by time) due by ``now_us``."""
        due = await self.redis.zrangebyscore(key, "-inf", now_us, start=0, num=BATCH)
        return [raw.decode() for raw in codec.members(due)]

    async def _expire_leases(
        self, agent: str, now_us: int, now_iso: str
    ) -> tuple[builtins.list[bytes], builtins.list[bytes]]:
        """Claims whose lease ran out: (queued again, failed for good)."""
        inbox = self.keys.inbox(agent)
        ids = await self._due(inbox.claimed, now_us)
        if not ids:
            return [], []
        requeued, failed = await self.scripts.expire_leases(
            keys=[
                inbox.claimed,
                inbox.queued,
                inbox.failed,
                inbox.expiring,
                *self._packets_keys(agent, ids),
            ],
            args=[now_us, now_iso, self.policy.max_deliveries, *ids],
        )
        return requeued, failed

    async def _expire_packets(self, agent: str, now_us: int, now_iso: str) -> builtins.list[bytes]:
        """Queued packets past their expiry, expired."""
        inbox = self.keys.inbox(agent)
        ids = await self._due(inbox.expiring, now_us)
        if not ids:
            return []
        expired: builtins.list[bytes] = await self.scripts.expire_packets(
            keys=[inbox.expiring, inbox.queued, inbox.expired, *self._packets_keys(agent, ids)],
            args=[now_us, now_iso, *ids],
        )
        return expired

    async def _repair_jobs(self, agent: str, now_us: int) -> builtins.list[str]:
        """Queued packets whose RQ job is missing (the writer died between the two writes)."""
        dispatcher = self.ns.dispatcher
        if dispatcher is None:
            return []
        settled_before = now_us - REPAIR_AFTER_SECONDS * 1_000_000
        ids = [
            raw.decode()
            for raw in codec.members(
                await self.redis.zrange(self.keys.inbox(agent).queued, 0, BATCH)
            )
        ]
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for packet_id in ids:
            pipe.hmget(self.keys.inbox(agent).packet(packet_id), "job_seq", "updated_at")
        candidates = [
            (packet_id, int(seq or 0))
            for packet_id, (seq, updated) in zip(ids, await pipe.execute(), strict=True)
            if updated is not None
            and datetime.fromisoformat(updated.decode()).timestamp() * 1e6 < settled_before
        ]
        if not candidates:
            return []
        missing = await dispatcher.missing(self.namespace, candidates)
        for index in missing:
            packet_id, seq = candidates[index]
            await self._dispatch(agent, packet_id, seq)
        return [candidates[index][0] for index in missing]
