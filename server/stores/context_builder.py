"""What goes back into a coding agent: the context its hooks inject.

- **start**: at SessionStart, the "where were we" answer for the working directory, from
  earlier sessions only (never the session being started, never another project's).
- **compact**: before the context window is compacted (PreCompact), the current session's
  state (title, files, open question, what it did last) and the previous session's answer.
- **enrich**: before a tool touches files (PreToolUse), what earlier sessions did to those
  files, related memories, and past bugs recorded for them.
- **summarize**: a session summary in agentmemory's shape, built without an LLM.

The text follows agentmemory's conventions (its ``mem::context`` and ``mem::enrich``): blocks
wrapped in ``<agentmemory-context project="…">``, a token budget estimated as characters / 3
and filled greedily, enrich context capped at 4,000 characters.
"""

from __future__ import annotations

import os
from xml.sax.saxutils import escape, quoteattr

import msgspec

from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.memory_models import START_BUDGET, Context, Enriched, FileContext
from baton.server.model.models import Observation, Session
from baton.server.stores.memories import MemoryStore
from baton.server.stores.observations import open_question
from baton.server.stores.sessions import SessionStore

ENRICH_LIMIT = 4000  # characters, agentmemory's cap
RECENT_OBSERVATIONS = 10
WRITING_TYPES = ("file_edit", "file_write")


def same_file(path: str, other: str) -> bool:
    """Whether two paths name the same file: equal, or one ends with the other after a
    ``/`` (``payments/refund.py`` and ``/srv/app/payments/refund.py``), as agentmemory
    matches them."""
    path, other = path.removeprefix("./"), other.removeprefix("./")
    return path == other or path.endswith(f"/{other}") or other.endswith(f"/{path}")


class Summary(msgspec.Struct, kw_only=True, rename="camel"):
    """A session summary in agentmemory's field names."""

    session_id: str
    project: str | None
    created_at: str
    title: str
    narrative: str
    key_decisions: list[str]
    files_modified: list[str]
    concepts: list[str]
    observation_count: int


def tokens(text: str) -> int:
    """agentmemory's estimate: a token is about three characters."""
    return -(-len(text) // 3)


def wrap(project: str | None, blocks: list[str], budget: int) -> Context:
    """Blocks in order while they fit the budget (a block too big is skipped, the next
    tried), wrapped in agentmemory's context element; empty when nothing fits."""
    chosen: list[str] = []
    used = 0
    for block in blocks:
        if block and used + tokens(block) <= budget:
            chosen.append(block)
            used += tokens(block)
    if not chosen:
        return Context(context="", blocks=0, tokens=0)
    text = f"<agentmemory-context project={quoteattr(project or '')}>\n"
    text += "\n\n".join(chosen) + "\n</agentmemory-context>"
    return Context(context=text, blocks=len(chosen), tokens=tokens(text))


def _line(observation: Observation) -> str:
    return f"- [{observation.type}] {observation.title}: {observation.narrative}"


class ContextBuilder:
    """Builds the injected context of one namespace."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions
        self.memories: MemoryStore = sessions.memories

    async def start(
        self,
        session_id: str | None,
        cwd: str | None,
        project: str | None,
        budget: int = START_BUDGET,
    ) -> Context:
        """The previous session's "where were we" for ``cwd``."""
        return wrap(project, [await self._previous(session_id, cwd)], budget)

    async def _previous(self, session_id: str | None, cwd: str | None) -> str:
        """The "where were we" block of the session before ``session_id`` in ``cwd``: only a
        session whose directory matches (never another project's, never the one asking),
        nothing for an empty one."""
        if not cwd or not os.path.isabs(cwd):
            return ""
        answer = await self.sessions.resume_here(cwd, caller_session=session_id)
        if not answer.found or answer.fallback or answer.empty:
            return ""
        return f"## Where we were\n{answer.text}"

    async def compact(self, session_id: str, project: str | None, budget: int) -> Context:
        """The current session's state, then the previous session's answer."""
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidInput("budget", "must be a positive integer")
        try:
            session = await self.sessions.get(session_id)
        except NotFound:
            return wrap(project, [], budget)
        blocks = [await self._session_block(session), await self._previous(session.id, session.cwd)]
        return wrap(project or session.project, blocks, budget)

    async def _session_block(self, session: Session) -> str:
        recent = await self.sessions.observations(session.id, last=RECENT_OBSERVATIONS)
        lines = [f"## This session: {session.title or session.id}"]
        question = open_question(session, recent)
        if question:
            lines.append(f"Open question: {question}")
        if session.summary:
            lines.append(f"Summary: {session.summary}")
        if session.files:
            lines.append("Files: " + ", ".join(session.files[:10]))
        if session.concepts:
            lines.append("Concepts: " + ", ".join(session.concepts))
        lines += [_line(observation) for observation in reversed(recent)]
        return "\n".join(lines)

    async def enrich(
        self, session_id: str, files: list[str], terms: list[str], project: str | None
    ) -> Enriched:
        """What earlier sessions did to ``files``, related memories, and past bugs."""
        if not files or not all(f.strip() for f in files):
            raise InvalidInput("files", "must be a non-empty list of non-empty file paths")
        parts = []
        history = await self.file_history(session_id, files, project)
        if history.context:
            parts.append(history.context)
        query = " ".join([*files, *(os.path.basename(path) for path in files), *terms]).strip()
        if query:
            related = await self.memories.recall(query, limit=5, kinds=("memory",), project=project)
            if related.results:
                parts.append(
                    "<agentmemory-relevant-context>\n"
                    + "\n".join(escape(hit.text) for hit in related.results)
                    + "\n</agentmemory-relevant-context>"
                )
            bugs = [
                hit
                for hit in related.results
                if hit.type == "bug"
                and any(same_file(path, known) for path in files for known in hit.files)
            ]
            if bugs:
                parts.append(
                    "<agentmemory-past-errors>\n"
                    + "\n".join(f"- {escape(hit.title)}: {escape(hit.text)}" for hit in bugs[:3])
                    + "\n</agentmemory-past-errors>"
                )
        text = "\n\n".join(parts)
        return Enriched(context=text[:ENRICH_LIMIT], truncated=len(text) > ENRICH_LIMIT)

    async def file_history(
        self, session_id: str | None, files: list[str], project: str | None = None
    ) -> FileContext:
        """Past observations of other sessions about each of ``files`` (the first 5; 5 each,
        best first), as agentmemory's ``<agentmemory-file-context>`` block; empty when none.
        A file's observations are those that touched it and those a memory about the file was
        drawn from (its ``sourceObservationIds``)."""
        per_file = []
        for path in files[:5]:
            query = f"{path} {os.path.basename(path)}"
            found = await self.memories.recall(
                query, limit=10, kinds=("observation", "memory"), project=project
            )
            about = [hit for hit in found.results if any(same_file(path, f) for f in hit.files)]
            memories = await self.memories.get_many([h.id for h in about if h.kind == "memory"])
            sources = [i for memory in memories.values() for i in memory.source_observation_ids]
            drawn = await self.memories.observations_named(sources)
            candidates = [
                *(hit for hit in about if hit.kind == "observation"),
                *(hit for hit in drawn if project is None or hit.project in (None, project)),
            ]
            hits = list({hit.id: hit for hit in candidates if hit.session != session_id}.values())[
                :5
            ]
            if hits:
                per_file.append(
                    f"## {escape(path)}\n"
                    + "\n".join(
                        f"- [{hit.type}] {escape(hit.title)}: {escape(hit.text)}" for hit in hits
                    )
                )
        if not per_file:
            return FileContext(context="")
        block = "\n".join(["<agentmemory-file-context>", *per_file, "</agentmemory-file-context>"])
        return FileContext(context=block)

    async def summarize(self, session_id: str) -> Summary:
        """A summary of the session from its observations (no LLM): what the user asked,
        the files written, the concepts, and the open question."""
        session = await self.sessions.get(session_id)
        observations = await self.sessions.observations(session_id)
        if not observations:
            raise NotFound("no_observations", session=session_id)
        asked = [o.narrative for o in observations if o.hook_type == "prompt_submit"]
        modified = list(
            dict.fromkeys(path for o in observations if o.type in WRITING_TYPES for path in o.files)
        )
        lines = [session.summary] if session.summary else []
        if modified:
            lines.append("Changed " + ", ".join(modified[:10]) + ".")
        question = open_question(session, observations[-20:])
        if question:
            lines.append(f"Open question: {question}")
        return Summary(
            session_id=session_id,
            project=session.project,
            created_at=session.ended_at or session.last_activity_at or session.started_at,
            title=session.title or (asked[0] if asked else observations[0].title)[:80],
            narrative=" ".join(lines),
            key_decisions=asked[-5:],
            files_modified=modified,
            concepts=session.concepts,
            observation_count=session.observation_count,
        )
