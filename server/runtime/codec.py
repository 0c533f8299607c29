"""Redis replies to Baton's result types and back: the one place that knows how a version,
an outcome, a packet, a session or an observation is laid out in its hash."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast, overload

import msgpack
import msgspec
from redis.typing import (
    StreamRangeResponse,
    XReadGroupResponse,
    XReadResponse,
    ZSetRangeResponse,
)

from baton.server.model.clock import iso
from baton.server.model.integrity import plain_json, version_body
from baton.server.model.models import (
    Contest,
    Observation,
    Packet,
    Pin,
    RecordVersion,
    Session,
    Tombstone,
    Transition,
)

# Typed views of redis-py's replies. redis-py types a reply for either client mode
# (``bytes | str``) and for every shape a command can answer in; Baton's clients are binary
# (decode_responses=False, RESP2), so Redis hands back bytes in one known shape. These only
# narrow the declared type (no copy, no conversion), except ``text``, which decodes.

StreamEntry = tuple[bytes, dict[bytes, bytes]]


@overload
def text(raw: bytes | str) -> str: ...
@overload
def text(raw: bytes | str | None) -> str | None: ...
def text(raw: bytes | str | None) -> str | None:
    """A reply as text (None stays None)."""
    return raw.decode() if isinstance(raw, bytes) else raw


def hash_fields(reply: dict[bytes | str, bytes | str]) -> dict[bytes, bytes]:
    """An HGETALL reply."""
    return cast(dict[bytes, bytes], reply)


def values(reply: list[bytes | str]) -> list[bytes]:
    """A list reply (LRANGE, ZRANGEBYLEX)."""
    return cast(list[bytes], reply)


def members(reply: ZSetRangeResponse) -> list[bytes]:
    """A sorted-set range read without scores (ZRANGE and kin)."""
    return cast(list[bytes], reply)


def scored(reply: ZSetRangeResponse) -> list[tuple[bytes, float]]:
    """A sorted-set range read ``withscores=True``: (member, score) pairs."""
    return cast(list[tuple[bytes, float]], reply)


def entries(reply: StreamRangeResponse | None) -> list[StreamEntry]:
    """An XRANGE or XREVRANGE reply: (id, fields) pairs (never None for a stream read)."""
    return cast(list[StreamEntry], reply)


def read_entries(reply: XReadResponse | XReadGroupResponse) -> list[StreamEntry]:
    """The entries of an XREAD of one stream (RESP2: ``[[stream, entries]]``), or [] when the
    read timed out (an empty reply)."""
    streams = cast(list[tuple[bytes, list[StreamEntry]]], reply)
    return streams[0][1] if streams else []


def read_streams(reply: XReadGroupResponse) -> list[tuple[bytes, list[StreamEntry]]]:
    """The streams of an XREADGROUP of several streams (RESP2: ``[[stream, entries],
    ...]``) with their entries; [] when there were none."""
    return cast(list[tuple[bytes, list[StreamEntry]]], reply or [])


def pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """A flat HGETALL-style reply from a script as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value)
    return packed


def record_version(
    ref: str, fields: dict[bytes, bytes], head: dict[bytes, bytes], current: int
) -> RecordVersion:
    """One stored version; its confidence is the head's while it is the current one."""
    number = int(fields[b"version"])
    superseded = fields.get(b"superseded_by")
    confidence = head[b"confidence"] if number == current else fields[b"confidence"]
    forgotten = None
    if b"tombstone_hash" in fields:
        forgotten = Tombstone(
            at=fields[b"forgotten_at"].decode(),
            by=fields[b"forgotten_by"].decode(),
            reason=fields[b"forgotten_reason"].decode(),
            hash=fields[b"tombstone_hash"].decode(),
        )
    return RecordVersion(
        ref=ref,
        version=number,
        value=unpack(fields[b"value"]),
        author=fields[b"author"].decode(),
        session=fields[b"session"].decode() or None,
        created_at=fields[b"created_at"].decode(),
        tags=unpack(fields[b"tags"]),
        confidence=float(confidence),
        hash=fields[b"hash"].decode(),
        prev_hash=fields[b"prev_hash"].decode(),
        superseded_by=None if superseded is None else int(superseded),
        current_version=current,
        forgotten=forgotten,
        contested=contest(head.get(b"contested"), head.get(b"contested_base")),
    )


def contest(versions: bytes | None, base: bytes | None) -> Contest | None:
    """The contest a record's head names in ``contested`` and ``contested_base``
    (``write_version.lua``), if any."""
    if versions is None or base is None:
        return None
    return Contest(base=int(base), versions=[int(v) for v in versions.split(b",")])


def hashed_view(record: RecordVersion) -> dict[str, Any]:
    """The fields of a version that its hash covers, plus the hash itself."""
    body = version_body(
        ref=record.ref,
        version=record.version,
        value=record.value,
        author=record.author,
        session=record.session,
        created_at=record.created_at,
        tags=record.tags,
        prev_hash=record.prev_hash,
    )
    forgotten = None if record.forgotten is None else msgspec.structs.asdict(record.forgotten)
    return {**body, "hash": record.hash, "forgotten": forgotten}


def plain_version(fields: dict[bytes, bytes]) -> bool:
    """Whether a stored version's hashed body holds only JSON without floats (it may be
    hashed with ``floatless``): its value and tags are its only parts that are not text or
    a whole number."""
    return plain_json(fields[b"value"]) and plain_json(fields[b"tags"])


def struct_fields(struct: msgspec.Struct) -> dict[str, Any]:
    """A struct's fields by name (shallow: nested structs stay structs)."""
    return {name: getattr(struct, name) for name in struct.__struct_fields__}


def packet(fields: dict[bytes, bytes]) -> Packet:
    """A packet from its hash (its log is read separately: :func:`transitions`)."""
    expires_us = _optional(fields, "expires_us")
    return Packet(
        id=fields[b"id"].decode(),
        from_agent=fields[b"from"].decode(),
        to_agent=fields[b"to"].decode(),
        summary=fields[b"summary"].decode(),
        next=unpack(fields[b"next"]),
        open=unpack(fields[b"open"]),
        pins=[Pin(ref=ref, version=version) for ref, version in unpack(fields[b"pins"])],
        note=_optional(fields, "note"),
        session=_optional(fields, "session"),
        state=fields[b"state"].decode(),  # type: ignore[arg-type]
        created_at=fields[b"created_at"].decode(),
        updated_at=fields[b"updated_at"].decode(),
        expires_at=iso(int(expires_us)) if expires_us else None,
        lease_until=_optional(fields, "lease_until"),
        claimed_by=_optional(fields, "claimed_by"),
        deliveries=int(fields.get(b"deliveries", 0)),
        redeliveries=int(fields.get(b"redeliveries", 0)),
        error=_optional(fields, "error"),
    )


def transitions(raws: Sequence[bytes]) -> list[Transition]:
    """A packet's log, oldest first."""
    return [msgspec.convert(unpack(raw), Transition) for raw in raws]


def _optional(fields: dict[bytes, bytes], name: str) -> str | None:
    """A text field that may be missing or empty (None then)."""
    raw = fields.get(name.encode())
    return raw.decode() if raw else None


def session(
    session_id: str, meta: dict[bytes, bytes], touched: dict[bytes, bytes], files: set[bytes]
) -> Session:
    """A session from its hash, its touched hash (ref -> version seen) and its files set."""
    return Session(
        id=session_id,
        agent=meta[b"agent"].decode(),
        project=_optional(meta, "project"),
        cwd=_optional(meta, "cwd"),
        status=(_optional(meta, "status") or "active"),  # type: ignore[arg-type]
        started_at=meta[b"started_at"].decode(),
        ended_at=_optional(meta, "ended_at"),
        last_activity_at=_optional(meta, "last_activity_at"),
        title=_optional(meta, "title"),
        summary=_optional(meta, "summary"),
        concepts=unpack(meta[b"concepts"]) if b"concepts" in meta else [],
        files=sorted(raw.decode() for raw in files),
        observation_count=int(meta.get(b"observation_count", 0)),
        touched={ref.decode(): int(version) for ref, version in touched.items()},
    )


def observation(fields: dict[bytes, bytes]) -> Observation:
    """An observation from its hash."""
    return Observation(
        id=fields[b"id"].decode(),
        session=fields[b"session"].decode(),
        agent=fields[b"agent"].decode(),
        project=fields[b"project"].decode(),
        cwd=fields[b"cwd"].decode(),
        hook_type=fields[b"hook_type"].decode(),
        type=fields[b"type"].decode(),
        title=fields[b"title"].decode(),
        narrative=fields[b"narrative"].decode(),
        files=unpack(fields[b"files"]),
        timestamp=fields[b"timestamp"].decode(),
        created_at=fields[b"created_at"].decode(),
    )
