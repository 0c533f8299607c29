"""REST routes for sessions, observations, saved memories, search and forgetting (``/v1``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from baton.server.api.deps import CallerDep, MemoriesDep, SessionsDep
from baton.server.api.problems import problems
from baton.server.context_builder import START_BUDGET, Context, ContextBuilder, Enriched
from baton.server.errors import InvalidInput
from baton.server.memories import MAX_AUDIT, MAX_RECALL, AuditEntry, Forgotten, MemorySaved, Recall
from baton.server.models import Observed, ResumeHere, Session, SessionEnded


class SessionStartBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str | None = None
    project: str | None = None
    cwd: str | None = None
    title: str | None = None


class SessionEndBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    summary: str | None = None
    title: str | None = None
    concepts: list[str] | None = None


class ObserveBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    hook_type: str
    session_id: str
    project: str
    cwd: str | None = None
    timestamp: str
    data: Any = None
    event_id: str | None = None  # a caller's id for the event: stored once per id


class ContextBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``start``: the previous session's "where were we" for ``cwd``; ``compact``: this
    session's state and the previous session's answer."""

    session_id: str
    kind: Literal["start", "compact"]
    cwd: str | None = None
    project: str | None = None
    budget: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = START_BUDGET


class EnrichBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: str
    files: Annotated[list[str], msgspec.Meta(min_length=1, max_length=50)]
    terms: Annotated[list[str], msgspec.Meta(max_length=50)] = []
    project: str | None = None


class SaveBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    content: str
    type: str | None = None
    concepts: list[str] = []
    files: list[str] = []
    project: str | None = None
    ttl_days: Annotated[float, msgspec.Meta(gt=0)] | None = None


class RecallBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    query: str
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_RECALL)] = 10
    format: Literal["full", "compact", "narrative"] = "full"
    token_budget: Annotated[int, msgspec.Meta(ge=1)] | None = None
    project: str | None = None
    agent_id: str | None = None


class SmartSearchBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    query: str | None = None
    expand_ids: list[str] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_RECALL)] = 10
    project: str | None = None


class ForgetBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    memory_id: str | None = None
    session_id: str | None = None
    observation_ids: list[str] | None = None
    reason: str = "forgotten on request"


class MemoryController(Controller):
    path = "/v1"
    tags = ("sessions and memories",)

    @post("/sessions", summary="Start a session (any id, or a fresh one)", responses=problems(413))
    async def start_session(
        self,
        sessions: SessionsDep,
        caller: CallerDep,
        data: JSONBody[SessionStartBody | None] = None,
    ) -> Session:
        body = data or SessionStartBody()
        return await sessions.start(
            caller=caller, session_id=body.id, project=body.project, cwd=body.cwd, title=body.title
        )

    @post(
        "/sessions/{session_id:str}/end",
        summary="End a session (completed)",
        status_code=200,
        responses=problems(404, 413),
    )
    async def end_session(
        self,
        session_id: FromPath[str],
        sessions: SessionsDep,
        caller: CallerDep,
        data: JSONBody[SessionEndBody | None] = None,
    ) -> SessionEnded:
        body = data or SessionEndBody()
        return await sessions.end(
            session_id,
            caller=caller,
            summary=body.summary,
            title=body.title,
            concepts=body.concepts,
        )

    @get("/sessions", summary="Recent sessions, newest first", responses=problems())
    async def list_sessions(
        self, sessions: SessionsDep, limit: Annotated[int, Parameter(ge=1, le=500)] = 20
    ) -> list[Session]:
        return await sessions.recent(limit)

    @get(
        "/sessions/resume",
        summary="Where were we: the session to resume for a directory",
        responses=problems(),
    )
    async def resume_here(
        self,
        sessions: SessionsDep,
        caller: CallerDep,
        cwd: FromQuery[str],
        override: FromQuery[str | None] = None,
    ) -> ResumeHere:
        return await sessions.resume_here(cwd, override=override, caller_session=caller.session)

    @get(
        "/sessions/{session_id:str}",
        summary="A session and the record versions it touched",
        responses=problems(404),
    )
    async def get_session(self, session_id: FromPath[str], sessions: SessionsDep) -> Session:
        return await sessions.get(session_id)

    @post(
        "/context",
        summary="Context for a coding agent's hook: session start or compaction",
        status_code=200,
        responses=problems(413),
    )
    async def context(self, data: JSONBody[ContextBody], sessions: SessionsDep) -> Context:
        builder = ContextBuilder(sessions)
        if data.kind == "start":
            return await builder.start(data.session_id, data.cwd, data.project, data.budget)
        return await builder.compact(data.session_id, data.project, data.budget)

    @post(
        "/enrich",
        summary="What earlier sessions did to the files a tool is about to touch",
        status_code=200,
        responses=problems(413),
    )
    async def enrich(self, data: JSONBody[EnrichBody], sessions: SessionsDep) -> Enriched:
        return await ContextBuilder(sessions).enrich(
            data.session_id, data.files, data.terms, data.project
        )

    @post("/observations", summary="Record a hook event of a coding agent", responses=problems(413))
    async def observe(
        self, data: JSONBody[ObserveBody], sessions: SessionsDep, caller: CallerDep
    ) -> Observed:
        return await sessions.observe(
            hook_type=data.hook_type,
            session_id=data.session_id,
            project=data.project,
            cwd=data.cwd,
            timestamp=data.timestamp,
            data=data.data,
            caller=caller,
            event_id=data.event_id,
        )

    @post(
        "/memories",
        summary="Save a memory (near-duplicates supersede, similar ones are hinted)",
        responses=problems(413),
    )
    async def save(
        self, data: JSONBody[SaveBody], memories: MemoriesDep, caller: CallerDep
    ) -> MemorySaved:
        saved = await memories.save(
            data.content,
            type=data.type,
            concepts=data.concepts,
            files=data.files,
            project=data.project,
            agent_id=caller.agent,
            ttl_days=data.ttl_days,
        )
        if not saved.success:
            raise InvalidInput("content", saved.error or "is required")
        return saved

    @post(
        "/memories/recall",
        summary="BM25 search over memories and observations",
        status_code=200,
        responses=problems(413),
    )
    async def recall(self, data: JSONBody[RecallBody], memories: MemoriesDep) -> Recall:
        return await memories.recall(
            data.query,
            limit=data.limit,
            format=data.format,
            token_budget=data.token_budget,
            project=data.project,
            agent_id=data.agent_id,
        )

    @post(
        "/memories/smart-search",
        summary="Compact hits, or full records for chosen ids",
        status_code=200,
        responses=problems(413),
    )
    async def smart_search(self, data: JSONBody[SmartSearchBody], memories: MemoriesDep) -> Recall:
        if not data.query and not data.expand_ids:
            raise InvalidInput("query", "give a query or expand_ids")
        return await memories.smart_search(
            query=data.query, expand_ids=data.expand_ids, limit=data.limit, project=data.project
        )

    @post(
        "/forget",
        summary="Forget a memory, observations or a whole session (audited)",
        status_code=200,
        responses=problems(404, 413),
    )
    async def forget(
        self, data: JSONBody[ForgetBody], memories: MemoriesDep, caller: CallerDep
    ) -> Forgotten:
        return await memories.forget(
            caller=caller,
            memory_id=data.memory_id,
            session_id=data.session_id,
            observation_ids=data.observation_ids,
            reason=data.reason,
        )

    @get("/audit", summary="The audit log, newest first", responses=problems())
    async def audit(
        self, memories: MemoriesDep, limit: Annotated[int, Parameter(ge=1, le=MAX_AUDIT)] = 50
    ) -> list[AuditEntry]:
        return await memories.audit_log(limit)
