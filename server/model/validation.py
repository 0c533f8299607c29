"""Validation of the names callers choose (refs, namespaces, agents, sessions, tags) and of
the shape of the data they send (nesting depth, list and text sizes)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from baton.server.model.clock import iso
from baton.server.model.errors import InvalidInput
from baton.server.model.keys import RESERVED_NAMESPACES

# A ref segment: letters, digits and . _ - : @ +, never "." or ".." alone.
SEGMENT_PATTERN = re.compile(r"[A-Za-z0-9._:@+-]+")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAMESPACE_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SESSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
TAG_PATTERN = re.compile(r"[A-Za-z0-9._:/+-]+")
# The packet ids Baton makes ("h_" and 8 hex digits): RQ job ids are built from them.
PACKET_ID_PATTERN = re.compile(r"h_[0-9a-f]{8}")
# The times callers give (as_of): Baton writes four-digit years and compares times as text.
EPOCH, END = datetime(1970, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)
MAX_DEPTH = 64  # JSON nesting accepted in values and hook data
MAX_LIST = 1000  # ids in one request (observation ids, expand ids, memory ids)
MAX_PATH = 4096  # a working directory (Linux's PATH_MAX)
# Control characters refused in text a person reads (a NUL, a terminal escape, the 8-bit
# CSI); tab, line feed and carriage return are kept.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The same rules as patterns of the input types, which msgspec checks while decoding, and
# the words a refusal says them in (``baton.server.operation.invalid``).
# (?![\s\S]) ends the text: Python's $ also matches before a final newline, JavaScript's
# (an MCP host checking arguments against the schema) does not.
TEXT_ENDS = r"(?![\s\S])"
SESSION_ID = f"^{SESSION_PATTERN.pattern}{TEXT_ENDS}"
NON_BLANK = r"\S"
TEXT = f"^[^{CONTROL_CHARACTERS.pattern[1:-1]}]*$"
AGENT = f"^{NAME_PATTERN.pattern}{TEXT_ENDS}"
SOME_TEXT = f"^(?=[\\s\\S]*\\S)[^{CONTROL_CHARACTERS.pattern[1:-1]}]*$"
PATTERN_WORDS = {
    SESSION_ID: "a session id is 1-128 letters, digits, '.', '_', ':' or '-'",
    AGENT: "an agent id is 1-64 letters, digits, '.', '_' or '-', starting alphanumeric",
    SOME_TEXT: "must be text, not blank, without control characters (NUL, escape, ...)",
    NON_BLANK: "must not be blank",
    TEXT: "must not hold control characters (NUL, escape, ...)",
}
LENGTH = re.compile(r"Expected `(str|array|object)` of length <= (\d+)")


def in_words(said: str) -> str:
    """msgspec's refusal of a value, said as Baton says it: a pattern by its rule, a length
    by its limit; anything else as msgspec said it."""
    for pattern, words in PATTERN_WORDS.items():
        if repr(pattern) in said:
            return words
    if found := LENGTH.search(said):
        unit = "characters" if found.group(1) == "str" else "items"
        return f"must hold at most {found.group(2)} {unit}"
    return said


class Ref(NamedTuple):
    """A parsed ref: everything before the last slash is the scope."""

    scope: str
    key: str

    def __str__(self) -> str:
        return f"{self.scope}/{self.key}"


def parse_ref(ref: object, max_length: int = 512, field: str = "ref") -> Ref:
    """Split ``scope/key`` (the scope may hold slashes), or raise :class:`InvalidInput`."""
    if not isinstance(ref, str) or not ref:
        raise InvalidInput(field, "must be a non-empty string like 'scope/key'")
    if len(ref) > max_length:
        raise InvalidInput(field, f"is {len(ref)} characters long; the limit is {max_length}")
    segments = ref.split("/")
    if len(segments) < 2:
        raise InvalidInput(field, f"{ref!r} has no scope: write it as 'scope/key'")
    for segment in segments:
        if not segment:
            raise InvalidInput(field, f"{ref!r} has an empty segment")
        if segment in (".", "..") or not SEGMENT_PATTERN.fullmatch(segment):
            raise InvalidInput(
                field,
                f"{ref!r}: segment {segment!r} may only hold letters, digits and . _ - : @ +",
            )
    return Ref("/".join(segments[:-1]), segments[-1])


def check_ref(ref: object, max_length: int = 512, field: str = "ref") -> str:
    """Validate a ref and return it unchanged."""
    return str(parse_ref(ref, max_length, field))


ANONYMOUS = "anonymous"  # the agent of a caller that names none


def check_agent(agent: object, field: str = "agent") -> str:
    if not isinstance(agent, str) or not NAME_PATTERN.fullmatch(agent):
        raise InvalidInput(
            field, "an agent id is 1-64 letters, digits, '.', '_' or '-', starting alphanumeric"
        )
    return agent


def check_namespace(namespace: object, field: str = "namespace") -> str:
    if not isinstance(namespace, str) or not NAMESPACE_PATTERN.fullmatch(namespace):
        raise InvalidInput(field, "a namespace is 1-64 lower-case letters, digits, '_' or '-'")
    if namespace in RESERVED_NAMESPACES:
        raise InvalidInput(field, f"{namespace} is a name Baton keeps for its own keys")
    return namespace


def check_session_id(session_id: object, field: str = "session") -> str:
    if not isinstance(session_id, str) or not SESSION_PATTERN.fullmatch(session_id):
        raise InvalidInput(field, "a session id is 1-128 letters, digits, '.', '_', ':' or '-'")
    return session_id


def check_tags(tags: object, max_tags: int, max_length: int, field: str = "tags") -> list[str]:
    """Validate a tag list; duplicates are dropped, order is kept."""
    if not isinstance(tags, list | tuple):
        raise InvalidInput(field, "must be a list of strings")
    if len(tags) > max_tags:
        raise InvalidInput(field, f"has {len(tags)} tags; the limit is {max_tags}")
    for tag in tags:
        if not isinstance(tag, str) or len(tag) > max_length or not TAG_PATTERN.fullmatch(tag):
            raise InvalidInput(
                field,
                f"tag {tag!r} must be 1-{max_length} letters, digits or . _ : / + -",
            )
    return list(dict.fromkeys(tags))


def check_confidence(confidence: object, field: str = "confidence") -> float:
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0.0 <= confidence <= 1.0
    ):
        raise InvalidInput(field, "must be a number from 0 to 1")
    return float(confidence)


def check_depth(value: Any, field: str, limit: int = MAX_DEPTH) -> None:
    """Refuse JSON nested deeper than ``limit`` (checked without recursion, before any
    write: deeper data would fail later, in indexing or hashing)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > limit:
                raise InvalidInput(field, f"is nested more than {limit} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def check_size(items: Sequence[Any] | None, field: str, limit: int = MAX_LIST) -> None:
    """Refuse a list of more than ``limit`` items."""
    if items is not None and len(items) > limit:
        raise InvalidInput(field, f"holds {len(items)} items; at most {limit} are accepted")


def check_text(text: object, field: str, max_length: int) -> str:
    """Refuse text that is not a string, is longer than ``max_length`` characters or holds
    control characters (see ``CONTROL_CHARACTERS``); return it unchanged."""
    if not isinstance(text, str) or len(text) > max_length:
        raise InvalidInput(field, f"must be text of at most {max_length} characters")
    if CONTROL_CHARACTERS.search(text):
        raise InvalidInput(field, "must not hold control characters (NUL, escape, ...)")
    return text


def check_moment(text: str, field: str = "as_of") -> str:
    """A time a caller gives (ISO 8601; without an offset, UTC) as Baton writes times,
    which compare as text; or :class:`InvalidInput` naming ``field``."""
    try:
        at = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise InvalidInput(
            field, f"{text!r} is not an ISO 8601 time like 2026-12-07T10:15:00Z"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    try:
        in_range = EPOCH <= at.astimezone(UTC).replace(tzinfo=None) < END
    except OverflowError:  # past year 9999 once in UTC
        in_range = False
    if not in_range:
        raise InvalidInput(field, f"{text!r} is not between 1970 and 9999 (UTC)")
    return iso(at.timestamp() * 1_000_000)
