"""Typed results returned by the store and serialised as-is by the REST API, and the base
of every operation's input."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec

from baton.server.model.validation import AGENT, SOME_TEXT, TEXT

OutcomeKind = Literal["success", "failure"]
MAX_SECONDS = 10 * 365 * 86_400  # expiries and leases: ten years at most
MAX_AUDIT = 1000  # audit entries in one read
PageSize = Annotated[int, msgspec.Meta(ge=1)]  # at most BATON_MAX_PAGE_SIZE (the stores check)
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
MAX_NOTE = 4000  # a note, a reason, an error's text
AgentName = Annotated[str, msgspec.Meta(pattern=AGENT)]
SomeText = Annotated[str, msgspec.Meta(pattern=SOME_TEXT)]  # not blank, no control characters


class Input(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An operation's input (``baton.server.operations``): unknown fields are refused on
    every surface."""


class Contest(msgspec.Struct, kw_only=True):
    """Versions of a record written without seeing each other (both read v3, both wrote):
    ``versions`` stand side by side, each built on ``base`` or a later version the others
    did not see. A write that names all of them in ``based_on`` settles it, as does an
    outcome recorded on the record."""

    base: int
    versions: list[int]


class Remembered(msgspec.Struct, kw_only=True):
    """The version a ``remember`` call appended, and the record's contest after it."""

    ref: str
    version: int
    hash: str
    prev_hash: str
    superseded: int | None
    created_at: str
    contested: Contest | None = None


class Tombstone(msgspec.Struct, kw_only=True):
    """Left in place of a forgotten version's value: its hash covers the original hash."""

    at: str
    by: str
    reason: str
    hash: str


class RecordVersion(msgspec.Struct, kw_only=True):
    """One version of a record. ``confidence`` is the current one for the newest version and
    the one it had when it was superseded for older versions."""

    ref: str
    version: int
    value: Any
    author: str
    session: str | None
    created_at: str
    tags: list[str]
    confidence: float
    hash: str
    prev_hash: str
    superseded_by: int | None = None
    current_version: int
    forgotten: Tombstone | None = None
    contested: Contest | None = None  # the record's, whichever version this is


class RecordPage(msgspec.Struct, kw_only=True):
    """A page of current versions in ref order; pass ``next_cursor`` back for the next page."""

    records: list[RecordVersion]
    next_cursor: str | None


class HistoryEntry(RecordVersion, kw_only=True):
    """A version in a history listing, with whether its hash and its link verify."""

    chain_ok: bool


class History(msgspec.Struct, kw_only=True):
    ref: str
    current_version: int
    confidence: float
    successes: int
    failures: int
    versions: list[HistoryEntry]
    contested: Contest | None = None


class OutcomeEntry(msgspec.Struct, kw_only=True):
    """One confidence move in a record's hash-chained outcomes log."""

    ref: str
    seq: int
    version: int
    outcome: OutcomeKind
    outcome_ref: str
    note: str | None
    agent: str
    session: str | None
    handoff_id: str | None
    created_at: str
    before: float
    after: float
    hash: str
    prev_hash: str


class StaleOutcome(msgspec.Struct, kw_only=True):
    """A record the outcome moved at a newer version than the caller's session last read:
    the decision was made on ``seen_version``; the confidence moved on ``moved_version``."""

    ref: str
    seen_version: int
    moved_version: int


class OutcomeReport(msgspec.Struct, kw_only=True):
    """The confidence moves of one outcome, and the packet it closed, if any."""

    outcome: OutcomeKind
    outcome_ref: str
    moves: list[OutcomeEntry]
    handoff: Packet | None = None
    stale: list[StaleOutcome] = []
    settled: list[str] = []  # the refs whose contest the outcome settled


class BrokenLink(msgspec.Struct, kw_only=True):
    """A place where a chain does not verify: which record, which chain, which position."""

    ref: str
    chain: Literal["versions", "outcomes"]
    version: int
    # unindexed: stored, but hidden from listings; head: the record's head disagrees with
    # its chains (a set-back version, a wrong hash, confidence or outcome counter)
    kind: Literal["hash", "link", "unindexed", "head"]
    expected: str
    found: str


class Stats(msgspec.Struct, kw_only=True):
    namespace: str
    refs: int
    versions: int
    agents: int
    outcomes: int
    average_confidence: float | None
    verified: bool = False  # verification ran and found every chain whole
    checked_versions: int | None = None
    checked_outcomes: int | None = None
    broken: list[BrokenLink] | None = None
    handoffs: dict[str, int] | None = None  # packets by state, where asked for


SessionStatus = Literal["active", "completed", "abandoned"]


class Session(msgspec.Struct, kw_only=True):
    """A working session: where it ran, what it was about, and the refs it read or wrote
    (with the version it last saw of each)."""

    id: str
    agent: str
    project: str | None = None
    cwd: str | None = None
    status: SessionStatus = "active"
    started_at: str
    ended_at: str | None = None
    last_activity_at: str | None = None
    title: str | None = None
    summary: str | None = None
    concepts: list[str] = []
    files: list[str] = []
    observation_count: int = 0
    touched: dict[str, int] = {}


class SessionEnded(msgspec.Struct, kw_only=True):
    """``ended`` is False for an unknown or already ended session (nothing changed)."""

    ended: bool
    session: Session | None


class Observation(msgspec.Struct, kw_only=True):
    """One hook event of a coding agent, compressed without an LLM."""

    id: str
    session: str
    agent: str
    project: str
    cwd: str
    hook_type: str
    type: str
    title: str
    narrative: str
    files: list[str]
    timestamp: str
    created_at: str


class Observed(msgspec.Struct, kw_only=True):
    observation: Observation
    deduplicated: bool


class RecallHit(msgspec.Struct, kw_only=True):
    """A search hit: a saved memory or an observation."""

    id: str
    kind: Literal["memory", "observation"]
    score: float
    title: str
    text: str
    project: str | None
    session: str | None = None
    type: str | None = None
    created_at: str | None = None
    version: int | None = None
    concepts: list[str] = []
    files: list[str] = []


class ResumeHere(msgspec.Struct, kw_only=True):
    """The "where were we" answer: structured fields and the text to show."""

    project_path: str
    found: bool
    fallback: bool
    empty: bool
    session: Session | None
    question: str | None
    files: list[str]
    recalled: list[RecallHit]
    next_step: str
    text: str


# -- handoffs ---------------------------------------------------------------------------------

PacketState = Literal["held", "queued", "claimed", "done", "failed", "expired"]
# When a new packet becomes claimable: at once, or once the sender's session has ended.
Delivery = Literal["now", "session_end"]
PACKET_STATES: tuple[PacketState, ...] = get_args(PacketState)


class PinInput(Input, kw_only=True):
    ref: str
    version: Annotated[int, msgspec.Meta(ge=1)] | None = None  # none: the current one


class HandoffInput(Input, kw_only=True):
    """A packet for ``to``. Without ``pins``, everything your session touched is pinned.
    ``deliver: session_end`` holds it until your session ends (claimable then, not before)."""

    to: AgentName
    summary: SomeText
    next: list[SomeText] = []
    open: list[SomeText] = []
    pins: list[PinInput] | None = None
    expires_in: Seconds | None = None
    note: Annotated[str, msgspec.Meta(max_length=MAX_NOTE, pattern=TEXT)] | None = None
    deliver: Delivery = "now"


class Pin(msgspec.Struct, kw_only=True):
    """A record version a packet was built on."""

    ref: str
    version: int


class Transition(msgspec.Struct, kw_only=True):
    """One entry of a packet's log."""

    at: str
    agent: str
    from_state: str = msgspec.field(name="from")
    to_state: str = msgspec.field(name="to")
    reason: str


class Packet(msgspec.Struct, kw_only=True):
    """A handoff packet: what one agent leaves for another."""

    id: str
    from_agent: str = msgspec.field(name="from")
    to_agent: str = msgspec.field(name="to")
    summary: str
    next: list[str]
    open: list[str]
    pins: list[Pin]
    note: str | None
    session: str | None
    state: PacketState
    created_at: str
    updated_at: str
    expires_at: str | None
    lease_until: str | None
    claimed_by: str | None
    deliveries: int
    redeliveries: int
    error: str | None
    log: list[Transition] | None = None


class ResolvedPin(msgspec.Struct, kw_only=True):
    """A pin with the pinned version's content; ``stale`` when the record has moved on."""

    ref: str
    version: int
    current_version: int
    stale: bool
    value: Any
    author: str
    confidence: float
    created_at: str
    contested: Contest | None = None  # the record's now


class PinThen(msgspec.Struct, kw_only=True):
    """A pin as it stood at a moment: the version pinned and the one current then (null
    when the record had none yet)."""

    ref: str
    version: int
    current_version: int | None
    stale: bool


class ClaimedThen(msgspec.Struct, kw_only=True):
    """A packet an agent held (claimed) at a moment, since ``claimed_at``; ``packet`` is as
    it is now (its state and log say what happened after)."""

    packet: Packet
    claimed_at: str
    pins: list[PinThen]


class Sighting(msgspec.Struct, kw_only=True):
    """A record version a session read or wrote, and when it last did."""

    ref: str
    version: int
    session: str
    at: str


class AgentThen(msgspec.Struct, kw_only=True):
    """What an agent had in front of it at ``as_of``: the packets it held then with their
    pins as they stood, and the record versions its sessions open then had last read or
    written by then."""

    agent: str
    as_of: str
    claimed: list[ClaimedThen]
    seen: list[Sighting]


class Notice(msgspec.Struct, kw_only=True):
    """A pin of one of the agent's packets moved on: ``ref`` pinned at ``pinned_version``
    got ``version``, written by ``author`` at ``at``. ``id`` orders notices (pass the last
    one seen as ``after``); ``event`` names the write's activity event (a notice can come
    twice after a crash: the same ``event`` and ``packet``)."""

    id: str
    kind: Literal["pin_moved"] = "pin_moved"
    packet: str
    ref: str
    pinned_version: int
    version: int
    author: str
    at: str
    event: str


class NoticePage(msgspec.Struct, kw_only=True):
    """Notices after the one asked for, oldest first; ``last`` is the id to ask after next
    (the one asked for when there are none)."""

    agent: str
    notices: list[Notice]
    last: str


class WebhookDelivery(msgspec.Struct, kw_only=True):
    """One attempt to deliver a notice to an agent's webhook."""

    notice: str
    attempt: int
    at: str
    status: int | None  # the HTTP status answered; null when nothing answered
    error: str | None
    delivered: bool


class Webhook(msgspec.Struct, kw_only=True):
    """An agent's webhook (its secret is shown only when it is set) and its newest
    deliveries, newest first."""

    agent: str
    url: str | None
    created_at: str | None
    secret: str | None = None
    deliveries: list[WebhookDelivery] = []


class VersionNote(msgspec.Struct, kw_only=True):
    """Who wrote one version of a record, in which session, when, and its confidence."""

    version: int
    author: str
    session: str | None
    created_at: str
    confidence: float


class StalePin(msgspec.Struct, kw_only=True):
    """A pin whose record moved on since the packet was made, explained: both values, the
    change between them as an RFC 6902 JSON Patch (``patch``, pinned -> current; null when
    the two are over 16 KiB of JSON together), how many versions were written since
    (``moves``) and who wrote the last few (``versions``, oldest first), the outcomes
    recorded on the record since the packet was made (the last few), and the confidence
    then and now. A receiver whose grants do not cover the record
    gets the pinned value only: ``current_value``, ``patch`` and ``current_confidence`` null,
    ``versions`` and ``outcomes`` empty."""

    ref: str
    pinned_version: int
    current_version: int
    moves: int
    pinned_value: Any
    current_value: Any
    patch: list[dict[str, Any]] | None  # None past 16 KiB of JSON (analysis.PATCH_BYTES)
    versions: list[VersionNote]
    outcomes: list[OutcomeEntry]
    pinned_confidence: float
    current_confidence: float | None  # None with current_value: a record the receiver may not read


class Resumed(msgspec.Struct, kw_only=True):
    """The answer to ``resume``: the claimed packet, or ``packet: null`` when none waits."""

    agent: str
    packet: Packet | None
    pins: list[ResolvedPin]
    stale: list[StalePin]
    lease_until: str | None
    message: str


class PacketPage(msgspec.Struct, kw_only=True):
    packets: list[Packet]
    next_cursor: str | None


class AgentSummary(msgspec.Struct, kw_only=True):
    """An agent's inbox at a glance."""

    agent: str
    queued: int
    claimed: int
    failed: int
    oldest_queued_age_seconds: float | None
    held: int = 0  # waiting for their sender's session to end


class SweepReport(msgspec.Struct, kw_only=True):
    """What one maintenance sweep did."""

    requeued: list[str]
    failed: list[str]
    expired: list[str]
    repaired: list[str]
    sent: list[str] = []  # held packets whose sender's session had ended


class Event(msgspec.Struct, kw_only=True):
    """One entry of a namespace's activity stream."""

    id: str
    at: str
    kind: str
    agent: str
    text: str
    ref: str | None
    packet: str | None
    version: int | None = None  # the version of ref a remember event announces


class AuditEntry(msgspec.Struct, kw_only=True):
    id: str
    at: str
    agent: str
    action: str
    target: str
    reason: str
    details: dict[str, Any]
