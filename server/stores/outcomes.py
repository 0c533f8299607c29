"""Outcomes: what happened after a decision moves the confidence of the facts behind it.

``record`` checks the outcome and reads every ref first, then (with ``handoff_id``)
completes the packet the decision came from, then appends one hash-chained entry to each
ref's outcome log and moves its confidence (``baton.server.model.confidence``), strictly inside
0..1, keeping the before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from baton.server.model import confidence as confidence_rules
from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, NotFound, StoreUnavailable, describe
from baton.server.model.integrity import GENESIS_HASH, digest
from baton.server.model.models import (
    MAX_NOTE,
    OutcomeEntry,
    OutcomeKind,
    OutcomeReport,
    StaleOutcome,
)
from baton.server.model.validation import check_agent, check_ref, check_session_id, check_text
from baton.server.runtime import codec
from baton.server.stores.handoffs import HandoffStore
from baton.server.stores.records import MAX_WRITE_ATTEMPTS, NamespaceWithRecords
from baton.server.stores.store_base import NamespaceStore

MAX_OUTCOME_REF = 200
log = structlog.get_logger("baton.outcomes")


class OutcomeParts(NamespaceWithRecords, Protocol):
    """What the outcome store is given: the namespace's parts, its records and packets."""

    @property
    def handoffs(self) -> HandoffStore: ...


class OutcomeStore(NamespaceStore):
    """The outcomes of one namespace."""

    ns: OutcomeParts

    async def record(
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
        """Move the confidence of ``refs`` (default: what ``session`` touched) and log each
        move; with ``handoff_id``, complete that claimed packet in the same call.

        Every ref is checked and read before anything is written, so bad input never
        half-applies; then the packet is completed (atomically: only by its claimant, only
        once), then the confidences move: a wrong packet id or state, or a second outcome for
        the same packet racing this one, changes no confidence. The move applies to the
        current version; when the caller's session last read an older one, the report lists
        it under ``stale`` (the outcome is still recorded, not refused)."""
        if not outcome_ref.strip():
            raise InvalidInput("outcome_ref", "is required: an external reference like 'RUN-42'")
        if len(outcome_ref) > MAX_OUTCOME_REF:
            raise InvalidInput("outcome_ref", f"is longer than {MAX_OUTCOME_REF} characters")
        if note is not None:
            check_text(note, "note", MAX_NOTE)
        agent = check_agent(agent)
        session = None if session is None else check_session_id(session)
        if refs is None:
            if session is None:
                raise InvalidInput(
                    "refs", "give the refs the outcome is about, or a session that touched them"
                )
            refs = sorted(seen := await self.activity.touched(session))
            if not refs:
                raise InvalidInput("refs", f"session {session} has touched no records; give refs")
        else:
            if not refs:
                raise InvalidInput("refs", "must be a non-empty list of refs")
            if len(refs) > self.limits.max_pins:  # as many as a packet pins
                raise InvalidInput(
                    "refs", f"has {len(refs)} refs; the limit is {self.limits.max_pins}"
                )
            seen = {} if session is None else await self.activity.touched(session)
        refs = list(dict.fromkeys(check_ref(ref, self.limits.max_ref_length) for ref in refs))

        batch = self.ns.batch()
        for ref in refs:
            batch.pipe.hmget(self.keys.head(ref), "version", "confidence", "outcome_hash")
            batch.pipe.llen(self.keys.outcomes(ref))
        replies = await batch.execute()
        heads = {ref: (replies[2 * i], replies[2 * i + 1]) for i, ref in enumerate(refs)}
        missing = [ref for ref, (head, _) in heads.items() if head[0] is None]
        if missing:
            raise NotFound(f"unknown refs: {', '.join(missing)}; nothing was changed", refs=missing)
        entry = {
            "agent": agent,
            "handoff_id": handoff_id,
            "note": note,
            "outcome": outcome,
            "outcome_ref": outcome_ref,
            "session": session,
        }
        if handoff_id is None:
            return await self._write(entry, heads, seen)
        reason = f"{outcome} reported as {outcome_ref}"
        packet = await self.ns.handoffs.complete(handoff_id, agent, reason)
        try:
            report = await self._write(entry, heads, seen)
        except Exception as error:
            if isinstance(error, StoreUnavailable) and "moved" in error.extra:
                detail, extra = error.detail, error.extra  # some refs moved: it says which
            else:
                detail = f"its outcome was not recorded ({describe(error)}); report it again"
                extra = {}
            raise StoreUnavailable(
                f"packet {handoff_id} is done; {detail}, without handoff_id",
                packet=handoff_id,
                **extra,
            ) from error
        report.handoff = packet
        return report

    async def _write(
        self,
        entry: dict[str, Any],
        heads: dict[str, tuple[list[bytes | None], int]],
        seen: dict[str, int],
    ) -> OutcomeReport:
        """Write a checked outcome: each ref's move (on top of whatever was appended since
        its head was read), then their events (a failure there is logged: the moves stand).
        Interrupted after some moves, it says which refs moved and which did not, so that
        reporting again moves none twice. ``seen``: the versions the session last read."""
        moves: list[OutcomeEntry] = []
        settled: list[str] = []
        for ref, (head, length) in heads.items():
            try:
                move, settles = await self._apply(ref, head, length, {**entry, "ref": ref})
                moves.append(move)
                if settles:
                    settled.append(ref)
            except Exception as error:
                if not moves:
                    raise
                moved = [move.ref for move in moves]
                left = [other for other in heads if other not in moved]
                raise StoreUnavailable(
                    f"the outcome moved {', '.join(moved)} but not {', '.join(left)} "
                    f"({describe(error)}); report it again for those refs only",
                    moved=moved,
                    not_moved=left,
                ) from error
        batch = self.ns.batch()
        for move in moves:
            text = (
                f"{move.outcome} on {move.ref} ({move.outcome_ref}): "
                f"{move.before:.0%} -> {move.after:.0%}"
            )
            self.activity.event(batch, "outcome", move.agent, text, ref=move.ref)
        try:
            await batch.execute()
        except Exception as error:
            log.warning("an outcome's events failed", error=describe(error))
        stale = [
            StaleOutcome(ref=move.ref, seen_version=seen[move.ref], moved_version=move.version)
            for move in moves
            if seen.get(move.ref, move.version) < move.version
        ]
        return OutcomeReport(
            outcome=entry["outcome"],
            outcome_ref=entry["outcome_ref"],
            moves=moves,
            stale=stale,
            settled=settled,
        )

    async def _apply(
        self, ref: str, head: list[bytes | None], length: int, entry: dict[str, Any]
    ) -> tuple[OutcomeEntry, bool]:
        """Append one outcome to ``ref``'s log and move its confidence, retrying on top of
        whatever another writer appended first; and whether it settled the record's contest
        (not known when the reply was lost: False)."""
        head_key, log_key = self.keys.head(ref), self.keys.outcomes(ref)
        created_at = utc_now()
        counter = "successes" if entry["outcome"] == "success" else "failures"
        for _ in range(MAX_WRITE_ATTEMPTS):
            version_raw, confidence_raw, prev_raw = head
            before = float(confidence_raw or 0.5)
            body = {
                **entry,
                "after": confidence_rules.moved(before, entry["outcome"]),
                "before": before,
                "created_at": created_at,
                "prev_hash": codec.text(prev_raw) or GENESIS_HASH,
                "seq": length + 1,
                "version": int(version_raw or 0),
            }
            entry_hash = digest(body)
            applied, *settles = await self.scripts.record_outcome(
                keys=[head_key, log_key],
                args=[
                    body["version"],
                    length,
                    repr(body["after"]),
                    counter,
                    entry_hash,
                    codec.pack({**body, "hash": entry_hash}),
                ],
            )
            if applied:
                return OutcomeEntry(**body, hash=entry_hash), settles[1] == 1
            batch = self.ns.batch()
            batch.pipe.hmget(head_key, "version", "confidence", "outcome_hash")
            batch.pipe.llen(log_key)
            head, length = await batch.execute()
            if codec.text(head[2]) == entry_hash:  # applied, but the reply was lost
                return OutcomeEntry(**body, hash=entry_hash), False
        raise StoreUnavailable(f"{ref}: too many concurrent writers, try again", ref=ref)
