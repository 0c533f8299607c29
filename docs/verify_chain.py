#!/usr/bin/env python3
"""Check Baton's integrity offline, with the standard library (and ``cryptography`` for the
one signature check).

    curl -s http://127.0.0.1:8765/v1/history/listing/553/assessment | python3 verify_chain.py

reads the JSON of ``GET /v1/history/{ref}`` from a file argument or stdin, recomputes the
sha256 of every version's canonical body (docs/integrity.md) and checks each prev_hash link.
Prints one line per version and exits 1 if any version or link does not verify.

    python3 verify_chain.py --checkpoint checkpoint.json dump.jsonl --public-key BASE64

checks a signed checkpoint kept elsewhere (``baton checkpoint --export``) against a dump
(``baton export``): the signature with the public key you trust (``GET /v1/checkpoints/key``,
kept when you kept the export; never the key the export carries, which anyone re-signing an
edited checkpoint can replace), the leaves against the Merkle root, and then every record
the checkpoint held — missing from the dump, cut short, or changed at the checkpoint's
version, its outcomes log likewise. Exits 1 on any problem.
"""

import base64
import hashlib
import json
import sys

GENESIS = "0" * 64
HASHED = ("author", "created_at", "prev_hash", "ref", "session", "tags", "value", "version")


def canonical(body):
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def merkle_root(leaves):
    """RFC 9162: leaf hash sha256(0x00 || leaf), node hash sha256(0x01 || left || right),
    the left subtree holding the largest power of two below n leaves."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    level = [hashlib.sha256(b"\x00" + canonical({"leaf": leaf})).digest() for leaf in leaves]

    def tree(hashes):
        if len(hashes) == 1:
            return hashes[0]
        split = 1
        while split * 2 < len(hashes):
            split *= 2
        return hashlib.sha256(b"\x01" + tree(hashes[:split]) + tree(hashes[split:])).digest()

    return tree(level).hex()


def signature_ok(checkpoint, public_key):
    body = canonical({k: v for k, v in checkpoint.items() if k not in ("hash", "signature")})
    if hashlib.sha256(body).hexdigest() != checkpoint["hash"]:
        return False
    from cryptography.exceptions import InvalidSignature  # the one dependency
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key)).verify(
            base64.b64decode(checkpoint["signature"]), body
        )
    except (InvalidSignature, ValueError):
        return False
    return True


def check_checkpoint(export_path, dump_path, public_key):
    with open(export_path, encoding="utf-8") as source:
        export = json.load(source)
    checkpoint, leaves = export["checkpoint"], export["leaves"]
    problems = []
    if not signature_ok(checkpoint, public_key):
        carried = "" if export["public_key"] == public_key else " (it carries another key)"
        problems.append(
            f"checkpoint {checkpoint['seq']}: the signature does not verify with the trusted "
            f"key{carried}"
        )
    if merkle_root(leaves) != checkpoint["root"]:
        problems.append(f"checkpoint {checkpoint['seq']}: the leaves do not add up to the root")
    records = {}
    with open(dump_path, encoding="utf-8") as dump:
        for line in dump:
            item = json.loads(line)
            if item.get("type") == "record":
                records[item["ref"]] = item
    for ref, version, digest, outcomes, outcome_hash, _forgotten in leaves:
        record = records.get(ref)
        if record is None:
            problems.append(f"{ref} missing: held v{version} at the checkpoint")
            continue
        current = int(record["head"]["version"])
        by_number = {int(v["version"]): v for v in record["versions"]}
        if current < version:
            problems.append(f"{ref} behind: v{version} at the checkpoint, now v{current}")
        elif by_number.get(version, {}).get("hash") != digest:
            problems.append(f"{ref} changed: v{version} no longer hashes {digest[:12]}…")
        if len(record["outcomes"]) < outcomes:
            problems.append(
                f"{ref} outcomes behind: {outcomes} at the checkpoint, "
                f"now {len(record['outcomes'])}"
            )
        elif outcomes and record["outcomes"][outcomes - 1].get("hash") != outcome_hash:
            problems.append(
                f"{ref} outcomes changed: #{outcomes} no longer hashes {outcome_hash[:12]}…"
            )
    for problem in problems:
        print(f"BROKEN {problem}")
    new = len(set(records) - {leaf[0] for leaf in leaves})
    print(
        f"checkpoint {checkpoint['seq']}: {len(leaves)} records checked, {new} new since, "
        + (f"{len(problems)} problem(s)" if problems else "nothing missing, behind or changed")
    )
    return 1 if problems else 0


def main():
    if sys.argv[1:2] == ["--checkpoint"]:
        if len(sys.argv) != 6 or sys.argv[4] != "--public-key":
            sys.exit(
                "usage: verify_chain.py --checkpoint EXPORT DUMP --public-key BASE64 "
                "(the key you trust: GET /v1/checkpoints/key)"
            )
        return check_checkpoint(sys.argv[2], sys.argv[3], sys.argv[5])
    if len(sys.argv) > 1:
        with open(sys.argv[1], encoding="utf-8") as source:
            history = json.load(source)
    else:
        history = json.load(sys.stdin)
    expected_prev, broken = GENESIS, 0
    for version in history["versions"]:
        problems = []
        forgotten = version.get("forgotten")
        if forgotten:
            # The value is gone; the tombstone's hash must cover the original hash.
            body = {
                "forgotten": version["hash"],
                "at": forgotten["at"],
                "by": forgotten["by"],
                "reason": forgotten["reason"],
            }
            recomputed = hashlib.sha256(canonical(body)).hexdigest()
            if recomputed != forgotten["hash"]:
                problems.append(f"tombstone: stored {forgotten['hash']}, recomputed {recomputed}")
        else:
            body = {name: version[name] for name in HASHED}
            recomputed = hashlib.sha256(canonical(body)).hexdigest()
            if recomputed != version["hash"]:
                problems.append(f"hash: stored {version['hash']}, recomputed {recomputed}")
        if version["prev_hash"] != expected_prev:
            problems.append(f"link: prev_hash {version['prev_hash']}, expected {expected_prev}")
        status = (
            "BROKEN " + "; ".join(problems)
            if problems
            else ("ok (forgotten)" if forgotten else "ok")
        )
        print(f"{history['ref']} v{version['version']}: {status}")
        broken += bool(problems)
        expected_prev = version["hash"]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
