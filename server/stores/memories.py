"""Saved memories, search over memories and observations, forgetting with an audit trail.

A memory is a versioned record ``memory/<id>`` in the fact store, so history and the hash
chain cover memories too. Saving near-duplicate content (Jaccard > 0.7 with a memory found
by BM25) appends a version to that memory's record instead of creating a new one.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from typing import Any

import msgpack
import msgspec

from baton.server.model.clock import iso, now_us, utc_now
from baton.server.model.errors import (
    InvalidInput,
    NotFound,
    StateConflict,
    StoreUnavailable,
    VersionConflict,
)
from baton.server.model.identity import Caller, check_session_owner, sweeper
from baton.server.model.keys import NAMESPACES
from baton.server.model.memory_models import (
    Consolidation,
    Forgotten,
    Format,
    Memory,
    MemorySaved,
    Merge,
    Recall,
    SimilarTo,
    split_list,
)
from baton.server.model.models import MAX_NOTE, Observation, RecallHit, RecordVersion
from baton.server.model.validation import (
    ANONYMOUS,
    check_agent,
    check_session_id,
    check_size,
    check_text,
)
from baton.server.retrieval import lexical
from baton.server.retrieval.search import path_text, text_of
from baton.server.runtime import codec
from baton.server.stores.audit import FORGET
from baton.server.stores.changes import Command, Plan, Planned
from baton.server.stores.observations import concepts_of
from baton.server.stores.records import NamespaceWithRecords
from baton.server.stores.store_base import NamespaceStore

MEMORY_TYPES = ("pattern", "preference", "architecture", "bug", "workflow", "fact")
SUPERSEDE_ABOVE = 0.7
SIMILAR_ABOVE = 0.4
CASCADE_CONCEPTS = 2  # concepts a memory shares with a superseded one to be flagged
CANDIDATES = 50
MAX_CONTENT = 64 * 1024
SCRUB_MIN_QUOTE = 8  # characters of a forgotten observation that count as a quote of it
MAX_EXPAND = 100  # ids expanded in one smart search
MAX_TAGS = 200  # concepts or files of one memory


def jaccard(left: str, right: str) -> float:
    """How alike two texts are: the Jaccard similarity of their term sets (the lexical
    layer's terms, as search sees them)."""
    return similarity(frozenset(lexical.terms(left)), frozenset(lexical.terms(right)))


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """The Jaccard similarity of two term sets (:func:`jaccard`, terms read once)."""
    return len(a & b) / len(a | b) if a and b else 0.0


def tokens_of(text: str) -> int:
    """A model-free token estimate: about four characters a token."""
    return max(1, math.ceil(len(text) / 4))


def memory_ref(memory_id: str) -> str:
    return f"memory/{memory_id}"


def memory_document(memory_id: str, memory: dict[str, Any]) -> tuple[str, str]:
    """A saved memory's search document (its id and text), from its stored value."""
    words = [memory["content"], memory["title"], *memory["concepts"], path_text(memory["files"])]
    return f"m:{memory_id}", " ".join(words)


class MemoryStore(NamespaceStore):
    """Memories, search and forgetting in one namespace."""

    ns: NamespaceWithRecords

    def __init__(self, namespace: NamespaceWithRecords) -> None:
        super().__init__(namespace)
        self.records = namespace.records
        self.index = namespace.search

    # -- saving -------------------------------------------------------------------------------

    async def save(
        self,
        content: str,
        *,
        type: str | None = None,
        concepts: str | Sequence[str] | None = None,
        files: str | Sequence[str] | None = None,
        project: str | None = None,
        agent_id: str | None = None,
        ttl_days: float | None = None,
        source_observation_ids: Sequence[str] = (),
        supersedes_unscoped: bool = True,
    ) -> MemorySaved:
        """Save a memory, superseding a near-duplicate (Jaccard > 0.7) or hinting at a
        similar one (> 0.4); without ``agent_id`` it is shared. Empty content is
        ``success: false``, not an exception. ``source_observation_ids`` are kept as given:
        the observations it was drawn from. Without ``supersedes_unscoped`` (a caller whose
        grants do not let it change memories of no project) those are only hinted at."""
        if not content.strip():
            return MemorySaved(success=False, error="content is required")
        if len(content) > MAX_CONTENT:
            raise InvalidInput("content", f"is longer than {MAX_CONTENT} characters")
        kind = type if type in MEMORY_TYPES else "fact"
        concept_list = split_list(concepts, "concepts")
        file_list = split_list(files, "files")
        check_size(concept_list, "concepts", MAX_TAGS)
        check_size(file_list, "files", MAX_TAGS)
        sources = list(dict.fromkeys(source_observation_ids))
        check_size(sources, "source_observation_ids", MAX_TAGS)
        project = project.strip() or None if isinstance(project, str) else None
        agent = check_agent(agent_id, field="agent_id") if agent_id else None

        fields = {
            "content": content,
            "type": kind,
            "title": content.strip().splitlines()[0][:80],
            "concepts": concept_list,
            "files": file_list,
            "project": project,
            "agent_id": agent,
            "source_observation_ids": sources,
        }
        superseded, similar = await self._closest(content, project, agent, supersedes_unscoped)
        return await self._save(fields, ttl_days, superseded, similar)

    async def _save(
        self,
        fields: dict[str, Any],
        ttl_days: float | None,
        superseded: Memory | None,
        similar: SimilarTo | None,
    ) -> MemorySaved:
        """The save as one change (:meth:`RecordStore.write_all`): the memory with its search
        document, the one it supersedes marked and out of search, its links, expiry and the
        cascade's audit entry."""
        memory_id = f"mem_{secrets.token_hex(6)}"
        agent: str | None = fields["agent_id"]
        supersedes = [superseded.id] if superseded else []
        value = {
            **fields,
            "version": superseded.version + 1 if superseded else 1,
            "supersedes": supersedes,
        }
        await self.records.check_quotas([memory_ref(each) for each in [memory_id, *supersedes]])
        created_at = utc_now()
        document = await self.index.call(
            *memory_document(memory_id, value),
            kind="memory",
            project=fields["project"],
            agent=agent,
            added=created_at,
        )

        def new(record: RecordVersion | None) -> Planned:
            if record is not None:  # 48 random bits taken: practically never
                raise StoreUnavailable(f"memory id {memory_id} is taken; save again")
            return Planned(memory_ref(memory_id), value, agent or ANONYMOUS, ["memory"], document)

        plans: list[tuple[str, Plan]] = [(memory_ref(memory_id), new)]
        then = [
            Command("SADD", self.keys.observation_memories(source), (memory_id,))
            for source in fields["source_observation_ids"]
        ]
        expires_at = None
        if ttl_days is not None:
            expires_us = now_us() + int(ttl_days * 86_400_000_000)
            then.append(Command("ZADD", self.keys.memory_expiry, (expires_us, memory_id)))
            then.append(Command("SADD", NAMESPACES, (self.ns.name,)))  # the sweep visits it
            expires_at = iso(expires_us)
        if superseded is not None:
            plans.append(await self._superseding(superseded.id, memory_id, agent))
            then += await self._cascade(superseded, memory_id, agent)
        [written, *_] = await self.records.write_all(plans, then, created_at=created_at)
        memory = Memory(
            id=memory_id,
            created_at=written.created_at,
            parent_id=superseded.id if superseded else None,
            expires_at=expires_at,
            **value,
        )
        return MemorySaved(success=True, memory=memory, similar_to=None if superseded else similar)

    async def update(
        self,
        memory_id: str,
        *,
        caller: Caller,
        content: str | None = None,
        type: str | None = None,
        concepts: str | Sequence[str] | None = None,
        files: str | Sequence[str] | None = None,
        reason: str = "updated on request",
    ) -> Memory:
        """A new version of a memory, same id: the fields given replace the current ones,
        the record's chain keeps every version (never an overwrite), the search document
        follows, and the change is audited. Only the latest of a supersede chain is updated;
        another agent's memory is refused (a shared one is anyone's)."""
        record = await self.records.recall(memory_ref(memory_id))
        current = _memory(memory_id, record)
        if current is None or memory_id in await self._expired([memory_id]):
            raise NotFound(f"no memory {memory_id}", memory=memory_id)
        caller.require_owner(current.agent_id, f"memory {memory_id}")
        if not current.is_latest:
            raise StateConflict(
                f"memory {memory_id} was superseded by {current.superseded_by}; update that one",
                memory=memory_id,
                superseded_by=current.superseded_by,
            )
        changes: dict[str, Any] = {}
        if content is not None:
            if not content.strip():
                raise InvalidInput("content", "content must not be empty")
            if len(content) > MAX_CONTENT:
                raise InvalidInput("content", f"is longer than {MAX_CONTENT} characters")
            changes |= {"content": content, "title": content.strip().splitlines()[0][:80]}
        if type is not None:
            changes["type"] = type if type in MEMORY_TYPES else "fact"
        for name, given in (("concepts", concepts), ("files", files)):
            if given is not None:
                changes[name] = split_list(given, name)
                check_size(changes[name], name, MAX_TAGS)
        if not changes:
            raise InvalidInput("content", "give content, type, concepts or files to change")
        await self.records.check_quotas([memory_ref(memory_id)])
        doc = f"m:{memory_id}"
        await self.index.prepare([doc])
        added = record.value.get("created_at", current.created_at)
        document = await self.index.call(
            *memory_document(memory_id, {**record.value, **changes}),
            kind="memory",
            project=current.project,
            agent=current.agent_id,
            added=added,
        )

        def updated(found: RecordVersion | None) -> Planned:
            if found is None or found.forgotten is not None:
                raise NotFound(f"no memory {memory_id}", memory=memory_id)
            if found.version != record.version:
                raise VersionConflict(
                    f"memory {memory_id} changed meanwhile; nothing was written",
                    memory=memory_id,
                )
            value = {**found.value, **changes, "version": current.version + 1, "created_at": added}
            return Planned(memory_ref(memory_id), value, caller.agent, ["memory"], document)

        audit = self.ns.audit.entry(
            caller.agent, "update", memory_id, reason, {"fields": sorted(changes)}
        )
        await self.records.write_all([(memory_ref(memory_id), updated)], [audit])
        return await self.get(memory_id)

    async def latest(self) -> list[Memory]:
        """Every current memory that is the latest of its chain, oldest first."""
        found: list[Memory] = []
        cursor = None
        while True:
            page = await self.records.list_records(
                scope="memory", limit=self.limits.max_page_size, cursor=cursor
            )
            ids = [record.ref.split("/", 1)[1] for record in page.records]
            found += [m for m in (await self.get_many(ids)).values() if m.is_latest]
            if page.next_cursor is None:
                return sorted(found, key=lambda memory: (memory.created_at, memory.id))
            cursor = page.next_cursor

    async def consolidate(
        self, *, caller: Caller, project: str | None = None, apply: bool = False
    ) -> Consolidation:
        """Merge near-duplicates that dedupe at save time did not catch (saved before the
        other, by another agent, or beyond its 50 candidates): latest memories of one project
        and one owner whose Jaccard similarity is over 0.7 are superseded by the newest of
        them, as a save supersedes. Without ``apply`` nothing changes: the plan is
        answered. Only memories the caller may change are considered; each merge is
        audited."""
        candidates = [
            memory
            for memory in await self.latest()
            if (project is None or memory.project == project)
            and (caller.admin or memory.agent_id in (None, caller.agent))
        ]
        terms = {m.id: await self.index.analyzer.term_set(m.content) for m in candidates}
        taken: set[str] = set()
        merges: list[Merge] = []
        for kept in reversed(candidates):  # newest first: each group keeps its newest
            if kept.id in taken:
                continue
            group = [
                (other, similarity(terms[kept.id], terms[other.id]))
                for other in candidates
                if other.id != kept.id
                and other.id not in taken
                and other.created_at <= kept.created_at
                and (other.project, other.agent_id) == (kept.project, kept.agent_id)
            ]
            group = [(other, score) for other, score in group if score > SUPERSEDE_ABOVE]
            if not group:
                continue
            taken |= {kept.id, *(other.id for other, _ in group)}
            merges.append(
                Merge(
                    kept=kept.id,
                    merged=[other.id for other, _ in group],
                    similarity=round(min(score for _, score in group), 2),
                )
            )
        if apply and merges:
            touched = [each for merge in merges for each in (merge.kept, *merge.merged)]
            await self.records.check_quotas([memory_ref(each) for each in touched])
            for merge in merges:
                plans = [(memory_ref(merge.kept), self._keeping(merge, caller.agent))]
                for merged_id in merge.merged:
                    plans.append(await self._superseding(merged_id, merge.kept, caller.agent))
                audit = self.ns.audit.entry(
                    caller.agent,
                    "consolidate",
                    merge.kept,
                    "near-duplicates merged",
                    {"merged": merge.merged, "similarity": merge.similarity},
                )
                await self.records.write_all(plans, [audit])
        return Consolidation(dry_run=not apply, merges=merges, scanned=len(candidates))

    async def _cascade(self, old: Memory, new_id: str, agent: str | None) -> list[Command]:
        """agentmemory's ``mem::cascade-update`` after a supersede: the latest memories sharing
        at least two concepts with the superseded one may rest on what it said; they are
        flagged for review in the audit log (``cascade``; the entry, for the save's change),
        left as they are. Candidates are the best matches of its concepts in the search index
        (as dedupe's are), so a save never reads every memory."""
        concepts = {concept.lower() for concept in old.concepts}
        if len(concepts) < CASCADE_CONCEPTS:
            return []
        hits = await self.index.search(
            " ".join(sorted(concepts)), limit=CANDIDATES, kinds=("memory",)
        )
        found = await self.get_many([hit.doc.removeprefix("m:") for hit in hits])
        siblings = [
            memory.id
            for memory in sorted(found.values(), key=lambda m: (m.created_at, m.id))
            if memory.id not in (old.id, new_id)
            and memory.is_latest
            and len(concepts & {c.lower() for c in memory.concepts}) >= CASCADE_CONCEPTS
        ]
        if not siblings:
            return []
        return [
            self.ns.audit.entry(
                agent or ANONYMOUS,
                "cascade",
                old.id,
                f"superseded by {new_id}: memories sharing its concepts may need review",
                {"superseded_by": new_id, "siblings": siblings},
            )
        ]

    async def _superseding(self, old_id: str, new_id: str, agent: str | None) -> tuple[str, Plan]:
        """The plan that marks memory ``old_id`` superseded by ``new_id``: a new version of its
        record (the chain keeps every content) that points at its successor, out of the
        search index, in the same change as the successor. A memory another save superseded
        or forgot meanwhile is left as it is (the successors both stay latest)."""
        doc = f"m:{old_id}"
        await self.index.prepare([doc])
        removal = await self.index.call(doc, None)

        def superseded(record: RecordVersion | None) -> Planned | None:
            if record is None or record.forgotten is not None:
                return None  # forgotten meanwhile: nothing left to supersede
            if "superseded_by" in record.value:
                return None  # superseded meanwhile by another save
            value = {**record.value, "superseded_by": new_id}
            return Planned(memory_ref(old_id), value, agent or ANONYMOUS, ["memory"], removal)

        return memory_ref(old_id), superseded

    def _keeping(self, merge: Merge, agent: str) -> Plan:
        """The plan that adds a consolidation's merged memories to the kept one's
        ``supersedes``."""

        def kept(record: RecordVersion | None) -> Planned:
            if record is None or record.forgotten is not None:
                raise NotFound(f"no memory {merge.kept}", memory=merge.kept)
            supersedes = [*record.value.get("supersedes", []), *merge.merged]
            value = {**record.value, "supersedes": supersedes}
            return Planned(memory_ref(merge.kept), value, agent, ["memory"])

        return kept

    async def _closest(
        self, content: str, project: str | None, agent: str | None, unscoped: bool = True
    ) -> tuple[Memory | None, SimilarTo | None]:
        """The memory to supersede (first candidate over 0.7, in rank order) and the best
        candidate over 0.4 as a hint. A memory of a project is only ever matched by a save in
        that same project (it never leaves its project); an unscoped memory matches any save.
        Only a memory ``agent`` may change (its own, or a shared one) is superseded; another
        agent's near-copy is only a hint."""
        hits = await self.index.search(content, limit=CANDIDATES, kinds=["memory"])
        hits = [hit for hit in hits if not (hit.project and hit.project != project)]
        memories = await self.get_many([hit.doc.removeprefix("m:") for hit in hits])
        mine = await self.index.analyzer.term_set(content)
        best: SimilarTo | None = None
        for hit in hits:
            memory = memories.get(hit.doc.removeprefix("m:"))
            if memory is None or not memory.is_latest:
                continue
            alike = similarity(mine, await self.index.analyzer.term_set(memory.content))
            changeable = memory.agent_id in (None, agent) and (unscoped or memory.project)
            if alike > SUPERSEDE_ABOVE and changeable:
                return memory, None
            if alike > SIMILAR_ABOVE and (best is None or alike > best.similarity):
                best = SimilarTo(id=memory.id, title=memory.title, similarity=round(alike, 2))
        return None, best

    async def get(self, memory_id: str, version: int | None = None) -> Memory:
        record = await self.records.recall(memory_ref(memory_id), version=version)
        memory = _memory(memory_id, record)
        if memory is None or memory_id in await self._expired([memory_id]):
            raise NotFound(f"no memory {memory_id}", memory=memory_id)
        return memory

    async def get_many(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """Current memories by id; forgotten, expired or unknown ids are left out."""
        records = await self.records.read_versions([(memory_ref(i), None) for i in memory_ids])
        expired = await self._expired(memory_ids)
        found = {}
        for memory_id, record in zip(memory_ids, records, strict=True):
            memory = None if record is None else _memory(memory_id, record)
            if memory is not None and memory_id not in expired:
                found[memory_id] = memory
        return found

    async def _expired(self, memory_ids: Sequence[str]) -> set[str]:
        """Which of ``memory_ids`` passed their ttl: reads never return them, whether or not
        a sweep has forgotten them yet."""
        if not memory_ids:
            return set()
        scores = await self.redis.zmscore(self.keys.memory_expiry, list(memory_ids))
        moment = now_us()
        return {
            memory_id
            for memory_id, score in zip(memory_ids, scores, strict=True)
            if score is not None and score <= moment
        }

    # -- searching ----------------------------------------------------------------------------

    async def recall(
        self,
        query: str,
        *,
        limit: int = 10,
        format: Format = "full",
        token_budget: int | None = None,
        project: str | None = None,
        agent_id: str | None = None,
        kinds: Sequence[str] = ("memory", "observation"),
    ) -> Recall:
        """BM25 search over memories and observations. With ``token_budget`` the results are
        filled greedily, best first, until the next would not fit."""
        if not query.strip():
            raise InvalidInput("query", "query is required and must be a non-empty string")
        project = project.strip() or None if isinstance(project, str) else None
        found = await self.index.search(
            query, limit=limit, kinds=kinds, project=project, agent=agent_id
        )
        hits = await self.hits([hit.doc for hit in found], {hit.doc: hit.score for hit in found})
        results, used, truncated = [], 0, False
        for hit in hits:
            shown = hit if format == "full" else msgspec.structs.replace(hit, text=hit.title)
            cost = tokens_of(shown.text if format != "compact" else shown.title)
            if token_budget is not None and used + cost > token_budget:
                truncated = True
                break
            results.append(shown)
            used += cost
        narrative = None
        if format == "narrative":
            narrative = "\n".join(
                f"- [{hit.kind}] {hit.title}: {hit.text}" for hit in hits[: len(results)]
            )
        return Recall(
            results=results,
            count=len(results),
            tokens_used=used,
            truncated=truncated,
            narrative=narrative,
        )

    async def hits(
        self, docs: Sequence[str], scores: dict[str, float] | None = None
    ) -> list[RecallHit]:
        """Full hits for index doc ids (``m:<id>`` or ``o:<session>:<id>``), in order, in two
        round trips whatever their number."""
        scores = scores or {}
        memories = await self.get_many([doc[2:] for doc in docs if doc.startswith("m:")])
        observed = [doc[2:].rpartition(":") for doc in docs if doc.startswith("o:")]
        pipe = self.redis.pipeline(transaction=False)
        for session_id, _, observation_id in observed:
            pipe.hgetall(self.keys.observation(session_id, observation_id))
        observations = {
            f"o:{session_id}:{observation_id}": fields
            for (session_id, _, observation_id), fields in zip(
                observed, await pipe.execute(), strict=True
            )
            if fields
        }
        hits: list[RecallHit] = []
        for doc in docs:
            if (memory := memories.get(doc[2:])) is not None and doc.startswith("m:"):
                hits.append(
                    RecallHit(
                        id=memory.id,
                        kind="memory",
                        score=scores.get(doc, 0.0),
                        title=memory.title,
                        text=memory.content,
                        project=memory.project,
                        type=memory.type,
                        created_at=memory.created_at,
                        version=memory.version,
                        concepts=memory.concepts,
                        files=memory.files,
                    )
                )
            elif (fields := observations.get(doc)) is not None:
                seen = codec.observation(fields)
                hits.append(
                    RecallHit(
                        id=seen.id,
                        kind="observation",
                        score=scores.get(doc, 0.0),
                        title=seen.title,
                        text=seen.narrative,
                        project=seen.project,
                        session=seen.session,
                        type=seen.type,
                        created_at=seen.created_at,
                        files=seen.files,
                    )
                )
        return hits

    async def smart_search(
        self,
        *,
        query: str | None = None,
        expand_ids: Sequence[str] | None = None,
        limit: int = 10,
        project: str | None = None,
    ) -> Recall:
        """Compact hits for ``query``; or, with ``expand_ids``, those memories and
        observations in full."""
        check_size(expand_ids, "expandIds", MAX_EXPAND)
        if expand_ids is not None and not expand_ids and not query:
            raise InvalidInput("expandIds", "names no ids; give ids to expand, or a query")
        if expand_ids:
            docs = []
            for item in expand_ids:
                if item.startswith("mem_"):
                    docs.append(f"m:{item}")
                else:
                    docs += await self._observation_docs(item)
            hits = await self.hits(docs)
            return Recall(
                results=hits,
                count=len(hits),
                tokens_used=sum(tokens_of(h.text) for h in hits),
                truncated=False,
            )
        return await self.recall(query or "", limit=limit, format="compact", project=project)

    async def drawn_from(self, observation_ids: Sequence[str]) -> list[RecallHit]:
        """The current memories drawn from these observations (``sourceObservationIds``), as
        hits, newest first."""
        if not observation_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for observation_id in observation_ids:
            pipe.smembers(self.keys.observation_memories(observation_id))
        ids = sorted({codec.text(raw) for found in await pipe.execute() for raw in found})
        kept = await self.get_many(ids)
        newest = sorted(kept.values(), key=lambda memory: memory.created_at, reverse=True)
        return await self.hits([f"m:{memory.id}" for memory in newest if memory.is_latest])

    async def observations_named(self, observation_ids: Sequence[str]) -> list[RecallHit]:
        """The observations with these ids (unknown or forgotten ones left out), as hits."""
        docs = [doc for item in observation_ids for doc in await self._observation_docs(item)]
        return await self.hits(docs) if docs else []

    async def _observation_docs(self, observation_id: str) -> list[str]:
        session_id = await self.redis.hget(self.keys.observation_sessions, observation_id)
        return [] if session_id is None else [f"o:{codec.text(session_id)}:{observation_id}"]

    # -- forgetting ---------------------------------------------------------------------------

    async def forget(
        self,
        *,
        caller: Caller,
        memory_id: str | None = None,
        session_id: str | None = None,
        observation_ids: Sequence[str] | None = None,
        reason: str = "forgotten on request",
    ) -> Forgotten:
        """Forget a memory, some observations of a session, or a whole session (a session
        named with neither observation ids nor a memory, as agentmemory does). What is
        forgotten leaves the search index and the live views; each act is audited. Another
        agent's memory or session is refused (a memory saved without an agent is shared); an
        unknown session is refused before anything is forgotten."""
        if not memory_id and not session_id:
            raise InvalidInput("memoryId", "sessionId or memoryId is required")
        check_size(observation_ids, "observationIds")
        check_text(reason, "reason", MAX_NOTE)
        agent = caller.agent
        if memory_id and not caller.admin:
            caller.require_owner((await self.get(memory_id)).agent_id, f"memory {memory_id}")
        if memory_id and not observation_ids:
            session_id = None  # a memory and a session: the memory alone, never the session
        if session_id:
            session_id = check_session_id(session_id, field="sessionId")
            await check_session_owner(self.redis, self.keys, session_id, caller)
            if not await self.redis.exists(self.keys.session(session_id)):
                raise NotFound(f"no session {session_id}", session=session_id)
        self.ns.audit.can_seal()  # before anything is forgotten
        result = Forgotten(success=True, memories=[], observations=0, sessions=[], audit_ids=[])
        if memory_id:
            replies = await self.records.forget(
                memory_ref(memory_id),
                agent=agent,
                reason=reason,
                then=[
                    Command("ZREM", self.keys.memory_expiry, (memory_id,)),
                    self.ns.audit.entry(agent, FORGET, memory_ref(memory_id), reason),
                ],
            )
            result.memories.append(memory_id)
            result.audit_ids.append(codec.text(replies[-1]))
        if session_id:
            await self._forget_in_session(result, agent, session_id, observation_ids, reason)
        return result

    async def _forget_in_session(
        self,
        result: Forgotten,
        agent: str,
        session_id: str,
        observation_ids: Sequence[str] | None,
        reason: str,
    ) -> None:
        """Forget some observations of a session (those it holds: the count says how many),
        or, with none named, the whole session; an unknown session is refused. Search
        documents go first: an interrupted forget leaves data a retry finds, never an index
        entry pointing at nothing."""
        ids = list(observation_ids or [])
        if not ids:
            await self._forget_session(result, agent, session_id, reason)
            return
        await self.index.remove([f"o:{session_id}:{oid}" for oid in ids])
        forgotten = await self._read_observations(session_id, ids)
        deleted = await self.scripts.forget_observations(
            keys=[
                self.keys.session(session_id),
                self.keys.observations(session_id),
                *(self.keys.observation(session_id, each) for each in ids),
            ],
            args=ids,
        )
        if deleted == -1:
            raise NotFound(f"no session {session_id}", session=session_id)
        ids = [codec.text(raw) for raw in deleted]
        if forgotten:
            await self._scrub(session_id, [o for o in forgotten if o.id in ids])
        result.observations = len(ids)
        if ids:
            await self.redis.hdel(self.keys.observation_sessions, *ids)
            entry = self.ns.audit.entry(
                agent, FORGET, f"session/{session_id}/observations", reason, {"observations": ids}
            )
            result.audit_ids.append(await self.ns.audit.append(entry))

    async def _forget_session(
        self, result: Forgotten, agent: str, session_id: str, reason: str
    ) -> None:
        """Forget a whole session: its observations' search documents, the observations, the
        session and its listings, and the sealed audit entry, in one MULTI/EXEC on one Redis
        (on a cluster in stages, the search documents first: an interrupted forget leaves
        data a retry finds, never an index entry pointing at nothing)."""
        ids = [
            codec.text(raw)
            for raw in await self.redis.lrange(self.keys.observations(session_id), 0, -1)
        ]
        docs = [f"o:{session_id}:{oid}" for oid in ids]
        await self.index.prepare(docs)
        calls = [await self.index.call(doc, None) for doc in docs]
        batch = self.ns.batch(transaction=self.ns.topology.transactions)
        for call in calls:
            self.index.queue(batch, call)
        for oid in ids:
            batch.pipe.delete(
                self.keys.observation(session_id, oid), self.keys.observation_memories(oid)
            )
        batch.pipe.delete(
            self.keys.session(session_id),
            self.keys.session_touched(session_id),
            self.keys.session_seen(session_id),
            self.keys.session_notices(session_id),
            self.keys.observations(session_id),
            self.keys.session_files(session_id),
        )
        batch.pipe.zrem(self.keys.sessions, session_id)
        batch.pipe.zrem(self.keys.active_sessions, session_id)
        if ids:
            batch.pipe.hdel(self.keys.observation_sessions, *ids)
        entry = self.ns.audit.entry(
            agent, FORGET, f"session/{session_id}", reason, {"observations": ids}
        )
        batch.pipe.execute_command(entry.name, entry.key, *entry.args)
        replies = await batch.execute()
        await self.index.settle(calls, replies[: len(calls)])
        result.sessions.append(session_id)
        result.observations = len(ids)
        result.audit_ids.append(codec.text(replies[-1]))

    async def _read_observations(self, session_id: str, ids: Sequence[str]) -> list[Observation]:
        pipe = self.redis.pipeline(transaction=False)
        for observation_id in ids:
            pipe.hgetall(self.keys.observation(session_id, observation_id))
        return [codec.observation(fields) for fields in await pipe.execute() if fields]

    async def _scrub(self, session_id: str, forgotten: list[Observation]) -> None:
        """Remove what a session derived from forgotten observations: its title and summary
        when they quote one, its file list and concepts (recomputed from what is left)."""
        ids = [
            codec.text(raw)
            for raw in await self.redis.lrange(self.keys.observations(session_id), 0, -1)
        ]
        left = await self._read_observations(session_id, ids)
        meta = await self.redis.hmget(self.keys.session(session_id), "title", "summary")
        quoted = [o.narrative for o in forgotten if len(o.narrative) >= SCRUB_MIN_QUOTE]
        pipe = self.redis.pipeline(transaction=True)
        for field, raw in zip(("title", "summary"), meta, strict=True):
            text = codec.text(raw) if raw else ""
            if text and any(q in text or text in q for q in quoted):
                pipe.hdel(self.keys.session(session_id), field)
        prompts = [o.narrative for o in left if o.hook_type == "prompt_submit"]
        if meta[0] and prompts:
            pipe.hsetnx(self.keys.session(session_id), "title", prompts[0][:200])
        files = list(dict.fromkeys(path for o in left for path in o.files))
        pipe.delete(self.keys.session_files(session_id))
        if files:
            pipe.sadd(self.keys.session_files(session_id), *files)
        pipe.hset(self.keys.session(session_id), "concepts", msgpack.packb(concepts_of(left)))
        await pipe.execute()

    async def expire(self) -> list[str]:
        """Forget memories whose ttl_days ran out, auditing each."""
        moment = now_us()
        due = [
            raw.decode()
            for raw in codec.members(
                await self.redis.zrangebyscore(self.keys.memory_expiry, "-inf", moment)
            )
        ]
        for memory_id in due:
            try:
                await self.forget(
                    caller=sweeper(self.ns.name), memory_id=memory_id, reason="ttl expired"
                )
            except NotFound:
                await self.redis.zrem(self.keys.memory_expiry, memory_id)
        return due


def _memory(memory_id: str, record: RecordVersion) -> Memory | None:
    value = record.value
    if record.forgotten is not None or not isinstance(value, dict) or "content" not in value:
        return None
    supersedes = value.get("supersedes")
    supersedes = supersedes if isinstance(supersedes, list) else []
    return Memory(
        id=memory_id,
        version=value.get("version", record.version),
        type=value["type"],
        title=value["title"],
        content=value["content"],
        concepts=value["concepts"],
        files=value["files"],
        project=value["project"],
        agent_id=value["agent_id"],
        created_at=value.get("created_at", record.created_at),
        updated_at=record.created_at if "created_at" in value else None,
        parent_id=supersedes[0] if supersedes else None,
        supersedes=supersedes,
        is_latest="superseded_by" not in value,
        superseded_by=value.get("superseded_by"),
        source_observation_ids=value.get("source_observation_ids", []),
    )


__all__ = ["MemoryStore", "text_of"]
