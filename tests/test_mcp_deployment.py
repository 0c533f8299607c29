"""MCP over streamable HTTP as it is deployed: `baton serve --workers 3`, every request free
to land on any process (a fresh connection each time, as a load balancer spreads them),
driven by the MCP SDK's own client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from baton.server.mcp.mcp_server import initialize_request
from tests.conftest import running_server

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

WORKERS = "3"
INITIALIZE = initialize_request("2025-06-18")
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def served(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Three API processes on one port, sessions idle for 2 s at most and 3 per token,
    making notices; its URL and the URL of its Redis."""
    url = f"{redis_url}?db=6"
    log = tmp_path_factory.mktemp("mcp-workers") / "serve.log"
    limits = {
        "BATON_MCP_SESSIONS": "3",
        "BATON_MCP_IDLE_SECONDS": "2",
        "BATON_RATE_LIMIT": "off",
        "BATON_NOTICES": "on",
    }
    with running_server(url, log, "--workers", WORKERS, **limits) as base:
        yield base, url


def fresh_connections(**headers: str) -> httpx.AsyncClient:
    """An HTTP client that opens a new connection for every request: no request is bound
    to the process that answered the one before."""
    return httpx.AsyncClient(
        headers=headers, limits=httpx.Limits(max_keepalive_connections=0), timeout=10
    )


def sdk_client(url: str, http: httpx.AsyncClient) -> Client:
    """The SDK's client on the initialize handshake (what hosts speak today: one MCP
    session per connection)."""
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy")


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_every_call_is_answered_by_whichever_process_gets_it(
    served: tuple[str, str],
) -> None:
    """Ten SDK clients, one after another, each initialize and then make five writes and a
    handoff, every request on a new connection: all 60 calls are answered, and each MCP
    session stays one Baton session (its handoff pins exactly the five records it wrote,
    whichever process took each write)."""
    url, _ = served
    answered = 0
    for n in range(10):
        async with fresh_connections(**{"X-Baton-Agent": f"agent{n}"}) as http:
            async with sdk_client(url, http) as client:
                for i in range(5):
                    await call(client, "remember", ref=f"spread/{n}/{i}", value=i)
                    answered += 1
                packet = await call(client, "handoff", to="reader", summary="spread")
                answered += 1
        pinned = sorted(pin["ref"] for pin in packet["pins"])
        assert pinned == [f"spread/{n}/{i}" for i in range(5)]
        assert packet["session"].startswith("mcp-")
    assert answered == 60


async def test_a_session_is_served_on_any_connection(served: tuple[str, str]) -> None:
    """One initialize, then 40 tools/list requests naming its session, each on a new
    connection: every one is answered 200 with the tool list."""
    url, _ = served
    async with fresh_connections(**{"X-Baton-Agent": "lister", "Accept": ACCEPT}) as http:
        opened = await http.post(f"{url}/mcp", json=INITIALIZE)
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        answers = [await http.post(f"{url}/mcp", json=listing, headers=headers) for _ in range(40)]
    assert [answer.status_code for answer in answers] == [200] * 40
    assert all(answer.json()["result"]["tools"] for answer in answers)


async def test_the_session_cap_counts_across_processes(served: tuple[str, str]) -> None:
    """An agent holding its 3 sessions, opened on different connections (so on different
    processes), is refused a 4th with a 429 naming the cap; another agent still opens its
    own, and closing one of the first three frees its place, on any process. (Open mode
    counts per agent; with tokens, per token: test_identity_matrix.)"""
    url, _ = served
    async with fresh_connections(**{"X-Baton-Agent": "greedy", "Accept": ACCEPT}) as http:
        held = [(await http.post(f"{url}/mcp", json=INITIALIZE)) for _ in range(3)]
        assert [answer.status_code for answer in held] == [200] * 3
        refused = await http.post(f"{url}/mcp", json=INITIALIZE)
        assert refused.status_code == 429 and "BATON_MCP_SESSIONS" in refused.json()["detail"]
        other = {"X-Baton-Agent": "modest"}
        assert (await http.post(f"{url}/mcp", json=INITIALIZE, headers=other)).status_code == 200

        first = {"mcp-session-id": held[0].headers["mcp-session-id"]}
        assert (await http.delete(f"{url}/mcp", headers=first)).status_code == 200
        assert (await http.post(f"{url}/mcp", json=INITIALIZE)).status_code == 200


async def test_a_reaped_session_answers_404_and_the_client_starts_again(
    served: tuple[str, str],
) -> None:
    """A session idle past BATON_MCP_IDLE_SECONDS is gone on every process: the SDK client's
    next call fails at once as "Session terminated" (the spec's 404, never a 500 or a hang),
    and the client that initializes again goes on."""
    url, _ = served
    async with fresh_connections(**{"X-Baton-Agent": "sleeper"}) as http:
        async with sdk_client(url, http) as client:
            await call(client, "remember", ref="nap/before", value=1)
            await anyio.sleep(2.5)
            with anyio.fail_after(10):
                with pytest.raises(MCPError, match="Session terminated"):
                    await client.call_tool("recall", {"ref": "nap/before"})
        async with sdk_client(url, http) as client:
            assert (await call(client, "recall", ref="nap/before"))["value"] == 1


def test_no_stream_is_offered_for_server_messages(served: tuple[str, str]) -> None:
    """GET /mcp (a stream for server-initiated messages) is a 405 naming what is allowed,
    with or without a session: Baton sends no such messages, and no process holds a stream
    open for a session another process serves."""
    url, _ = served
    headers = {"X-Baton-Agent": "getter", "Accept": ACCEPT}
    opened = httpx.post(f"{url}/mcp", json=INITIALIZE, headers=headers)
    session = {"mcp-session-id": opened.headers["mcp-session-id"]}
    headers["Accept"] = "text/event-stream"
    for extra in ({}, session):
        answer = httpx.get(f"{url}/mcp", headers={**headers, **extra})
        assert (answer.status_code, answer.headers["allow"]) == (405, "POST, DELETE")


async def test_two_sessions_that_wrote_from_the_same_read_are_told_they_contest(
    served: tuple[str, str],
) -> None:
    """Two MCP sessions read v1 of a record, then both write it, every request on a new
    connection to any of three processes: the second write's answer, and any read since,
    name v2 and v3 as contested; a write naming both settles it."""
    url, _ = served
    ref = "contest/listing/553"
    async with fresh_connections(**{"X-Baton-Agent": "scout"}) as http:
        async with sdk_client(url, http) as scout:
            await call(scout, "remember", ref=ref, value={"verdict": "apply"})
    async with (
        fresh_connections(**{"X-Baton-Agent": "pricer"}) as pricer_http,
        fresh_connections(**{"X-Baton-Agent": "reviewer"}) as reviewer_http,
        sdk_client(url, pricer_http) as pricer,
        sdk_client(url, reviewer_http) as reviewer,
    ):
        assert (await call(pricer, "recall", ref=ref))["version"] == 1
        assert (await call(reviewer, "recall", ref=ref))["version"] == 1
        first = await call(pricer, "remember", ref=ref, value={"verdict": "apply", "price": 410})
        second = await call(reviewer, "remember", ref=ref, value={"verdict": "skip"})
        read = await call(pricer, "recall", ref=ref)
        settled = await call(pricer, "remember", ref=ref, value={"verdict": "ask"}, based_on=[2, 3])

    assert first.get("contested") is None
    assert second["contested"] == read["contested"] == {"base": 1, "versions": [2, 3]}
    assert settled["version"] == 4 and settled.get("contested") is None


async def test_notices_come_with_the_next_tool_result_over_http(served: tuple[str, str]) -> None:
    """An MCP session over HTTP (three processes, a new connection per request) cannot be
    pushed to: the first tool call after a pin of its packet moved carries the notice as a
    second text block, once; the structured result is the tool's own."""
    url, _ = served
    ref = "carry/listing/553"
    async with fresh_connections(**{"X-Baton-Agent": "scout"}) as http:
        async with sdk_client(url, http) as scout:
            await call(scout, "remember", ref=ref, value="apply")
            await call(scout, "handoff", to="carrier", summary="go", pins=[{"ref": ref}])
            async with fresh_connections(**{"X-Baton-Agent": "carrier"}) as carrier_http:
                async with sdk_client(url, carrier_http) as carrier:
                    first = await carrier.call_tool("recall", {"ref": ref})
                    await call(scout, "remember", ref=ref, value="skip")
                    with anyio.fail_after(20):
                        while (
                            len((moved := await carrier.call_tool("history", {"ref": ref})).content)
                            < 2
                        ):
                            await anyio.sleep(0.2)
                    after = await carrier.call_tool("recall", {"ref": ref})
    assert len(first.content) == 1
    notice = moved.content[1].text  # type: ignore[union-attr]
    assert notice.startswith("Baton notices") and f"{ref}: pinned at v1" in notice
    assert "now v2 (written by scout" in notice
    assert len(after.content) == 1 and after.structured_content["version"] == 2  # type: ignore[index]
