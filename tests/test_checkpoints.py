"""Signed checkpoints against the real embedded server and a real Redis Cluster: edits,
truncations and deletions made behind Baton's back are named; forgetting is not tampering;
the offline verifier catches the same from an export and a dump."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import msgpack
import msgspec
import pytest
import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from structlog.testing import capture_logs

from baton.queue.sweeps import sweep_all
from baton.server.maintenance.checkpoints import (
    CheckpointStore,
    MerkleRoot,
    SeenCheckpoints,
    leaf_bytes,
    parse_export,
    public_key_b64,
    root_of,
    signature_valid,
    take_checkpoint_if_due,
)
from baton.server.model.errors import StateConflict
from baton.server.model.integrity import canonical_bytes
from baton.server.runtime.settings import Settings
from baton.server.runtime.signing import InstallationKey
from baton.server.stores.backend import Backend
from baton.server.stores.records import RecordStore
from baton.server.stores.recount import COUNTED
from tests.conftest import REPO, as_agent

pytestmark = pytest.mark.anyio


@pytest.fixture
def checkpoints(store: RecordStore, tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(store.ns, store.ns.backend.key.private)


def reference_root(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1, written as the RFC states it (recursive split)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    left, right = reference_root(leaves[:split]), reference_root(leaves[split:])
    return hashlib.sha256(b"\x01" + left + right).digest()


def test_streamed_root_is_rfc_9162s_tree_hash() -> None:
    """The streaming root equals the RFC's recursive definition for every size up to 40."""
    for size in range(41):
        leaves = [(f"r/{i}", i + 1, f"{i:064x}", i % 3, "", False) for i in range(size)]
        tree = MerkleRoot()
        for leaf in leaves:
            tree.add(hashlib.sha256(b"\x00" + leaf_bytes(leaf)).digest())
        assert tree.root() == reference_root([leaf_bytes(leaf) for leaf in leaves]).hex()


async def write(store: RecordStore, ref: str, *values: object) -> None:
    for value in values:
        await store.remember(ref, value, agent="scout")


async def test_truncation_and_deletion_are_named(
    store: RecordStore, checkpoints: CheckpointStore, data_redis: redis.Redis
) -> None:
    """Cut a chain back (delete the head version, move the head) and delete a whole record:
    the per-record chains still verify, the checkpoint names both."""
    await write(store, "t/doc", 1, 2, 3)
    await write(store, "t/other", 1)
    taken = await checkpoints.take()
    assert taken is not None and (taken.seq, taken.records) == (1, 2)

    keys = store.keys
    data_redis.delete(keys.version("t/doc", 3))
    data_redis.hset(
        keys.head("t/doc"),
        mapping={"version": 2, "hash": data_redis.hget(keys.version("t/doc", 2), "hash")},
    )
    data_redis.delete(keys.head("t/other"), keys.version("t/other", 1))
    data_redis.zrem(keys.refs, "t/other")
    assert (await store.ns.verifier.stats(verify=True)).broken == []  # the chains alone see nothing

    report = await checkpoints.verify(await checkpoints.export())
    found = {(f.ref, f.kind, f.checkpoint_version, f.current_version) for f in report.findings}
    assert found == {("t/doc", "behind", 3, 2), ("t/other", "missing", 1, None)}
    assert report.signature_ok and report.leaves_ok and not report.ok


async def test_the_next_checkpoint_will_not_sign_what_was_lost_since(
    store: RecordStore, checkpoints: CheckpointStore, data_redis: redis.Redis
) -> None:
    """A record deleted and another cut back behind Baton's back after a checkpoint: the next
    checkpoint (the sweep's or on demand) refuses to sign that state, naming both, and
    nothing is added; records and versions written since do not block it; ``force`` signs
    once someone has looked, and the checkpoint after that one signs as usual."""
    await write(store, "t/doc", 1, 2)
    await write(store, "t/gone", 1)
    first = await checkpoints.take()
    assert first is not None
    await write(store, "t/doc", 3)
    await write(store, "t/new", 1)
    keys = store.keys
    data_redis.delete(keys.head("t/gone"), keys.version("t/gone", 1))
    data_redis.zrem(keys.refs, "t/gone")
    data_redis.delete(keys.version("t/doc", 3), keys.version("t/doc", 2))
    data_redis.hset(
        keys.head("t/doc"),
        mapping={"version": 1, "hash": data_redis.hget(keys.version("t/doc", 1), "hash")},
    )

    with pytest.raises(StateConflict) as refused:
        await checkpoints.take()
    assert "2 loss(es) since checkpoint 1" in str(refused.value)
    assert "t/doc went back from v2 to v1" in str(refused.value)
    assert "t/gone is gone" in str(refused.value)
    assert await take_checkpoint_if_due(checkpoints, 0) is None  # the sweep logs it
    assert [c.seq for c in await checkpoints.list()] == [1]
    assert not data_redis.exists(keys.checkpoint_leaves(2))
    kept = data_redis.lrange(keys.checkpoint_leaves(1), 0, -1)
    data_redis.delete(keys.checkpoint_leaves(1))  # hiding the evidence does not help
    with pytest.raises(StateConflict, match="do not add up to its root"):
        await checkpoints.take()
    data_redis.rpush(keys.checkpoint_leaves(1), *kept)

    forced = await checkpoints.take(force=True)
    assert forced is not None and (forced.seq, forced.records) == (2, 2)
    await write(store, "t/doc", 2)
    assert (await checkpoints.take()) is not None


async def test_a_rollback_of_the_stores_checkpoints_is_named(
    store: RecordStore, data_redis: redis.Redis, tmp_path: Path
) -> None:
    """Someone with Redis access deletes the newest checkpoints (and a record they held):
    this installation remembers the newest checkpoint it took (in its data dir, not in
    Redis), so verifying against the store's latest names the rollback and no checkpoint is
    signed on top of it; an export kept elsewhere names it too, whoever verifies it."""
    key = store.ns.backend.key.private
    checkpoints = CheckpointStore(store.ns, key, SeenCheckpoints.of(tmp_path))
    await write(store, "t/a", 1)
    await checkpoints.take()
    await write(store, "t/b", 1)
    await checkpoints.take()
    kept = await checkpoints.export()
    data_redis.rpop(store.keys.checkpoints)
    data_redis.delete(store.keys.head("t/b"), store.keys.version("t/b", 1))
    data_redis.zrem(store.keys.refs, "t/b")

    report = await checkpoints.verify(await checkpoints.export())
    assert report.findings == [] and report.signature_ok and not report.ok
    assert report.rolled_back == (
        "this installation holds checkpoint 2, but the store's newest is checkpoint 1"
    )
    with pytest.raises(StateConflict, match="rolled back"):
        await checkpoints.take()
    elsewhere = CheckpointStore(store.ns, key)  # another machine: no memory of its own
    from_export = await elsewhere.verify(kept)
    assert from_export.rolled_back == (
        "the export holds checkpoint 2, but the store's newest is checkpoint 1"
    )
    assert [(f.ref, f.kind) for f in from_export.findings] == [("t/b", "missing")]
    forced = await checkpoints.take(force=True)  # after a look: the count starts again
    assert forced is not None and forced.seq == 2
    await write(store, "t/c", 1)
    assert (await checkpoints.take()) is not None


async def test_an_edited_outcome_is_named(
    store: RecordStore, checkpoints: CheckpointStore, data_redis: redis.Redis
) -> None:
    """Rewriting the last outcome (hash recomputed, so its own chain link holds) is caught."""
    await write(store, "t/fact", "x")
    await store.ns.outcomes.record("success", "RUN-1", agent="executor", refs=["t/fact"])
    await checkpoints.take()
    key = store.keys.outcomes("t/fact")
    entry = msgpack.unpackb(data_redis.lindex(key, 0))
    entry["outcome"], entry["hash"] = "failure", "f" * 64
    data_redis.lset(key, 0, msgpack.packb(entry))
    report = await checkpoints.verify(await checkpoints.export())
    assert [(f.ref, f.kind) for f in report.findings] == [("t/fact", "outcomes-changed")]


async def test_a_changed_byte_breaks_the_signature(
    store: RecordStore, checkpoints: CheckpointStore
) -> None:
    """The signature covers the head: one byte changed anywhere in it fails."""
    await write(store, "t/doc", 1)
    exported = await checkpoints.export() if await checkpoints.take() else None
    assert exported is not None and signature_valid(exported.checkpoint, exported.public_key)
    root = exported.checkpoint.root
    forged = msgspec.structs.replace(
        exported.checkpoint, root=("0" if root[0] != "0" else "1") + root[1:]
    )
    assert not signature_valid(forged, exported.public_key)
    line = msgspec.json.encode(exported).decode().replace('"records":1', '"records":2')
    assert not (await checkpoints.verify(parse_export(line))).signature_ok


async def test_forgetting_and_new_records_are_not_tampering(
    store: RecordStore, checkpoints: CheckpointStore
) -> None:
    """A memory forgotten after the checkpoint (audited) is reported as forgotten, not broken;
    records written after it are counted as new; the next checkpoint records the forget."""
    memories = store.ns.memories
    saved = await memories.save("the deploy key lives in vault", agent_id="scout")
    assert saved.memory is not None
    await checkpoints.take()
    await memories.forget(caller=as_agent("scout"), memory_id=saved.memory.id, reason="secret")
    await write(store, "t/later", 1)
    report = await checkpoints.verify(await checkpoints.export())
    assert report.ok and report.findings == []
    assert report.forgotten_since == [f"memory/{saved.memory.id}"]
    assert report.new_since == 1
    after = await checkpoints.take()
    assert after is not None and after.forgotten == 1 and after.prev != "0" * 64


async def test_a_forged_forget_excuses_nothing(
    store: RecordStore, checkpoints: CheckpointStore, data_redis: redis.Redis
) -> None:
    """Someone with Redis access but not the signing key writes entries of forgetting into
    the audit log (sealed with a key of their own), then deletes one memory and tombstones
    another; and deletes a third that Baton forgot (its entry sealed): the next checkpoint
    is refused, naming all three, and verification against the previous one reports the
    deleted ones missing and the other forgotten with no sealed entry."""
    memories, keys = store.ns.memories, store.ns.keys
    gone = (await memories.save("the first rule", agent_id="scout")).memory
    hidden = (await memories.save("the second rule", agent_id="scout")).memory
    erased = (await memories.save("a third way", agent_id="scout")).memory
    assert gone is not None and hidden is not None and erased is not None
    before = await checkpoints.take()
    assert before is not None
    await memories.forget(caller=as_agent("scout"), memory_id=erased.id, reason="legit")
    erased_ref = f"memory/{erased.id}"
    data_redis.delete(keys.head(erased_ref), keys.version(erased_ref, 1))
    data_redis.zrem(keys.refs, erased_ref)
    for memory_id in (gone.id, hidden.id):
        fields = {
            "at": "2026-12-07T00:00:00Z",
            "agent": "scout",
            "action": "forget",
            "target": f"memory/{memory_id}",
            "reason": "cleanup",
            "details": msgpack.packb({}),
        }
        data_redis.xadd(keys.audit, {**fields, "seal": hashlib.sha256(b"forged").hexdigest()})
    gone_ref, hidden_ref = f"memory/{gone.id}", f"memory/{hidden.id}"
    data_redis.delete(keys.head(gone_ref), keys.version(gone_ref, 1))
    data_redis.zrem(keys.refs, gone_ref)
    data_redis.hset(keys.head(hidden_ref), "forgotten_at", "2026-12-07T00:00:00Z")
    with pytest.raises(StateConflict) as refused:
        await checkpoints.take()
    assert f"{gone_ref} is gone" in str(refused.value)
    assert f"{hidden_ref} was forgotten" in str(refused.value)
    assert f"{erased_ref} is gone" in str(refused.value)
    report = await checkpoints.verify(await checkpoints.export(before.seq))
    assert sorted((f.ref, f.kind) for f in report.findings) == sorted(
        [(gone_ref, "missing"), (hidden_ref, "forgotten"), (erased_ref, "missing")]
    )
    assert report.forgotten_since == []


async def test_a_forget_sealed_with_another_key_excuses_nothing(
    store: RecordStore, checkpoints: CheckpointStore, tmp_path: Path
) -> None:
    """A memory forgotten by a process holding another installation's key (its own data
    dir, no shared BATON_SIGNING_KEY) is not excused: the checkpoint cannot tell it from a
    forgery, and says which record to look into."""
    memories = store.ns.memories
    saved = (await memories.save("a rule", agent_id="scout")).memory
    assert saved is not None
    await checkpoints.take()
    elsewhere = Backend(store.ns.redis, key=InstallationKey(Settings(data_dir=tmp_path / "other")))
    await elsewhere.namespace(store.ns.name).memories.forget(
        caller=as_agent("scout"), memory_id=saved.id, reason="by another host"
    )
    with pytest.raises(StateConflict, match=f"memory/{saved.id} was forgotten"):
        await checkpoints.take()


async def test_checkpoints_chain_and_the_sweep_takes_them_only_after_changes(
    store: RecordStore, checkpoints: CheckpointStore
) -> None:
    """Each checkpoint links to the previous one's hash; the sweep's checkpoint waits for the
    interval and for a write since the last one."""
    await write(store, "t/a", 1)
    first = await take_checkpoint_if_due(checkpoints, 0)
    assert first is not None and first.seq == 1
    assert await take_checkpoint_if_due(checkpoints, 0) is None  # nothing written since
    assert await take_checkpoint_if_due(checkpoints, 3600) is None  # not due
    await write(store, "t/a", 2)
    second = await take_checkpoint_if_due(checkpoints, 0)
    assert second is not None and (second.seq, second.prev) == (2, first.hash)
    assert [c.seq for c in await checkpoints.list()] == [2, 1]


def baton(url: str, *args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "BATON_REDIS_URL": url, "BATON_DATA_DIR": str(data_dir)},
    )


def test_cli_and_offline_verifier_catch_a_truncation(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """`baton checkpoint`, `--export` kept elsewhere, a chain cut back, then `baton verify
    --checkpoint` (exit 1, naming it) and docs/verify_chain.py on the export and a dump."""
    for value in (1, 2, 3):
        assert http.post("/v1/records", json={"ref": "t/doc", "value": value}).is_success
    assert baton(redis_url, "checkpoint", data_dir=tmp_path).returncode == 0
    export = tmp_path / "checkpoint.json"
    export.write_text(baton(redis_url, "checkpoint", "--export", data_dir=tmp_path).stdout)

    sync_redis.delete("baton:default:rec:{t/doc}:v:3")
    sync_redis.hset(
        "baton:default:rec:{t/doc}:head",
        mapping={"version": 2, "hash": sync_redis.hget("baton:default:rec:{t/doc}:v:2", "hash")},
    )
    verified = baton(redis_url, "verify", "--checkpoint", str(export), data_dir=tmp_path)
    assert verified.returncode == 1
    assert "BROKEN t/doc behind: was at v3 at the checkpoint, now at v2" in verified.stdout

    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export", data_dir=tmp_path).stdout)
    offline = subprocess.run(
        [
            sys.executable,
            str(REPO / "docs/verify_chain.py"),
            "--checkpoint",
            str(export),
            str(dump),
            "--public-key",
            http.get("/v1/checkpoints/key").json()["public_key"],
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert "BROKEN t/doc behind: v3 at the checkpoint, now v2" in offline.stdout
    tampered = json.loads(export.read_text())
    tampered["leaves"][0][1] = 2  # make the kept export agree with the cut chain
    export.write_text(json.dumps(tampered))
    forged = subprocess.run(
        [
            sys.executable,
            str(REPO / "docs/verify_chain.py"),
            "--checkpoint",
            str(export),
            str(dump),
            "--public-key",
            http.get("/v1/checkpoints/key").json()["public_key"],
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert forged.returncode == 1 and "leaves do not add up to the root" in forged.stdout


def test_checkpoints_over_rest(http: httpx.Client) -> None:
    """POST /v1/checkpoints takes one, GET lists them, /key gives the public key, verify
    answers a report; verified with another key, the signature does not hold; a key that is
    not an Ed25519 public key in base64 is refused (422) naming it."""
    assert http.post("/v1/records", json={"ref": "t/x", "value": 1}).is_success
    taken = http.post("/v1/checkpoints").json()
    assert http.get("/v1/checkpoints").json()[0]["hash"] == taken["hash"]
    key = http.get("/v1/checkpoints/key").json()
    assert (key["algorithm"], key["key_id"]) == ("Ed25519", taken["key_id"])
    report = http.post("/v1/checkpoints/verify", json={}).json()
    assert (report["signature_ok"], report["findings"], report["checked"]) == (True, [], 1)
    assert http.post("/v1/checkpoints/verify", json={"seq": 99}).status_code == 404
    other = public_key_b64(Ed25519PrivateKey.generate())
    named = http.post("/v1/checkpoints/verify", json={"public_key": other}).json()
    assert (named["signature_ok"], named["embedded_key_trusted"]) == (False, False)
    for bad in ("not base64!", "", "QUJD"):  # (the last: 3 bytes)
        refused = http.post("/v1/checkpoints/verify", json={"public_key": bad})
        assert refused.status_code == 422, refused.text
        assert "public_key" in refused.text


async def test_a_checkpoint_resigned_with_another_key_does_not_verify(
    store: RecordStore, checkpoints: CheckpointStore
) -> None:
    """The attack from the security review: drop a record's leaf from an export, fix the
    root, re-sign with a fresh key and embed that key. Verification checks the trusted key
    (this server's, or one the caller names), not the embedded one: the forgery fails and
    says the export carries another key; the honest export verifies, also with its public
    key named explicitly."""
    await write(store, "t/kept", 1)
    await write(store, "t/deleted", 2)
    assert await checkpoints.take()
    honest = await checkpoints.export()
    leaves = [leaf for leaf in honest.leaves if leaf[0] != "t/deleted"]
    forger = Ed25519PrivateKey.generate()
    head = msgspec.structs.replace(
        honest.checkpoint, records=len(leaves), root=root_of(leaves), key_id="forged"
    )
    body = canonical_bytes(head.body())
    head.hash = hashlib.sha256(body).hexdigest()
    head.signature = base64.b64encode(forger.sign(body)).decode()
    forged = msgspec.structs.replace(
        honest, checkpoint=head, leaves=leaves, public_key=public_key_b64(forger)
    )
    assert signature_valid(forged.checkpoint, forged.public_key)  # valid under its own key
    report = await checkpoints.verify(forged)
    assert (report.signature_ok, report.embedded_key_trusted) == (False, False)
    assert report.key_id == honest.checkpoint.key_id
    assert not report.ok
    assert (await checkpoints.verify(honest)).ok
    assert (await checkpoints.verify(honest, honest.public_key)).ok
    assert not (await checkpoints.verify(honest, forged.public_key)).signature_ok


async def test_one_namespaces_fault_never_stops_the_sweep_of_the_others(
    backend: Backend, tmp_path: Path
) -> None:
    """A namespace whose sweep fails (here a key of the wrong type in it) is logged and
    reported with its error; the namespaces after it are still swept (a due checkpoint
    taken) and the sweep lock is given back."""
    for name in ("broken", "fine"):
        await backend.namespace(name).records.remember("t/a", 1, agent="ops")
    await backend.redis.set(backend.namespace("broken").keys.active_sessions, "not a zset")
    settings = Settings(redis_url="unused", data_dir=tmp_path, checkpoint_seconds=0)
    key = Ed25519PrivateKey.generate()
    with capture_logs() as logs:
        swept = await sweep_all(backend, settings, key)
    assert swept is not None
    assert "WRONGTYPE" in swept["broken"]["error"]
    assert swept["fine"]["checkpoint"] == 1
    assert [entry["namespace"] for entry in logs if entry["log_level"] == "error"] == ["broken"]
    assert await sweep_all(backend, settings, key) is not None  # the lock was released


async def test_the_sweep_recounts_a_namespace_from_before_the_counts_one_a_round(
    backend: Backend, tmp_path: Path
) -> None:
    """Namespaces without exact quota counts (written before Baton kept them) are recounted
    by the sweep, one a round after the sweep proper; namespaces created now need none."""
    for name in ("new", "old-a", "old-b"):
        await backend.namespace(name).records.remember("t/a", "x" * 100, agent="ops")
    for name in ("old-a", "old-b"):
        await backend.redis.hdel(backend.namespace(name).keys.search_stats, COUNTED, "bytes")
    settings = Settings(redis_url="unused", data_dir=tmp_path, checkpoint_seconds=None)
    key = Ed25519PrivateKey.generate()
    rounds = [await sweep_all(backend, settings, key) for _ in range(3)]
    recounted = [
        [(name, found["recounted"]) for name, found in swept.items() if "recounted" in found]
        for swept in rounds
        if swept is not None
    ]
    size = len(msgpack.packb("x" * 100))
    assert [[(name, found[0]) for name, found in each] for each in recounted] == [
        [("old-a", size)],
        [("old-b", size)],
        [],
    ]
