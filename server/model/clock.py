"""Time as Baton stores and hashes it: ISO-8601 UTC with microseconds, and epoch microseconds
for sorted-set scores. Only the ``time`` module (``baton hook`` imports this on every call)."""

from __future__ import annotations

import calendar
import functools
import time


def iso(micros: float) -> str:
    """The timestamp of ``micros`` microseconds since the epoch, e.g.
    ``2026-12-01T02:03:04.123456Z`` (what ``datetime``'s ``%Y-%m-%dT%H:%M:%S.%fZ`` gives)."""
    seconds, fraction = divmod(int(micros), 1_000_000)
    return f"{_whole_second(seconds)}.{fraction:06d}Z"


@functools.lru_cache(maxsize=256)
def _whole_second(seconds: int) -> str:
    """The timestamp of a whole second (kept: a busy server asks for the same few seconds,
    now and the leases and deadlines just after, thousands of times over)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def at_least_after(stamp: str) -> str:
    """Now, or one microsecond after ``stamp`` (a timestamp of :func:`iso`'s form) when
    that is later."""
    whole = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    return iso(max(now_us(), whole * 1_000_000 + int(stamp[20:26]) + 1))


def now_us() -> int:
    """Now, as epoch microseconds."""
    return time.time_ns() // 1000


def now() -> tuple[int, str]:
    """Now as epoch microseconds and as the matching timestamp."""
    micros = now_us()
    return micros, iso(micros)


def utc_now() -> str:
    """Now, as a timestamp."""
    return now()[1]
