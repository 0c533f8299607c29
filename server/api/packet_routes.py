"""REST routes for handoff packets and agents, under ``/v1``."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter, QueryParameter

from baton.server.api.auth import require_admin
from baton.server.api.deps import CallerDep, HandoffsDep
from baton.server.api.problems import problems
from baton.server.errors import Forbidden
from baton.server.models import AgentSummary, Packet, PacketPage, PacketState, Resumed


class PinBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ref: str
    version: Annotated[int, msgspec.Meta(ge=1)] | None = None


class HandoffBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A packet for ``to``. Without ``pins``, everything your session touched is pinned."""

    to: str
    summary: str
    next: list[str] = []
    open: list[str] = []
    pins: list[PinBody] | None = None
    expires_in: Annotated[float, msgspec.Meta(gt=0)] | None = None
    note: str | None = None


class ResumeBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    lease_seconds: Annotated[float, msgspec.Meta(gt=0)] | None = None


class ReleaseBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    reason: str | None = None


class FailBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    error: str


class HandoffController(Controller):
    path = "/v1"
    tags = ("handoffs",)

    @post(
        "/handoffs",
        summary="Hand work to another agent: a packet in its queue",
        responses=problems(413),
    )
    async def handoff(
        self, data: JSONBody[HandoffBody], handoffs: HandoffsDep, caller: CallerDep
    ) -> Packet:
        pins = (
            None
            if data.pins is None
            else [{"ref": pin.ref, "version": pin.version} for pin in data.pins]
        )
        return await handoffs.handoff(
            from_agent=caller.agent,
            to_agent=data.to,
            summary=data.summary,
            next_steps=data.next,
            open_questions=data.open,
            pins=pins,
            expires_in=data.expires_in,
            note=data.note,
            session=caller.session,
        )

    @get(
        "/handoffs",
        summary="Packets, newest first, by state, receiver and sender",
        responses=problems(),
    )
    async def list_handoffs(
        self,
        handoffs: HandoffsDep,
        status: FromQuery[PacketState | None] = None,
        to: FromQuery[str | None] = None,
        from_agent: Annotated[str | None, QueryParameter(name="from")] = None,
        limit: Annotated[int, Parameter(ge=1)] = 50,
        cursor: FromQuery[str | None] = None,
    ) -> PacketPage:
        return await handoffs.list(
            status=status, to_agent=to, from_agent=from_agent, limit=limit, cursor=cursor
        )

    @get(
        "/handoffs/{packet_id:str}",
        summary="One packet with its transition log",
        responses=problems(404),
    )
    async def get_handoff(self, packet_id: FromPath[str], handoffs: HandoffsDep) -> Packet:
        return await handoffs.get(packet_id)

    @post(
        "/agents/{agent:str}/resume",
        summary="Claim the agent's oldest queued packet",
        status_code=200,
        responses=problems(403, 413),
    )
    async def resume(
        self,
        agent: FromPath[str],
        handoffs: HandoffsDep,
        caller: CallerDep,
        data: JSONBody[ResumeBody | None] = None,
    ) -> Resumed:
        if caller.agent != agent:
            raise Forbidden(
                f"{caller.agent} cannot resume {agent}'s packets; send X-Baton-Agent: {agent}",
                agent=agent,
            )
        lease = None if data is None else data.lease_seconds
        return await handoffs.resume(agent, lease_seconds=lease, session=caller.session)

    @post(
        "/handoffs/{packet_id:str}/complete",
        summary="Finish a claimed packet",
        status_code=200,
        responses=problems(403, 404, 409),
    )
    async def complete(
        self, packet_id: FromPath[str], handoffs: HandoffsDep, caller: CallerDep
    ) -> Packet:
        return await handoffs.complete(packet_id, caller.agent)

    @post(
        "/handoffs/{packet_id:str}/release",
        summary="Give a claimed packet back to the queue",
        status_code=200,
        responses=problems(403, 404, 409, 413),
    )
    async def release(
        self,
        packet_id: FromPath[str],
        handoffs: HandoffsDep,
        caller: CallerDep,
        data: JSONBody[ReleaseBody | None] = None,
    ) -> Packet:
        reason = (data.reason if data else None) or "released"
        return await handoffs.release(packet_id, caller.agent, reason=reason)

    @post(
        "/handoffs/{packet_id:str}/fail",
        summary="Give up on a claimed packet, saying why",
        status_code=200,
        responses=problems(403, 404, 409, 413),
    )
    async def fail(
        self,
        packet_id: FromPath[str],
        data: JSONBody[FailBody],
        handoffs: HandoffsDep,
        caller: CallerDep,
    ) -> Packet:
        return await handoffs.fail(packet_id, caller.agent, data.error)

    @post(
        "/handoffs/{packet_id:str}/requeue",
        summary="Put a failed or expired packet back in its queue",
        status_code=200,
        responses=problems(403, 404, 409),
    )
    async def requeue(
        self, packet_id: FromPath[str], handoffs: HandoffsDep, caller: CallerDep
    ) -> Packet:
        require_admin(caller, "requeue")
        return await handoffs.requeue(packet_id, caller.agent)

    @get(
        "/agents",
        summary="Every known agent with its queued, claimed and failed counts",
        responses=problems(),
    )
    async def agents(self, handoffs: HandoffsDep) -> list[AgentSummary]:
        return await handoffs.agents()
