"""`baton export` / `baton import`: a verified round trip, and tampered dumps refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import redis

from baton.server.maintenance.backup import Seal
from baton.server.model.keys import Keys
from tests.conftest import REPO, written_keys


def baton(redis_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args],
        input=stdin,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "BATON_REDIS_URL": redis_url},
    )


def observe(http: httpx.Client, command: str) -> None:
    """A Bash tool use in session sess-1."""
    http.post(
        "/v1/observations",
        json={
            "hook_type": "post_tool_use",
            "session_id": "sess-1",
            "project": "app",
            "cwd": "/srv/app",
            "timestamp": "t",
            "data": {"tool_name": "Bash", "tool_input": {"command": command}},
        },
    )


def populate(http: httpx.Client) -> None:
    for n in range(3):
        http.post(
            "/v1/records",
            json={
                "ref": "listing/553/assessment",
                "value": {"n": n, "é": 1.5},
                "tags": ["job"],
                "confidence": 0.7,
            },
        )
    http.post("/v1/records", json={"ref": "source/rate", "value": "60s", "confidence": 0.6})
    http.post(
        "/v1/outcomes", json={"outcome": "failure", "outcome_ref": "RUN-1", "refs": ["source/rate"]}
    )
    saved = http.post("/v1/memories", json={"content": "rotate keys every 90 days"}).json()
    gone = http.post("/v1/memories", json={"content": "a secret we must not keep"}).json()
    http.post("/v1/forget", json={"memory_id": gone["memory"]["id"]})
    http.post(
        "/v1/handoffs", json={"to": "executor", "summary": "s", "pins": [{"ref": "source/rate"}]}
    )
    http.post("/v1/sessions", json={"id": "sess-1", "project": "app", "cwd": "/srv/app"})
    observe(http, "ls")
    assert saved["success"]


def sealed(lines: list[dict[str, object]]) -> str:
    """A dump of ``lines`` with its end line, as `baton export` writes one."""
    seal = Seal()
    texts = [json.dumps(line) + "\n" for line in lines]
    for text in texts:
        seal.add(text)
    return "".join(texts) + json.dumps(seal.end()) + "\n"


def canonical(dump: str) -> list[str]:
    """A dump's lines with keys sorted (Redis hashes do not keep field order), without its
    end line (whose sha256 is of the text as written, in that order)."""
    lines = [json.loads(line) for line in dump.splitlines()]
    return [json.dumps(line, sort_keys=True) for line in lines if line["type"] != "end"]


def hashes(http: httpx.Client, ref: str) -> list[str]:
    return [v["hash"] for v in http.get(f"/v1/history/{ref}").json()["versions"]]


def test_export_flush_import_round_trip(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Everything comes back: chains verify with byte-identical hashes, outcomes, a record's
    contest, the packet, the session and its observation, search, and the forgotten memory
    stays forgotten."""
    populate(http)
    for value in ("apply", "skip"):  # two writes from the same read: a contested record
        http.post("/v1/records", json={"ref": "source/rate", "value": value, "based_on": [1]})
    before = {ref: hashes(http, ref) for ref in ("listing/553/assessment", "source/rate")}
    dump = tmp_path / "dump.jsonl"
    exported = baton(redis_url, "export")
    assert exported.returncode == 0, exported.stderr
    dump.write_text(exported.stdout)

    sync_redis.flushdb()
    loaded = baton(redis_url, "import", str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert "1 packets" in loaded.stdout and "1 sessions" in loaded.stdout

    assert {ref: hashes(http, ref) for ref in before} == before
    stats = http.get("/v1/stats", params={"verify": "true"}).json()
    assert (stats["broken"], stats["outcomes"]) == ([], 1)
    restored = http.get("/v1/records/source/rate").json()
    assert restored["contested"] == {"base": 1, "versions": [2, 3]}
    assert http.get("/v1/records/source/rate", params={"version": 1}).json()["confidence"] == 0.39
    [packet] = http.get("/v1/handoffs").json()["packets"]
    assert packet["state"] == "queued" and packet["pins"] == [{"ref": "source/rate", "version": 1}]
    pinned = sync_redis.zrange(Keys("default").pinned, 0, -1)
    assert pinned == [f"source/rate\0{packet['id']}".encode()]  # told when it moves
    assert http.get("/v1/sessions/sess-1").json()["observation_count"] == 1
    recall = http.post("/v1/memories/recall", json={"query": "rotate keys"}).json()
    assert [hit["kind"] for hit in recall["results"]] == ["memory"]
    assert http.post("/v1/memories/recall", json={"query": "secret keep"}).json()["results"] == []
    assert canonical(baton(redis_url, "export").stdout) == canonical(exported.stdout)


def test_a_restored_fact_is_found_by_its_tags_as_a_written_one_is(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Import indexes a fact's text with its tags, as remember does: a search for a word
    found only in a fact's tags finds it before an export and after the import alike."""
    http.post("/v1/records", json={"ref": "deploy/window", "value": "friday", "tags": ["freeze"]})

    def found() -> list[str]:
        reply = http.get("/v1/records", params={"query": "freeze"}).json()
        return [record["ref"] for record in reply["records"]]

    written = found()
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    sync_redis.flushdb()
    assert baton(redis_url, "import", str(dump)).returncode == 0
    assert found() == written == ["deploy/window"]


def test_a_restored_memory_keeps_its_ttl(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """A memory saved with ttl_days still expires after export, flush and import, at the
    time it was given (the dump carries it): found before, never found once it has passed."""
    saved = http.post("/v1/memories", json={"content": "ephemeral kiwi", "ttl_days": 3 / 86_400})
    assert saved.json()["memory"]["expires_at"] is not None
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    assert '"expires_us"' in dump.read_text()

    sync_redis.flushdb()
    assert baton(redis_url, "import", str(dump)).returncode == 0

    def found() -> bool:
        reply = http.post("/v1/memories/recall", json={"query": "ephemeral kiwi"}).json()
        return bool(reply["results"])

    assert found()
    time.sleep(3.2)
    assert not found()


def test_a_tampered_dump_is_refused_and_nothing_is_written(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Editing one value in the dump: import names the first broken link and writes nothing."""
    populate(http)
    lines = baton(redis_url, "export").stdout.splitlines()
    record = next(i for i, line in enumerate(lines) if '"listing/553/assessment"' in line)
    data = json.loads(lines[record])
    data["versions"][1]["value"] = {"n": 42}
    lines[record] = json.dumps(data)
    dump = tmp_path / "tampered.jsonl"
    dump.write_text("\n".join(lines))

    sync_redis.flushdb()
    refused = baton(redis_url, "import", str(dump))
    assert refused.returncode == 2
    assert "listing/553/assessment version 2: hash" in refused.stderr
    assert "nothing was written" in refused.stderr
    assert written_keys(sync_redis) == []


PACKET = {"id": "h_0000aaaa", "to": "executor", "state": "queued", "created_us": 1}


def test_a_corrupt_dump_changes_nothing_and_names_its_line(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """A malformed record, packet or session line anywhere (line 501 of 600 here), a packet
    id Baton does not make or an agent name it refuses among them, a session or observation
    without a field Baton reads back, is refused before anything is written, as `line N: …`
    naming the field, without a traceback."""
    for n in range(600):
        assert http.post("/v1/records", json={"ref": f"bulk/{n:03d}", "value": n}).is_success
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    lines = dump.read_text().splitlines()
    sync_redis.flushdb()
    bad_contest = json.loads(lines[501])
    bad_contest["head"] |= {"contested": "2;3", "contested_base": "1"}
    for number, broken in (
        (501, {"type": "record", "ref": "bulk/x", "head": {}, "versions": 5, "outcomes": []}),
        (502, bad_contest),
        (2, {"type": "packet", "fields": {"id": "h_1"}, "log": []}),
        (3, {"type": "packet", "fields": {**PACKET, "id": "h_ü1234567"}, "log": []}),
        (4, {"type": "packet", "fields": {**PACKET, "to": "../x"}, "log": []}),
        (
            600,
            {
                "type": "session",
                "id": "s",
                "meta": {},
                "touched": {},
                "files": [],
                "observations": [7],
            },
        ),
        (10, "not json"),
        (11, "[" * 100_000),  # nested past what json follows
    ):
        corrupt = list(lines)
        corrupt[number - 1] = broken if isinstance(broken, str) else json.dumps(broken)
        dump.write_text("\n".join(corrupt) + "\n")
        refused = baton(redis_url, "import", str(dump))
        assert refused.returncode == 2, refused.stderr
        assert f"line {number}: " in refused.stderr and "Traceback" not in refused.stderr
        assert written_keys(sync_redis) == []
    observation = {
        "id": "o_1",
        "session": "s",
        "agent": "scout",
        "project": "p",
        "hook_type": "stop",
        "type": "conversation",
        "title": "stop",
        "narrative": "done",
        "files": [],
        "timestamp": "2026-12-07T10:00:00Z",
        "created_at": "2026-12-07T10:00:00Z",
    }  # no cwd: a session read back would fail on it
    session = {"agent": "scout", "started_at": "2026-12-07T10:00:00+00:00"}
    for meta, observations, named in (
        (session, [observation], "observations[0].cwd is missing"),
        ({"started_at": session["started_at"]}, [], "meta.agent is missing"),
    ):
        line = {"type": "session", "id": "s", "meta": meta, "touched": {}, "files": []}
        dump.write_text(json.dumps({**line, "observations": observations}) + "\n")
        refused = baton(redis_url, "import", str(dump))
        assert refused.returncode == 2 and named in refused.stderr, refused.stderr
        assert written_keys(sync_redis) == []
    dump.write_bytes(b"\xff\xfe" + bytes(range(256)))
    binary = baton(redis_url, "import", str(dump))
    assert binary.returncode != 0 and "not UTF-8" in binary.stderr
    assert "Traceback" not in binary.stderr and written_keys(sync_redis) == []


def zebracorn_found(http: httpx.Client) -> bool:
    return bool(http.post("/v1/memories/recall", json={"query": "zebracorn"}).json()["results"])


def test_merging_a_dump_over_what_moved_on_since_leaves_exactly_the_dump(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """Export, then every record, packet and session of the dump moves on (a new version and
    outcome, the packet claimed, another observation); `import --merge` of the dump puts
    each of them back as the dump has it, nothing appended twice: the export after it is
    the dump again, every chain verifies, search no longer finds what came after, and the
    namespace's stored bytes (its quota count) are what they were at the export."""
    populate(http)
    exported = baton(redis_url, "export").stdout
    stored_at_export = sync_redis.hget(Keys().search_stats, "bytes")
    dump = tmp_path / "dump.jsonl"
    dump.write_text(exported)

    http.post("/v1/records", json={"ref": "source/rate", "value": "30s"})
    http.post(
        "/v1/outcomes", json={"outcome": "success", "outcome_ref": "RUN-2", "refs": ["source/rate"]}
    )
    http.post("/v1/agents/executor/resume", headers={"X-Baton-Agent": "executor"})
    observe(http, "zebracorn")
    assert canonical(baton(redis_url, "export").stdout) != canonical(exported)
    assert zebracorn_found(http)

    for _ in range(2):  # and merging it again changes nothing
        merged = baton(redis_url, "import", "--merge", str(dump))
        assert merged.returncode == 0, merged.stderr
        assert canonical(baton(redis_url, "export").stdout) == canonical(exported)
        assert sync_redis.hget(Keys().search_stats, "bytes") == stored_at_export
    assert http.get("/v1/stats", params={"verify": True}).json()["broken"] == []
    assert [p["state"] for p in http.get("/v1/handoffs").json()["packets"]] == ["queued"]
    resumed = http.post("/v1/agents/executor/resume", headers={"X-Baton-Agent": "executor"})
    assert resumed.json()["packet"] is not None  # back in its queue, claimable once
    assert not zebracorn_found(http)


def test_a_merged_packet_leaves_the_inbox_it_was_in(
    http: httpx.Client, redis_url: str, tmp_path: Path
) -> None:
    """A dump's packet whose id the namespace holds in another agent's inbox (a dump from
    elsewhere) replaces it there too: only the dump's receiver can claim it afterwards."""
    populate(http)
    lines = [json.loads(line) for line in baton(redis_url, "export").stdout.splitlines()]
    [packet] = [line for line in lines if line["type"] == "packet"]
    packet["fields"]["to"] = "reviewer"
    dump = tmp_path / "dump.jsonl"
    dump.write_text(sealed(lines[:-1]))

    merged = baton(redis_url, "import", "--merge", str(dump))
    assert merged.returncode == 0, merged.stderr
    for agent, claims in (("executor", False), ("reviewer", True)):
        resumed = http.post(f"/v1/agents/{agent}/resume", headers={"X-Baton-Agent": agent})
        assert (resumed.json()["packet"] is not None) is claims, agent
    assert len(http.get("/v1/handoffs").json()["packets"]) == 1


def test_importing_into_a_namespace_that_holds_data_needs_a_choice(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """A non-empty target is refused unless --replace (emptied first) or --merge (written
    over); both keep every chain verifiable."""
    assert http.post("/v1/records", json={"ref": "keep/a", "value": 1}).is_success
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    assert http.post("/v1/records", json={"ref": "later/b", "value": 2}).is_success
    refused = baton(redis_url, "import", str(dump))
    assert refused.returncode == 2 and "--replace" in refused.stderr
    assert baton(redis_url, "import", "--merge", str(dump)).returncode == 0
    assert http.get("/v1/records/later/b").status_code == 200
    assert baton(redis_url, "import", "--replace", str(dump)).returncode == 0
    assert http.get("/v1/records/later/b").status_code == 404
    assert http.get("/v1/records/keep/a").json()["value"] == 1
    assert http.get("/v1/stats", params={"verify": True}).json()["broken"] == []


def broken_dumps(lines: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    """Malformed variants of an exported dump: (what, dump text, what the refusal names)."""
    body = lines[:-1]
    index = next(i for i, line in enumerate(body) if line.get("ref") == "listing/553/assessment")
    session = next(i for i, line in enumerate(body) if line["type"] == "session")

    def edited(at: int, change: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
        copy = json.loads(json.dumps(body))
        change(copy[at])
        return copy

    def head_object(line: dict[str, Any]) -> None:
        line["head"]["confidence"] = {"nested": True}

    def yesterday(line: dict[str, Any]) -> None:
        line["meta"]["started_at"] = "yesterday"

    def extra_list(line: dict[str, Any]) -> None:
        line["versions"][0]["extra"] = [1, 2]

    def head_ahead(line: dict[str, Any]) -> None:
        line["head"]["version"] = "7"

    def gap(line: dict[str, Any]) -> None:
        del line["versions"][1]

    number = index + 1
    yield (
        "a head field holding an object",
        sealed(edited(index, head_object)),
        (f"line {number}: head.confidence is a object"),
    )
    yield (
        "a session started yesterday",
        sealed(edited(session, yesterday)),
        (f"line {session + 1}: meta.started_at 'yesterday' is not an ISO 8601 time"),
    )
    yield (
        "a version with an extra list",
        sealed(edited(index, extra_list)),
        (f"line {number}: versions[0].extra is a list"),
    )
    yield (
        "a head ahead of its versions",
        sealed(edited(index, head_ahead)),
        (f"line {number}: head.version is 7 but the dump has versions 1..3"),
    )
    yield (
        "a missing version",
        sealed(edited(index, gap)),
        (f"line {number}: versions[1].version is 3, expected 2"),
    )
    text = sealed(body)
    cut = "".join(text.splitlines(keepends=True)[: len(body) // 2])
    yield (
        "a dump cut at a line boundary",
        cut,
        (f"line {len(body) // 2 + 1}: the dump ends without its end line"),
    )
    short = json.dumps(body[0]) + "\n" + text.splitlines(keepends=True)[-1]
    yield "lines dropped before the end line", short, "line 2: the end line says"


def test_a_malformed_or_cut_dump_leaves_the_namespace_exactly_as_it_was(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """`import --replace` of a malformed dump (a head field holding an object, a session
    started "yesterday", a version with an extra list field, a head ahead of its versions, a
    gap in the versions, a dump cut at a line boundary or missing lines before its end
    line) is refused with one line naming the line and the field, before anything is
    deleted or written: the namespace is exactly as it was."""
    populate(http)
    before = baton(redis_url, "export").stdout
    lines = [json.loads(line) for line in before.splitlines()]
    assert lines[-1]["type"] == "end" and lines[-1]["lines"] == len(lines) - 1
    dump = tmp_path / "dump.jsonl"
    for what, text, named in broken_dumps(lines):
        dump.write_text(text)
        refused = baton(redis_url, "import", "--replace", str(dump))
        assert refused.returncode == 2, what
        [line] = refused.stderr.strip().splitlines()
        assert named in line and "nothing was written" in line, (what, line)
        assert canonical(baton(redis_url, "export").stdout) == canonical(before), what


def test_replace_is_all_or_nothing_when_redis_refuses_the_writes(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """A valid dump whose writes Redis refuses (out of memory here; a full disk alike)
    leaves the namespace it was to replace exactly as it was, with one line saying why."""
    populate(http)
    dump = tmp_path / "dump.jsonl"
    dump.write_text(baton(redis_url, "export").stdout)
    assert http.post("/v1/records", json={"ref": "later/b", "value": 2}).is_success
    before = baton(redis_url, "export").stdout
    sync_redis.config_set("maxmemory", 1)
    try:
        refused = baton(redis_url, "import", "--replace", str(dump))
    finally:
        sync_redis.config_set("maxmemory", 0)
    assert refused.returncode == 1, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "out of memory" in line
    assert canonical(baton(redis_url, "export").stdout) == canonical(before)


def test_a_dump_made_before_end_lines_imports_with_unsealed(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis, tmp_path: Path
) -> None:
    """A dump without an end line (as Baton wrote them before) is refused with the way out
    named, and imports whole with --unsealed, every other check still made."""
    populate(http)
    exported = baton(redis_url, "export").stdout
    dump = tmp_path / "old.jsonl"
    dump.write_text("".join(exported.splitlines(keepends=True)[:-1]))
    sync_redis.flushdb()
    refused = baton(redis_url, "import", str(dump))
    assert refused.returncode == 2 and "--unsealed" in refused.stderr
    loaded = baton(redis_url, "import", "--unsealed", str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert canonical(baton(redis_url, "export").stdout) == canonical(exported)


def test_a_held_packet_comes_back_held_and_is_sent_when_its_session_ends(
    http: httpx.Client, redis_url: str, sync_redis: redis.Redis
) -> None:
    """A packet held for its sender's session end is restored held (not claimable), and
    ending that session after the import sends it."""
    scout = {"X-Baton-Agent": "scout", "X-Baton-Session": "sess-9"}
    http.post("/v1/sessions", json={"id": "sess-9"}, headers={"X-Baton-Agent": "scout"})
    http.post("/v1/records", json={"ref": "source/rate", "value": "60s"}, headers=scout)
    held = http.post(
        "/v1/handoffs",
        json={"to": "executor", "summary": "s", "deliver": "session_end"},
        headers=scout,
    ).json()
    exported = baton(redis_url, "export")
    assert exported.returncode == 0, exported.stderr
    sync_redis.flushdb()
    loaded = baton(redis_url, "import", "-", stdin=exported.stdout)
    assert loaded.returncode == 0, loaded.stderr
    executor = {"X-Baton-Agent": "executor"}
    assert http.get(f"/v1/handoffs/{held['id']}").json()["state"] == "held"
    waiting = http.post("/v1/agents/executor/resume", json={}, headers=executor).json()
    assert waiting["packet"] is None
    http.post("/v1/sessions/sess-9/end", json={}, headers={"X-Baton-Agent": "scout"})
    resumed = http.post("/v1/agents/executor/resume", json={}, headers=executor).json()
    assert resumed["packet"]["id"] == held["id"]
