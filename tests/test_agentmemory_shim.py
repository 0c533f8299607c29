"""agentmemory's own MCP shim (``@agentmemory/mcp``, pinned in tests/agentmemory's lock file,
installed by ``make test``) over stdio against a secured Baton, as two agents with their own
tokens (the shim sends ``AGENTMEMORY_SECRET`` as its bearer)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from mcp import Client, StdioServerParameters

from tests.conftest import REPO, issue, running_server

pytestmark = pytest.mark.anyio
SHIM = REPO / "tests/agentmemory/node_modules/@agentmemory/mcp/bin.mjs"


@pytest.fixture(scope="module")
def secured(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    url = f"{redis_url}?db=6"
    redis.Redis.from_url(url).flushdb()
    tokens = {agent: issue(url, agent) for agent in ("alice", "bob")}
    log = tmp_path_factory.mktemp("shim") / "serve.log"
    with running_server(url, log, BATON_RATE_LIMIT="off") as base:
        yield {"url": base, **tokens}
    redis.Redis.from_url(url).flushdb()


@asynccontextmanager
async def shim(secured: dict[str, str], agent: str, home: Path) -> AsyncIterator[Client]:
    """The real shim as ``agent``, in proxy mode, its local fallback file kept in ``home``."""
    assert SHIM.exists(), f"{SHIM} is missing: run `make npm-clients` (make test does)"
    env = {
        **os.environ,
        "AGENTMEMORY_URL": secured["url"],
        "AGENTMEMORY_SECRET": secured[agent],
        "AGENTMEMORY_FORCE_PROXY": "1",
        "HOME": str(home),
        "STANDALONE_PERSIST_PATH": str(home / "standalone.json"),
    }
    async with Client(StdioServerParameters(command="node", args=[str(SHIM)], env=env)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def error_of(client: Client, tool: str, **arguments: Any) -> str:
    """A failed call's message. The shim keeps a forwarded result's content but drops its
    isError flag, so the message itself must say it (Baton's start with "Error")."""
    result = await client.call_tool(tool, arguments)
    text = str(result.content[0].text)  # type: ignore[union-attr]
    assert result.is_error or text.startswith("Error"), text
    return text


async def test_every_tool_through_the_shim_with_valid_and_invalid_arguments(
    secured: dict[str, str], tmp_path: Path
) -> None:
    """The shim lists Baton's tools (and the baton_ names of those it would answer itself);
    every tool called without its required arguments shows the server's own message."""
    async with shim(secured, "alice", tmp_path) as alice:
        tools = {tool.name: tool for tool in (await alice.list_tools()).tools}
        assert {"remember", "handoff", "resume", "baton_memory_recall"} <= set(tools)
        for name, tool in sorted(tools.items()):
            required = tool.input_schema.get("required", [])
            if not required:
                await alice.call_tool(name, {})  # valid as it is: must not fail
                continue
            message = await error_of(alice, name)
            assert "Bad Request" not in message  # the server's words, not the HTTP status
            assert any(field in message for field in required), (name, message)
    assert not (tmp_path / "standalone.json").exists()  # nothing fell back to the shim's file


async def test_two_agents_save_recall_expand_forget_and_hand_off(
    secured: dict[str, str], tmp_path: Path
) -> None:
    """Save -> recall -> smart search with expandIds -> forget, as alice; bob cannot forget
    alice's memory; alice hands off to bob through the shim and bob resumes it."""
    async with shim(secured, "alice", tmp_path / "a") as alice:
        saved = await call(
            alice,
            "memory_save",
            content="rotate the kestrel keys every 90 days",
            concepts="keys, rotation",
            project="infra",
        )
        memory = saved["memory"]
        assert (memory["agentId"], memory["project"]) == ("alice", "infra")
        found = await call(alice, "memory_recall", query="kestrel keys")
        assert [hit["observation"]["id"] for hit in found["results"]] == [memory["id"]]
        expanded = await call(alice, "baton_memory_smart_search", expandIds=[memory["id"]])
        assert expanded["mode"] == "expanded"  # agentmemory's smart-search shape
        observation = expanded["results"][0]["observation"]
        assert observation["narrative"] == "rotate the kestrel keys every 90 days"
        handed = await call(alice, "handoff", to="bob", summary="Rotate the keys before Friday")
        assert handed["from"] == "alice"

    async with shim(secured, "bob", tmp_path / "b") as bob:
        refused = await error_of(bob, "memory_forget", memoryId=memory["id"])
        assert "belongs to alice, not bob" in refused  # the server's reason reaches the model
        resumed = await call(bob, "resume")
        assert (resumed["packet"]["id"], resumed["packet"]["to"]) == (handed["id"], "bob")

    async with shim(secured, "alice", tmp_path / "a") as alice:
        assert (await call(alice, "memory_forget", memoryId=memory["id"]))["memories"] == [
            memory["id"]
        ]
        assert (await call(alice, "memory_recall", query="kestrel keys"))["results"] == []
    headers = {"Authorization": f"Bearer {secured['alice']}"}
    audit = httpx.get(f"{secured['url']}/agentmemory/audit", headers=headers).json()
    assert audit["entries"][0]["details"]["agentId"] == "alice"
