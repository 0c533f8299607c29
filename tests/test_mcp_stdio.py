"""`baton mcp` answers a host's first requests while the MCP SDK loads, exactly as the SDK's
server would, and then hands the conversation to it without losing or doubling a message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from baton.server.mcp.mcp_server import (
    Binding,
    ToolCalls,
    answers,
    early_answers,
    initialize_request,
    serve_stdio,
)
from baton.server.mcp.mcp_stdio import early_answer
from baton.server.mcp.mcp_stdio import early_answers as shipped_answers
from baton.server.model.identity import Caller, local
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import open_backend
from tests.conftest import REPO

pytestmark = pytest.mark.anyio


async def test_the_shipped_answers_are_the_sdks() -> None:
    """server/mcp/mcp_answers.json holds what the SDK's server answers today: initialize, the
    tool list, the versions it negotiates (after changing a tool: `make mcp-answers`)."""
    assert shipped_answers() == await early_answers(), "stale: run `make mcp-answers`"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", "2025-11-25", "1999-01-01"])
async def test_each_early_answer_is_the_one_the_sdk_gives(version: str) -> None:
    """For every protocol version a host may ask for (and one the SDK does not know, which
    it answers with its newest), the answers to initialize, tools/list and ping given
    before the SDK loads equal the SDK server's own."""
    initialize = initialize_request(version)
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    listing = {"jsonrpc": "2.0", "id": "list", "method": "tools/list"}
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    sdk = await answers([initialize, initialized, listing, ping])
    shipped = shipped_answers()
    early = [
        early_answer(initialize, shipped, initialized=False),
        early_answer(listing, shipped, initialized=True),
        early_answer(ping, shipped, initialized=True),
    ]
    assert early == sdk


def test_only_well_formed_first_requests_are_answered_early() -> None:
    """A malformed initialize, a request before initialize, a paged listing and every other
    method are left to the SDK (which answers them with its own errors)."""
    shipped = shipped_answers()
    malformed = {**initialize_request("2025-06-18"), "params": {"protocolVersion": 1}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    paged = {**listing, "params": {"cursor": "x"}}
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall"}}
    assert early_answer(malformed, shipped, initialized=False) is None
    assert early_answer(listing, shipped, initialized=False) is None
    assert early_answer(paged, shipped, initialized=True) is None
    assert early_answer(call, shipped, initialized=True) is None
    assert early_answer(initialize_request("2025-06-18"), shipped, initialized=True) is None


def call(id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_tool_calls_over_stdio_are_answered_as_the_sdk_answers_them(
    version: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool calls ``baton mcp`` answers without the SDK's request loop get, for every
    protocol version, the SDK server's own answer: a stored fact read, a fact not there, a
    write refused for its input, a value with characters outside ASCII; and what the SDK
    refuses stays the SDK's to answer (an unknown tool, arguments that are not an object,
    no tool name, a call before initialize)."""
    settings = Settings(redis_url=redis_url, checkpoint_seconds=None)
    caller = Caller(agent="same", namespace="stdio-same", credential=local("same"), session="s_1")
    async with open_backend(settings, dispatch=False) as backend:
        binding = Binding(caller=caller, backend=backend)
        written = await answers(
            [initialize_request(version), call(1, "remember", ref="same/fact", value="héllo ✓")],
            binding,
            serve_stdio,
        )
        assert written[1]["result"]["structuredContent"]["version"] == 1, written
        bad_arguments = {**call(6, "recall"), "params": {"name": "recall", "arguments": [1]}}
        no_name = {**call(7, "recall"), "params": {"arguments": {}}}
        conversation = [
            call(9, "recall", ref="same/fact"),  # before initialize
            initialize_request(version),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            call(1, "recall", ref="same/fact"),
            call(2, "recall", ref="same/nothing"),
            call(3, "remember", ref="same/fact"),
            call("four", "remember", ref="not a ref", value=1),
            call(5, "no_such_tool"),
            bad_arguments,
            no_name,
        ]
        sdk = await answers(conversation, binding)
        answered_directly: list[Any] = []
        answer = ToolCalls.answer

        async def counted(self: ToolCalls, id: Any, params: Any, version: str) -> None:
            answered_directly.append(id)
            await answer(self, id, params, version)

        monkeypatch.setattr(ToolCalls, "answer", counted)
        ours = await answers(conversation, binding, serve_stdio)
    assert sorted(answered_directly, key=str) == sorted([1, 2, 3, "four"], key=str)
    by_id = {answer["id"]: answer for answer in ours}
    assert sorted(by_id, key=str) == sorted((answer["id"] for answer in sdk), key=str)
    assert [by_id[answer["id"]] for answer in sdk] == sdk
    assert by_id[1]["result"]["content"][0]["text"].count("héllo ✓") == 1
    assert [by_id[id]["result"]["isError"] for id in (2, 3, "four")] == [True] * 3
    assert all("error" in by_id[id] for id in (9, 5, 6, 7))


def test_a_host_gets_one_answer_per_request_across_the_hand_over(redis_url: str) -> None:
    """Everything a host sends at once before the SDK has loaded (initialize, a listing, a
    ping, a write) is answered once each, and a read sent after the write's answer sees it;
    nothing else is written: the SDK's own answers to what was answered early are
    dropped. ``baton mcp`` is started as a host starts it (the console script's entry)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "baton.server.entry", "mcp", "--agent", "early"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "BATON_REDIS_URL": redis_url, "BATON_CHECKPOINT_INTERVAL": "off"},
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None

    def send(*messages: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        process.stdin.flush()

    def read(count: int) -> dict[Any, Any]:
        assert process.stdout is not None
        answers = [json.loads(process.stdout.readline()) for _ in range(count)]
        return {answer["id"]: answer for answer in answers}

    send(
        initialize_request("2025-06-18"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        call(3, "remember", ref="early/bird", value=1),
    )
    first = read(4)
    send(call(4, "recall", ref="early/bird"))
    later = read(1)
    rest, errors = process.communicate(timeout=30)  # closes stdin: the end of the host
    assert process.returncode == 0, errors.decode()
    assert (sorted(first), sorted(later), rest) == ([0, 1, 2, 3], [4], b"")
    assert first[0]["result"]["serverInfo"]["name"] == "baton"
    assert len(first[1]["result"]["tools"]) == len(shipped_answers()["tools/list"]["tools"])
    assert first[3]["result"]["structuredContent"]["version"] == 1
    recalled = later[4]["result"]["structuredContent"]
    assert (recalled["value"], recalled["author"]) == (1, "early")


def test_a_bad_agent_is_one_line_before_anything_starts() -> None:
    """`baton mcp --agent 'not valid'` exits 2 with one line naming the flag."""
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.entry", "mcp", "--agent", "not valid"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--agent" in done.stderr
