"""The grants of one namespace (``baton.server.model.grants`` says what they mean): one hash,
agent -> its grants, read once per call of a non-operator so a change applies at once in
every process; refusals audited, once a minute per agent and target."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec
import redis.exceptions
import structlog
from redis.asyncio import Redis

from baton.server.model.errors import Forbidden, InvalidInput
from baton.server.model.grants import MAX_GRANTS, AgentGrants, Denied, Grant, Need, Rights
from baton.server.model.keys import Keys
from baton.server.model.validation import check_agent
from baton.server.runtime import codec
from baton.server.runtime.connection import write_refused

if TYPE_CHECKING:
    from baton.server.model.identity import Caller
    from baton.server.stores.audit import AuditLog

log = structlog.get_logger("baton.grants")

DENIAL_AUDIT_SECONDS = 60  # one audit entry per agent and target within this


class GrantStore:
    """The grants of one namespace: one hash, agent -> its grants (JSON)."""

    def __init__(self, redis: Redis, keys: Keys, audit: AuditLog) -> None:
        self.redis = redis
        self.keys = keys
        self.audit = audit

    async def rights(self, caller: Caller) -> Rights | None:
        """What ``caller`` may reach; None when nothing is restricted for it (an operator,
        or a namespace without grants). One read per call, so a change applies at once in
        every process."""
        if caller.admin:
            return None
        table = await self.redis.hgetall(self.keys.grants)
        if not table:
            return None
        mine = table.get(caller.agent.encode())
        grants = None if mine is None else tuple(msgspec.json.decode(mine, type=list[Grant]))
        return Rights(caller.agent, grants)

    async def check(self, caller: Caller, needs: Iterable[Need]) -> Rights | None:
        """:meth:`rights`, refusing (audited) what they do not cover: for the routes
        outside the operation table."""
        rights = await self.rights(caller)
        if rights is not None:
            try:
                rights.require(needs)
            except Denied as denied:
                await self.audit_denial(denied.agent, denied.need.text())
                raise
        return rights

    async def operators_only(self, caller: Caller, what: str) -> None:
        """Refuse a non-operator ``what`` (the dashboard, its event stream) in a namespace
        with grants, audited: those views show every agent's packets and records."""
        if not caller.admin and await self.redis.exists(self.keys.grants):
            await self.audit_denial(caller.agent, what)
            raise Forbidden(
                f"{what} of a namespace with grants is for operators (an admin token)",
                agent=caller.agent,
            )

    async def every(self) -> list[AgentGrants]:
        table = await self.redis.hgetall(self.keys.grants)
        return sorted(
            (
                AgentGrants(
                    agent=codec.text(agent), grants=msgspec.json.decode(raw, type=list[Grant])
                )
                for agent, raw in table.items()
            ),
            key=lambda each: each.agent,
        )

    async def set(self, agent: str, grants: list[Grant]) -> AgentGrants:
        """Replace ``agent``'s grants (duplicates dropped); none: it is no longer confined."""
        agent = check_agent(agent, field="agent")
        unique: list[Grant] = list(dict.fromkeys(grants))
        if len(unique) > MAX_GRANTS:
            raise InvalidInput("grants", f"at most {MAX_GRANTS} grants per agent")
        if unique:
            await self.redis.hset(self.keys.grants, agent, msgspec.json.encode(unique))
        else:
            await self.redis.hdel(self.keys.grants, agent)
        return AgentGrants(agent=agent, grants=unique)

    async def audit_denial(self, agent: str, target: str) -> None:
        """An audit entry for a refusal of ``target`` to ``agent``, once a minute per agent
        and target (a refused agent retrying in a loop adds one entry a minute, not one per
        try)."""
        digest = hashlib.sha256(f"{agent}\0{target}".encode()).hexdigest()[:32]
        try:
            if await self.redis.set(self.keys.denial(digest), 1, nx=True, ex=DENIAL_AUDIT_SECONDS):
                await self.audit.append(self.audit.entry(agent, "denied", target, "not granted"))
        except redis.exceptions.ResponseError as error:
            if write_refused(error) is None:
                raise
            log.warning("denial not audited: Redis refuses writes", agent=agent, target=target)
