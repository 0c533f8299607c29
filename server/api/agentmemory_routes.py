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
from typing import Any, get_args

import msgspec
import redis.exceptions
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State

from baton.server import agentmemory_shapes as shapes
from baton.server.api.deps import CallerDep, MemoriesDep, SessionsDep, claim_agent_id
from baton.server.clock import utc_now
from baton.server.context_builder import START_BUDGET, ContextBuilder
from baton.server.errors import InvalidInput, NotFound
from baton.server.identity import check_session
from baton.server.mcp_server import SHIM_CALLER
from baton.server.memories import MAX_AUDIT, MAX_RECALL

CAMEL = re.compile(r"_([a-z])")
FORMATS: tuple[shapes.Format, ...] = get_args(shapes.Format)
SEARCH_LIMIT = 20  # agentmemory's server default
# Tools agentmemory's MCP shim answers itself (dropping Baton's extra parameters); they are
# listed again as baton_<name>, which the shim forwards to mcp/call with every argument.
SHADOWED = frozenset({"memory_save", "memory_recall", "memory_smart_search", "memory_sessions"})
ALIAS_PREFIX = "baton_"


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
        self, request: Request[Any, Any, Any], sessions: SessionsDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        session_id, project, cwd = (_string(body, k) for k in ("sessionId", "project", "cwd"))
        if not session_id or not project or not cwd:
            return error("sessionId, project, and cwd are required non-empty strings")
        session = await sessions.start(
            caller=caller,
            session_id=session_id,
            project=project,
            cwd=cwd,
            title=_string(body, "title"),
        )
        context = await ContextBuilder(sessions).start(session.id, session.cwd, project)
        return Response({"session": shapes.session(session), "context": context.context})

    @post("/context", status_code=200)
    async def context(
        self, request: Request[Any, Any, Any], sessions: SessionsDep
    ) -> Response[Any]:
        """What agentmemory's PreCompact hook injects: this session's state and the previous
        session's answer, within ``budget`` tokens."""
        body = await _body(request)
        session_id, project = _string(body, "sessionId"), _string(body, "project")
        if not session_id or not project:
            return error("sessionId and project are required strings")
        budget = body.get("budget", START_BUDGET)
        if isinstance(budget, str) and budget.strip().isdigit():
            budget = int(budget)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            return error("budget must be a positive integer")
        return answer(await ContextBuilder(sessions).compact(session_id, project, budget))

    @post("/enrich", status_code=200)
    async def enrich(self, request: Request[Any, Any, Any], sessions: SessionsDep) -> Response[Any]:
        """What agentmemory's PreToolUse hook injects about the files a tool will touch."""
        body = await _body(request)
        session_id, files, terms = (
            _string(body, "sessionId"),
            body.get("files"),
            body.get("terms", []),
        )
        if (
            not session_id
            or not isinstance(files, list)
            or not files
            or not all(isinstance(f, str) and f for f in files)
        ):
            return error("sessionId (string) and files (string[]) are required")
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            return error("terms must be an array of strings")
        project = body.get("project")
        if project is not None and not _string(body, "project"):
            return error("project must be a non-empty string")
        return answer(
            await ContextBuilder(sessions).enrich(
                session_id, files, terms, _string(body, "project")
            )
        )

    @post("/summarize", status_code=200)
    async def summarize(
        self, request: Request[Any, Any, Any], sessions: SessionsDep
    ) -> Response[Any]:
        """A session summary built from its observations (agentmemory asks an LLM; Baton does
        not): always 200, ``success: false`` with agentmemory's error words."""
        session_id = _string(await _body(request), "sessionId")
        if not session_id:
            return error("sessionId is required")
        try:
            summary = await ContextBuilder(sessions).summarize(session_id)
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
        self, request: Request[Any, Any, Any], sessions: SessionsDep, caller: CallerDep
    ) -> Response[Any]:
        session_id = _string(await _body(request), "sessionId")
        if not session_id:
            return error("sessionId is required and must be a non-empty string")
        ended = await sessions.end(session_id, caller=caller)
        return answer({"success": True, "ended": ended.ended})

    @get("/sessions")
    async def sessions(
        self, request: Request[Any, Any, Any], sessions: SessionsDep
    ) -> Response[Any]:
        limit = _positive(request.query_params.get("limit", "20"), "limit", 500)
        return Response(shapes.sessions(await sessions.recent(limit)))

    @post("/observe")
    async def observe(
        self, request: Request[Any, Any, Any], sessions: SessionsDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        names = ("hookType", "sessionId", "project", "timestamp")
        hook, session_id, project, timestamp = [_string(body, name) for name in names]
        if not (hook and session_id and project and timestamp):
            return error("hookType, sessionId, project, and timestamp are required strings")
        cwd = _string(body, "cwd")  # hooks may send "" or nothing: stored as unknown
        observed = await sessions.observe(
            hook_type=hook,
            session_id=session_id,
            project=project,
            cwd=cwd,
            timestamp=timestamp,
            data=body.get("data"),
            caller=caller,
        )
        return answer(
            {
                "success": True,
                "observationId": observed.observation.id,
                "deduplicated": observed.deduplicated,
                "observation": observed.observation,
            },
            201,
        )

    @post("/remember")
    async def remember(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        if not _string(body, "content"):
            return error("content is required")
        if "project" in body and body["project"] is not None and not _string(body, "project"):
            return error("project must be a non-empty string")
        ttl = body.get("ttlDays")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)):
            return error("ttlDays must be a number of days")
        saved = await memories.save(
            body["content"],
            type=body.get("type") if isinstance(body.get("type"), str) else None,
            concepts=body.get("concepts"),
            files=body.get("files"),
            project=_string(body, "project"),
            agent_id=caller.agent,
            ttl_days=ttl,
        )
        return Response(shapes.saved(saved), status_code=201)

    @post("/search", status_code=200)
    async def search(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        """agentmemory's search answer; an ``agentId`` (the caller's own, see the identity
        rules) narrows it to that agent's and shared memories."""
        body = await _body(request)
        if not _string(body, "query"):
            return error("query is required and must be a non-empty string")
        asked = body.get("format", "full")
        asked = asked.strip().lower() if isinstance(asked, str) else None
        form = next((each for each in FORMATS if each == asked), None)
        if form is None:
            return error("format must be one of: full, compact, narrative")
        for name in ("project", "cwd"):
            if body.get(name) is not None and not isinstance(body[name], str):
                return error(f"{name} must be a string")
        limit = _positive(body.get("limit", SEARCH_LIMIT), "limit", MAX_RECALL)
        budget = body.get("token_budget")
        budget = None if budget is None else _positive(budget, "token_budget", None)
        found = await memories.recall(
            body["query"],
            limit=limit,
            project=_string(body, "project"),
            agent_id=caller.agent
            if body.get("agentId") or request.query_params.get("agentId")
            else None,
        )
        return Response(shapes.search(found.results, form, budget))

    @post("/smart-search", status_code=200)
    async def smart_search(
        self, request: Request[Any, Any, Any], memories: MemoriesDep
    ) -> Response[Any]:
        body = await _body(request)
        expand = body.get("expandIds")
        if expand is not None and (
            not isinstance(expand, list) or not all(isinstance(item, str) for item in expand)
        ):
            return error("expandIds must be an array of ids")
        if not _string(body, "query") and not expand:
            return error("query or expandIds is required")
        limit = _positive(body.get("limit", SEARCH_LIMIT), "limit", MAX_RECALL)
        found = await memories.smart_search(
            query=_string(body, "query"),
            expand_ids=expand[: shapes.EXPAND_LIMIT] if expand else None,
            limit=limit,
            project=_string(body, "project"),
        )
        truncated = expand is not None and len(expand) > shapes.EXPAND_LIMIT
        return Response(shapes.smart_search(found.results, bool(expand), truncated))

    @post("/forget", status_code=200)
    async def forget(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        if not _string(body, "sessionId") and not _string(body, "memoryId"):
            return error("sessionId or memoryId is required")
        observation_ids = body.get("observationIds")
        if observation_ids is not None and (
            not isinstance(observation_ids, list)
            or not all(isinstance(item, str) for item in observation_ids)
        ):
            return error("observationIds must be an array of ids")
        try:
            result = await memories.forget(
                caller=caller,
                memory_id=_string(body, "memoryId"),
                session_id=_string(body, "sessionId"),
                observation_ids=observation_ids,
                reason=_string(body, "reason") or "forgotten on request",
            )
        except NotFound as missing:
            if "session" not in missing.extra:
                raise
            return Response({"success": True, "deleted": 0})  # agentmemory's answer for it
        deleted = len(result.memories) + result.observations + 2 * len(result.sessions)
        return Response({"success": True, "deleted": deleted})

    @delete("/governance/memories", status_code=200)
    async def delete_memories(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        ids = body.get("memoryIds") or body.get("ids") or request.query_params.getall("id", [])
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            return error("memoryIds array is required")
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
        return Response({"success": True, "deleted": deleted, "total": len(ids)})

    @get("/export")
    async def export(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, sessions: SessionsDep
    ) -> Response[Any]:
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
    async def audit(self, request: Request[Any, Any, Any], memories: MemoriesDep) -> Response[Any]:
        limit = _positive(request.query_params.get("limit", "50"), "limit", MAX_AUDIT)
        entries = await memories.audit_log(limit)
        return Response({"entries": [shapes.audit_entry(e) for e in entries], "success": True})

    @get("/mcp/tools")
    async def mcp_tools(self, state: State) -> Response[Any]:
        """Baton's tools, and those agentmemory's shim answers itself again under
        ``baton_``-prefixed names that it forwards with every argument (see docs/sessions.md)."""
        tools = [
            {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            for tool in await state.mcp.list_tools()
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
        name = (
            name.removeprefix(ALIAS_PREFIX) if name.removeprefix(ALIAS_PREFIX) in SHADOWED else name
        )
        if name not in {tool.name for tool in await state.mcp.list_tools()}:
            return error(f"Unknown tool: {name}")
        caller = caller.acting_as(arguments.get("agentId")).in_session(arguments.get("sessionId"))
        await check_session(state.backend.redis, caller)
        token = SHIM_CALLER.set(caller)
        try:
            result = await state.mcp.call_tool(name, arguments)
        except Exception as failure:  # the SDK's own refusals (unknown arguments, …)
            return _tool_error(str(failure))
        finally:
            SHIM_CALLER.reset(token)
        content = [block.model_dump(exclude_none=True) for block in result.content]
        if result.is_error:
            return Response({"content": content, "isError": True})
        return Response({"content": content})


def _tool_error(message: str) -> Response[Any]:
    text = message if message.startswith("Error") else f"Error: {message}"
    return Response({"content": [{"type": "text", "text": text}], "isError": True})


def _positive(raw: object, name: str, ceiling: int | None) -> int:
    """A positive whole number (or its digits as a string), at most ``ceiling``."""
    value = int(raw) if isinstance(raw, str) and raw.strip().isdigit() else raw
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < 1
        or (ceiling is not None and value > ceiling)
    ):
        limit = f" up to {ceiling}" if ceiling else ""
        raise InvalidInput(name, f"{name} must be a positive integer{limit}")
    return value
