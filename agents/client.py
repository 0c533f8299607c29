"""The Python client for Baton's REST API, blocking (:class:`BatonClient`) and asyncio
(:class:`AsyncBatonClient`).

    with BatonClient("http://127.0.0.1:8765", agent="scout") as baton:
        baton.remember("listing/482/assessment", {"verdict": "apply"}, confidence=0.8)
        packet = baton.handoff("executor", "Two listings worth an application")

Results are the same typed structs the server returns (``baton.server.models``); errors are
raised as :class:`BatonAPIError` subclasses carrying the problem+json body.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from baton.server.models import (
    AgentSummary,
    History,
    OutcomeEntry,
    OutcomeReport,
    Packet,
    PacketPage,
    RecordPage,
    RecordVersion,
    Remembered,
    Resumed,
    Session,
    Stats,
)

T = TypeVar("T")


class BatonAPIError(Exception):
    """An error answer from Baton; ``problem`` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status}: {problem.get('detail') or problem.get('title')}")
        self.status = status
        self.problem = problem
        self.detail = str(problem.get("detail", ""))


class InvalidInputError(BatonAPIError):
    """422 (or 400): the request was malformed; ``problem["field"]`` names the field."""


class UnauthorizedError(BatonAPIError):
    """401: tokens are required and none (or an unknown one) was sent."""


class ForbiddenError(BatonAPIError):
    """403: another agent's packet, session or namespace, or acting as another agent."""


class NotFoundError(BatonAPIError):
    """404: unknown ref, version, packet or session."""


class ConflictError(BatonAPIError):
    """409: version conflict or wrong packet state."""


class TooLargeError(BatonAPIError):
    """413: value or body over the limit."""


class UnavailableError(BatonAPIError):
    """503: Baton cannot reach its Redis; retry later."""


class UnreachableError(BatonAPIError):
    """Baton itself did not answer (refused, timed out, cut off); ``status`` is 0."""

    def __init__(self, error: httpx.TransportError) -> None:
        super().__init__(0, {"title": "Unreachable", "detail": f"{type(error).__name__}: {error}"})


_ERRORS: dict[int, type[BatonAPIError]] = {
    400: InvalidInputError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: TooLargeError,
    422: InvalidInputError,
    503: UnavailableError,
}


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request and the type its answer decodes to."""

    method: str
    path: str
    result: type[T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def _decode(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise _ERRORS.get(response.status_code, BatonAPIError)(response.status_code, problem)
    return msgspec.json.decode(response.content, type=call.result)


def _in_path(text: str, *, segments: bool = False) -> str:
    """``text`` escaped for a URL path: one segment, or with ``segments`` (a ref) one per
    slash; "." and ".." are spelled out, so no value can make the path reach another route."""
    parts = text.split("/") if segments else [text]
    return "/".join(
        quote(part, safe="") if part not in (".", "..") else part.replace(".", "%2E")
        for part in parts
    )


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class Calls:
    """Builds every call; both clients send them."""

    @staticmethod
    def remember(
        ref: str,
        value: Any,
        *,
        tags: Sequence[str] = (),
        confidence: float = 0.5,
        expected_version: int | None = None,
    ) -> Call[Remembered]:
        body = {
            "ref": ref,
            "value": value,
            "tags": list(tags),
            "confidence": confidence,
            "expected_version": expected_version,
        }
        return Call("POST", "/v1/records", Remembered, json=_drop_none(body))

    @staticmethod
    def recall(ref: str, version: int | None = None) -> Call[RecordVersion]:
        return Call(
            "GET",
            f"/v1/records/{_in_path(ref, segments=True)}",
            RecordVersion,
            params=_drop_none({"version": version}),
        )

    @staticmethod
    def list_records(
        *,
        scope: str | None = None,
        tags: Sequence[str] = (),
        tags_mode: str = "all",
        min_confidence: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Call[RecordPage]:
        params = {
            "scope": scope,
            "tags": list(tags) or None,
            "tags_mode": tags_mode,
            "min_confidence": min_confidence,
            "limit": limit,
            "cursor": cursor,
        }
        return Call("GET", "/v1/records", RecordPage, params=_drop_none(params))

    @staticmethod
    def history(ref: str) -> Call[History]:
        return Call("GET", f"/v1/history/{_in_path(ref, segments=True)}", History)

    @staticmethod
    def outcomes(ref: str) -> Call[list[OutcomeEntry]]:
        return Call("GET", f"/v1/outcomes/{_in_path(ref, segments=True)}", list[OutcomeEntry])

    @staticmethod
    def record_outcome(
        outcome: str,
        outcome_ref: str,
        *,
        refs: Sequence[str] | None = None,
        note: str | None = None,
        handoff_id: str | None = None,
    ) -> Call[OutcomeReport]:
        body = {
            "outcome": outcome,
            "outcome_ref": outcome_ref,
            "refs": None if refs is None else list(refs),
            "note": note,
            "handoff_id": handoff_id,
        }
        return Call("POST", "/v1/outcomes", OutcomeReport, json=_drop_none(body))

    @staticmethod
    def handoff(
        to: str,
        summary: str,
        *,
        next: Sequence[str] = (),
        open: Sequence[str] = (),
        pins: Sequence[dict[str, Any]] | None = None,
        expires_in: float | None = None,
        note: str | None = None,
    ) -> Call[Packet]:
        body = {
            "to": to,
            "summary": summary,
            "next": list(next),
            "open": list(open),
            "pins": None if pins is None else list(pins),
            "expires_in": expires_in,
            "note": note,
        }
        return Call("POST", "/v1/handoffs", Packet, json=_drop_none(body))

    @staticmethod
    def resume(agent: str, lease_seconds: float | None = None) -> Call[Resumed]:
        body = _drop_none({"lease_seconds": lease_seconds})
        return Call("POST", f"/v1/agents/{_in_path(agent)}/resume", Resumed, json=body)

    @staticmethod
    def settle(packet_id: str, action: str, body: dict[str, Any]) -> Call[Packet]:
        return Call(
            "POST", f"/v1/handoffs/{_in_path(packet_id)}/{action}", Packet, json=_drop_none(body)
        )

    @staticmethod
    def get_handoff(packet_id: str) -> Call[Packet]:
        return Call("GET", f"/v1/handoffs/{_in_path(packet_id)}", Packet)

    @staticmethod
    def list_handoffs(
        *,
        status: str | None = None,
        to: str | None = None,
        from_agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Call[PacketPage]:
        params = {"status": status, "to": to, "from": from_agent, "limit": limit, "cursor": cursor}
        return Call("GET", "/v1/handoffs", PacketPage, params=_drop_none(params))

    @staticmethod
    def agents() -> Call[list[AgentSummary]]:
        return Call("GET", "/v1/agents", list[AgentSummary])

    @staticmethod
    def stats(verify: bool = False) -> Call[Stats]:
        return Call("GET", "/v1/stats", Stats, params={"verify": verify})

    @staticmethod
    def start_session() -> Call[Session]:
        return Call("POST", "/v1/sessions", Session)


def _headers(
    agent: str, session: str | None, namespace: str | None, token: str | None
) -> dict[str, str]:
    """Identity headers; ``token`` defaults to ``BATON_TOKEN`` (an empty string sends none)."""
    token = os.environ.get("BATON_TOKEN") if token is None else token
    return _drop_none(
        {
            "X-Baton-Agent": agent,
            "X-Baton-Session": session,
            "X-Baton-Namespace": namespace,
            "Authorization": f"Bearer {token}" if token else None,
        }
    )


class BatonClient:
    """Blocking client. ``agent`` is who you are; ``session`` (optional) makes Baton remember
    what you touch, for default pins and outcome refs; call :meth:`start_session` for one.
    ``token`` (default ``BATON_TOKEN``) is sent as a bearer token: an agent token must belong
    to ``agent``, an admin token may act as any agent."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str,
        session: str | None = None,
        namespace: str | None = None,
        timeout: float = 10.0,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.agent = agent
        self._http = httpx.Client(
            base_url=base_url,
            headers=_headers(agent, session, namespace, token),
            timeout=timeout,
            transport=transport,
        )

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params
            )
        except httpx.TransportError as error:
            raise UnreachableError(error) from error
        return _decode(call, response)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def start_session(self) -> Session:
        """Start a session and send its id with every later request."""
        session = self._send(Calls.start_session())
        self._http.headers["X-Baton-Session"] = session.id
        return session

    def remember(self, ref: str, value: Any, **options: Any) -> Remembered:
        return self._send(Calls.remember(ref, value, **options))

    def recall(self, ref: str, version: int | None = None) -> RecordVersion:
        return self._send(Calls.recall(ref, version))

    def list_records(self, **filters: Any) -> RecordPage:
        return self._send(Calls.list_records(**filters))

    def history(self, ref: str) -> History:
        return self._send(Calls.history(ref))

    def outcomes(self, ref: str) -> list[OutcomeEntry]:
        return self._send(Calls.outcomes(ref))

    def record_outcome(self, outcome: str, outcome_ref: str, **options: Any) -> OutcomeReport:
        return self._send(Calls.record_outcome(outcome, outcome_ref, **options))

    def handoff(self, to: str, summary: str, **options: Any) -> Packet:
        return self._send(Calls.handoff(to, summary, **options))

    def resume(self, lease_seconds: float | None = None) -> Resumed:
        """Claim this agent's oldest queued packet (``packet`` is None when nothing waits)."""
        return self._send(Calls.resume(self.agent, lease_seconds))

    def complete(self, packet_id: str) -> Packet:
        return self._send(Calls.settle(packet_id, "complete", {}))

    def release(self, packet_id: str, reason: str | None = None) -> Packet:
        return self._send(Calls.settle(packet_id, "release", {"reason": reason}))

    def fail(self, packet_id: str, error: str) -> Packet:
        return self._send(Calls.settle(packet_id, "fail", {"error": error}))

    def get_handoff(self, packet_id: str) -> Packet:
        return self._send(Calls.get_handoff(packet_id))

    def list_handoffs(self, **filters: Any) -> PacketPage:
        return self._send(Calls.list_handoffs(**filters))

    def agents(self) -> list[AgentSummary]:
        return self._send(Calls.agents())

    def stats(self, verify: bool = False) -> Stats:
        return self._send(Calls.stats(verify))


class AsyncBatonClient:
    """The asyncio twin of :class:`BatonClient`: the same methods, awaitable."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str,
        session: str | None = None,
        namespace: str | None = None,
        timeout: float = 10.0,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.agent = agent
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(agent, session, namespace, token),
            timeout=timeout,
            transport=transport,
        )

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params
            )
        except httpx.TransportError as error:
            raise UnreachableError(error) from error
        return _decode(call, response)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start_session(self) -> Session:
        session = await self._send(Calls.start_session())
        self._http.headers["X-Baton-Session"] = session.id
        return session

    async def remember(self, ref: str, value: Any, **options: Any) -> Remembered:
        return await self._send(Calls.remember(ref, value, **options))

    async def recall(self, ref: str, version: int | None = None) -> RecordVersion:
        return await self._send(Calls.recall(ref, version))

    async def list_records(self, **filters: Any) -> RecordPage:
        return await self._send(Calls.list_records(**filters))

    async def history(self, ref: str) -> History:
        return await self._send(Calls.history(ref))

    async def outcomes(self, ref: str) -> list[OutcomeEntry]:
        return await self._send(Calls.outcomes(ref))

    async def record_outcome(self, outcome: str, outcome_ref: str, **options: Any) -> OutcomeReport:
        return await self._send(Calls.record_outcome(outcome, outcome_ref, **options))

    async def handoff(self, to: str, summary: str, **options: Any) -> Packet:
        return await self._send(Calls.handoff(to, summary, **options))

    async def resume(self, lease_seconds: float | None = None) -> Resumed:
        return await self._send(Calls.resume(self.agent, lease_seconds))

    async def complete(self, packet_id: str) -> Packet:
        return await self._send(Calls.settle(packet_id, "complete", {}))

    async def release(self, packet_id: str, reason: str | None = None) -> Packet:
        return await self._send(Calls.settle(packet_id, "release", {"reason": reason}))

    async def fail(self, packet_id: str, error: str) -> Packet:
        return await self._send(Calls.settle(packet_id, "fail", {"error": error}))

    async def get_handoff(self, packet_id: str) -> Packet:
        return await self._send(Calls.get_handoff(packet_id))

    async def list_handoffs(self, **filters: Any) -> PacketPage:
        return await self._send(Calls.list_handoffs(**filters))

    async def agents(self) -> list[AgentSummary]:
        return await self._send(Calls.agents())

    async def stats(self, verify: bool = False) -> Stats:
        return await self._send(Calls.stats(verify))
