"""LangGraph threads: the checkpoints and pending writes of ``BatonSaver`` (docs/langgraph.md).

Every key of one thread is in the thread's hash slot (``Keys.thread``), so each change to a
thread is one script: a put (a checkpoint, or a whole thread copied), a task's writes, a
read of checkpoints with their writes, a drop (runs, all but the latest, the thread). The
one index across threads, which threads a run wrote in, is written before the thread's own
keys and cleaned after them, so it may name a thread that no longer holds the run, never
miss one that does.

Each checkpoint's entry carries a sha256 over its namespace, id, parent, parent's hash,
time and the bytes of its checkpoint and metadata: a thread's history is a hash tree, and
:meth:`ThreadStore.verify` finds an entry changed, or a parent replaced, behind Baton's back.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, StateConflict
from baton.server.model.integrity import digest
from baton.server.model.thread_models import (
    Blob,
    CheckpointPage,
    CheckpointsCopied,
    CheckpointsRemoved,
    CheckpointStored,
    ListCheckpointsInput,
    PendingWrite,
    PutCheckpointInput,
    PutWritesInput,
    StoredCheckpoint,
    ThreadProblem,
    ThreadVerified,
    WritesStored,
)
from baton.server.runtime import codec

if TYPE_CHECKING:
    from baton.server.model.keys import Thread
    from baton.server.stores.store_base import NamespaceParts

SEP = "\0"
LAST = b"\xff"  # after every byte a member or field holds (UTF-8 never has this one)
BATCH = 100  # checkpoints read in one script call while a listing filters
# Metadata a DeltaChannel leaves on its checkpoints (LangGraph's Python and JS runtimes): its
# value lives in the writes of earlier checkpoints, which keep_latest would drop.
DELTA_MARKS = frozenset({"counters_since_delta_snapshot", "delta_writes_versioned"})
DELTA_REFUSED = -1  # drop_checkpoints.lua's answer to keep_latest on such a thread


class Entry(msgspec.Struct, array_like=True):
    """A checkpoint as a thread's ``entries`` hash keeps it (msgpack)."""

    checkpoint: Blob
    metadata: Blob
    filters: dict[str, Any]
    parent_id: str | None
    run_id: str | None
    created_at: str
    hash: str
    parent_hash: str | None


class StoredWrite(msgspec.Struct, array_like=True):
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Blob


ENTRY = msgspec.msgpack.Decoder(Entry)
WRITE = msgspec.msgpack.Decoder(StoredWrite)
PACK = msgspec.msgpack.Encoder()


def thread_digest(thread_id: str) -> str:
    """The part of a thread's keys that names it (any text, in a fixed length)."""
    return hashlib.sha256(thread_id.encode()).hexdigest()[:32]


def member(checkpoint_ns: str, checkpoint_id: str) -> str:
    return f"{checkpoint_ns}{SEP}{checkpoint_id}"


def entry_hash(checkpoint_ns: str, checkpoint_id: str, entry: Entry) -> str:
    """The sha256 an entry carries: over everything it says but the metadata's JSON values
    (a view of the metadata it hashes) and the run (part of the metadata)."""
    return digest(
        {
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_id": entry.parent_id,
            "parent_hash": entry.parent_hash,
            "created_at": entry.created_at,
            "checkpoint": [
                entry.checkpoint.type,
                hashlib.sha256(entry.checkpoint.data).hexdigest(),
            ],
            "metadata": [entry.metadata.type, hashlib.sha256(entry.metadata.data).hexdigest()],
        }
    )


def _filters_match(entry: Entry, wanted: dict[str, Any]) -> bool:
    """Whether the entry's metadata has each wanted value (None: also when it lacks the key,
    as LangGraph's own saver matches)."""
    return all(entry.filters.get(key) == value for key, value in wanted.items())


class ThreadStore:
    """The LangGraph threads of one namespace."""

    def __init__(self, ns: NamespaceParts) -> None:
        self.ns = ns
        self.redis = ns.redis
        self.scripts = ns.scripts
        self.keys = ns.keys

    def _thread(self, thread_id: str) -> Thread:
        return self.keys.thread(thread_digest(thread_id))

    async def put(self, given: PutCheckpointInput) -> CheckpointStored:
        """Store one checkpoint (one of the same id is replaced), chained to its parent's
        hash as stored now."""
        await self.ns.admit()
        thread = self._thread(given.thread_id)
        parent_hash = None
        if given.parent_id is not None:
            raw = await self.redis.hget(
                thread.entries, member(given.checkpoint_ns, given.parent_id)
            )
            parent_hash = ENTRY.decode(cast(bytes, raw)).hash if raw else None
        entry = Entry(
            checkpoint=given.checkpoint,
            metadata=given.metadata,
            filters=given.filters,
            parent_id=given.parent_id,
            run_id=given.run_id,
            created_at=utc_now(),
            hash="",
            parent_hash=parent_hash,
        )
        entry.hash = entry_hash(given.checkpoint_ns, given.checkpoint_id, entry)
        try:
            PACK.encode(entry.filters)
        except OverflowError:
            raise InvalidInput("filters", "numbers must fit in 64 bits") from None
        at = member(given.checkpoint_ns, given.checkpoint_id)
        await self._store(given.thread_id, thread, [(at, entry)], [])
        return CheckpointStored(
            thread_id=given.thread_id,
            checkpoint_ns=given.checkpoint_ns,
            checkpoint_id=given.checkpoint_id,
            hash=entry.hash,
        )

    async def _store(
        self,
        thread_id: str,
        thread: Thread,
        entries: list[tuple[str, Entry]],
        writes: list[tuple[str, StoredWrite]],
    ) -> None:
        runs = {entry.run_id for _, entry in entries if entry.run_id is not None}
        if runs:  # the index across threads first: it may name a thread too many, never too few
            await self.redis.zadd(
                self.keys.thread_runs, {f"{run}{SEP}{thread_id}": 0 for run in runs}
            )
        args: list[Any] = [len(entries)]
        for at, entry in entries:
            run = "" if entry.run_id is None else f"{entry.run_id}{SEP}{at}"
            args += [
                at,
                PACK.encode(entry),
                run,
                "1" if DELTA_MARKS & entry.filters.keys() else "0",
            ]
        for field, write in writes:
            args += [field, PACK.encode(write)]
        await self.scripts.put_checkpoints(keys=thread.all, args=args)

    async def put_writes(self, given: PutWritesInput) -> WritesStored:
        """Store a task's writes: one of a regular index already stored is kept, a special
        one (a negative index) replaced."""
        if not given.writes:
            return WritesStored(stored=0)
        await self.ns.admit()
        thread = self._thread(given.thread_id)
        at = member(given.checkpoint_ns, given.checkpoint_id)
        args: list[Any] = []
        for write in given.writes:
            stored = StoredWrite(
                given.task_id, given.task_path, write.idx, write.channel, write.value
            )
            field = f"{at}{SEP}{given.task_id}{SEP}{write.idx}"
            args += [field, PACK.encode(stored), "1" if write.idx < 0 else "0"]
        stored_count = await self.scripts.put_writes(
            keys=[thread.writes, thread.write_index], args=args
        )
        return WritesStored(stored=int(stored_count))

    async def _read(
        self, thread: Thread, args: list[bytes | str | int]
    ) -> list[tuple[str, Entry, list[StoredWrite]]]:
        """``read_checkpoints.lua``'s answer (``args``: its ARGV), decoded."""
        reply = await self.scripts.read_checkpoints(keys=thread.all[:4], args=args)
        return [
            (raw_member.decode(), ENTRY.decode(raw_entry), [WRITE.decode(w) for w in raw_writes])
            for raw_member, raw_entry, raw_writes in reply
        ]

    async def page(self, given: ListCheckpointsInput) -> CheckpointPage:
        """A page of a thread's checkpoints, newest first, that pass the input's filters: at
        most ``limit`` (and the server's page size), with the cursor of the next page."""
        limit = min(given.limit, self.ns.limits.max_page_size)
        if given.cursor is not None and SEP not in given.cursor:
            raise InvalidInput("cursor", "is not a cursor this listing gave")
        thread = self._thread(given.thread_id)
        found: list[StoredCheckpoint] = []
        batch = BATCH if given.filter else limit  # unfiltered, a page reads what it shows
        async for at, entry, writes in self._candidates(thread, given, batch):
            if _filters_match(entry, given.filter):
                checkpoint_ns, _, checkpoint_id = at.partition(SEP)
                found.append(_stored(given.thread_id, checkpoint_ns, checkpoint_id, entry, writes))
                if len(found) == limit:
                    return CheckpointPage(checkpoints=found, cursor=at)
        return CheckpointPage(checkpoints=found)

    async def _candidates(
        self, thread: Thread, given: ListCheckpointsInput, batch: int
    ) -> AsyncIterator[tuple[str, Entry, list[StoredWrite]]]:
        """The checkpoints the listing's namespace, id, ``before`` and cursor let through,
        newest first (across namespaces: by id, as LangGraph's SQL savers order them), read
        ``batch`` at a time."""
        ns = given.checkpoint_ns
        if ns is None:
            names = codec.members(await self.redis.zrange(thread.checkpoints, 0, -1))
            parts = (name.decode().partition(SEP) for name in names)
            ordered = sorted(
                (
                    (checkpoint_id, checkpoint_ns)
                    for checkpoint_ns, _, checkpoint_id in parts
                    if given.checkpoint_id in (None, checkpoint_id)
                    and (given.before is None or checkpoint_id < given.before)
                ),
                reverse=True,
            )
            if given.cursor is not None:
                cursor_ns, _, cursor_id = given.cursor.partition(SEP)
                ordered = [key for key in ordered if key < (cursor_id, cursor_ns)]
            for start in range(0, len(ordered), batch):
                wanted = [member(at_ns, at_id) for at_id, at_ns in ordered[start : start + batch]]
                for checkpoint in await self._read(thread, ["members", *wanted]):
                    yield checkpoint
            return
        if given.checkpoint_id is not None:
            high = low = b"[" + member(ns, given.checkpoint_id).encode()
        else:
            low = b"[" + member(ns, "").encode()
            high = b"(" + member(ns, given.before).encode() if given.before else low + LAST
        if given.cursor is not None:
            high = b"(" + given.cursor.encode()
        while True:
            batch_read = await self._read(thread, ["range", high, low, batch])
            for checkpoint in batch_read:
                yield checkpoint
            if len(batch_read) < batch:
                return
            high = b"(" + batch_read[-1][0].encode()

    async def prune(self, thread_ids: Iterable[str], *, keep_latest: bool) -> CheckpointsRemoved:
        """Each thread's checkpoints but the newest of each namespace (``keep_latest``), or
        all of them. ``keep_latest`` refuses the whole request, before pruning any, when a
        thread uses a DeltaChannel (as LangGraph's Postgres saver does): that channel's value
        lives in the writes of the checkpoints it would drop."""
        threads = list(dict.fromkeys(thread_ids))
        if keep_latest:
            counts = self.ns.batch()
            for thread_id in threads:
                counts.pipe.zcard(self._thread(thread_id).deltas)
            if delta := [t for t, n in zip(threads, await counts.execute(), strict=True) if n]:
                raise _delta_refused(delta)
        removed = 0
        for thread_id in threads:
            removed += await self._drop(thread_id, ["all_but_latest" if keep_latest else "all"])
        return CheckpointsRemoved(removed=removed)

    async def delete_runs(self, run_ids: Iterable[str]) -> CheckpointsRemoved:
        """The checkpoints the runs wrote, in every thread, with their writes."""
        runs = list(dict.fromkeys(run_ids))
        threads: dict[str, list[str]] = {}
        for run in runs:
            low = f"[{run}{SEP}".encode()
            pairs = await self.redis.zrangebylex(self.keys.thread_runs, low, low + LAST)
            for pair in codec.values(pairs):
                threads.setdefault(pair.decode().partition(SEP)[2], []).append(run)
        removed = 0
        for thread_id, thread_runs in threads.items():
            removed += await self._drop(thread_id, ["runs", *thread_runs])
            await self.redis.zrem(
                self.keys.thread_runs, *(f"{run}{SEP}{thread_id}" for run in thread_runs)
            )
        return CheckpointsRemoved(removed=removed)

    async def _drop(self, thread_id: str, args: list[str]) -> int:
        dropped, *gone = await self.scripts.drop_checkpoints(
            keys=self._thread(thread_id).all, args=args
        )
        if dropped == DELTA_REFUSED:  # it began to use one since the check
            raise _delta_refused([thread_id])
        if gone:
            await self.redis.zrem(
                self.keys.thread_runs, *(f"{run.decode()}{SEP}{thread_id}" for run in gone)
            )
        return int(dropped)

    async def copy(self, source_id: str, target_id: str) -> CheckpointsCopied:
        """Every checkpoint of ``source_id`` with its writes, under the same ids and hashes,
        into ``target_id`` (read in one step, written in one)."""
        batch = await self._read(self._thread(source_id), ["range", b"+", b"-", -1])
        if not batch:
            return CheckpointsCopied(copied=0)
        await self.ns.admit()
        writes = [
            (f"{at}{SEP}{write.task_id}{SEP}{write.idx}", write)
            for at, _, at_writes in batch
            for write in at_writes
        ]
        entries = [(at, entry) for at, entry, _ in batch]
        await self._store(target_id, self._thread(target_id), entries, writes)
        return CheckpointsCopied(copied=len(entries))

    async def verify(self, thread_id: str) -> ThreadVerified:
        """Every checkpoint of the thread against its own hash and its parent's."""
        thread = self._thread(thread_id)
        stored: dict[str, Entry] = {}
        async for raw_member, raw_entry in self.redis.hscan_iter(thread.entries, count=BATCH):
            stored[raw_member.decode()] = ENTRY.decode(raw_entry)
        problems, detached = [], 0
        for at, entry in sorted(stored.items()):
            checkpoint_ns, _, checkpoint_id = at.partition(SEP)
            problem = None
            parent = (
                None
                if entry.parent_id is None
                else stored.get(member(checkpoint_ns, entry.parent_id))
            )
            if entry_hash(checkpoint_ns, checkpoint_id, entry) != entry.hash:
                problem = "its entry does not match its hash"
            elif parent is not None and parent.hash != entry.parent_hash:
                problem = "its parent is not the one it was written on"
            elif entry.parent_id is not None and parent is None:
                detached += 1
            if problem:
                problems.append(
                    ThreadProblem(
                        checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id, problem=problem
                    )
                )
        return ThreadVerified(
            thread_id=thread_id,
            checkpoints=len(stored),
            ok=not problems,
            problems=problems,
            detached=detached,
        )


def _delta_refused(thread_ids: list[str]) -> StateConflict:
    return StateConflict(
        "keep_latest cannot prune threads that use a DeltaChannel (its value lives in the "
        f"writes of the checkpoints it would drop): {', '.join(thread_ids)}; prune them with "
        "strategy delete, or not at all"
    )


def _stored(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str, entry: Entry, writes: list[StoredWrite]
) -> StoredCheckpoint:
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_id=entry.parent_id,
        checkpoint=entry.checkpoint,
        metadata=entry.metadata,
        writes=[
            PendingWrite(
                task_id=write.task_id,
                task_path=write.task_path,
                idx=write.idx,
                channel=write.channel,
                value=write.value,
            )
            for write in writes
        ],
        created_at=entry.created_at,
        hash=entry.hash,
        parent_hash=entry.parent_hash,
    )
