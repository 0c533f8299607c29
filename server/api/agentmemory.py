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
from typing import Any

import msgspec
from baton.server.api.deps import CallerDep, MemoriesDep, SessionsDep, claim_agent_id
from baton.server.context import START_BUDGET, ContextBuilder
from baton.server.errors import BatonError, NotFound
from baton.server.identity import check_session
from baton.server.mcp_server import SHIM_CALLER
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State

CAMEL = re.compile(r"_([a-z])")


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


def _baton_error(_: Request[Any, Any, Any], failure: BatonError) -> Response[Any]:
    status = failure.status_code if failure.status_code in (403, 404) else 400
    return error(failure.detail, status)


async def _body(request: Request[Any, Any, Any]) -> dict[str, Any]:
    try:
        body = await request.json()
    except Exception:  # noqa: BLE001 - any undecodable body is the client's mistake
        return {}
    return body if isinstance(body, dict) else {}


class AgentMemoryController(Controller):
    """The routes agentmemory's hooks and MCP shim call."""

    path = "/agentmemory"
    include_in_schema = False
    before_request = claim_agent_id
    exception_handlers = {BatonError: _baton_error}  # type: ignore[dict-item]

    @get("/livez")
    async def livez(self) -> dict[str, str]:
        return {"status": "ok", "service": "agentmemory"}

    @get("/health")
    async def health(self, state: State) -> Response[Any]:
        await state.backend.redis.ping()
        return answer({"status": "healthy", "service": "agentmemory", "backend": "baton"})

    @post("/session/start")
    async def session_start(
        self, request: Request[Any, Any, Any], sessions: SessionsDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        session_id, project, cwd = (_string(body, k) for k in ("sessionId", "project", "cwd"))
        if not session_id or not project or not cwd:
            return error("sessionId, project, and cwd are required non-empty strings")
        session = await sessions.start(caller=caller, session_id=session_id,
                                       project=project, cwd=cwd, title=_string(body, "title"))  # fmt: skip
        context = await ContextBuilder(sessions).start(session.id, session.cwd, project)
        return answer({"session": _session_shape(session), "context": context.context})

    @post("/context", status_code=200)
    async def context(self, request: Request[Any, Any, Any], sessions: SessionsDep) -> Response[Any]:
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
        session_id, files, terms = _string(body, "sessionId"), body.get("files"), body.get("terms", [])
        if not session_id or not isinstance(files, list) or not files or not all(
            isinstance(f, str) and f for f in files
        ):
            return error("sessionId (string) and files (string[]) are required")
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            return error("terms must be an array of strings")
        project = body.get("project")
        if project is not None and not _string(body, "project"):
            return error("project must be a non-empty string")
        return answer(await ContextBuilder(sessions).enrich(session_id, files, terms,
                                                            _string(body, "project")))  # fmt: skip

    @post("/summarize", status_code=200)
    async def summarize(self, request: Request[Any, Any, Any], sessions: SessionsDep) -> Response[Any]:
        """A session summary built from its observations (agentmemory asks an LLM; Baton does
        not): always 200, ``success: false`` with agentmemory's error words."""
        session_id = _string(await _body(request), "sessionId")
        if not session_id:
            return error("sessionId is required")
        try:
            summary = await ContextBuilder(sessions).summarize(session_id)
        except NotFound as missing:
            reason = "no_observations" if missing.detail == "no_observations" else "session_not_found"
            return answer({"success": False, "error": reason})
        return answer({"success": True, "summary": msgspec.to_builtins(summary),
                       "qualityScore": 0})  # fmt: skip

    @post("/claude-bridge/sync", status_code=200)
    async def claude_bridge_sync(self) -> Response[Any]:
        """agentmemory writes Claude Code's MEMORY.md here; Baton, possibly on another machine,
        never writes into the user's home directory: acknowledged, nothing written."""
        return answer({"success": False, "error": "Claude bridge not enabled: Baton does not "
                       "write ~/.claude; use Baton's SessionStart context instead"})  # fmt: skip

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
        raw = request.query_params.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= 500:
            return error("limit must be a positive integer up to 500")
        found = await sessions.recent(int(raw))
        return answer({"sessions": [_session_shape(s) for s in found]})

    @post("/observe")
    async def observe(
        self, request: Request[Any, Any, Any], sessions: SessionsDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        names = ("hookType", "sessionId", "project", "timestamp")
        values = [_string(body, name) for name in names]
        if not all(values):
            return error("hookType, sessionId, project, and timestamp are required strings")
        hook, session_id, project, timestamp = values
        cwd = _string(body, "cwd")  # hooks may send "" or nothing: stored as unknown
        observed = await sessions.observe(
            hook_type=hook, session_id=session_id, project=project, cwd=cwd,  # type: ignore[arg-type]
            timestamp=timestamp, data=body.get("data"), caller=caller,  # type: ignore[arg-type]
        )  # fmt: skip
        return answer({"success": True, "observationId": observed.observation.id,
                       "deduplicated": observed.deduplicated,
                       "observation": observed.observation}, 201)  # fmt: skip

    @post("/remember")
    async def remember(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        if not _string(body, "content"):
            return error("content is required")
        saved = await memories.save(
            body["content"], type=body.get("type"), concepts=body.get("concepts"),
            files=body.get("files"), project=body.get("project"),
            agent_id=caller.agent, ttl_days=body.get("ttlDays"),
        )  # fmt: skip
        return answer(saved, 201)

    @post("/search")
    async def search(
        self, request: Request[Any, Any, Any], memories: MemoriesDep
    ) -> Response[Any]:
        body = await _body(request)
        if not _string(body, "query"):
            return error("query is required and must be a non-empty string")
        found = await memories.recall(
            body["query"], limit=body.get("limit", 10),
            format=str(body.get("format", "full")).strip().lower(),  # type: ignore[arg-type]
            token_budget=body.get("token_budget"), project=body.get("project"),
            agent_id=_string(body, "agentId"),
        )  # fmt: skip
        return answer(found)

    @post("/smart-search")
    async def smart_search(
        self, request: Request[Any, Any, Any], memories: MemoriesDep
    ) -> Response[Any]:
        body = await _body(request)
        expand = body.get("expandIds")
        if not _string(body, "query") and not expand:
            return error("query or expandIds is required")
        found = await memories.smart_search(
            query=_string(body, "query"), expand_ids=expand if isinstance(expand, list) else None,
            limit=body.get("limit", 10), project=body.get("project"),
        )  # fmt: skip
        return answer(found)

    @post("/forget")
    async def forget(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        if not _string(body, "sessionId") and not _string(body, "memoryId"):
            return error("sessionId or memoryId is required")
        result = await memories.forget(
            caller=caller, memory_id=_string(body, "memoryId"),
            session_id=_string(body, "sessionId"), observation_ids=body.get("observationIds"),
            reason=_string(body, "reason") or "forgotten on request",
        )  # fmt: skip
        return answer(result)

    @delete("/governance/memories", status_code=200)
    async def delete_memories(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        ids = body.get("memoryIds") or body.get("ids") or request.query_params.getall("id", [])
        if not isinstance(ids, list) or not ids:
            return error("memoryIds is required: a list of memory ids")
        deleted = []
        for memory_id in ids:
            try:
                await memories.forget(caller=caller, memory_id=str(memory_id),
                                      reason=_string(body, "reason") or "governance delete")  # fmt: skip
                deleted.append(memory_id)
            except BatonError:
                continue
        return answer({"success": True, "deleted": len(deleted), "memoryIds": deleted})

    @get("/export")
    async def export(
        self, request: Request[Any, Any, Any], memories: MemoriesDep, sessions: SessionsDep
    ) -> Response[Any]:
        page = await memories.facts.list_records(scope="memory", limit=500)
        exported = []
        for record in page.records:
            try:
                exported.append(await memories.get(record.ref.split("/", 1)[1]))
            except BatonError:
                continue
        recent = await sessions.recent(500)
        return answer({"version": 1, "memories": exported,
                       "sessions": [_session_shape(s) for s in recent]})  # fmt: skip

    @get("/audit")
    async def audit(
        self, request: Request[Any, Any, Any], memories: MemoriesDep
    ) -> Response[Any]:
        raw = request.query_params.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            return error("limit must be a positive integer up to 1000")
        return answer({"entries": await memories.audit_log(int(raw))})

    @get("/mcp/tools")
    async def mcp_tools(self, state: State) -> Response[Any]:
        tools = await state.mcp.list_tools()
        return Response({"tools": [
            {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            for tool in tools
        ]})  # fmt: skip

    @post("/mcp/call")
    async def mcp_call(
        self, request: Request[Any, Any, Any], state: State, caller: CallerDep
    ) -> Response[Any]:
        body = await _body(request)
        name, arguments = _string(body, "name"), body.get("arguments") or {}
        if not name or not isinstance(arguments, dict):
            return error("name (a tool) and arguments (an object) are required")
        caller = caller.acting_as(arguments.get("agentId")).in_session(arguments.get("sessionId"))
        await check_session(state.backend.redis, caller)
        token = SHIM_CALLER.set(caller)
        try:
            result = await state.mcp.call_tool(name, arguments)
        except Exception as failure:  # noqa: BLE001 - the shim reports every tool failure as 400
            return error(str(failure))
        finally:
            SHIM_CALLER.reset(token)
        if result.is_error:
            return error(" ".join(getattr(block, "text", "") for block in result.content))
        return Response({"content": [block.model_dump(exclude_none=True) for block in result.content]})


def _session_shape(session: Any) -> dict[str, Any]:
    """A Baton session in agentmemory's field names."""
    return {
        "id": session.id, "project": session.project, "cwd": session.cwd,
        "startedAt": session.started_at, "endedAt": session.ended_at, "status": session.status,
        "observationCount": session.observation_count, "agentId": session.agent,
        "title": session.title, "summary": session.summary, "concepts": session.concepts,
        "files": session.files,
    }  # fmt: skip
