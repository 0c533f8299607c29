"""Per-request dependencies: who is calling (resolved once by the gate), and the store views
for the caller's namespace.

Each provider depends on the one before (caller → store → handoffs → dashboard; store →
sessions, memories), so Litestar resolves them one after the other in the request's task
instead of starting a task group per request for independent ones (measurably cheaper for
these synchronous providers). Route parameters name them with the ``…Dep`` markers below:
Litestar 3 injects only parameters marked as dependencies.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from baton.server.api.auth import caller_of
from baton.server.dashboard import Dashboard
from baton.server.handoffs import HandoffStore
from baton.server.identity import CALLER, Caller
from baton.server.memories import MemoryStore
from baton.server.sessions import SessionStore
from baton.server.store import Backend, FactStore
from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide


def provide_caller(request: Request[Any, Any, Any]) -> Caller:
    """The caller the gate resolved (``baton.server.api.auth``)."""
    return caller_of(request.scope)


async def claim_agent_id(request: Request[Any, Any, Any]) -> None:
    """A ``before_request`` hook for agentmemory's routes, whose clients name their agent in
    the body or query (``agentId``): from here on the caller acts as that agent, under the
    identity rules (403 for another agent's)."""
    if CALLER not in request.scope.get("state", {}):
        return  # an always-open route (livez): nobody to act as
    claimed = request.query_params.get("agentId")
    if request.method != "GET":
        try:
            body = await request.json()
        except Exception:  # noqa: BLE001 - an undecodable body is answered by the handler
            body = None
        if isinstance(body, dict) and body.get("agentId") not in (None, ""):
            claimed = body["agentId"]
    request.scope["state"][CALLER] = caller_of(request.scope).acting_as(claimed)  # type: ignore[typeddict-item]


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
