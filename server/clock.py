"""Time as Baton stores and hashes it: ISO-8601 UTC with microseconds, and epoch microseconds
for sorted-set scores. Standard library only (``baton hook`` imports it too)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_now() -> str:
    """Now, e.g. ``2026-12-01T02:03:04.123456Z``."""
    return datetime.now(UTC).strftime(TIMESTAMP_FORMAT)


def iso(micros: int | float) -> str:
    """The timestamp of ``micros`` microseconds since the epoch."""
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime(TIMESTAMP_FORMAT)


def now() -> tuple[int, str]:
    """Now as epoch microseconds and as the matching timestamp."""
    micros = time.time_ns() // 1000
    return micros, iso(micros)
