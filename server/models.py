"""Typed results returned by the store and serialised as-is by the REST API."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

OutcomeKind = Literal["success", "failure"]


class Remembered(msgspec.Struct, kw_only=True):
    """The version a ``remember`` call appended."""

    ref: str
    version: int
    hash: str
    prev_hash: str
    superseded: int | None
    created_at: str


class RecordVersion(msgspec.Struct, kw_only=True):
    """One version of a record. ``confidence`` is the current one for the newest version and
    the one it had when it was superseded for older versions."""

    ref: str
    version: int
    value: Any
    author: str
    session: str | None
    created_at: str
    tags: list[str]
    confidence: float
    hash: str
    prev_hash: str
    superseded_by: int | None = None
    current_version: int


class RecordPage(msgspec.Struct, kw_only=True):
    """A page of current versions in ref order; pass ``next_cursor`` back for the next page."""

    records: list[RecordVersion]
    next_cursor: str | None


class HistoryEntry(RecordVersion, kw_only=True):
    """A version in a history listing, with whether its hash and its link verify."""

    chain_ok: bool


class History(msgspec.Struct, kw_only=True):
    ref: str
    current_version: int
    confidence: float
    successes: int
    failures: int
    versions: list[HistoryEntry]


class OutcomeEntry(msgspec.Struct, kw_only=True):
    """One confidence move in a record's hash-chained outcomes log."""

    ref: str
    seq: int
    version: int
    outcome: OutcomeKind
    outcome_ref: str
    note: str | None
    agent: str
    session: str | None
    handoff_id: str | None
    created_at: str
    before: float
    after: float
    hash: str
    prev_hash: str


class OutcomeReport(msgspec.Struct, kw_only=True):
    outcome: OutcomeKind
    outcome_ref: str
    moves: list[OutcomeEntry]


class BrokenLink(msgspec.Struct, kw_only=True):
    """A place where a chain does not verify: which record, which chain, which position."""

    ref: str
    chain: Literal["versions", "outcomes"]
    version: int
    kind: Literal["hash", "link"]
    expected: str
    found: str


class Stats(msgspec.Struct, kw_only=True):
    namespace: str
    refs: int
    versions: int
    agents: int
    outcomes: int
    average_confidence: float | None
    verified: bool = False
    checked_versions: int | None = None
    checked_outcomes: int | None = None
    broken: list[BrokenLink] | None = None


class Session(msgspec.Struct, kw_only=True):
    """A session and the refs it read or wrote, with the version it last saw of each."""

    id: str
    agent: str
    created_at: str
    touched: dict[str, int]
