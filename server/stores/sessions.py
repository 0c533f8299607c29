"""Sessions of coding agents: start and end, observations compressed without an LLM, the
idle sweep, and the "where were we" resume done server-side."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import msgpack
from redis.typing import EncodableT, FieldT

from baton.server.model.clock import now_us, utc_now
from baton.server.model.errors import InvalidInput, NotFound
from baton.server.model.identity import Caller, check_session_owner
from baton.server.model.integrity import canonical_bytes
from baton.server.model.memory_models import ObserveInput, SessionEndInput, SessionStartInput
from baton.server.model.models import Observation, Observed, ResumeHere, Session, SessionEnded
from baton.server.model.validation import (
    MAX_PATH,
    check_depth,
    check_session_id,
    check_text,
)
from baton.server.retrieval.search import path_text
from baton.server.runtime import codec
from baton.server.stores.observations import (
    LIFECYCLE_HOOKS,
    compress,
    concepts_of,
    open_question,
)
from baton.server.stores.store_base import NamespaceParts, NamespaceStore

if TYPE_CHECKING:
    from baton.server.stores.memories import MemoryStore

DEDUPE_SECONDS = 300
# An event the caller names (``event_id``, e.g. a hook's kept call sent again) is stored once
# for this long: a spooled event may be delivered days after it happened.
EVENT_ID_SECONDS = 30 * 86_400
RECENT_SESSIONS = 20
DRAWN_FROM_LAST = 200  # the observations of a resumed session whose memories it recalls
STATUS_PREFERENCE = {"completed": 0, "abandoned": 1, "active": 2}
LIFECYCLE_LOOKBACK = 20  # observations looked at to tell a session that did no work


def normalise_cwd(cwd: object, field: str = "cwd") -> str:
    if not isinstance(cwd, str) or not cwd.strip():
        raise InvalidInput(field, "is required: the absolute working directory")
    check_text(cwd, field, MAX_PATH)
    if not os.path.isabs(cwd):
        raise InvalidInput(field, f"{cwd!r} is not an absolute path")
    return os.path.normpath(cwd)


def _started(meta: dict[bytes, bytes]) -> bool:
    """Whether a session hash is a started session's, not only a counter left behind (by
    earlier versions' forgetting observations of an unknown session)."""
    return b"agent" in meta and b"started_at" in meta


def within(cwd: str, project: str) -> bool:
    """Directory-boundary match: equal, below, or above — never a sibling with a shared
    prefix (``/repo-a`` does not match ``/repo-a-staging``)."""
    return (
        cwd == project
        or cwd.startswith(project.rstrip("/") + "/")
        or project.startswith(cwd.rstrip("/") + "/")
    )


def short(session_id: str) -> str:
    return session_id[:7]


def observation_document(
    session_id: str, observation_id: str, title: str, narrative: str, files: list[str]
) -> tuple[str, str]:
    """An observation's search document (its id and text)."""
    return f"o:{session_id}:{observation_id}", f"{title} {narrative} {path_text(files)}"


class SessionsParts(NamespaceParts, Protocol):
    """What the session store is given: the namespace's parts and its memory store."""

    @property
    def memories(self) -> MemoryStore: ...


class SessionStore(NamespaceStore):
    """Sessions and observations of one namespace."""

    ns: SessionsParts

    def __init__(self, namespace: SessionsParts) -> None:
        super().__init__(namespace)
        self.memories = namespace.memories

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self, given: SessionStartInput, *, caller: Caller) -> Session:
        """Start (or restart) a session; a fresh id is made when none is given. Restarting
        another agent's session is refused."""
        agent = caller.agent
        session_id = given.id or f"s_{secrets.token_hex(8)}"
        await check_session_owner(self.redis, self.keys, session_id, caller)
        fields: dict[FieldT, EncodableT] = {
            "status": "active",
            "agent": agent,
            "started_at": utc_now(),
        }
        if given.project is not None:
            fields["project"] = given.project.strip()
        if given.cwd is not None:
            fields["cwd"] = normalise_cwd(given.cwd)
        if given.title:
            fields["title"] = given.title.strip()[:200]
        await self.ns.admit()
        await self.activity.touch(session_id, agent, {}, listed=len(fields) > 3)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.session(session_id), mapping=fields)
        pipe.hdel(self.keys.session(session_id), "ended_at")
        await pipe.execute()
        return await self.get(session_id)

    async def end(self, given: SessionEndInput, *, caller: Caller) -> SessionEnded:
        """Mark a session completed (``ended: false`` for an unknown one); another agent's
        session is refused. Ending again updates the end time, summary, title and concepts:
        agentmemory's Stop hook ends the session after every turn."""
        session_id, summary = given.session_id, given.summary
        # Not a text check: hooks send what the agent printed, escapes included; refusing it
        # would lose the session's end. Its length is a setting.
        if summary is not None and len(summary) > self.limits.max_summary_length:
            raise InvalidInput(
                "summary", f"is longer than {self.limits.max_summary_length} characters"
            )
        await check_session_owner(self.redis, self.keys, session_id, caller)
        started = await self.redis.hmget(self.keys.session(session_id), "agent", "started_at")
        if None in started:
            return SessionEnded(ended=False, session=None)
        fields: dict[FieldT, EncodableT] = {"status": "completed", "ended_at": utc_now()}
        if summary:
            fields["summary"] = summary.strip()
        if given.title:
            fields["title"] = given.title.strip()[:200]
        fields["concepts"] = msgpack.packb(
            given.concepts if given.concepts else await self._concepts(session_id)
        )
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.session(session_id), mapping=fields)
        pipe.zrem(self.keys.active_sessions, session_id)
        await pipe.execute()
        return SessionEnded(ended=True, session=await self.get(session_id))

    async def _concepts(self, session_id: str) -> list[str]:
        """The session's concepts from its observations (no LLM, no guessing)."""
        return concepts_of(await self.observations(session_id))

    async def of_observations(self, observation_ids: Sequence[str]) -> list[Session]:
        """The sessions the observations named belong to (unknown ids are left out)."""
        if not observation_ids:
            return []
        named = await self.redis.hmget(self.keys.observation_sessions, list(observation_ids))
        found = {codec.text(session_id) for session_id in named if session_id is not None}
        return [await self.get(session_id) for session_id in sorted(found)]

    async def get(self, session_id: str) -> Session:
        session_id = check_session_id(session_id, field="sessionId")
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.session(session_id))
        pipe.hgetall(self.keys.session_touched(session_id))
        pipe.smembers(self.keys.session_files(session_id))
        meta, touched, files = await pipe.execute()
        if not _started(meta):
            raise NotFound(f"no session {session_id}", session=session_id)
        return codec.session(session_id, meta, touched, files)

    async def recent(self, limit: int = 20) -> list[Session]:
        """The most recently started sessions, newest first."""
        self.limits.check_page(limit)
        ids = [
            raw.decode()
            for raw in codec.members(await self.redis.zrevrange(self.keys.sessions, 0, limit - 1))
        ]
        pipe = self.redis.pipeline(transaction=False)
        for session_id in ids:
            pipe.hgetall(self.keys.session(session_id))
            pipe.hgetall(self.keys.session_touched(session_id))
            pipe.smembers(self.keys.session_files(session_id))
        replies = await pipe.execute()
        return [
            codec.session(session_id, *replies[3 * i : 3 * i + 3])
            for i, session_id in enumerate(ids)
            if _started(replies[3 * i])
        ]

    async def abandon_idle(self, idle_seconds: float) -> list[str]:
        """Active sessions without activity for ``idle_seconds`` become abandoned; any new
        activity reopens them."""
        cutoff = now_us() - int(idle_seconds * 1_000_000)
        due = [
            raw.decode()
            for raw in codec.members(
                await self.redis.zrangebyscore(self.keys.active_sessions, "-inf", cutoff)
            )
        ]
        abandoned = []
        for session_id in due:
            status = await self.redis.hget(self.keys.session(session_id), "status")
            if status == b"active":
                await self.redis.hset(self.keys.session(session_id), "status", "abandoned")
                abandoned.append(session_id)
            await self.redis.zrem(self.keys.active_sessions, session_id)
        return abandoned

    # -- observations -------------------------------------------------------------------------

    async def observe(self, given: ObserveInput, *, caller: Caller) -> Observed:
        """Store one hook event, compressed; the same event within 5 minutes is stored once,
        and an event named by ``event_id`` once within 30 days (so a kept call sent again is
        not stored twice, and two alike events with their own ids are both stored).
        Observing into another agent's session is refused; an empty or missing ``cwd`` is
        stored as unknown (``""``)."""
        hook_type, session_id, event_id = given.hook_type, given.session_id, given.event_id
        project, timestamp, agent = given.project, given.timestamp, caller.agent
        cwd = "" if given.cwd is None or not given.cwd.strip() else normalise_cwd(given.cwd)
        data = given.data if isinstance(given.data, dict) else {"value": given.data}
        check_depth(data, "data")
        await check_session_owner(self.redis, self.keys, session_id, caller)
        try:
            identity = (
                {"session": session_id, "event": event_id}
                if event_id is not None
                else {"session": session_id, "hook": hook_type, "data": data}
            )
            fingerprint = hashlib.sha256(canonical_bytes(identity)).hexdigest()
        except (TypeError, ValueError) as error:
            raise InvalidInput("data", f"must be JSON data ({error})") from None
        observation_id = f"o_{secrets.token_hex(6)}"
        kind, title, narrative, files = compress(hook_type, data)
        # Its search document is analysed before the event is claimed as seen (a long one
        # waits for the analysis process): the same event sent again meanwhile finds it
        # stored. A new document (its id is new) has no old terms to name.
        index = await self.ns.search.call(
            *observation_document(session_id, observation_id, title, narrative, files),
            kind="observation",
            project=project.strip(),
            agent=agent,
            added=timestamp,
        )
        first = await self.redis.set(
            self.keys.observation_seen(fingerprint),
            observation_id,
            nx=True,
            ex=DEDUPE_SECONDS if event_id is None else EVENT_ID_SECONDS,
        )
        if not first:
            seen = (await self.redis.get(self.keys.observation_seen(fingerprint))) or b""
            try:
                return Observed(
                    observation=await self.observation(session_id, codec.text(seen)),
                    deduplicated=True,
                )
            except NotFound:
                pass  # forgotten since: store it again
        observation = Observation(
            id=observation_id,
            session=session_id,
            agent=agent,
            project=project.strip(),
            cwd=cwd,
            hook_type=hook_type,
            type=kind,
            title=title,
            narrative=narrative,
            files=files,
            timestamp=timestamp,
            created_at=utc_now(),
        )
        await self.ns.admit()
        await self.ns.search.check_room()  # no token's: observations count no value bytes
        session_key = self.keys.session(session_id)
        batch = self.ns.batch()
        self.activity.queue_touch(batch, session_id, agent, {}, listed=True)
        pipe = batch.pipe
        pipe.hset(
            self.keys.observation(session_id, observation_id),
            mapping={
                "id": observation_id,
                "session": session_id,
                "agent": agent,
                "project": observation.project,
                "cwd": cwd,
                "hook_type": hook_type,
                "type": kind,
                "title": title,
                "narrative": narrative,
                "files": msgpack.packb(files),
                "timestamp": timestamp,
                "created_at": observation.created_at,
                "data": msgpack.packb(data),
            },
        )
        pipe.rpush(self.keys.observations(session_id), observation_id)
        pipe.hset(self.keys.observation_sessions, observation_id, session_id)
        pipe.hincrby(session_key, "observation_count", 1)
        pipe.hsetnx(session_key, "project", observation.project)
        if cwd:  # an event without a working directory leaves the session's unknown
            pipe.hsetnx(session_key, "cwd", cwd)
        if hook_type == "prompt_submit":
            pipe.hsetnx(session_key, "title", narrative[:200])
        if files:
            pipe.sadd(self.keys.session_files(session_id), *files)
        self.ns.search.queue(batch, index)
        self.activity.event(batch, "observe", agent, f"{agent}: {kind} {title}")
        await batch.execute()
        self.ns.count_written(index, 0, None)  # its terms (observations count no bytes)
        return Observed(observation=observation, deduplicated=False)

    async def observation(self, session_id: str, observation_id: str) -> Observation:
        fields = await self.redis.hgetall(self.keys.observation(session_id, observation_id))
        if not fields:
            raise NotFound(f"no observation {observation_id} in session {session_id}")
        return codec.observation(codec.hash_fields(fields))

    async def that_worked(self, sessions: list[Session]) -> list[Session]:
        """``sessions`` (in order) less those that did no work: nothing read or written, no
        summary, and observations that are all lifecycle events (a host starting and ending
        a session to check its servers, as `claude mcp list` does). A session with no
        observation at all stays (rule 6 answers it honestly); one with more than
        ``LIFECYCLE_LOOKBACK`` observations is taken as worked without looking."""
        unsure = [
            s
            for s in sessions
            if not (s.touched or s.summary or s.observation_count > LIFECYCLE_LOOKBACK)
        ]
        pipe = self.redis.pipeline(transaction=False)
        for session in unsure:
            pipe.lrange(self.keys.observations(session.id), 0, -1)
        listed = await pipe.execute() if unsure else []
        pipe = self.redis.pipeline(transaction=False)
        for session, ids in zip(unsure, listed, strict=True):
            for raw in ids:
                pipe.hget(self.keys.observation(session.id, codec.text(raw)), "hook_type")
        hooks = iter(await pipe.execute() if any(listed) else [])
        idle = set()
        for session, ids in zip(unsure, listed, strict=True):
            kinds = {codec.text(kind) for kind in (next(hooks) for _ in ids) if kind}
            if ids and kinds <= LIFECYCLE_HOOKS:
                idle.add(session.id)
        return [s for s in sessions if s.id not in idle]

    async def observations(self, session_id: str, last: int | None = None) -> list[Observation]:
        start = 0 if last is None else -last
        ids = await self.redis.lrange(self.keys.observations(session_id), start, -1)
        pipe = self.redis.pipeline(transaction=False)
        for raw in ids:
            pipe.hgetall(self.keys.observation(session_id, codec.text(raw)))
        return [codec.observation(fields) for fields in await pipe.execute() if fields]

    # -- where were we ------------------------------------------------------------------------

    async def resume_here(
        self, cwd: str, *, override: str | None = None, caller_session: str | None = None
    ) -> ResumeHere:
        """The "where were we" answer for a working directory (rules in docs/sessions.md)."""
        base = normalise_cwd(cwd)
        if override is not None:
            check_text(override, "override", MAX_PATH)
        project_path = os.path.normpath(os.path.join(base, override)) if override else base
        earlier = [s for s in await self.recent(RECENT_SESSIONS) if s.id != caller_session]
        candidates = await self.that_worked(earlier)
        matches = [s for s in candidates if s.cwd and within(s.cwd, project_path)]
        fallback = not matches
        pool = matches or candidates
        if not pool:
            text = (
                f"No earlier session is recorded for {project_path}. Nothing to hand off. "
                "Want to start fresh from the current state?"
            )
            return ResumeHere(
                project_path=project_path,
                found=False,
                fallback=False,
                empty=True,
                session=None,
                question=None,
                files=[],
                recalled=[],
                next_step="Start fresh from the current state.",
                text=text,
            )
        # Most recent first (recent() is newest first); the stable sort keeps that order
        # within each status: completed before abandoned before still active.
        session = sorted(pool, key=lambda s: STATUS_PREFERENCE.get(s.status, 3))[0]
        intro = (
            f"No session matched {project_path}; falling back to the most recent session overall.\n"
            if fallback
            else ""
        )
        if session.observation_count == 0:
            text = (
                f"{intro}The most recent session `{short(session.id)}` for this project has "
                "no recorded observations. Nothing to hand off. Want to start fresh from "
                "the current state?"
            )
            return ResumeHere(
                project_path=project_path,
                found=True,
                fallback=fallback,
                empty=True,
                session=session,
                question=None,
                files=[],
                recalled=[],
                next_step="Start fresh from the current state.",
                text=text,
            )

        recent = await self.observations(session.id, last=20)
        question = open_question(session, recent)
        files = list(
            dict.fromkeys([*session.files, *(f for o in reversed(recent) for f in o.files)])
        )[:10]
        recalled = await self.memories.drawn_from(
            [o.id for o in await self.observations(session.id, last=DRAWN_FROM_LAST)]
        )
        if session.concepts:
            found = await self.memories.recall(
                " ".join(session.concepts), limit=10, project=session.project
            )
            drawn = {hit.id for hit in recalled}
            recalled += [hit for hit in found.results if hit.id not in drawn]
        next_step = self._next_step(session, question, recent, files)
        title = session.title or (recent[0].narrative[:60] if recent else session.id)
        lines = [f'{intro}Resuming {short(session.id)} "{title}".']
        if question:
            lines.append(f"Open question: {question}")
        if session.summary and session.summary != question:
            lines.append(f"Summary: {session.summary}")
        if files:
            lines.append("Touched: " + ", ".join(files))
        decisions = [hit for hit in recalled if hit.kind == "memory" or hit.type == "command_run"]
        if decisions:
            lines.append("Decisions and errors: " + "; ".join(hit.title for hit in decisions[:5]))
        lines.append(f"Next step: {next_step}")
        return ResumeHere(
            project_path=project_path,
            found=True,
            fallback=fallback,
            empty=False,
            session=session,
            question=question,
            files=files,
            recalled=recalled,
            next_step=next_step,
            text="\n".join(lines),
        )

    @staticmethod
    def _next_step(
        session: Session, question: str | None, recent: list[Observation], files: list[str]
    ) -> str:
        if question:
            return f"Get an answer to: {question}"
        failures = [o for o in recent if o.hook_type == "post_tool_failure"]
        if failures:
            return f"Fix what failed last: {failures[-1].title} ({failures[-1].narrative[:80]})"
        if files:
            return f"Open {files[0]} and continue {session.title or 'where the session stopped'}."
        return f"Continue {session.title or 'the session'}."
