"""The MCP tools: in memory, over stdio with real `baton mcp` processes, and over HTTP."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import jsonschema
import pytest
import redis
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from baton.server.mcp.mcp_server import Binding, create_mcp_server
from baton.server.runtime.embedded import EmbeddedServer
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from tests.conftest import REPO, as_agent, handoff_input

pytestmark = pytest.mark.anyio

TOOLS = {
    "remember": {"ref", "value"},
    "recall": set(),
    "history": {"ref"},
    "handoff": {"to", "summary"},
    "resume": set(),
    "record_outcome": {"outcome", "outcome_ref"},
    "memory_stats": set(),
    "memory_save": {"content"},
    "memory_recall": {"query"},
    "memory_smart_search": set(),
    "memory_sessions": set(),
    "memory_forget": set(),
    "memory_resume_here": set(),
    "memory_file_history": {"files"},
    "memory_patterns": set(),
    "memory_update": {"memoryId"},
    "memory_consolidate": set(),
    "agent_as_of": {"agent"},
}


@asynccontextmanager
async def connected(backend: Backend, agent: str) -> AsyncIterator[Client]:
    """An in-memory MCP client acting as ``agent`` in its own session."""
    binding = Binding(caller=as_agent(agent, session=f"{agent}-session"), backend=backend)
    async with Client(create_mcp_server(binding)) as client:
        yield client


@pytest.fixture
async def scout(dispatching_backend: Backend) -> AsyncIterator[Client]:
    async with connected(dispatching_backend, "scout") as client:
        yield client


@pytest.fixture
async def executor(dispatching_backend: Backend) -> AsyncIterator[Client]:
    async with connected(dispatching_backend, "executor") as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed and return its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def error_text(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail as a tool result (isError), and return its message."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_tool_list_and_required_parameters(scout: Client) -> None:
    """Baton's reference tools and the coding-agent tools, each with a description and
    its required fields."""
    tools = {tool.name: tool for tool in (await scout.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for name, required in TOOLS.items():
        assert tools[name].description
        assert set(tools[name].input_schema.get("required", [])) == required
        assert tools[name].output_schema is not None
    outcome = tools["record_outcome"].input_schema["properties"]
    assert set(outcome["outcome"]["enum"]) == {"success", "failure"}
    assert {"refs", "note", "handoff_id"} <= set(outcome)
    assert "verify" in tools["memory_stats"].input_schema["properties"]


async def test_each_tool_publishes_the_shape_of_its_answer(scout: Client) -> None:
    """Every tool's outputSchema is its REST answer's shape (the SDK client checks each
    result against it, so every other test here exercises it): remember's requires its
    version and hash as an integer and a string, and recall's admits one record or a page."""
    tools = {tool.name: tool for tool in (await scout.list_tools()).tools}
    for tool in tools.values():
        schema = tool.output_schema
        assert schema is not None and schema["type"] == "object"
        assert "properties" in schema or "anyOf" in schema, tool.name
    remembered = tools["remember"].output_schema
    assert remembered is not None
    assert {"ref", "version", "hash", "prev_hash"} <= set(remembered["required"])
    assert remembered["properties"]["version"]["type"] == "integer"
    jsonschema.validate(
        {
            "ref": "a/b",
            "version": 1,
            "hash": "h",
            "prev_hash": "p",
            "superseded": None,
            "created_at": "t",
        },
        remembered,
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ref": "a/b", "version": "1"}, remembered)
    recall = tools["recall"].output_schema
    assert recall is not None
    assert [set(member["properties"]) >= {"records"} for member in recall["anyOf"]] == [
        False,
        True,
    ]


async def test_every_tool_in_the_reference_story(scout: Client, executor: Client) -> None:
    """remember, recall, history, handoff (touched set pinned), resume (stale flagged),
    record_outcome (closing the packet) and memory_stats, end to end."""
    await call(
        scout, "remember", ref="listing/482/assessment", value={"verdict": "apply"}, confidence=0.8
    )
    await call(scout, "remember", ref="listing/553/assessment", value={"verdict": "apply"})
    packet = await call(
        scout,
        "handoff",
        to="executor",
        summary="Two listings",
        next=["Draft 482"],
        open=["Backoff?"],
    )
    assert [(p["ref"], p["version"]) for p in packet["pins"]] == [
        ("listing/482/assessment", 1),
        ("listing/553/assessment", 1),
    ]
    second = await call(scout, "remember", ref="listing/553/assessment", value={"verdict": "maybe"})
    assert second["version"] == 2

    resumed = await call(executor, "resume")
    assert resumed["packet"]["id"] == packet["id"]
    [stale] = resumed["stale"]  # the pin that moved, explained over MCP too
    assert (stale["ref"], stale["pinned_version"], stale["current_version"]) == (
        "listing/553/assessment",
        1,
        2,
    )
    assert stale["patch"] == [{"op": "replace", "path": "/verdict", "value": "maybe"}]
    assert [(v["version"], v["author"]) for v in stale["versions"]] == [(2, "scout")]
    current = await call(executor, "recall", ref="listing/553/assessment")
    assert current["value"] == {"verdict": "maybe"}
    listing = await call(executor, "recall", scope="listing", min_confidence=0.6)
    assert [r["ref"] for r in listing["records"]] == ["listing/482/assessment"]
    history = await call(executor, "history", ref="listing/553/assessment")
    assert [v["chain_ok"] for v in history["versions"]] == [True, True]

    report = await call(
        executor,
        "record_outcome",
        outcome="success",
        outcome_ref="RUN-42",
        refs=["listing/482/assessment"],
        handoff_id=packet["id"],
    )
    assert report["moves"][0]["after"] == 0.84  # shown rounded (stored 0.8400000000000001)
    assert report["handoff"]["state"] == "done"
    stats = await call(executor, "memory_stats", verify=True)
    assert (stats["refs"], stats["versions"], stats["outcomes"], stats["broken"]) == (2, 3, 1, [])
    assert stats["handoffs"] == {
        "held": 0,
        "queued": 0,
        "claimed": 0,
        "done": 1,
        "failed": 0,
        "expired": 0,
    }
    assert (await call(executor, "resume"))["packet"] is None


async def test_record_outcome_defaults_to_the_session_touched_set(
    scout: Client, executor: Client
) -> None:
    """Without refs, an outcome applies to what this connection's session read or wrote."""
    await call(scout, "remember", ref="a/read", value=1, confidence=0.6)
    await call(scout, "remember", ref="a/other", value=1, confidence=0.6)
    await call(executor, "recall", ref="a/read")
    report = await call(executor, "record_outcome", outcome="failure", outcome_ref="RUN-1")
    assert [(move["ref"], round(move["after"], 2)) for move in report["moves"]] == [
        ("a/read", 0.39)
    ]


async def test_an_outcome_on_a_record_read_at_an_older_version_says_so(
    scout: Client, executor: Client
) -> None:
    """record_outcome moves the current version's confidence but reports, per ref, that the
    caller's session decided on an older version (not refused)."""
    await call(scout, "remember", ref="b/fact", value="old")
    await call(executor, "recall", ref="b/fact")
    await call(scout, "remember", ref="b/fact", value="new")
    report = await call(executor, "record_outcome", outcome="success", outcome_ref="RUN-7")
    assert report["stale"] == [{"ref": "b/fact", "seen_version": 1, "moved_version": 2}]
    assert report["moves"][0]["version"] == 2
    bad_pin = await error_text(
        scout, "handoff", to="x", summary="s", pins=[{"ref": "b/fact", "version": 9}]
    )
    assert "(current 2)" in bad_pin and "b'" not in bad_pin


async def test_numbers_are_numbers_as_over_rest(scout: Client) -> None:
    """A true where a number is expected is refused, as REST refuses it, rather than read as
    1; a whole number where a decimal is expected is fine, and so is a number as text (models
    send them); the bounds are in the input schema. An empty list of ids to expand names
    expandIds."""
    assert "confidence" in await error_text(scout, "remember", ref="a/b", value=1, confidence=True)
    assert "expected_version" in await error_text(
        scout, "remember", ref="a/b", value=1, expected_version=True
    )
    assert (await call(scout, "remember", ref="a/b", value=1, confidence=1))["version"] == 1
    assert "version" in await error_text(scout, "recall", ref="a/b", version=True)
    assert len((await call(scout, "recall", scope="a", limit="10"))["records"]) == 1
    tools = {tool.name: tool for tool in (await scout.list_tools()).tools}
    confidence = tools["remember"].input_schema["properties"]["confidence"]
    assert (confidence["type"], confidence["minimum"], confidence["maximum"]) == ("number", 0, 1)
    assert "expandIds" in await error_text(scout, "memory_smart_search", expandIds=",")


async def test_stored_numbers_come_back_exactly_as_written(scout: Client) -> None:
    """Rounding is for Baton's own figures: a value's numbers (even under a key named like
    one of them) come back unrounded from recall and resume, so writing back what was read
    changes nothing."""
    value = {"lat": 52.520008, "fee": 0.00001, "confidence": 0.123456789, "all": [1e-9]}
    await call(scout, "remember", ref="geo/berlin", value=value, confidence=0.123456789)
    recalled = await call(scout, "recall", ref="geo/berlin")
    assert recalled["value"] == value
    assert recalled["confidence"] == 0.1235
    await call(scout, "handoff", to="scout", summary="s", pins=[{"ref": "geo/berlin"}])
    resumed = await call(scout, "resume")
    assert resumed["pins"][0]["value"] == value


async def test_mistakes_are_error_results_not_crashes(scout: Client) -> None:
    """Bad input and unknown refs come back as isError results with a clear message, and the
    server keeps answering afterwards."""
    assert "ref: 'nokey' has no scope" in await error_text(scout, "remember", ref="nokey", value=1)
    assert "no record no/such" in await error_text(scout, "recall", ref="no/such")
    assert "no record no/such" in await error_text(scout, "history", ref="no/such")
    await call(scout, "remember", ref="a/b", value=1)
    conflict = await error_text(scout, "remember", ref="a/b", value=2, expected_version=0)
    assert "a/b is at version 1, not 0" in conflict
    assert "confidence" in await error_text(scout, "remember", ref="a/b", value=1, confidence=3)
    assert "value" in await error_text(scout, "remember", ref="a/b")
    assert "summary" in await error_text(scout, "handoff", to="executor", summary=" ")
    assert "pins[0].ref" in await error_text(
        scout, "handoff", to="x", summary="s", pins=[{"ref": "no/such"}]
    )
    assert "no packet h_00000000" in await error_text(
        scout,
        "record_outcome",
        outcome="success",
        outcome_ref="R",
        refs=["a/b"],
        handoff_id="h_00000000",
    )
    assert (await call(scout, "recall", ref="a/b"))["version"] == 1


def stdio_server(agent: str, redis_url: str) -> StdioServerParameters:
    env = {**os.environ, "BATON_REDIS_URL": redis_url, "AGENT_ID": agent}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "baton.server.cli", "mcp"], env=env, cwd=str(REPO)
    )


@pytest.mark.slow
async def test_two_stdio_processes_hand_work_over(redis_url: str) -> None:
    """A real `baton mcp` process as the scout remembers and hands off without pins (its
    session's touched set is pinned); a second process as the executor resumes it."""
    async with Client(stdio_server("scout", redis_url)) as scout:
        await call(scout, "remember", ref="listing/482/assessment", value="apply", confidence=0.8)
        packet = await call(scout, "handoff", to="executor", summary="One listing")
    assert [(p["ref"], p["version"]) for p in packet["pins"]] == [("listing/482/assessment", 1)]
    assert packet["from"] == "scout"

    async with Client(stdio_server("executor", redis_url)) as executor:
        resumed = await call(executor, "resume")
        assert resumed["packet"]["id"] == packet["id"]
        assert resumed["pins"][0]["value"] == "apply"
        report = await call(
            executor,
            "record_outcome",
            outcome="success",
            outcome_ref="RUN-1",
            handoff_id=packet["id"],
        )
    assert [move["ref"] for move in report["moves"]] == ["listing/482/assessment"]
    assert report["handoff"]["state"] == "done"


def http_client(api_url: str, agent: str, **headers: str) -> Client:
    http = httpx.AsyncClient(headers={"X-Baton-Agent": agent, **headers})
    return Client(streamable_http_client(f"{api_url}/mcp", http_client=http), mode="legacy")


async def test_streamable_http_sessions_and_agents(api_url: str, redis_url: str) -> None:
    """Over HTTP at /mcp the agent comes from X-Baton-Agent and each MCP session is a Baton
    session: the scout's handoff pins what that session wrote; the executor resumes it."""
    async with http_client(api_url, "scout") as scout:
        written = await call(scout, "remember", ref="a/b", value={"n": 1})
        packet = await call(scout, "handoff", to="executor", summary="over http")
    assert [(p["ref"], p["version"]) for p in packet["pins"]] == [("a/b", written["version"])]
    assert packet["from"] == "scout"
    assert packet["session"].startswith("mcp-")

    async with http_client(api_url, "executor") as executor:
        resumed = await call(executor, "resume")
        assert resumed["packet"]["id"] == packet["id"]


async def test_sessionless_http_clients_name_their_session_in_a_header(
    api_url: str, redis_url: str
) -> None:
    """A client on the stateless protocol has no MCP session; X-Baton-Session gives it one.
    A malformed agent header is refused before any tool runs (422 problem naming it)."""
    http = httpx.AsyncClient(headers={"X-Baton-Agent": "scout", "X-Baton-Session": "s-42"})
    async with Client(streamable_http_client(f"{api_url}/mcp", http_client=http)) as scout:
        await call(scout, "remember", ref="a/b", value=1)
        packet = await call(scout, "handoff", to="executor", summary="stateless")
    assert (packet["session"], packet["pins"]) == ("s-42", [{"ref": "a/b", "version": 1}])

    refused = httpx.post(f"{api_url}/mcp", json={}, headers={"X-Baton-Agent": "not valid"})
    assert (refused.status_code, refused.json()["field"]) == (422, "x-baton-agent")


async def test_connections_that_record_nothing_leave_no_session(
    api_url: str, redis_url: str
) -> None:
    """An MCP connection (HTTP) or a `baton mcp` process (stdio) that only looks around
    creates no session: sessions appear once something is recorded in them."""
    async with http_client(api_url, "looker") as looker:
        await looker.list_tools()
        await call(looker, "memory_stats")
        await call(looker, "memory_sessions")
    async with Client(stdio_server("looker", redis_url)) as process:
        await call(process, "memory_stats")
    assert httpx.get(f"{api_url}/v1/sessions").json() == []

    async with http_client(api_url, "writer") as writer:
        await call(writer, "remember", ref="a/b", value=1)
    [listed] = httpx.get(f"{api_url}/v1/sessions").json()
    assert (listed["agent"], listed["touched"]) == ("writer", {"a/b": 1})


async def test_agentmemorys_tools_answer_as_its_routes_do(api_url: str, redis_url: str) -> None:
    """The MCP tools agentmemory has too (memory_save, memory_recall, memory_smart_search,
    memory_sessions) answer with agentmemory's field names, over MCP as on Baton's own
    /agentmemory routes, each checked against the tool's outputSchema; Baton's own
    memory_forget keeps Baton's."""
    headers = {"X-Baton-Agent": "codex"}
    with httpx.Client(base_url=f"{api_url}/agentmemory", headers=headers) as rest:
        rest.post("/session/start", json={"sessionId": "s-shape", "project": "app", "cwd": "/a"})
        remembered = rest.post("/remember", json={"content": "prefer small focused commits"})
        memory_id = remembered.json()["memory"]["id"]
        async with http_client(api_url, "codex") as client:
            schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}

            async def answer(tool: str, **arguments: Any) -> dict[str, Any]:
                found = await call(client, tool, **arguments)
                jsonschema.validate(found, schemas[tool])
                return found

            saved = await answer("memory_save", content="rebase before merging to main")
            assert set(saved) == set(remembered.json())
            assert set(saved["memory"]) == set(remembered.json()["memory"])
            assert saved["memory"]["agentId"] == "codex" and "agent_id" not in saved["memory"]
            sessions = await answer("memory_sessions")
            assert sessions == rest.get("/sessions").json()
            assert sessions["sessions"][0]["observationCount"] == 0
            for form in ("full", "compact", "narrative"):
                recalled = await answer("memory_recall", query="small commits", format=form)
                searched = rest.post("/search", json={"query": "small commits", "format": form})
                assert recalled == searched.json(), form
            expanded = await answer("memory_smart_search", expandIds=memory_id)
            smart = rest.post("/smart-search", json={"expandIds": [memory_id]})
            assert expanded == smart.json()
            forgotten = await answer("memory_forget", memoryId=memory_id)
            assert forgotten["audit_ids"]  # Baton's own tool, Baton's names


@pytest.mark.slow
async def test_memory_db_names_the_store_of_stdio_processes(tmp_path: Path) -> None:
    """agent-handoff-memory's configuration (`MEMORY_DB`, `AGENT_ID`, no Baton settings):
    two `baton mcp` processes given one MEMORY_DB share a store kept beside it
    (`<MEMORY_DB>.baton`), as they shared one SQLite file; another MEMORY_DB is another
    store. The writer is the AGENT_ID agent."""

    def server(agent: str, memory_db: Path) -> StdioServerParameters:
        env = {**os.environ, "MEMORY_DB": str(memory_db), "AGENT_ID": agent}
        for name in ("BATON_REDIS_URL", "BATON_DATA_DIR"):
            env.pop(name, None)
        return StdioServerParameters(
            command=sys.executable, args=["-m", "baton.server.cli", "mcp"], env=env, cwd=str(REPO)
        )

    shared, other = tmp_path / "team" / "memory.db", tmp_path / "solo.db"
    try:
        async with Client(server("scout", shared)) as scout:
            await call(scout, "remember", ref="plan/next", value="ship the refund fix")
        assert (tmp_path / "team" / "memory.db.baton").is_dir()
        async with Client(server("executor", shared)) as executor:
            found = await call(executor, "recall", ref="plan/next")
        assert (found["value"], found["author"]) == ("ship the refund fix", "scout")
        async with Client(server("executor", other)) as elsewhere:
            assert "no record" in await error_text(elsewhere, "recall", ref="plan/next")
    finally:
        for folder in (Path(f"{shared}.baton"), Path(f"{other}.baton")):
            EmbeddedServer(folder).stop()


async def test_memory_update_adds_a_version_under_the_same_id(
    scout: Client, executor: Client
) -> None:
    """memory_update keeps the memory's id, adds a version (the record's history holds both
    contents), moves search to the new words, audits the change; another agent's memory and
    a superseded one are refused with a message saying why."""
    saved = (await call(scout, "memory_save", content="deploys run on fridays at noon"))["memory"]
    updated = await call(
        scout, "memory_update", memoryId=saved["id"], content="deploys run on tuesdays at noon"
    )
    assert (updated["memory"]["id"], updated["memory"]["version"]) == (saved["id"], 2)
    assert updated["memory"]["createdAt"] == saved["createdAt"]
    assert updated["memory"]["updatedAt"] > saved["createdAt"]
    history = await call(scout, "history", ref=f"memory/{saved['id']}")
    assert [v["value"]["content"] for v in history["versions"]] == [
        "deploys run on fridays at noon",
        "deploys run on tuesdays at noon",
    ]
    assert all(v["chain_ok"] for v in history["versions"])
    found = await call(scout, "memory_recall", query="tuesdays", format="compact")
    assert [hit["obsId"] for hit in found["results"]] == [saved["id"]]
    assert (await call(scout, "memory_recall", query="fridays"))["results"] == []
    assert "belongs to scout" in await error_text(
        executor, "memory_update", memoryId=saved["id"], content="mine now"
    )
    newer = await call(scout, "memory_save", content="deploys run on tuesdays at noon!")
    assert newer["memory"]["supersedes"] == [saved["id"]]
    assert "superseded" in await error_text(
        scout, "memory_update", memoryId=saved["id"], content="too late"
    )
    nothing = await error_text(scout, "memory_update", memoryId=newer["memory"]["id"])
    assert "give content" in nothing


async def test_memory_consolidate_previews_then_merges_near_duplicates(
    scout: Client, dispatching_backend: Backend
) -> None:
    """An update can make two memories near-duplicates that no save compared: consolidation
    first answers the plan and changes nothing, then with apply=true supersedes the older by
    the newer, which lists it in supersedes; search and the audit log follow."""
    older = (await call(scout, "memory_save", content="canary deploys go to 5% first"))["memory"]
    newer = (await call(scout, "memory_save", content="pager rota lives in the wiki"))["memory"]
    await call(
        scout, "memory_update", memoryId=newer["id"], content="canary deploys go to 5% first!"
    )
    plan = await call(scout, "memory_consolidate")
    assert plan["dryRun"] is True
    assert [(m["kept"], m["merged"]) for m in plan["merges"]] == [(newer["id"], [older["id"]])]
    still = await call(scout, "memory_recall", query="canary", format="compact")
    assert {hit["obsId"] for hit in still["results"]} == {older["id"], newer["id"]}
    done = await call(scout, "memory_consolidate", apply=True)
    assert done["dryRun"] is False and done["merges"] == plan["merges"]
    after = await call(scout, "memory_recall", query="canary", format="compact")
    assert [hit["obsId"] for hit in after["results"]] == [newer["id"]]
    kept = await call(scout, "recall", ref=f"memory/{newer['id']}")
    assert kept["value"]["supersedes"] == [older["id"]]
    merged = await call(scout, "recall", ref=f"memory/{older['id']}")
    assert merged["value"]["superseded_by"] == newer["id"]
    assert (await call(scout, "memory_consolidate"))["merges"] == []
    [entry] = [
        e
        for e in await dispatching_backend.namespace("default").audit.newest(20)
        if e.action == "consolidate"
    ]
    assert (entry.agent, entry.target, entry.details["merged"]) == (
        "scout",
        newer["id"],
        [older["id"]],
    )


@pytest.mark.slow
async def test_a_stdio_process_pushes_the_agents_notices(redis_url: str) -> None:
    """A real `baton mcp` process as the executor (and, with no `baton serve` about, the
    one making notices): when the record its packet pins moves on, the host gets a
    `notifications/message` naming it, without calling anything."""
    url = f"{redis_url}?db=10"
    redis.Redis.from_url(url).flushdb()
    pushed: list[Any] = []
    arrived = anyio.Event()

    async def log(params: Any) -> None:
        pushed.append(params)
        arrived.set()

    async with open_backend(Settings(redis_url=url), dispatch=False) as backend:
        ns = backend.namespace("default")
        await ns.records.remember("push/553", "apply", agent="scout")
        await ns.handoffs.handoff(
            handoff_input(to="executor", summary="go", pins=[{"ref": "push/553"}]),
            from_agent="scout",
        )
        server = stdio_server("executor", url)
        async with Client(server, mode="legacy", logging_callback=log) as executor:
            await call(executor, "recall", ref="push/553")
            await ns.records.remember("push/553", "skip", agent="scout")
            with anyio.fail_after(20):
                await arrived.wait()
    [message] = pushed
    assert (message.level, message.logger) == ("warning", "baton.notices")
    assert (message.data["ref"], message.data["pinned_version"], message.data["version"]) == (
        "push/553",
        1,
        2,
    )
