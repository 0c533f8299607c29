"""The hook's spool: the calls of hook events that could not reach Baton, kept in order.

A hook must never lose an event nor hold the agent up. When Baton cannot be reached, or
answers that it cannot take the event now (``RETRY_STATUSES``), the calls that record the
event are appended to ``<data dir>/hook-spool/events.jsonl`` (one JSON line each: method,
path, body and the agent header; never a token). Whoever next holds the spool's lock
delivers them, oldest first, before anything newer: the next hook call (with its own
credentials) or, in open mode, ``baton serve`` as it starts. Progress is written after
every delivered call, so each is sent once (a crash between a delivery and its note can
repeat that one call; Baton stores the same hook event within five minutes once).

A call Baton refuses for itself (any other error status: the event is malformed, or the
server failed on it) would be refused for ever: it is moved to ``rejected.jsonl`` beside the spool,
kept for a person to read, and delivery goes on. The spool holds at most ``MAX_BYTES``;
past that, new events are counted in ``dropped`` instead of kept, and the next SessionStart
says so. Standard library only: it runs inside ``baton hook``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

TYPE_CHECKING = False  # typing costs a few milliseconds of every hook call
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Call = dict[str, Any]  # {"method", "path", "body", "agent"}

FOLDER = "hook-spool"
MAX_BYTES = 64 * 2**20
# Answers that say "not now" rather than "never": the call stays in the spool. A 401 (no
# valid token) holds every call alike until BATON_TOKEN is fixed; a 403 is about one call
# (another agent's session, say) and is set aside, not waited on.
RETRY_STATUSES = frozenset({401, 408, 425, 429, 502, 503, 504, 507})
DELIVER_SECONDS = 2.0  # a hook call delivers a backlog for this long, then gets on


class Unreachable(Exception):
    """Baton could not be reached, or answered with one of ``RETRY_STATUSES``."""


class Rejected(Exception):
    """Baton refused the call for itself: it would refuse it again."""


class Spool:
    """The spool folder of one data dir."""

    def __init__(self, data_dir: str) -> None:
        self.folder = os.path.join(data_dir, FOLDER)
        self.events = os.path.join(self.folder, "events.jsonl")
        self.offset = os.path.join(self.folder, "delivered")  # bytes of events delivered
        self.rejected = os.path.join(self.folder, "rejected.jsonl")
        self.dropped = os.path.join(self.folder, "dropped")  # events not kept: spool full

    def pending(self) -> bool:
        """Whether calls wait (cheap: one stat, no lock)."""
        try:
            return os.path.getsize(self.events) > 0
        except OSError:
            return False

    def lock(self) -> int:
        """Take the spool's lock (waiting for another hook that holds it); its descriptor."""
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        handle = os.open(os.path.join(self.folder, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def unlock(self, handle: int) -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)

    def append(self, calls: list[Call]) -> bool:
        """Keep ``calls`` after what waits (under the lock); False when the spool is full
        and they were counted in ``dropped`` instead."""
        data = "".join(json.dumps(call, separators=(",", ":")) + "\n" for call in calls)
        try:
            size = os.path.getsize(self.events)
        except OSError:
            size = 0
        if size + len(data) > MAX_BYTES:
            self._write_number(self.dropped, self.read_number(self.dropped) + 1)
            return False
        handle = os.open(self.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(handle, data.encode())
            os.fsync(handle)
        finally:
            os.close(handle)
        return True

    def deliver(self, send: Callable[[Call], object], seconds: float = DELIVER_SECONDS) -> int:
        """Send waiting calls oldest first (under the lock) until none is left, Baton cannot
        take one, or ``seconds`` are up; how many were delivered. Raises
        :class:`Unreachable` when calls are still waiting because Baton cannot take them."""
        done = self.read_number(self.offset)
        delivered = 0
        deadline = time.monotonic() + seconds
        try:
            with open(self.events, "rb") as events:
                events.seek(done)
                for raw in events:
                    if time.monotonic() > deadline:
                        return delivered
                    try:
                        call = json.loads(raw)
                    except ValueError:  # a line cut by a crash mid-append: not a call
                        call = None
                    if call is not None:
                        try:
                            send(call)
                            delivered += 1
                        except Rejected as error:
                            self._keep_rejected(call, str(error))
                    done += len(raw)
                    self._write_number(self.offset, done)
        except FileNotFoundError:
            return delivered
        for path in (self.events, self.offset):  # all delivered
            _remove(path)
        return delivered

    def take_dropped(self) -> int:
        """How many events were not kept since last asked (and reset it)."""
        count = self.read_number(self.dropped)
        if count:
            _remove(self.dropped)
        return count

    def _keep_rejected(self, call: Call, reason: str) -> None:
        with open(self.rejected, "a", encoding="utf-8") as rejected:
            rejected.write(json.dumps({"reason": reason, "call": call}) + "\n")

    @staticmethod
    def read_number(path: str) -> int:
        try:
            with open(path, encoding="ascii") as number:
                return int(number.read() or 0)
        except (OSError, ValueError):
            return 0

    @staticmethod
    def _write_number(path: str, value: int) -> None:
        """Replace the number in ``path`` at once (written aside, then renamed)."""
        aside = path + ".new"
        with open(aside, "w", encoding="ascii") as number:
            number.write(str(value))
        os.replace(aside, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
