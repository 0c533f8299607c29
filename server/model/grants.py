"""Grants inside a namespace: which records, memory projects and inboxes an agent may touch.

Without grants a namespace works as it always did: every agent it admits reads and writes
everything in it. An admin gives an agent grants (``baton token grant``, ``POST /v1/grants``):

- ``records:<prefix>``: the records whose ref starts with the prefix (``*``: every record);
- ``memories:<project>``: the memories, sessions and observations of a project (``*``: all);
- ``packets:<agent>``: the packets ``agent`` sent or receives (``*``: all packets).

Each grant gives ``read`` or ``write`` (write includes read). Two rules follow:

- **An agent with grants is confined**: the records and memories it may reach are those its
  grants cover; an operation that would reach anything else is refused (403, audited).
  Memories are reached through the memory operations only, never as records.
- **A namespace with grants keeps packets private**: an agent (confined or not) reads only
  the packets it sent or receives, and those its ``packets`` grants name.

Operators (admin tokens, open mode, local processes) are never confined. Each operation of
the table declares what it reaches (its ``baton.server.operation.Guard``); an operation
without one is refused to confined agents, so a new operation is closed to them until
someone decides otherwise. A memory, session or observation of no project is shared by
every project: any memories grant reads it, only ``memories:*=write`` changes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

import msgspec

from baton.server.model.errors import Forbidden, InvalidInput
from baton.server.model.validation import check_agent

if TYPE_CHECKING:
    from baton.server.model.models import Packet

Kind = Literal["records", "memories", "packets"]
Access = Literal["read", "write"]
EVERYTHING = "*"
SHARED = ""  # the project of a memory or session saved without one: shared by every project
MEMORY_SCOPE = "memory/"  # memories are records under this scope (``memories.memory_ref``)
MAX_GRANTS = 100  # grants of one agent in one namespace
MAX_TARGET = 512  # a ref prefix, a project, an agent


class Grant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one grant gives: ``access`` to the ``kind`` of things ``target`` names."""

    kind: Kind
    target: str
    access: Access = "read"

    def __post_init__(self) -> None:
        if not self.target or len(self.target) > MAX_TARGET:
            raise InvalidInput("target", f"a grant's target is 1-{MAX_TARGET} characters")
        if self.kind == "packets" and self.target != EVERYTHING:
            check_agent(self.target, field="target")

    def covers(self, need: Need) -> bool:
        if need.kind != self.kind or (need.access == "write" and self.access != "write"):
            return False
        if self.target == EVERYTHING:
            return True
        if need.target == SHARED:  # a memory of no project: every project's (reading only)
            return self.kind == "memories" and need.access == "read"
        if need.target is None:
            return False
        return (
            need.target.startswith(self.target)
            if self.kind == "records"
            else (need.target == self.target)
        )

    def text(self) -> str:
        """``records:docs/=write``: the form ``baton token grant`` takes and shows."""
        return f"{self.kind}:{self.target}={self.access}"


def parse_grant(text: str) -> Grant:
    """``records:docs/=write``, ``memories:web`` (read), ``packets:bob``."""
    body, _, access = (
        text.rpartition("=")
        if text.endswith(("=read", "=write"))
        else (
            text,
            "",
            "read",
        )
    )
    kind, _, target = body.partition(":")
    try:
        return msgspec.convert({"kind": kind, "target": target, "access": access}, Grant)
    except (msgspec.ValidationError, InvalidInput):
        raise InvalidInput(
            "grant",
            f"{text!r}: give records:PREFIX, memories:PROJECT or packets:AGENT, "
            "then =read (the default) or =write",
        ) from None


class AgentGrants(msgspec.Struct, kw_only=True):
    """An agent's grants in a namespace; no grants: the agent is not confined."""

    agent: str
    grants: list[Grant]


class Need(NamedTuple):
    """What an operation reaches: ``target`` None means any (only ``*`` covers it). Kind
    ``operation`` is an operation that declares no guard: closed to confined agents."""

    kind: Kind | Literal["operation"]
    target: str | None
    access: Access

    def text(self) -> str:
        if self.kind == "operation":
            return f"the operation {self.target} (closed to agents with grants)"
        if self.target == SHARED:
            return f"{self.access} {self.kind} of no project"
        return f"{self.access} {self.kind}:{self.target or EVERYTHING}"


def unguarded(name: str) -> Need:
    """A route or operation that declares nothing it reaches: closed to confined agents."""
    return Need("operation", name, "read")


def record(ref: str | None, access: Access = "read") -> Need:
    return Need("records", ref, access)


def memories(project: str | None, access: Access = "read") -> Need:
    """A project's memories; ``None``: every project's (a search naming no project)."""
    return Need("memories", project, access)


def memory_of(project: str | None, access: Access = "read") -> Need:
    """One memory, session or observation of ``project``: one of no project is shared by
    every project, so any memories grant reads it and only ``memories:*=write`` changes it."""
    return Need("memories", SHARED if project is None else project, access)


class Denied(Forbidden):
    """A confined agent reaching what its grants do not cover."""

    def __init__(self, agent: str, need: Need) -> None:
        super().__init__(
            f"{agent} has grants in this namespace and they do not cover {need.text()}; "
            "an admin can grant it (baton token grant)",
            agent=agent,
            needs=need.text(),
        )
        self.agent = agent
        self.need = need


@dataclass(frozen=True)
class Rights:
    """What a non-operator agent may reach in a namespace that has grants."""

    agent: str
    grants: tuple[Grant, ...] | None  # None: not confined (records and memories are open)

    @property
    def confined(self) -> bool:
        return self.grants is not None

    def may(self, need: Need) -> bool:
        if self.grants is None:
            return True
        if need.kind == "records" and (need.target or "").startswith(MEMORY_SCOPE):
            return False
        return any(grant.covers(need) for grant in self.grants)

    def require(self, needs: Iterable[Need]) -> None:
        for need in needs:
            if not self.may(need):
                raise Denied(self.agent, need)

    def sees(self, packet: Packet) -> bool:
        """Whether this agent may read ``packet``: its sender, its receiver, or granted."""
        if self.agent in (packet.from_agent, packet.to_agent):
            return True
        named = (EVERYTHING, packet.to_agent, packet.from_agent)
        return any(grant.kind == "packets" and grant.target in named for grant in self.grants or ())

    def packet(self, packet: Packet) -> Packet:
        """``packet``, or :class:`Denied` when this agent may not read it."""
        if not self.sees(packet):
            raise Denied(self.agent, Need("packets", packet.to_agent, "read"))
        return packet
