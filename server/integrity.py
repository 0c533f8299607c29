"""The canonical encoding that Baton hashes, and the checks that prove a chain intact.

A version's hashed body is the JSON object of its provenance and value::

    {"author", "created_at", "prev_hash", "ref", "session", "tags", "value", "version"}

encoded with sorted keys, no whitespace (``,`` and ``:`` separators), UTF-8 without
escaping non-ASCII, and no NaN/Infinity; its sha256 (hex) is the version's ``hash``, and
the next version's ``prev_hash``. Outcome log entries are chained the same way. The spec
and a standalone checker are in ``docs/integrity.md``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

GENESIS_HASH = "0" * 64
VERSION_FIELDS = ("author", "created_at", "prev_hash", "ref", "session", "tags", "value", "version")
OUTCOME_FIELDS = (
    "after",
    "agent",
    "before",
    "created_at",
    "handoff_id",
    "note",
    "outcome",
    "outcome_ref",
    "prev_hash",
    "ref",
    "seq",
    "session",
    "version",
)


# One encoder for every hash (``json.dumps`` with options builds a new one per call).
CANONICAL_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_bytes(body: Mapping[str, Any]) -> bytes:
    """The one byte encoding Baton hashes: sorted-key compact UTF-8 JSON."""
    return CANONICAL_JSON.encode(body).encode("utf-8")


def digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def version_body(
    *,
    ref: str,
    version: int,
    value: Any,
    author: str,
    session: str | None,
    created_at: str,
    tags: list[str],
    prev_hash: str,
) -> dict[str, Any]:
    """The hashed body of one record version."""
    return {
        "author": author,
        "created_at": created_at,
        "prev_hash": prev_hash,
        "ref": ref,
        "session": session,
        "tags": tags,
        "value": value,
        "version": version,
    }


class ChainProblem(TypedDict):
    """One broken link: what the chain expected there and what it found."""

    kind: Literal["hash", "link"]
    expected: str
    found: str


class ChainChecker:
    """Checks a chain one entry at a time, oldest first, in constant memory.

    Two things can break: an entry whose body no longer hashes to its stored ``hash``
    (``kind="hash"``), and an entry whose ``prev_hash`` is not its predecessor's hash
    (``kind="link"``). Each problem names what was expected and what was found.
    """

    __slots__ = ("expected_prev", "fields")

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self.expected_prev = GENESIS_HASH

    def check(self, entry: Mapping[str, Any]) -> list[ChainProblem]:
        problems: list[ChainProblem] = []
        if entry["prev_hash"] != self.expected_prev:
            problems.append(
                {"kind": "link", "expected": self.expected_prev, "found": entry["prev_hash"]}
            )
        forgotten = entry.get("forgotten")
        if forgotten:
            # The body is gone; its tombstone must cover the original hash instead.
            expected, found = forgotten["hash"], digest(tombstone_body(entry["hash"], forgotten))
        else:
            expected, found = entry["hash"], digest({name: entry[name] for name in self.fields})
        if found != expected:
            problems.append({"kind": "hash", "expected": expected, "found": found})
        self.expected_prev = entry["hash"]
        return problems


def tombstone_body(original_hash: str, tombstone: Mapping[str, Any]) -> dict[str, Any]:
    """What a forgotten version's tombstone hash covers: the hash of the body it replaced,
    and when, by whom and why it was forgotten."""
    return {
        "forgotten": original_hash,
        "at": tombstone["at"],
        "by": tombstone["by"],
        "reason": tombstone["reason"],
    }
