"""``baton export`` and ``baton import``: a JSON-lines dump of a namespace.

One JSON object a line, each with a ``type``:

- ``record``: a ref's head and every version (all stored fields, values as JSON, tombstones
  for forgotten versions) and its outcomes log — hashes included;
- ``packet``: a handoff packet's fields and transition log;
- ``session``: a session's fields, touched refs, files and observations;
- ``end``, last: how many lines came before it and the sha256 of their text, so a dump cut
  short (even at a line boundary) or edited line by line is refused.

Import reads and checks the whole dump before it writes anything (every line's shape and
types, versions numbered 1..N with the head at N, every hash chain, the end line) and names
the first fault as ``line N: field: …``. Packets come back in their inboxes (queued packets
get their RQ job from the next sweep); search documents are rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgpack
from redis.asyncio.client import Pipeline
from redis.typing import EncodableT, FieldT

from baton.server.maintenance.namespace_removal import (
    clear_namespace,
    namespace_keys,
    token_refunds,
)
from baton.server.maintenance.reindex import reindex
from baton.server.model.errors import BatonError, InvalidInput
from baton.server.model.integrity import OUTCOME_FIELDS, VERSION_FIELDS, ChainChecker
from baton.server.model.keys import NAMESPACES, pinned_member
from baton.server.model.models import PACKET_STATES
from baton.server.model.validation import PACKET_ID_PATTERN, check_agent, check_ref
from baton.server.retrieval.search import LEXICAL
from baton.server.runtime import codec
from baton.server.stores.changes import Command
from baton.server.stores.notices import LIVE
from baton.server.stores.records import BATCH, UNINDEXED_SCOPE
from baton.server.stores.token_bytes import refunds

if TYPE_CHECKING:
    from baton.server.stores.backend import Namespace

BINARY_VERSION_FIELDS = ("value", "tags")
BINARY_PACKET_FIELDS = ("next", "open", "pins")
PROGRESS_LINES = 1000  # lines between two progress reports of an import


def _without_token(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {name: value for name, value in fields.items() if name != b"token"}


def _decode(fields: dict[bytes, bytes], binary: Iterable[str] = ()) -> dict[str, Any]:
    packed = set(binary)
    return {
        key.decode(): msgpack.unpackb(value, raw=False, strict_map_key=False)
        if key.decode() in packed
        else value.decode()
        for key, value in fields.items()
    }


def _encode(fields: dict[str, Any], binary: Iterable[str] = ()) -> dict[FieldT, EncodableT]:
    packed = set(binary)
    return {key: msgpack.packb(value) if key in packed else value for key, value in fields.items()}


async def export(ns: Namespace, scope: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """Every record (in ``scope`` and below, or all), then packets and sessions. A
    version's ``token`` (what it counts against) is this installation's bookkeeping, not
    part of the record: left out."""
    redis, keys = ns.redis, ns.keys
    async for batch in ns.records.candidate_refs(ns.records.check_scope(scope), [], "all", None):
        for ref in batch:
            head = codec.hash_fields(await redis.hgetall(keys.head(ref)))
            if not head:
                continue
            current = int(head[b"version"])
            versions = [
                _decode(_without_token(fields), BINARY_VERSION_FIELDS)
                async for fields in ns.records.versions(ref, current)
            ]
            outcomes = [
                msgpack.unpackb(raw) for raw in await redis.lrange(keys.outcomes(ref), 0, -1)
            ]
            line: dict[str, Any] = {
                "type": "record",
                "ref": ref,
                "head": _decode(head),
                "versions": versions,
                "outcomes": outcomes,
            }
            if ref.startswith(UNINDEXED_SCOPE):  # a memory: its ttl, if it has one
                expires = await redis.zscore(keys.memory_expiry, ref.removeprefix(UNINDEXED_SCOPE))
                if expires is not None:
                    line["expires_us"] = int(expires)
            yield line
    if scope is not None:
        return
    inboxes = codec.hash_fields(await redis.hgetall(keys.handoff_inbox))
    for packet_id, agent in sorted(inboxes.items()):
        fields = codec.hash_fields(
            await redis.hgetall(keys.inbox(agent.decode()).packet(packet_id.decode()))
        )
        log = await redis.lrange(keys.inbox(agent.decode()).log(packet_id.decode()), 0, -1)
        yield {
            "type": "packet",
            "fields": _decode(fields, BINARY_PACKET_FIELDS),
            "log": [msgpack.unpackb(entry) for entry in log],
        }
    for raw_id in codec.members(await redis.zrange(keys.sessions, 0, -1)):
        session_id = raw_id.decode()
        meta = codec.hash_fields(await redis.hgetall(keys.session(session_id)))
        if not meta:
            continue
        observations = []
        for observation_id in await redis.lrange(keys.observations(session_id), 0, -1):
            fields = codec.hash_fields(
                await redis.hgetall(keys.observation(session_id, codec.text(observation_id)))
            )
            observations.append(_decode(fields, ("files", "data")))
        yield {
            "type": "session",
            "id": session_id,
            "meta": _decode(meta, ("concepts",)),
            "touched": _decode(
                codec.hash_fields(await redis.hgetall(keys.session_touched(session_id)))
            ),
            "files": sorted(
                codec.text(f) for f in await redis.smembers(keys.session_files(session_id))
            ),
            "seen": [
                codec.text(s) for s in await redis.lrange(keys.session_seen(session_id), 0, -1)
            ],
            "observations": observations,
        }


async def dump_lines(ns: Namespace, scope: str | None = None) -> AsyncIterator[str]:
    """The dump as text lines (each ending in a newline): :func:`export`'s, then the end."""
    sealed = Seal()
    async for line in export(ns, scope):
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        sealed.add(text)
        yield text
    yield json.dumps(sealed.end()) + "\n"


class Seal:
    """The end line's figures over the lines before it: their count and the sha256 of their
    text (line endings normalised to ``\n``, blank lines skipped)."""

    def __init__(self) -> None:
        self.lines = 0
        self.digest = hashlib.sha256()

    def add(self, text: str) -> None:
        self.lines += 1
        self.digest.update(text.rstrip("\r\n").encode() + b"\n")

    def end(self) -> dict[str, Any]:
        return {"type": "end", "lines": self.lines, "sha256": self.digest.hexdigest()}


def check_record(line: dict[str, Any]) -> str | None:
    """The first broken link of an exported record, described, or None when it verifies."""
    ref = line["ref"]
    versions = ChainChecker(VERSION_FIELDS)
    for version in line["versions"]:
        view = {name: version.get(name) for name in VERSION_FIELDS}
        view["ref"] = ref
        view["session"] = version.get("session") or None
        view["version"] = int(version["version"])
        view["hash"] = version["hash"]
        if "tombstone_hash" in version:
            view["forgotten"] = {
                "at": version["forgotten_at"],
                "by": version["forgotten_by"],
                "reason": version["forgotten_reason"],
                "hash": version["tombstone_hash"],
            }
        for problem in versions.check(view):
            return (
                f"{ref} version {version['version']}: {problem['kind']} expected "
                f"{problem['expected']}, found {problem['found']}"
            )
    outcomes = ChainChecker(OUTCOME_FIELDS)
    for entry in line["outcomes"]:
        for problem in outcomes.check(entry):
            return (
                f"{ref} outcome {entry['seq']}: {problem['kind']} expected "
                f"{problem['expected']}, found {problem['found']}"
            )
    if line["versions"] and line["head"].get("hash") != line["versions"][-1]["hash"]:
        return f"{ref}: head hash is not the last version's hash"
    return None


# What each line type must hold, and of which JSON type, checked before anything is written.
Shape = dict[str, type | tuple[type, ...]]  # field name -> the JSON type(s) it must have
SHAPES: dict[str, Shape] = {
    "record": {"ref": str, "head": dict, "versions": list, "outcomes": list},
    "packet": {"fields": dict, "log": list},
    "session": {"id": str, "meta": dict, "touched": dict, "files": list, "observations": list},
}
PACKET_FIELDS: Shape = {"id": str, "to": str, "state": str, "created_us": (str, int)}
OBSERVATION_FIELDS: Shape = {  # every field Baton writes and reads back
    "id": str,
    "session": str,
    "agent": str,
    "project": str,
    "cwd": str,
    "hook_type": str,
    "type": str,
    "title": str,
    "narrative": str,
    "files": list,
    "timestamp": str,
    "created_at": str,
}
# A contested record's versions in contest, as its head holds them (write_version.lua).
CONTESTED = re.compile(r"[0-9]+(,[0-9]+)+")
# One sighting of a session's log (touch.lua): when, which ref, which version.
SIGHTING = re.compile(r"[0-9T:.Z-]+\t[^\t]+\t[0-9]+")
# The fields of a stored hash that hold structured data (msgpack); every other one is text.
STRUCTURED = {
    "head": (),
    "version": BINARY_VERSION_FIELDS,
    "packet": BINARY_PACKET_FIELDS,
    "meta": ("concepts",),
    "touched": (),
    "observation": ("files", "data"),
}


class Refusal(Exception):
    """What is wrong with a dump line: the field at fault and why."""


def _check_types(item: dict[str, Any], shape: Shape, where: str) -> None:
    for name, kind in shape.items():
        if not isinstance(item.get(name), kind):
            raise Refusal(f"{where}{name} is missing or not a {_names(kind)}")


def _check_hash(fields: dict[str, Any], kind: str, where: str) -> None:
    """A stored hash's fields: strings or numbers, but for its structured ones."""
    for name, value in fields.items():
        if name in STRUCTURED[kind]:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise Refusal(f"{where}{name} is a {_json_name(value)}, not a string or number")


def _whole(value: Any, where: str) -> int:
    """``value`` as a whole number (hash fields come back as text), or a refusal."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise Refusal(f"{where} is not a whole number")
    try:
        return int(value)
    except ValueError:
        raise Refusal(f"{where} is not a whole number ({value!r})") from None


def _check_record(line: dict[str, Any]) -> None:
    ref = line["ref"]
    try:
        check_ref(ref)
    except BatonError as error:
        raise Refusal(error.detail) from None
    _check_hash(line["head"], "head", "head.")
    if not line["versions"]:
        raise Refusal("versions is empty (a record has at least one)")
    for index, version in enumerate(line["versions"]):
        where = f"versions[{index}]."
        if not isinstance(version, dict):
            raise Refusal(f"versions[{index}] is not an object")
        _check_hash(version, "version", where)
        if _whole(version.get("version"), where + "version") != index + 1:
            raise Refusal(f"{where}version is {version.get('version')}, expected {index + 1}")
        tags = version.get("tags")
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            raise Refusal(f"{where}tags is not a list of strings")
        if not isinstance(version.get("author"), str):
            raise Refusal(f"{where}author is missing or not a string")
    head = line["head"]
    if "contested" in head or "contested_base" in head:
        if not (isinstance(head.get("contested"), str) and CONTESTED.fullmatch(head["contested"])):
            raise Refusal("head.contested is not the contested versions, like '4,5'")
        _whole(head.get("contested_base"), "head.contested_base")
    if _whole(line["head"].get("version"), "head.version") != len(line["versions"]):
        raise Refusal(
            f"head.version is {line['head'].get('version')} but the dump has versions "
            f"1..{len(line['versions'])}"
        )
    if not all(isinstance(entry, dict) for entry in line["outcomes"]):
        raise Refusal("outcomes holds something other than objects")
    try:
        problem = check_record(line)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise Refusal(f"{ref}: malformed record ({type(error).__name__}: {error})") from None
    if problem is not None:
        raise Refusal(problem)


def _check_packet(line: dict[str, Any]) -> None:
    fields = line["fields"]
    _check_types(fields, PACKET_FIELDS, "fields.")
    _check_hash(fields, "packet", "fields.")
    if not PACKET_ID_PATTERN.fullmatch(fields["id"]):
        raise Refusal(f"fields.id {fields['id']!r} is not a packet id (h_ and 8 hex digits)")
    try:
        check_agent(fields["to"], field="fields.to")
    except BatonError as error:
        raise Refusal(error.detail) from None
    if fields["state"] not in PACKET_STATES:
        raise Refusal(f"fields.state {fields['state']!r} is not one of {', '.join(PACKET_STATES)}")
    _whole(fields["created_us"], "fields.created_us")
    if fields.get("expires_us"):
        _whole(fields["expires_us"], "fields.expires_us")


def _check_session(line: dict[str, Any]) -> None:
    meta = line["meta"]
    _check_hash(meta, "meta", "meta.")
    if not isinstance(meta.get("agent"), str) or not meta["agent"]:
        raise Refusal("meta.agent is missing")
    started = meta.get("started_at")
    if not isinstance(started, str):
        raise Refusal("meta.started_at is missing")
    try:
        datetime.fromisoformat(started)
    except ValueError:
        raise Refusal(f"meta.started_at {started!r} is not an ISO 8601 time") from None
    concepts = meta.get("concepts", [])
    if not isinstance(concepts, list) or not all(isinstance(c, str) for c in concepts):
        raise Refusal("meta.concepts is not a list of strings")
    _check_hash(line["touched"], "touched", "touched.")
    if not all(isinstance(each, str) for each in line["files"]):
        raise Refusal("files is not a list of strings")
    seen = line.get("seen", [])
    if not isinstance(seen, list) or not all(
        isinstance(each, str) and SIGHTING.fullmatch(each) for each in seen
    ):
        raise Refusal("seen is not a list of 'time TAB ref TAB version' sightings")
    for index, observation in enumerate(line["observations"]):
        where = f"observations[{index}]."
        if not isinstance(observation, dict):
            raise Refusal(f"observations[{index}] is missing or not a dict")
        _check_types(observation, OBSERVATION_FIELDS, where)
        _check_hash(observation, "observation", where)


CHECKS = {"record": _check_record, "packet": _check_packet, "session": _check_session}


def _problem(line: Any) -> str | None:
    """What is wrong with one parsed line, or None."""
    if not isinstance(line, dict) or line.get("type") not in SHAPES:
        kind = line.get("type") if isinstance(line, dict) else type(line).__name__
        return f"unknown line type {kind!r} (record, packet, session or end)"
    try:
        _check_types(line, SHAPES[line["type"]], "")
        expires = line.get("expires_us")
        if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int)):
            raise Refusal("expires_us is not a whole number (microseconds since the epoch)")
        CHECKS[line["type"]](line)
    except Refusal as refusal:
        return str(refusal)
    return None


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__


def _json_name(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    names = {dict: "object", list: "list", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def read_dump(lines: Iterable[str], *, sealed: bool = True) -> list[dict[str, Any]]:
    """Parse a whole dump and check it before anything is written: every line (shape,
    types, versions, every hash chain) and the end line (count and sha256 of the lines
    before it; with ``sealed`` false a dump without one is taken as it is, as dumps made
    before Baton wrote end lines are). Raise InvalidInput naming the first fault as
    ``line N: …``; return the lines without the end line."""
    parsed: list[dict[str, Any]] = []
    seal = Seal()
    end: dict[str, Any] | None = None
    number = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if end is not None:
            raise _refused(number, "a line after the end line")
        try:
            line = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:  # nested past json's reach
            raise _refused(number, f"not JSON ({error})") from None
        if isinstance(line, dict) and line.get("type") == "end":
            end = line
            if line != seal.end():
                raise _refused(
                    number,
                    f"the end line says {line.get('lines')} lines with sha256 "
                    f"{str(line.get('sha256'))[:12]}…, the dump has {seal.lines} with "
                    f"{seal.digest.hexdigest()[:12]}… (edited or cut)",
                )
            continue
        if (problem := _problem(line)) is not None:
            raise _refused(number, problem)
        seal.add(text)
        parsed.append(line)
    if end is None and sealed:
        raise _refused(
            number + 1,
            "the dump ends without its end line: cut short, or made before Baton wrote one "
            "(then pass --unsealed)",
        )
    return parsed


def _refused(number: int, problem: str) -> InvalidInput:
    return InvalidInput("dump", f"line {number}: {problem}; nothing was written")


async def namespace_is_empty(ns: Namespace) -> bool:
    """Whether the namespace holds no record, session or packet."""
    pipe = ns.redis.pipeline(transaction=False)
    pipe.zcard(ns.keys.refs)
    pipe.zcard(ns.keys.sessions)
    pipe.zcard(ns.keys.handoffs)
    return not any(await pipe.execute())


async def import_dump(
    ns: Namespace,
    lines: list[dict[str, Any]],
    *,
    atomic: bool = False,
    merge: bool = False,
    replace: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    index: bool = True,
) -> dict[str, int]:
    """Write a checked dump (see :func:`read_dump`) into ``store``'s namespace. With
    ``atomic`` (and a single Redis, not a cluster), all of it in one MULTI/EXEC: a failure
    part-way writes nothing. With ``replace`` everything the namespace held goes first (in
    that same transaction on a single Redis, so a failed import leaves it as it was). With
    ``merge``, each record, packet and session of the dump replaces the one with its id
    (what the namespace held of it is cleared first, in the same transaction); with
    neither, the namespace is taken to hold none of them. ``on_progress(lines_done,
    lines_total)`` is called as lines are prepared and once they are written.

    The search index is rebuilt from what the namespace then holds, in bounded batches
    (``baton.server.maintenance.reindex``), rather than inside the transaction: derived data,
    it would
    hold every document's terms and posting keys at once (an import of 7 MB of prose
    peaked at 600 MB). Until the rebuild ends the index is marked as built by no rules, so
    an import cut short there is named by ``baton status`` and finished by ``baton
    reindex``; nothing of the data is lost. ``index=False`` leaves the rebuild to the
    caller (``baton import`` shows its progress)."""
    await ns.admit()  # a new namespace counts against BATON_MAX_NAMESPACES like any other
    single = atomic and ns.topology.transactions
    stale: list[bytes] = []
    given_back: list[Command] = []  # what the stale keys' versions counted against tokens
    if replace and single:  # deleted inside the import's own transaction
        stale = await namespace_keys(ns)
        given_back = await token_refunds(ns, stale)
    elif replace:
        await clear_namespace(ns)
    held = await _held(ns, lines) if merge else Held()
    counts = {"records": 0, "versions": 0, "outcomes": 0, "packets": 0, "sessions": 0}
    done = 0
    batch = len(lines) or 1 if single else BATCH
    for start in range(0, max(len(lines), 1), batch):
        queued = ns.batch(transaction=single)
        pipe = queued.pipe
        for first in range(0, len(stale), 1000):
            pipe.delete(*stale[first : first + 1000])
        for command in given_back:
            pipe.execute_command(command.name, command.key, *command.args)
        if start == 0:  # built by no rules until the rebuild below ends (baton status says)
            pipe.hdel(ns.keys.search_stats, LEXICAL)
        stale, given_back = [], []
        for line in lines[start : start + batch]:
            if line["type"] == "record":
                if line["ref"] in held.versions:
                    _queue_clear_record(ns, pipe, line, held)
                _queue_record(ns, pipe, line)
                counts["records"] += 1
                counts["versions"] += len(line["versions"])
                counts["outcomes"] += len(line["outcomes"])
            elif line["type"] == "packet":
                if (agent := held.packet_agents.get(line["fields"]["id"])) is not None:
                    _queue_clear_packet(ns, pipe, line["fields"]["id"], agent)
                _queue_packet(ns, pipe, line)
                counts["packets"] += 1
            else:
                if line["id"] in held.observations:
                    _queue_clear_session(ns, pipe, line["id"], held.observations[line["id"]])
                _queue_session(ns, pipe, line)
                counts["sessions"] += 1
            done += 1
            if on_progress and done % PROGRESS_LINES == 0:
                on_progress(done, len(lines))
        pipe.sadd(NAMESPACES, ns.name)
        await queued.execute()
        if on_progress:
            on_progress(done, len(lines))
    if index:
        await reindex(ns)
    return counts


@dataclass
class Held:
    """What a namespace holds of a dump's ids: each record's current version and value
    bytes (its count in the namespace's quota), each session's observation ids, and the
    inbox each packet is in."""

    versions: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    by_token: dict[str, list[tuple[str | None, int]]] = field(default_factory=dict)
    observations: dict[str, list[str]] = field(default_factory=dict)
    packet_agents: dict[str, str] = field(default_factory=dict)


async def _held(ns: Namespace, lines: list[dict[str, Any]]) -> Held:
    refs = [line["ref"] for line in lines if line["type"] == "record"]
    packets = [line["fields"]["id"] for line in lines if line["type"] == "packet"]
    sessions = [line["id"] for line in lines if line["type"] == "session"]
    pipe = ns.redis.pipeline(transaction=False)
    for ref in refs:
        pipe.hget(ns.keys.head(ref), "version")
    for packet_id in packets:
        pipe.hget(ns.keys.handoff_inbox, packet_id)
    for session_id in sessions:
        pipe.exists(ns.keys.session(session_id))
        pipe.lrange(ns.keys.observations(session_id), 0, -1)
    answers = await pipe.execute()
    versions, agents = answers[: len(refs)], answers[len(refs) : len(refs) + len(packets)]
    pairs = answers[len(refs) + len(packets) :]
    held = Held()
    for ref, version in zip(refs, versions, strict=True):
        if version is not None:
            held.versions[ref] = int(version)
    for ref, current in held.versions.items():
        held.stored[ref], held.by_token[ref] = 0, []
        for start in range(1, current + 1, BATCH):
            sizes = ns.redis.pipeline(transaction=False)
            for number in range(start, min(start + BATCH, current + 1)):
                sizes.hstrlen(ns.keys.version(ref, number), "value")
                sizes.hget(ns.keys.version(ref, number), "token")
            read = await sizes.execute()
            held.stored[ref] += sum(read[::2])
            held.by_token[ref] += [
                (codec.text(token), size) for size, token in zip(read[::2], read[1::2], strict=True)
            ]
    for packet_id, agent in zip(packets, agents, strict=True):
        if agent is not None:
            held.packet_agents[packet_id] = codec.text(agent)
    for session_id, exists, observation_ids in zip(sessions, pairs[::2], pairs[1::2], strict=True):
        if exists or observation_ids:
            held.observations[session_id] = [codec.text(each) for each in observation_ids]
    return held


def _queue_clear_record(ns: Namespace, pipe: Pipeline, line: dict[str, Any], held: Held) -> None:
    """Clear the namespace's copy of the dump's record (every version, the head, outcomes,
    its bytes off the namespace's count) so the dump's copy replaces it instead of mixing
    with it (its search document follows in the rebuild after)."""
    keys, ref = ns.keys, line["ref"]
    versions = [keys.version(ref, number) for number in range(1, held.versions[ref] + 1)]
    pipe.delete(keys.head(ref), keys.outcomes(ref), *versions)
    pipe.hincrby(keys.search_stats, "bytes", -held.stored[ref])
    for command in refunds(held.by_token[ref]):  # what its versions counted against tokens
        pipe.execute_command(command.name, command.key, *command.args)
    if ref.startswith(UNINDEXED_SCOPE):  # a memory, perhaps with a ttl
        pipe.zrem(keys.memory_expiry, ref.removeprefix(UNINDEXED_SCOPE))


def _queue_clear_packet(ns: Namespace, pipe: Pipeline, packet_id: str, agent: str) -> None:
    """Clear the namespace's copy of the dump's packet, in the inbox it is in (perhaps not
    the dump's): its hash, its log, and its place in that inbox's sets."""
    inbox = ns.keys.inbox(agent)
    pipe.delete(inbox.packet(packet_id), inbox.log(packet_id))
    for inbox_set in inbox.sets:
        pipe.zrem(inbox_set, packet_id)


def _queue_clear_session(
    ns: Namespace, pipe: Pipeline, session_id: str, observation_ids: list[str]
) -> None:
    """Clear the namespace's copy of the dump's session: its hashes and lists, and each of
    its observations."""
    keys = ns.keys
    pipe.delete(
        keys.session(session_id),
        keys.session_touched(session_id),
        keys.session_seen(session_id),
        keys.session_notices(session_id),
        keys.session_files(session_id),
        keys.observations(session_id),
        *(keys.observation(session_id, each) for each in observation_ids),
    )
    if observation_ids:
        pipe.hdel(keys.observation_sessions, *observation_ids)


def _queue_record(ns: Namespace, pipe: Pipeline, line: dict[str, Any]) -> None:
    keys, ref = ns.keys, line["ref"]
    pipe.zadd(keys.refs, {ref: 0})
    pipe.hset(keys.head(ref), mapping=line["head"])
    stored = 0
    for version in line["versions"]:
        value = msgpack.packb(version["value"])
        fields = {**_encode(version, BINARY_VERSION_FIELDS), "value": value}
        fields.pop("token", None)  # what a token wrote is this installation's count, not data
        pipe.hset(keys.version(ref, int(version["version"])), mapping=fields)
        stored += len(value)
        pipe.sadd(keys.agents, version["author"])
        for tag in version["tags"]:
            pipe.sadd(keys.tag(tag), ref)
    pipe.hincrby(keys.search_stats, "bytes", stored)  # the namespace's stored values
    for entry in line["outcomes"]:
        pipe.rpush(keys.outcomes(ref), msgpack.packb(entry))
    if line.get("expires_us") is not None:  # a memory's ttl
        pipe.zadd(keys.memory_expiry, {ref.removeprefix(UNINDEXED_SCOPE): line["expires_us"]})
    last = line["versions"][-1] if line["versions"] else None
    if last is None or "tombstone_hash" in last:
        return
    if ref.startswith(UNINDEXED_SCOPE):
        memory_id = ref.removeprefix(UNINDEXED_SCOPE)
        for source in last["value"].get("source_observation_ids", []):
            pipe.sadd(ns.keys.observation_memories(source), memory_id)


def _queue_packet(ns: Namespace, pipe: Pipeline, line: dict[str, Any]) -> None:
    keys, fields = ns.keys, line["fields"]
    packet_id, agent, state = fields["id"], fields["to"], fields["state"]
    created = int(fields["created_us"])
    inbox = keys.inbox(agent)
    pipe.hset(inbox.packet(packet_id), mapping=_encode(fields, BINARY_PACKET_FIELDS))
    for entry in line["log"]:
        pipe.rpush(inbox.log(packet_id), msgpack.packb(entry))
    pipe.hset(keys.handoff_inbox, packet_id, agent)
    pipe.zadd(keys.handoffs, {packet_id: created})
    pipe.zadd(inbox.all, {packet_id: created})
    pipe.sadd(keys.inboxes, agent)
    # A held packet waits for its sender's session again; a claimed one's old lease is swept
    # soon; a done one is in no state's set.
    if state in inbox.STATES:
        pipe.zadd(inbox.of(state), {packet_id: created})
    if fields.get("expires_us") and state in LIVE:
        pipe.zadd(inbox.expiring, {packet_id: int(fields["expires_us"])})
    if state in LIVE and fields.get("pins"):  # the pins' index: told when they move
        members = {pinned_member(ref, packet_id): 0 for ref, _ in fields["pins"]}
        pipe.zadd(keys.pinned, members)


def _queue_session(ns: Namespace, pipe: Pipeline, line: dict[str, Any]) -> None:
    keys, session_id = ns.keys, line["id"]
    pipe.hset(keys.session(session_id), mapping=_encode(line["meta"], ("concepts",)))
    if line["touched"]:
        pipe.hset(keys.session_touched(session_id), mapping=line["touched"])
    if line["files"]:
        pipe.sadd(keys.session_files(session_id), *line["files"])
    if line.get("seen"):  # a dump made before sessions kept their sightings has none
        pipe.rpush(keys.session_seen(session_id), *line["seen"])
    started = datetime.fromisoformat(line["meta"]["started_at"]).timestamp()
    pipe.zadd(keys.sessions, {session_id: int(started * 1_000_000)}, nx=True)
    for observation in line["observations"]:
        observation_id = observation["id"]
        pipe.hset(
            keys.observation(session_id, observation_id),
            mapping=_encode(observation, ("files", "data")),
        )
        pipe.rpush(keys.observations(session_id), observation_id)
        pipe.hset(keys.observation_sessions, observation_id, session_id)
