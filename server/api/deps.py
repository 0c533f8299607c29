"""Per-request dependencies: who is calling (resolved once by the gate), and the store views
for the caller's namespace.

The providers read the request's caller and namespace from context variables the gate sets
in the request's task (``claim_agent_id`` sets the caller again when it acts as another
agent), not from the request: Litestar validates a provider's parameters with a signature
model on every request, and the caller's provider has none. The store providers name the
caller only so that they are resolved after it (see ``provide_namespace``). Route
parameters name them with the ``…Dep`` markers below: Litestar 3 injects only parameters
marked as dependencies.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeAlias

from litestar import Request
from litestar.di import NamedDependency, Provide

from baton.server.api.auth import REQUEST_NAMESPACE, caller_of, set_caller
from baton.server.model.identity import CALLER, REQUEST_CALLER, Caller
from baton.server.stores.backend import Namespace
from baton.server.stores.dashboard import Dashboard
from baton.server.stores.handoffs import HandoffStore
from baton.server.stores.memories import MemoryStore
from baton.server.stores.records import RecordStore
from baton.server.stores.sessions import SessionStore


def provide_caller() -> Caller:
    """The caller the gate resolved (``baton.server.api.auth``)."""
    return REQUEST_CALLER.get()


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
    set_caller(request.scope, caller_of(request.scope).acting_as(claimed))


CallerDep: TypeAlias = NamedDependency[Caller]
NamespaceDep: TypeAlias = NamedDependency[Namespace]
RecordsDep: TypeAlias = NamedDependency[RecordStore]
HandoffsDep: TypeAlias = NamedDependency[HandoffStore]
SessionsDep: TypeAlias = NamedDependency[SessionStore]
MemoriesDep: TypeAlias = NamedDependency[MemoryStore]
DashboardDep: TypeAlias = NamedDependency[Dashboard]


def provide_namespace(caller: CallerDep) -> Namespace:
    """The caller's namespace on the app's backend (kept by the backend for reuse).

    Every store depends on the caller (not on another store), so Litestar resolves a
    handler's dependencies one after the other: two dependencies at the same depth would be
    resolved in an anyio task group, two task spawns per request (~20 % of a simple
    request's CPU when measured)."""
    return REQUEST_NAMESPACE.get()


def provide_records(caller: CallerDep) -> RecordStore:
    return REQUEST_NAMESPACE.get().records


def provide_handoffs(caller: CallerDep) -> HandoffStore:
    return REQUEST_NAMESPACE.get().handoffs


def provide_sessions(caller: CallerDep) -> SessionStore:
    return REQUEST_NAMESPACE.get().sessions


def provide_memories(caller: CallerDep) -> MemoryStore:
    return REQUEST_NAMESPACE.get().memories


async def provide_dashboard(caller: CallerDep) -> Dashboard:
    ns = REQUEST_NAMESPACE.get()
    await ns.grants.operators_only(caller, "the dashboard")
    return ns.dashboard


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
    name: Provide(provider)
    if inspect.iscoroutinefunction(provider)
    else Provide(provider, sync_to_thread=False)
    for name, provider in PROVIDERS.items()
}
