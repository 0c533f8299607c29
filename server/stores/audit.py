"""A namespace's audit log: each act of forgetting, updating or consolidating memories, who
did it and why. Never trimmed.

Each entry is sealed: an HMAC, under a key derived from the installation's signing key
(``baton.server.runtime.signing``), of the namespace and the entry's fields. An entry of forgetting
is what lets a checkpoint accept a record forgotten since the previous one; the seal makes
that excuse as hard to forge as the checkpoint's signature (docs/integrity.md).
"""

from __future__ import annotations

import hmac
from itertools import chain
from typing import Any

import msgpack
from redis.asyncio import Redis

from baton.server.model.clock import utc_now
from baton.server.model.keys import Keys
from baton.server.model.models import AuditEntry
from baton.server.runtime import codec
from baton.server.runtime.signing import InstallationKey, seal
from baton.server.stores.changes import Command

FORGET = "forget"
SEALED = (b"at", b"agent", b"action", b"target", b"reason", b"details")  # in this order
SEAL = b"seal"
READ_BATCH = 1000


class AuditLog:
    """The audit log of one namespace."""

    def __init__(self, redis: Redis, keys: Keys, namespace: str, key: InstallationKey) -> None:
        self.redis = redis
        self.keys = keys
        self.namespace = namespace.encode()
        self.key = key

    def can_seal(self) -> None:
        """Read the installation's key now (an error if it cannot be read or made), so an
        act is never done whose entry could not be sealed."""
        _ = self.key.seal_key

    def _seal(self, seal_key: bytes, fields: dict[bytes, bytes]) -> str:
        return seal(seal_key, [self.namespace, *(fields.get(name, b"") for name in SEALED)])

    def entry(
        self,
        agent: str,
        action: str,
        target: str,
        reason: str,
        details: dict[str, Any] | None = None,
    ) -> Command:
        """The command that adds a sealed entry, for a change that records it in the same
        step (:meth:`RecordStore.write_all`)."""
        fields = self._sealed(agent, action, target, reason, details)
        return Command("XADD", self.keys.audit, ("*", *chain.from_iterable(fields.items())))

    async def append(self, entry: Command) -> str:
        """Add an entry (:meth:`entry`) on its own; its stream id."""
        fields = dict(zip(entry.args[1::2], entry.args[2::2], strict=True))  # (after the "*")
        added = await self.redis.xadd(entry.key, fields)
        return codec.text(added)

    def _sealed(
        self, agent: str, action: str, target: str, reason: str, details: dict[str, Any] | None
    ) -> dict[bytes, bytes]:
        fields: dict[bytes, bytes] = {
            b"at": utc_now().encode(),
            b"agent": agent.encode(),
            b"action": action.encode(),
            b"target": target.encode(),
            b"reason": reason.encode(),
            b"details": msgpack.packb(details or {}),
        }
        fields[SEAL] = self._seal(self.key.seal_key, fields).encode()
        return fields

    async def newest(self, limit: int) -> list[AuditEntry]:
        raw = await self.redis.xrevrange(self.keys.audit, count=limit)
        return [
            AuditEntry(
                id=entry_id.decode(),
                at=f[b"at"].decode(),
                agent=f[b"agent"].decode(),
                action=f[b"action"].decode(),
                target=f[b"target"].decode(),
                reason=f[b"reason"].decode(),
                details=msgpack.unpackb(f[b"details"]),
            )
            for entry_id, f in codec.entries(raw)
        ]

    async def forgotten(self, seal_key: bytes, since: str = "-") -> set[str]:
        """The targets of the entries of forgetting from ``since`` (a stream id) on whose
        seal holds under ``seal_key``: an entry added with access to Redis alone is not
        among them."""
        targets: set[str] = set()
        last = "+"
        while True:
            entries = codec.entries(
                await self.redis.xrevrange(self.keys.audit, max=last, min=since, count=READ_BATCH)
            )
            for entry_id, fields in entries:
                if fields.get(b"action") == FORGET.encode() and hmac.compare_digest(
                    fields.get(SEAL, b""), self._seal(seal_key, fields).encode()
                ):
                    targets.add(fields[b"target"].decode())
                last = f"({entry_id.decode()}"
            if len(entries) < READ_BATCH:
                return targets
