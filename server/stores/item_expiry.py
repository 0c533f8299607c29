"""The expiry of LangGraph store items (``baton.agents.langgraph.BatonStore``'s ``ttl``).

An item is a Baton record; its expiry is kept beside the record's chain, not in it: a ttl
and a deadline per ref (``Keys.item_ttls``, ``Keys.item_deadlines``, one hash slot, one
script a change), so that a read which refreshes the ttl writes no version. The sweep
deletes an expired item as the store does, with a version whose value is null, written by
``baton``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from baton.server.model.clock import iso, now_us
from baton.server.model.identity import sweeper
from baton.server.model.thread_models import STORE_TAG
from baton.server.runtime import codec

if TYPE_CHECKING:
    from baton.server.stores.records import NamespaceWithRecords

Action = Literal["set", "clear", "refresh", "read"]


class ItemExpiry:
    """The expiring LangGraph store items of one namespace."""

    def __init__(self, ns: NamespaceWithRecords) -> None:
        self.ns = ns

    async def change(
        self, refs: list[str], action: Action, seconds: float | None = None
    ) -> dict[str, str | None]:
        """Set (``seconds``), clear, refresh or read the refs' expiry: each ref's deadline
        after the change (ISO time; None: it does not expire)."""
        keys = self.ns.keys
        reply = await self.ns.scripts.item_expiry(
            keys=[keys.item_deadlines, keys.item_ttls],
            args=[action, now_us(), "" if seconds is None else seconds, *refs],
        )
        return {
            ref: None if deadline is None else iso(float(deadline))
            for ref, deadline in zip(refs, reply, strict=True)
        }

    async def expire(self) -> list[str]:
        """Delete the items whose deadline passed (a null version, unless the record is
        already gone or null), and forget their expiry; the refs."""
        keys = self.ns.keys
        due = [
            raw.decode()
            for raw in codec.members(
                await self.ns.redis.zrangebyscore(keys.item_deadlines, "-inf", now_us())
            )
        ]
        caller = sweeper(self.ns.name)
        expired = []
        for ref in due:
            deadline = await self.ns.redis.zscore(keys.item_deadlines, ref)
            if deadline is None or deadline > now_us():  # read (refreshed) since
                continue
            [record] = await self.ns.records.read_versions([(ref, None)])
            if record is not None and record.forgotten is None and record.value is not None:
                await self.ns.records.remember(ref, None, agent=caller.agent, tags=[STORE_TAG])
            await self.change([ref], "clear")
            expired.append(ref)
        return expired
