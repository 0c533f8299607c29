"""Baton as an AMFS storage adapter: one scripted session through AMFS's own filesystem
adapter and through Baton's, compared field by field, and what only Baton's can do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from amfs import AgentMemory
from amfs_core.abc import AdapterABC
from amfs_core.exceptions import AdapterError, VersionConflictError
from amfs_core.models import MemoryEntry, MemoryType, OutcomeType
from amfs_filesystem import FilesystemAdapter

from baton.agents import BatonClient
from baton.agents.amfs import AMFS_TAG, BatonAdapter, in_process
from baton.server.model.keys import Keys
from baton.server.runtime.settings import Settings
from tests.conftest import REPO, issue, running_server

# What differs between the two adapters on purpose, and why (docs/amfs.md says the same).
BY_DESIGN = {
    "integrity_chain": "Baton's version hash: it chains the whole version (value, author, "
    "time, session, tags), not only AMFS's content hash",
    "provenance.written_at": "the time Baton stored the version, not the SDK's clock",
    "confidence after an outcome": "Baton's formula (a success closes a fifth of the gap to 1, "
    "a failure keeps 65 %), not AMFS's evidence model; both move the same way",
    "version after an outcome": "Baton moves confidence in place and logs the move in the "
    "record's outcome log; AMFS's adapters write a new version per outcome",
    "list_outcomes": "Baton's outcome log answers it; the filesystem adapter keeps none",
    "recall_count": "the filesystem adapter rewrites the stored file on every read; Baton "
    "never changes a stored version",
}


def view(entry: MemoryEntry | None) -> dict[str, Any] | None:
    """The fields both adapters must agree on (BY_DESIGN lists the others)."""
    if entry is None:
        return None
    return {
        "entity_path": entry.entity_path,
        "key": entry.key,
        "version": entry.version,
        "value": entry.value,
        "confidence": entry.confidence,
        "memory_type": entry.memory_type,
        "agent_id": entry.provenance.agent_id,
        "content_hash": entry.content_hash,
    }


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def scripted_session(adapter: AdapterABC) -> dict[str, Any]:
    """Writes, a correction, reads at versions, listing, a watch and two outcomes, through
    AMFS's ``AgentMemory`` on ``adapter``; what each step returned."""
    with (
        AgentMemory("scout", adapter=adapter) as scout,
        AgentMemory("executor", adapter=adapter) as executor,
    ):
        watched: list[MemoryEntry] = []
        handle = adapter.watch("listing", watched.append)
        # AMFS's filesystem watch polls: a version superseded before its next look is never
        # delivered. Each write waits for the watch, so both adapters see every version.
        scout.write("listing/482", "assessment", {"verdict": "apply"}, confidence=0.8)
        wait_for(lambda: len(watched) == 1)
        scout.write("listing/553", "assessment", {"verdict": "apply"}, confidence=0.7)
        wait_for(lambda: len(watched) == 2)
        scout.write(
            "source/boards", "rate-limit", {"per_minute": 30}, memory_type=MemoryType.BELIEF
        )
        scout.write(
            "listing/553", "assessment", {"verdict": "skip", "why": "closed"}, confidence=0.9
        )
        wait_for(lambda: len(watched) == 3)
        handle.cancel()
        result: dict[str, Any] = {
            "read": [view(executor.read("listing/482", "assessment"))],
            "corrected": view(executor.read("listing/553", "assessment")),
            "at v1": view(adapter.read_at_version("listing/553", "assessment", 1)),
            "missing": view(adapter.read("listing/999", "assessment")),
            "list": sorted(map(str, map(view, adapter.list("listing/553")))),
            "history": list(map(view, adapter.list("listing/553", include_superseded=True))),
            "below": adapter.list("listing"),
            "watched": sorted(str(view(entry)) for entry in watched),
            "integrity": adapter.verify_integrity(),
        }
        before = {
            ref: adapter.read(*ref.rsplit("/", 1))
            for ref in ("listing/482/assessment", "source/boards/rate-limit")
        }
        executor.commit_outcome("RUN-1", OutcomeType.SUCCESS, ["listing/482/assessment"])
        executor.commit_outcome("RUN-2", OutcomeType.FAILURE, ["source/boards/rate-limit"])
        result["moved"] = {
            ref: (entry, adapter.read(*ref.rsplit("/", 1))) for ref, entry in before.items()
        }
        result["outcomes"] = adapter.list_outcomes()
        result["session"] = scout.session_id
        result["sessions of writes"] = {
            entry.provenance.session_id for entry in adapter.list(include_superseded=True)
        }
        return result


@pytest.fixture
def adapter(api_url: str, redis_url: str) -> Iterator[BatonAdapter]:
    baton = BatonAdapter(api_url)
    yield baton
    baton.close()


@pytest.fixture
def memory(adapter: BatonAdapter) -> Iterator[Callable[[str], AgentMemory]]:
    """AgentMemory handles on the Baton adapter, closed after the test."""
    opened: list[AgentMemory] = []

    def open_as(agent: str) -> AgentMemory:
        opened.append(AgentMemory(agent, adapter=adapter))
        return opened[-1]

    yield open_as
    for each in opened:
        each.close()


def test_the_same_session_gives_the_same_answers_through_both_adapters(
    adapter: BatonAdapter, tmp_path: Path
) -> None:
    """Every answer of a scripted AMFS session on Baton equals the filesystem adapter's, but
    for the differences BY_DESIGN lists; the outcomes move confidence the same way."""
    files = FilesystemAdapter(tmp_path / "amfs")
    try:
        expected = scripted_session(files)
    finally:
        files.close()
    got = scripted_session(adapter)
    for step in ("read", "corrected", "at v1", "missing", "list", "history", "below", "watched"):
        assert got[step] == expected[step], step
    assert got["corrected"]["version"] == 2 and got["at v1"]["value"] == {"verdict": "apply"}
    assert got["integrity"]["corrupted"] == got["integrity"]["chain_breaks"] == []
    assert expected["integrity"]["corrupted"] == expected["integrity"]["chain_breaks"] == []
    assert got["sessions of writes"] == {got["session"]}
    for ref, (was, now) in got["moved"].items():
        was_fs, now_fs = expected["moved"][ref]
        assert (now.confidence > was.confidence) == (now_fs.confidence > was_fs.confidence), ref
        assert (now.confidence < was.confidence) == (now_fs.confidence < was_fs.confidence), ref
        assert now.confidence != was.confidence, ref
        assert now.version == was.version and now_fs.version == was_fs.version + 1  # BY_DESIGN
    assert expected["outcomes"] == []  # BY_DESIGN: the filesystem adapter keeps none
    assert [
        (o.outcome_ref, o.outcome_type, o.causal_entry_keys, o.agent_id) for o in got["outcomes"]
    ] == [
        ("RUN-1", OutcomeType.SUCCESS, ["listing/482/assessment"], "executor"),
        ("RUN-2", OutcomeType.FAILURE, ["source/boards/rate-limit"], "executor"),
    ]


def test_an_entry_written_through_amfs_is_a_baton_record_and_back(
    adapter: BatonAdapter, memory: Callable[[str], AgentMemory], scout: BatonClient
) -> None:
    """What AMFS writes is a Baton version (tagged, value and AMFS's fields in an envelope,
    chained); a record a Baton agent writes reads through AMFS with AMFS's defaults."""
    planner = memory("planner")
    written = planner.write(
        "deploy/policy", "window", "weekdays", confidence=0.6, memory_type=MemoryType.BELIEF
    )
    stored = scout.recall("deploy/policy/window")
    assert stored.tags == [AMFS_TAG] and stored.author == "planner"
    assert stored.value["value"] == "weekdays"
    assert stored.value[AMFS_TAG]["memory_type"] == "belief"
    assert written.integrity_chain == stored.hash and written.version == stored.version == 1

    scout.remember("deploy/policy/freeze", {"from": "12-20"}, confidence=0.9)
    native = planner.read("deploy/policy", "freeze")
    assert native is not None and native.value == {"from": "12-20"}
    assert (native.provenance.agent_id, native.confidence) == ("scout", 0.9)
    assert native.memory_type == MemoryType.FACT and native.content_hash is None


def test_a_stale_write_is_refused_and_nothing_is_written(
    adapter: BatonAdapter, memory: Callable[[str], AgentMemory]
) -> None:
    """An entry written on top of a version that is no longer current raises AMFS's
    VersionConflictError naming both versions; the record keeps its versions."""
    scout = memory("scout")
    first = scout.write("listing/553", "assessment", "apply")
    scout.write("listing/553", "assessment", "skip")
    as_scout = BatonAdapter(adapter.base_url, agent="scout")
    with pytest.raises(VersionConflictError) as refused:
        as_scout.write(first.model_copy(update={"version": 2, "value": "late"}))
    as_scout.close()
    assert (refused.value.expected, refused.value.actual) == (2, 2)
    assert [e.value for e in adapter.list("listing/553", include_superseded=True)] == [
        "apply",
        "skip",
    ]


def test_what_baton_cannot_promise_is_refused_with_amfs_errors(
    adapter: BatonAdapter, memory: Callable[[str], AgentMemory]
) -> None:
    """A key with a slash and an atomic batch are refused with AMFS's own errors; Baton's
    validation errors come back as AdapterError naming the field."""
    scout = memory("scout")
    with pytest.raises(AdapterError, match="holds no '/'"):
        scout.write("listing", "553/assessment", "apply")
    entry = scout.write("listing/553", "assessment", "apply")
    with pytest.raises(NotImplementedError, match="atomic"):
        adapter.write_batch([entry])
    with pytest.raises(AdapterError, match="segment"):
        scout.write("listing/5 53", "assessment", "apply")


def test_verify_integrity_finds_a_value_edited_behind_batons_back(
    adapter: BatonAdapter, memory: Callable[[str], AgentMemory], redis_url: str
) -> None:
    """A stored value changed in Redis directly is reported corrupted, with its version."""
    scout = memory("scout")
    scout.write("policy/deploy", "rule", "never on friday")
    scout.write("policy/deploy", "rule", "never on friday or saturday")
    data = redis.Redis.from_url(redis_url)
    stored = msgpack.unpackb(data.hget(Keys().version("policy/deploy/rule", 1), "value"))
    stored["value"] = "EVIL: push to main"
    data.hset(Keys().version("policy/deploy/rule", 1), "value", msgpack.packb(stored))
    report = adapter.verify_integrity("policy")
    assert [(c["key"], c["version"]) for c in report["corrupted"]] == [("rule", 1)]
    assert report["valid"] == report["total_checked"] - 1


def test_watch_sees_a_baton_agents_writes(adapter: BatonAdapter, scout: BatonClient) -> None:
    """A watch started through AMFS delivers versions a Baton agent writes over REST, each
    once and in order, and only those in its entity path: all of them, even those written
    while it was busy delivering an earlier one (each event names its version)."""
    watched: list[MemoryEntry] = []
    busy, go_on = threading.Event(), threading.Event()

    def deliver(entry: MemoryEntry) -> None:
        if entry.key == "first":  # the watch is held here while the next writes land
            busy.set()
            go_on.wait(10)
        watched.append(entry)

    handle = adapter.watch("listing", deliver)
    scout.remember("listing/0/first", "hold")
    assert busy.wait(10)
    scout.remember("listing/482/assessment", "apply")
    scout.remember("other/482/assessment", "ignored")
    scout.remember("listing/482/assessment", "skip")
    go_on.set()
    wait_for(lambda: len(watched) >= 3)
    handle.cancel()
    scout.remember("listing/482/assessment", "after the cancel")
    time.sleep(0.3)
    assert [(e.key, e.version, e.value) for e in watched] == [
        ("first", 1, "hold"),
        ("assessment", 1, "apply"),
        ("assessment", 2, "skip"),
    ]


def test_agents_act_under_their_own_tokens(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a Baton with tokens, an AgentMemory with its agent's token writes as that
    agent; another agent's AgentMemory on the same token writes nothing, under no name."""
    url = f"{redis_url}?db=5"
    store = redis.Redis.from_url(url)
    store.flushdb()
    try:
        secret = issue(url, "scout")
        monkeypatch.delenv("BATON_TOKEN", raising=False)
        with running_server(url, tmp_path / "serve.log") as api:
            adapter = BatonAdapter(api, agent="scout", token=secret)
            with AgentMemory("scout", adapter=adapter) as scout:
                written = scout.write("listing/553", "assessment", "apply")
                assert written.provenance.agent_id == "scout"
            # Binding to executor is refused (403), and AMFS goes on with the adapter as is.
            with AgentMemory("executor", adapter=adapter) as executor:
                with pytest.raises(AdapterError, match="acts as scout, not executor"):
                    executor.write("listing/553", "assessment", "skip")
                versions = adapter.list("listing/553", include_superseded=True)
            assert [entry.value for entry in versions] == ["apply"]
    finally:
        store.flushdb()


def test_in_process_serves_the_adapter_from_this_process(redis_url: str) -> None:
    """``in_process`` runs Baton's API in a thread here: an AMFS agent works against it, and
    the server is gone once the block ends."""
    with in_process(Settings(redis_url=redis_url, checkpoint_seconds=None)) as url:
        adapter = BatonAdapter(url)
        with AgentMemory("scout", adapter=adapter) as scout:
            scout.write("notes/today", "plan", "ship")
        assert adapter.read("notes/today", "plan").value == "ship"  # type: ignore[union-attr]
    with pytest.raises(AdapterError, match="Connection refused"):
        adapter.read("notes/today", "plan")
    adapter.close()


def test_the_readme_lines_give_a_working_amfs_agent(api_url: str, redis_url: str) -> None:
    """The three lines README gives under "Use from AMFS" make an agent whose writes land
    in Baton as versions of the record they name."""
    section = (REPO / "README.md").read_text().split("## Use from AMFS", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len([line for line in code.splitlines() if line.strip()]) == 3
    namespace: dict[str, Any] = {}
    exec(code.replace("http://127.0.0.1:8765", api_url), namespace)
    with namespace["memory"] as memory:
        memory.write("listing/482", "assessment", "apply")
        memory.write("listing/482", "assessment", "skip")
    with BatonClient(api_url, agent="reader") as baton:
        history = baton.history("listing/482/assessment")
    assert [v.value["value"] for v in history.versions] == ["apply", "skip"]
    assert all(v.chain_ok and v.author == "scout" for v in history.versions)
