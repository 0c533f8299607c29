"""Per-request dependencies: who is calling (resolved once by the gate), and the store views
for the caller's namespace.

Each provider depends on the one before (caller → store → handoffs → dashboard; store →
sessions, memories), so Litestar resolves them one after the other in the request's task
instead of starting a task group per request for independent ones (measurably cheaper for
these synchronous providers). Route parameters name them with the ``…Dep`` markers below:
Litestar 3 injects only parameters marked as dependencies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide

from baton.server.api.auth import caller_of
from baton.server.backend import Backend, Namespace
from baton.server.dashboard import Dashboard
from baton.server.handoffs import HandoffStore
from baton.server.identity import CALLER, Caller
from baton.server.memories import MemoryStore
from baton.server.records import RecordStore
from baton.server.sessions import SessionStore


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
        except Exception:
            body = None
        if isinstance(body, dict) and body.get("agentId") not in (None, ""):
            claimed = body["agentId"]
    request.scope["state"][CALLER] = caller_of(request.scope).acting_as(claimed)


CallerDep: TypeAlias = NamedDependency[Caller]
NamespaceDep: TypeAlias = NamedDependency[Namespace]
RecordsDep: TypeAlias = NamedDependency[RecordStore]
HandoffsDep: TypeAlias = NamedDependency[HandoffStore]
SessionsDep: TypeAlias = NamedDependency[SessionStore]
MemoriesDep: TypeAlias = NamedDependency[MemoryStore]
DashboardDep: TypeAlias = NamedDependency[Dashboard]


def provide_namespace(caller: CallerDep, state: State) -> Namespace:
    """The caller's namespace on the app's backend.

    Every store depends on the caller alone (not on another store), so Litestar resolves a
    handler's dependencies one after the other: two dependencies at the same depth would be
    resolved in an anyio task group, two task spawns per request (~20 % of a simple
    request's CPU when measured)."""
    backend: Backend = state.backend
    return backend.namespace(caller.namespace)


def provide_records(caller: CallerDep, state: State) -> RecordStore:
    return provide_namespace(caller, state).records


def provide_handoffs(caller: CallerDep, state: State) -> HandoffStore:
    return provide_namespace(caller, state).handoffs


def provide_sessions(caller: CallerDep, state: State) -> SessionStore:
    return provide_namespace(caller, state).sessions


def provide_memories(caller: CallerDep, state: State) -> MemoryStore:
    return provide_namespace(caller, state).memories


def provide_dashboard(caller: CallerDep, state: State) -> Dashboard:
    return provide_namespace(caller, state).dashboard


PROVIDERS: dict[str, Callable[..., object]] = {
    "caller": provide_caller,
    "ns": provide_namespace,
    "records": provide_records,
    "handoffs": provide_handoffs,
    "sessions": provide_sessions,
    "memories": provide_memories,
    "dashboard": provide_dashboard,
}
DEPENDENCIES: dict[str, Provide] = {
    name: Provide(provider, sync_to_thread=False) for name, provider in PROVIDERS.items()
}
