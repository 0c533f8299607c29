"""What a store hands its topology (``baton.server.stores.topology``) to write: one version of a
record, one new packet. Plain data and the helpers both topologies use."""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from redis.typing import EncodableT

from baton.server.model.clock import iso, now_us
from baton.server.model.errors import InvalidInput
from baton.server.model.keys import Keys
from baton.server.model.models import Contest, Packet, PacketState, Pin, RecordVersion, Transition
from baton.server.retrieval.search import IndexCall

# How many fresh packet ids a handoff tries (2^32 ids: one taken is practically never seen).
MAX_ID_ATTEMPTS = 20
# Pins asked for, as (ref, version or None for the current one).
Wanted = builtins.list[tuple[str, int | None]]


@dataclass(frozen=True, slots=True)
class VersionWrite:
    """One attempt at writing a version, as :meth:`RecordStore.remember` hands it to the
    topology (``baton.server.stores.topology``): ``keys`` and ``args`` are ``write_version.lua``'s,
    the rest what follows the write."""

    ref: str
    agent: str
    session: str | None
    tags: list[str]
    index: IndexCall | None
    keys: list[str]
    args: list[EncodableT]
    token: str | None = None  # the agent token it is written with (baton.server.stores.token_bytes)
    now_us: int = field(default_factory=now_us)

    @property
    def hash(self) -> str:
        """The new version's sha256 (``write_version.lua``'s ARGV[2])."""
        return str(self.args[1])

    @property
    def prev_hash(self) -> str:
        """The hash it chains to (``write_version.lua``'s ARGV[7])."""
        return str(self.args[6])

    @property
    def saw(self) -> str:
        """The versions its writer saw (``write_version.lua``'s ARGV[11])."""
        return str(self.args[10])

    @property
    def value_bytes(self) -> int:
        """The size of the value the version holds (``write_version.lua``'s ARGV[8]), which
        the namespace's stored bytes count."""
        value = self.args[7]
        return len(value) if isinstance(value, bytes) else 0


@dataclass(frozen=True, slots=True)
class Planned:
    """A version a store wants written: its record, value, author and what comes with it
    (:meth:`RecordStore.write_all` turns it into a :class:`VersionWrite` on the current
    head)."""

    ref: str
    value: Any
    agent: str
    tags: list[str]
    index: IndexCall | None = None
    session: str | None = None
    confidence: float = 0.5
    # the versions its writer saw ("4,5"), "session" for the one its session last saw, ""
    # for the one it lands on (write_version.lua's ARGV[11])
    saw: str = ""


# How a version is made from its record's current one (None: the record is new); None when
# there is nothing to write to it after all (a memory to supersede was forgotten meanwhile).
Plan = Callable[[RecordVersion | None], Planned | None]


@dataclass(frozen=True, slots=True)
class Command:
    """A plain command that completes a change after its writes (a memory's links, its audit
    entry): ``name``, its one key, then ``args``."""

    name: str
    key: str
    args: tuple[EncodableT, ...]


@dataclass(frozen=True, slots=True)
class Written:
    """What :meth:`Topology.write_versions` did: the new version of each write applied (a
    prefix of the writes: all of them; on a refusal, on one Redis none, on a cluster those
    before the refused one), and the refusal of write ``refused_at`` as ``remember.lua``
    words it without the write's number: ``[0, version, hash]`` (its head moved), ``[-1]``
    (its record was forgotten), ``[2, term, ...]`` (its document's postings not given).
    ``failure``: a follow-up that failed (the writes stand). ``contests``: each applied
    write's record's contest after it (None: uncontested, or not known)."""

    versions: list[int]
    refused_at: int | None = None
    refusal: list[Any] = field(default_factory=list)
    failure: str | None = None
    contests: list[Contest | None] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Seen:
    """A read that a session makes: ``ref`` is noted in its touched set at the version
    found (:meth:`Activity.touch`)."""

    ref: str
    session: str
    agent: str
    now_us: int = field(default_factory=now_us)


def pin_refused(
    wanted: list[tuple[str, int | None]], index: int, current: int | None
) -> InvalidInput:
    """Why pin ``index`` cannot be pinned: its record does not exist (``current`` None), or
    it asks for a version after the current one."""
    ref, version = wanted[index]
    if current is None:
        return InvalidInput(f"pins[{index}].ref", f"no record {ref}")
    return InvalidInput(
        f"pins[{index}].version", f"{ref} has no version {version} (current {current})"
    )


def new_packet_id() -> str:
    return f"h_{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class NewPacket:
    """A checked handoff on its way into the store (its id is chosen per attempt)."""

    from_agent: str
    to_agent: str
    summary: str
    steps: list[str]
    questions: list[str]
    note: str | None
    session: str | None
    created_us: int
    created_at: str
    expires_us: int | None
    held: bool = False  # claimable only once the sender's session ends

    @property
    def state(self) -> PacketState:
        return "held" if self.held else "queued"

    def text(self, packet_id: str) -> str:
        return f"{self.from_agent} handed {packet_id} to {self.to_agent}: {self.summary}"

    def script_call(
        self, keys: Keys, packet_id: str, pins: list[Pin] | None
    ) -> tuple[list[str], list[EncodableT], list[EncodableT]]:
        """The keys and arguments ``create_packet.lua`` takes to store the packet (the first
        ones of ``hand_off.lua``'s), and the packet's fields: its pins field only when
        ``pins`` are resolved already."""
        fields: dict[str, EncodableT] = {
            "id": packet_id,
            "from": self.from_agent,
            "to": self.to_agent,
            "summary": self.summary,
            "next": msgpack.packb(self.steps),
            "open": msgpack.packb(self.questions),
            "note": self.note or "",
            "session": self.session or "",
            "created_at": self.created_at,
            "created_us": self.created_us,
            "expires_us": "" if self.expires_us is None else self.expires_us,
            "deliveries": 0,
            "redeliveries": 0,
            "job_seq": 0,
        }
        if pins is not None:
            fields["pins"] = msgpack.packb([[pin.ref, pin.version] for pin in pins])
        inbox = keys.inbox(self.to_agent)
        keys_ = [
            inbox.packet(packet_id),
            inbox.log(packet_id),
            inbox.held if self.held else inbox.queued,
            inbox.expiring,
            inbox.all,
        ]
        args: list[EncodableT] = [
            packet_id,
            self.created_us,
            fields["expires_us"],
            self.created_at,
            self.from_agent,
            self.state,
        ]
        return keys_, args, [item for pair in fields.items() for item in pair]

    def packet(self, packet_id: str, pins: list[Pin]) -> Packet:
        """The packet as the script stored it, built from what was sent (not read back)."""
        return Packet(
            id=packet_id,
            from_agent=self.from_agent,
            to_agent=self.to_agent,
            summary=self.summary,
            next=self.steps,
            open=self.questions,
            pins=pins,
            note=self.note or None,
            session=self.session,
            state=self.state,
            created_at=self.created_at,
            updated_at=self.created_at,
            expires_at=None if self.expires_us is None else iso(self.expires_us),
            lease_until=None,
            claimed_by=None,
            deliveries=0,
            redeliveries=0,
            error=None,
            log=[
                Transition(
                    at=self.created_at,
                    agent=self.from_agent,
                    from_state="new",
                    to_state="queued",
                    reason="handed off",
                )
            ],
        )
