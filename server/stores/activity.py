"""What happens in a namespace: the activity stream (the dashboard's feed and its live
updates) and session touches (which versions a session saw)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import structlog
from redis.asyncio import Redis

from baton.server.model.clock import now_us, utc_now
from baton.server.model.keys import NAMESPACES, Keys
from baton.server.model.models import Event
from baton.server.model.validation import check_session_id
from baton.server.runtime import codec
from baton.server.runtime.batch import Batch

if TYPE_CHECKING:
    from baton.server.runtime.scripts import Scripts

log = structlog.get_logger("baton.activity")
EVENTS_KEPT = 10_000
MAX_RECENT = 500


class Activity:
    """The activity stream and session touches of one namespace."""

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts,
        keys: Keys,
        namespace: str,
        batch: Callable[[], Batch],
    ) -> None:
        """``batch`` makes a batch for the namespace's topology."""
        self.redis = redis
        self.namespace = namespace
        self.scripts = scripts
        self.keys = keys
        self.batch = batch

    # -- events -------------------------------------------------------------------------------

    def event(
        self,
        batch: Batch,
        kind: str,
        agent: str,
        text: str,
        *,
        ref: str | None = None,
        packet: str | None = None,
        version: int | None = None,
    ) -> None:
        """Queue an event on ``batch``. Events are a capped stream written after the change
        they describe (a crash in between loses the event, never data)."""
        args = event_args(kind, agent, text, ref=ref, packet=packet, version=version)
        batch.pipe.execute_command("XADD", self.keys.events, *args)

    async def emit(
        self, kind: str, agent: str, text: str, *, ref: str | None = None, packet: str | None = None
    ) -> None:
        """Write one event now."""
        batch = self.batch()
        self.event(batch, kind, agent, text, ref=ref, packet=packet)
        await batch.execute()

    async def recent(self, limit: int = 50) -> list[Event]:
        """The newest events, newest first (at most ``MAX_RECENT``)."""
        raw = await self.redis.xrevrange(self.keys.events, count=max(1, min(limit, MAX_RECENT)))
        return [parse_event(event_id, fields) for event_id, fields in codec.entries(raw)]

    # -- session touches ----------------------------------------------------------------------

    async def touched(self, session_id: str) -> dict[str, int]:
        """The refs a session read or wrote, with the version it last saw of each."""
        raw = await self.redis.hgetall(self.keys.session_touched(check_session_id(session_id)))
        return {codec.text(ref): int(version) for ref, version in raw.items()}

    async def touch(
        self, session_id: str, agent: str, seen: dict[str, int], *, listed: bool = False
    ) -> None:
        """Record activity and what a session saw (see :meth:`queue_touch`)."""
        batch = self.batch()
        self.queue_touch(batch, session_id, agent, seen, listed=listed)
        await batch.execute()

    def queue_touch(
        self,
        batch: Batch,
        session_id: str,
        agent: str,
        seen: dict[str, int],
        *,
        listed: bool = False,
    ) -> None:
        """A session id used for the first time is created, an abandoned session is reopened.
        A session is listed (sessions, "where were we") once it holds something: a ref it
        saw, or ``listed`` (started with a working directory, or given an observation)."""
        moment = now_us()
        keys = [
            self.keys.session(session_id),
            self.keys.session_touched(session_id),
            self.keys.session_seen(session_id),
        ]
        args = [agent, utc_now(), *[item for pair in seen.items() for item in pair]]
        batch.script(self.scripts.touch_session, keys, args)
        if seen or listed:
            batch.pipe.zadd(self.keys.sessions, {session_id: moment}, nx=True)
        batch.pipe.zadd(self.keys.active_sessions, {session_id: moment})
        batch.pipe.sadd(NAMESPACES, self.namespace)  # so the periodic sweep visits it


def event_args(
    kind: str,
    agent: str,
    text: str,
    *,
    ref: str | None = None,
    packet: str | None = None,
    version: int | None = None,
) -> list[str]:
    """The arguments of an event's XADD after the stream's key: capped at about
    ``EVENTS_KEPT`` entries, then the event's fields (``version``: the version of ``ref``
    a ``remember`` announces; remember.lua adds it to the fields it is given)."""
    return [
        *("MAXLEN", "~", str(EVENTS_KEPT), "*"),
        *("kind", kind, "agent", agent, "text", text),
        *("ref", ref or "", "packet", packet or "", "at", utc_now()),
        *(() if version is None else ("version", str(version))),
    ]


async def stream_end(redis: Redis, keys: Keys) -> str:
    """The id of the namespace's newest event ("0-0" when there is none)."""
    newest = codec.entries(await redis.xrevrange(keys.events, count=1))
    return newest[0][0].decode() if newest else "0-0"


async def follow(redis: Redis, keys: Keys, wait_ms: int, after: str) -> AsyncIterator[Event]:
    """Every event of the namespace after the one with id ``after``, for as long as the
    caller iterates; a failed read is logged and retried (a dashboard keeps waiting through
    a Redis restart)."""
    last = after
    while True:
        try:
            reply = await redis.xread({keys.events: last}, block=wait_ms, count=100)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("event stream read failed; retrying", key=keys.events)
            await asyncio.sleep(1)
            continue
        for event_id, fields in codec.read_entries(reply):
            last = event_id.decode()
            yield parse_event(event_id, fields)


def parse_event(event_id: bytes, fields: dict[bytes, bytes]) -> Event:
    decoded = {key.decode(): value.decode() for key, value in fields.items()}
    return Event(
        id=event_id.decode(),
        at=decoded["at"],
        kind=decoded["kind"],
        agent=decoded["agent"],
        text=decoded["text"],
        ref=decoded["ref"] or None,
        packet=decoded["packet"] or None,
        version=int(decoded["version"]) if decoded.get("version") else None,
    )
