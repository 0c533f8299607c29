"""Per-request dependencies: who is calling, and the store view for the caller's namespace.

Each provider depends on the one before (caller → store → handoffs, sessions, memories), so
Litestar resolves them one after the other in the request's task instead of starting a task
group per request for independent ones (measurably cheaper for these synchronous providers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from baton.server.handoffs import HandoffStore
from baton.server.store import Backend, FactStore
from baton.server.validation import check_agent, check_session_id
from litestar import Request
from litestar.datastructures import State

AGENT_HEADER = "x-baton-agent"
SESSION_HEADER = "x-baton-session"
NAMESPACE_HEADER = "x-baton-namespace"
ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Caller:
    """The agent making the request, the session it works in (if any), and its namespace."""

    agent: str
    session: str | None
    namespace: str


def provide_caller(request: Request[Any, Any, Any], state: State) -> Caller:
    """The namespace is the ``X-Baton-Namespace`` header, else a ``namespace`` query
    parameter (handy for dashboard links), else the server's default."""
    agent = check_agent(request.headers.get(AGENT_HEADER, ANONYMOUS), field=AGENT_HEADER)
    session = request.headers.get(SESSION_HEADER)
    namespace = request.headers.get(NAMESPACE_HEADER) or request.query_params.get("namespace")
    return Caller(
        agent=agent,
        session=None if session is None else check_session_id(session, field=SESSION_HEADER),
        namespace=namespace or state.namespace,
    )


def provide_store(caller: Caller, state: State) -> FactStore:
    backend: Backend = state.backend
    return FactStore(backend, caller.namespace)


def provide_handoffs(store: FactStore) -> HandoffStore:
    return HandoffStore(store)
