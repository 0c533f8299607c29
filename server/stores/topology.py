"""Where a namespace's keys live, as two backends behind one interface (as Litestar has its
two channel backends): :class:`OneRedis` and :class:`Cluster`.

A store writes each change once, in the terms of :class:`Topology`; the topology decides how
it reaches Redis. On one Redis every key of a namespace is on one server: a write, a
handoff and what follows them are each one script call (one round trip), and a batch is one
pipeline (or MULTI/EXEC). On a cluster a script touches one hash slot, so a change goes in
steps, each safe if the process dies after it: the entries that find a thing (listing,
inboxes) before the thing, what follows it (events, session touches, search) after it. Every
script is given every key it touches in either (``BATON_LUA_KEY_CHECK``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError
from redis.typing import EncodableT

from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, describe
from baton.server.model.keys import NAMESPACES, pinned_member
from baton.server.model.models import Contest, Pin
from baton.server.retrieval.search import IndexCall
from baton.server.runtime import codec
from baton.server.runtime.batch import Batch, PipelineBatch, StagedBatch
from baton.server.stores import token_bytes
from baton.server.stores.activity import event_args
from baton.server.stores.changes import (
    MAX_ID_ATTEMPTS,
    Command,
    NewPacket,
    Seen,
    VersionWrite,
    Wanted,
    Written,
    new_packet_id,
    pin_refused,
)
from baton.server.stores.store_base import NamespaceParts, Topology

log = structlog.get_logger("baton.topology")


class OneRedis:
    """One Redis server (with its replicas): every key of a namespace on one server."""

    transactions = True

    def batch(self, redis: Redis, *, transaction: bool = False) -> Batch:
        return PipelineBatch(redis, transaction=transaction)

    async def write_versions(
        self, ns: NamespaceParts, writes: builtins.list[VersionWrite], then: builtins.list[Command]
    ) -> Written:
        """``remember.lua``: for each write the listing entries, the version and what follows
        it (session touch, event, search document), then ``then``, in one call: all of it,
        or on a refusal nothing. Each write is counted against its token
        (:func:`token_bytes.charges`) as the last of ``then``."""
        laid_out = [self._write_layout(ns, write) for write in writes]
        keys = [key for write_keys, _ in laid_out for key in write_keys]
        args = [arg for _, write_args in laid_out for arg in write_args]
        for command in [*then, *token_bytes.charges(writes)]:
            keys.append(command.key)
            args += [1 + len(command.args), command.name, *command.args]
        counts = [len(part) for part, _ in laid_out] + [len(part) for _, part in laid_out]
        reply = await ns.scripts.remember(keys=keys, args=[len(writes), *counts, *args])
        if reply[0] == 1:
            failure = codec.text(reply[3]) if len(reply) > 3 else None
            contests = [codec.contest(*contest) for contest in reply[2]]
            return Written([int(v) for v in reply[1]], failure=failure, contests=contests)
        return Written([], int(reply[1]) - 1, [reply[0], *reply[2:]])

    def _write_layout(
        self, ns: NamespaceParts, write: VersionWrite
    ) -> tuple[builtins.list[str], builtins.list[EncodableT]]:
        """One write's keys and args, as ``remember.lua`` takes them."""
        keys = ns.keys
        follow_keys = [keys.refs, keys.agents, keys.events]
        follow_keys += ns.search.document_keys
        follow_keys += [keys.tag(tag) for tag in write.tags]
        if write.session is not None:
            follow_keys += [keys.session(write.session), keys.session_touched(write.session)]
            follow_keys += [keys.sessions, keys.active_sessions, NAMESPACES]
            follow_keys.append(keys.session_seen(write.session))
        event = event_args(
            "remember", write.agent, f"{write.agent} wrote {write.ref}", ref=write.ref
        )
        follow_args: builtins.list[EncodableT] = [write.ref, len(write.tags), ns.name, write.now_us]
        follow_args += [len(event), *event]
        if write.index is None:
            follow_args.append("")
        else:
            follow_keys += ns.search.posting_keys(write.index)
            follow_args += write.index.args
        return [*write.keys, *follow_keys], [*write.args, *follow_args]

    async def read_version(
        self, ns: NamespaceParts, keys: list[str], args: list[EncodableT], seen: Seen | None
    ) -> tuple[list[Any], bool]:
        """``recall.lua``; with ``seen``, ``recall_seen.lua``: the read and the session's
        touch of it in one call."""
        if seen is None:
            return await ns.scripts.recall(keys=keys, args=args), False
        touch_keys = [ns.keys.session(seen.session), ns.keys.session_touched(seen.session)]
        touch_keys += [ns.keys.sessions, ns.keys.active_sessions, NAMESPACES]
        touch_keys.append(ns.keys.session_seen(seen.session))
        touch_args: builtins.list[EncodableT] = [seen.ref, seen.session, seen.agent, utc_now()]
        touch_args += [seen.now_us, ns.name]
        reply = await ns.scripts.recall_seen(keys=[*keys, *touch_keys], args=[*args, *touch_args])
        return reply, True

    async def forget_versions(
        self,
        ns: NamespaceParts,
        keys: builtins.list[str],
        args: builtins.list[EncodableT],
        removal: IndexCall,
        then: Sequence[Command],
    ) -> builtins.list[Any]:
        """``forget_record.lua`` with the whole change: the tombstones, the freed bytes
        counted, the search document removed and ``then``, in one call."""
        keys = [*keys, *ns.search.keys_of(removal), *(command.key for command in then)]
        args = [*args, len(removal.args), *removal.args]
        for command in then:
            args += [1 + len(command.args), command.name, *command.args]
        reply: builtins.list[Any] = await ns.scripts.forget_record(keys=keys, args=args)
        return reply

    async def create_packet(
        self, ns: NamespaceParts, new: NewPacket, wanted: Wanted | None
    ) -> tuple[str, builtins.list[Pin]]:
        """``hand_off.lua``: the pins resolved, a free id taken, the inbox's registration,
        the packet and its event, in one call."""
        keys = ns.keys
        if wanted is None:  # the session's touched records, at the versions it saw
            pin_keys = [] if new.session is None else [keys.session_touched(new.session)]
            pin_args: builtins.list[EncodableT] = [-1]
            refs: builtins.list[str] = []
        else:
            pin_keys = [keys.head(ref) for ref, _ in wanted]
            pin_args = [len(wanted), *("" if version is None else version for _, version in wanted)]
            refs = [ref for ref, _ in wanted]
        for _ in range(MAX_ID_ATTEMPTS):
            packet_id = new_packet_id()
            script_keys, args, fields = new.script_call(keys, packet_id, None)
            event = event_args("handoff", new.from_agent, new.text(packet_id), packet=packet_id)
            script_keys += [
                NAMESPACES,
                keys.inboxes,
                keys.events,
                keys.handoff_inbox,
                keys.handoffs,
                keys.pinned,
            ]
            script_keys += pin_keys
            args += [ns.name, new.to_agent, *pin_args, len(event), *event]
            args += [codec.pack(refs), *fields]
            status, *details = await ns.scripts.hand_off(keys=script_keys, args=args)
            if status == b"taken":
                continue
            if status == b"refused":
                assert wanted is not None
                index, current = details
                raise pin_refused(wanted, int(index), int(current) if current else None)
            pins, *failed = details
            if failed:  # the event: the packet itself is safe
                log.warning(
                    "a handoff's follow-ups failed", packet=packet_id, error=codec.text(failed[0])
                )
            resolved = [
                Pin(ref=ref.decode(), version=int(version))
                for ref, version in zip(pins[::2], pins[1::2], strict=True)
            ]
            return packet_id, resolved
        raise RuntimeError("could not find a free packet id")  # 2^32 ids: practically never


class Cluster:
    """A Redis Cluster: a namespace's keys spread over hash slots; a script touches one."""

    transactions = False

    def batch(self, redis: Redis, *, transaction: bool = False) -> Batch:
        if transaction:
            raise ValueError("a Redis Cluster has no MULTI/EXEC across a namespace's keys")
        return StagedBatch(redis)

    async def write_versions(
        self, ns: NamespaceParts, writes: builtins.list[VersionWrite], then: builtins.list[Command]
    ) -> Written:
        """Each write in turn (:meth:`_write` then :meth:`_after_write`), then ``then`` in
        one pipeline: each record is in a slot of its own, so a refusal leaves the writes
        before it written, and a crash in between leaves the writes made so far."""
        versions: builtins.list[int] = []
        contests: builtins.list[Contest | None] = []
        failure = None
        for at, write in enumerate(writes):
            reply = await self._write(ns, write)
            if reply[0] == 0 and codec.text(reply[2]) == write.hash:
                # our script ran, its reply lost (the client re-sent it): its contest unknown
                reply = [1, reply[1], [None, None]]
            if reply[0] != 1:
                return Written(versions, at, reply, contests=contests)
            versions.append(int(reply[1]))
            contests.append(codec.contest(*reply[2]))
            failure = await self._after_write(ns, write, versions[-1]) or failure
        if then:
            batch = self.batch(ns.redis)
            for command in then:
                batch.pipe.execute_command(command.name, command.key, *command.args)
            await batch.execute()
        return Written(versions, failure=failure, contests=contests)

    async def _write(self, ns: NamespaceParts, write: VersionWrite) -> builtins.list[Any]:
        """The listing entries (in other slots) first, then ``append_version.lua``. Listing
        first: a crash in between leaves an entry that readers skip, never a record that
        listing cannot find. The version the session last saw is read first: the session's
        touched hash is in another slot."""
        keys, args = ns.keys, write.args
        if write.saw == "session" and write.session is not None:
            seen = await ns.redis.hget(keys.session_touched(write.session), write.ref)
            args = [*args[:10], codec.text(seen) or "", *args[11:]]
        batch = self.batch(ns.redis)
        batch.pipe.zadd(keys.refs, {write.ref: 0})
        batch.pipe.sadd(keys.agents, write.agent)
        for tag in write.tags:
            batch.pipe.sadd(keys.tag(tag), write.ref)
        batch.script(ns.scripts.append_version, write.keys, args)
        reply: list[Any] = (await batch.execute())[-1]
        return reply

    async def read_version(
        self, ns: NamespaceParts, keys: list[str], args: list[EncodableT], seen: Seen | None
    ) -> tuple[list[Any], bool]:
        """``recall.lua`` alone: the session's touch is in other slots (the store makes it)."""
        return await ns.scripts.recall(keys=keys, args=args), False

    async def _after_write(
        self, ns: NamespaceParts, write: VersionWrite, version: int
    ) -> str | None:
        """The session's touched set and the activity event, then the search document; the
        first that failed."""
        batch = self.batch(ns.redis)
        batch.pipe.hincrby(ns.keys.search_stats, "bytes", write.value_bytes)
        for command in token_bytes.charges([write]):
            batch.pipe.execute_command(command.name, command.key, *command.args)
        if write.session is not None:
            ns.activity.queue_touch(batch, write.session, write.agent, {write.ref: version})
        text = f"{write.agent} wrote {write.ref}"
        ns.activity.event(batch, "remember", write.agent, text, ref=write.ref, version=version)
        replies = await batch.execute(raise_on_error=False)
        failed = [reply for reply in replies if isinstance(reply, Exception)]
        if write.index is not None:
            try:
                await ns.search.run(write.index)
            except RedisError as error:
                failed.append(error)
        return describe(failed[0]) if failed else None

    async def forget_versions(
        self,
        ns: NamespaceParts,
        keys: builtins.list[str],
        args: builtins.list[EncodableT],
        removal: IndexCall,
        then: Sequence[Command],
    ) -> builtins.list[Any]:
        """The script (the record's slot), then in the round trips after it the count and
        the search document (the index's slot), then ``then``."""
        reply: builtins.list[Any] = await ns.scripts.forget_record(keys=keys, args=args)
        if reply[0] != 1:
            return reply
        await ns.redis.hincrby(ns.keys.search_stats, "bytes", -int(reply[1]))
        await ns.search.run(removal)
        batch = self.batch(ns.redis)
        for command in then:
            batch.pipe.execute_command(command.name, command.key, *command.args)
        return [1, reply[1], await batch.execute()]

    async def create_packet(
        self, ns: NamespaceParts, new: NewPacket, wanted: Wanted | None
    ) -> tuple[str, builtins.list[Pin]]:
        """The id taken with the indexes that find the packet and the pins read (one round
        trip), then the inbox's registration, the packet (``create_packet.lua``) and its
        event."""
        packet_id, pins = await self._new_id_and_pins(ns, new, wanted)
        keys, args, fields = new.script_call(ns.keys, packet_id, pins)
        batch = self.batch(ns.redis)
        batch.pipe.sadd(NAMESPACES, ns.name)
        batch.pipe.sadd(ns.keys.inboxes, new.to_agent)
        found = {pinned_member(pin.ref, packet_id): 0 for pin in pins}
        if found:  # the pins' index before the packet: it may name one too many, never too few
            batch.pipe.zadd(ns.keys.pinned, found)
        batch.script(ns.scripts.create_packet, keys, [*args, *fields])
        ns.activity.event(batch, "handoff", new.from_agent, new.text(packet_id), packet=packet_id)
        replies = await batch.execute(raise_on_error=False)
        for reply in replies[:-1]:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(replies[-1], Exception):  # the event: the packet itself is safe
            log.warning("handoff event not written", packet=packet_id, error=describe(replies[-1]))
        return packet_id, pins

    async def _new_id_and_pins(
        self, ns: NamespaceParts, new: NewPacket, wanted: Wanted | None
    ) -> tuple[str, builtins.list[Pin]]:
        """A free packet id, taken together with the indexes that find the packet (written
        before the packet itself, so a crash in between leaves nothing unfindable), and the
        pins resolved, in one round trip. Pins that do not resolve give the id back, so a
        refused packet leaves nothing behind."""
        keys = ns.keys
        for _ in range(MAX_ID_ATTEMPTS):
            packet_id = new_packet_id()
            pipe = ns.redis.pipeline(transaction=False)
            if wanted is not None:
                for ref, _ in wanted:
                    pipe.hget(keys.head(ref), "version")
            elif new.session is not None:
                pipe.hgetall(keys.session_touched(new.session))
            pipe.hsetnx(keys.handoff_inbox, packet_id, new.to_agent)
            pipe.zadd(keys.handoffs, {packet_id: new.created_us}, nx=True)  # a taken id: kept
            *reads, taken, _ = await pipe.execute()
            if taken:
                break
        else:
            raise RuntimeError("could not find a free packet id")  # 2^32 ids: practically never
        try:
            return packet_id, _pins_from(wanted, reads)
        except InvalidInput:
            pipe = ns.redis.pipeline(transaction=False)
            pipe.hdel(keys.handoff_inbox, packet_id)
            pipe.zrem(keys.handoffs, packet_id)
            await pipe.execute()
            raise


def _pins_from(wanted: Wanted | None, reads: builtins.list[Any]) -> builtins.list[Pin]:
    """The pins, from the heads' versions (or the session's touched hash) just read."""
    if wanted is None:
        touched = codec.hash_fields(reads[0]) if reads else {}
        return sorted(
            (Pin(ref=ref.decode(), version=int(version)) for ref, version in touched.items()),
            key=lambda pin: pin.ref,
        )
    resolved = []
    for index, ((ref, version), current) in enumerate(zip(wanted, reads, strict=True)):
        if current is None or (version is not None and version > int(current)):
            raise pin_refused(wanted, index, None if current is None else int(current))
        resolved.append(Pin(ref=ref, version=int(current) if version is None else version))
    return resolved


def topology_of(redis: Redis) -> Topology:
    """The topology a client talks to (``connection.async_redis`` makes a cluster client,
    typed as its ``Redis``, for a ``redis+cluster://`` URL)."""
    client: object = redis
    return Cluster() if isinstance(client, RedisCluster) else OneRedis()
