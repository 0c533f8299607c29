"""Baton as a storage adapter for AMFS, the Agent Memory File System SDK (the ``amfs``
extra of the ``baton-server`` distribution).

    from amfs import AgentMemory
    from baton.agents.amfs import BatonAdapter

    memory = AgentMemory("scout", adapter=BatonAdapter("http://127.0.0.1:8765"))
    memory.write("listing/553", "assessment", {"verdict": "apply"})

AMFS does the reasoning (its read tracking, causal links, ranking); Baton keeps the memory.
An entry ``entity_path``/``key`` is the Baton record ``entity_path/key``; each AMFS version is
a Baton version, appended and hash-chained, never overwritten. What maps to what, and what
differs by design, is in ``docs/amfs.md``. Every call is a request to Baton's REST API, so
the adapter works against a remote Baton (with a token) and in this process
(:func:`in_process`) alike.
"""

from __future__ import annotations

import builtins
import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Final, Self

from amfs_core.abc import AdapterABC, WatchHandle
from amfs_core.evidence import outcome_steps
from amfs_core.exceptions import AdapterError, VersionConflictError
from amfs_core.models import MemoryEntry, OutcomeRecord, OutcomeType

from baton.agents.client import (
    BatonAPIError,
    BatonClient,
    ConflictError,
    EventStream,
    NotFoundError,
)
from baton.server.model.models import OutcomeEntry, RecordVersion
from baton.server.runtime.settings import Settings

# The tag on every version this adapter writes: its value is an envelope (below).
AMFS_TAG: Final = "amfs"
# Fields of an AMFS entry that Baton itself keeps, so they are not stored in the envelope.
BATON_KEEPS: Final = frozenset(
    {"entity_path", "key", "version", "value", "confidence", "integrity_chain", "commit_id"}
)
PAGE: Final = 500
# Baton has two outcome kinds: AMFS's success reinforces, its three failures erode.
OUTCOME_KINDS: Final = {
    OutcomeType.SUCCESS: "success",
    OutcomeType.CLEAN_DEPLOY: "success",
    OutcomeType.MINOR_FAILURE: "failure",
    OutcomeType.FAILURE: "failure",
    OutcomeType.CRITICAL_FAILURE: "failure",
    OutcomeType.REGRESSION: "failure",
    OutcomeType.P2_INCIDENT: "failure",
    OutcomeType.P1_INCIDENT: "failure",
}
# An outcome's AMFS type travels in the note of Baton's outcome log: "AMFS critical_failure".
_NOTE = re.compile(r"AMFS (\w+)")


def ref_of(entity_path: str, key: str) -> str:
    """The Baton ref of an AMFS entry: ``entity_path/key`` (Baton checks both parts)."""
    if "/" in key:
        raise AdapterError(f"an AMFS key holds no '/': {key!r} (put the path in entity_path)")
    return f"{entity_path.strip('/')}/{key}"


def _in_or_below(ref: str, entity_path: str) -> bool:
    return ref.startswith(f"{entity_path.strip('/')}/")


@contextlib.contextmanager
def _as_amfs_errors() -> Iterator[None]:
    """Baton's errors as AMFS's own: a refused or failed call is an :class:`AdapterError`."""
    try:
        yield
    except BatonAPIError as error:
        raise AdapterError(f"Baton answered {error}") from error


class BatonAdapter(AdapterABC):
    """An AMFS adapter on Baton's REST API at ``base_url``.

    ``agent`` is who writes until AMFS binds the adapter to an ``AgentMemory``'s agent (it
    does, through :meth:`bind`); ``token`` defaults to ``BATON_TOKEN``: an admin token lets
    one adapter serve every agent, an agent token only its own agent. ``namespace`` is the
    Baton namespace (the server's default when None)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str = "amfs",
        token: str | None = None,
        namespace: str | None = None,
        session: str | None = None,
    ) -> None:
        self.base_url, self.token, self.namespace = base_url, token, namespace
        self.client = BatonClient(
            base_url, agent=agent, token=token, namespace=namespace, session=session
        )
        self._watches: list[EventStream] = []

    def bind(self, agent_id: str, session_id: str) -> Self:
        """This adapter as ``agent_id`` in a Baton session of its own (AMFS calls it once per
        ``AgentMemory``): Baton records who wrote and read what, and which version of each
        record the session last saw, so an outcome on a record that moved since is named."""
        bound = type(self)(
            self.base_url, agent=agent_id, token=self.token, namespace=self.namespace
        )
        try:
            with _as_amfs_errors():
                bound.client.start_session()
        except AdapterError:
            bound.close()
            raise
        return bound

    # -- the contract -----------------------------------------------------------------

    def read(
        self, entity_path: str, key: str, *, min_confidence: float = 0.0, branch: str = "main"
    ) -> MemoryEntry | None:
        entry = self._read(ref_of(entity_path, key), None)
        if entry is None or entry.confidence < min_confidence or entry.is_expired():
            return None
        return entry

    def read_at_version(self, entity_path: str, key: str, version: int) -> MemoryEntry | None:
        return self._read(ref_of(entity_path, key), version)

    def write(self, entry: MemoryEntry) -> MemoryEntry:
        """Append the entry as the record's next version. An entry whose ``version`` is above
        1 is written only on top of version ``version - 1`` (else VersionConflictError)."""
        ref = ref_of(entry.entity_path, entry.key)
        if entry.provenance.agent_id != self.client.agent:  # AMFS goes on unbound if bind fails
            raise AdapterError(
                f"this adapter acts as {self.client.agent}, not {entry.provenance.agent_id}: "
                "give that agent's AgentMemory an adapter it may act as"
            )
        expected = entry.version - 1 if entry.version > 1 else None
        try:
            written = self.client.remember(
                ref,
                {"value": entry.value, AMFS_TAG: _envelope(entry)},
                tags=[AMFS_TAG],
                confidence=entry.confidence,
                expected_version=expected,
            )
        except ConflictError as error:
            current = self._read(ref, None)
            raise VersionConflictError(
                entry.entity_path, entry.key, entry.version, current.version if current else 0
            ) from error
        except BatonAPIError as error:
            raise AdapterError(f"Baton answered {error}") from error
        provenance = entry.provenance.model_copy(
            update={
                "agent_id": self.client.agent,
                "written_at": datetime.fromisoformat(written.created_at),
            }
        )
        return entry.model_copy(
            update={
                "version": written.version,
                "integrity_chain": written.hash,
                "provenance": provenance,
            }
        )

    def write_batch(self, entries: builtins.list[MemoryEntry]) -> builtins.list[MemoryEntry]:
        """Not supported: Baton appends one record's version per call, and AMFS promises a
        batch all or nothing. Write the entries one by one if that is what you mean."""
        raise NotImplementedError(
            "Baton's AMFS adapter has no atomic multi-key write; write entries one by one"
        )

    def list(
        self,
        entity_path: str | None = None,
        *,
        include_superseded: bool = False,
        branch: str = "main",
    ) -> list[MemoryEntry]:
        """Current entries of ``entity_path`` (not of the paths below it, as in AMFS's own
        adapters; every record when None), in ref order; with ``include_superseded`` every
        version of each, oldest first."""
        entries: list[MemoryEntry] = []
        for record in self._current(entity_path):
            if entity_path is not None and record.ref.rpartition("/")[0] != entity_path:
                continue
            if include_superseded:
                with _as_amfs_errors():
                    history = self.client.history(record.ref)
                versions: list[RecordVersion] = list(history.versions)
            else:
                versions = [record]
            entries.extend(e for e in map(_entry, versions) if e is not None)
        return entries

    def watch(self, entity_path: str, callback: Callable[[MemoryEntry], None]) -> WatchHandle:
        """Call ``callback`` with each version written in ``entity_path`` and below from now
        on, once and in order, on a thread of its own, from Baton's event stream (each
        ``remember`` event names the version it announces)."""
        with _as_amfs_errors():
            stream = self.client.events().__enter__()
        self._watches.append(stream)
        seen: dict[str, int] = {}

        def deliver() -> None:
            for event in stream:
                if event.kind != "remember" or not event.ref:
                    continue
                if not _in_or_below(event.ref, entity_path):
                    continue
                # From the version the event announces: none of a burst is left out.
                announced = None if event.version is None else event.version - 1
                for entry in self._since(event.ref, seen.get(event.ref, announced)):
                    seen[event.ref] = entry.version
                    callback(entry)

        threading.Thread(target=deliver, name=f"amfs-watch-{entity_path}", daemon=True).start()
        return WatchHandle(stream.close)

    def commit_outcome(self, record: OutcomeRecord) -> builtins.list[MemoryEntry]:
        """Move the confidence of every entry the record cites with Baton's ``record_outcome``
        (each failed attempt first, then the outcome), and return those entries as they now
        are. Baton moves confidence in place and logs each move in the record's hash-chained
        outcome log; it writes no new version (AMFS's own adapters do)."""
        moved: dict[str, None] = {}
        for outcome_type, causal in outcome_steps(record):
            refs = [spec for spec in causal if "/" in spec.strip("/")]
            if not refs:
                continue
            with _as_amfs_errors():
                report = self.client.record_outcome(
                    OUTCOME_KINDS[outcome_type],
                    record.outcome_ref,
                    refs=refs,
                    note=f"AMFS {outcome_type.value}",
                )
            moved.update((move.ref, None) for move in report.moves)
        return [entry for entry in (self._read(ref, None) for ref in moved) if entry]

    # -- optional parts Baton answers -------------------------------------------------

    def list_outcomes(
        self,
        *,
        entity_path: str | None = None,
        since: datetime | None = None,
        limit: int = 1000,
        outcome_ref: str | None = None,
    ) -> builtins.list[OutcomeRecord]:
        """The outcomes in Baton's outcome logs of the records of ``entity_path`` (every
        record when None), one per ``record_outcome`` call, oldest first."""
        moves: list[OutcomeEntry] = []
        for record in self._current(entity_path):
            if entity_path is not None and record.ref.rpartition("/")[0] != entity_path:
                continue
            with _as_amfs_errors():
                moves.extend(self.client.outcomes(record.ref))
        steps: dict[tuple[str, str, str], list[OutcomeEntry]] = {}
        for move in moves:
            if outcome_ref is None or move.outcome_ref == outcome_ref:
                steps.setdefault((move.created_at, move.outcome_ref, move.agent), []).append(move)
        records = [_outcome(step) for _, step in sorted(steps.items())]
        return [each for each in records if since is None or each.committed_at >= since][:limit]

    def verify_integrity(
        self, entity_path: str | None = None, *, branch: str = "main"
    ) -> dict[str, Any]:
        """Baton's own check of every version chain and outcome log in ``entity_path`` and
        below, as AMFS's integrity report: a version whose hash does not match its content is
        ``corrupted``, a broken link ``chain_breaks``, a record hidden from listings
        ``orphaned``."""
        with _as_amfs_errors():
            stats = self.client.stats(verify=True, scope=entity_path)
        report: dict[str, Any] = {
            "total_checked": (stats.checked_versions or 0) + (stats.checked_outcomes or 0),
            "corrupted": [],
            "orphaned": [],
            "chain_breaks": [],
        }
        section = {
            "hash": "corrupted",
            "head": "corrupted",
            "link": "chain_breaks",
            "unindexed": "orphaned",
        }
        for broken in stats.broken or []:
            entity, _, key = broken.ref.rpartition("/")
            report[section[broken.kind]].append(
                {
                    "entity_path": entity,
                    "key": key,
                    "version": broken.version,
                    "chain": broken.chain,
                    "expected": broken.expected,
                    "actual": broken.found,
                }
            )
        report["valid"] = report["total_checked"] - len(stats.broken or [])
        return report

    def close(self) -> None:
        for stream in self._watches:
            stream.close()
        self.client.close()

    # -- helpers ----------------------------------------------------------------------

    def _read(self, ref: str, version: int | None) -> MemoryEntry | None:
        try:
            return _entry(self.client.recall(ref, version))
        except NotFoundError:
            return None
        except BatonAPIError as error:
            raise AdapterError(f"Baton answered {error}") from error

    def _since(self, ref: str, delivered: int | None) -> Iterator[MemoryEntry]:
        """The versions of ``ref`` after ``delivered`` (only the current one if None)."""
        current = self._read(ref, None)
        if current is None or (delivered is not None and current.version <= delivered):
            return
        first = current.version if delivered is None else delivered + 1
        for version in range(first, current.version):
            older = self._read(ref, version)
            if older is not None:
                yield older
        yield current

    def _current(self, entity_path: str | None) -> Iterator[RecordVersion]:
        cursor: str | None = None
        while True:
            with _as_amfs_errors():
                page = self.client.list_records(
                    scope=entity_path.strip("/") if entity_path else None,
                    limit=PAGE,
                    cursor=cursor,
                )
            yield from page.records
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


def _envelope(entry: MemoryEntry) -> dict[str, Any]:
    """What AMFS knows of an entry that Baton has no field for (its type, provenance,
    evidence, artifacts, time to live...), left out where it is AMFS's default."""
    kept = entry.model_dump(mode="json", exclude=set(BATON_KEEPS), exclude_defaults=True)
    provenance = kept.get("provenance", {})
    provenance.pop("agent_id", None)  # Baton's author: who was authenticated
    provenance.pop("written_at", None)  # Baton's created_at
    return dict(kept)


def _entry(record: RecordVersion) -> MemoryEntry | None:
    """The AMFS entry of one Baton version (None for a forgotten one). A version written
    through AMFS unwraps its envelope; any other is an entry with AMFS's defaults."""
    if record.forgotten is not None:
        return None
    value, known = record.value, {}
    if AMFS_TAG in record.tags and isinstance(record.value, dict) and AMFS_TAG in record.value:
        value, known = record.value.get("value"), dict(record.value[AMFS_TAG])
    entity_path, _, key = record.ref.rpartition("/")
    provenance = {
        "session_id": record.session or "",
        **known.pop("provenance", {}),
        "agent_id": record.author,
        "written_at": record.created_at,
    }
    return MemoryEntry.model_validate(
        {
            **known,
            "entity_path": entity_path,
            "key": key,
            "version": record.version,
            "value": value,
            "confidence": record.confidence,
            "provenance": provenance,
            "integrity_chain": record.hash,
        }
    )


def _outcome(step: list[OutcomeEntry]) -> OutcomeRecord:
    """One outcome step (the moves one ``record_outcome`` made) as an AMFS outcome record."""
    first = step[0]
    named = _NOTE.fullmatch(first.note or "")
    try:
        kind = OutcomeType(named.group(1) if named else first.outcome)
    except ValueError:  # a note that only looks like ours
        kind = OutcomeType(first.outcome)
    return OutcomeRecord(
        outcome_ref=first.outcome_ref,
        outcome_type=kind,
        committed_at=datetime.fromisoformat(first.created_at),
        causal_entry_keys=[move.ref for move in step],
        causal_entry_versions={move.ref: move.version for move in step},
        agent_id=first.agent,
    )


@contextlib.contextmanager
def in_process(settings: Settings | None = None) -> Iterator[str]:
    """Baton's API in a thread of this process (its embedded Valkey, unless ``settings``
    point at a Redis): yields the base URL to give :class:`BatonAdapter`, stops on exit."""
    from baton.server.api.app import create_app
    from baton.server.runtime.serving import served_in_thread

    with served_in_thread(create_app(settings or Settings.from_env())) as base_url:
        yield base_url
