"""The store as of a moment: the version of each record that was current at a time (the
newest written at or before it), with the confidence it had then, and those versions
listed and searched as they would have been.

Nothing is added to a write for this: a record's versions are numbered in the order they
were written and each holds its ``created_at``, so the version current at a time is found
by probing the version hashes, ``PROBES`` at a time (a record of 10,000 versions in three
round trips), for every record of a page at once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.models import (
    AgentThen,
    ClaimedThen,
    OutcomeEntry,
    Packet,
    PinThen,
    RecordPage,
    RecordVersion,
    Sighting,
)
from baton.server.model.validation import check_agent, check_ref
from baton.server.retrieval import lexical
from baton.server.runtime import codec
from baton.server.stores.records import NamespaceWithRecords, Reader, fact_document
from baton.server.stores.store_base import NamespaceStore

PROBES = 32  # versions of a record read per round trip while finding the one current then
# What an agent had in front of it is looked for among its newest packets and sessions
# begun by then: at most these many of each.
PACKETS_LOOKED_AT = SESSIONS_LOOKED_AT = 500
# A search as of a moment ranks every record of its scope then: it reads at most this many.
AS_OF_SEARCH_RECORDS = 20_000
K1, B = 1.2, 0.75  # BM25's, as search.lua ranks
Wanted = Callable[[RecordVersion | None], bool]  # the filters of a listing


class AsOf(NamespaceStore):
    """Reads of one namespace's records as of a moment."""

    def __init__(self, namespace: NamespaceWithRecords) -> None:
        super().__init__(namespace)
        self.records = namespace.records

    async def recall(self, ref: str, at: str) -> RecordVersion:
        """The version of ``ref`` current at ``at``, with its confidence then."""
        ref = check_ref(ref, self.limits.max_ref_length)
        [record] = await self.read([ref], at)
        if record is None:
            if not await self.redis.exists(self.keys.head(ref)):
                raise NotFound(f"no record {ref}", ref=ref)
            raise NotFound(f"{ref} had no version yet at {at}", ref=ref, as_of=at)
        if record.forgotten is not None:
            raise NotFound(f"{ref} was forgotten ({record.forgotten.reason})", ref=ref)
        return record

    async def read(self, refs: Sequence[str], at: str) -> list[RecordVersion | None]:
        """For each of ``refs``, the version current at ``at`` (None when the record did not
        exist yet, or does not exist), its confidence the one it had then."""
        numbers = await self.numbers(refs, at)
        wanted = [(ref, n) for ref, n in zip(refs, numbers, strict=True) if n is not None]
        batch = self.ns.batch()
        for ref, _ in wanted:
            batch.pipe.lrange(self.keys.outcomes(ref), 0, -1)
        logs = iter(await batch.execute()) if wanted else iter(())
        versions = iter(await self.records.read_versions(wanted))
        found: list[RecordVersion | None] = []
        for number in numbers:
            if number is None:
                found.append(None)
                continue
            record, log = next(versions), next(logs)
            if record is not None:
                moves = [OutcomeEntry(**codec.unpack(raw)) for raw in codec.values(log)]
                record = _confidence_then(record, moves, at)
            found.append(record)
        return found

    async def numbers(self, refs: Sequence[str], at: str) -> list[int | None]:
        """For each of ``refs``, the number of its newest version written at or before
        ``at`` (None when there is none). Each round trip reads up to :data:`PROBES`
        evenly spaced versions of every record still being narrowed down."""
        batch = self.ns.batch()
        for ref in refs:
            batch.pipe.hget(self.keys.head(ref), "version")
        # per record: the newest version known written by then, and the range still open
        best = [0] * len(refs)
        open_ = {i: (1, int(v)) for i, v in enumerate(await batch.execute()) if v is not None}
        while open_:
            probes = {i: _spread(low, high) for i, (low, high) in open_.items()}
            batch = self.ns.batch()
            for i, numbers in probes.items():
                for number in numbers:
                    batch.pipe.hget(self.keys.version(refs[i], number), "created_at")
            replies = iter(await batch.execute())
            for i, numbers in probes.items():
                times = [codec.text(next(replies)) or "" for _ in numbers]
                before = [n for n, time in zip(numbers, times, strict=True) if time <= at]
                low, high = open_[i]
                if before:
                    best[i] = before[-1]
                    later = [n for n in numbers if n > before[-1]]
                    low, high = before[-1] + 1, (later[0] - 1 if later else high)
                else:
                    high = numbers[0] - 1
                if low > high:
                    del open_[i]
                else:
                    open_[i] = (low, high)
        return [number or None for number in best]

    async def agent(self, agent: str, at: str) -> AgentThen:
        """What ``agent`` had in front of it at ``at`` (:class:`AgentThen`), from its
        newest :data:`PACKETS_LOOKED_AT` packets made by then and the newest
        :data:`SESSIONS_LOOKED_AT` sessions begun by then."""
        agent = check_agent(agent)
        return AgentThen(
            agent=agent,
            as_of=at,
            claimed=await self._claimed(agent, at),
            seen=await self._seen(agent, at),
        )

    async def _claimed(self, agent: str, at: str) -> list[ClaimedThen]:
        """The packets ``agent`` held at ``at`` (its log's last move by then is a claim),
        oldest first, each pin with the version current then."""
        inbox = self.keys.inbox(agent)
        ids = [
            codec.text(raw)
            for raw in codec.members(
                await self.redis.zrevrangebyscore(
                    inbox.all, micros(at), "-inf", start=0, num=PACKETS_LOOKED_AT
                )
            )
        ][::-1]
        pipe = self.redis.pipeline(transaction=False)
        for packet_id in ids:
            pipe.hgetall(inbox.packet(packet_id))
            pipe.lrange(inbox.log(packet_id), 0, -1)
        replies = await pipe.execute()
        held: list[tuple[Packet, str]] = []
        for fields, log in zip(replies[::2], replies[1::2], strict=True):
            if not fields:
                continue
            moves = [move for move in codec.transitions(log) if move.at <= at]
            if moves and moves[-1].to_state == "claimed":
                packet = codec.packet(fields)
                packet.log = codec.transitions(log)
                held.append((packet, moves[-1].at))
        refs = [pin.ref for packet, _ in held for pin in packet.pins]
        numbers = iter(await self.numbers(refs, at))
        return [
            ClaimedThen(
                packet=packet,
                claimed_at=claimed_at,
                pins=[
                    PinThen(
                        ref=pin.ref,
                        version=pin.version,
                        current_version=(then := next(numbers)),
                        stale=then != pin.version,
                    )
                    for pin in packet.pins
                ],
            )
            for packet, claimed_at in held
        ]

    async def _seen(self, agent: str, at: str) -> list[Sighting]:
        """The versions ``agent``'s sessions open at ``at`` had last read or written of
        each record by then, from their logs of sightings, in ref order."""
        ids = [
            codec.text(raw)
            for raw in codec.members(
                await self.redis.zrevrangebyscore(
                    self.keys.sessions, micros(at), "-inf", start=0, num=SESSIONS_LOOKED_AT
                )
            )
        ]
        pipe = self.redis.pipeline(transaction=False)
        for session_id in ids:
            pipe.hmget(self.keys.session(session_id), "agent", "ended_at")
        open_then = [
            session_id
            for session_id, (owner, ended) in zip(ids, await pipe.execute(), strict=True)
            if codec.text(owner) == agent and (ended is None or codec.text(ended) > at)
        ]
        pipe = self.redis.pipeline(transaction=False)
        for session_id in open_then:
            pipe.lrange(self.keys.session_seen(session_id), 0, -1)
        last: dict[str, Sighting] = {}
        for session_id, log in zip(open_then, await pipe.execute(), strict=True):
            for raw in codec.values(log):
                when, ref, version = codec.text(raw).split("\t")
                if when <= at and (ref not in last or last[ref].at <= when):
                    last[ref] = Sighting(ref=ref, version=int(version), session=session_id, at=when)
        return [last[ref] for ref in sorted(last)]

    async def list_records(self, at: str, **filters: Any) -> RecordPage:
        """:meth:`RecordStore.list_records` as of ``at``: the versions current then, their
        tags and confidence then filtered; with ``query``, ranked by BM25 over the records
        of the scope then (:meth:`_search`)."""

        async def read(refs: Sequence[str]) -> list[RecordVersion | None]:
            return await self.read(refs, at)

        async def search(query: str, scope: str | None, limit: int, wanted: Wanted) -> RecordPage:
            return await self._search(query, scope, limit, wanted, read)

        return await self.records.list_records(**filters, read=read, search=search)

    async def _search(
        self, query: str, scope: str | None, limit: int, wanted: Wanted, read: Reader
    ) -> RecordPage:
        """The best ``limit`` versions for ``query`` among the records of ``scope`` (every
        fact of the namespace without one) as ``read`` finds them: BM25 with search.lua's
        k1, b and idf over their search documents, vectors left out. Reads every record of
        the scope, up to :data:`AS_OF_SEARCH_RECORDS`."""
        terms = list(dict.fromkeys(lexical.terms(query)))
        refs: list[str] = []
        async for batch in self.records.candidate_refs(scope, [], "all", None):
            refs += batch
            if len(refs) > AS_OF_SEARCH_RECORDS:
                raise InvalidInput(
                    "scope",
                    f"a search with as_of reads every record of its scope, and this one holds "
                    f"over {AS_OF_SEARCH_RECORDS}; search a narrower scope",
                )
        found: list[RecordVersion] = []
        documents: list[Counter[str]] = []
        for start in range(0, len(refs), PROBES * 16):
            part = refs[start : start + PROBES * 16]
            for record in await read(part):
                document = (
                    None if record is None else fact_document(record.ref, record.value, record.tags)
                )
                if record is None or record.forgotten is not None or document is None:
                    continue
                found.append(record)
                documents.append(Counter(lexical.terms(document[1])))
        ranked = _bm25(terms, documents)
        best = sorted(
            (i for i, score in enumerate(ranked) if score > 0),
            key=lambda i: (-ranked[i], found[i].ref),
        )
        return RecordPage(
            records=[found[i] for i in best if wanted(found[i])][:limit], next_cursor=None
        )


def micros(at: str) -> int:
    """A time as Baton writes it, in epoch microseconds (sorted sets' scores)."""
    return round(datetime.fromisoformat(at).timestamp() * 1_000_000)


def _spread(low: int, high: int) -> list[int]:
    """Up to :data:`PROBES` version numbers from ``low`` to ``high``, evenly spaced, the last
    always ``high``."""
    count = min(PROBES, high - low + 1)
    return sorted({high - (high - low) * k // count for k in range(count)})


def _confidence_then(record: RecordVersion, moves: list[OutcomeEntry], at: str) -> RecordVersion:
    """``record`` with the confidence it had at ``at``: the one before the first outcome
    recorded on it after then, or the one it has (outcomes move only the current version,
    so a version's confidence is its last outcome's)."""
    later = [m for m in moves if m.version == record.version and m.created_at > at]
    if not later:
        return record
    return msgspec.structs.replace(record, confidence=later[0].before)


def _bm25(terms: list[str], documents: list[Counter[str]]) -> list[float]:
    """Each document's BM25 score for ``terms``, the corpus being ``documents``."""
    if not documents or not terms:
        return [0.0] * len(documents)
    average = sum(sum(d.values()) for d in documents) / len(documents) or 1.0
    weights = {}
    for term in terms:
        frequency = sum(1 for d in documents if term in d)
        if frequency:
            weights[term] = math.log(1 + (len(documents) - frequency + 0.5) / (frequency + 0.5))
    scores = []
    for document in documents:
        length = sum(document.values())
        score = 0.0
        for term, weight in weights.items():
            tf = document[term]
            if tf:
                score += weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        scores.append(score)
    return scores
