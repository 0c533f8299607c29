"""Baton's results in agentmemory's field names and types, field for field: the one place
that decides what agentmemory's clients see, on its REST routes (``/agentmemory``) and from
the MCP tools agentmemory has too (the operations named ``agentmemory`` in
``baton.server.operations``).

Read from ``@agentmemory/agentmemory`` 0.9.29 (its REST registrations, its MCP tool
handlers and its ``mem::*`` functions in ``dist/index.mjs``; its tools answer the JSON of
the same functions its routes do); docs/sessions.md names the reference version. Fields
that agentmemory leaves out when empty are left out here too (``omit_defaults``); Baton's
extra fields are kept only where agentmemory's clients ignore them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec

from baton.server.model.memory_models import Format, Memory, MemorySaved, SimilarTo
from baton.server.model.models import AuditEntry, RecallHit, Session

EXPAND_LIMIT = 20  # ids a smart search expands at most (agentmemory's; the rest are cut)
MEMORY_STRENGTH = 7  # agentmemory's strength of a fresh memory (its search "importance")
OBSERVATION_IMPORTANCE = 5
OBSERVATION_CONFIDENCE = 0.3


class Camel(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """A shape whose fields agentmemory spells in camelCase, absent when empty."""


class Origin(Camel, kw_only=True):
    channel: str
    captured_at: str


class MemoryShape(Camel, kw_only=True):
    """A memory as ``mem::remember`` answers it."""

    id: str
    created_at: str
    updated_at: str
    type: str
    title: str
    content: str
    concepts: list[str]
    files: list[str]
    session_ids: list[str]
    strength: int
    version: int
    parent_id: str | None = None
    supersedes: list[str]
    source_observation_ids: list[str]
    is_latest: bool
    origin: Origin
    agent_id: str | None = None
    project: str | None = None
    forget_after: str | None = None


class Saved(Camel, kw_only=True):
    """``POST /agentmemory/remember`` and ``memory_save``."""

    success: bool
    memory: MemoryShape
    similar_to: SimilarTo | None = None


class ObservationShape(Camel, kw_only=True):
    """A search hit as agentmemory's stored observation object."""

    id: str
    session_id: str | None
    timestamp: str | None
    type: str | None
    title: str
    facts: list[str]
    narrative: str
    concepts: list[str]
    files: list[str]
    importance: int
    confidence: float | None = None


class SearchItem(Camel, kw_only=True):
    """One search result; which fields it has depends on the format (``full``:
    observation, score, sessionId; ``compact``: obsId, sessionId, title, type, score,
    timestamp; ``narrative``: obsId, sessionId, title, narrative, score, timestamp; an
    expanded smart-search hit: obsId, sessionId, observation)."""

    observation: ObservationShape | None = None
    obs_id: str | None = None
    session_id: str
    title: str | None = None
    type: str | None = None
    narrative: str | None = None
    score: float | None = None
    timestamp: str | None = None


class Search(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``POST /agentmemory/search`` and ``memory_recall`` (these names are agentmemory's)."""

    format: Format
    results: list[SearchItem]
    tokens_used: int
    truncated: bool
    tokens_budget: int | None = None
    text: str | None = None


class SmartSearch(Camel, kw_only=True):
    """``POST /agentmemory/smart-search`` and ``memory_smart_search``: compact hits, or
    the expanded ones asked for."""

    mode: Literal["compact", "expanded"]
    results: list[SearchItem]
    truncated: bool | None = None


class SessionShape(Camel, kw_only=True):
    """A session as agentmemory lists it (plus Baton's ``title``, ``concepts``, ``files``)."""

    id: str
    project: str | None = None
    cwd: str | None = None
    started_at: str
    status: str
    observation_count: int
    summary: str | None = None
    first_prompt: str | None = None
    agent_id: str
    updated_at: str | None = None
    ended_at: str | None = None
    title: str | None = None
    concepts: list[str]
    files: list[str]


class Sessions(Camel, kw_only=True):
    """``GET /agentmemory/sessions`` and ``memory_sessions``."""

    sessions: list[SessionShape]


def memory(saved: Memory) -> MemoryShape:
    return MemoryShape(
        id=saved.id,
        created_at=saved.created_at,
        updated_at=saved.updated_at or saved.created_at,
        type=saved.type,
        title=saved.title,
        content=saved.content,
        concepts=saved.concepts,
        files=saved.files,
        session_ids=[],
        strength=MEMORY_STRENGTH,
        version=saved.version,
        parent_id=saved.parent_id,
        supersedes=saved.supersedes,
        source_observation_ids=saved.source_observation_ids,
        is_latest=saved.is_latest,
        origin=Origin(channel="agent", captured_at=saved.created_at),
        agent_id=saved.agent_id,
        project=saved.project,
        forget_after=saved.expires_at,
    )


def saved(answer: MemorySaved) -> Saved:
    """A successful save (``answer.memory`` set) in agentmemory's words."""
    assert answer.memory is not None
    return Saved(success=True, memory=memory(answer.memory), similar_to=answer.similar_to)


def observation(hit: RecallHit) -> ObservationShape:
    """A hit as agentmemory's observation object (a memory as its ``decision``
    observation, as agentmemory's ``memoryToObservation`` does)."""
    if hit.kind == "memory":
        return ObservationShape(
            id=hit.id,
            session_id="memory",
            timestamp=hit.created_at,
            type="decision",
            title=hit.title,
            facts=[hit.text],
            narrative=hit.text,
            concepts=hit.concepts,
            files=hit.files,
            importance=MEMORY_STRENGTH,
        )
    return ObservationShape(
        id=hit.id,
        session_id=hit.session,
        timestamp=hit.created_at,
        type=hit.type,
        title=hit.title,
        facts=[],
        narrative=hit.text,
        concepts=hit.concepts,
        files=hit.files,
        importance=OBSERVATION_IMPORTANCE,
        confidence=OBSERVATION_CONFIDENCE,
    )


def search_item(hit: RecallHit, form: Format) -> SearchItem:
    session = hit.session or "memory"
    if form == "full":
        return SearchItem(observation=observation(hit), score=hit.score, session_id=session)
    return SearchItem(
        obs_id=hit.id,
        session_id=session,
        title=hit.title,
        type=hit.type if form == "compact" else None,
        narrative=hit.text if form == "narrative" else None,
        score=hit.score,
        timestamp=hit.created_at,
    )


def tokens(item: SearchItem) -> int:
    """agentmemory's estimate of an item's tokens: its JSON length / 3."""
    return max(1, math.ceil(len(msgspec.json.encode(item)) / 3))


def search(hits: list[RecallHit], form: Format, budget: int | None) -> Search:
    """Items filled while they fit the budget."""
    results: list[SearchItem] = []
    used, truncated = 0, False
    for hit in hits:
        item = search_item(hit, form)
        cost = tokens(item)
        if budget is not None and used + cost > budget:
            truncated = True
            break
        results.append(item)
        used += cost
    text = None
    if form == "narrative":
        text = "\n\n".join(
            f"{number}. {item.title}\n{item.narrative}"
            for number, item in enumerate(results, start=1)
        )
    return Search(
        format=form,
        results=results,
        tokens_used=used,
        truncated=truncated,
        tokens_budget=budget,
        text=text,
    )


def smart_search(hits: list[RecallHit], expanded: bool, truncated: bool) -> SmartSearch:
    if expanded:
        return SmartSearch(
            mode="expanded",
            truncated=truncated,
            results=[
                SearchItem(
                    obs_id=hit.id, session_id=hit.session or "memory", observation=observation(hit)
                )
                for hit in hits
            ],
        )
    return SmartSearch(mode="compact", results=[search_item(hit, "compact") for hit in hits])


def session(found: Session) -> SessionShape:
    return SessionShape(
        id=found.id,
        project=found.project,
        cwd=found.cwd,
        started_at=found.started_at,
        status=found.status,
        observation_count=found.observation_count,
        summary=found.summary,
        first_prompt=found.title,
        agent_id=found.agent,
        updated_at=found.last_activity_at,
        ended_at=found.ended_at,
        title=found.title,
        concepts=found.concepts,
        files=found.files,
    )


def sessions(found: list[Session]) -> Sessions:
    return Sessions(sessions=[session(each) for each in found])


def audit_entry(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "timestamp": entry.at,
        "operation": entry.action,
        "functionId": f"baton::{entry.action}",
        "targetIds": [entry.target.rpartition("/")[2]],
        "details": {
            **entry.details,
            "target": entry.target,
            "reason": entry.reason,
            "agentId": entry.agent,
        },
    }
