"""Records: versioned, hash-chained values with a confidence that outcomes move.

A write never overwrites: it appends version N+1, chained to version N by its hash. Every
change is one Lua script on the record's hash slot that applies only on top of the head the
caller built on; a writer that lost the race rebuilds and retries, so none loses a version.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

import structlog
from redis.typing import EncodableT

from baton.server.model.clock import at_least_after, utc_now
from baton.server.model.errors import (
    Forbidden,
    InvalidInput,
    NotFound,
    QuotaReached,
    StoreUnavailable,
    TooLarge,
    VersionConflict,
    describe,
)
from baton.server.model.identity import token_of_acting
from baton.server.model.integrity import (
    GENESIS_HASH,
    VERSION_FIELDS,
    ChainChecker,
    canonical_bytes,
    digest,
    plain_json,
    tombstone_body,
    version_body,
)
from baton.server.model.models import (
    MAX_NOTE,
    History,
    HistoryEntry,
    OutcomeEntry,
    RecordPage,
    RecordVersion,
    Remembered,
    VersionNote,
)
from baton.server.model.validation import (
    ANONYMOUS,
    check_agent,
    check_confidence,
    check_depth,
    check_ref,
    check_session_id,
    check_tags,
    check_text,
)
from baton.server.retrieval.search import IndexCall, text_of
from baton.server.runtime import codec
from baton.server.runtime.batch import Batch
from baton.server.stores.changes import Command, Plan, Planned, Seen, VersionWrite
from baton.server.stores.store_base import NamespaceParts, NamespaceStore
from baton.server.stores.token_bytes import refunds

# Optimistic writes retry when another writer moved the head first; someone always wins,
# so this bound is only reached under pathological contention on one record.
MAX_WRITE_ATTEMPTS = 1000
# Refs, versions and packets are read this many at a time: memory stays flat.
BATCH = 500
log = structlog.get_logger("baton.records")

# Record heads a process keeps as write hints (see HeadHints), per namespace.
HINTS_KEPT = 10_000
# Memories (``memory/<id>``) have their own search documents; their records are not indexed
# again as facts.
UNINDEXED_SCOPE = "memory/"
# A search in a scope that the ranking's first page leaves short looks this much deeper.
SCOPE_DEEPER = 4


def fact_document(ref: str, value: Any, tags: list[str]) -> tuple[str, str] | None:
    """A fact's search document (its id and text), or None for a ref not indexed as a fact."""
    if ref.startswith(UNINDEXED_SCOPE):
        return None
    return f"f:{ref}", f"{ref} {text_of(value)} {' '.join(tags)}"


class HeadHints:
    """The head (version, hash) of each record as this process last saw it, newest
    ``size`` records: a guess that spares a write reading the head first. Only a guess: the
    write script checks it and answers the real head when it is stale."""

    def __init__(self, size: int = HINTS_KEPT) -> None:
        self.size = size
        # An OrderedDict, not a dict: a dict's oldest key, found by iterating past the slots
        # its deletions left, cost ~10 µs per write once full (popitem here is O(1)).
        self.heads: OrderedDict[str, tuple[int, str]] = OrderedDict()

    def get(self, ref: str) -> tuple[int, str]:
        """The last head seen, or that of a new record."""
        return self.heads.get(ref, (0, GENESIS_HASH))

    def note(self, ref: str, version: int, hash_: str) -> None:
        """Keep ``ref``'s head as the newest noted, forgetting the least recently noted."""
        if ref in self.heads:
            self.heads.move_to_end(ref)
        elif len(self.heads) >= self.size:
            self.heads.popitem(last=False)
        self.heads[ref] = (version, hash_)

    def drop(self, ref: str) -> None:
        self.heads.pop(ref, None)


class RecordsParts(NamespaceParts, Protocol):
    """What the record store is given: the namespace's parts and its head hints."""

    @property
    def heads(self) -> HeadHints: ...


class NamespaceWithRecords(NamespaceParts, Protocol):
    """A namespace's parts and its record store: what the stores built on records get."""

    @property
    def records(self) -> RecordStore: ...


# Reads of records (each ref's version, None where there is none), and a search of them (a
# query, a scope, a page size, the filters), other than the current ones' (as_of).
Reader = Callable[[Sequence[str]], Awaitable[list[RecordVersion | None]]]
Searcher = Callable[
    [str, str | None, int, Callable[[RecordVersion | None], bool]], Awaitable[RecordPage]
]


class Moves(NamedTuple):
    """What :meth:`RecordStore.moves` found of one record."""

    value: Any
    confidence: float
    versions: list[VersionNote]
    outcomes: list[OutcomeEntry]


class RecordStore(NamespaceStore):
    """Records of one namespace: writing, reading and listing them."""

    def __init__(self, namespace: RecordsParts) -> None:
        super().__init__(namespace)
        self.search = namespace.search
        self.heads = namespace.heads

    # -- writing ------------------------------------------------------------------------------

    async def check_quotas(self, refs: Sequence[str]) -> None:
        """``QuotaReached`` when a write to any of ``refs`` would be refused: the namespace's
        quotas and each record's history. An operation that writes several records (a save
        that supersedes, a consolidation) checks them all, then writes them as one change
        (:meth:`write_all`)."""
        await self.ns.admit()
        await self.ns.check_room()
        pipe = self.redis.pipeline(transaction=False)
        for ref in refs:
            pipe.hget(self.keys.head(ref), "version")
        for ref, version in zip(refs, await pipe.execute(), strict=True):
            if int(version or 0) >= self.limits.max_versions:
                raise self._history_full(ref)

    def _history_full(self, ref: str) -> QuotaReached:
        return QuotaReached.of(
            f"{ref}'s history", self.limits.max_versions, "BATON_MAX_VERSIONS", ref=ref
        )

    async def remember(
        self,
        ref: str,
        value: Any,
        *,
        agent: str,
        session: str | None = None,
        tags: Iterable[str] = (),
        confidence: float = 0.5,
        expected_version: int | None = None,
        based_on: Sequence[int] | None = None,
    ) -> Remembered:
        """Append version N+1 of ``ref``; with ``expected_version`` set, only on top of it.
        ``based_on``: the versions the writer saw (by default ``expected_version``, else
        the one ``session`` last saw); a write that did not see the version it lands on
        contests the record (``write_version.lua``). Records under ``memory/`` are saved
        memories, whose owner is in their value: only the memory store writes them
        (:meth:`write_all`), after its ownership checks."""
        ref = check_ref(ref, self.limits.max_ref_length)
        if ref.startswith(UNINDEXED_SCOPE):
            raise Forbidden(
                f"{ref} is a saved memory: memories are written through the memory API "
                "(POST /v1/memories, memory_save), never as records",
                ref=ref,
            )
        agent = check_agent(agent)
        session = None if session is None else check_session_id(session)
        tag_list = check_tags(list(tags), self.limits.max_tags, self.limits.max_tag_length)
        confidence = check_confidence(confidence)
        packed, floatless = self._pack_value(value)  # tags are text: the value decides
        created_at = utc_now()
        head_key = self.keys.head(ref)

        # The head this write builds on: the one this process last saw (or "new record"), so
        # the common write is one round trip; the script refuses a stale guess and answers
        # the real head, and the write is rebuilt on that.
        guess = self.heads.get(ref)
        newest_seen = max(based_on or (), default=0)
        if (expected_version is not None and expected_version != guess[0]) or (
            newest_seen > guess[0]  # a guess can only lag behind the head
        ):
            head = await self.redis.hmget(head_key, "version", "hash")
            guess = (int(head[0] or 0), codec.text(head[1]) or GENESIS_HASH)
            if expected_version is not None and expected_version != guess[0]:
                raise VersionConflict(
                    f"{ref} is at version {guess[0]}, not {expected_version}; nothing was written",
                    ref=ref,
                    current_version=guess[0],
                )
            if newest_seen > guess[0]:
                raise InvalidInput(
                    "based_on", f"names version {newest_seen}; {ref} is at version {guess[0]}"
                )
        current, prev_hash = guess
        if based_on:
            saw = ",".join(str(number) for number in sorted(set(based_on)))
        elif expected_version is not None:
            saw = str(expected_version)
        else:
            saw = "" if session is None else "session"
        await self.ns.admit()
        await self.ns.check_room()
        document = fact_document(ref, value, tag_list)
        # The document's old terms come from what this process last indexed; the script names
        # any it was not given, and the write is sent again with them.
        index = (
            None
            if document is None
            else await self.search.call(*document, kind="fact", agent=agent, added=created_at)
        )
        new_hash, contested = "", None
        for _ in range(MAX_WRITE_ATTEMPTS):
            if current >= self.limits.max_versions:  # (checked already, but for a race)
                raise self._history_full(ref)
            write = self._version_write(
                Planned(ref, value, agent, tag_list, index, session, confidence, saw),
                (packed, floatless),
                created_at,
                (current, prev_hash),
            )
            new_hash = write.hash
            written = await self.ns.topology.write_versions(self.ns, [write], [])
            if written.versions:
                current, contested = written.versions[0], written.contests[0]
                self.ns.count_written(write.index, write.value_bytes, write.token)
                if written.failure is not None:
                    log.warning("a write's follow-ups failed", ref=ref, error=written.failure)
                break
            reply = written.refusal
            if reply[0] == 2:  # the search document's old terms it was not given
                assert index is not None
                index = self.search.with_missing(index, reply[1:])
                continue
            if reply[0] == 3:  # the current version is later than its time
                created_at = at_least_after(codec.text(reply[1]))
                continue
            if reply[0] == -1:
                self.heads.drop(ref)
                raise VersionConflict(f"{ref} was forgotten; write under a new ref", ref=ref)
            if codec.text(reply[2]) == new_hash:
                current += 1  # our script ran, its reply lost (if a write is ever sent twice)
                break
            current, prev_hash = int(reply[1]), codec.text(reply[2]) or GENESIS_HASH
            self.heads.note(ref, current, prev_hash)
            if expected_version is not None:
                raise VersionConflict(
                    f"{ref} is at version {current}, not {expected_version}; nothing was written",
                    ref=ref,
                    current_version=current,
                )
        else:
            raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)
        self.heads.note(ref, current, new_hash)
        return Remembered(
            ref=ref,
            version=current,
            hash=new_hash,
            prev_hash=prev_hash,
            superseded=current - 1 or None,
            created_at=created_at,
            contested=contested,
        )

    def _version_write(
        self,
        planned: Planned,
        packed: tuple[bytes, bool],
        created_at: str,
        head: tuple[int, str],
    ) -> VersionWrite:
        """The write of ``planned`` as the version after ``head`` (its number and hash):
        ``packed`` is the value as :meth:`_pack_value` gives it."""
        ref, (current, prev_hash) = planned.ref, head
        body = version_body(
            ref=ref,
            version=current + 1,
            value=planned.value,
            author=planned.agent,
            session=planned.session,
            created_at=created_at,
            tags=planned.tags,
            prev_hash=prev_hash,
        )
        keys = [
            self.keys.head(ref),
            self.keys.version(ref, current + 1),
            self.keys.version(ref, current),
        ]
        # The head is checked by number and hash: a guess can be stale in both (a version
        # rolled back and written again by someone else).
        args: list[EncodableT] = [
            current,
            digest(body, floatless=packed[1]),
            repr(planned.confidence),
            created_at,
            planned.agent,
            "" if current == 0 else prev_hash,
            prev_hash,
            packed[0],
            planned.session or "",
            codec.pack(planned.tags),
            planned.saw,
        ]
        return VersionWrite(
            ref,
            planned.agent,
            planned.session,
            planned.tags,
            planned.index,
            keys,
            args,
            token=token_of_acting(),
        )

    async def write_all(
        self,
        plans: Sequence[tuple[str, Plan]],
        then: list[Command],
        *,
        created_at: str | None = None,
    ) -> list[Remembered]:
        """Write a version of several records, then ``then`` (a memory and the one it
        supersedes, their links and audit entry), as one change: on one Redis in one step,
        all of it or nothing; on a cluster record by record (each record has a slot of its
        own), then ``then``. Each plan (a ref, and how to make its version) makes it from the
        record's current version (None for a new record), again whenever another writer
        moved the record first (``created_at``: the versions', now by default). Quotas are
        the caller's to check first (:meth:`check_quotas`)."""
        created_at = created_at or utc_now()
        records = await self._currents([ref for ref, _ in plans])
        # each plan yet to be written: its ref, how to make it, the record's current version
        # as last read, and its search document with the postings a refusal named
        pending: list[tuple[str, Plan, RecordVersion | None, IndexCall | None]] = [
            (ref, make, record, None) for (ref, make), record in zip(plans, records, strict=True)
        ]
        done: list[Remembered] = []
        for _ in range(MAX_WRITE_ATTEMPTS):
            planned: list[tuple[Planned, RecordVersion | None]] = []
            kept = []
            for ref, make, record, index in pending:
                made = make(record)
                if made is None:  # nothing to write to this record after all
                    continue
                kept.append((ref, make, record, index))
                planned.append((made if index is None else replace(made, index=index), record))
            pending = kept
            writes = [
                self._version_write(
                    made,
                    self._pack_value(made.value),
                    created_at,
                    (0, GENESIS_HASH) if record is None else (record.version, record.hash),
                )
                for made, record in planned
            ]
            written = await self.ns.topology.write_versions(self.ns, writes, then)
            for write, version, contest in zip(
                writes, written.versions, written.contests, strict=False
            ):
                self.heads.note(write.ref, version, write.hash)
                self.ns.count_written(write.index, write.value_bytes, write.token)
                done.append(
                    Remembered(
                        ref=write.ref,
                        version=version,
                        hash=write.hash,
                        prev_hash=write.prev_hash,
                        superseded=version - 1 or None,
                        created_at=created_at,
                        contested=contest,
                    )
                )
            if written.failure is not None:
                log.warning("a write's follow-ups failed", error=written.failure)
            if written.refused_at is None:
                return done
            pending = pending[len(written.versions) :]
            at = written.refused_at - len(written.versions)
            ref, make, _, index = pending[at]
            reply = written.refusal
            if reply[0] == 3:  # its record's current version is later than their time
                created_at = at_least_after(codec.text(reply[1]))
                continue
            if reply[0] == 2:  # its search document's old terms it was not given
                call = index or planned[written.refused_at][0].index
                assert call is not None
                pending[at] = (ref, make, pending[at][2], self.search.with_missing(call, reply[1:]))
                continue
            if reply[0] == -1:
                self.heads.drop(ref)
            [record] = await self._currents([ref])  # moved on, or forgotten: its plan decides
            pending[at] = (ref, make, record, index)
        refs = ", ".join(ref for ref, *_ in pending)
        raise StoreUnavailable(f"{refs}: too many concurrent writers, try again")

    async def _currents(self, refs: Sequence[str]) -> list[RecordVersion | None]:
        """The current version of each of ``refs`` (None for a new record), forgotten ones
        too, in one round trip."""
        return await self.read_versions([(ref, None) for ref in refs])

    def _pack_value(self, value: Any) -> tuple[bytes, bool]:
        """The value packed, and whether it is plain JSON without floats (``floatless``, see
        ``integrity.canonical_bytes``). A value with no canonical encoding (bytes, NaN, keys
        of mixed types) could not be hashed: it is refused here."""
        check_depth(value, "value")
        try:
            packed = codec.pack(value)
            floatless = plain_json(packed)
            canonical_bytes({"value": value}, floatless=floatless)
        except (TypeError, ValueError, OverflowError) as error:
            raise InvalidInput("value", f"must be JSON-compatible data ({error})") from None
        if len(packed) > self.limits.max_value_bytes:
            raise TooLarge(
                f"value: {len(packed)} bytes encoded; the limit is {self.limits.max_value_bytes}",
                field="value",
                limit=self.limits.max_value_bytes,
            )
        return packed, floatless

    async def forget(
        self, ref: str, *, agent: str, reason: str, then: Sequence[Command] = ()
    ) -> list[Any]:
        """Replace every version's value of ``ref`` by a tombstone (see docs/integrity.md):
        the data is gone, the chain still verifies and shows when, by whom and why. Its
        search document goes with it, and ``then`` after it (a memory's expiry, the audit
        entry): on one Redis in the same step. The replies of ``then``'s commands."""
        ref = check_ref(ref, self.limits.max_ref_length)
        check_text(reason, "reason", MAX_NOTE)
        doc = (
            f"m:{ref.removeprefix(UNINDEXED_SCOPE)}"
            if ref.startswith(UNINDEXED_SCOPE)
            else f"f:{ref}"
        )
        await self.search.prepare([doc])
        removal = await self.search.call(doc, None)
        for _ in range(MAX_WRITE_ATTEMPTS):
            head = await self.redis.hmget(self.keys.head(ref), "version", "forgotten_at")
            if head[0] is None or head[1] is not None:
                message = f"no record {ref}" if head[0] is None else f"{ref} was forgotten"
                raise NotFound(message, ref=ref)
            current = int(head[0])
            versions = [self.keys.version(ref, number) for number in range(1, current + 1)]
            batch = self.ns.batch()
            for version_key in versions:
                batch.pipe.hmget(version_key, "hash", "token")
                batch.pipe.hstrlen(version_key, "value")
            read = await batch.execute()
            hashes = [fields[0].decode() for fields in read[::2]]
            written_with = [  # each version's token and value bytes, given back to it
                (codec.text(fields[1]), size)
                for fields, size in zip(read[::2], read[1::2], strict=True)
            ]
            tombstone = {"at": utc_now(), "by": agent, "reason": reason}
            marks = [digest(tombstone_body(original, tombstone)) for original in hashes]
            given_back = refunds(written_with)
            reply = await self.ns.topology.forget_versions(
                self.ns,
                [self.keys.head(ref), *versions],
                [current, tombstone["at"], agent, reason, codec.pack(None), *marks],
                removal,
                [*then, *given_back],
            )
            if reply[0] == 2:  # the search document's terms it was not given
                removal = self.search.with_missing(removal, reply[1:])
            elif reply[0] == 1:
                self.heads.drop(ref)
                for token, size in written_with:
                    self.ns.count_written(None, -size, token)
                return list(reply[2])[: len(then)]
        raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)

    # -- reading ------------------------------------------------------------------------------

    async def recall(
        self,
        ref: str,
        *,
        version: int | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> RecordVersion:
        """The current version of ``ref``, or the one asked for."""
        ref = check_ref(ref, self.limits.max_ref_length)
        seen = None
        if session is not None:
            seen = Seen(ref, check_session_id(session), agent or ANONYMOUS)
        found, touched = await self._read(ref, version, seen)
        if found is None:
            raise NotFound(f"no record {ref}", ref=ref)
        if isinstance(found, int):
            raise NotFound(
                f"{ref} has no version {version}; its current version is {found}",
                ref=ref,
                version=version,
                current_version=found,
            )
        if found.forgotten is not None:
            raise NotFound(f"{ref} was forgotten ({found.forgotten.reason})", ref=ref)
        if seen is not None and not touched:
            await self.activity.touch(seen.session, seen.agent, {ref: found.version})
        return found

    async def _read(
        self, ref: str, version: int | None, seen: Seen | None
    ) -> tuple[RecordVersion | int | None, bool]:
        """The version (the current one for None), the current version number if it is
        missing, or None; and whether ``seen``'s touch was made with it (on one Redis, in
        the same call). One script call (not a batch: the common read), two when the
        current version is not the one this process last saw."""
        head: dict[bytes, bytes] | None = None
        for _ in range(MAX_WRITE_ATTEMPTS):
            keys, args = self._read_call(ref, version, head)
            reply, touched = await self.ns.topology.read_version(self.ns, keys, args, seen)
            if not reply:
                return None, touched
            head = codec.pairs(reply[0])
            if len(reply) == 1:  # the current version moved on from the guess
                continue
            current = int(head[b"version"])
            if not reply[1]:
                return current, touched
            record = codec.record_version(ref, codec.pairs(reply[1]), head, current)
            if version is None:
                self.heads.note(ref, record.version, record.hash)
            return record, touched
        raise StoreUnavailable(f"{ref} moved on while being read: too many concurrent writers")

    async def list_records(
        self,
        *,
        scope: str | None = None,
        tags: Sequence[str] = (),
        tags_mode: str = "all",
        min_confidence: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
        query: str | None = None,
        read: Reader | None = None,
        search: Searcher | None = None,
    ) -> RecordPage:
        """Current versions in ref order, filtered by scope (and below), tags and confidence.
        With ``query``, only records whose value matches it (BM25), best match first, in one
        page of at most ``limit``. ``read`` and ``search`` read other versions than the
        current ones (``baton.server.stores.as_of``)."""
        scope = self.check_scope(scope)
        tag_list = check_tags(list(tags), self.limits.max_tags, self.limits.max_tag_length)
        if min_confidence is not None:
            min_confidence = check_confidence(min_confidence, field="min_confidence")
        self.limits.check_page(limit)
        if cursor is not None:  # a cursor is the last ref of the page before
            cursor = check_ref(cursor, self.limits.max_ref_length, field="cursor")

        def wanted(record: RecordVersion | None) -> bool:
            return (
                record is not None
                and (min_confidence is None or record.confidence >= min_confidence)
                and (not tag_list or _tags_match(record.tags, tag_list, tags_mode))
            )

        if query is not None:
            if not query.strip():
                raise InvalidInput("query", "must be non-empty text")
            if search is not None:
                return await search(query, scope, limit, wanted)
            filtered = scope is not None or bool(tag_list) or min_confidence is not None
            return await self._search_records(query, scope, limit, filtered, wanted)
        records: list[RecordVersion] = []
        last = cursor
        async for batch in self.candidate_refs(scope, tag_list, tags_mode, cursor):
            found = await (read or self._currents)(batch)
            for ref, record in zip(batch, found, strict=True):
                last = ref
                if record is None or not wanted(record):
                    continue
                records.append(record)
                if len(records) == limit:
                    more = await self._has_more(scope, tag_list, tags_mode, last)
                    return RecordPage(records=records, next_cursor=last if more else None)
        return RecordPage(records=records, next_cursor=None)

    async def _search_records(
        self,
        query: str,
        scope: str | None,
        limit: int,
        filtered: bool,
        wanted: Callable[[RecordVersion | None], bool],
    ) -> RecordPage:
        # Scope, tags and confidence are checked on the records: look further down the ranking,
        # and further still while the scope leaves fewer than a page of a longer ranking.
        depth = self.limits.max_page_size if filtered else limit
        while True:
            hits = await self.search.search(query, limit=depth, kinds=["fact"])
            refs = [hit.doc[2:] for hit in hits]
            if scope is not None:
                refs = [ref for ref in refs if ref.startswith(f"{scope}/")]
            if scope is None or len(refs) >= limit or len(hits) < depth:
                break
            depth *= SCOPE_DEEPER
        found = await self.read_versions([(ref, None) for ref in refs])
        records = [
            record
            for record in found
            if record is not None and record.forgotten is None and wanted(record)
        ]
        return RecordPage(records=records[:limit], next_cursor=None)

    def check_scope(self, scope: str | None) -> str | None:
        """A scope (a ref prefix) checked like a ref, without its trailing slash."""
        if scope is None:
            return None
        scope = scope.rstrip("/")
        check_ref(f"{scope}/x", self.limits.max_ref_length, field="scope")
        return scope

    async def _has_more(
        self, scope: str | None, tags: list[str], tags_mode: str, after: str | None
    ) -> bool:
        async for batch in self.candidate_refs(scope, tags, tags_mode, after, batch=1):
            return bool(batch)
        return False

    async def candidate_refs(
        self,
        scope: str | None,
        tags: list[str],
        tags_mode: str,
        after: str | None,
        batch: int = BATCH,
    ) -> AsyncIterator[list[str]]:
        """Refs in lexicographic order strictly after ``after``, within ``scope``."""
        low = f"[{scope}/" if scope else "-"
        high = f"({scope}0" if scope else "+"  # "0" sorts right after "/"
        if tags:
            sets = [set(await self.redis.smembers(self.keys.tag(tag))) for tag in tags]
            chosen = set.intersection(*sets) if tags_mode == "all" else set.union(*sets)
            refs = sorted(
                ref
                for ref in (codec.text(raw) for raw in chosen)
                if (not scope or ref.startswith(f"{scope}/")) and (after is None or ref > after)
            )
            for start in range(0, len(refs), batch):
                yield refs[start : start + batch]
            return
        if after is not None and (not scope or after > f"{scope}/"):
            low = f"({after}"  # a cursor before the scope starts it at the scope's first ref
        while True:
            raw = await self.redis.zrangebylex(self.keys.refs, low, high, start=0, num=batch)
            if not raw:
                return
            refs = [item.decode() for item in codec.values(raw)]
            yield refs
            low = f"({refs[-1]}"

    async def read_versions(
        self,
        wanted: Sequence[tuple[str, int | None]],
        also: Callable[[Batch], None] | None = None,
    ) -> list[RecordVersion | None]:
        """Many (ref, version or None for current) reads in one round trip, with whatever
        ``also`` queues (its failures are logged); None where the record or version does not
        exist. A current version this process has not seen yet costs a second round trip."""
        batch = self.ns.batch()
        for ref, version in wanted:
            self._queue_read(batch, ref, version)
        if also is not None:
            also(batch)
        replies = await batch.execute(raise_on_error=False)
        failed = [reply for reply in replies[len(wanted) :] if isinstance(reply, Exception)]
        if failed:
            log.warning("what followed a read failed", error=describe(failed[0]))
        replies = replies[: len(wanted)]
        for _ in range(MAX_WRITE_ATTEMPTS):
            # A current version other than the one guessed: read the one its head names.
            moved = [
                i for i, reply in enumerate(replies) if isinstance(reply, list) and len(reply) == 1
            ]
            if not moved:
                break
            again = self.ns.batch()
            for index in moved:
                self._queue_read(again, wanted[index][0], None, codec.pairs(replies[index][0]))
            for index, reply in zip(moved, await again.execute(raise_on_error=False), strict=True):
                replies[index] = reply
        else:
            raise StoreUnavailable("records moved on while being read: too many concurrent writers")
        found = []
        for (ref, version), reply in zip(wanted, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            record = read_reply(ref, reply)
            if record is not None and version is None:
                self.heads.note(ref, record.version, record.hash)
            found.append(record)
        return found

    def _queue_read(
        self, batch: Batch, ref: str, version: int | None, head: dict[bytes, bytes] | None = None
    ) -> None:
        """Queue ``recall.lua`` for ``ref`` at ``version`` (see :meth:`_read_call`)."""
        keys, args = self._read_call(ref, version, head)
        batch.script(self.scripts.recall, keys, args)

    def _read_call(
        self, ref: str, version: int | None, head: dict[bytes, bytes] | None
    ) -> tuple[list[str], list[EncodableT]]:
        """``recall.lua``'s keys and arguments for ``ref`` at ``version``; for the current
        one (None), at the version ``head`` names, else at the one this process last saw."""
        if version is not None:
            number, which = version, ""
        else:
            number = int(head[b"version"]) if head else self.heads.get(ref)[0]
            which = "current"
        return [self.keys.head(ref), self.keys.version(ref, number)], [number, which]

    async def history(self, ref: str) -> History:
        """Every version of ``ref``, oldest first, each with whether its chain link verifies."""
        ref = check_ref(ref, self.limits.max_ref_length)
        head = codec.hash_fields(await self.redis.hgetall(self.keys.head(ref)))
        if not head:
            raise NotFound(f"no record {ref}", ref=ref)
        current = int(head[b"version"])
        checker = ChainChecker(VERSION_FIELDS)
        versions = []
        async for fields in self.versions(ref, current):
            record = codec.record_version(ref, fields, head, current)
            problems = checker.check(
                codec.hashed_view(record), floatless=codec.plain_version(fields)
            )
            versions.append(HistoryEntry(**codec.struct_fields(record), chain_ok=not problems))
        return History(
            ref=ref,
            current_version=current,
            confidence=float(head[b"confidence"]),
            successes=int(head.get(b"successes", 0)),
            failures=int(head.get(b"failures", 0)),
            versions=versions,
            contested=codec.contest(head.get(b"contested"), head.get(b"contested_base")),
        )

    async def versions(
        self, ref: str, current: int, first: int = 1
    ) -> AsyncIterator[dict[bytes, bytes]]:
        """The stored hashes of versions first..current, fetched in pipelined batches."""
        for start in range(first, current + 1, BATCH):
            batch = self.ns.batch()
            for number in range(start, min(start + BATCH, current + 1)):
                batch.pipe.hgetall(self.keys.version(ref, number))
            for fields in await batch.execute():
                yield fields

    async def moves(self, moved: Sequence[tuple[str, int, int]], shown: int) -> list[Moves]:
        """What happened to each record after a version of it: for each (ref, that version,
        its current version), the current version's value and confidence (a forgotten
        record's value is None), who wrote the last ``shown`` versions since (oldest
        first), and its last ``shown`` outcomes (oldest first; the caller keeps those it
        wants). One round trip for all of them."""
        batch = self.ns.batch()
        windows = []
        for ref, after, current in moved:
            windows.append(range(max(after + 1, current - shown + 1), current + 1))
            batch.pipe.hget(self.keys.version(ref, current), "value")
            batch.pipe.hget(self.keys.head(ref), "confidence")  # outcomes move the head's
            for number in windows[-1]:
                batch.pipe.hmget(
                    self.keys.version(ref, number), "author", "session", "created_at", "confidence"
                )
            batch.pipe.lrange(self.keys.outcomes(ref), -shown, -1)
        replies = iter(await batch.execute())
        found = []
        for window in windows:
            value, confidence = next(replies), next(replies)
            notes = [
                VersionNote(
                    version=number,
                    author=codec.text(fields[0]) or "",
                    session=codec.text(fields[1]) or None,
                    created_at=codec.text(fields[2]) or "",
                    confidence=float(fields[3] or 0),
                )
                for number, fields in zip(window, replies, strict=False)
            ]
            outcomes = [OutcomeEntry(**codec.unpack(raw)) for raw in codec.values(next(replies))]
            found.append(
                Moves(
                    None if value is None else codec.unpack(value),
                    float(confidence or 0),
                    notes,
                    outcomes,
                )
            )
        return found

    async def outcomes(self, ref: str) -> list[OutcomeEntry]:
        """The record's outcomes log, oldest first."""
        ref = check_ref(ref, self.limits.max_ref_length)
        if not await self.redis.exists(self.keys.head(ref)):
            raise NotFound(f"no record {ref}", ref=ref)
        raws = codec.values(await self.redis.lrange(self.keys.outcomes(ref), 0, -1))
        return [OutcomeEntry(**codec.unpack(raw)) for raw in raws]


def read_reply(ref: str, reply: list[Any]) -> RecordVersion | None:
    """The version a ``recall.lua`` reply found; None for an unknown record or
    version."""
    if len(reply) < 2 or not reply[1]:
        return None
    head = codec.pairs(reply[0])
    return codec.record_version(ref, codec.pairs(reply[1]), head, int(head[b"version"]))


def _tags_match(have: list[str], wanted: list[str], mode: str) -> bool:
    present = set(have)
    if mode == "all":
        return all(tag in present for tag in wanted)
    return any(tag in present for tag in wanted)
