"""Each MCP session over streamable HTTP belongs to the caller that opened it.

The MCP SDK keeps its sessions by the ``mcp-session-id`` header alone, and session ids are
visible to every agent of a namespace (records and packets carry ``session: mcp-<id>``):
without a check, another agent could send requests over, or close, someone else's session.
The API notes who opened each session (the answer that hands out its id) and refuses any
other caller on it with a 403, before the SDK sees the request. Sessions live in one API
process, like the SDK's own: so do their owners.
"""

from __future__ import annotations

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from baton.server.api.auth import caller_of, refuse
from baton.server.errors import Forbidden

SESSION_HEADER = b"mcp-session-id"


class SessionOwners:
    """Who opened each MCP session: (namespace, agent) by session id."""

    def __init__(self) -> None:
        self.owners: dict[str, tuple[str, str]] = {}

    def guard(self, app: ASGIApp) -> ASGIApp:
        """``app`` (the SDK's), answering on a session only its owner (or an operator)."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            caller = caller_of(scope)
            who = (caller.namespace, caller.agent)
            session = _session_of(scope)
            closing = scope.get("method") == "DELETE"
            owner = None if session is None else self.owners.get(session)
            if owner is not None and owner != who and not caller.admin:
                error = Forbidden(
                    f"MCP session {session} was opened by another agent; open your own",
                    session=session,
                )
                await refuse(send, scope, error)
                return

            async def noting(message: Message) -> None:
                if message["type"] == "http.response.start":
                    if session is not None and closing:
                        if message["status"] < 300:
                            self.owners.pop(session, None)  # closed by its owner
                    elif (opened := dict(message["headers"]).get(SESSION_HEADER)) is not None:
                        self.owners.setdefault(opened.decode("latin-1"), who)
                await send(message)

            await app(scope, receive, noting)

        return guarded


def _session_of(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == SESSION_HEADER:
            return str(value.decode("latin-1"))
    return None
