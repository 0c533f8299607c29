"""Each MCP session over streamable HTTP belongs to the caller that opened it, and one
caller may hold only so many.

The MCP SDK keeps its sessions by the ``mcp-session-id`` header alone, and session ids are
visible to every agent of a namespace (records and packets carry ``session: mcp-<id>``):
without a check, another agent could send requests over, or close, someone else's session.
The API notes who opened each session (the answer that hands out its id) and refuses any
other caller on it with a 403, before the SDK sees the request. The SDK's session table is
shared by everybody (10,000 sessions, then 503 for all); so an agent may hold at most
``per_agent`` sessions open, and a new one past that is refused with a 429 naming the cap.
A session counts until its owner closes it (DELETE) or it sits idle (no request in flight)
for ``idle_seconds``, the same idle timeout the SDK is given, after which the SDK closes it.
A session id this table does not hold (closed, timed out, or opened on another API
process) is answered 404 here, as the SDK answers it, so no session outlives its owner
check. Sessions live in one API process, like the SDK's own: so do their owners.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from baton.server.api.auth import caller_of, refuse
from baton.server.errors import Forbidden, NotFound, TooManySessions

SESSION_HEADER = b"mcp-session-id"
Owner = tuple[str, str]  # (namespace, agent)


@dataclass(slots=True)
class OpenSession:
    """One MCP session's owner and activity, as the SDK's idle timeout sees it."""

    owner: Owner
    in_flight: int = 0
    last_done: float = 0.0


class SessionOwners:
    """Who opened each MCP session, and how many each caller holds."""

    def __init__(self, per_agent: int, idle_seconds: float) -> None:
        self.per_agent = per_agent
        self.idle_seconds = idle_seconds
        self.sessions: dict[str, OpenSession] = {}

    def reap(self) -> None:
        """Forget the sessions the SDK has closed for idleness by now."""
        stale = time.monotonic() - self.idle_seconds
        for session_id, session in list(self.sessions.items()):
            if session.in_flight == 0 and session.last_done < stale:
                del self.sessions[session_id]

    def held_by(self, owner: Owner) -> int:
        return Counter(session.owner for session in self.sessions.values())[owner]

    def guard(self, app: ASGIApp) -> ASGIApp:
        """``app`` (the SDK's), answering on a session only its owner (or an operator), and
        opening a session only for a caller under its cap."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            caller = caller_of(scope)
            who = (caller.namespace, caller.agent)
            session_id = _session_of(scope)
            closing = scope.get("method") == "DELETE"
            session = None if session_id is None else self.sessions.get(session_id)
            if session_id is not None and session is None:
                gone = NotFound(
                    f"MCP session {session_id[:64]} not found (closed, timed out after "
                    f"{self.idle_seconds:g} s idle, or opened on another API process); "
                    "open a new one",
                    session=session_id[:64],
                )
                await refuse(send, scope, gone)
                return
            if session is not None and session.owner != who and not caller.admin:
                error = Forbidden(
                    f"MCP session {session_id} was opened by another agent; open your own",
                    session=session_id,
                )
                await refuse(send, scope, error)
                return
            if session is None:
                self.reap()
                if self.held_by(who) >= self.per_agent:
                    await refuse(send, scope, TooManySessions.of(caller.agent, self.per_agent))
                    return
            else:
                session.in_flight += 1

            async def noting(message: Message) -> None:
                if message["type"] == "http.response.start":
                    if session_id is not None and closing:
                        if message["status"] < 300:
                            self.sessions.pop(session_id, None)  # closed by its owner
                    elif (
                        message["status"] < 400
                        and (opened := dict(message["headers"]).get(SESSION_HEADER)) is not None
                    ):  # (the SDK names a session on its refusals too, then drops it)
                        self.sessions.setdefault(
                            opened.decode("latin-1"), OpenSession(who, last_done=time.monotonic())
                        )
                await send(message)

            try:
                await app(scope, receive, noting)
            finally:
                if session is not None:
                    session.in_flight -= 1
                    session.last_done = time.monotonic()

        return guarded


def _session_of(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == SESSION_HEADER:
            return str(value.decode("latin-1"))
    return None
