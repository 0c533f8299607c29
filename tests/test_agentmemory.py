"""The agentmemory-compatible surface over real HTTP, its auth, the coding-agent MCP tools
and `baton hook`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from baton.server.api.app import create_app
from baton.server.settings import Settings
from litestar.testing import TestClient

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
    started = am.post("/session/start", json={"sessionId": "cc-1", "project": "app",
                                               "cwd": "/home/dev/app", "title": "Fix login"})  # fmt: skip
    assert started.status_code == 200
    session = started.json()["session"]
    assert (session["id"], session["status"], session["observationCount"]) == ("cc-1", "active", 0)
    assert "context" in started.json()

    observed = am.post("/observe", json={
        "hookType": "post_tool_use", "sessionId": "cc-1", "project": "app",
        "cwd": "/home/dev/app", "timestamp": "2026-11-30T10:00:00Z",
        "data": {"tool_name": "Edit", "tool_input": {"file_path": "src/login.ts"}},
    })  # fmt: skip
    assert observed.status_code == 201
    assert observed.json()["observation"]["type"] == "file_edit"

    found = am.post("/search", json={"query": "login.ts edit", "format": "compact"}).json()
    assert [hit["kind"] for hit in found["results"]] == ["observation"]
    assert found["results"][0]["session"] == "cc-1"
    listed = am.get("/sessions", params={"limit": 5}).json()["sessions"]
    assert [s["id"] for s in listed] == ["cc-1"] and listed[0]["observationCount"] == 1
    assert am.post("/session/end", json={"sessionId": "cc-1"}).json() == {"success": True,
                                                                           "ended": True}  # fmt: skip
    assert am.post("/session/end", json={"sessionId": "cc-1"}).json()["ended"] is True  # per turn
    assert am.post("/session/end", json={"sessionId": "cc-nope"}).json()["ended"] is False


def test_remember_dedupe_forget_export_and_audit(am: httpx.Client) -> None:
    """remember (201, success, memory, similarTo), forget, export, audit, governance delete."""
    text = "always run the migrations before the integration tests in this repo"
    first = am.post("/remember", json={"content": text, "type": "workflow", "project": "app",
                                        "concepts": ["migrations"]})  # fmt: skip
    assert first.status_code == 201
    memory = first.json()["memory"]
    assert first.json()["success"] is True and memory["type"] == "workflow"
    same = am.post("/remember", json={"content": text + " please", "project": "app"}).json()
    assert (same["memory"]["id"], same["memory"]["version"]) == (memory["id"], 2)
    assert am.post("/remember", json={"content": "  "}).json() == {"error": "content is required"}

    other = am.post("/remember", json={"content": "the staging deploy needs a vpn"}).json()
    exported = am.get("/export").json()
    assert {m["id"] for m in exported["memories"]} == {memory["id"], other["memory"]["id"]}
    assert am.post("/forget", json={"memoryId": memory["id"]}).json()["memories"] == [memory["id"]]
    assert am.post("/search", json={"query": "migrations integration"}).json()["results"] == []
    deleted = am.request("DELETE", "/governance/memories",
                         json={"memoryIds": [other["memory"]["id"]]}).json()  # fmt: skip
    assert deleted["deleted"] == 1
    entries = am.get("/audit", params={"limit": 10}).json()["entries"]
    assert [e["target"] for e in entries] == [f"memory/{other['memory']['id']}",
                                              f"memory/{memory['id']}"]  # fmt: skip


def test_errors_use_agentmemorys_shape(am: httpx.Client) -> None:
    """Missing fields are 400 with an {error} body, as agentmemory answers."""
    assert am.post("/session/start", json={"project": "p"}).json() == {
        "error": "sessionId, project, and cwd are required non-empty strings"
    }
    assert am.post("/observe", json={"hookType": "stop"}).status_code == 400
    assert am.post("/search", json={}).json()["error"].startswith("query is required")
    assert am.post("/forget", json={}).json() == {"error": "sessionId or memoryId is required"}
    assert am.get("/livez").json()["status"] == "ok"


def test_mcp_shim_lists_and_calls_tools(am: httpx.Client) -> None:
    """mcp/tools lists Baton's tools with input schemas; mcp/call runs one and answers
    MCP-style content, or 400 with the tool's error."""
    tools = {tool["name"]: tool for tool in am.get("/mcp/tools").json()["tools"]}
    assert {"memory_save", "memory_recall", "memory_resume_here", "remember"} <= set(tools)
    assert tools["memory_save"]["inputSchema"]["required"] == ["content"]
    saved = am.post("/mcp/call", json={"name": "memory_save", "arguments": {
        "content": "prefer small commits", "concepts": "git, commits", "agentId": "codex"}})  # fmt: skip
    payload = json.loads(saved.json()["content"][0]["text"])
    assert payload["memory"]["concepts"] == ["git", "commits"]
    assert payload["memory"]["agent_id"] == "codex"
    failed = am.post("/mcp/call", json={"name": "memory_save", "arguments": {"content": ""}})
    assert failed.status_code == 400 and "content is required" in failed.json()["error"]


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
    http.post("/v1/records", json={"ref": "svc/payments", "value": {"owner": "ana", "stack": "go grpc"}})
    http.post("/v1/records", json={"ref": "svc/search", "value": {"owner": "li", "stack": "python"}})
    page = http.get("/v1/records", params={"query": "grpc"}).json()
    assert [r["ref"] for r in page["records"]] == ["svc/payments"]


def test_resume_here_over_rest(http: httpx.Client) -> None:
    """GET /v1/sessions/resume answers with structured fields and the text to show."""
    http.post("/v1/sessions", json={"id": "r-1", "project": "app", "cwd": "/srv/app"})
    answer = http.get("/v1/sessions/resume", params={"cwd": "/srv/app/src"}).json()
    assert (answer["session"]["id"], answer["empty"], answer["fallback"]) == ("r-1", True, False)
    assert "no recorded observations" in answer["text"]
    assert http.get("/v1/sessions/resume", params={"cwd": "relative"}).status_code == 422


def test_baton_hook_posts_claude_code_events(api_url: str, http: httpx.Client, tmp_path: Path) -> None:
    """`baton hook PostToolUse` turns a Claude Code payload on stdin into an observation;
    with Baton unreachable it still exits 0 and says why on stderr."""
    payload = {"session_id": "claude-9", "cwd": str(tmp_path), "hook_event_name": "PostToolUse",
               "tool_name": "Bash", "tool_input": {"command": "pytest -q"}, "tool_response": "ok"}  # fmt: skip
    env = {**os.environ, "BATON_URL": api_url, "AGENT_ID": "claude"}
    for event in ("SessionStart", "PostToolUse"):
        done = subprocess.run([sys.executable, "-m", "baton.server.cli", "hook", event],
                              input=json.dumps(payload), env=env, cwd=REPO, text=True,
                              capture_output=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
    session = http.get("/v1/sessions/claude-9").json()
    assert (session["project"], session["agent"], session["observation_count"]) == (
        tmp_path.name, "claude", 2,
    )  # fmt: skip
    offline = subprocess.run([sys.executable, "-m", "baton.server.cli", "hook", "Stop"],
                             input=json.dumps(payload), cwd=REPO, text=True, capture_output=True,
                             env={**env, "BATON_URL": f"http://127.0.0.1:{free_port()}"},
                             timeout=60, check=False)  # fmt: skip
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
    assert am.post("/session/start", json={"sessionId": "cc-2", "project": "app",
                                           "cwd": "/srv/app"}).json()["context"] == ""  # fmt: skip
    observed = am.post("/observe", json={
        "hookType": "prompt_submit", "sessionId": "cc-2", "project": "app", "cwd": "",
        "timestamp": "2026-11-30T10:00:00Z", "data": {"prompt": "migrate the billing tables"},
    })  # fmt: skip
    assert observed.status_code == 201
    summary = am.post("/summarize", json={"sessionId": "cc-2"}).json()
    assert summary["success"] is True
    assert set(summary["summary"]) == {"sessionId", "project", "createdAt", "title", "narrative",
                                       "keyDecisions", "filesModified", "concepts",
                                       "observationCount"}  # fmt: skip
    assert am.post("/summarize", json={"sessionId": "nope"}).json() == {
        "success": False, "error": "session_not_found"}  # fmt: skip
    assert am.post("/claude-bridge/sync", json={}).json()["success"] is False
    context = am.post("/context", json={"sessionId": "cc-2", "project": "app", "budget": 500})
    assert set(context.json()) == {"context", "blocks", "tokens"} and context.json()["blocks"] == 1
    assert am.post("/context", json={"sessionId": "cc-2", "project": "app",
                                     "budget": 0}).json() == {"error": "budget must be a positive integer"}  # fmt: skip
    enriched = am.post("/enrich", json={"sessionId": "cc-2", "files": ["/srv/app/x.py"]}).json()
    assert set(enriched) == {"context", "truncated"}
    assert am.post("/enrich", json={"sessionId": "cc-2"}).status_code == 400
    missing = am.get("/no-such-route")
    assert (missing.status_code, set(missing.json())) == (404, {"error"})
