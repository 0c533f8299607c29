"""Notices: an agent is told, within a second, that a record one of its packets pins got a
newer version, instead of finding out at its next ``resume``.

A notice is derived from the write, never from the memory of the process that took it
(``baton.queue.notifier`` reads the writes' events and calls :meth:`NoticeStore.derive`).
For a moved record, every held, queued or claimed packet pinning an
older version of it gets a notice on its receiver's stream (``baton:<ns>:notices:{agent}``),
unless the receiver wrote the version itself. From there an agent reads its notices (REST,
SSE, the Python client), its MCP sessions get them (pushed over stdio, with the next tool
result over HTTP), and its webhook is called (``baton.queue.jobs.deliver_webhook``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec
import structlog
from redis.exceptions import ResponseError

from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.keys import pinned_member
from baton.server.model.models import Event, Notice, NoticePage, Webhook, WebhookDelivery
from baton.server.model.validation import check_agent
from baton.server.runtime import codec
from baton.server.stores.store_base import NamespaceStore

if TYPE_CHECKING:
    from baton.server.stores.handoffs import HandoffStore
    from baton.server.stores.store_base import NamespaceParts

log = structlog.get_logger("baton.notices")

NOTICES_KEPT = 10_000  # per agent
DELIVERIES_KEPT = 100  # webhook attempts shown per agent
MAX_URL = 2048
LIVE = ("held", "queued", "claimed")  # the packets whose pins are told when they move
MARK_SECONDS = 30 * 86_400  # an MCP session's notice mark outlives any idle session
SIGNATURE_HEADER = "X-Baton-Signature"  # "sha256=" and the HMAC of the body, hex


def signature(secret: str, body: bytes) -> str:
    """The ``X-Baton-Signature`` of ``body``: HMAC-SHA256 with the agent's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class NoticeStore(NamespaceStore):
    """One namespace's notices and webhooks."""

    def __init__(self, namespace: NamespaceParts, handoffs: HandoffStore) -> None:
        super().__init__(namespace)
        self.handoffs = handoffs

    # -- deriving ------------------------------------------------------------------------------

    async def derive(self, events: Sequence[Event]) -> list[tuple[str, Notice]]:
        """The notices ``events`` (remember events) make, written to their agents' streams,
        each followed by a ``notice`` event for its agent (what wakes its open streams and
        the dashboard); each with its agent."""
        moved = [e for e in events if e.kind == "remember" and e.ref and e.version]
        if not moved:
            return []
        pins = await self._live_pins({e.ref for e in moved if e.ref})
        made: list[tuple[str, Notice]] = []
        for event in moved:
            assert event.ref is not None and event.version is not None
            for agent, packet_id, pinned in pins.get(event.ref, []):
                if pinned < event.version and agent != event.agent:
                    made.append(
                        (
                            agent,
                            Notice(
                                id="",
                                packet=packet_id,
                                ref=event.ref,
                                pinned_version=pinned,
                                version=event.version,
                                author=event.agent,
                                at=event.at,
                                event=event.id,
                            ),
                        )
                    )
        if made:
            batch = self.ns.batch()
            for agent, notice in made:
                fields = msgspec.structs.asdict(notice)
                del fields["id"]
                batch.pipe.xadd(
                    self.keys.notices(agent),
                    {name: str(value) for name, value in fields.items()},
                    maxlen=NOTICES_KEPT,
                    approximate=True,
                )
                text = f"{notice.ref} moved v{notice.pinned_version} -> v{notice.version}"
                self.activity.event(
                    batch, "notice", agent, text, ref=notice.ref, packet=notice.packet
                )
            ids = (await batch.execute())[::2]
            made = [
                (agent, msgspec.structs.replace(notice, id=codec.text(new_id)))
                for (agent, notice), new_id in zip(made, ids, strict=True)
            ]
        return made

    async def _live_pins(self, refs: set[str]) -> dict[str, list[tuple[str, str, int]]]:
        """For each of ``refs``, the held, queued and claimed packets pinning it: (receiver,
        packet id, version pinned), found by the pins' index (``keys.pinned``); an entry of
        a packet that is settled or gone is dropped from it here."""
        pipe = self.redis.pipeline(transaction=False)
        for ref in sorted(refs):
            start = pinned_member(ref)
            pipe.zrangebylex(self.keys.pinned, f"[{start}", f"({ref}\x01")
        members = [codec.text(raw) for reply in await pipe.execute() for raw in reply]
        packets = await self.handoffs.get_many([m.split("\0", 1)[1] for m in members])
        pins: dict[str, list[tuple[str, str, int]]] = {}
        settled = []
        for member in members:
            ref, packet_id = member.split("\0", 1)
            packet = packets.get(packet_id)
            if packet is None or packet.state not in LIVE:
                settled.append(member)
                continue
            for pin in packet.pins:
                if pin.ref == ref:
                    pins.setdefault(ref, []).append((packet.to_agent, packet_id, pin.version))
        if settled:
            await self.redis.zrem(self.keys.pinned, *settled)
        return pins

    # -- reading -------------------------------------------------------------------------------

    async def since(self, agent: str, after: str = "0-0", limit: int = 100) -> NoticePage:
        """``agent``'s notices after the one with id ``after``, oldest first."""
        agent = check_agent(agent)
        self.limits.check_page(limit)
        try:
            raw = await self.redis.xrange(self.keys.notices(agent), f"({after}", "+", count=limit)
        except ResponseError:
            raise InvalidInput(
                "after", f"{after!r} is not a notice id like 1765100000000-0"
            ) from None
        notices = [notice_of(entry_id, fields) for entry_id, fields in codec.entries(raw)]
        return NoticePage(agent=agent, notices=notices, last=notices[-1].id if notices else after)

    async def since_last_call(self, session: str, agent: str) -> list[Notice]:
        """The notices ``agent`` got since its session's previous call of this (none at the
        first: it notes where they start), for tool results to carry. One round trip when
        there are none."""
        mark = self.keys.session_notices(session)
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(mark)
        pipe.xrevrange(self.keys.notices(agent), count=1)
        after, newest = await pipe.execute()
        newest_id = codec.text(newest[0][0]) if newest else "0-0"
        if after is not None and codec.text(after) == newest_id:
            return []
        page = NoticePage(agent=agent, notices=[], last=newest_id)
        if after is not None:
            page = await self.since(agent, codec.text(after))
        await self.redis.set(mark, page.last, ex=MARK_SECONDS)
        return page.notices

    async def newest(self, agent: str) -> str:
        """The id of ``agent``'s newest notice ("0-0" when there is none)."""
        newest = codec.entries(await self.redis.xrevrange(self.keys.notices(agent), count=1))
        return codec.text(newest[0][0]) if newest else "0-0"

    # -- webhooks ------------------------------------------------------------------------------

    async def set_webhook(self, agent: str, url: str) -> Webhook:
        """Call ``url`` with each of ``agent``'s notices, signed with a new secret (shown in
        this answer only)."""
        agent = check_agent(agent)
        if len(url) > MAX_URL or any(c.isspace() or ord(c) < 32 for c in url):
            raise InvalidInput("url", f"must be a URL of at most {MAX_URL} characters, no spaces")
        try:
            parts = urlsplit(url)
            port = parts.port  # out of range: ValueError
        except ValueError as error:
            raise InvalidInput("url", f"is not a URL ({error})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            raise InvalidInput("url", "must be an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise InvalidInput(
                "url", "must not carry credentials (user:password@): deliveries are signed"
            )
        secret = "whsec_" + secrets.token_hex(32)
        created_at = utc_now()
        await self.redis.hset(
            self.keys.webhook(agent),
            mapping={"url": url, "secret": secret, "created_at": created_at},
        )
        return Webhook(agent=agent, url=url, created_at=created_at, secret=secret)

    async def webhook(self, agent: str) -> Webhook:
        """``agent``'s webhook without its secret, and its newest deliveries."""
        agent = check_agent(agent)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.keys.webhook(agent), "url", "created_at")
        pipe.lrange(self.keys.webhook_deliveries(agent), 0, -1)
        (url, created_at), deliveries = await pipe.execute()
        return Webhook(
            agent=agent,
            url=codec.text(url),
            created_at=codec.text(created_at),
            deliveries=[msgspec.convert(codec.unpack(raw), WebhookDelivery) for raw in deliveries][
                ::-1
            ],
        )

    async def drop_webhook(self, agent: str) -> Webhook:
        """Stop calling ``agent``'s webhook (its delivery log stays)."""
        agent = check_agent(agent)
        if not await self.redis.delete(self.keys.webhook(agent)):
            raise NotFound(f"{agent} has no webhook", agent=agent)
        return await self.webhook(agent)

    async def target(self, agent: str) -> tuple[str, str] | None:
        """``agent``'s webhook URL and secret, or None."""
        url, secret = await self.redis.hmget(self.keys.webhook(agent), "url", "secret")
        return None if url is None or secret is None else (codec.text(url), codec.text(secret))

    async def note_delivery(self, agent: str, delivery: WebhookDelivery) -> None:
        """Keep one delivery attempt in ``agent``'s log (the newest :data:`DELIVERIES_KEPT`)."""
        key = self.keys.webhook_deliveries(agent)
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, codec.pack(msgspec.to_builtins(delivery)))
        pipe.ltrim(key, -DELIVERIES_KEPT, -1)
        await pipe.execute()

    async def notice(self, agent: str, notice_id: str) -> Notice | None:
        """One of ``agent``'s notices by id (None once trimmed)."""
        raw = await self.redis.xrange(self.keys.notices(agent), notice_id, notice_id)
        entries = codec.entries(raw)
        return notice_of(*entries[0]) if entries else None


def notice_of(entry_id: bytes, fields: dict[bytes, bytes]) -> Notice:
    decoded = {key.decode(): value.decode() for key, value in fields.items()}
    return msgspec.convert({**decoded, "id": entry_id.decode()}, Notice, strict=False)
