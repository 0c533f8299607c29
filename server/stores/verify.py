"""Counting a namespace's records and rechecking every hash chain (``baton verify``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import msgpack
from prometheus_client import Gauge

from baton.server.model.errors import describe
from baton.server.model.integrity import OUTCOME_FIELDS, VERSION_FIELDS, ChainChecker
from baton.server.model.keys import ref_of
from baton.server.model.models import BrokenLink, Stats
from baton.server.runtime import codec
from baton.server.stores.records import BATCH, NamespaceWithRecords
from baton.server.stores.store_base import NamespaceStore

# /metrics: what the last verify in this process found, per namespace.
VERIFY_BROKEN = Gauge(
    "baton_verify_broken_links",
    "Broken hash-chain links found by the last verify in this process",
    ["namespace"],
)
VERIFY_CHECKED = Gauge(
    "baton_verify_checked_versions",
    "Versions checked by the last verify in this process",
    ["namespace"],
)


class Verifier(NamespaceStore):
    """Stats and chain verification of one namespace, read in batches: memory stays flat
    however many versions there are."""

    ns: NamespaceWithRecords

    async def stats(
        self,
        *,
        verify: bool = False,
        scope: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Stats:
        """Counts and average confidence; with ``verify``, every chain rechecked.
        ``on_progress(records_done, records_total)`` is called after each batch."""
        records = self.ns.records
        scope = records.check_scope(scope)
        total = await self.redis.zcard(self.keys.refs) if on_progress else 0
        seen = refs = versions = outcomes = 0
        confidence_sum = 0.0
        broken: list[BrokenLink] = []
        async for batch in records.candidate_refs(scope, [], "all", None):
            heads = self.ns.batch()
            for ref in batch:
                heads.pipe.hmget(self.keys.head(ref), *HEAD_FIELDS)
                heads.pipe.llen(self.keys.outcomes(ref))
            replies = await heads.execute()
            short: list[tuple[str, Head, int]] = []  # records checked together, one round trip
            short_links = 0
            for ref, fields, length in zip(batch, replies[::2], replies[1::2], strict=True):
                if fields[0] is None:
                    continue
                head = Head.of(fields)
                refs += 1
                versions += head.version
                outcomes += length
                confidence_sum += head.confidence
                if not verify:
                    continue
                if head.version + length >= BATCH:
                    broken += await self._settled(
                        [link async for link in self.verify_record(ref, head)]
                    )
                else:
                    short.append((ref, head, length))
                    short_links += head.version + length
                if short_links >= BATCH:
                    broken += await self._settled(await self._verify_records(short))
                    short, short_links = [], 0
            if short:
                broken += await self._settled(await self._verify_records(short))
            seen += len(batch)
            if on_progress:
                on_progress(seen, total)
        if verify:
            for ref, head in await self.unindexed(scope):
                refs += 1
                versions += head.version
                broken.append(
                    BrokenLink(
                        ref=ref,
                        chain="versions",
                        version=head.version,
                        kind="unindexed",
                        expected="listed in the refs index",
                        found="stored but missing from it: hidden from listings",
                    )
                )
                broken += await self._settled(
                    [link async for link in self.verify_record(ref, head)]
                )
            VERIFY_BROKEN.labels(self.ns.name).set(len(broken))
            VERIFY_CHECKED.labels(self.ns.name).set(versions)
        return Stats(
            namespace=self.ns.name,
            refs=refs,
            versions=versions,
            agents=await self.redis.scard(self.keys.agents),
            outcomes=outcomes,
            average_confidence=confidence_sum / refs if refs else None,
            verified=verify and not broken,
            checked_versions=versions if verify else None,
            checked_outcomes=outcomes if verify else None,
            broken=broken if verify else None,
        )

    async def unindexed(self, scope: str | None) -> list[tuple[str, Head]]:
        """Records stored (a head key) but missing from the refs index, with their heads:
        found by SCAN over what is stored, since the index is what someone with Redis
        access would edit to hide a record."""
        found: list[tuple[str, Head]] = []
        keys = [codec.text(key) async for key in self.redis.scan_iter(self.keys.heads, 1000)]
        for start in range(0, len(keys), BATCH):
            refs = [ref_of(key) for key in keys[start : start + BATCH]]
            refs = [ref for ref in refs if scope is None or ref.startswith(f"{scope}/")]
            batch = self.ns.batch()
            for ref in refs:
                batch.pipe.zscore(self.keys.refs, ref)
                batch.pipe.hmget(self.keys.head(ref), *HEAD_FIELDS)
            replies = await batch.execute()
            found += [
                (ref, Head.of(fields))
                for ref, score, fields in zip(refs, replies[::2], replies[1::2], strict=True)
                if score is None and fields[0] is not None
            ]
        return sorted(found, key=lambda pair: pair[0])

    async def verify_record(self, ref: str, head: Head) -> AsyncIterator[BrokenLink]:
        """Recompute one record's version chain and outcomes chain, then hold its head to
        them; yield each broken link. The versions are read in pipelined batches (memory
        stays flat for long histories)."""
        check = _ChainCheck(ref, head)
        async for fields in self.ns.records.versions(ref, head.version):
            for link in check.version(fields):
                yield link
        outcomes = codec.values(await self.redis.lrange(self.keys.outcomes(ref), 0, -1))
        for link in check.outcomes(outcomes):
            yield link
        for link in check.head(await self.redis.exists(self.keys.version(ref, head.version + 1))):
            yield link

    async def _settled(self, links: list[BrokenLink]) -> list[BrokenLink]:
        """The links that stay broken when each record they name is checked again as of one
        instant (:meth:`_snapshot`): a head, its chains and the version past it are read in
        separate round trips, so a live write in between looks like a break."""
        settled: list[BrokenLink] = []
        for ref in dict.fromkeys(link.ref for link in links):
            settled += await self._snapshot(ref)
        return settled

    async def _snapshot(self, ref: str) -> list[BrokenLink]:
        """One record's chains and head checked as of one instant: the versions up to the
        head read first are read in batches (a write only adds versions), then one script
        (``record_snapshot.lua``) reads the head, the outcomes log and the versions past
        those at once. A record forgotten meanwhile is no longer there to be broken."""
        head_key = self.keys.head(ref)
        read = int(await self.redis.hget(head_key, "version") or 0)
        versions = [fields async for fields in self.ns.records.versions(ref, read)]
        while True:
            later = range(read + 1, read + SNAPSHOT_MARGIN + 2)
            keys = [head_key, self.keys.outcomes(ref), *(self.keys.version(ref, n) for n in later)]
            fields, outcomes, beyond = await self.scripts.record_snapshot(
                keys=keys, args=list(HEAD_FIELDS)
            )
            if fields[0] is None:
                return []
            head = Head.of(fields)
            if head.version <= read + SNAPSHOT_MARGIN:
                break
            # more writes landed than the margin holds: read up to this head, look again
            versions += [
                fields async for fields in self.ns.records.versions(ref, head.version, read + 1)
            ]
            read = head.version
        versions += [codec.pairs(each) for each in beyond]
        check = _ChainCheck(ref, head)
        broken: list[BrokenLink] = []
        for stored in versions[: head.version]:
            broken += check.version(stored)
        broken += check.outcomes(codec.values(outcomes))
        return broken + check.head(int(bool(versions[head.version])))

    async def _verify_records(self, records: list[tuple[str, Head, int]]) -> list[BrokenLink]:
        """Check several short records — (ref, head, outcomes) — with one pipeline."""
        batch = self.ns.batch()
        for ref, head, outcomes in records:
            for number in range(1, head.version + 1):
                batch.pipe.hgetall(self.keys.version(ref, number))
            if outcomes:
                batch.pipe.lrange(self.keys.outcomes(ref), 0, -1)
            batch.pipe.exists(self.keys.version(ref, head.version + 1))
        replies = iter(await batch.execute())
        broken: list[BrokenLink] = []
        for ref, head, outcomes in records:
            check = _ChainCheck(ref, head)
            for _ in range(head.version):
                broken += check.version(next(replies))
            broken += check.outcomes(next(replies) if outcomes else [])
            broken += check.head(next(replies))
        return broken


# What a record's head holds beside its chains; verify holds each to the chains.
# Versions a snapshot reads past those read before it: writes landing in between.
SNAPSHOT_MARGIN = 32
HEAD_FIELDS = ("version", "confidence", "hash", "outcome_hash", "successes", "failures")
OUTCOME_HEAD = frozenset({"successes", "failures", "outcome_hash", "confidence"})


@dataclass(frozen=True, slots=True)
class Head:
    """A record's head: its current version and what outcomes made of it."""

    version: int
    confidence: float
    hash: str
    outcome_hash: str
    successes: int
    failures: int

    @classmethod
    def of(cls, fields: list[bytes | None]) -> Head:
        """From ``HMGET head HEAD_FIELDS`` (a head that exists)."""
        version, confidence, hash_, outcome_hash, successes, failures = fields
        return cls(
            version=int(version or 0),
            confidence=float(confidence or 0.5),
            hash=codec.text(hash_) or "",
            outcome_hash=codec.text(outcome_hash) or "",
            successes=int(successes or 0),
            failures=int(failures or 0),
        )


class _ChainCheck:
    """One record's chains checked link by link: versions in order, then its outcomes,
    then its head against both."""

    def __init__(self, ref: str, head: Head) -> None:
        self.ref = ref
        self.stored_head = head
        self.number = 0
        self.checker = ChainChecker(VERSION_FIELDS)
        self.last_hash = ""  # of the newest version read
        self.written_confidence: float | None = None  # the newest version's, as stored
        self.entries: list[dict[str, Any]] = []

    def version(self, fields: dict[bytes, bytes]) -> list[BrokenLink]:
        self.number += 1
        self.last_hash = codec.text(fields.get(b"hash")) or ""
        confidence = fields.get(b"confidence")
        self.written_confidence = float(confidence) if confidence else None
        if not fields:
            return [self._broken("a stored version", "nothing")]
        try:
            view = codec.hashed_view(codec.record_version(self.ref, fields, {}, current=-1))
        except (KeyError, ValueError, msgpack.UnpackException) as error:
            return [self._broken("a decodable version", describe(error))]
        return [
            BrokenLink(ref=self.ref, chain="versions", version=self.number, **problem)
            for problem in self.checker.check(view, floatless=codec.plain_version(fields))
        ]

    def _broken(self, expected: str, found: str) -> BrokenLink:
        return BrokenLink(
            ref=self.ref,
            chain="versions",
            version=self.number,
            kind="hash",
            expected=expected,
            found=found,
        )

    def outcomes(self, raws: list[bytes]) -> list[BrokenLink]:
        checker = ChainChecker(OUTCOME_FIELDS)
        broken = []
        for raw in raws:
            entry = codec.unpack(raw)
            self.entries.append(entry)
            broken += [
                BrokenLink(ref=self.ref, chain="outcomes", version=entry["seq"], **problem)
                for problem in checker.check(entry)
            ]
        return broken

    def head(self, beyond: int) -> list[BrokenLink]:
        """The head held to the chains just read: its version is the last one stored, its
        hash that version's, its counters and outcome hash those of the outcomes log, and
        its confidence where the last outcome on the current version left it (or, with
        none, what the version was written with). ``beyond``: whether a version past the
        head's is stored (the head was set back to hide it)."""
        head = self.stored_head
        successes = sum(entry.get("outcome") == "success" for entry in self.entries)
        last = self.entries[-1] if self.entries else None
        on_current = [e for e in self.entries if e.get("version") == head.version]
        expected: dict[str, tuple[object, object]] = {
            "version": (head.version + 1 if beyond else head.version, head.version),
            "hash": (self.last_hash, head.hash),
            "successes": (successes, head.successes),
            "failures": (len(self.entries) - successes, head.failures),
            "outcome_hash": (last.get("hash", "") if last else "", head.outcome_hash),
            "confidence": (
                on_current[-1].get("after") if on_current else self.written_confidence,
                head.confidence,
            ),
        }
        return [
            BrokenLink(
                ref=self.ref,
                chain="outcomes" if name in OUTCOME_HEAD else "versions",
                version=head.version,
                kind="head",
                expected=f"{name} {want}",
                found=f"{name} {got}",
            )
            for name, (want, got) in expected.items()
            if want is not None and want != got
        ]
