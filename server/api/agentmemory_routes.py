"""A drop-in agentmemory-compatible REST surface under ``/agentmemory``.

agentmemory's hook scripts and its MCP proxy shim work against Baton unchanged with
``AGENTMEMORY_URL`` pointed at Baton's port: same paths, camelCase bodies, ``{"error": ...}``
answers with 400/401/403. Authentication is the gate's (``auth.py``): a Baton token, or
``AGENTMEMORY_SECRET`` acting as the ``AGENTMEMORY_AGENT`` agent; in open mode without a
secret, loopback clients only. A body or query ``agentId`` is an identity claim
(``deps.claim_agent_id``), never taken over the credentials.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any, TypeVar

import msgspec
import redis.exceptions
from litestar import Controller, Request, Response, Router, delete, get, post, route
from litestar.datastructures import State
from litestar.handlers import HTTPRouteHandler

from baton.server.api.deps import (
    CallerDep,
    NamespaceDep,
    claim_agent_id,
)
from baton.server.mcp.mcp_server import TOOLS, call_tool, tool_list
from baton.server.model import agentmemory_shapes as shapes
from baton.server.model import grants
from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.identity import Caller, check_session
from baton.server.operation import Call, Operation
from baton.server.operations import BY_NAME, OPERATIONS
from baton.server.stores.backend import Namespace

CAMEL = re.compile(r"_([a-z])")
# Tools agentmemory's MCP shim answers itself (dropping Baton's extra parameters); they are
# listed again as baton_<name>, which the shim forwards to mcp/call with every argument.
SHADOWED = frozenset({"memory_save", "memory_recall", "memory_smart_search", "memory_sessions"})
ALIAS_PREFIX = "baton_"
R = TypeVar("R")


def camel(value: Any) -> Any:
    """snake_case keys to camelCase, recursively (agentmemory's wire style)."""
    if isinstance(value, dict):
        return {CAMEL.sub(lambda m: m.group(1).upper(), k): camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel(item) for item in value]
    return value


def answer(body: Any, status: int = 200) -> Response[Any]:
    return Response(camel(msgspec.to_builtins(body)), status_code=status)


def error(message: str, status: int = 400) -> Response[Any]:
    return Response({"error": message}, status_code=status)


def _string(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


async def _body(request: Request[Any, Any, Any]) -> dict[str, Any]:
    try:
        body = await request.json()
    except Exception:
        return {}
    return body if isinstance(body, dict) else {}


class AgentMemoryController(Controller):
    """The routes agentmemory's hooks and MCP shim call."""

    path = "/agentmemory"
    include_in_schema = False
    # Litestar calls a controller's hook unbound (Controller.__init__ puts the plain function
    # back on the instance); mypy takes it for a method whose ``self`` is the request.
    before_request = claim_agent_id  # type: ignore[assignment]

    @get("/livez")
    async def livez(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "service": "agentmemory",
            "viewerPort": None,
            "viewerSkipped": True,
            "streamsPort": None,
        }

    @get("/health")
    async def health(self, state: State) -> Response[Any]:
        try:
            await state.backend.redis.ping()
            status = "healthy"
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            status = "critical"
        return Response(
            {
                "status": status,
                "service": "agentmemory",
                "version": version("baton-server"),
                "health": None,
                "functionMetrics": [],
                "circuitBreaker": None,
                "viewerPort": None,
                "viewerSkipped": True,
                "streamsPort": None,
            },
            status_code=503 if status == "critical" else 200,
        )

    @post("/session/start", status_code=200)
    async def session_start(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        sessions = ns.sessions
        body = await _body(request)
        session_id, project, cwd = (_string(body, k) for k in ("sessionId", "project", "cwd"))
        if not session_id or not project or not cwd:
            return error("sessionId, project, and cwd are required non-empty strings")
        rights = await ns.grants.check(caller, [grants.memories(project, "write")])
        try:
            given = BY_NAME["start_session"].decode(
                {"id": session_id, "project": project, "cwd": cwd, "title": _string(body, "title")}
            )
        except InvalidInput as refused:  # the field as agentmemory's clients name it
            field = "sessionId" if refused.field == "id" else refused.field
            raise InvalidInput(field, str(refused).split(": ", 1)[1]) from None
        session = await sessions.start(given, caller=caller)
        # "Where were we" is found by directory, so any project's: a confined agent without
        # every project's memories starts without it rather than being refused.
        text = ""
        if rights is None or rights.may(grants.memories(None)):
            text = (await ns.context.start(session.id, session.cwd, project)).context
        await sessions.ns.durable()
        return Response({"session": shapes.session(session), "context": text})

    @post("/context", status_code=200)
    async def context(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        """What agentmemory's PreCompact hook injects: this session's state and the previous
        session's answer, within ``budget`` tokens."""
        return answer(await run(BY_NAME["context"], request, ns, caller, kind="compact"))

    @post("/enrich", status_code=200)
    async def enrich(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        """What agentmemory's PreToolUse hook injects about the files a tool will touch."""
        return answer(await run(BY_NAME["enrich"], request, ns, caller))

    @post("/summarize", status_code=200)
    async def summarize(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        sessions = ns.sessions
        """A session summary built from its observations (agentmemory asks an LLM; Baton does
        not): always 200, ``success: false`` with agentmemory's error words."""
        session_id = _string(await _body(request), "sessionId")
        if not session_id:
            return error("sessionId is required")
        try:
            project = (await sessions.get(session_id)).project
            await ns.grants.check(caller, [grants.memories(project)])
            summary = await ns.context.summarize(session_id)
        except NotFound as missing:
            reason = (
                "no_observations" if missing.detail == "no_observations" else "session_not_found"
            )
            return answer({"success": False, "error": reason})
        return answer({"success": True, "summary": msgspec.to_builtins(summary), "qualityScore": 0})

    @post("/claude-bridge/sync", status_code=200)
    async def claude_bridge_sync(self) -> Response[Any]:
        """agentmemory writes Claude Code's MEMORY.md here; Baton, possibly on another machine,
        never writes into the user's home directory: acknowledged, nothing written."""
        return answer(
            {
                "success": False,
                "error": "Claude bridge not enabled: Baton does not "
                "write ~/.claude; use Baton's SessionStart context instead",
            }
        )

    @post("/session/end")
    async def session_end(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        ended = await run(BY_NAME["end_session"], request, ns, caller)
        return answer({"success": True, "ended": ended.ended})

    @post("/observe")
    async def observe(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        observed = await run(BY_NAME["observe"], request, ns, caller)
        return answer(
            {
                "success": True,
                "observationId": observed.observation.id,
                "deduplicated": observed.deduplicated,
                "observation": observed.observation,
            },
            201,
        )

    @post("/forget", status_code=200)
    async def forget(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        """memory_forget with agentmemory's answer: how many things went (an unknown session
        is ``deleted: 0``, as agentmemory answers it)."""
        body = await _body(request)
        if not _string(body, "sessionId") and not _string(body, "memoryId"):
            return error("sessionId or memoryId is required")
        try:
            result = await run(BY_NAME["memory_forget"], request, ns, caller)
        except NotFound as missing:
            if "session" not in missing.extra:
                raise
            return Response({"success": True, "deleted": 0})
        deleted = len(result.memories) + result.observations + 2 * len(result.sessions)
        return Response({"success": True, "deleted": deleted})

    @delete("/governance/memories", status_code=200)
    async def delete_memories(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        memories = ns.memories
        body = await _body(request)
        ids = body.get("memoryIds") or body.get("ids") or request.query_params.getall("id", [])
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            return error("memoryIds array is required")
        await ns.grants.check(caller, [grants.unguarded("governance delete")])
        deleted = 0
        for memory_id in ids:
            try:
                await memories.forget(
                    caller=caller,
                    memory_id=memory_id,
                    reason=_string(body, "reason") or "governance delete",
                )
                deleted += 1
            except NotFound:
                continue
        await memories.ns.durable()
        return Response({"success": True, "deleted": deleted, "total": len(ids)})

    @get("/export")
    async def export(
        self,
        request: Request[Any, Any, Any],
        ns: NamespaceDep,
        caller: CallerDep,
    ) -> Response[Any]:
        memories, sessions = ns.memories, ns.sessions
        await ns.grants.check(caller, [grants.unguarded("export")])
        ids = [
            record.ref.split("/", 1)[1]
            for record in (await memories.records.list_records(scope="memory", limit=500)).records
        ]
        kept = await memories.get_many(ids)
        recent = await sessions.recent(500)
        observations = {
            s.id: [msgspec.to_builtins(o) for o in await sessions.observations(s.id)]
            for s in recent
        }
        return Response(
            {
                "version": version("baton-server"),
                "exportedAt": utc_now(),
                "sessions": [shapes.session(s) for s in recent],
                "observations": observations,
                "memories": [shapes.memory(kept[i]) for i in ids if i in kept],
                "summaries": [],
            }
        )

    @get("/audit")
    async def audit(
        self, request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep
    ) -> Response[Any]:
        entries = await run(BY_NAME["audit"], request, ns, caller)
        return Response({"entries": [shapes.audit_entry(e) for e in entries], "success": True})

    @get("/mcp/tools")
    async def mcp_tools(self) -> Response[Any]:
        """Baton's tools, and those agentmemory's shim answers itself again under
        ``baton_``-prefixed names that it forwards with every argument (see docs/sessions.md)."""
        tools = [
            {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            for tool in tool_list()
        ]
        aliases = [
            {
                **tool,
                "name": f"{ALIAS_PREFIX}{tool['name']}",
                "description": f"{tool['description']} (Baton's own, with every parameter.)",
            }
            for tool in tools
            if tool["name"] in SHADOWED
        ]
        return Response({"tools": tools + aliases})

    @post("/mcp/call", status_code=200)
    async def mcp_call(
        self, request: Request[Any, Any, Any], state: State, caller: CallerDep
    ) -> Response[Any]:
        """Run a tool for agentmemory's shim. A tool's failure is an ``isError`` result with
        the message (200, as agentmemory answers its tools' failures): the shim drops the
        body of a 4xx, so only a 200 brings the message to the model."""
        body = await _body(request)
        name, arguments = _string(body, "name"), body.get("arguments", {})
        if not name:
            return error("name is required")
        if not isinstance(arguments, dict):
            return error("arguments must be an object")
        if name.removeprefix(ALIAS_PREFIX) in SHADOWED:
            name = name.removeprefix(ALIAS_PREFIX)
        if name not in TOOLS:
            return error(f"Unknown tool: {name}")
        caller = caller.acting_as(arguments.get("agentId")).in_session(arguments.get("sessionId"))
        await check_session(state.backend.redis, caller)
        result = await call_tool(state.backend, caller, name, arguments)
        content = [block.model_dump(exclude_none=True) for block in result.content]
        if result.is_error:  # the shim drops isError: the text itself says it failed
            return _tool_error(" ".join(block.get("text", "") for block in content))
        return Response({"content": content})


def known_fields(operation: Operation[Any, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``given`` the operation knows by agentmemory's names: its routes ignore
    the others, as agentmemory does (its hooks send more than each route reads)."""
    wire_type = operation.wire_type("agentmemory")
    names = {info.encode_name for info in msgspec.structs.fields(wire_type)}
    return {name: value for name, value in given.items() if name in names}


async def run(
    operation: Operation[Any, R],
    request: Request[Any, Any, Any],
    ns: Namespace,
    caller: Caller,
    **fixed: Any,
) -> R:
    """Run ``operation`` on a request of agentmemory's clients: its query and body fields,
    in agentmemory's names (numbers written as text accepted), and ``fixed`` ones."""
    given = dict(request.query_params)
    if request.method != "GET":
        given.update(await _body(request))
    arguments = operation.decode({**known_fields(operation, given), **fixed}, "agentmemory")
    return await operation.perform(Call(caller, ns), arguments)


def agentmemory_handler(operation: Operation[Any, Any]) -> HTTPRouteHandler:
    """agentmemory's route for ``operation``: its query and body fields (camelCase, numbers
    written as text accepted), decoded by the operation's own input type."""
    spec = operation.agentmemory
    assert spec is not None

    async def handler(request: Request[Any, Any, Any], ns: NamespaceDep, caller: CallerDep) -> Any:
        return await run(operation, request, ns, caller)

    handler.__name__ = handler.__qualname__ = f"agentmemory_{operation.name}"
    return route(
        spec.path.removeprefix(AgentMemoryController.path),
        http_method=spec.method,
        name=f"agentmemory:{operation.name}",
        status_code=spec.status,
    )(handler)


def operation_router() -> Router:
    """agentmemory's routes of the operation table, beside :class:`AgentMemoryController`."""
    return Router(
        path=AgentMemoryController.path,
        route_handlers=[
            agentmemory_handler(operation) for operation in OPERATIONS if operation.agentmemory
        ],
        before_request=claim_agent_id,
        include_in_schema=False,
    )


def _tool_error(message: str) -> Response[Any]:
    text = message if message.startswith("Error") else f"Error: {message}"
    return Response({"content": [{"type": "text", "text": text}], "isError": True})
