"""REST routes for records, outcomes, stats and sessions, all under ``/v1``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter, QueryParameter

from baton.server.api.deps import CallerDep, HandoffsDep, NamespaceDep, RecordsDep
from baton.server.api.metrics import record_verify
from baton.server.api.problems import problems
from baton.server.models import (
    History,
    OutcomeEntry,
    OutcomeKind,
    OutcomeReport,
    RecordPage,
    RecordVersion,
    Remembered,
    Stats,
)


class RememberBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A new version of a record. ``expected_version`` makes the write conditional."""

    ref: str
    value: Any
    tags: list[str] = []
    confidence: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    expected_version: Annotated[int, msgspec.Meta(ge=0)] | None = None


class OutcomeBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What happened after acting on some records; ``refs`` defaults to the session's."""

    outcome: OutcomeKind
    outcome_ref: str
    refs: list[str] | None = None
    note: str | None = None
    handoff_id: str | None = None


# "scope" is reserved by Litestar for the ASGI scope, so the Python name differs.
ScopeParam = Annotated[
    str | None, QueryParameter(name="scope", description="a scope; records in it and below it")
]


def _ref(path: str) -> str:
    return path.lstrip("/")


class RecordController(Controller):
    path = "/v1"
    tags = ("records",)

    @post(
        "/records",
        summary="Remember: append a new version of a record",
        responses=problems(409, 413),
    )
    async def remember(
        self, data: JSONBody[RememberBody], records: RecordsDep, caller: CallerDep
    ) -> Remembered:
        return await records.remember(
            data.ref,
            data.value,
            agent=caller.agent,
            session=caller.session,
            tags=data.tags,
            confidence=data.confidence,
            expected_version=data.expected_version,
        )

    @get(
        "/records",
        summary="Recall many: current versions filtered by scope, tags, confidence",
        responses=problems(),
    )
    async def list_records(
        self,
        records: RecordsDep,
        in_scope: ScopeParam = None,
        tags: FromQuery[list[str] | None] = None,
        tags_mode: FromQuery[Literal["all", "any"]] = "all",
        min_confidence: Annotated[float | None, Parameter(ge=0, le=1)] = None,
        limit: Annotated[int, Parameter(ge=1)] = 50,
        cursor: FromQuery[str | None] = None,
        text: Annotated[
            str | None, QueryParameter(name="query", description="free text; best match first")
        ] = None,
    ) -> RecordPage:
        return await records.list_records(
            scope=in_scope,
            tags=tags or [],
            tags_mode=tags_mode,
            min_confidence=min_confidence,
            limit=limit,
            cursor=cursor,
            query=text,
        )

    @get(
        "/records/{ref:path}",
        summary="Recall one record, current or a given version",
        responses=problems(404),
    )
    async def recall(
        self,
        ref: FromPath[str],
        records: RecordsDep,
        caller: CallerDep,
        version: Annotated[int | None, Parameter(ge=1)] = None,
    ) -> RecordVersion:
        return await records.recall(
            _ref(ref), version=version, agent=caller.agent, session=caller.session
        )

    @get(
        "/history/{ref:path}",
        summary="Every version of a record with its chain status",
        responses=problems(404),
    )
    async def history(self, ref: FromPath[str], records: RecordsDep) -> History:
        return await records.history(_ref(ref))

    @get(
        "/outcomes/{ref:path}",
        summary="A record's outcomes log, before and after each move",
        responses=problems(404),
    )
    async def outcome_log(self, ref: FromPath[str], records: RecordsDep) -> list[OutcomeEntry]:
        return await records.outcomes(_ref(ref))

    @post(
        "/outcomes",
        summary="Record an outcome: move the confidence of the records it was about",
        responses=problems(404, 409, 413),
    )
    async def record_outcome(
        self, data: JSONBody[OutcomeBody], handoffs: HandoffsDep, caller: CallerDep
    ) -> OutcomeReport:
        return await handoffs.record_outcome(
            data.outcome,
            data.outcome_ref,
            agent=caller.agent,
            refs=data.refs,
            session=caller.session,
            note=data.note,
            handoff_id=data.handoff_id,
        )

    @get(
        "/stats",
        summary="Counts, average confidence and, with verify, a full chain check",
        responses=problems(),
    )
    async def stats(
        self,
        ns: NamespaceDep,
        verify: FromQuery[bool] = False,
        in_scope: ScopeParam = None,
    ) -> Stats:
        stats = await ns.verifier.stats(verify=verify, scope=in_scope)
        stats.handoffs = await ns.handoffs.counts()
        if verify:
            record_verify(ns.name, len(stats.broken or []), stats.checked_versions or 0)
        return stats
