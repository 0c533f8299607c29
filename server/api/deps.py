"""Per-request dependencies: who is calling, and the store views for the caller's namespace.

Each provider depends on the one before (caller → store → handoffs → dashboard; store →
sessions, memories), so Litestar resolves them one after the other in the request's task
instead of starting a task group per request for independent ones (measurably cheaper for
these synchronous providers). Route parameters name them with the ``…Dep`` markers below:
Litestar 3 injects only parameters marked as dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from baton.server.dashboard import Dashboard
from baton.server.handoffs import HandoffStore
from baton.server.memories import MemoryStore
from baton.server.sessions import SessionStore
from baton.server.store import Backend, FactStore
from baton.server.validation import check_agent, check_session_id
from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide

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


CallerDep: TypeAlias = NamedDependency[Caller]
StoreDep: TypeAlias = NamedDependency[FactStore]
HandoffsDep: TypeAlias = NamedDependency[HandoffStore]
SessionsDep: TypeAlias = NamedDependency[SessionStore]
MemoriesDep: TypeAlias = NamedDependency[MemoryStore]
DashboardDep: TypeAlias = NamedDependency[Dashboard]


def provide_store(caller: CallerDep, state: State) -> FactStore:
    backend: Backend = state.backend
    return FactStore(backend, caller.namespace)


def provide_handoffs(store: StoreDep) -> HandoffStore:
    return HandoffStore(store)


def provide_sessions(store: StoreDep) -> SessionStore:
    return SessionStore(store)


def provide_memories(store: StoreDep) -> MemoryStore:
    return MemoryStore(store)


def provide_dashboard(handoffs: HandoffsDep) -> Dashboard:
    return Dashboard(handoffs)


DEPENDENCIES: dict[str, Provide] = {
    name: Provide(provider, sync_to_thread=False)
    for name, provider in [
        ("caller", provide_caller), ("store", provide_store), ("handoffs", provide_handoffs),
        ("sessions", provide_sessions), ("memories", provide_memories),
        ("dashboard", provide_dashboard),
    ]
}  # fmt: skip
