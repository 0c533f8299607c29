"""Recurring patterns across sessions, computed from their observations (no LLM): files
changed together, files and concepts that keep coming back, and errors that repeat.

agentmemory's ``mem::patterns`` reports the first and last kind (``co_change`` for a pair of
files in 3 sessions or more, ``error_repeat`` for an error seen twice); Baton adds
``file_hotspot`` and ``concept_repeat`` (3 sessions or more) and, for each pattern, when it
was first and last seen.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from typing import Literal

import msgspec

from baton.server.model.models import Observation, Session

SESSIONS_READ = 200  # the most recent sessions a detection reads
PATTERNS_SHOWN = 20
CO_CHANGE_SESSIONS = 3  # agentmemory's thresholds
ERROR_REPEATS = 2
HOTSPOT_SESSIONS = 3
CONCEPT_SESSIONS = 3
SIGNATURE_LENGTH = 80
DIGITS = re.compile(r"\d+")
FAILED = "failed: "

PatternType = Literal["co_change", "error_repeat", "file_hotspot", "concept_repeat"]


class Pattern(msgspec.Struct, kw_only=True, rename="camel"):
    type: PatternType
    description: str
    files: list[str]
    frequency: int  # sessions (errors: occurrences)
    sessions: list[str]
    first_seen: str
    last_seen: str


class Patterns(msgspec.Struct, kw_only=True):
    patterns: list[Pattern]


@dataclass
class Seen:
    """Where and when one thing was seen."""

    count: int = 0
    sessions: dict[str, None] = field(default_factory=dict)  # ordered set
    first: str = ""
    last: str = ""

    def add(self, session: str, at: str) -> None:
        self.count += 1
        self.sessions[session] = None
        self.first = min(self.first, at) if self.first else at
        self.last = max(self.last, at)


def error_signature(observation: Observation) -> str | None:
    """A failed tool call's signature: what failed, numbers blanked (``exit 1 after 3.2s``
    and ``exit 2 after 4.1s`` are the same error); None for anything else."""
    if observation.hook_type != "post_tool_failure" and observation.type != "error":
        return None
    _, _, failure = observation.narrative.partition(FAILED)
    text = DIGITS.sub("#", (failure or observation.narrative).lower()).strip()
    return f"{observation.title.lower()}: {text[:SIGNATURE_LENGTH]}"


def detect(history: list[tuple[Session, list[Observation]]]) -> Patterns:
    """The patterns in ``history`` (sessions with their observations), most frequent first
    (ties by description: the same data always gives the same answer)."""
    files: defaultdict[str, Seen] = defaultdict(Seen)
    pairs: defaultdict[tuple[str, str], Seen] = defaultdict(Seen)
    errors: defaultdict[str, Seen] = defaultdict(Seen)
    concepts: defaultdict[str, Seen] = defaultdict(Seen)
    for session, observations in history:
        touched: dict[str, str] = {}  # file -> when last touched in this session
        for observation in observations:
            for path in observation.files:
                touched[path] = max(touched.get(path, ""), observation.created_at)
            if (signature := error_signature(observation)) is not None:
                errors[signature].add(session.id, observation.created_at)
        for path, at in touched.items():
            files[path].add(session.id, at)
        for pair in combinations(sorted(touched), 2):
            pairs[pair].add(session.id, max(touched[pair[0]], touched[pair[1]]))
        for concept in dict.fromkeys(session.concepts):
            concepts[concept].add(session.id, session.last_activity_at or session.started_at)
    found = [
        *(
            _pattern("co_change", f"{a} and {b} are frequently modified together", [a, b], seen)
            for (a, b), seen in pairs.items()
            if len(seen.sessions) >= CO_CHANGE_SESSIONS
        ),
        *(
            _pattern("error_repeat", f"Recurring error: {signature}", [], seen, seen.count)
            for signature, seen in errors.items()
            if seen.count >= ERROR_REPEATS
        ),
        *(
            _pattern("file_hotspot", f"{path} is changed in many sessions", [path], seen)
            for path, seen in files.items()
            if len(seen.sessions) >= HOTSPOT_SESSIONS
        ),
        *(
            _pattern("concept_repeat", f"Recurring concept: {concept}", [], seen)
            for concept, seen in concepts.items()
            if len(seen.sessions) >= CONCEPT_SESSIONS
        ),
    ]
    found.sort(key=lambda pattern: (-pattern.frequency, pattern.description))
    return Patterns(patterns=found[:PATTERNS_SHOWN])


def _pattern(
    kind: PatternType, description: str, files: list[str], seen: Seen, frequency: int = 0
) -> Pattern:
    return Pattern(
        type=kind,
        description=description,
        files=files,
        frequency=frequency or len(seen.sessions),
        sessions=list(seen.sessions),
        first_seen=seen.first,
        last_seen=seen.last,
    )
