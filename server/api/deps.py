"""Per-request dependencies: the store view for the caller's namespace, and who is calling."""

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
    """The agent making the request and the session it works in, if any."""

    agent: str
    session: str | None


def provide_store(request: Request[Any, Any, Any], state: State) -> FactStore:
    """The caller's namespace: the ``X-Baton-Namespace`` header, else a ``namespace`` query
    parameter (handy for dashboard links), else the server's default."""
    backend: Backend = state.backend
    namespace = request.headers.get(NAMESPACE_HEADER) or request.query_params.get("namespace")
    return FactStore(backend, namespace or state.namespace)


def provide_handoffs(store: FactStore) -> HandoffStore:
    return HandoffStore(store)


def provide_caller(request: Request[Any, Any, Any]) -> Caller:
    agent = check_agent(request.headers.get(AGENT_HEADER, ANONYMOUS), field=AGENT_HEADER)
    session = request.headers.get(SESSION_HEADER)
    return Caller(
        agent=agent,
        session=None if session is None else check_session_id(session, field=SESSION_HEADER),
    )
