"""The hook's spool: the calls of hook events that could not reach Baton, kept in order.

A hook must never lose an event nor hold the agent up. When Baton cannot be reached, or
answers that it cannot take the event now (``RETRY_STATUSES``), the calls that record the
event are appended to the spool of that destination: ``<data dir>/hook-spool/<key>/``, one
folder per Baton URL and token (:func:`spool_key`), so an event only ever goes to the
server, and with the credentials, it was recorded for. ``events.jsonl`` holds one JSON line
a call (method, path, body and the agent header; never a token).

Whoever holds the folder's delivery lock sends the waiting calls oldest first, before
anything newer: the next hook call (for a bounded time), ``baton hook --flush``, or
``baton serve`` as it starts (open mode: the spool of its own URL without a token).
Progress is written after every delivered call; each kept observation carries an
``event_id`` that Baton stores once, so a call sent again after a crash is not stored
twice. A hook that finds another delivering appends behind it and moves on, never waiting.

A call Baton refuses for itself (any other error status, or a line that is not a call Baton's
hooks make) would be refused for ever: it is moved to ``rejected.jsonl``, kept for a person
to read, and delivery goes on. The spool holds at most ``MAX_BYTES``; past that, new events
are counted in ``dropped`` instead of kept, and the next SessionStart says so. Standard
library only: it runs inside ``baton hook``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time

try:
    import fcntl
except ImportError:  # Windows: no flock; a hook's calls are then not serialised
    fcntl = None  # type: ignore[assignment]

TYPE_CHECKING = False  # typing costs a few milliseconds of every hook call
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    Call = dict[str, Any]  # {"method", "path", "body", "agent"}

FOLDER = "hook-spool"
MAX_BYTES = 64 * 2**20
# Answers that say "not now" rather than "never": the call stays in the spool. A 401 (no
# valid token) holds every call alike until BATON_TOKEN is fixed; a 403 is about one call
# (another agent's session, say) and is set aside, not waited on.
RETRY_STATUSES = frozenset({401, 408, 425, 429, 502, 503, 504, 507})
DELIVER_SECONDS = 5.0  # a hook call delivers a backlog for this long, then gets on
LOCK_SECONDS = 0.5  # how long a hook call waits for another's delivery before moving on
# The only calls a spool may hold: the writes `baton hook` makes.
HOOK_CALLS = re.compile(r"/v1/sessions|/v1/observations|/v1/sessions/[A-Za-z0-9._:-]{1,256}/end")


class Unreachable(Exception):
    """Baton could not be reached, or answered with one of ``RETRY_STATUSES``."""


class Rejected(Exception):
    """Baton refused the call for itself: it would refuse it again."""


class Busy(Exception):
    """Another process is delivering this spool."""


def spool_key(base_url: str, token: str | None) -> str:
    """The folder name of the spool for ``base_url`` and ``token`` (a digest: the token
    itself is never written down)."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{token or ''}".encode()).hexdigest()[:16]


def is_hook_call(call: object) -> bool:
    """Whether ``call`` is one of the writes ``baton hook`` makes (what a spool may send)."""
    return (
        isinstance(call, dict)
        and call.get("method") == "POST"
        and isinstance(call.get("path"), str)
        and HOOK_CALLS.fullmatch(call["path"]) is not None
        and isinstance(call.get("body"), dict)
        and (call.get("agent") is None or isinstance(call["agent"], str))
    )


class Spool:
    """The spool of one destination (a Baton URL and token) in one data dir."""

    def __init__(self, data_dir: str, base_url: str, token: str | None = None) -> None:
        self.folder = os.path.join(data_dir, FOLDER, spool_key(base_url, token))
        self.events = os.path.join(self.folder, "events.jsonl")
        self.offset = os.path.join(self.folder, "delivered")  # bytes of events delivered
        self.rejected = os.path.join(self.folder, "rejected.jsonl")
        self.dropped = os.path.join(self.folder, "dropped")  # events not kept: spool full
        # where its calls go: {"url", "token": whether one was used} (never the token itself)
        self.destination = os.path.join(self.folder, "destination.json")
        self.base_url, self.with_token = base_url.rstrip("/"), bool(token)

    def pending(self) -> bool:
        """Whether calls wait (cheap: one stat, no lock)."""
        try:
            return os.path.getsize(self.events) > 0
        except OSError:
            return False

    @contextlib.contextmanager
    def _locked(self, name: str, seconds: float) -> Iterator[None]:
        """Hold the folder's lock ``name`` (waiting up to ``seconds``; :class:`Busy` past
        that). The folder is created private, and refused if it is not ours."""
        _private(self.folder)
        handle = os.open(os.path.join(self.folder, name), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + seconds
            while fcntl is not None:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise Busy(f"another process is delivering {self.folder}") from None
                    time.sleep(0.02)
            yield
        finally:
            os.close(handle)  # closing the descriptor releases the lock

    def delivering(self, seconds: float = LOCK_SECONDS) -> contextlib.AbstractContextManager[None]:
        """The delivery lock: one deliverer at a time, so calls go out in order."""
        return self._locked("deliver.lock", seconds)

    def append(self, calls: list[Call]) -> bool:
        """Keep ``calls`` after what waits; False when the spool is full and they were
        counted in ``dropped`` instead. Safe beside a delivery in progress. Each kept
        observation gets an ``event_id`` (Baton stores it once per id), since a kept call may
        be sent twice; live calls go without one, leaving Baton no key to keep."""
        for call in calls:
            if call.get("path") == "/v1/observations" and isinstance(call.get("body"), dict):
                call["body"].setdefault("event_id", os.urandom(8).hex())
        data = "".join(json.dumps(call, separators=(",", ":")) + "\n" for call in calls)
        with self._locked("append.lock", 10.0):
            try:
                size = os.path.getsize(self.events)
            except OSError:
                size = 0
            if size + len(data) > MAX_BYTES:
                self._write_number(self.dropped, self.read_number(self.dropped) + 1)
                return False
            if not os.path.exists(self.destination):
                self._write_text(
                    self.destination, json.dumps({"url": self.base_url, "token": self.with_token})
                )
            handle = os.open(self.events, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.lseek(handle, max(size - 1, 0), os.SEEK_SET)
                if size and os.read(handle, 1) != b"\n":
                    data = "\n" + data  # a line cut by a crash stays apart from ours
                try:
                    os.write(handle, data.encode())
                    os.fsync(handle)
                except OSError:
                    os.ftruncate(handle, size)  # nothing half-written stays behind
                    raise
            finally:
                os.close(handle)
        return True

    def deliver(self, send: Callable[[Call], object], seconds: float = DELIVER_SECONDS) -> int:
        """Send waiting calls oldest first (the caller holds :meth:`delivering`) until none
        is left, Baton cannot take one, or ``seconds`` are up; how many were delivered.
        Raises :class:`Unreachable` when Baton cannot take the next one."""
        done = self.read_number(self.offset)
        delivered = 0
        deadline = time.monotonic() + seconds
        try:
            events = open(self.events, "rb")  # noqa: SIM115  # read while others append
        except FileNotFoundError:
            return 0
        with events:
            if done > os.fstat(events.fileno()).st_size:
                done = 0  # an offset left from an earlier file: start from the top
            events.seek(done)
            while True:
                raw = events.readline()
                if not raw.endswith(b"\n"):  # the end, or a line still being written
                    if self._finish(done):
                        return delivered
                    events.seek(done)
                    continue
                if time.monotonic() > deadline:
                    return delivered
                try:
                    call = json.loads(raw)
                except ValueError:
                    call = None
                if not raw.strip():
                    pass
                elif not is_hook_call(call):
                    self._keep_rejected(raw.decode(errors="replace"), "not a hook call")
                else:
                    try:
                        send(call)
                        delivered += 1
                    except Rejected as error:
                        self._keep_rejected(call, str(error))
                done += len(raw)
                self._write_number(self.offset, done)

    def _finish(self, done: int) -> bool:
        """At the end of what was read: when nothing was appended meanwhile, empty the
        spool (True); else go on reading. A last line cut short by a crash (no appender is
        writing while this holds the append lock) is set aside."""
        with self._locked("append.lock", 10.0):
            try:
                with open(self.events, "rb") as events:
                    events.seek(done)
                    tail = events.read()
            except FileNotFoundError:
                tail = b""
            if b"\n" in tail:
                return False
            if tail:
                self._keep_rejected(tail.decode(errors="replace"), "a line cut short")
            for path in (self.offset, self.events):  # offset first: a crash resends, never skips
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            return True

    def take_dropped(self) -> int:
        """How many events were not kept since last asked (and reset it)."""
        count = self.read_number(self.dropped)
        if count:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.dropped)
        return count

    def _keep_rejected(self, call: object, reason: str) -> None:
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
        Spool._write_text(path, str(value))

    @staticmethod
    def _write_text(path: str, text: str) -> None:
        """Replace ``path`` with ``text`` at once (written aside, then renamed)."""
        aside = path + ".new"
        with open(aside, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(aside, path)


class Waiting:
    """What one spool of a data dir holds undelivered (``baton doctor`` reports it)."""

    def __init__(self, folder: str, url: str | None, token: bool, events: int, rejected: int):
        self.folder, self.url, self.token = folder, url, token
        self.events, self.rejected = events, rejected


def waiting(data_dir: str) -> list[Waiting]:
    """Every spool of ``data_dir`` with calls waiting or set aside: its folder, the URL it
    delivers to (None for a spool older than that record) and whether with a token, how
    many calls wait and how many Baton refused (kept in ``rejected.jsonl``)."""
    found = []
    try:
        folders = sorted(os.scandir(os.path.join(data_dir, FOLDER)), key=lambda entry: entry.name)
    except OSError:
        return []
    for entry in folders:
        if not entry.is_dir(follow_symlinks=False):
            continue
        events = _lines(
            os.path.join(entry.path, "events.jsonl"),
            Spool.read_number(os.path.join(entry.path, "delivered")),
        )
        rejected = _lines(os.path.join(entry.path, "rejected.jsonl"), 0)
        if not events and not rejected:
            continue
        try:
            with open(os.path.join(entry.path, "destination.json"), encoding="utf-8") as file:
                destination = json.load(file)
            url, token = str(destination["url"]), bool(destination["token"])
        except (OSError, ValueError, KeyError, TypeError):
            url, token = None, False
        found.append(Waiting(entry.path, url, token, events, rejected))
    return found


def _lines(path: str, offset: int) -> int:
    """How many lines ``path`` holds past byte ``offset`` (0 when it is missing)."""
    try:
        with open(path, "rb") as file:
            file.seek(offset if offset <= os.fstat(file.fileno()).st_size else 0)
            return sum(1 for line in file if line.strip())
    except OSError:
        return 0


def _private(folder: str) -> None:
    """Create ``folder`` (and its parents) for this user only; refuse one that is a link or
    another user's: whoever can write there could make this user's hooks send anything."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    for path in (os.path.dirname(folder), folder):
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
            raise OSError(f"{path} is a link or not this user's: not used for the spool")
