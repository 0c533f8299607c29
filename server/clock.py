"""Time as Baton stores and hashes it: ISO-8601 UTC with microseconds, and epoch microseconds
for sorted-set scores. Only the ``time`` module (``baton hook`` imports this on every call)."""

from __future__ import annotations

import time


def iso(micros: float) -> str:
    """The timestamp of ``micros`` microseconds since the epoch, e.g.
    ``2026-12-01T02:03:04.123456Z`` (what ``datetime``'s ``%Y-%m-%dT%H:%M:%S.%fZ`` gives)."""
    seconds, fraction = divmod(int(micros), 1_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{fraction:06d}Z"


def now() -> tuple[int, str]:
    """Now as epoch microseconds and as the matching timestamp."""
    micros = time.time_ns() // 1000
    return micros, iso(micros)


def utc_now() -> str:
    """Now, as a timestamp."""
    return now()[1]
