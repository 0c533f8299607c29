"""Baton's operations, each defined once: its input (fields named as on the wire, bounds and
defaults on the fields), its core function (its docstring the operation's description, its
annotations the input and result types), and right under it the entry naming the surfaces
it is offered on (``Operation.of``).

REST routes (``baton.server.api.operation_routes``), MCP tools (``baton.server.mcp.mcp_server``),
agentmemory's routes (``baton.server.api.agentmemory_routes``) and the Python client
(``baton.agents.client``) are built from :data:`OPERATIONS`; docs/architecture.md shows how
to add one. Limits that are settings (the page size) are checked by the stores, once.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from baton.server.model import agentmemory_shapes as shapes
from baton.server.model.agentmemory_shapes import EXPAND_LIMIT
from baton.server.model.clock import utc_now
from baton.server.model.errors import Forbidden, InvalidInput
from baton.server.model.grants import (
    MAX_GRANTS,
    AgentGrants,
    Grant,
    Need,
    Rights,
    memories,
    memory_of,
    record,
)
from baton.server.model.memory_models import (
    MAX_RECALL,
    MAX_TTL_DAYS,
    START_BUDGET,
    Consolidation,
    Context,
    Enriched,
    FileContext,
    Forgotten,
    Format,
    MemorySaved,
    ObserveInput,
    Recall,
    SessionEndInput,
    SessionStartInput,
    split_list,
)
from baton.server.model.models import (
    MAX_AUDIT,
    AgentSummary,
    AgentThen,
    AuditEntry,
    HandoffInput,
    History,
    Input,
    NoticePage,
    Observed,
    OutcomeEntry,
    OutcomeKind,
    OutcomeReport,
    Packet,
    PacketPage,
    PacketState,
    PageSize,
    RecordPage,
    RecordVersion,
    Remembered,
    Resumed,
    ResumeHere,
    Seconds,
    Session,
    SessionEnded,
    Stats,
    Webhook,
)
from baton.server.model.patterns import SESSIONS_READ, Patterns, detect
from baton.server.model.thread_models import (
    STORE_SCOPE,
    CheckpointPage,
    CheckpointsCopied,
    CheckpointsRemoved,
    CheckpointStored,
    CopyThreadInput,
    DeleteRunsInput,
    ItemDeadlines,
    ItemExpiryInput,
    ListCheckpointsInput,
    PruneThreadsInput,
    PutCheckpointInput,
    PutWritesInput,
    ThreadVerified,
    VerifyThreadInput,
    WritesStored,
)
from baton.server.model.validation import ANONYMOUS, MAX_LIST, check_moment, check_ref
from baton.server.operation import OPEN, Call, Guard, Operation, Route, View

RECORDS, HANDOFFS, MEMORY, ACCESS = "records", "handoffs", "sessions and memories", "access"
LANGGRAPH = "langgraph"
BLOB = {"type": "json", "data": "e30="}  # an example: LangGraph's serializer's {} (base64)


Confidence = Annotated[float, msgspec.Meta(ge=0, le=1)]
Csv = str | list[str] | None  # a list, or a comma-separated string (agentmemory's clients)
RecallLimit = Annotated[int, msgspec.Meta(ge=1, le=MAX_RECALL)]
Version = Annotated[int, msgspec.Meta(ge=0)]  # 0: before the first (a record not yet written)


# What each operation reaches that grants restrict (baton.server.model.grants) ---------------


async def reads_ref(call: Call, i: RefInput | ReadInput) -> list[Need]:
    return [record(i.ref)]


async def writes_ref(call: Call, i: RememberInput) -> list[Need]:
    return [record(i.ref, "write")]


async def reads_ref_if_named(call: Call, i: RecallInput) -> list[Need]:
    return [] if i.ref is None else [record(i.ref)]


async def moves_refs(call: Call, i: OutcomeInput) -> list[Need]:
    """The facts an outcome moves; without ``refs`` it may move any (only ``*`` covers)."""
    if i.refs is None:
        return [record(None, "write")]
    return [record(ref, "write") for ref in i.refs]


async def pins_refs(call: Call, i: HandoffInput) -> list[Need]:
    """The refs the packet pins: those named, or without ``pins`` every ref the session
    read or wrote (a packet it resumed among them), each read today."""
    if i.pins is not None:
        return [record(pin.ref) for pin in i.pins]
    if call.caller.session is None:
        return []
    return [record(ref) for ref in await call.ns.activity.touched(call.caller.session)]


def records_shown(rights: Rights, found: RecordVersion | RecordPage) -> RecordVersion | RecordPage:
    if isinstance(found, RecordPage):
        found.records = [each for each in found.records if rights.may(record(each.ref))]
    return found


def packets_shown(rights: Rights, page: PacketPage) -> PacketPage:
    page.packets = [packet for packet in page.packets if rights.sees(packet)]
    return page


def packet_shown(rights: Rights, packet: Packet) -> Packet:
    return rights.packet(packet)


def agent_then_shown(rights: Rights, then: AgentThen) -> AgentThen:
    """Only the packets ``rights`` may read, and the sightings of records it may read."""
    then.claimed = [each for each in then.claimed if rights.sees(each.packet)]
    then.seen = [each for each in then.seen if rights.may(record(each.ref))]
    return then


def notices_shown(rights: Rights, page: NoticePage) -> NoticePage:
    """Only the notices of records ``rights`` may read."""
    page.notices = [each for each in page.notices if rights.may(record(each.ref))]
    return page


def resumed_shown(rights: Rights, resumed: Resumed) -> Resumed:
    """A confined receiver gets the pinned values the sender handed over, but not what a
    record it may not read holds now (nor who moved it)."""
    for stale in resumed.stale:
        if not rights.may(record(stale.ref)):
            stale.current_value = stale.patch = stale.current_confidence = None
            stale.versions, stale.outcomes = [], []
    return resumed


async def reads_project(
    call: Call, i: EnrichInput | FileHistoryInput | PatternsInput | RecallMemoriesInput
) -> list[Need]:
    """A project's memories and sessions; no project: every project (only ``*`` covers)."""
    return [memories(i.project)]


async def writes_project(call: Call, i: SaveInput | ObserveInput | ConsolidateInput) -> list[Need]:
    return [memories(i.project, "write")]


async def starts_in_project(call: Call, i: SessionStartInput) -> list[Need]:
    return [] if i.project is None else [memories(i.project, "write")]


async def reads_every_project(call: Call, i: Any) -> list[Need]:
    """Found by working directory (the previous session of a folder, "where were we"), so
    it may be any project's."""
    return [memories(None)]


async def writes_project_from(call: Call, i: SaveInput) -> list[Need]:
    """The project written, and those of the observations the memory says it came from
    (file history shows them with it)."""
    return [memories(i.project, "write"), *await observations_read(call, i.source_observation_ids)]


async def observations_read(call: Call, observation_ids: list[str]) -> list[Need]:
    sessions = await call.ns.sessions.of_observations(observation_ids)
    return [memory_of(session.project) for session in sessions]


async def updates_memory(call: Call, i: UpdateInput) -> list[Need]:
    return [memory_of((await call.ns.memories.get(i.memory_id)).project, "write")]


async def forgets(call: Call, i: ForgetInput) -> list[Need]:
    needs = []
    if i.memory_id is not None:
        needs.append(memory_of((await call.ns.memories.get(i.memory_id)).project, "write"))
    if i.session_id is not None:
        needs.append(memory_of((await call.ns.sessions.get(i.session_id)).project, "write"))
    return needs


async def searches(call: Call, i: SmartSearchInput) -> list[Need]:
    """The query's projects, and those of the memories and observations named to expand."""
    needs = [memories(i.project)] if (i.query or "").strip() else []
    expand = split_list(i.expand_ids, "expand_ids")
    found = await call.ns.memories.get_many([each for each in expand if each.startswith("mem_")])
    needs += [memory_of(memory.project) for memory in found.values()]
    return needs + await observations_read(call, [e for e in expand if not e.startswith("mem_")])


def sessions_shown(rights: Rights, sessions: list[Session]) -> list[Session]:
    return [
        _touched_shown(rights, session)
        for session in sessions
        if rights.may(memory_of(session.project))
    ]


def _touched_shown(rights: Rights, session: Session) -> Session:
    """``session`` with only the records ``rights`` may read among those it touched (their
    names are the records' too)."""
    touched = {ref: seen for ref, seen in session.touched.items() if rights.may(record(ref))}
    return msgspec.structs.replace(session, touched=touched)


def session_shown(rights: Rights, session: Session) -> Session:
    rights.require([memory_of(session.project)])
    return _touched_shown(rights, session)


def resume_shown(rights: Rights, found: ResumeHere) -> ResumeHere:
    """ "Where were we" with only the records ``rights`` may read among those its session
    touched."""
    if found.session is None:
        return found
    return msgspec.structs.replace(found, session=_touched_shown(rights, found.session))


READS_REF = Guard(reads_ref)
READS_PROJECT = Guard(reads_project)
WRITES_PROJECT = Guard(writes_project)
READS_EVERY_PROJECT = Guard(reads_every_project)


# Records ------------------------------------------------------------------------------------


class RememberInput(Input, kw_only=True):
    ref: str
    value: Any
    tags: list[str] = []
    confidence: Confidence = 0.5
    expected_version: Version | None = None
    based_on: Annotated[list[Version], msgspec.Meta(max_length=MAX_LIST)] | None = None


async def remember(call: Call, i: RememberInput) -> Remembered:
    """Use to record a fact you learned, under a ref `scope/key`. A write never overwrites: it
    adds a version. expected_version writes only if the record is still at the version
    you read (0: only if new). based_on names the versions you read: a write on top of
    one you did not see marks the record contested; naming every contested version
    settles it."""
    return await call.ns.records.remember(
        i.ref,
        i.value,
        agent=call.caller.agent,
        session=call.caller.session,
        tags=i.tags,
        confidence=i.confidence,
        expected_version=i.expected_version,
        based_on=i.based_on,
    )


REMEMBER = Operation.of(
    remember,
    tag=RECORDS,
    rest=Route(
        "POST", "/v1/records", "Remember: append a new version of a record", 201, (409, 413)
    ),
    tool=True,
    effect="writes",
    guard=Guard(writes_ref),
    example={"ref": "m/x", "value": 2},
)


class ReadInput(Input, kw_only=True):
    ref: str
    version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    as_of: str | None = None  # a time: the version current then


async def read_record(call: Call, i: ReadInput) -> RecordVersion:
    """Recall one record: its current version, the given one, or the one current at as_of."""
    if i.as_of is not None:
        if i.version is not None:
            raise InvalidInput("as_of", "give a version or as_of, not both")
        return await call.ns.as_of.recall(i.ref, check_moment(i.as_of))
    return await call.ns.records.recall(
        i.ref, version=i.version, agent=call.caller.agent, session=call.caller.session
    )


READ_RECORD = Operation.of(
    read_record,
    tag=RECORDS,
    rest=Route(
        "GET",
        "/v1/records/{ref:path}",
        "Recall one record, current or a given version",
        problems=(404,),
    ),
    effect="reads",
    guard=READS_REF,
    example={"ref": "m/x"},
)


class ListInput(Input, kw_only=True):
    scope: str | None = None
    tags: list[str] = []
    tags_mode: Literal["all", "any"] = "all"
    min_confidence: Confidence | None = None
    limit: PageSize = 50
    cursor: str | None = None
    query: str | None = None
    as_of: str | None = None  # a time: the versions current then


async def list_records(call: Call, i: ListInput) -> RecordPage:
    """Current versions filtered by scope, tags and confidence, in ref order (or best match
    first with query); with as_of (a time), the versions current then."""
    filters = msgspec.structs.asdict(i)
    as_of = filters.pop("as_of")
    if as_of is not None:
        return await call.ns.as_of.list_records(check_moment(as_of), **filters)
    return await call.ns.records.list_records(**filters)


LIST_RECORDS = Operation.of(
    list_records,
    tag=RECORDS,
    rest=Route(
        "GET",
        "/v1/records",
        "Recall many: current versions filtered by scope, tags, confidence",
    ),
    effect="reads",
    guard=Guard(shows=records_shown),
    example={"scope": "m", "limit": 20},
)


class RecallInput(ListInput, kw_only=True):
    ref: str | None = None
    version: Annotated[int, msgspec.Meta(ge=1)] | None = None


async def recall(call: Call, i: RecallInput) -> RecordVersion | RecordPage:
    """Use before acting on a fact. With ref: that record, current or at a version. Without:
    current records filtered by scope, tags, confidence or a search query, a page at a
    time (next_cursor). as_of (a time) answers with the versions current then."""
    if i.ref is not None:
        return await read_record(call, ReadInput(ref=i.ref, version=i.version, as_of=i.as_of))
    fields = msgspec.structs.asdict(i)
    del fields["ref"], fields["version"]
    return await list_records(call, ListInput(**fields))


RECALL = Operation.of(
    recall,
    tool=True,
    effect="reads",
    guard=Guard(reads_ref_if_named, records_shown),
    example={"ref": "m/x"},
)


class RefInput(Input, kw_only=True):
    ref: str


async def history(call: Call, i: RefInput) -> History:
    """Use to see how a record changed: every version, oldest first, with its author, time and
    whether its hash chain verifies."""
    return await call.ns.records.history(i.ref)


HISTORY = Operation.of(
    history,
    tag=RECORDS,
    rest=Route(
        "GET",
        "/v1/history/{ref:path}",
        "Every version of a record with its chain status",
        problems=(404,),
    ),
    tool=True,
    effect="reads",
    guard=READS_REF,
    example={"ref": "m/x"},
)


async def outcomes(call: Call, i: RefInput) -> list[OutcomeEntry]:
    """A record's outcomes log, before and after each move."""
    return await call.ns.records.outcomes(i.ref)


OUTCOMES = Operation.of(
    outcomes,
    tag=RECORDS,
    rest=Route("GET", "/v1/outcomes/{ref:path}", problems=(404,)),
    effect="reads",
    guard=READS_REF,
    example={"ref": "m/x"},
)


class OutcomeInput(Input, kw_only=True):
    outcome: OutcomeKind
    outcome_ref: str
    refs: list[str] | None = None
    note: str | None = None
    handoff_id: str | None = None


async def record_outcome(call: Call, i: OutcomeInput) -> OutcomeReport:
    """Use after acting on facts, to report whether it worked: success raises their confidence,
    failure lowers it. refs default to what your session touched; handoff_id closes the
    packet you resumed."""
    return await call.ns.outcomes.record(
        i.outcome,
        i.outcome_ref,
        agent=call.caller.agent,
        refs=i.refs,
        session=call.caller.session,
        note=i.note,
        handoff_id=i.handoff_id,
    )


RECORD_OUTCOME = Operation.of(
    record_outcome,
    tag=RECORDS,
    rest=Route(
        "POST",
        "/v1/outcomes",
        "Record an outcome: move the confidence of the records it was about",
        201,
        (404, 409, 413),
    ),
    tool=True,
    effect="writes",
    guard=Guard(moves_refs),
    example={"outcome": "success", "outcome_ref": "R-1", "refs": ["m/x"]},
)


class StatsInput(Input, kw_only=True):
    verify: bool = False
    scope: str | None = None


async def stats(call: Call, i: StatsInput) -> Stats:
    """Use for an overview of the store: counts, average confidence, packets by state;
    verify=true also rechecks every hash chain (scope: only records under it)."""
    counted = await call.ns.verifier.stats(verify=i.verify, scope=i.scope)
    counted.handoffs = await call.ns.handoffs.counts()
    return counted


MEMORY_STATS = Operation.of(
    stats,
    name="memory_stats",
    tag=RECORDS,
    rest=Route(
        "GET", "/v1/stats", "Counts, average confidence and, with verify, a full chain check"
    ),
    tool=True,
    effect="reads",
    example={},
)


# Handoffs -----------------------------------------------------------------------------------


async def handoff(call: Call, i: HandoffInput) -> Packet:
    """Use to pass work to another agent: a packet with a summary, next steps and open
    questions. It pins the record versions you relied on (default: all your session
    touched), so the receiver learns which moved. deliver=session_end holds it until
    your session ends."""
    return await call.ns.handoffs.handoff(
        i, from_agent=call.caller.agent, session=call.caller.session
    )


HANDOFF = Operation.of(
    handoff,
    tag=HANDOFFS,
    rest=Route(
        "POST", "/v1/handoffs", "Hand work to another agent: a packet in its queue", 201, (413,)
    ),
    tool=True,
    effect="writes",
    guard=Guard(pins_refs),
    example={"to": "carol", "summary": "over to carol"},
)


class ResumeInput(Input, kw_only=True):
    agent: str | None = None
    lease_seconds: Seconds | None = None


async def resume(call: Call, i: ResumeInput) -> Resumed:
    """Use when starting work handed to you: claims your oldest packet with its pinned records
    and lists as stale each pin whose record moved on since; re-read those before
    acting. Finish with record_outcome(handoff_id)."""
    caller = call.caller
    if i.agent is not None and i.agent != caller.agent:
        raise Forbidden(
            f"{caller.agent} cannot resume {i.agent}'s packets; send X-Baton-Agent: {i.agent}",
            agent=i.agent,
        )
    return await call.ns.handoffs.resume(
        caller.agent, lease_seconds=i.lease_seconds, session=caller.session
    )


RESUME = Operation.of(
    resume,
    tag=HANDOFFS,
    rest=Route(
        "POST",
        "/v1/agents/{agent:str}/resume",
        "Claim the agent's oldest queued packet",
        problems=(403, 413),
    ),
    tool=True,
    effect="writes",
    guard=Guard(shows=resumed_shown),
    example={"agent": "bob"},
)


class ListPacketsInput(Input, kw_only=True):
    status: PacketState | None = None
    to: str | None = None
    from_agent: str | None = msgspec.field(default=None, name="from")
    limit: PageSize = 50
    cursor: str | None = None


async def list_handoffs(call: Call, i: ListPacketsInput) -> PacketPage:
    """Packets, newest first, by state, receiver and sender."""
    return await call.ns.handoffs.list(
        status=i.status, to_agent=i.to, from_agent=i.from_agent, limit=i.limit, cursor=i.cursor
    )


LIST_HANDOFFS = Operation.of(
    list_handoffs,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/handoffs"),
    effect="reads",
    guard=Guard(shows=packets_shown),
    example={"to": "bob", "status": "queued"},
)


class PacketInput(Input, kw_only=True):
    packet_id: str


async def get_handoff(call: Call, i: PacketInput) -> Packet:
    """One packet with its transition log."""
    return await call.ns.handoffs.get(i.packet_id)


GET_HANDOFF = Operation.of(
    get_handoff,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/handoffs/{packet_id:str}", problems=(404,)),
    effect="reads",
    guard=Guard(shows=packet_shown),
    example={"packet_id": "h_5f2c9a1e"},
)


async def complete(call: Call, i: PacketInput) -> Packet:
    """Finish a claimed packet."""
    return await call.ns.handoffs.complete(i.packet_id, call.caller.agent)


COMPLETE = Operation.of(
    complete,
    tag=HANDOFFS,
    rest=Route("POST", "/v1/handoffs/{packet_id:str}/complete", problems=(403, 404, 409)),
    effect="writes",
    guard=OPEN,
    example={"packet_id": "h_5f2c9a1e"},
)


class ReleaseInput(PacketInput, kw_only=True):
    reason: str | None = None


async def release(call: Call, i: ReleaseInput) -> Packet:
    """Give a claimed packet back to the queue."""
    return await call.ns.handoffs.release(
        i.packet_id, call.caller.agent, reason=i.reason or "released"
    )


RELEASE = Operation.of(
    release,
    tag=HANDOFFS,
    rest=Route("POST", "/v1/handoffs/{packet_id:str}/release", problems=(403, 404, 409, 413)),
    effect="writes",
    guard=OPEN,
    example={"packet_id": "h_5f2c9a1e"},
)


class FailInput(PacketInput, kw_only=True):
    error: str


async def fail(call: Call, i: FailInput) -> Packet:
    """Give up on a claimed packet, saying why."""
    return await call.ns.handoffs.fail(i.packet_id, call.caller.agent, i.error)


FAIL = Operation.of(
    fail,
    tag=HANDOFFS,
    rest=Route("POST", "/v1/handoffs/{packet_id:str}/fail", problems=(403, 404, 409, 413)),
    effect="writes",
    guard=OPEN,
    example={"packet_id": "h_5f2c9a1e", "error": "gave up"},
)


async def requeue(call: Call, i: PacketInput) -> Packet:
    """Put a failed or expired packet back in its queue (admin)."""
    call.caller.require_admin("requeue")
    return await call.ns.handoffs.requeue(i.packet_id, call.caller.agent)


REQUEUE = Operation.of(
    requeue,
    tag=HANDOFFS,
    rest=Route(
        "POST",
        "/v1/handoffs/{packet_id:str}/requeue",
        "Put a failed or expired packet back in its queue",
        problems=(403, 404, 409),
    ),
    effect="writes",
    example={"packet_id": "h_5f2c9a1e"},
)


class NoInput(Input, kw_only=True):
    pass


async def agents(call: Call, i: NoInput) -> list[AgentSummary]:
    """Every known agent with its queued, claimed and failed counts."""
    return await call.ns.handoffs.agents()


AGENTS = Operation.of(
    agents,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/agents"),
    effect="reads",
    guard=OPEN,
    example={},
)


def own_agent(call: Call, agent: str) -> str:
    """``agent`` when the caller acts as it (its token's agent, or an admin naming it in
    X-Baton-Agent); :class:`Forbidden` otherwise."""
    if agent != call.caller.agent:
        raise Forbidden(
            f"{call.caller.agent} cannot use {agent}'s notices or webhook; "
            f"send X-Baton-Agent: {agent}",
            agent=agent,
        )
    return agent


class NoticesInput(Input, kw_only=True):
    agent: str
    after: str = "0-0"  # the last notice id seen
    limit: PageSize = 100


async def notices(call: Call, i: NoticesInput) -> NoticePage:
    """Your notices, oldest first: each pin of your held, queued or claimed packets that moved
    on (the record got a newer version), within a second of the write. Pass the last id
    seen as after."""
    return await call.ns.notices.since(own_agent(call, i.agent), i.after, i.limit)


NOTICES = Operation.of(
    notices,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/agents/{agent:str}/notices", "An agent's notices", problems=(403,)),
    effect="reads",
    guard=Guard(shows=notices_shown),
    example={"agent": "bob"},
)


class WebhookInput(Input, kw_only=True):
    agent: str


class SetWebhookInput(WebhookInput, kw_only=True):
    url: str


async def set_webhook(call: Call, i: SetWebhookInput) -> Webhook:
    """Have your notices POSTed to a URL, signed: X-Baton-Signature is sha256= and the
    HMAC-SHA256 of the body with the secret this answer shows (once). Replaces the one
    before, with a new secret."""
    return await call.ns.notices.set_webhook(own_agent(call, i.agent), i.url)


SET_WEBHOOK = Operation.of(
    set_webhook,
    tag=HANDOFFS,
    rest=Route("POST", "/v1/agents/{agent:str}/webhook", "Set an agent's webhook", 200, (403,)),
    effect="writes",
    guard=OPEN,
    example={"agent": "bob", "url": "http://127.0.0.1:9/hook"},
)


async def webhook(call: Call, i: WebhookInput) -> Webhook:
    """Your webhook (without its secret) and its newest deliveries, newest first."""
    return await call.ns.notices.webhook(own_agent(call, i.agent))


WEBHOOK = Operation.of(
    webhook,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/agents/{agent:str}/webhook", "An agent's webhook", problems=(403,)),
    effect="reads",
    guard=OPEN,
    example={"agent": "bob"},
)


async def drop_webhook(call: Call, i: WebhookInput) -> Webhook:
    """Stop POSTing your notices (the delivery log stays)."""
    return await call.ns.notices.drop_webhook(own_agent(call, i.agent))


DROP_WEBHOOK = Operation.of(
    drop_webhook,
    tag=HANDOFFS,
    rest=Route(
        "DELETE", "/v1/agents/{agent:str}/webhook", "Remove an agent's webhook", 200, (403, 404)
    ),
    effect="writes",
    guard=OPEN,
    example={"agent": "bob"},
)


# Sessions -----------------------------------------------------------------------------------


async def start_session(call: Call, i: SessionStartInput) -> Session:
    """Start a session (any id, or a fresh one)."""
    return await call.ns.sessions.start(i, caller=call.caller)


START_SESSION = Operation.of(
    start_session,
    tag=MEMORY,
    rest=Route("POST", "/v1/sessions", status=201, problems=(413,)),
    effect="writes",
    guard=Guard(starts_in_project),
    example={"id": "s-bob", "project": "p", "cwd": "/r"},
)


async def end_session(call: Call, i: SessionEndInput) -> SessionEnded:
    """End a session (completed)."""
    ended = await call.ns.sessions.end(i, caller=call.caller)
    if ended.ended:  # what it held back is claimable now (the sweep retries after a crash)
        await call.ns.handoffs.send_held(i.session_id)
    return ended


END_SESSION = Operation.of(
    end_session,
    tag=MEMORY,
    rest=Route("POST", "/v1/sessions/{session_id:str}/end", problems=(404, 413)),
    effect="writes",
    guard=OPEN,
    example={"session_id": "s-bob", "summary": "done"},
)


class SessionsInput(Input, kw_only=True):
    limit: PageSize = 20


async def list_sessions(call: Call, i: SessionsInput) -> list[Session]:
    """Recent sessions, newest first."""
    return await call.ns.sessions.recent(i.limit)


LIST_SESSIONS = Operation.of(
    list_sessions,
    tag=MEMORY,
    rest=Route("GET", "/v1/sessions"),
    effect="reads",
    guard=Guard(shows=sessions_shown),
    view=View(
        "memory_sessions",
        "Use to see recent sessions, newest first: where they ran and what they did.",
        shapes.Sessions,
        lambda i, found: shapes.sessions(found),
        Route("GET", "/agentmemory/sessions", "Recent sessions"),
        tool=True,
    ),
    example={"limit": 10},
)


class ResumeHereInput(Input, kw_only=True):
    cwd: str | None = None  # the working directory (absolute); default: the server's
    override: str | None = None  # another project path, absolute or relative to cwd


class AgentAsOfInput(Input, kw_only=True):
    agent: str
    as_of: str | None = None  # a time; now by default


async def agent_as_of(call: Call, i: AgentAsOfInput) -> AgentThen:
    """Use to see what an agent had in front of it at a time (as_of): the packets it held then,
    each pin with the version current then, and the record versions its open sessions
    had read or written by then."""
    return await call.ns.as_of.agent(
        i.agent, utc_now() if i.as_of is None else check_moment(i.as_of)
    )


AGENT_AS_OF = Operation.of(
    agent_as_of,
    tag=HANDOFFS,
    rest=Route("GET", "/v1/agents/{agent:str}/as-of", "What an agent had in front of it"),
    tool=True,
    effect="reads",
    guard=Guard(shows=agent_then_shown),
    example={"agent": "alice", "as_of": "2026-12-07T10:00:00Z"},
)


async def resume_here(call: Call, i: ResumeHereInput) -> ResumeHere:
    """Use when the user says 'resume', 'where were we' or 'pick up where I left off': the last
    session in this working directory (cwd), its open question first and one next step.

    Without ``cwd``, the process's own folder: that of ``baton mcp`` on stdio (started by
    the host in the project); over HTTP the server's folder is nobody's project, and its
    path is not the caller's to see, so there ``cwd`` is required."""
    cwd = i.cwd
    if cwd is None:
        if call.caller.credential.kind != "local":
            raise InvalidInput("cwd", "cwd is required over HTTP: the absolute path to resume")
        cwd = os.getcwd()
    return await call.ns.sessions.resume_here(
        cwd, override=i.override, caller_session=call.caller.session
    )


MEMORY_RESUME_HERE = Operation.of(
    resume_here,
    name="memory_resume_here",
    tag=MEMORY,
    rest=Route(
        "GET", "/v1/sessions/resume", "Where were we: the session to resume for a directory"
    ),
    tool=True,
    effect="reads",
    guard=Guard(reads_every_project, resume_shown),
    example={"cwd": "/r"},
)


class SessionInput(Input, kw_only=True):
    session_id: str


async def get_session(call: Call, i: SessionInput) -> Session:
    """A session and the record versions it touched."""
    return await call.ns.sessions.get(i.session_id)


GET_SESSION = Operation.of(
    get_session,
    tag=MEMORY,
    rest=Route("GET", "/v1/sessions/{session_id:str}", problems=(404,)),
    effect="reads",
    guard=Guard(shows=session_shown),
    example={"session_id": "s-bob"},
)


class ContextInput(Input, kw_only=True):
    """``start``: the previous session's "where were we" for ``cwd``; ``compact``: this
    session's state and the previous session's answer."""

    session_id: str
    kind: Literal["start", "compact"]
    cwd: str | None = None
    project: str | None = None
    budget: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = START_BUDGET


async def context(call: Call, i: ContextInput) -> Context:
    """Context for a coding agent's hook: session start or compaction."""
    builder = call.ns.context
    if i.kind == "start":
        return await builder.start(i.session_id, i.cwd, i.project, i.budget)
    return await builder.compact(i.session_id, i.project, i.budget)


CONTEXT = Operation.of(
    context,
    tag=MEMORY,
    rest=Route("POST", "/v1/context", problems=(413,)),
    effect="reads",
    guard=READS_EVERY_PROJECT,
    example={"session_id": "s-bob", "kind": "compact"},
)


class EnrichInput(Input, kw_only=True):
    session_id: str
    files: Annotated[list[str], msgspec.Meta(min_length=1, max_length=50)]
    terms: Annotated[list[str], msgspec.Meta(max_length=50)] = []
    project: str | None = None


async def enrich(call: Call, i: EnrichInput) -> Enriched:
    """What earlier sessions did to the files a tool is about to touch."""
    return await call.ns.context.enrich(i.session_id, i.files, i.terms, i.project)


ENRICH = Operation.of(
    enrich,
    tag=MEMORY,
    rest=Route("POST", "/v1/enrich", problems=(413,)),
    effect="reads",
    guard=READS_PROJECT,
    example={"session_id": "s-bob", "files": ["/r/a.py"]},
)


async def observe(call: Call, i: ObserveInput) -> Observed:
    """Record a hook event of a coding agent."""
    return await call.ns.sessions.observe(i, caller=call.caller)


OBSERVE = Operation.of(
    observe,
    tag=MEMORY,
    rest=Route("POST", "/v1/observations", status=201, problems=(413,)),
    effect="writes",
    guard=WRITES_PROJECT,
    example={
        "hook_type": "post_tool_use",
        "session_id": "s-bob",
        "project": "p",
        "cwd": "/r",
        "timestamp": "2026-01-01T00:00:00Z",
        "data": {"tool_name": "Read"},
    },
)


class FileHistoryInput(Input, kw_only=True):
    files: str | Annotated[list[str], msgspec.Meta(max_length=50)]  # a list or "a.py,b.py"
    session_id: str | None = None  # the current session: left out of the history
    project: str | None = None


async def file_history(call: Call, i: FileHistoryInput) -> FileContext:
    """Use before changing files: what other sessions observed about them, best first."""
    files = split_list(i.files, "files")
    if not files:
        raise InvalidInput("files", "files must name at least one path")
    return await call.ns.context.file_history(i.session_id, files, i.project)


MEMORY_FILE_HISTORY = Operation.of(
    file_history,
    name="memory_file_history",
    tag=MEMORY,
    rest=Route("POST", "/v1/file-history", "What earlier sessions did to some files"),
    tool=True,
    effect="reads",
    agentmemory=Route("POST", "/agentmemory/file-context", "File context"),
    naming="agentmemory",
    guard=READS_PROJECT,
    example={"files": ["/r/a.py"]},
)


class PatternsInput(Input, kw_only=True):
    project: str | None = None  # only this project's sessions


async def patterns(call: Call, i: PatternsInput) -> Patterns:
    """Use to spot recurring work across recent sessions: files changed together or often,
    errors that repeat, recurring concepts.

    Patterns in the most recent sessions (:data:`SESSIONS_READ`) of ``project``."""
    sessions = [
        session
        for session in await call.ns.sessions.recent(SESSIONS_READ)
        if i.project is None or session.project == i.project
    ]
    return detect([(s, await call.ns.sessions.observations(s.id)) for s in sessions])


MEMORY_PATTERNS = Operation.of(
    patterns,
    name="memory_patterns",
    tag=MEMORY,
    rest=Route("POST", "/v1/patterns", "Recurring patterns across sessions"),
    tool=True,
    effect="reads",
    agentmemory=Route("POST", "/agentmemory/patterns", "Patterns"),
    naming="agentmemory",
    guard=READS_PROJECT,
    example={},
)


# Memories -----------------------------------------------------------------------------------


class SaveInput(Input, kw_only=True):
    content: str
    type: str | None = None  # pattern, preference, architecture, bug, workflow or fact
    concepts: Csv = None
    files: Csv = None
    project: str | None = None
    agent_id: str | None = None  # save as this agent (your own id, unless admin)
    ttl_days: Annotated[float, msgspec.Meta(gt=0, le=MAX_TTL_DAYS)] | None = None
    source_observation_ids: list[str] = []  # the observations it was drawn from


async def save_memory(call: Call, i: SaveInput) -> MemorySaved:
    """Save a memory (near-duplicates supersede, similar ones are hinted).

    Saved as the caller's agent, or as ``agent_id``'s; shared (no agent) when neither
    names one: no ``agent_id`` and an anonymous caller (docs/sessions.md, "Whose memory")."""
    owner = call.caller.acting_as(i.agent_id).agent
    saved = await call.ns.memories.save(
        i.content,
        type=i.type,
        concepts=i.concepts,
        files=i.files,
        project=i.project,
        agent_id=None if i.agent_id is None and owner == ANONYMOUS else owner,
        ttl_days=i.ttl_days,
        source_observation_ids=i.source_observation_ids,
        supersedes_unscoped=call.may(memory_of(None, "write")),
    )
    if not saved.success:
        raise InvalidInput("content", saved.error or "content is required")
    return saved


SAVE_MEMORY = Operation.of(
    save_memory,
    tag=MEMORY,
    rest=Route("POST", "/v1/memories", status=201, problems=(403, 413)),
    effect="writes",
    guard=Guard(writes_project_from),
    view=View(
        "memory_save",
        "Use to keep something for later sessions: a preference, decision, bug, workflow or "
        "fact. A near-duplicate updates the existing memory; similar ones come back as "
        "similarTo.",
        shapes.Saved,
        lambda i, saved: shapes.saved(saved),
        Route("POST", "/agentmemory/remember", "Save a memory", 201),
        tool=True,
    ),
    example={"content": "bob prefers small commits"},
)


class UpdateInput(Input, kw_only=True):
    memory_id: str
    content: str | None = None
    type: str | None = None
    concepts: Csv = None
    files: Csv = None
    reason: str = "updated on request"


async def memory_update(call: Call, i: UpdateInput) -> shapes.Saved:
    """Use to correct a saved memory (memoryId) in place: it keeps its id and gains a version;
    the old content stays in its history.

    agentmemory's answer: ``{success, memory}`` with the new version."""
    memory = await call.ns.memories.update(
        i.memory_id,
        caller=call.caller,
        content=i.content,
        type=i.type,
        concepts=i.concepts,
        files=i.files,
        reason=i.reason,
    )
    return shapes.saved(MemorySaved(success=True, memory=memory))


MEMORY_UPDATE = Operation.of(
    memory_update,
    tag=MEMORY,
    rest=Route(
        "POST",
        "/v1/memories/update",
        "Change a memory: a new version, same id",
        problems=(403, 404, 409, 413),
    ),
    tool=True,
    effect="writes",
    agentmemory=Route("POST", "/agentmemory/memory/update", "Update a memory"),
    naming="agentmemory",
    guard=Guard(updates_memory),
    example={"memory_id": "mem_5f2c9a1e0b7d", "content": "bob edits"},
)


class ConsolidateInput(Input, kw_only=True):
    project: str | None = None  # only this project's memories
    apply: bool = False  # false: answer the plan and change nothing


async def consolidate(call: Call, i: ConsolidateInput) -> Consolidation:
    """Use to merge near-duplicate memories of one project: each group is superseded by its
    newest. Answers the plan only, unless apply=true."""
    return await call.ns.memories.consolidate(caller=call.caller, project=i.project, apply=i.apply)


MEMORY_CONSOLIDATE = Operation.of(
    consolidate,
    name="memory_consolidate",
    tag=MEMORY,
    rest=Route("POST", "/v1/memories/consolidate", "Merge near-duplicate memories"),
    tool=True,
    effect="writes",
    agentmemory=Route("POST", "/agentmemory/consolidate", "Consolidate"),
    naming="agentmemory",
    guard=WRITES_PROJECT,
    example={},
)


class RecallMemoriesInput(Input, kw_only=True):
    CAMEL_EXCEPTIONS: ClassVar[frozenset[str]] = frozenset({"token_budget"})  # agentmemory's

    query: str
    limit: RecallLimit = 10
    format: Format = "full"
    token_budget: Annotated[int, msgspec.Meta(ge=1)] | None = None
    project: str | None = None
    agent_id: str | None = None  # only this agent's memories and shared ones


async def recall_memories(call: Call, i: RecallMemoriesInput) -> Recall:
    """BM25 search over memories and observations."""
    return await call.ns.memories.recall(
        i.query,
        limit=i.limit,
        format=i.format,
        token_budget=i.token_budget,
        project=i.project,
        agent_id=call.caller.acting_as(i.agent_id).agent if i.agent_id else None,
    )


RECALL_MEMORIES = Operation.of(
    recall_memories,
    tag=MEMORY,
    rest=Route("POST", "/v1/memories/recall", problems=(403, 413)),
    effect="reads",
    guard=READS_PROJECT,
    view=View(
        "memory_recall",
        "Use to search saved memories and past observations by their words. format and "
        "token_budget shape the answer.",
        shapes.Search,
        lambda i, found: shapes.search(found.results, i.format, i.token_budget),
        Route("POST", "/agentmemory/search", "Search memories"),
        tool=True,
    ),
    example={"query": "memory"},
)


class SmartSearchInput(Input, kw_only=True):
    query: str | None = None
    expand_ids: Csv = None
    limit: RecallLimit = 10
    project: str | None = None


async def smart_search(call: Call, i: SmartSearchInput) -> Recall:
    """Compact hits, or full records for chosen ids.

    Hits for ``query``, or the records of the ids to expand."""
    expand = split_list(i.expand_ids, "expand_ids")
    if not (i.query or "").strip() and not expand:
        raise InvalidInput("query", "give a query, or ids to expand (expandIds, expand_ids)")
    return await call.ns.memories.smart_search(
        query=i.query, expand_ids=expand or None, limit=i.limit, project=i.project
    )


def expanding_at_most(i: SmartSearchInput) -> SmartSearchInput:
    """agentmemory's smart search expands at most :data:`EXPAND_LIMIT` ids."""
    expand = split_list(i.expand_ids, "expand_ids")
    return msgspec.structs.replace(i, expand_ids=expand[:EXPAND_LIMIT])


def smart_search_shape(i: SmartSearchInput, found: Recall) -> shapes.SmartSearch:
    """agentmemory's answer, saying whether ids were cut."""
    expand = split_list(i.expand_ids, "expand_ids")
    return shapes.smart_search(found.results, bool(expand), len(expand) > EXPAND_LIMIT)


SMART_SEARCH = Operation.of(
    smart_search,
    tag=MEMORY,
    rest=Route("POST", "/v1/memories/smart-search", problems=(413,)),
    effect="reads",
    guard=Guard(searches),
    view=View(
        "memory_smart_search",
        "Use to search cheaply: compact hits first, then call again with expandIds for the "
        "ones you want in full.",
        shapes.SmartSearch,
        smart_search_shape,
        Route("POST", "/agentmemory/smart-search", "Smart search"),
        tool=True,
        narrow=expanding_at_most,
    ),
    example={"query": "memory"},
)


class ForgetInput(Input, kw_only=True):
    memory_id: str | None = None
    session_id: str | None = None
    observation_ids: Csv = None
    reason: str = "forgotten on request"


async def forget(call: Call, i: ForgetInput) -> Forgotten:
    """Use to delete a memory (memoryId), some observations (sessionId with observationIds) or
    a whole session (sessionId). Audited."""
    return await call.ns.memories.forget(
        caller=call.caller,
        memory_id=i.memory_id,
        session_id=i.session_id,
        observation_ids=split_list(i.observation_ids, "observation_ids") or None,
        reason=i.reason,
    )


MEMORY_FORGET = Operation.of(
    forget,
    name="memory_forget",
    tag=MEMORY,
    rest=Route(
        "POST",
        "/v1/forget",
        "Forget a memory, observations or a whole session (audited)",
        problems=(403, 404, 413),
    ),
    tool=True,
    effect="forgets",
    naming="agentmemory",
    guard=Guard(forgets),
    example={"session_id": "s-bob", "observation_ids": ["o_none"]},
)


class AuditInput(Input, kw_only=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_AUDIT)] = 50


async def audit(call: Call, i: AuditInput) -> list[AuditEntry]:
    """The audit log, newest first."""
    return await call.ns.audit.newest(i.limit)


AUDIT = Operation.of(
    audit,
    tag=MEMORY,
    rest=Route("GET", "/v1/audit"),
    effect="reads",
    example={"limit": 20},
)


# Grants -------------------------------------------------------------------------------------


class GrantsInput(Input, kw_only=True):
    """An agent's grants, replacing those it had; an empty list: it is no longer confined."""

    agent: str
    grants: Annotated[list[Grant], msgspec.Meta(max_length=MAX_GRANTS)]


async def set_grants(call: Call, i: GrantsInput) -> AgentGrants:
    """Give an agent grants in this namespace, replacing those it had (admin): records:PREFIX,
    memories:PROJECT or packets:AGENT, read or write. An agent with grants reaches only
    what they cover; a namespace with grants keeps packets to their sender, receiver and
    grantees. An empty list lifts the agent's confinement."""
    call.caller.require_admin("setting grants")
    return await call.ns.grants.set(i.agent, i.grants)


SET_GRANTS = Operation.of(
    set_grants,
    tag=ACCESS,
    rest=Route("POST", "/v1/grants", "Set an agent's grants (admin)"),
    effect="writes",
    example={"agent": "bob", "grants": []},
)


async def list_grants(call: Call, i: NoInput) -> list[AgentGrants]:
    """The grants of this namespace's agents (an agent sees its own).

    Every agent's grants for an operator; an agent sees its own."""
    listed = await call.ns.grants.every()
    if call.caller.admin:
        return listed
    return [each for each in listed if each.agent == call.caller.agent]


GRANTS = Operation.of(
    list_grants,
    name="grants",
    tag=ACCESS,
    rest=Route("GET", "/v1/grants", "Agents' grants in this namespace"),
    effect="reads",
    guard=OPEN,
    example={},
)


# LangGraph's checkpointer (REST only: baton.agents.langgraph calls them) -------------------


async def put_checkpoint(call: Call, i: PutCheckpointInput) -> CheckpointStored:
    """Store a LangGraph checkpoint, hash-chained to its parent's (LangGraph's `put`)."""
    return await call.ns.threads.put(i)


PUT_CHECKPOINT = Operation.of(
    put_checkpoint,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/checkpoints", status=201, problems=(413,)),
    effect="writes",
    example={"thread_id": "t-bob", "checkpoint_id": "1", "checkpoint": BLOB, "metadata": BLOB},
)


async def put_writes(call: Call, i: PutWritesInput) -> WritesStored:
    """Store a task's pending writes for a checkpoint (LangGraph's `put_writes`)."""
    return await call.ns.threads.put_writes(i)


PUT_WRITES = Operation.of(
    put_writes,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/writes", problems=(413,)),
    effect="writes",
    example={
        "thread_id": "t-bob",
        "checkpoint_id": "1",
        "task_id": "task",
        "writes": [{"idx": 0, "channel": "out", "value": BLOB}],
    },
)


async def list_checkpoints(call: Call, i: ListCheckpointsInput) -> CheckpointPage:
    """A thread's checkpoints newest first, with their pending writes, filtered by namespace,
    id, metadata and `before` (LangGraph's `get_tuple` and `list`)."""
    return await call.ns.threads.page(i)


LIST_CHECKPOINTS = Operation.of(
    list_checkpoints,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/checkpoints/search"),
    effect="reads",
    example={"thread_id": "t-bob"},
)


async def prune_threads(call: Call, i: PruneThreadsInput) -> CheckpointsRemoved:
    """Keep only each namespace's newest checkpoint of the threads (`keep_latest`), or delete
    the threads (LangGraph's `prune` and `delete_thread`)."""
    return await call.ns.threads.prune(i.thread_ids, keep_latest=i.strategy == "keep_latest")


PRUNE_THREADS = Operation.of(
    prune_threads,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/threads/prune"),
    effect="forgets",
    example={"thread_ids": ["t-bob"]},
)


async def delete_runs(call: Call, i: DeleteRunsInput) -> CheckpointsRemoved:
    """Delete the checkpoints the runs wrote, with their writes (LangGraph's
    `delete_for_runs`)."""
    return await call.ns.threads.delete_runs(i.run_ids)


DELETE_RUNS = Operation.of(
    delete_runs,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/runs/delete"),
    effect="forgets",
    example={"run_ids": ["run-bob"]},
)


async def copy_thread(call: Call, i: CopyThreadInput) -> CheckpointsCopied:
    """Copy every checkpoint of a thread, with its writes and ids, into another thread
    (LangGraph's `copy_thread`)."""
    return await call.ns.threads.copy(i.source_thread_id, i.target_thread_id)


COPY_THREAD = Operation.of(
    copy_thread,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/threads/copy", problems=(413,)),
    effect="writes",
    example={"source_thread_id": "t-bob", "target_thread_id": "t-copy"},
)


async def verify_thread(call: Call, i: VerifyThreadInput) -> ThreadVerified:
    """Check every checkpoint of a thread against its hash and its parent's."""
    return await call.ns.threads.verify(i.thread_id)


VERIFY_THREAD = Operation.of(
    verify_thread,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/threads/verify"),
    effect="reads",
    example={"thread_id": "t-bob"},
)


async def item_expiry(call: Call, i: ItemExpiryInput) -> ItemDeadlines:
    """Set, clear, refresh or read the expiry of LangGraph store items (BatonStore's ttl)."""
    if (i.action == "set") != (i.ttl_seconds is not None):
        raise InvalidInput("ttl_seconds", "is given with action set, and only then")
    for ref in i.refs:
        check_ref(ref, call.ns.limits.max_ref_length, "refs")
        if not ref.startswith(f"{STORE_SCOPE}/"):
            raise InvalidInput(
                "refs", f"{ref} is not an item of LangGraph's store ({STORE_SCOPE}/…)"
            )
    return ItemDeadlines(
        deadlines=await call.ns.item_expiry.change(i.refs, i.action, i.ttl_seconds)
    )


async def reaches_items(call: Call, i: ItemExpiryInput) -> list[Need]:
    access: Literal["read", "write"] = "read" if i.action in ("refresh", "read") else "write"
    return [record(ref, access) for ref in i.refs]


ITEM_EXPIRY = Operation.of(
    item_expiry,
    tag=LANGGRAPH,
    rest=Route("POST", "/v1/langgraph/store/expiry"),
    effect="writes",
    guard=Guard(reaches_items),
    example={"refs": ["langgraph/m/x"], "action": "read"},
)


# The table ----------------------------------------------------------------------------------


# Every entry, in the order tools and routes are listed.
TABLE: tuple[Operation[Any, Any], ...] = (
    REMEMBER,
    READ_RECORD,
    LIST_RECORDS,
    RECALL,
    HISTORY,
    OUTCOMES,
    RECORD_OUTCOME,
    MEMORY_STATS,
    HANDOFF,
    LIST_HANDOFFS,
    GET_HANDOFF,
    RESUME,
    COMPLETE,
    RELEASE,
    FAIL,
    REQUEUE,
    AGENTS,
    AGENT_AS_OF,
    NOTICES,
    SET_WEBHOOK,
    WEBHOOK,
    DROP_WEBHOOK,
    START_SESSION,
    END_SESSION,
    LIST_SESSIONS,
    MEMORY_RESUME_HERE,
    GET_SESSION,
    CONTEXT,
    ENRICH,
    OBSERVE,
    MEMORY_FILE_HISTORY,
    MEMORY_PATTERNS,
    SAVE_MEMORY,
    MEMORY_UPDATE,
    MEMORY_CONSOLIDATE,
    RECALL_MEMORIES,
    SMART_SEARCH,
    MEMORY_FORGET,
    AUDIT,
    SET_GRANTS,
    GRANTS,
    PUT_CHECKPOINT,
    PUT_WRITES,
    LIST_CHECKPOINTS,
    PRUNE_THREADS,
    DELETE_RUNS,
    COPY_THREAD,
    VERIFY_THREAD,
    ITEM_EXPIRY,
)
# Every operation offered, views included (each right after the operation it views).
OPERATIONS = tuple(offered for entry in TABLE for offered in entry.offered())
BY_NAME = {operation.name: operation for operation in OPERATIONS}
