"""The memory layer's wire types: what the memory and session-context operations take and
answer, below the stores (the Python client loads these, not the stores)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from baton.server.model.errors import InvalidInput
from baton.server.model.models import Input, RecallHit
from baton.server.model.validation import NON_BLANK, SESSION_ID, TEXT

MAX_TTL_DAYS = 36_500
MAX_RECALL = 100  # results of one recall or search
START_BUDGET = 2000  # agentmemory's default TOKEN_BUDGET
Format = Literal["full", "compact", "narrative"]  # how much of each hit a recall shows
MAX_CONCEPTS = 50  # a session's concepts, as its end names them
MAX_CONCEPT = 100
# The hook events agentmemory's hooks (and Baton's) send.
HookType = Literal[
    "session_start",
    "prompt_submit",
    "pre_tool_use",
    "post_tool_use",
    "post_tool_failure",
    "pre_compact",
    "subagent_start",
    "subagent_stop",
    "notification",
    "task_completed",
    "stop",
    "session_end",
]
SessionId = Annotated[str, msgspec.Meta(pattern=SESSION_ID)]
NonBlank = Annotated[str, msgspec.Meta(pattern=NON_BLANK)]


class SessionStartInput(Input, kw_only=True):
    id: SessionId | None = None  # a fresh one when left out
    project: NonBlank | None = None  # a stable id
    cwd: str | None = None
    title: str | None = None


class SessionEndInput(Input, kw_only=True):
    session_id: SessionId
    summary: str | None = None
    title: str | None = None
    concepts: (
        Annotated[
            list[Annotated[str, msgspec.Meta(max_length=MAX_CONCEPT)]],
            msgspec.Meta(max_length=MAX_CONCEPTS),
        ]
        | None
    ) = None


class ObserveInput(Input, kw_only=True):
    hook_type: HookType
    session_id: SessionId
    project: NonBlank  # a stable id
    cwd: str | None = None
    timestamp: NonBlank
    data: Any = None
    # A caller's id for the event: stored once per id.
    event_id: Annotated[str, msgspec.Meta(max_length=128, pattern=TEXT)] | None = None


class Memory(msgspec.Struct, kw_only=True):
    """A saved memory. ``version`` counts its line (1 + the version of the memory it
    supersedes); ``parent_id``/``supersedes`` name that memory, ``superseded_by`` its
    successor (then ``is_latest`` is false). Each memory is the record ``memory/<id>``."""

    id: str
    version: int
    type: str
    title: str
    content: str
    concepts: list[str]
    files: list[str]
    project: str | None
    agent_id: str | None
    created_at: str
    parent_id: str | None = None
    supersedes: list[str] = []
    is_latest: bool = True
    superseded_by: str | None = None
    expires_at: str | None = None
    source_observation_ids: list[str] = []
    updated_at: str | None = None  # the last update's time (None: never updated)


class Merge(msgspec.Struct, kw_only=True, rename="camel"):
    """One consolidation: ``merged`` memories superseded by ``kept`` (the newest)."""

    kept: str
    merged: list[str]
    similarity: float  # the lowest Jaccard similarity of a merged memory to the kept one


class Consolidation(msgspec.Struct, kw_only=True, rename="camel"):
    """What a consolidation would do (``dry_run``) or did."""

    dry_run: bool
    merges: list[Merge]
    scanned: int


class SimilarTo(msgspec.Struct, kw_only=True):
    id: str
    title: str
    similarity: float


class MemorySaved(msgspec.Struct, kw_only=True, rename={"similar_to": "similarTo"}):
    success: bool
    memory: Memory | None = None
    similar_to: SimilarTo | None = None
    error: str | None = None


class Recall(msgspec.Struct, kw_only=True):
    results: list[RecallHit]
    count: int
    tokens_used: int
    truncated: bool
    narrative: str | None = None


class Forgotten(msgspec.Struct, kw_only=True):
    success: bool
    memories: list[str]
    observations: int
    sessions: list[str]
    audit_ids: list[str]


def split_list(value: str | Sequence[str] | None, field: str) -> list[str]:
    """A list of strings or a comma-separated string (both accepted on every surface);
    anything else (a number, an object) is refused, never iterated into something."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise InvalidInput(
            field, f"{field} must be an array of strings or a comma-separated string"
        )
    return [item.strip() for item in items if item.strip()]


class Context(msgspec.Struct, kw_only=True):
    """Context to inject: the text, how many blocks it holds and its estimated tokens."""

    context: str
    blocks: int
    tokens: int


class Enriched(msgspec.Struct, kw_only=True):
    context: str
    truncated: bool


class FileContext(msgspec.Struct, kw_only=True):
    """What earlier sessions did to some files (agentmemory's ``mem::file-context``)."""

    context: str
