"""The agentmemory-compatible surface over real HTTP, its auth, the coding-agent MCP tools
and `baton hook`."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from baton.server.api.app import create_app
from baton.server.model.agentmemory_shapes import EXPAND_LIMIT
from baton.server.runtime.settings import Settings
from tests.conftest import REPO, free_port, running_server

SECRET = "s3cret-for-tests"


@pytest.fixture
def am(api_url: str, redis_url: str) -> Iterator[httpx.Client]:
    """A client for /agentmemory on the open (no secret, loopback) server."""
    with httpx.Client(base_url=f"{api_url}/agentmemory") as client:
        yield client


@pytest.fixture(scope="module")
def secured_url(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second `baton serve` with AGENTMEMORY_SECRET set."""
    log = tmp_path_factory.mktemp("secured") / "serve.log"
    with running_server(redis_url, log, AGENTMEMORY_SECRET=SECRET) as url:
        yield url


def test_session_observe_search_and_end(am: httpx.Client) -> None:
    """The hook scripts' calls: session/start, observe (201), search, sessions, session/end."""
    started = am.post(
        "/session/start",
        json={"sessionId": "cc-1", "project": "app", "cwd": "/home/dev/app", "title": "Fix login"},
    )
    assert started.status_code == 200
    session = started.json()["session"]
    assert (session["id"], session["status"], session["observationCount"]) == ("cc-1", "active", 0)
    assert "context" in started.json()

    observed = am.post(
        "/observe",
        json={
            "hookType": "post_tool_use",
            "sessionId": "cc-1",
            "project": "app",
            "cwd": "/home/dev/app",
            "timestamp": "2026-11-30T10:00:00Z",
            "data": {"tool_name": "Edit", "tool_input": {"file_path": "src/login.ts"}},
        },
    )
    assert observed.status_code == 201
    assert observed.json()["observation"]["type"] == "file_edit"

    found = am.post("/search", json={"query": "login.ts edit", "format": "compact"}).json()
    assert [(hit["obsId"], hit["sessionId"]) for hit in found["results"]] == [
        (observed.json()["observationId"], "cc-1")
    ]
    listed = am.get("/sessions", params={"limit": 5}).json()["sessions"]
    assert [s["id"] for s in listed] == ["cc-1"] and listed[0]["observationCount"] == 1
    assert am.post("/session/end", json={"sessionId": "cc-1"}).json() == {
        "success": True,
        "ended": True,
    }
    assert am.post("/session/end", json={"sessionId": "cc-1"}).json()["ended"] is True  # per turn
    assert am.post("/session/end", json={"sessionId": "cc-nope"}).json()["ended"] is False


def test_remember_dedupe_forget_export_and_audit(am: httpx.Client) -> None:
    """remember (201, success, memory, similarTo), a near-duplicate as a new memory naming
    its parent, forget, export, audit, governance delete."""
    text = "always run the migrations before the integration tests in this repo"
    first = am.post(
        "/remember",
        json={"content": text, "type": "workflow", "project": "app", "concepts": ["migrations"]},
    )
    assert first.status_code == 201
    memory = first.json()["memory"]
    assert first.json()["success"] is True and memory["type"] == "workflow"
    same = am.post("/remember", json={"content": text + " please", "project": "app"}).json()
    assert (
        same["memory"]["version"],
        same["memory"]["parentId"],
        same["memory"]["supersedes"],
    ) == (2, memory["id"], [memory["id"]])
    assert am.post("/remember", json={"content": "  "}).json() == {"error": "content is required"}

    other = am.post("/remember", json={"content": "the staging deploy needs a vpn"}).json()
    exported = am.get("/export").json()
    latest = {m["id"]: m["isLatest"] for m in exported["memories"]}
    assert latest == {memory["id"]: False, same["memory"]["id"]: True, other["memory"]["id"]: True}
    forgotten = am.post("/forget", json={"memoryId": same["memory"]["id"]}).json()
    assert forgotten == {"success": True, "deleted": 1}
    assert am.post("/search", json={"query": "migrations integration"}).json()["results"] == []
    deleted = am.request(
        "DELETE", "/governance/memories", json={"memoryIds": [other["memory"]["id"]]}
    ).json()
    assert (deleted["deleted"], deleted["total"]) == (1, 1)
    entries = am.get("/audit", params={"limit": 10}).json()["entries"]
    assert [e["targetIds"] for e in entries] == [[other["memory"]["id"]], [same["memory"]["id"]]]


# The answers of agentmemory 0.9.29's REST routes, field by field (its dist/index.mjs:
# registerApiTriggers and the mem::* functions they call). Optional fields are listed apart.
GOLDEN: dict[str, tuple[dict[str, type | tuple[type, ...]], set[str]]] = {
    "remember.memory": (
        {
            "id": str,
            "createdAt": str,
            "updatedAt": str,
            "type": str,
            "title": str,
            "content": str,
            "concepts": list,
            "files": list,
            "sessionIds": list,
            "strength": int,
            "version": int,
            "supersedes": list,
            "sourceObservationIds": list,
            "isLatest": bool,
            "origin": dict,
        },
        {"parentId", "agentId", "project", "forgetAfter"},
    ),
    "search": (
        {"format": str, "results": list, "tokens_used": int, "truncated": bool},
        {"tokens_budget", "text"},
    ),
    "search.full": ({"observation": dict, "score": (int, float), "sessionId": str}, set()),
    "search.compact": (
        {
            "obsId": str,
            "sessionId": str,
            "title": str,
            "type": str,
            "score": (int, float),
            "timestamp": str,
        },
        set(),
    ),
    "search.narrative": (
        {
            "obsId": str,
            "sessionId": str,
            "title": str,
            "narrative": str,
            "score": (int, float),
            "timestamp": str,
        },
        set(),
    ),
    "observation": (
        {
            "id": str,
            "sessionId": str,
            "timestamp": str,
            "type": str,
            "title": str,
            "facts": list,
            "narrative": str,
            "concepts": list,
            "files": list,
            "importance": int,
        },
        {"confidence", "agentId", "subtitle"},
    ),
    "smart-search": ({"mode": str, "results": list}, {"lessons"}),
    "smart-search.expanded": ({"mode": str, "results": list, "truncated": bool}, set()),
    "session": (
        {
            "id": str,
            "project": str,
            "cwd": str,
            "startedAt": str,
            "status": str,
            "observationCount": int,
        },
        {"summary", "firstPrompt", "agentId", "updatedAt", "endedAt", "title", "concepts", "files"},
    ),
    "audit": ({"entries": list, "success": bool}, set()),
    "audit.entry": (
        {
            "id": str,
            "timestamp": str,
            "operation": str,
            "functionId": str,
            "targetIds": list,
            "details": dict,
        },
        set(),
    ),
    "livez": ({"status": str, "service": str}, {"viewerPort", "viewerSkipped", "streamsPort"}),
    "health": (
        {"status": str, "service": str, "version": str},
        {
            "health",
            "functionMetrics",
            "circuitBreaker",
            "viewerPort",
            "viewerSkipped",
            "streamsPort",
        },
    ),
    "export": (
        {
            "version": str,
            "exportedAt": str,
            "sessions": list,
            "observations": dict,
            "memories": list,
        },
        {"summaries"},
    ),
    "forget": ({"success": bool, "deleted": int}, set()),
    "context": ({"context": str, "blocks": int, "tokens": int}, set()),
}


def assert_shape(name: str, value: dict[str, Any]) -> None:
    required, optional = GOLDEN[name]
    assert required.keys() <= value.keys(), (name, sorted(required.keys() - value.keys()))
    assert value.keys() <= required.keys() | optional, (
        name,
        sorted(value.keys() - required.keys() - optional),
    )
    for field, kind in required.items():
        assert isinstance(value[field], kind), (name, field, value[field])


def test_answers_have_agentmemorys_fields_and_types(am: httpx.Client) -> None:
    """Every route the shim and hooks read answers agentmemory's field names and types."""
    am.post("/session/start", json={"sessionId": "cc-g", "project": "app", "cwd": "/srv/app"})
    am.post(
        "/observe",
        json={
            "hookType": "post_tool_use",
            "sessionId": "cc-g",
            "project": "app",
            "cwd": "/srv/app",
            "timestamp": "2026-11-30T10:00:00Z",
            "data": {"tool_name": "Bash", "tool_input": {"command": "make deploy"}},
        },
    )
    saved = am.post("/remember", json={"content": "deploy with make deploy", "ttlDays": 3}).json()
    assert_shape("remember.memory", saved["memory"])
    for form in ("full", "compact", "narrative"):
        found = am.post(
            "/search", json={"query": "deploy", "format": form, "token_budget": 500}
        ).json()
        assert_shape("search", found)
        assert len(found["results"]) == 2
        for item in found["results"]:
            assert_shape(f"search.{form}", item)
            if form == "full":
                assert_shape("observation", item["observation"])
    smart = am.post("/smart-search", json={"query": "deploy"}).json()
    assert_shape("smart-search", smart)
    for item in smart["results"]:
        assert_shape("search.compact", item)
    expanded = am.post("/smart-search", json={"expandIds": [smart["results"][0]["obsId"]]}).json()
    assert_shape("smart-search.expanded", expanded)
    assert_shape("observation", expanded["results"][0]["observation"])
    [session] = am.get("/sessions").json()["sessions"]
    assert_shape("session", session)
    assert_shape("livez", am.get("/livez").json())
    assert_shape("health", am.get("/health").json())
    assert_shape("export", am.get("/export").json())
    assert_shape(
        "context", am.post("/context", json={"sessionId": "cc-g", "project": "app"}).json()
    )
    assert_shape("forget", am.post("/forget", json={"memoryId": saved["memory"]["id"]}).json())
    audit = am.get("/audit").json()
    assert_shape("audit", audit)
    assert_shape("audit.entry", audit["entries"][0])


def test_wrong_types_are_400_errors_never_500(am: httpx.Client) -> None:
    """Wrong types are agentmemory-style 400 {"error"} answers; arrays and comma strings are
    both accepted; numbers are not taken for strings."""
    for body in (
        {"content": "x", "concepts": 5},
        {"content": "x", "files": 5},
        {"content": "x", "files": {"a": 1}},
        {"content": "x", "project": 5},
        {"content": "x", "agentId": 5},
        {"content": "x", "ttlDays": "soon"},
    ):
        answer = am.post("/remember", json=body)
        assert answer.status_code == 400 and set(answer.json()) == {"error"}, (body, answer.text)
    assert am.post("/forget", json={"sessionId": "s", "observationIds": 5}).status_code == 400
    assert am.post("/search", json={"query": "x", "limit": "many"}).json() == {
        "error": "limit: Expected `int`, got `str`"
    }
    both = [
        am.post(
            "/remember", json={"content": f"note {n} on kestrel keys x{n}", "concepts": concepts}
        ).json()
        for n, concepts in ((1, ["a", "b"]), (2, "a, b"))
    ]
    assert [saved["memory"]["concepts"] for saved in both] == [["a", "b"], ["a", "b"]]
    assert both[1]["memory"]["supersedes"] == []  # x1 and x2 are different memories


def test_errors_use_agentmemorys_shape(am: httpx.Client) -> None:
    """Missing fields are 400 with an {error} body, as agentmemory answers."""
    assert am.post("/session/start", json={"project": "p"}).json() == {
        "error": "sessionId, project, and cwd are required non-empty strings"
    }
    assert am.post("/observe", json={"hookType": "stop"}).status_code == 400
    assert am.post("/search", json={}).json()["error"].startswith("query is required")
    assert am.post("/forget", json={}).json() == {"error": "sessionId or memoryId is required"}
    unknown = am.post("/forget", json={"sessionId": "never-started"})
    assert (unknown.status_code, unknown.json()) == (200, {"success": True, "deleted": 0})
    assert am.get("/livez").json()["status"] == "ok"


def test_mcp_shim_lists_and_calls_tools(am: httpx.Client) -> None:
    """mcp/tools lists Baton's tools with input schemas (and, under baton_ names, those the
    shim would answer itself); mcp/call runs one and answers MCP-style content, a tool's
    failure as an isError result (200, so the shim relays the message)."""
    tools = {tool["name"]: tool for tool in am.get("/mcp/tools").json()["tools"]}
    assert {"memory_save", "memory_recall", "memory_resume_here", "remember"} <= set(tools)
    assert tools["memory_save"]["inputSchema"]["required"] == ["content"]
    saved = am.post(
        "/mcp/call",
        json={
            "name": "memory_save",
            "arguments": {
                "content": "prefer small commits",
                "concepts": "git, commits",
                "agentId": "codex",
            },
        },
    )
    payload = json.loads(saved.json()["content"][0]["text"])
    assert payload["memory"]["concepts"] == ["git", "commits"]
    assert payload["memory"]["agentId"] == "codex"  # agentmemory's names, as its tool has them
    failed = am.post("/mcp/call", json={"name": "memory_save", "arguments": {"content": ""}})
    assert failed.status_code == 200 and failed.json()["isError"] is True  # the shim keeps 200s
    assert "content is required" in failed.json()["content"][0]["text"]
    assert am.post("/mcp/call", json={"name": "nope", "arguments": {}}).json() == {
        "error": "Unknown tool: nope"
    }
    assert (
        "baton_memory_recall" in tools
        and tools["baton_memory_recall"]["inputSchema"] == tools["memory_recall"]["inputSchema"]
    )
    aliased = am.post(
        "/mcp/call",
        json={
            "name": "baton_memory_smart_search",
            "arguments": {"expandIds": [payload["memory"]["id"]]},
        },
    )
    expanded = json.loads(aliased.json()["content"][0]["text"])
    assert expanded["mode"] == "expanded"
    assert expanded["results"][0]["observation"]["title"] == "prefer small commits"


def test_secret_is_required_when_configured(secured_url: str) -> None:
    """With AGENTMEMORY_SECRET: no or wrong bearer is 401; the right one passes; livez stays
    open."""
    base = f"{secured_url}/agentmemory"
    assert httpx.get(f"{base}/sessions").status_code == 401
    wrong = httpx.get(f"{base}/sessions", headers={"Authorization": "Bearer nope"})
    assert (wrong.status_code, wrong.json()) == (401, {"error": "unauthorized"})
    right = httpx.get(f"{base}/sessions", headers={"Authorization": f"Bearer {SECRET}"})
    assert right.status_code == 200
    assert httpx.get(f"{base}/livez").status_code == 200


def test_without_a_secret_only_loopback_is_open(redis_url: str) -> None:
    """No secret and a client that is not on loopback: 401."""
    app = create_app(Settings(redis_url=redis_url))
    # The test client's own address is "testclient", not loopback; the Host is.
    with TestClient(app, base_url="http://127.0.0.1") as client:
        response = client.get("/agentmemory/sessions")
    assert response.status_code == 401
    assert "AGENTMEMORY_SECRET" in response.json()["error"]


def test_free_text_recall_of_facts(http: httpx.Client) -> None:
    """GET /v1/records?query= finds facts by the text of their values, best match first."""
    http.post(
        "/v1/records", json={"ref": "svc/payments", "value": {"owner": "ana", "stack": "go grpc"}}
    )
    http.post(
        "/v1/records", json={"ref": "svc/search", "value": {"owner": "li", "stack": "python"}}
    )
    page = http.get("/v1/records", params={"query": "grpc"}).json()
    assert [r["ref"] for r in page["records"]] == ["svc/payments"]


def test_resume_here_over_rest(http: httpx.Client) -> None:
    """GET /v1/sessions/resume answers with structured fields and the text to show; a
    relative cwd, or none at all over HTTP (the server's own folder is nobody's project,
    and its path is not the caller's to see), is a 422 naming cwd."""
    http.post("/v1/sessions", json={"id": "r-1", "project": "app", "cwd": "/srv/app"})
    answer = http.get("/v1/sessions/resume", params={"cwd": "/srv/app/src"}).json()
    assert (answer["session"]["id"], answer["empty"], answer["fallback"]) == ("r-1", True, False)
    assert "no recorded observations" in answer["text"]
    assert http.get("/v1/sessions/resume", params={"cwd": "relative"}).status_code == 422
    # Without cwd over HTTP: refused, naming the field, never the server's own folder
    missing = http.get("/v1/sessions/resume")
    assert (missing.status_code, missing.json()["field"]) == (422, "cwd")
    assert os.getcwd() not in missing.text


def test_baton_hook_posts_claude_code_events(
    api_url: str, http: httpx.Client, tmp_path: Path
) -> None:
    """`baton hook PostToolUse` turns a Claude Code payload on stdin into an observation;
    with Baton unreachable it still exits 0 and says why on stderr."""
    payload = {
        "session_id": "claude-9",
        "cwd": str(tmp_path),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_response": "ok",
    }
    env = {**os.environ, "BATON_URL": api_url, "AGENT_ID": "claude"}
    for event in ("SessionStart", "PostToolUse"):
        done = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "hook", event],
            input=json.dumps(payload),
            env=env,
            cwd=REPO,
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    session = http.get("/v1/sessions/claude-9").json()
    assert (session["project"], session["agent"], session["observation_count"]) == (
        tmp_path.name,
        "claude",
        2,
    )
    offline = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "hook", "Stop"],
        input=json.dumps(payload),
        cwd=REPO,
        text=True,
        capture_output=True,
        env={**env, "BATON_URL": f"http://127.0.0.1:{free_port()}"},
        timeout=60,
        check=False,
    )
    assert offline.returncode == 0 and "not reachable" in offline.stderr


def test_verify_script_accepts_a_forgotten_memorys_tombstones(
    http: httpx.Client, tmp_path: Path
) -> None:
    """docs/verify_chain.py checks a forgotten memory's tombstones (ok, forgotten) and still
    catches an edited one."""
    saved = http.post("/v1/memories", json={"content": "the api key lives in ops/secrets"}).json()
    memory_id = saved["memory"]["id"]
    http.post("/v1/forget", json={"memory_id": memory_id, "reason": "secret"})
    history = http.get(f"/v1/history/memory/{memory_id}").json()
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history))
    script = [sys.executable, "-I", str(REPO / "docs" / "verify_chain.py"), str(path)]
    clean = subprocess.run(script, capture_output=True, text=True, check=False)
    assert (clean.returncode, clean.stdout.strip()) == (0, f"memory/{memory_id} v1: ok (forgotten)")
    history["versions"][0]["forgotten"]["reason"] = "nothing to see"
    path.write_text(json.dumps(history))
    assert subprocess.run(script, capture_output=True, text=True, check=False).returncode == 1


def test_routes_the_hooks_call_answer_in_agentmemorys_shapes(am: httpx.Client) -> None:
    """summarize, claude-bridge/sync, context and enrich answer agentmemory's shapes; an
    observation with cwd "" is kept; an unknown path is agentmemory's {"error"} 404."""
    assert (
        am.post(
            "/session/start", json={"sessionId": "cc-2", "project": "app", "cwd": "/srv/app"}
        ).json()["context"]
        == ""
    )
    observed = am.post(
        "/observe",
        json={
            "hookType": "prompt_submit",
            "sessionId": "cc-2",
            "project": "app",
            "cwd": "",
            "timestamp": "2026-11-30T10:00:00Z",
            "data": {"prompt": "migrate the billing tables"},
        },
    )
    assert observed.status_code == 201
    summary = am.post("/summarize", json={"sessionId": "cc-2"}).json()
    assert summary["success"] is True
    assert set(summary["summary"]) == {
        "sessionId",
        "project",
        "createdAt",
        "title",
        "narrative",
        "keyDecisions",
        "filesModified",
        "concepts",
        "observationCount",
    }
    assert am.post("/summarize", json={"sessionId": "nope"}).json() == {
        "success": False,
        "error": "session_not_found",
    }
    assert am.post("/claude-bridge/sync", json={}).json()["success"] is False
    context = am.post("/context", json={"sessionId": "cc-2", "project": "app", "budget": 500})
    assert set(context.json()) == {"context", "blocks", "tokens"} and context.json()["blocks"] == 1
    assert am.post(
        "/context", json={"sessionId": "cc-2", "project": "app", "budget": 0}
    ).json() == {"error": "budget: Expected `int` >= 1"}
    enriched = am.post("/enrich", json={"sessionId": "cc-2", "files": ["/srv/app/x.py"]}).json()
    assert set(enriched) == {"context", "truncated"}
    assert am.post("/enrich", json={"sessionId": "cc-2"}).status_code == 400
    missing = am.get("/no-such-route")
    assert (missing.status_code, set(missing.json())) == (404, {"error"})


def test_a_memory_saved_without_an_agent_is_shared(am: httpx.Client, api_url: str) -> None:
    """No agentId and no agent identity: the memory is shared (no agentId in the answer), so
    every agent's scoped search finds it next to that agent's own; bob's own memory stays
    out of alice's scoped search."""
    word = f"zq{secrets.token_hex(4)}"
    shared = am.post("/remember", json={"content": f"{word} staging is read-only on fridays"})
    assert "agentId" not in shared.json()["memory"]
    with httpx.Client(base_url=f"{api_url}/agentmemory", headers={"X-Baton-Agent": "bob"}) as bob:
        own = bob.post("/remember", json={"content": f"{word} bob keeps staging keys in vault"})
        assert own.json()["memory"]["agentId"] == "bob"
    for agent, expected in (("alice", 1), ("bob", 2)):
        with httpx.Client(
            base_url=f"{api_url}/agentmemory", headers={"X-Baton-Agent": agent}
        ) as client:
            found = client.post("/search", json={"query": word, "agentId": agent}).json()
        assert len(found["results"]) == expected, (agent, found)


def test_source_observation_ids_are_checked_and_kept(am: httpx.Client) -> None:
    """sourceObservationIds must be an array of ids (a 400 naming it otherwise) and come
    back as saved, in the answer and in the export."""
    refused = am.post("/remember", json={"content": "x", "sourceObservationIds": "obs_1"})
    assert refused.status_code == 400 and "sourceObservationIds" in refused.json()["error"]
    saved = am.post(
        "/remember",
        json={
            "content": f"retry the payment webhook {secrets.token_hex(4)}",
            "sourceObservationIds": ["obs_1", "obs_2"],
        },
    ).json()["memory"]
    assert saved["sourceObservationIds"] == ["obs_1", "obs_2"]
    exported = {m["id"]: m for m in am.get("/export").json()["memories"]}
    assert exported[saved["id"]]["sourceObservationIds"] == ["obs_1", "obs_2"]


def test_a_file_in_a_folder_is_found_by_its_path_its_suffix_and_its_basename(
    am: httpx.Client,
) -> None:
    """A memory saved with files ["payments/refund.py"] enriches a tool touching that path,
    a longer path ending in it, or the same basename; search finds it by the path and the
    basename."""
    word = f"zq{secrets.token_hex(4)}"
    am.post(
        "/remember",
        json={"content": f"{word}: refunds must be idempotent", "files": ["payments/refund.py"]},
    )
    for path in ("payments/refund.py", "/srv/app/payments/refund.py", "refund.py"):
        enriched = am.post("/enrich", json={"sessionId": f"s-{word}", "files": [path]}).json()
        assert word in enriched["context"], path
    for path in ("payments/refund.py", "refund.py"):
        found = am.post("/search", json={"query": path, "limit": 100}).json()["results"]
        assert word in json.dumps(found), path


def test_file_history_over_the_shim_route_and_rest(am: httpx.Client, http: httpx.Client) -> None:
    """memory_file_history (agentmemory's /file-context): another session's observations
    of a file come back for that path, a longer path and a comma-separated list; the
    asking session's own are left out; nothing known is an empty context."""
    word = f"zq{secrets.token_hex(4)}"
    am.post(
        "/observe",
        json={
            "hookType": "post_tool_use",
            "sessionId": f"old-{word}",
            "project": "app",
            "cwd": "/srv/app",
            "timestamp": "2026-01-01T00:00:00Z",
            "data": {"tool_name": "Edit", "tool_input": {"file_path": f"billing/{word}.py"}},
        },
    )
    for files in (f"billing/{word}.py", f"/srv/app/billing/{word}.py", f"x.py, billing/{word}.py"):
        context = am.post("/file-context", json={"files": files}).json()["context"]
        assert "## " in context and f"{word}.py" in context, files
    own = am.post(
        "/file-context", json={"files": [f"billing/{word}.py"], "sessionId": f"old-{word}"}
    )
    assert own.json() == {"context": ""}
    rest = http.post("/v1/file-history", json={"files": [f"billing/{word}.py"]})
    assert rest.status_code == 200 and f"{word}.py" in rest.json()["context"]
    assert am.post("/file-context", json={}).status_code == 400


def test_patterns_are_computed_from_the_sessions(am: httpx.Client, http: httpx.Client) -> None:
    """Three sessions of a project edit the same two files and hit the same failure (the
    numbers differ): memory_patterns (agentmemory's /patterns) reports the pair changed
    together, each file as a hotspot, the repeated error and the concept ended with, with
    frequencies, sessions and first/last seen; another project's patterns leave them out."""
    project = f"p{secrets.token_hex(4)}"

    def observe(session: str, at: str, hook: str, data: dict[str, Any]) -> None:
        body = {
            "hookType": hook,
            "sessionId": session,
            "project": project,
            "cwd": "/srv",
            "timestamp": at,
            "data": data,
        }
        assert am.post("/observe", json=body).status_code == 201

    sessions = [f"{project}-s{n}" for n in range(3)]
    for n, session in enumerate(sessions):
        for path in ("api/orders.py", "api/orders_test.py"):
            observe(
                session,
                f"2026-03-0{n + 1}T10:00:00Z",
                "post_tool_use",
                {"tool_name": "Edit", "tool_input": {"file_path": path}},
            )
        observe(
            session,
            f"2026-03-0{n + 1}T11:00:00Z",
            "post_tool_failure",
            {
                "tool_name": "Bash",
                "tool_input": {"command": "pytest"},
                "error": f"exit 1 after {n + 2}.5s",
            },
        )
        http.post(f"/v1/sessions/{session}/end", json={"concepts": ["idempotency"]})
    found = am.post("/patterns", json={"project": project}).json()["patterns"]
    kinds = {(p["type"], tuple(p["files"])): p for p in found}
    pair = kinds[("co_change", ("api/orders.py", "api/orders_test.py"))]
    assert (pair["frequency"], sorted(pair["sessions"])) == (3, sessions)
    assert kinds[("file_hotspot", ("api/orders.py",))]["frequency"] == 3
    [error] = [p for p in found if p["type"] == "error_repeat"]
    assert error["frequency"] == 3 and error["firstSeen"] < error["lastSeen"]
    assert any(p["type"] == "concept_repeat" and "idempotency" in p["description"] for p in found)
    other = am.post("/patterns", json={"project": f"{project}-other"}).json()["patterns"]
    assert not any(set(p["sessions"]) & set(sessions) for p in other)


def bash_observed(
    am: httpx.Client, session: str, project: str, cwd: str, command: str
) -> dict[str, Any]:
    """A Bash tool use recorded through /agentmemory/observe; agentmemory's answer."""
    body = {
        "hookType": "post_tool_use",
        "sessionId": session,
        "project": project,
        "cwd": cwd,
        "timestamp": "2026-01-02T00:00:00Z",
        "data": {"tool_name": "Bash", "tool_input": {"command": command}},
    }
    answer: dict[str, Any] = am.post("/observe", json=body).json()
    return answer


def test_file_history_follows_a_memorys_source_observations(am: httpx.Client) -> None:
    """A memory about a file, drawn from observations that did not name the file (a test
    run), brings those observations into the file's history."""
    word = f"zq{secrets.token_hex(4)}"
    observed = bash_observed(am, f"run-{word}", "app", "/srv/app", f"pytest -k {word}")
    path = f"billing/{word}_ledger.py"
    before = am.post("/file-context", json={"files": [path]}).json()["context"]
    assert f"pytest -k {word}" not in before
    am.post(
        "/remember",
        json={
            "content": f"{word}: the ledger test needs the frozen clock",
            "files": [path],
            "sourceObservationIds": [observed["observationId"]],
        },
    )
    after = am.post("/file-context", json={"files": [path]}).json()["context"]
    assert f"pytest -k {word}" in after


def test_resume_recalls_the_memories_drawn_from_the_session(
    am: httpx.Client, http: httpx.Client
) -> None:
    """A memory drawn from a session's observation (sourceObservationIds) comes first in
    that session's "where were we", however unlike the session's words it is."""
    word = f"zq{secrets.token_hex(4)}"
    cwd = f"/srv/{word}"
    observed = bash_observed(am, f"s-{word}", word, cwd, "make migrate")
    am.post("/session/end", json={"sessionId": f"s-{word}"})
    saved = am.post(
        "/remember",
        json={
            "content": "schema changes need a maintenance window",
            "sourceObservationIds": [observed["observationId"]],
        },
    ).json()["memory"]
    here = http.get("/v1/sessions/resume", params={"cwd": cwd}).json()
    assert here["session"]["id"] == f"s-{word}"
    assert here["recalled"][0]["id"] == saved["id"]
    assert "maintenance window" in here["text"]


def test_smart_search_expands_at_most_agentmemorys_limit(
    am: httpx.Client, http: httpx.Client
) -> None:
    """agentmemory's smart search expands at most 20 ids and says it cut the rest; Baton's
    own route, the same operation, expands every id it is given."""
    word = f"zq{secrets.token_hex(4)}"
    ids = [
        am.post("/remember", json={"content": f"{word} fact number {n} of the batch"}).json()[
            "memory"
        ]["id"]
        for n in range(EXPAND_LIMIT + 1)
    ]
    cut = am.post("/smart-search", json={"expandIds": ids}).json()
    assert (cut["mode"], cut["truncated"]) == ("expanded", True)
    assert [item["obsId"] for item in cut["results"]] == ids[:EXPAND_LIMIT]
    whole = am.post("/smart-search", json={"expandIds": ids[:EXPAND_LIMIT]}).json()
    assert whole["truncated"] is False
    baton = http.post("/v1/memories/smart-search", json={"expand_ids": ids}).json()
    assert [hit["id"] for hit in baton["results"]] == ids


def test_session_start_names_the_field_as_agentmemory_sends_it(am: httpx.Client) -> None:
    """A bad sessionId on agentmemory's /session/start is refused naming sessionId (the
    field its hooks send), in words."""
    refused = am.post(
        "/session/start", json={"sessionId": "two words", "project": "p", "cwd": "/r"}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"].startswith("sessionId: a session id is"), refused.text
