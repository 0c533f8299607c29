#!/usr/bin/env python3
"""Recompute a Baton record's hash chain from its history, with the standard library only.

    curl -s http://127.0.0.1:8765/v1/history/listing/553/assessment | python3 verify_chain.py

Reads the JSON of ``GET /v1/history/{ref}`` from a file argument or stdin, recomputes the
sha256 of every version's canonical body (docs/integrity.md) and checks each prev_hash link.
Prints one line per version and exits 1 if any version or link does not verify.
"""

import hashlib
import json
import sys

GENESIS = "0" * 64
HASHED = ("author", "created_at", "prev_hash", "ref", "session", "tags", "value", "version")


def canonical(body):
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def main():
    source = open(sys.argv[1], encoding="utf-8") if len(sys.argv) > 1 else sys.stdin
    history = json.load(source)
    expected_prev, broken = GENESIS, 0
    for version in history["versions"]:
        problems = []
        forgotten = version.get("forgotten")
        if forgotten:
            # The value is gone; the tombstone's hash must cover the original hash.
            body = {"forgotten": version["hash"], "at": forgotten["at"], "by": forgotten["by"],
                    "reason": forgotten["reason"]}
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
        status = "BROKEN " + "; ".join(problems) if problems else (
            "ok (forgotten)" if forgotten else "ok")
        print(f"{history['ref']} v{version['version']}: {status}")
        broken += bool(problems)
        expected_prev = version["hash"]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
