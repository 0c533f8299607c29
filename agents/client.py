"""The Python client for Baton's REST API, blocking (:class:`BatonClient`) and asyncio
(:class:`AsyncBatonClient`).

    with BatonClient("http://127.0.0.1:8765", agent="scout") as baton:
        baton.remember("listing/482/assessment", {"verdict": "apply"}, confidence=0.8)
        packet = baton.handoff("executor", "Two listings worth an application")

Results are the same typed structs the server returns (``baton.server.model.models``); errors are
raised as :class:`BatonAPIError` subclasses carrying the problem+json body.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from baton.server import operations as ops
from baton.server.model.agentmemory_shapes import Saved
from baton.server.model.endpoint import token_of
from baton.server.model.memory_models import Consolidation, FileContext, MemorySaved, Recall
from baton.server.model.models import (
    AgentSummary,
    AgentThen,
    Event,
    History,
    NoticePage,
    OutcomeEntry,
    OutcomeReport,
    Packet,
    PacketPage,
    RecordPage,
    RecordVersion,
    Remembered,
    Resumed,
    Session,
    SessionEnded,
    Stats,
    Webhook,
)
from baton.server.model.patterns import Patterns
from baton.server.operation import Operation

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


def _raise_problem(response: httpx.Response) -> None:
    """Raise the :class:`BatonAPIError` of an error answer (a read response)."""
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        raise _ERRORS.get(response.status_code, BatonAPIError)(response.status_code, problem)


def _decode(call: Call[T], response: httpx.Response) -> T:
    _raise_problem(response)
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


def request(operation: Operation[Any, T], **fields: Any) -> Call[T]:
    """The request of ``operation`` (``baton.server.operations``): ``fields`` build the
    operation's own input type, so a parameter the server does not take is a TypeError here;
    the server validates the values. Path fields go into the path, a GET's others into the
    query, any other method's into the JSON body (fields left at None are left out)."""
    assert operation.rest is not None, f"{operation.name} has no REST route"
    wire = msgspec.to_builtins(operation.input(**fields))
    required = {
        info.encode_name
        for info in msgspec.structs.fields(operation.input)
        if info.default is msgspec.NODEFAULT and info.default_factory is msgspec.NODEFAULT
    }
    path = operation.rest.path
    for field_name, kind in operation.rest.path_fields.items():
        value = _in_path(str(wire.pop(field_name)), segments=kind == "path")
        path = path.replace(f"{{{field_name}:{kind}}}", value)
    given = {key: value for key, value in wire.items() if value is not None or key in required}
    if operation.rest.method == "GET":
        return Call("GET", path, operation.result, params=given)
    return Call(operation.rest.method, path, operation.result, json=given)


def _end(http: httpx.Client | httpx.AsyncClient, summary: str | None) -> Call[SessionEnded]:
    """The request that ends the session a client's requests carry."""
    session = http.headers.get("X-Baton-Session")
    if session is None:
        raise ValueError("no session to end: call start_session() first")
    return request(ops.END_SESSION, session_id=session, summary=summary)


def _headers(
    agent: str, session: str | None, namespace: str | None, token: str | None
) -> dict[str, str]:
    """Identity headers; ``token`` defaults to ``BATON_TOKEN`` (or ``BATON_TOKEN_FILE``; an
    empty string sends none)."""
    token = token_of(os.environ) if token is None else token
    return _drop_none(
        {
            "X-Baton-Agent": agent,
            "X-Baton-Session": session,
            "X-Baton-Namespace": namespace,
            "Authorization": f"Bearer {token}" if token else None,
        }
    )


class EventStream:
    r"""The namespace's events from the moment it is open: iterate it for :class:`Event`\ s
    (the dashboard's Server-Sent Events stream, ``GET /v1/dashboard/events``). Opening
    returns once the server has subscribed it, so a change made after that is delivered.
    :meth:`close` may be called from another thread; the iteration then ends."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http
        self._response: httpx.Response | None = None
        self._lines: Iterator[str] = iter(())
        self._closed = False

    def __enter__(self) -> Self:
        request = self._http.build_request("GET", "/v1/dashboard/events")
        try:
            self._response = self._http.send(request, stream=True)
            if self._response.status_code >= 400:
                self._response.read()
                _raise_problem(self._response)
            self._lines = self._response.iter_lines()
            for line in self._lines:  # the server's first message says it has subscribed
                if line.startswith(":"):
                    break
        except httpx.TransportError as error:
            self.close()
            raise UnreachableError(error) from error
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Event]:
        data: list[str] = []
        try:
            for line in self._lines:
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif not line:  # a message ends; one without data (a comment) is no event
                    if any(data):
                        yield msgspec.json.decode("\n".join(data), type=Event)
                    data = []
        except (httpx.TransportError, httpx.StreamError):
            if not self._closed:
                raise
        # closed: the iteration ends

    def close(self) -> None:
        self._closed = True
        if self._response is not None:
            # A read blocked in another thread holds the connection; closing the response
            # would wait for it. Shutting the socket down ends that read at once.
            stream = self._response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._response.close()
        self._http.close()


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
        self._transport = transport
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

    def perform(self, operation: Operation[Any, T], **fields: Any) -> T:
        """Any operation of the table (``baton.server.operations``) by its entry, for those
        without a method here (LangGraph's, which ``baton.agents.langgraph`` calls)."""
        return self._send(request(operation, **fields))

    def start_session(self) -> Session:
        """Start a session and send its id with every later request."""
        session = self._send(request(ops.START_SESSION))
        self._http.headers["X-Baton-Session"] = session.id
        return session

    def end_session(self, summary: str | None = None) -> SessionEnded:
        """End the session :meth:`start_session` started: what it held back (``handoff``
        with ``deliver="session_end"``) becomes claimable; later requests carry none."""
        ended = self._send(_end(self._http, summary))
        del self._http.headers["X-Baton-Session"]
        return ended

    def remember(self, ref: str, value: Any, **options: Any) -> Remembered:
        return self._send(request(ops.REMEMBER, ref=ref, value=value, **options))

    def recall(
        self, ref: str, version: int | None = None, as_of: str | None = None
    ) -> RecordVersion:
        """The current version of ``ref``, version ``version``, or the one current at
        ``as_of`` (an ISO 8601 time)."""
        return self._send(request(ops.READ_RECORD, ref=ref, version=version, as_of=as_of))

    def list_records(self, **filters: Any) -> RecordPage:
        return self._send(request(ops.LIST_RECORDS, **filters))

    def history(self, ref: str) -> History:
        return self._send(request(ops.HISTORY, ref=ref))

    def outcomes(self, ref: str) -> list[OutcomeEntry]:
        return self._send(request(ops.OUTCOMES, ref=ref))

    def record_outcome(self, outcome: str, outcome_ref: str, **options: Any) -> OutcomeReport:
        return self._send(
            request(ops.RECORD_OUTCOME, outcome=outcome, outcome_ref=outcome_ref, **options)
        )

    def handoff(self, to: str, summary: str, **options: Any) -> Packet:
        return self._send(request(ops.HANDOFF, to=to, summary=summary, **options))

    def resume(self, lease_seconds: float | None = None) -> Resumed:
        """Claim this agent's oldest queued packet (``packet`` is None when nothing waits)."""
        return self._send(request(ops.RESUME, agent=self.agent, lease_seconds=lease_seconds))

    def agent_as_of(self, agent: str, as_of: str | None = None) -> AgentThen:
        """What ``agent`` had in front of it at ``as_of`` (now by default)."""
        return self._send(request(ops.AGENT_AS_OF, agent=agent, as_of=as_of))

    def notices(self, after: str = "0-0", limit: int = 100) -> NoticePage:
        """This agent's notices after the one with id ``after`` (docs/handoffs.md)."""
        return self._send(request(ops.NOTICES, agent=self.agent, after=after, limit=limit))

    def set_webhook(self, url: str) -> Webhook:
        """POST this agent's notices to ``url``; the answer holds the signing secret."""
        return self._send(request(ops.SET_WEBHOOK, agent=self.agent, url=url))

    def webhook(self) -> Webhook:
        """This agent's webhook and its newest deliveries."""
        return self._send(request(ops.WEBHOOK, agent=self.agent))

    def drop_webhook(self) -> Webhook:
        return self._send(request(ops.DROP_WEBHOOK, agent=self.agent))

    def complete(self, packet_id: str) -> Packet:
        return self._send(request(ops.COMPLETE, packet_id=packet_id))

    def release(self, packet_id: str, reason: str | None = None) -> Packet:
        return self._send(request(ops.RELEASE, packet_id=packet_id, reason=reason))

    def fail(self, packet_id: str, error: str) -> Packet:
        return self._send(request(ops.FAIL, packet_id=packet_id, error=error))

    def get_handoff(self, packet_id: str) -> Packet:
        return self._send(request(ops.GET_HANDOFF, packet_id=packet_id))

    def list_handoffs(self, **filters: Any) -> PacketPage:
        return self._send(request(ops.LIST_HANDOFFS, **filters))

    def agents(self) -> list[AgentSummary]:
        return self._send(request(ops.AGENTS))

    def stats(self, verify: bool = False, scope: str | None = None) -> Stats:
        return self._send(request(ops.MEMORY_STATS, verify=verify, scope=scope))

    def events(self) -> EventStream:
        """The namespace's events from now on: ``with baton.events() as stream: for event
        in stream: ...`` (a connection of its own, no timeout while it waits)."""
        return EventStream(
            httpx.Client(
                base_url=self._http.base_url,
                headers=self._http.headers,
                timeout=httpx.Timeout(self._http.timeout.connect, read=None),
                transport=self._transport,
            )
        )

    def save_memory(self, content: str, **options: Any) -> MemorySaved:
        return self._send(request(ops.SAVE_MEMORY, content=content, **options))

    def recall_memories(self, query: str, **options: Any) -> Recall:
        return self._send(request(ops.RECALL_MEMORIES, query=query, **options))

    def update_memory(self, memory_id: str, **changes: Any) -> Saved:
        """A new version of the memory, same id (``content``, ``type``, ``concepts``...)."""
        return self._send(request(ops.MEMORY_UPDATE, memory_id=memory_id, **changes))

    def file_history(self, files: list[str], session_id: str | None = None) -> FileContext:
        return self._send(request(ops.MEMORY_FILE_HISTORY, files=files, session_id=session_id))

    def patterns(self, project: str | None = None) -> Patterns:
        return self._send(request(ops.MEMORY_PATTERNS, project=project))

    def consolidate(self, project: str | None = None, apply: bool = False) -> Consolidation:
        """The merge plan; with ``apply`` the merges done."""
        return self._send(request(ops.MEMORY_CONSOLIDATE, project=project, apply=apply))


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

    async def perform(self, operation: Operation[Any, T], **fields: Any) -> T:
        return await self._send(request(operation, **fields))

    async def start_session(self) -> Session:
        session = await self._send(request(ops.START_SESSION))
        self._http.headers["X-Baton-Session"] = session.id
        return session

    async def end_session(self, summary: str | None = None) -> SessionEnded:
        ended = await self._send(_end(self._http, summary))
        del self._http.headers["X-Baton-Session"]
        return ended

    async def remember(self, ref: str, value: Any, **options: Any) -> Remembered:
        return await self._send(request(ops.REMEMBER, ref=ref, value=value, **options))

    async def recall(
        self, ref: str, version: int | None = None, as_of: str | None = None
    ) -> RecordVersion:
        """As :meth:`BatonClient.recall`."""
        return await self._send(request(ops.READ_RECORD, ref=ref, version=version, as_of=as_of))

    async def list_records(self, **filters: Any) -> RecordPage:
        return await self._send(request(ops.LIST_RECORDS, **filters))

    async def history(self, ref: str) -> History:
        return await self._send(request(ops.HISTORY, ref=ref))

    async def outcomes(self, ref: str) -> list[OutcomeEntry]:
        return await self._send(request(ops.OUTCOMES, ref=ref))

    async def record_outcome(self, outcome: str, outcome_ref: str, **options: Any) -> OutcomeReport:
        return await self._send(
            request(ops.RECORD_OUTCOME, outcome=outcome, outcome_ref=outcome_ref, **options)
        )

    async def handoff(self, to: str, summary: str, **options: Any) -> Packet:
        return await self._send(request(ops.HANDOFF, to=to, summary=summary, **options))

    async def resume(self, lease_seconds: float | None = None) -> Resumed:
        return await self._send(request(ops.RESUME, agent=self.agent, lease_seconds=lease_seconds))

    async def agent_as_of(self, agent: str, as_of: str | None = None) -> AgentThen:
        return await self._send(request(ops.AGENT_AS_OF, agent=agent, as_of=as_of))

    async def notices(self, after: str = "0-0", limit: int = 100) -> NoticePage:
        return await self._send(request(ops.NOTICES, agent=self.agent, after=after, limit=limit))

    async def set_webhook(self, url: str) -> Webhook:
        return await self._send(request(ops.SET_WEBHOOK, agent=self.agent, url=url))

    async def webhook(self) -> Webhook:
        return await self._send(request(ops.WEBHOOK, agent=self.agent))

    async def drop_webhook(self) -> Webhook:
        return await self._send(request(ops.DROP_WEBHOOK, agent=self.agent))

    async def complete(self, packet_id: str) -> Packet:
        return await self._send(request(ops.COMPLETE, packet_id=packet_id))

    async def release(self, packet_id: str, reason: str | None = None) -> Packet:
        return await self._send(request(ops.RELEASE, packet_id=packet_id, reason=reason))

    async def fail(self, packet_id: str, error: str) -> Packet:
        return await self._send(request(ops.FAIL, packet_id=packet_id, error=error))

    async def get_handoff(self, packet_id: str) -> Packet:
        return await self._send(request(ops.GET_HANDOFF, packet_id=packet_id))

    async def list_handoffs(self, **filters: Any) -> PacketPage:
        return await self._send(request(ops.LIST_HANDOFFS, **filters))

    async def agents(self) -> list[AgentSummary]:
        return await self._send(request(ops.AGENTS))

    async def stats(self, verify: bool = False, scope: str | None = None) -> Stats:
        return await self._send(request(ops.MEMORY_STATS, verify=verify, scope=scope))

    async def save_memory(self, content: str, **options: Any) -> MemorySaved:
        return await self._send(request(ops.SAVE_MEMORY, content=content, **options))

    async def recall_memories(self, query: str, **options: Any) -> Recall:
        return await self._send(request(ops.RECALL_MEMORIES, query=query, **options))

    async def update_memory(self, memory_id: str, **changes: Any) -> Saved:
        return await self._send(request(ops.MEMORY_UPDATE, memory_id=memory_id, **changes))

    async def file_history(self, files: list[str], session_id: str | None = None) -> FileContext:
        return await self._send(
            request(ops.MEMORY_FILE_HISTORY, files=files, session_id=session_id)
        )

    async def patterns(self, project: str | None = None) -> Patterns:
        return await self._send(request(ops.MEMORY_PATTERNS, project=project))

    async def consolidate(self, project: str | None = None, apply: bool = False) -> Consolidation:
        return await self._send(request(ops.MEMORY_CONSOLIDATE, project=project, apply=apply))
