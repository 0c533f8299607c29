"""The fact store: versioned, hash-chained records with confidence moved by outcomes.

One :class:`Backend` (a Redis client, the registered scripts and the limits) is created per
process; a :class:`FactStore` is a cheap view of it for one namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgpack
import msgspec
from baton.server import confidence as confidence_rules
from baton.server.connection import queue_script
from baton.server.errors import InvalidInput, NotFound, StoreUnavailable, TooLarge, VersionConflict
from baton.server.integrity import (
    GENESIS_HASH,
    OUTCOME_FIELDS,
    VERSION_FIELDS,
    ChainChecker,
    digest,
    tombstone_body,
    version_body,
)
from baton.server.keys import NAMESPACES, Keys
from baton.server.models import (
    BrokenLink,
    History,
    HistoryEntry,
    OutcomeEntry,
    OutcomeKind,
    OutcomeReport,
    RecordPage,
    RecordVersion,
    Remembered,
    StaleOutcome,
    Stats,
    Tombstone,
)
from baton.server.scripts import Scripts
from baton.server.search import SearchIndex, text_of
from baton.server.settings import HandoffPolicy, Limits
from baton.server.validation import (
    check_agent,
    check_confidence,
    check_depth,
    check_namespace,
    check_ref,
    check_session_id,
    check_tags,
)
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster

if TYPE_CHECKING:
    from baton.server.handoffs import Dispatcher

# Optimistic writes retry when another writer moved the head first; someone always wins,
# so this bound is only reached under pathological contention on one record.
MAX_WRITE_ATTEMPTS = 1000
BATCH = 500
MAX_OUTCOME_REF = 200
MAX_NOTE = 4000
EVENTS_KEPT = 10_000
# Memories (``memory/<id>``) have their own search documents; their records are not indexed
# again as facts.
UNINDEXED_SCOPE = "memory/"


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with microseconds, the form Baton stores and hashes."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def _pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


@dataclass(frozen=True)
class Backend:
    """What every store view shares: the Redis client, its scripts, the limits, and the
    dispatcher that puts handoff packets on the receivers' RQ queues."""

    redis: Redis
    limits: Limits
    dispatcher: Dispatcher | None = None
    policy: HandoffPolicy = field(default_factory=HandoffPolicy)
    scripts: Scripts = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scripts", Scripts(self.redis))

    @property
    def cluster(self) -> bool:
        """On a cluster, scripts cannot be pipelined: they run as separate calls."""
        return isinstance(self.redis, RedisCluster)

    async def eval_many(
        self, calls: Sequence[tuple[Any, list[Any], list[Any]]],
        also: Callable[[Pipeline], None] | None = None,
    ) -> list[Any]:  # fmt: skip
        """Run several (script, keys, args) — and the plain commands ``also`` queues — in one
        round trip (a pipeline), or concurrently on a cluster. Returns the scripts' replies."""
        if self.cluster:
            extra = []
            if also is not None:
                pipe = self.redis.pipeline(transaction=False)
                also(pipe)
                extra.append(pipe.execute())
            replies = await asyncio.gather(*(s(keys=k, args=a) for s, k, a in calls), *extra)
            return list(replies[: len(calls)])
        pipe = self.redis.pipeline(transaction=False)
        for script, keys, args in calls:
            queue_script(pipe, script, keys, args)
        if also is not None:
            also(pipe)
        return list((await pipe.execute())[: len(calls)])

    def store(self, namespace: str = "default") -> FactStore:
        return FactStore(self, namespace)


class FactStore:
    """Records of one namespace."""

    def __init__(self, backend: Backend, namespace: str = "default") -> None:
        self.backend = backend
        self.redis = backend.redis
        self.limits = backend.limits
        self.namespace = check_namespace(namespace)
        self.keys = Keys(self.namespace)
        self.search = SearchIndex(self.redis, backend.scripts, self.keys)

    # -- writing ------------------------------------------------------------------------------

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
    ) -> Remembered:
        """Append version N+1 of ``ref``; with ``expected_version`` set, only on top of it."""
        ref = check_ref(ref, self.limits.max_ref_length)
        agent = check_agent(agent)
        session = None if session is None else check_session_id(session)
        tag_list = check_tags(list(tags), self.limits.max_tags, self.limits.max_tag_length)
        confidence = check_confidence(confidence)
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
            or expected_version < 0
        ):  # fmt: skip
            raise InvalidInput("expected_version", "must be a whole number, 0 for a new record")
        packed = self._pack_value(value)
        created_at = utc_now()
        head_key = self.keys.head(ref)

        # Index first: a crash after this leaves an index entry without a head, which readers
        # skip; it never leaves a record that listing cannot find.
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.refs, {ref: 0})
        pipe.sadd(self.keys.agents, agent)
        for tag in tag_list:
            pipe.sadd(self.keys.tag(tag), ref)
        pipe.hmget(head_key, "version", "hash", "forgotten_at")
        *_, (current_raw, hash_raw, forgotten) = await pipe.execute()
        if forgotten is not None:
            raise VersionConflict(f"{ref} was forgotten; write under a new ref", ref=ref)

        # What follows a successful write: the session's touched set, the activity event and
        # the search document. On a single Redis they ride in the same pipeline as the write
        # when the write is unconditional (a lost race only means the touched version is
        # rewritten by the attempt that wins); otherwise they follow it.
        indexing = not ref.startswith(UNINDEXED_SCOPE)
        if indexing:
            await self.search.refresh_average()
        pending = {"touch", "event", "index"} if indexing else {"touch", "event"}

        async def follow_up(pipe: Pipeline, version: int) -> None:
            if session is not None and "touch" in pending:
                await self.touch_commands(pipe, session, agent, {ref: version})
            if "event" in pending:
                self.event_command(pipe, "remember", agent, f"{agent} wrote {ref}", ref=ref)
            if "index" in pending:
                await self.search.queue_index(
                    pipe, f"f:{ref}", f"{ref} {text_of(value)} {' '.join(tag_list)}",
                    kind="fact", agent=agent,
                )  # fmt: skip

        together = expected_version is None and not self.backend.cluster
        new_hash = ""
        for _ in range(MAX_WRITE_ATTEMPTS):
            current = int(current_raw or 0)
            if new_hash and _text(hash_raw) == new_hash:
                # Our script ran but its reply was lost (e.g. a retried timeout): done.
                new = current
                break
            if expected_version is not None and expected_version != current:
                raise VersionConflict(
                    f"{ref} is at version {current}, not {expected_version}; nothing was written",
                    ref=ref,
                    current_version=current,
                )
            prev_hash = _text(hash_raw) or GENESIS_HASH
            new = current + 1
            body = version_body(
                ref=ref, version=new, value=value, author=agent, session=session,
                created_at=created_at, tags=tag_list, prev_hash=prev_hash,
            )  # fmt: skip
            new_hash = digest(body)
            fields = {
                "value": packed,
                "author": agent,
                "session": session or "",
                "created_at": created_at,
                "tags": msgpack.packb(tag_list),
                "version": new,
                "hash": new_hash,
                "prev_hash": prev_hash,
                "confidence": repr(confidence),
            }
            keys = [head_key, self.keys.version(ref, new), self.keys.version(ref, current)]
            args = [current, new_hash, repr(confidence), created_at, agent,
                    *[item for pair in fields.items() for item in pair]]  # fmt: skip
            if together:
                pipe = self.redis.pipeline(transaction=False)
                await self.backend.scripts.remember(keys=keys, args=args, client=pipe)
                await follow_up(pipe, new)
                applied, _ = (await pipe.execute())[0]
                pending &= {"touch"}  # event and index are in; the touch may need redoing
                if applied:
                    pending.clear()
            else:
                applied, _ = await self.backend.scripts.remember(keys=keys, args=args)
            if applied:
                break
            current_raw, hash_raw = await self.redis.hmget(head_key, "version", "hash")
        else:
            raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)

        if pending and (session is not None or pending != {"touch"}):
            pipe = self.redis.pipeline(transaction=False)
            await follow_up(pipe, new)
            await pipe.execute()
        return Remembered(
            ref=ref,
            version=new,
            hash=new_hash,
            prev_hash=prev_hash,
            superseded=current or None,
            created_at=created_at,
        )

    def _pack_value(self, value: Any) -> bytes:
        check_depth(value, "value")
        try:
            json.dumps(value, allow_nan=False)
            packed: bytes = msgpack.packb(value)
        except (TypeError, ValueError, OverflowError) as error:
            raise InvalidInput("value", f"must be JSON-compatible data ({error})") from None
        if len(packed) > self.limits.max_value_bytes:
            raise TooLarge(
                f"value: {len(packed)} bytes encoded; the limit is {self.limits.max_value_bytes}",
                field="value",
                limit=self.limits.max_value_bytes,
            )
        return packed

    async def record_outcome(
        self,
        outcome: OutcomeKind,
        outcome_ref: str,
        *,
        agent: str,
        refs: Sequence[str] | None = None,
        session: str | None = None,
        note: str | None = None,
        handoff_id: str | None = None,
    ) -> OutcomeReport:
        """Move the confidence of ``refs`` (default: what ``session`` touched) and log each move.

        Every ref is checked before anything is written, so bad input never half-applies. The
        move applies to the current version; when the caller's session last read an older one,
        the report lists it under ``stale`` (the outcome is still recorded, not refused).
        """
        if outcome not in ("success", "failure"):
            raise InvalidInput("outcome", "must be 'success' or 'failure'")
        if not isinstance(outcome_ref, str) or not outcome_ref.strip():
            raise InvalidInput("outcome_ref", "is required: an external reference like 'RUN-42'")
        if len(outcome_ref) > MAX_OUTCOME_REF:
            raise InvalidInput("outcome_ref", f"is longer than {MAX_OUTCOME_REF} characters")
        if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
            raise InvalidInput("note", f"must be text of at most {MAX_NOTE} characters")
        agent = check_agent(agent)
        session = None if session is None else check_session_id(session)
        if refs is None:
            if session is None:
                raise InvalidInput(
                    "refs", "give the refs the outcome is about, or a session that touched them"
                )
            refs = sorted(seen := await self.touched(session))
            if not refs:
                raise InvalidInput("refs", f"session {session} has touched no records; give refs")
        else:
            seen = {} if session is None else await self.touched(session)
        if isinstance(refs, str) or not isinstance(refs, Sequence) or not refs:
            raise InvalidInput("refs", "must be a non-empty list of refs")
        refs = list(dict.fromkeys(check_ref(ref, self.limits.max_ref_length) for ref in refs))

        pipe = self.redis.pipeline(transaction=False)
        for ref in refs:
            pipe.hmget(self.keys.head(ref), "version", "confidence", "outcome_hash")
            pipe.llen(self.keys.outcomes(ref))
        replies = await pipe.execute()
        heads = {ref: (replies[2 * i], replies[2 * i + 1]) for i, ref in enumerate(refs)}
        missing = [ref for ref, (head, _) in heads.items() if head[0] is None]
        if missing:
            raise NotFound(f"unknown refs: {', '.join(missing)}; nothing was changed", refs=missing)

        moves = []
        for ref in refs:
            head, length = heads[ref]
            moves.append(
                await self._apply_outcome(
                    ref, head, length, outcome, outcome_ref, agent, session, note, handoff_id
                )
            )
        pipe = self.redis.pipeline(transaction=False)
        for move in moves:
            self.event_command(
                pipe, "outcome", agent,
                f"{outcome} on {move.ref} ({outcome_ref}): {move.before:.0%} -> {move.after:.0%}",
                ref=move.ref,
            )  # fmt: skip
        await pipe.execute()
        stale = [StaleOutcome(ref=move.ref, seen_version=seen[move.ref], moved_version=move.version)
                 for move in moves if seen.get(move.ref, move.version) < move.version]  # fmt: skip
        return OutcomeReport(outcome=outcome, outcome_ref=outcome_ref, moves=moves, stale=stale)

    async def _apply_outcome(
        self,
        ref: str,
        head: list[bytes | None],
        length: int,
        outcome: OutcomeKind,
        outcome_ref: str,
        agent: str,
        session: str | None,
        note: str | None,
        handoff_id: str | None,
    ) -> OutcomeEntry:
        head_key, log_key = self.keys.head(ref), self.keys.outcomes(ref)
        created_at = utc_now()
        for _ in range(MAX_WRITE_ATTEMPTS):
            version_raw, confidence_raw, prev_raw = head
            before = float(confidence_raw or 0.5)
            body = {
                "after": confidence_rules.moved(before, outcome),
                "agent": agent,
                "before": before,
                "created_at": created_at,
                "handoff_id": handoff_id,
                "note": note,
                "outcome": outcome,
                "outcome_ref": outcome_ref,
                "prev_hash": _text(prev_raw) or GENESIS_HASH,
                "ref": ref,
                "seq": length + 1,
                "session": session,
                "version": int(version_raw or 0),
            }
            entry_hash = digest(body)
            counter = "successes" if outcome == "success" else "failures"
            applied, *_ = await self.backend.scripts.record_outcome(
                keys=[head_key, log_key],
                args=[body["version"], length, repr(body["after"]), counter, entry_hash,
                      msgpack.packb({**body, "hash": entry_hash})],
            )  # fmt: skip
            if applied:
                return OutcomeEntry(**body, hash=entry_hash)
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(head_key, "version", "confidence", "outcome_hash")
            pipe.llen(log_key)
            head, length = await pipe.execute()
            if _text(head[2]) == entry_hash:  # applied, but the reply was lost
                return OutcomeEntry(**body, hash=entry_hash)
        raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)

    async def forget(self, ref: str, *, agent: str, reason: str) -> int:
        """Replace every version's value of ``ref`` by a tombstone (see docs/integrity.md):
        the data is gone, the chain still verifies and shows when, by whom and why."""
        ref = check_ref(ref, self.limits.max_ref_length)
        for _ in range(MAX_WRITE_ATTEMPTS):
            head = await self.redis.hmget(self.keys.head(ref), "version", "forgotten_at")
            if head[0] is None or head[1] is not None:
                raise NotFound(f"no record {ref}" if head[0] is None else f"{ref} was forgotten",
                               ref=ref)  # fmt: skip
            current = int(head[0])
            pipe = self.redis.pipeline(transaction=False)
            for number in range(1, current + 1):
                pipe.hget(self.keys.version(ref, number), "hash")
            hashes = [raw.decode() for raw in await pipe.execute()]
            tombstone = {"at": utc_now(), "by": agent, "reason": reason}
            marks = [digest(tombstone_body(original, tombstone)) for original in hashes]
            applied = await self.backend.scripts.forget_record(
                keys=[self.keys.head(ref), self.keys.version(ref, 0)[:-1]],
                args=[current, tombstone["at"], agent, reason, msgpack.packb(None), *marks],
            )
            if applied:
                await self.search.remove([f"f:{ref}"])
                return current
        raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)

    # -- reading ------------------------------------------------------------------------------

    async def recall(
        self, ref: str, *, version: int | None = None, agent: str | None = None,
        session: str | None = None,
    ) -> RecordVersion:  # fmt: skip
        """The current version of ``ref``, or the one asked for."""
        ref = check_ref(ref, self.limits.max_ref_length)
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or version < 1
        ):
            raise InvalidInput("version", "must be a whole number from 1")
        found = await self._read(ref, version)
        if found is None:
            raise NotFound(f"no record {ref}", ref=ref)
        if not isinstance(found, int) and found.forgotten is not None:
            raise NotFound(f"{ref} was forgotten ({found.forgotten.reason})", ref=ref)
        if isinstance(found, int):
            raise NotFound(
                f"{ref} has no version {version}; its current version is {found}",
                ref=ref, version=version, current_version=found,
            )  # fmt: skip
        if session is not None:
            await self.touch(check_session_id(session), agent or "anonymous",
                              {ref: found.version})  # fmt: skip
        return found

    async def _read(self, ref: str, version: int | None) -> RecordVersion | int | None:
        """One round trip: the version, the current version number if it is missing, or None."""
        reply = await self.backend.scripts.recall(
            keys=[self.keys.head(ref), self.keys.version(ref, 0)[:-1]],
            args=["" if version is None else version],
        )
        if not reply:
            return None
        head, fields = _pairs(reply[0]), _pairs(reply[1])
        current = int(head[b"version"])
        if not fields:
            return current
        return self._version(ref, fields, head, current)

    @staticmethod
    def _version(
        ref: str, fields: dict[bytes, bytes], head: dict[bytes, bytes], current: int
    ) -> RecordVersion:
        number = int(fields[b"version"])
        superseded = fields.get(b"superseded_by")
        confidence = head[b"confidence"] if number == current else fields[b"confidence"]
        return RecordVersion(
            ref=ref,
            version=number,
            value=_unpack(fields[b"value"]),
            author=fields[b"author"].decode(),
            session=fields[b"session"].decode() or None,
            created_at=fields[b"created_at"].decode(),
            tags=_unpack(fields[b"tags"]),
            confidence=float(confidence),
            hash=fields[b"hash"].decode(),
            prev_hash=fields[b"prev_hash"].decode(),
            superseded_by=None if superseded is None else int(superseded),
            current_version=current,
            forgotten=None if b"tombstone_hash" not in fields else Tombstone(
                at=fields[b"forgotten_at"].decode(), by=fields[b"forgotten_by"].decode(),
                reason=fields[b"forgotten_reason"].decode(), hash=fields[b"tombstone_hash"].decode(),
            ),
        )  # fmt: skip

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
    ) -> RecordPage:
        """Current versions in ref order, filtered by scope (and below), tags and confidence.
        With ``query``, only records whose value matches it (BM25), best match first, in one
        page of at most ``limit``."""
        scope = self._check_scope(scope)
        tag_list = check_tags(list(tags), self.limits.max_tags, self.limits.max_tag_length)
        if tags_mode not in ("all", "any"):
            raise InvalidInput("tags_mode", "must be 'all' or 'any'")
        if min_confidence is not None:
            min_confidence = check_confidence(min_confidence, field="min_confidence")
        if isinstance(limit, bool) or not isinstance(limit, int) or not (
            1 <= limit <= self.limits.max_page_size
        ):
            raise InvalidInput("limit", f"must be from 1 to {self.limits.max_page_size}")

        if query is not None:
            return await self._search_records(query, scope, tag_list, tags_mode,
                                              min_confidence, limit)  # fmt: skip
        records: list[RecordVersion] = []
        last = cursor
        async for batch in self._candidate_refs(scope, tag_list, tags_mode, cursor):
            for ref, record in zip(batch, await self.read_versions([(ref, None) for ref in batch]), strict=True):
                last = ref
                if record is None:
                    continue
                if min_confidence is not None and record.confidence < min_confidence:
                    continue
                if tag_list and not _tags_match(record.tags, tag_list, tags_mode):
                    continue
                records.append(record)
                if len(records) == limit:
                    more = await self._has_more(scope, tag_list, tags_mode, last)
                    return RecordPage(records=records, next_cursor=last if more else None)
        return RecordPage(records=records, next_cursor=None)

    async def _search_records(
        self, query: str, scope: str | None, tags: list[str], tags_mode: str,
        min_confidence: float | None, limit: int,
    ) -> RecordPage:  # fmt: skip
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", "must be non-empty text")
        filtered = scope is not None or tags or min_confidence is not None
        # Scope, tags and confidence are checked on the records: look further down the ranking.
        wanted = self.limits.max_page_size if filtered else limit
        hits = await self.search.search(query, limit=wanted, kinds=["fact"])
        refs = [hit.doc[2:] for hit in hits]
        found = await self.read_versions([(ref, None) for ref in refs])
        records = [
            record for ref, record in zip(refs, found, strict=True)
            if record is not None and record.forgotten is None
            and (scope is None or ref.startswith(f"{scope}/"))
            and (min_confidence is None or record.confidence >= min_confidence)
            and (not tags or _tags_match(record.tags, tags, tags_mode))
        ]  # fmt: skip
        return RecordPage(records=records[:limit], next_cursor=None)

    def _check_scope(self, scope: str | None) -> str | None:
        if scope is None:
            return None
        scope = scope.rstrip("/")
        check_ref(f"{scope}/x", self.limits.max_ref_length, field="scope")
        return scope

    async def _has_more(
        self, scope: str | None, tags: list[str], tags_mode: str, after: str | None
    ) -> bool:
        async for batch in self._candidate_refs(scope, tags, tags_mode, after, batch=1):
            return bool(batch)
        return False

    async def _candidate_refs(
        self, scope: str | None, tags: list[str], tags_mode: str, after: str | None,
        batch: int = BATCH,
    ) -> AsyncIterator[list[str]]:  # fmt: skip
        """Refs in lexicographic order strictly after ``after``, within ``scope``."""
        low = f"[{scope}/" if scope else "-"
        high = f"({scope}0" if scope else "+"  # "0" sorts right after "/"
        if tags:
            sets = [set(await self.redis.smembers(self.keys.tag(tag))) for tag in tags]
            chosen = set.intersection(*sets) if tags_mode == "all" else set.union(*sets)
            refs = sorted(
                ref
                for ref in (raw.decode() for raw in chosen)
                if (not scope or ref.startswith(f"{scope}/")) and (after is None or ref > after)
            )
            for start in range(0, len(refs), batch):
                yield refs[start : start + batch]
            return
        if after is not None:
            low = f"({after}"
        while True:
            raw = await self.redis.zrangebylex(self.keys.refs, low, high, start=0, num=batch)
            if not raw:
                return
            refs = [item.decode() for item in raw]
            yield refs
            low = f"({refs[-1]}"

    async def read_versions(
        self, wanted: Sequence[tuple[str, int | None]],
        also: Callable[[Pipeline], None] | None = None,
    ) -> list[RecordVersion | None]:  # fmt: skip
        """Many (ref, version or None for current) reads in one round trip, with the plain
        commands ``also`` queues; None where the record or version does not exist."""
        replies = await self.backend.eval_many([
            (self.backend.scripts.recall, [self.keys.head(ref), self.keys.version(ref, 0)[:-1]],
             ["" if version is None else version])
            for ref, version in wanted
        ], also)  # fmt: skip
        found: list[RecordVersion | None] = []
        for (ref, _), reply in zip(wanted, replies, strict=True):
            if not reply or not reply[1]:
                found.append(None)
                continue
            head = _pairs(reply[0])
            found.append(self._version(ref, _pairs(reply[1]), head, int(head[b"version"])))
        return found

    async def history(self, ref: str) -> History:
        """Every version of ``ref``, oldest first, each with whether its chain link verifies."""
        ref = check_ref(ref, self.limits.max_ref_length)
        head = await self.redis.hgetall(self.keys.head(ref))
        if not head:
            raise NotFound(f"no record {ref}", ref=ref)
        current = int(head[b"version"])
        checker = ChainChecker(VERSION_FIELDS)
        versions = []
        async for fields in self._versions(ref, current):
            record = self._version(ref, fields, head, current)
            problems = checker.check(_hashed_view(record))
            versions.append(HistoryEntry(**msgspec_fields(record), chain_ok=not problems))
        return History(
            ref=ref,
            current_version=current,
            confidence=float(head[b"confidence"]),
            successes=int(head.get(b"successes", 0)),
            failures=int(head.get(b"failures", 0)),
            versions=versions,
        )

    async def _versions(self, ref: str, current: int) -> AsyncIterator[dict[bytes, bytes]]:
        """The stored hashes of versions 1..current, fetched in pipelined batches."""
        for start in range(1, current + 1, BATCH):
            pipe = self.redis.pipeline(transaction=False)
            for number in range(start, min(start + BATCH, current + 1)):
                pipe.hgetall(self.keys.version(ref, number))
            for fields in await pipe.execute():
                yield fields

    async def outcomes(self, ref: str) -> list[OutcomeEntry]:
        """The record's outcomes log, oldest first."""
        ref = check_ref(ref, self.limits.max_ref_length)
        if not await self.redis.exists(self.keys.head(ref)):
            raise NotFound(f"no record {ref}", ref=ref)
        return [
            OutcomeEntry(**_unpack(raw)) for raw in await self.redis.lrange(
                self.keys.outcomes(ref), 0, -1)
        ]  # fmt: skip

    # -- stats and verification ---------------------------------------------------------------

    async def stats(
        self,
        *,
        verify: bool = False,
        scope: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Stats:
        """Counts and average confidence; with ``verify``, every chain rechecked.

        Records are read in batches, so memory stays flat however many versions there are;
        ``on_progress(records_done, records_total)`` is called after each batch.
        """
        scope = self._check_scope(scope)
        total = await self.redis.zcard(self.keys.refs) if on_progress else 0
        seen = 0
        refs = versions = outcomes = 0
        confidence_sum = 0.0
        broken: list[BrokenLink] = []
        checked_versions = checked_outcomes = 0
        async for batch in self._candidate_refs(scope, [], "all", None):
            pipe = self.redis.pipeline(transaction=False)
            for ref in batch:
                pipe.hmget(self.keys.head(ref), "version", "confidence")
                pipe.llen(self.keys.outcomes(ref))
            replies = await pipe.execute()
            short: list[tuple[str, int, int]] = []  # records checked together, one round trip
            short_links = 0
            for ref, (version, confidence), length in zip(
                batch, replies[::2], replies[1::2], strict=True
            ):
                if version is None:
                    continue
                refs += 1
                versions += int(version)
                outcomes += length
                confidence_sum += float(confidence)
                if verify:
                    checked_versions += int(version)
                    checked_outcomes += length
                    if int(version) + length >= BATCH:
                        broken += [link async for link in self.verify_record(ref, int(version))]
                    else:
                        short.append((ref, int(version), length))
                        short_links += int(version) + length
                    if short_links >= BATCH:
                        broken += await self._verify_records(short)
                        short, short_links = [], 0
            if short:
                broken += await self._verify_records(short)
            seen += len(batch)
            if on_progress:
                on_progress(seen, total)
        agents = await self.redis.scard(self.keys.agents)
        return Stats(
            namespace=self.namespace,
            refs=refs,
            versions=versions,
            agents=agents,
            outcomes=outcomes,
            average_confidence=confidence_sum / refs if refs else None,
            verified=verify,
            checked_versions=checked_versions if verify else None,
            checked_outcomes=checked_outcomes if verify else None,
            broken=broken if verify else None,
        )

    async def verify_record(self, ref: str, current: int) -> AsyncIterator[BrokenLink]:
        """Recompute one record's version chain and outcomes chain; yield each broken link.
        The versions are read in pipelined batches (memory stays flat for long histories)."""
        check = _ChainCheck(ref)
        async for fields in self._versions(ref, current):
            for link in check.version(fields):
                yield link
        for link in check.outcomes(await self.redis.lrange(self.keys.outcomes(ref), 0, -1)):
            yield link

    async def _verify_records(self, records: list[tuple[str, int, int]]) -> list[BrokenLink]:
        """Check several short records — (ref, versions, outcomes) — with one pipeline."""
        pipe = self.redis.pipeline(transaction=False)
        for ref, current, outcomes in records:
            for number in range(1, current + 1):
                pipe.hgetall(self.keys.version(ref, number))
            if outcomes:
                pipe.lrange(self.keys.outcomes(ref), 0, -1)
        replies = iter(await pipe.execute())
        broken: list[BrokenLink] = []
        for ref, current, outcomes in records:
            check = _ChainCheck(ref)
            for _ in range(current):
                broken += check.version(next(replies))
            broken += check.outcomes(next(replies) if outcomes else [])
        return broken

    # -- sessions -----------------------------------------------------------------------------

    async def touched(self, session_id: str) -> dict[str, int]:
        """The refs a session read or wrote, with the version it last saw of each."""
        raw = await self.redis.hgetall(self.keys.session_touched(check_session_id(session_id)))
        return {ref.decode(): int(version) for ref, version in raw.items()}

    async def touch(
        self, session_id: str, agent: str, seen: dict[str, int], *, listed: bool = False
    ) -> None:
        """Record activity and what a session saw; a session id used for the first time is
        created, an abandoned session is reopened. A session is listed (sessions, "where
        were we") once it holds something: a ref it saw, or ``listed`` (started with a
        working directory, or given an observation)."""
        pipe = self.redis.pipeline(transaction=False)
        await self.touch_commands(pipe, session_id, agent, seen, listed=listed)
        await pipe.execute()

    async def touch_commands(
        self, pipe: Pipeline, session_id: str, agent: str, seen: dict[str, int], *,
        listed: bool = False,
    ) -> None:  # fmt: skip
        now_us = time.time_ns() // 1000
        keys = [self.keys.session(session_id), self.keys.session_touched(session_id)]
        args = [agent, utc_now(), *[item for pair in seen.items() for item in pair]]
        if self.backend.cluster:
            await self.backend.scripts.touch_session(keys=keys, args=args)
        else:
            await self.backend.scripts.touch_session(keys=keys, args=args, client=pipe)
        if seen or listed:
            pipe.zadd(self.keys.sessions, {session_id: now_us}, nx=True)
        pipe.zadd(self.keys.active_sessions, {session_id: now_us})
        pipe.sadd(NAMESPACES, self.namespace)  # so the periodic sweep visits it

    # -- activity -----------------------------------------------------------------------------

    def event_command(
        self, pipe: Pipeline, kind: str, agent: str, text: str, *, ref: str | None = None,
        packet: str | None = None,
    ) -> None:  # fmt: skip
        """Queue an activity event on ``pipe``: the dashboard's feed and its live updates.
        Events are a capped stream written after the change they describe (a crash in
        between loses the event, never data)."""
        fields = {"kind": kind, "agent": agent, "text": text, "ref": ref or "",
                  "packet": packet or "", "at": utc_now()}  # fmt: skip
        pipe.xadd(self.keys.events, fields, maxlen=EVENTS_KEPT, approximate=True)  # type: ignore[arg-type]

    async def emit(
        self, kind: str, agent: str, text: str, *, ref: str | None = None,
        packet: str | None = None,
    ) -> None:  # fmt: skip
        pipe = self.redis.pipeline(transaction=False)
        self.event_command(pipe, kind, agent, text, ref=ref, packet=packet)
        await pipe.execute()


class _ChainCheck:
    """One record's chains checked link by link: versions in order, then its outcomes."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.number = 0
        self.checker = ChainChecker(VERSION_FIELDS)

    def version(self, fields: dict[bytes, bytes]) -> list[BrokenLink]:
        self.number += 1
        if not fields:
            return [BrokenLink(ref=self.ref, chain="versions", version=self.number, kind="hash",
                               expected="a stored version", found="nothing")]  # fmt: skip
        try:
            view = _hashed_view(FactStore._version(self.ref, fields, {}, current=-1))
        except (KeyError, ValueError, msgpack.UnpackException) as error:
            return [BrokenLink(ref=self.ref, chain="versions", version=self.number, kind="hash",
                               expected="a decodable version", found=repr(error))]  # fmt: skip
        return [BrokenLink(ref=self.ref, chain="versions", version=self.number, **problem)
                for problem in self.checker.check(view)]  # fmt: skip

    def outcomes(self, raws: list[bytes]) -> list[BrokenLink]:
        checker = ChainChecker(OUTCOME_FIELDS)
        broken = []
        for raw in raws:
            entry = _unpack(raw)
            broken += [BrokenLink(ref=self.ref, chain="outcomes", version=entry["seq"], **problem)
                       for problem in checker.check(entry)]  # fmt: skip
        return broken


def _tags_match(have: list[str], wanted: list[str], mode: str) -> bool:
    present = set(have)
    if mode == "all":
        return all(tag in present for tag in wanted)
    return any(tag in present for tag in wanted)


def msgspec_fields(record: RecordVersion) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


def _hashed_view(record: RecordVersion) -> dict[str, Any]:
    """The fields of a version that its hash covers, plus the hash itself."""
    body = version_body(
        ref=record.ref, version=record.version, value=record.value, author=record.author,
        session=record.session, created_at=record.created_at, tags=record.tags,
        prev_hash=record.prev_hash,
    )  # fmt: skip
    forgotten = None if record.forgotten is None else msgspec.structs.asdict(record.forgotten)
    return {**body, "hash": record.hash, "forgotten": forgotten}
