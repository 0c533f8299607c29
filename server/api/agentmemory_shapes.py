"""Baton's results in agentmemory's field names and types, field for field.

Read from ``@agentmemory/agentmemory`` 0.9.29 (its REST registrations and ``mem::*``
functions in ``dist/index.mjs``); docs/sessions.md names the reference version. Fields that
agentmemory leaves out when empty are left out here too; Baton's extra fields are kept only
where agentmemory's clients ignore them (they relay the JSON as text).
"""

from __future__ import annotations

import json
import math
from typing import Any

from baton.server.memories import AuditEntry, Memory
from baton.server.models import RecallHit, Session

MEMORY_STRENGTH = 7  # agentmemory's strength of a fresh memory (its search "importance")
OBSERVATION_IMPORTANCE = 5
OBSERVATION_CONFIDENCE = 0.3


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in fields.items() if value is not None}


def memory(saved: Memory) -> dict[str, Any]:
    """A memory as ``mem::remember`` answers it."""
    return _present(
        {
            "id": saved.id,
            "createdAt": saved.created_at,
            "updatedAt": saved.created_at,
            "type": saved.type,
            "title": saved.title,
            "content": saved.content,
            "concepts": saved.concepts,
            "files": saved.files,
            "sessionIds": [],
            "strength": MEMORY_STRENGTH,
            "version": saved.version,
            "parentId": saved.parent_id,
            "supersedes": saved.supersedes,
            "sourceObservationIds": [],
            "isLatest": saved.is_latest,
            "origin": {"channel": "agent", "capturedAt": saved.created_at},
            "agentId": saved.agent_id,
            "project": saved.project,
            "forgetAfter": saved.expires_at,
        }
    )


def observation(hit: RecallHit) -> dict[str, Any]:
    """A search hit as agentmemory's stored observation object (a memory is shown as its
    ``decision`` observation, as agentmemory's ``memoryToObservation`` does)."""
    if hit.kind == "memory":
        return {
            "id": hit.id,
            "sessionId": "memory",
            "timestamp": hit.created_at,
            "type": "decision",
            "title": hit.title,
            "facts": [hit.text],
            "narrative": hit.text,
            "concepts": hit.concepts,
            "files": hit.files,
            "importance": MEMORY_STRENGTH,
        }
    return {
        "id": hit.id,
        "sessionId": hit.session,
        "timestamp": hit.created_at,
        "type": hit.type,
        "title": hit.title,
        "facts": [],
        "narrative": hit.text,
        "concepts": hit.concepts,
        "files": hit.files,
        "importance": OBSERVATION_IMPORTANCE,
        "confidence": OBSERVATION_CONFIDENCE,
    }


def _session_of(hit: RecallHit) -> str:
    return hit.session or "memory"


def search_item(hit: RecallHit, form: str) -> dict[str, Any]:
    if form == "compact":
        return {
            "obsId": hit.id,
            "sessionId": _session_of(hit),
            "title": hit.title,
            "type": hit.type,
            "score": hit.score,
            "timestamp": hit.created_at,
        }
    if form == "narrative":
        return {
            "obsId": hit.id,
            "sessionId": _session_of(hit),
            "title": hit.title,
            "narrative": hit.text,
            "score": hit.score,
            "timestamp": hit.created_at,
        }
    return {"observation": observation(hit), "score": hit.score, "sessionId": _session_of(hit)}


def tokens(item: dict[str, Any]) -> int:
    """agentmemory's estimate of an item's tokens: its JSON length / 3."""
    return max(1, math.ceil(len(json.dumps(item, separators=(",", ":"))) / 3))


def search(hits: list[RecallHit], form: str, budget: int | None) -> dict[str, Any]:
    """``POST /agentmemory/search``'s answer: items filled while they fit the budget."""
    results, used, truncated = [], 0, False
    for hit in hits:
        item = search_item(hit, form)
        cost = tokens(item)
        if budget is not None and used + cost > budget:
            truncated = True
            break
        results.append(item)
        used += cost
    answer = {"format": form, "results": results, "tokens_used": used, "truncated": truncated}
    if budget is not None:
        answer["tokens_budget"] = budget
    if form == "narrative":
        answer["text"] = "\n\n".join(
            f"{number}. {item['title']}\n{item['narrative']}"
            for number, item in enumerate(results, start=1)
        )
    return answer


def session(found: Session) -> dict[str, Any]:
    """A session as agentmemory lists it (plus Baton's ``title``, ``concepts``, ``files``)."""
    return _present(
        {
            "id": found.id,
            "project": found.project,
            "cwd": found.cwd,
            "startedAt": found.started_at,
            "status": found.status,
            "observationCount": found.observation_count,
            "summary": found.summary,
            "firstPrompt": found.title,
            "agentId": found.agent,
            "updatedAt": found.last_activity_at,
            "endedAt": found.ended_at,
            "title": found.title,
            "concepts": found.concepts,
            "files": found.files,
        }
    )


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
