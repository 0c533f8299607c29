"""What each thing a namespace stores is indexed as: its search document. One definition,
used by the import and by ``baton reindex`` to index what is stored as its write did."""

from __future__ import annotations

from typing import Any, NamedTuple

from baton.server.model.models import Observation
from baton.server.stores.memories import memory_document
from baton.server.stores.records import UNINDEXED_SCOPE, fact_document
from baton.server.stores.sessions import observation_document


class IndexDocument(NamedTuple):
    """One search document: id, text and the fields search filters and ranks by."""

    doc: str
    text: str
    kind: str
    project: str | None
    agent: str | None
    added: str

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of ``SearchIndex.call`` beside the id and text."""
        return {
            "kind": self.kind,
            "project": self.project,
            "agent": self.agent,
            "added": self.added,
        }


def record_document(
    ref: str, value: Any, tags: list[str], author: str, created_at: str
) -> IndexDocument | None:
    """The search document of a record's current version (as stored, never a tombstone):
    a fact, or a saved memory under ``memory/``; None for a memory another has superseded
    (taken out of the index when it was)."""
    fact = fact_document(ref, value, tags)
    if fact is not None:
        return IndexDocument(*fact, kind="fact", project=None, agent=author, added=created_at)
    if value.get("superseded_by"):
        return None
    doc, text = memory_document(ref.removeprefix(UNINDEXED_SCOPE), value)
    added = value.get("created_at", created_at)
    return IndexDocument(doc, text, "memory", value["project"], value["agent_id"], added)


def observed_document(observation: Observation) -> IndexDocument:
    """The search document of an observation."""
    doc, text = observation_document(
        observation.session,
        observation.id,
        observation.title,
        observation.narrative,
        observation.files,
    )
    return IndexDocument(
        doc, text, "observation", observation.project, observation.agent, observation.timestamp
    )
