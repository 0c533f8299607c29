"""Signed checkpoints: a commitment to a namespace's complete state, kept elsewhere, so that a
record deleted or a chain cut short behind Baton's back is caught (docs/integrity.md).

A checkpoint is an RFC 9162-style Merkle tree head (sha256; leaf ``0x00 || leaf``, node
``0x01 || left || right``) over one leaf per record, sorted by ref: the record's head version
and hash, its outcomes log's length and last hash, and whether it was forgotten. The head
carries the namespace, sequence number, time, counts, the previous checkpoint's hash (so the
checkpoints form their own chain) and an Ed25519 signature. The leaves of the latest
``KEEP_LEAVES`` checkpoints are kept in Redis so verification can name each record that went
missing, fell behind or changed; ``baton checkpoint --export`` prints a head and its leaves as
one JSON line to keep anywhere.

Computing one streams the refs in batches (memory stays flat at a million records) and uses
only single-key reads, so it works on a Redis Cluster.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import msgspec
import structlog
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from baton.server.model.clock import utc_now
from baton.server.model.errors import InvalidInput, NotFound, StateConflict, StoreUnavailable
from baton.server.model.integrity import canonical_bytes
from baton.server.runtime import codec
from baton.server.runtime.signing import seal_key_of
from baton.server.stores.records import BATCH

if TYPE_CHECKING:
    from baton.server.stores.backend import Namespace

log = structlog.get_logger("baton.checkpoints")
ZERO = "0" * 64
KEEP_LEAVES = 3
MAX_SEQ = 2**62  # beyond any list index Redis accepts
LOCK_SECONDS = 600
SEEN_DIR = "checkpoints-seen"  # in the data dir: the newest checkpoint seen, per namespace

Leaf = tuple[str, int, str, int, str, bool]  # ref, version, hash, outcomes, outcome hash, forgotten


class Checkpoint(msgspec.Struct, kw_only=True):
    """A signed checkpoint head. ``hash`` is the sha256 of the canonical body (every field
    but ``hash`` and ``signature``); ``signature`` signs that same body."""

    format: int = 1
    namespace: str
    seq: int
    at: str
    records: int
    outcome_logs: int
    forgotten: int
    root: str
    prev: str
    last_event: str
    key_id: str
    hash: str = ""
    signature: str = ""

    def body(self) -> dict[str, Any]:
        fields = msgspec.to_builtins(self)
        return {name: value for name, value in fields.items() if name not in ("hash", "signature")}


class Exported(msgspec.Struct, kw_only=True):
    """A checkpoint with its leaves and public key: everything an offline check needs."""

    checkpoint: Checkpoint
    public_key: str
    leaves: list[Leaf]


class Finding(msgspec.Struct, kw_only=True):
    """One difference between a checkpoint and the store now."""

    ref: str
    kind: str  # missing | behind | changed | outcomes-behind | outcomes-changed | forgotten
    detail: str
    checkpoint_version: int | None = None
    current_version: int | None = None


class CheckpointReport(msgspec.Struct, kw_only=True):
    """``signature_ok``: signed by the key verification trusts (``key_id``: this server's
    signing key, or the one the caller named), never merely by the key the export carries;
    ``embedded_key_trusted`` says whether that carried key is the trusted one."""

    checkpoint: int
    signature_ok: bool
    key_id: str
    embedded_key_trusted: bool
    leaves_ok: bool
    checked: int
    new_since: int
    findings: list[Finding]
    forgotten_since: list[str]
    rolled_back: str | None = None  # how the store's own checkpoints went back, if they did

    @property
    def ok(self) -> bool:
        return self.signature_ok and self.leaves_ok and not self.findings and not self.rolled_back


# -- Merkle tree ---------------------------------------------------------------------------


def leaf_bytes(leaf: Leaf) -> bytes:
    return canonical_bytes({"leaf": list(leaf)})


def leaf_hash(leaf: Leaf) -> bytes:
    return hashlib.sha256(b"\x00" + leaf_bytes(leaf)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class MerkleRoot:
    """RFC 9162's tree hash computed as leaves stream in: a stack of perfect subtrees (at
    most log2(n) hashes), merged right to left at the end."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, bytes]] = []
        self.count = 0

    def add(self, digest: bytes) -> None:
        size = 1
        while self.stack and self.stack[-1][0] == size:
            _, left = self.stack.pop()
            digest, size = node_hash(left, digest), size * 2
        self.stack.append((size, digest))
        self.count += 1

    def root(self) -> str:
        if not self.stack:
            return hashlib.sha256(b"").hexdigest()
        digest = self.stack[-1][1]
        for _, left in reversed(self.stack[:-1]):
            digest = node_hash(left, digest)
        return digest.hex()


def root_of(leaves: Iterable[Leaf]) -> str:
    tree = MerkleRoot()
    for leaf in leaves:
        tree.add(leaf_hash(leaf))
    return tree.root()


# -- keys ----------------------------------------------------------------------------------


ED25519_KEY_BYTES = 32


def public_key_b64(key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.public_key().public_bytes_raw()).decode()


def check_public_key(text: str) -> str:
    """``text`` if it is an Ed25519 public key in base64 (32 bytes), else ``InvalidInput``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != ED25519_KEY_BYTES:
        raise InvalidInput("public_key", "must be an Ed25519 public key: 32 bytes in base64")
    return text


def key_id(public_key: str) -> str:
    return hashlib.sha256(base64.b64decode(public_key)).hexdigest()[:16]


def signature_valid(checkpoint: Checkpoint, public_key: str) -> bool:
    """The signature and the hash both match the checkpoint's body."""
    body = canonical_bytes(checkpoint.body())
    if hashlib.sha256(body).hexdigest() != checkpoint.hash:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key)).verify(
            base64.b64decode(checkpoint.signature), body
        )
    except (InvalidSignature, ValueError):
        return False
    return True


# -- the newest checkpoint seen, kept outside Redis -------------------------------------------


class SeenCheckpoints:
    """The newest checkpoint this installation took or verified, per namespace, in a file of
    the data dir: someone with access to Redis alone can delete the newest checkpoints from
    the store (and the records they held), but cannot make this installation forget it saw
    them. One small file per namespace, replaced atomically, only ever moved forward."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def of(cls, data_dir: Path) -> SeenCheckpoints:
        return cls(data_dir / SEEN_DIR)

    def _path(self, namespace: str) -> Path:
        return self.directory / hashlib.sha256(namespace.encode()).hexdigest()[:32]

    def get(self, namespace: str) -> tuple[int, str] | None:
        try:
            seq, digest = self._path(namespace).read_text().split()
            return int(seq), digest
        except (OSError, ValueError):
            return None

    def note(self, checkpoint: Checkpoint, *, force: bool = False) -> None:
        """Keep ``checkpoint`` as the newest seen (``force``: even over a newer mark, as a
        forced checkpoint starts the count again); a data dir that cannot be written is
        logged, never an error of the checkpoint it notes."""
        seen = self.get(checkpoint.namespace)
        if seen is not None and seen[0] >= checkpoint.seq and not force:
            return
        path = self._path(checkpoint.namespace)
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            draft = path.with_name(f".{path.name}.{os.getpid()}")
            draft.write_text(f"{checkpoint.seq} {checkpoint.hash}\n")
            os.replace(draft, path)
        except OSError as error:
            log.warning("cannot keep the newest checkpoint seen", path=str(path), error=str(error))


# -- the store -----------------------------------------------------------------------------


class CheckpointStore:
    """Checkpoints of one namespace."""

    def __init__(
        self, namespace: Namespace, key: Ed25519PrivateKey, seen: SeenCheckpoints | None = None
    ) -> None:
        self.ns = namespace
        self.redis = namespace.redis
        self.keys = namespace.keys
        self.key = key
        self.public_key = public_key_b64(key)
        self.seal_key = seal_key_of(key)
        self.seen = seen

    async def rollback(self, held: Checkpoint | None = None) -> str | None:
        """How the store's checkpoints went back, if they did: the newest one is older than
        one this installation saw (or than ``held``, an export kept elsewhere), or the
        store's checkpoint at that number is not the one seen."""
        marks = [] if held is None else [(held.seq, held.hash, "the export")]
        seen = self.seen.get(self.ns.name) if self.seen else None
        if seen is not None:
            marks.append((*seen, "this installation"))
        latest = await self.latest()
        for seq, digest, who in marks:
            if latest is None or latest.seq < seq:
                newest = "none" if latest is None else f"checkpoint {latest.seq}"
                return f"{who} holds checkpoint {seq}, but the store's newest is {newest}"
            try:
                stored = await self.get(seq)
            except NotFound:
                return f"{who} holds checkpoint {seq}, but the store holds no checkpoint {seq}"
            if stored.hash != digest:
                return (
                    f"{who} holds checkpoint {seq} hashed {digest[:12]}…, the store's is "
                    f"{stored.hash[:12]}…"
                )
        return None

    async def leaves(self) -> AsyncIterator[builtins.list[Leaf]]:
        """The store's current leaves, in ref order, a batch at a time."""
        async for batch in self.ns.records.candidate_refs(None, [], "all", None):
            pipe = self.redis.pipeline(transaction=False)
            for ref in batch:
                pipe.hmget(self.keys.head(ref), "version", "hash", "outcome_hash", "forgotten_at")
                pipe.llen(self.keys.outcomes(ref))
            replies = await pipe.execute()
            found = []
            for ref, head, length in zip(batch, replies[::2], replies[1::2], strict=True):
                if head[0] is not None:
                    found.append(
                        (
                            ref,
                            int(head[0]),
                            head[1].decode(),
                            int(length),
                            (head[2] or b"").decode(),
                            head[3] is not None,
                        )
                    )
            yield found

    async def latest(self) -> Checkpoint | None:
        raw = await self.redis.lindex(self.keys.checkpoints, -1)
        return None if raw is None else msgspec.json.decode(raw, type=Checkpoint)

    async def list(self, limit: int = 50) -> builtins.list[Checkpoint]:
        raws = await self.redis.lrange(self.keys.checkpoints, -limit, -1)
        return [msgspec.json.decode(raw, type=Checkpoint) for raw in reversed(raws)]

    async def get(self, seq: int) -> Checkpoint:
        raw = (
            await self.redis.lindex(self.keys.checkpoints, seq - 1) if 0 < seq <= MAX_SEQ else None
        )
        if raw is None:
            raise NotFound(f"no checkpoint {seq}", checkpoint=seq)
        return msgspec.json.decode(raw, type=Checkpoint)

    async def _last_event(self) -> str:
        newest = codec.entries(await self.redis.xrevrange(self.keys.events, count=1))
        return newest[0][0].decode() if newest else "0-0"

    async def take(
        self,
        *,
        only_if_changed: bool = False,
        force: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Checkpoint | None:
        """Take a checkpoint (None when ``only_if_changed`` and nothing was written since);
        ``on_progress(records_done, records_total)`` is called after each batch of leaves.
        Refused (``StateConflict``) when the store's checkpoints were rolled back or when
        the store lost what the previous checkpoint held (a record forgotten since is no loss
        when a sealed audit entry says so): signing would bless the tampering. ``force``
        signs anyway, once it has been looked into."""
        lock = self.keys.checkpoint_lock
        if not await self.redis.set(lock, "1", nx=True, ex=LOCK_SECONDS):
            raise StoreUnavailable("another checkpoint is being taken; try again shortly")
        try:
            previous = await self.latest()
            last_event = await self._last_event()
            if only_if_changed and previous is not None and previous.last_event == last_event:
                return None
            rolled_back = None if force else await self.rollback()
            if rolled_back:
                raise StateConflict(
                    f"not signing: the store's checkpoints were rolled back ({rolled_back}); "
                    "look into it, then sign with --force",
                    rolled_back=rolled_back,
                )
            seq = 1 if previous is None else previous.seq + 1
            leaves_key = self.keys.checkpoint_leaves(seq)
            await self.redis.delete(leaves_key)  # what a crashed attempt at seq left
            tree = MerkleRoot()
            outcome_logs = forgotten = 0
            total = await self.redis.zcard(self.keys.refs) if on_progress else 0
            async for batch in self.leaves():
                for leaf in batch:
                    tree.add(leaf_hash(leaf))
                    outcome_logs += leaf[3] > 0
                    forgotten += leaf[5]
                if batch:
                    await self.redis.rpush(leaves_key, msgpack.packb(batch))
                if on_progress:
                    on_progress(tree.count, total)
            if previous is not None and not force:
                await self._refuse_regressions(previous, seq)
            checkpoint = Checkpoint(
                namespace=self.ns.name,
                seq=seq,
                at=utc_now(),
                records=tree.count,
                outcome_logs=outcome_logs,
                forgotten=forgotten,
                root=tree.root(),
                prev=ZERO if previous is None else previous.hash,
                last_event=last_event,
                key_id=key_id(self.public_key),
            )
            body = canonical_bytes(checkpoint.body())
            checkpoint.hash = hashlib.sha256(body).hexdigest()
            checkpoint.signature = base64.b64encode(self.key.sign(body)).decode()
            # Appending the head commits the checkpoint; its leaves are already in place.
            await self.redis.rpush(self.keys.checkpoints, msgspec.json.encode(checkpoint))
            await self.redis.delete(self.keys.checkpoint_leaves(seq - KEEP_LEAVES))
            if self.seen:
                self.seen.note(checkpoint, force=force)
            return checkpoint
        finally:
            await self.redis.delete(lock)

    async def _refuse_regressions(self, previous: Checkpoint, seq: int) -> None:
        """``StateConflict`` (and checkpoint ``seq``'s leaves dropped) when a record checkpoint
        ``previous`` held is gone, behind, changed at its version, has a shorter or rewritten
        outcomes log, or was forgotten without an audit entry of this installation's seal
        written since ``previous`` (a record gone is never excused: Baton forgets by
        tombstones, it never deletes one); or when ``previous``'s kept leaves do not add up to its
        signed root (edited or removed in Redis). Both checkpoints' leaves are in ref order:
        one merged pass, no reads but the leaves."""
        # From before the previous checkpoint began reading records (a take holds the lock
        # LOCK_SECONDS at most), which also absorbs Baton's clock against Redis's.
        since = int(datetime.fromisoformat(previous.at).timestamp() * 1000) - LOCK_SECONDS * 1000
        audited = await self.ns.audit.forgotten(self.seal_key, since=str(max(since, 0)))
        lost: builtins.list[str] = []
        tree = MerkleRoot()
        now = _leaf_stream(self.stored_leaves(seq))
        current = await anext(now, None)
        async for old in _leaf_stream(self.stored_leaves(previous.seq)):
            tree.add(leaf_hash(old))
            while current is not None and current[0] < old[0]:
                current = await anext(now, None)
            problem = _regression(old, current if current and current[0] == old[0] else None)
            if problem and not (old[0] in audited and problem == AUDITABLE):
                lost.append(f"{old[0]} {problem}")
        if tree.count != previous.records or tree.root() != previous.root:
            lost.insert(0, f"checkpoint {previous.seq}'s kept leaves do not add up to its root")
        if lost:
            await self.redis.delete(self.keys.checkpoint_leaves(seq))
            shown = "; ".join(lost[:5]) + (f"; and {len(lost) - 5} more" if len(lost) > 5 else "")
            raise StateConflict(
                f"not signing: {len(lost)} loss(es) since checkpoint {previous.seq} "
                f"({shown}); run baton verify --checkpoint latest, then sign with --force",
                lost=len(lost),
            )

    async def stored_leaves(self, seq: int) -> AsyncIterator[builtins.list[Leaf]]:
        """A checkpoint's leaves as kept in Redis (only the latest few are kept)."""
        key = self.keys.checkpoint_leaves(seq)
        length = await self.redis.llen(key)
        for index in range(length):
            chunk = msgpack.unpackb(await self.redis.lindex(key, index))
            yield [tuple(leaf) for leaf in chunk]

    async def export(self, seq: int | None = None) -> Exported:
        checkpoint = await self.latest() if seq is None else await self.get(seq)
        if checkpoint is None:
            raise NotFound("no checkpoint yet: take one with baton checkpoint")
        leaves = [leaf async for batch in self.stored_leaves(checkpoint.seq) for leaf in batch]
        if checkpoint.records and not leaves:
            raise NotFound(
                f"the leaves of checkpoint {checkpoint.seq} are no longer kept "
                f"(only the latest {KEEP_LEAVES} are)"
            )
        return Exported(checkpoint=checkpoint, public_key=self.public_key, leaves=leaves)

    async def verify(self, exported: Exported, trusted_key: str | None = None) -> CheckpointReport:
        """Compare the store now with a checkpoint: every record it held must still be there,
        at least at its version with the same hash there, with its outcomes log intact. The
        signature is checked against ``trusted_key`` (default: this server's own public
        key), never against the key the export carries: anyone can re-sign an edited
        checkpoint with a fresh key and embed it."""
        checkpoint = exported.checkpoint
        trusted = self.public_key if trusted_key is None else check_public_key(trusted_key)
        signed = signature_valid(checkpoint, trusted)
        leaves_ok = root_of(exported.leaves) == checkpoint.root
        findings: list[Finding] = []
        forgotten_since: list[str] = []
        audited = await self.ns.audit.forgotten(self.seal_key)
        pinned = {leaf[0] for leaf in exported.leaves}
        for start in range(0, len(exported.leaves), BATCH):
            batch = exported.leaves[start : start + BATCH]
            findings += await self._compare(batch, audited, forgotten_since)
        new_since = 0
        async for batch in self.leaves():
            new_since += sum(leaf[0] not in pinned for leaf in batch)
        rolled_back = await self.rollback(checkpoint if signed else None)
        if signed and leaves_ok and self.seen:
            self.seen.note(checkpoint)
        return CheckpointReport(
            checkpoint=checkpoint.seq,
            signature_ok=signed,
            key_id=key_id(trusted),
            embedded_key_trusted=exported.public_key == trusted,
            leaves_ok=leaves_ok,
            checked=len(exported.leaves),
            new_since=new_since,
            findings=findings,
            forgotten_since=forgotten_since,
            rolled_back=rolled_back,
        )

    async def _compare(
        self, batch: builtins.list[Leaf], audited: set[str], forgotten_since: builtins.list[str]
    ) -> builtins.list[Finding]:
        pipe = self.redis.pipeline(transaction=False)
        for ref, version, _, outcomes, _, _ in batch:
            pipe.hmget(self.keys.head(ref), "version", "forgotten_at")
            pipe.hget(self.keys.version(ref, version), "hash")
            pipe.llen(self.keys.outcomes(ref))
            pipe.lindex(self.keys.outcomes(ref), max(outcomes - 1, 0))
        replies = await pipe.execute()
        findings = []
        for index, (ref, version, digest, outcomes, outcome_hash, was_forgotten) in enumerate(
            batch
        ):
            head, stored_hash, length, last_outcome = replies[4 * index : 4 * index + 4]
            if head[0] is None:
                findings.append(
                    Finding(
                        ref=ref,
                        kind="missing",
                        checkpoint_version=version,
                        detail=f"held v{version} at the checkpoint; now gone",
                    )
                )
                continue
            current = int(head[0])
            if current < version:
                findings.append(
                    Finding(
                        ref=ref,
                        kind="behind",
                        checkpoint_version=version,
                        current_version=current,
                        detail=f"was at v{version} at the checkpoint, now at v{current}: "
                        f"{_versions(current + 1, version)} removed",
                    )
                )
            elif (stored_hash or b"").decode() != digest:
                findings.append(
                    Finding(
                        ref=ref,
                        kind="changed",
                        checkpoint_version=version,
                        current_version=current,
                        detail=f"v{version} hashed {digest[:12]}… at the checkpoint, now "
                        f"{(stored_hash or b'none').decode()[:12]}…",
                    )
                )
            if length < outcomes:
                findings.append(
                    Finding(
                        ref=ref,
                        kind="outcomes-behind",
                        detail=f"outcomes log held {outcomes} "
                        f"entries at the checkpoint, now {length}",
                    )
                )
            elif outcomes and _entry_hash(last_outcome) != outcome_hash:
                findings.append(
                    Finding(
                        ref=ref,
                        kind="outcomes-changed",
                        detail=f"outcome #{outcomes} hashed {outcome_hash[:12]}… at the "
                        "checkpoint, "
                        f"now {_entry_hash(last_outcome)[:12]}…",
                    )
                )
            if head[1] is not None and not was_forgotten:
                if ref in audited:
                    forgotten_since.append(ref)
                else:
                    findings.append(
                        Finding(
                            ref=ref,
                            kind="forgotten",
                            detail="forgotten since, with no sealed audit entry",
                        )
                    )
        return findings


async def _leaf_stream(batches: AsyncIterator[builtins.list[Leaf]]) -> AsyncIterator[Leaf]:
    async for batch in batches:
        for leaf in batch:
            yield leaf


AUDITABLE = "was forgotten"  # what a sealed audit entry explains (Baton never deletes a record)


def _regression(old: Leaf, new: Leaf | None) -> str | None:
    """What record ``old`` (a leaf of the previous checkpoint) lost by ``new`` (its leaf
    now, None when it is gone), if anything."""
    if new is None:
        return "is gone"
    _, version, digest, outcomes, outcome_hash, forgotten = old
    _, now_version, now_digest, now_outcomes, now_outcome_hash, now_forgotten = new
    if now_version < version:
        return f"went back from v{version} to v{now_version}"
    if now_version == version and now_digest != digest:
        return f"v{version} changed"
    if now_outcomes < outcomes:
        return f"lost outcomes ({outcomes} -> {now_outcomes})"
    if now_outcomes == outcomes and now_outcome_hash != outcome_hash:
        return f"outcome #{outcomes} changed"
    if now_forgotten and not forgotten:
        return "was forgotten"
    return None


def _versions(first: int, last: int) -> str:
    return f"v{first} was" if first == last else f"v{first}..v{last} were"


def _entry_hash(raw: Any) -> str:
    if not raw:
        return ""
    try:
        return str(msgpack.unpackb(raw).get("hash", ""))
    except (ValueError, AttributeError, msgpack.UnpackException):
        return ""


async def take_checkpoint_if_due(
    checkpoints: CheckpointStore, interval: float | None
) -> Checkpoint | None:
    """The sweep's checkpoint: taken when ``interval`` seconds passed since the last one and
    something was written since; a checkpoint already being taken elsewhere is left alone."""
    if interval is None or elapsed_since(await checkpoints.latest()) < interval:
        return None
    try:
        return await checkpoints.take(only_if_changed=True)
    except StoreUnavailable:
        return None
    except StateConflict as refused:
        log.error("checkpoint refused", namespace=checkpoints.ns.name, reason=str(refused))
        return None


def parse_export(text: str) -> Exported:
    """An export line back into its parts (``baton verify --checkpoint FILE``)."""
    try:
        return msgspec.json.decode(text.strip().encode(), type=Exported)
    except msgspec.ValidationError as error:
        raise InvalidInput("checkpoint", f"not a checkpoint export: {error}") from None
    except msgspec.DecodeError as error:
        raise InvalidInput("checkpoint", f"not JSON: {error}") from None


def elapsed_since(checkpoint: Checkpoint | None) -> float:
    """Seconds since the checkpoint was taken (infinity without one)."""
    if checkpoint is None:
        return float("inf")
    return time.time() - datetime.fromisoformat(checkpoint.at).timestamp()
