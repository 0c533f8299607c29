"""MCP sessions over streamable HTTP, kept in Redis: any API process or replica serves any
session.

The MCP SDK runs stateless here (a fresh transport per request, nothing kept in the
process between requests): Baton's tools keep no state of their own per MCP session, the
caller comes from the HTTP gate on every request, and the Baton session an MCP session
stands for (``mcp-<id>``) is named by the ``mcp-session-id`` header. What makes a session
a session is this table:

- ``initialize`` (a POST without ``mcp-session-id``) opens one: the id is handed out in the
  answer's ``mcp-session-id`` header, and the session is noted in Redis under its owner
  (while Redis refuses writes, a full disk, it is answered without one: the client reads
  session-less);
- every later request names it; a session Redis does not hold (closed, idle past
  ``BATON_MCP_IDLE_SECONDS``, or never opened) is answered 404, so the client initializes
  again (the spec's rule); a session opened by another token is answered 403 (operators
  excepted);
- ``DELETE`` closes it; ``GET`` (a stream for server-initiated messages) is 405: Baton
  sends none.

The owner is the caller's token (every agent and namespace it acts in), or in open mode the
namespace and agent. An owner holds at most ``BATON_MCP_SESSIONS`` open sessions, counted
in one sorted set per owner (session id -> idle deadline, by Redis' clock), so the cap holds
across processes and replicas, and an owner past it is refused with a 429 naming the cap.
A session id starts with a digest of its owner: the set it lives in is known from the id
alone, one script call per request.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable

import msgspec
import redis.exceptions
import structlog
from litestar.types import (
    ASGIApp,
    HTTPRequestEvent,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Message,
    Receive,
    ReceiveMessage,
    Scope,
    Send,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from baton.server.api.auth import caller_of, refuse
from baton.server.model.errors import BatonError, Forbidden, NotFound, TooLarge, TooManySessions
from baton.server.model.identity import Caller
from baton.server.model.keys import mcp_sessions_key
from baton.server.runtime.connection import write_refused
from baton.server.stores.backend import Backend

log = structlog.get_logger("baton.mcp")

SESSION_HEADER = b"mcp-session-id"
PROTOCOL_HEADER = b"mcp-protocol-version"
OWNER_DIGITS = 16  # the owner digest at the head of a session id (hex)
SESSION_ID = re.compile(rf"[0-9a-f]{{{OWNER_DIGITS}}}-[0-9a-f]{{32}}")  # owner, then random


class MethodNotAllowed(BatonError):
    status_code = 405
    title = "Method not allowed"


def owner_of(caller: Caller) -> str:
    """Whose sessions a caller's count: its token's, else (open mode) its agent's in its
    namespace. A hex digest, so the id carries nothing readable."""
    credential = caller.credential
    who = (
        f"token:{credential.token_id}"
        if credential.token_id is not None
        else f"{credential.kind}:{caller.namespace}/{caller.agent}"
    )
    return hashlib.sha256(who.encode()).hexdigest()[:OWNER_DIGITS]


def owner_in(session_id: str) -> str:
    """The owner digest heading a session id (whose set holds it)."""
    return session_id.partition("-")[0]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _opens_a_session(body: bytes) -> bool:
    """Whether a POST body is an ``initialize`` request (with an id: a notification opens
    nothing). The SDK answers a JSON-RPC batch with 400, so one never opens a session."""
    try:
        message = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize" and "id" in message


def _stateless(scope: Scope) -> bool:
    """A request of the stateless (2026) protocol: its version header names no handshake
    version (the SDK's own rule for sending it there). It never opens a session."""
    version = _header(scope, PROTOCOL_HEADER)
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


class SessionTable:
    """The open MCP sessions of every owner, in Redis; ``guard`` puts it in front of the
    SDK's stateless app."""

    def __init__(
        self,
        backend: Callable[[], Backend | None],
        per_owner: int,
        idle_seconds: float,
        max_body: int,
    ) -> None:
        self.backend = backend
        self.per_owner = per_owner
        self.idle_ms = max(1, int(idle_seconds * 1000))
        self.idle_seconds = idle_seconds
        self.max_body = max_body

    def _ready(self) -> Backend:
        backend = self.backend()
        if backend is None:
            raise RuntimeError("the MCP session table is used before the API started")
        return backend

    async def open(self, owner: str) -> str | None:
        """A new session of ``owner``'s, or None when it holds as many as it may."""
        backend = self._ready()
        session_id = f"{owner}-{secrets.token_hex(16)}"
        opened = await backend.scripts.open_mcp_session(
            keys=[mcp_sessions_key(owner)],
            args=[session_id, self.idle_ms, self.per_owner],
        )
        return session_id if opened else None

    async def touch(self, session_id: str) -> bool:
        """Whether ``session_id`` is open; if so its idle deadline moves on (while Redis
        refuses writes, a full disk, it is only looked at: reads go on)."""
        backend = self._ready()
        owner = owner_in(session_id)
        try:
            alive = await backend.scripts.touch_mcp_session(
                keys=[mcp_sessions_key(owner)], args=[session_id, self.idle_ms]
            )
        except redis.exceptions.ResponseError as error:
            if write_refused(error) is None:
                raise
            return await self.is_open(session_id)
        return bool(alive)

    async def is_open(self, session_id: str) -> bool:
        """Whether ``session_id`` is open, changing nothing."""
        backend = self._ready()
        owner = owner_in(session_id)
        pipe = backend.redis.pipeline(transaction=False)
        pipe.zscore(mcp_sessions_key(owner), session_id)
        pipe.time()
        deadline, (seconds, micros) = await pipe.execute()
        return deadline is not None and deadline > seconds * 1000 + micros // 1000

    async def close(self, session_id: str) -> bool:
        """Close ``session_id``; whether it was open."""
        backend = self._ready()
        owner = owner_in(session_id)
        return bool(await backend.redis.zrem(mcp_sessions_key(owner), session_id))

    def gone(self, session_id: str) -> NotFound:
        return NotFound(
            f"MCP session {session_id[:64]} not found (closed, or timed out after "
            f"{self.idle_seconds:g} s idle); initialize a new one",
            session=session_id[:64],
        )

    def guard(self, app: ASGIApp) -> ASGIApp:
        """``app`` (the SDK's, stateless) behind the session table."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            session_id = _header(scope, SESSION_HEADER)
            method = scope.get("method")
            if method == "GET":  # refused before the session is looked at: not its activity
                await self.refuse_stream(scope, send)
            elif session_id is not None:
                await self.on_session(app, session_id, scope, receive, send)
            elif method == "POST" and not _stateless(scope):
                await self.maybe_opening(app, scope, receive, send)
            else:
                # A stateless (2026) request names its protocol version and never opens a
                # session; DELETE without a session is the SDK's 405.
                await app(scope, receive, send)

        return guarded

    async def on_session(
        self, app: ASGIApp, session_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request naming a session: its owner's (or an operator's), and open."""
        caller = caller_of(scope)
        theirs = owner_in(session_id) != owner_of(caller) and not caller.admin
        if not SESSION_ID.fullmatch(session_id):  # never one of ours: Redis is not asked
            await refuse(send, scope, self.gone(session_id))
        elif theirs and await self.is_open(session_id):
            error = Forbidden(
                f"MCP session {session_id[:64]} was opened by another agent; open your own",
                session=session_id[:64],
            )
            await refuse(send, scope, error)
        elif theirs or not await self.touch(session_id):
            await refuse(send, scope, self.gone(session_id))
        elif scope.get("method") == "DELETE":
            await self.close(session_id)
            await _answer_empty(send)
        else:
            await app(scope, receive, send)

    async def maybe_opening(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """A POST naming no session: an ``initialize`` opens one (if its owner may hold
        another) and names it in the answer; anything else is served session-less."""
        try:
            body = await self.read_body(receive)
        except TooLarge as error:
            await refuse(send, scope, error)
            return
        replay = _replaying(body, receive)
        if not _opens_a_session(body):
            await app(scope, replay, send)
            return
        caller = caller_of(scope)
        try:
            opened = await self.open(owner_of(caller))
        except redis.exceptions.ResponseError as error:
            if write_refused(error) is None:
                raise
            # Redis takes no writes (a full disk, out of memory): the client still reads,
            # without a session (its requests name none), rather than not at all.
            log.warning("MCP session not opened: Redis refuses writes", error=str(error))
            await app(scope, replay, send)
            return
        if opened is None:
            token = caller.credential.token_id
            who = f"token {token}" if token is not None else f"agent {caller.agent}"
            await refuse(send, scope, TooManySessions.of(who, self.per_owner))
            return
        status = 500

        async def naming(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if status < 300:
                    message["headers"] = [
                        *message.get("headers", []),
                        (SESSION_HEADER, opened.encode("latin-1")),
                    ]
            await send(message)

        try:
            await app(scope, replay, naming)
        finally:
            if status >= 300:  # refused (a malformed initialize): nothing was opened
                await self.close(opened)

    async def refuse_stream(self, scope: Scope, send: Send) -> None:
        error = MethodNotAllowed(
            "Baton sends no server-initiated MCP messages: there is no stream to open "
            "(POST requests, DELETE to close the session)",
            allow="POST, DELETE",
        )
        await refuse(send, scope, error)

    async def read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise TooLarge(f"an MCP request of more than {self.max_body:,} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


async def _answer_empty(send: Send) -> None:
    """200 with no body: the SDK's own answer to a DELETE that closed a session."""
    start: HTTPResponseStartEvent = {"type": "http.response.start", "status": 200, "headers": []}
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}
    await send(start)
    await send(end)


def _replaying(body: bytes, receive: Receive) -> Callable[[], Awaitable[ReceiveMessage]]:
    """A ``receive`` that hands the app the body already read, then the client's own
    messages (its disconnect)."""
    sent = False

    async def replay() -> ReceiveMessage:
        nonlocal sent
        if not sent:
            sent = True
            request: HTTPRequestEvent = {"type": "http.request", "body": body, "more_body": False}
            return request
        return await receive()

    return replay
