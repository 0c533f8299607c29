"""Counting a namespace's records and rechecking every hash chain (``baton verify``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import msgpack
from prometheus_client import Gauge

from baton.server import codec
from baton.server.errors import describe
from baton.server.integrity import OUTCOME_FIELDS, VERSION_FIELDS, ChainChecker
from baton.server.keys import ref_of
from baton.server.models import BrokenLink, Stats
from baton.server.records import BATCH, NamespaceWithRecords
from baton.server.store_base import NamespaceStore

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
                heads.pipe.hmget(self.keys.head(ref), "version", "confidence")
                heads.pipe.llen(self.keys.outcomes(ref))
            replies = await heads.execute()
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
                if not verify:
                    continue
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
        if verify:
            for ref, version in await self.unindexed(scope):
                refs += 1
                versions += version
                broken.append(
                    BrokenLink(
                        ref=ref,
                        chain="versions",
                        version=version,
                        kind="unindexed",
                        expected="listed in the refs index",
                        found="stored but missing from it: hidden from listings",
                    )
                )
                broken += [link async for link in self.verify_record(ref, version)]
            VERIFY_BROKEN.labels(self.ns.name).set(len(broken))
            VERIFY_CHECKED.labels(self.ns.name).set(versions)
        return Stats(
            namespace=self.ns.name,
            refs=refs,
            versions=versions,
            agents=await self.redis.scard(self.keys.agents),
            outcomes=outcomes,
            average_confidence=confidence_sum / refs if refs else None,
            verified=verify,
            checked_versions=versions if verify else None,
            checked_outcomes=outcomes if verify else None,
            broken=broken if verify else None,
        )

    async def unindexed(self, scope: str | None) -> list[tuple[str, int]]:
        """Records stored (a head key) but missing from the refs index, with their versions:
        found by SCAN over what is stored, since the index is what someone with Redis
        access would edit to hide a record."""
        found: list[tuple[str, int]] = []
        keys = [codec.text(key) async for key in self.redis.scan_iter(self.keys.heads, 1000)]
        for start in range(0, len(keys), BATCH):
            refs = [ref_of(key) for key in keys[start : start + BATCH]]
            refs = [ref for ref in refs if scope is None or ref.startswith(f"{scope}/")]
            batch = self.ns.batch()
            for ref in refs:
                batch.pipe.zscore(self.keys.refs, ref)
                batch.pipe.hget(self.keys.head(ref), "version")
            replies = await batch.execute()
            found += [
                (ref, int(version))
                for ref, score, version in zip(refs, replies[::2], replies[1::2], strict=True)
                if score is None and version is not None
            ]
        return sorted(found)

    async def verify_record(self, ref: str, current: int) -> AsyncIterator[BrokenLink]:
        """Recompute one record's version chain and outcomes chain; yield each broken link.
        The versions are read in pipelined batches (memory stays flat for long histories)."""
        check = _ChainCheck(ref)
        async for fields in self.ns.records.versions(ref, current):
            for link in check.version(fields):
                yield link
        outcomes = codec.values(await self.redis.lrange(self.keys.outcomes(ref), 0, -1))
        for link in check.outcomes(outcomes):
            yield link

    async def _verify_records(self, records: list[tuple[str, int, int]]) -> list[BrokenLink]:
        """Check several short records — (ref, versions, outcomes) — with one pipeline."""
        batch = self.ns.batch()
        for ref, current, outcomes in records:
            for number in range(1, current + 1):
                batch.pipe.hgetall(self.keys.version(ref, number))
            if outcomes:
                batch.pipe.lrange(self.keys.outcomes(ref), 0, -1)
        replies = iter(await batch.execute())
        broken: list[BrokenLink] = []
        for ref, current, outcomes in records:
            check = _ChainCheck(ref)
            for _ in range(current):
                broken += check.version(next(replies))
            broken += check.outcomes(next(replies) if outcomes else [])
        return broken


class _ChainCheck:
    """One record's chains checked link by link: versions in order, then its outcomes."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.number = 0
        self.checker = ChainChecker(VERSION_FIELDS)

    def version(self, fields: dict[bytes, bytes]) -> list[BrokenLink]:
        self.number += 1
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
            broken += [
                BrokenLink(ref=self.ref, chain="outcomes", version=entry["seq"], **problem)
                for problem in checker.check(entry)
            ]
        return broken
