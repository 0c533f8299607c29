"""The MCP Inspector's own CLI (``@modelcontextprotocol/inspector-cli``, pinned in
tests/mcp-inspector's lock file, installed by ``make test``) against ``baton mcp`` over stdio
and against ``/mcp`` of a running ``baton serve``. It is the TypeScript SDK's client: it
lists the tools before each call and checks every result against the tool's outputSchema,
failing the call (exit 1) when a result does not match."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import httpx
import pytest
import redis

from baton.server.operations import OPERATIONS
from tests.conftest import REPO

# Run from here: the CLI reads its own package.json from the folder above its working
# directory.
CLI = REPO / "tests/mcp-inspector/node_modules/@modelcontextprotocol/inspector-cli/build"
TIMEOUT = 90  # seconds; the CLI's own request timeout is 60


def inspect(target: list[str], *options: str, env: dict[str, str] | None = None) -> Any:
    """One Inspector CLI run against ``target`` (a server command, or a URL); its JSON answer.
    A protocol error or a result that does not match its outputSchema fails the test."""
    assert (CLI / "index.js").exists(), f"{CLI} is missing: run `make npm-clients` (make test does)"
    done = subprocess.run(
        ["node", "index.js", *target, *options],
        cwd=CLI,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def call(
    target: list[str],
    tool: str,
    *arguments: str,
    agent: str | None = None,
    env: dict[str, str] | None = None,
) -> Any:
    """``tools/call`` of ``tool`` with ``name=value`` arguments (values read as JSON when they
    parse); over HTTP, as ``agent`` (X-Baton-Agent)."""
    options = ["--method", "tools/call", "--tool-name", tool]
    if agent is not None:
        options += ["--header", f"X-Baton-Agent: {agent}"]
    if arguments:  # the CLI takes the argument list last
        options += ["--tool-arg", *arguments]
    return inspect(target, *options, env=env)


@pytest.mark.slow
def test_the_inspector_lists_and_calls_every_kind_of_tool_over_stdio(redis_url: str) -> None:
    """Over stdio the Inspector sees every tool of the operation table, each with an object
    outputSchema;
    a write with a JSON value and tags, and its recall, pass its outputSchema checks and
    come back as written; a bad ref is an isError result naming the fix, not a failure."""
    server = [sys.executable, "-m", "baton.server.cli", "mcp", "--agent", "inspector"]
    store = f"{redis_url}?db=7"
    redis.Redis.from_url(store).flushdb()
    env = {"BATON_REDIS_URL": store, "BATON_CHECKPOINT_INTERVAL": "off"}
    tools = inspect(server, "--method", "tools/list", env=env)["tools"]
    assert sorted(tool["name"] for tool in tools) == sorted(
        operation.name for operation in OPERATIONS if operation.tool
    )
    assert all(tool["outputSchema"]["type"] == "object" for tool in tools)

    value = {"lat": 52.520008, "seen": [1, 2]}
    written = call(
        server, "remember", "ref=geo/berlin", f"value={json.dumps(value)}", 'tags=["city"]', env=env
    )
    assert not written["isError"]
    recalled = call(server, "recall", "ref=geo/berlin", env=env)["structuredContent"]
    assert (recalled["value"], recalled["tags"]) == (value, ["city"])
    assert recalled["author"] == "inspector"
    refused = call(server, "remember", "ref=bad", "value=1", env=env)
    assert refused["isError"]
    assert "scope/key" in refused["content"][0]["text"]


def test_the_inspector_calls_tools_over_streamable_http(api_url: str, http: httpx.Client) -> None:
    """Over streamable HTTP the Inspector's header names the agent: a handoff and its resume
    pass its outputSchema checks, the pins resolved."""
    mcp = [f"{api_url}/mcp"]
    call(mcp, "remember", "ref=listing/1", "value=1", agent="scout")
    packet = call(
        mcp,
        "handoff",
        "to=executor",
        "summary=one listing",
        'pins=[{"ref": "listing/1"}]',
        agent="scout",
    )["structuredContent"]
    assert packet["from"] == "scout"
    resumed = call(mcp, "resume", agent="executor")["structuredContent"]
    assert resumed["packet"]["id"] == packet["id"]
    assert [(pin["ref"], pin["value"]) for pin in resumed["pins"]] == [("listing/1", 1)]
