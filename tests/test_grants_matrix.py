"""Grants on every surface, generated from the app's route table and MCP tool list (the
identity matrix's, ``test_identity_matrix``): a route or tool added later is covered here
without anyone listing it.

The server runs with tokens on; namespace ``granted`` has grants. Bob's record, memory,
session, observation and packets all hold the word ``zebra``. The intern is confined to
``records:pub/=write`` and ``memories:q=write``; mallory has no grants. Every route and
tool the intern calls is refused or answers without a trace of bob's things, and leaves
each of bob's keys byte-for-byte as it was; a control with grants that cover them shows
the same requests do reach them.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis

from baton.server.operations import OBSERVE
from tests.conftest import issue, running_server
from tests.test_identity_matrix import (
    ENDPOINTS,
    MEMORY,
    TOOL_EXAMPLES,
    TOOLS,
    Endpoint,
    World,
    packets_for_bob,
    send,
)

NAMESPACE = "granted"
MARK = "zebra"
HEADER = ("X-Baton-Namespace", NAMESPACE)
ALLOWED = {200, 201, 204}
OBSERVATION = {
    **OBSERVE.example,
    "data": {"tool_name": "Read", "tool_input": {"file_path": "/r/a.py"}, "note": "zebra"},
}


class GrantedWorld(World):
    def victim_keys(self) -> dict[bytes, bytes | None]:
        """Bob's things: every key naming his record, memory, session or packets."""
        marks = [
            b"{m/x}",
            self.memory.encode(),
            b"s-bob",
            *(p.encode() for p in self.packets.values()),
        ]
        return {
            key: value for key, value in self.snapshot().items() if any(m in key for m in marks)
        }

    def grant(self, agent: str, *grants: dict[str, str]) -> None:
        with self.client(self.tokens["admin"], HEADER) as admin:
            answer = admin.post("/v1/grants", json={"agent": agent, "grants": list(grants)})
            assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def world(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrantedWorld]:
    url = f"{redis_url}?db=4"
    redis.Redis.from_url(url).flushdb()
    scoped = {"scopes": [NAMESPACE]}
    tokens = {
        "admin": issue(url, "ops", admin=True),
        "bob": issue(url, "bob", **scoped),
        "intern": issue(url, "intern", **scoped),
        "mallory": issue(url, "mallory", **scoped),
    }
    log = tmp_path_factory.mktemp("grants") / "serve.log"
    with running_server(url, log, BATON_RATE_LIMIT="off") as base:
        world = GrantedWorld(base, url, tokens, memory="", packets={})
        with world.client(tokens["bob"], ("X-Baton-Session", "s-bob")) as bob:
            started = bob.post(
                "/v1/sessions", json={"id": "s-bob", "project": "p", "cwd": "/r", "title": "zebra"}
            )
            assert started.is_success, started.text
            assert bob.post("/v1/records", json={"ref": "m/x", "value": "zebra plans"}).is_success
            assert bob.post("/v1/observations", json=OBSERVATION).is_success
            saved = bob.post("/v1/memories", json={"content": "zebra deploy keys", "project": "p"})
            world.memory = saved.json()["memory"]["id"]
        world.packets = packets_for_bob(world, "zebra ", HEADER)
        world.grant(
            "intern",
            {"kind": "records", "target": "pub/", "access": "write"},
            {"kind": "memories", "target": "q", "access": "write"},
        )
        yield world
    redis.Redis.from_url(url).flushdb()


def leaks(response: httpx.Response) -> bool:
    return response.status_code in ALLOWED and MARK in response.text


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_a_confined_agent_reaches_nothing_ungranted_on_any_route(
    world: GrantedWorld, endpoint: Endpoint
) -> None:
    """Each route, called by the intern with the identity matrix's example: refused, or an
    answer without bob's things; bob's keys unchanged either way."""
    before = world.victim_keys()
    response = send(world, endpoint, world.tokens["intern"], [], world.body(endpoint))
    assert response.status_code < 500, response.text
    assert not leaks(response), response.text
    assert world.victim_keys() == before, "the intern changed bob's things"


@pytest.mark.anyio
async def test_a_confined_agent_reaches_nothing_ungranted_with_any_tool(
    world: GrantedWorld,
) -> None:
    """Every MCP tool, over a real MCP session with the intern's token: an isError result
    or an answer without bob's things; bob's keys unchanged."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    before = world.victim_keys()
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {world.tokens['intern']}"})
    answers = {}
    async with Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as mcp:
        for tool in TOOLS:
            arguments = {
                name: (value.replace(MEMORY, world.memory) if isinstance(value, str) else value)
                for name, value in TOOL_EXAMPLES[tool].items()
            }
            result = await mcp.call_tool(tool, arguments)
            text = " ".join(getattr(part, "text", "") for part in result.content)
            answers[tool] = (result.is_error, text)
            assert result.is_error or MARK not in text, (tool, text)
    assert world.victim_keys() == before
    refused = {tool for tool, (is_error, text) in answers.items() if "intern has grants" in text}
    assert {"recall", "history", "memory_recall", "memory_update"} <= refused, answers


def test_the_same_requests_reach_bobs_things_once_granted(world: GrantedWorld) -> None:
    """Control: with records:m/, memories:p and packets:bob the intern reads bob's record,
    memory and packets through the same routes; write stays refused with a read grant."""
    world.grant(
        "intern",
        {"kind": "records", "target": "m/"},
        {"kind": "memories", "target": "p"},
        {"kind": "packets", "target": "bob"},
    )
    try:
        with world.client(world.tokens["intern"]) as intern:
            assert MARK in intern.get("/v1/records/m/x").text
            found = intern.post("/v1/memories/recall", json={"query": "zebra", "project": "p"})
            assert MARK in found.text, found.text
            assert MARK in intern.get("/v1/handoffs").text
            refused = intern.post("/v1/records", json={"ref": "m/x", "value": "mine"})
            assert refused.status_code == 403
            assert refused.json()["needs"] == "write records:m/x"
    finally:
        world.grant(
            "intern",
            {"kind": "records", "target": "pub/", "access": "write"},
            {"kind": "memories", "target": "q", "access": "write"},
        )


def test_agents_without_grants_keep_records_but_not_others_packets(world: GrantedWorld) -> None:
    """In a namespace with grants, mallory (no grants) still reads records and memories,
    but not bob's packets, nor the dashboard and its event stream; operators see all."""
    with world.client(world.tokens["mallory"]) as mallory:
        assert MARK in mallory.get("/v1/records/m/x").text
        assert MARK not in mallory.get("/v1/handoffs").text
        packet = world.packets["queued"]
        assert mallory.get(f"/v1/handoffs/{packet}").status_code == 403
        assert mallory.get("/v1/dashboard/pending").status_code == 403
        assert mallory.get("/v1/dashboard/events").status_code == 403
    with world.client(world.tokens["admin"], HEADER) as admin:
        assert MARK in admin.get("/v1/handoffs").text
        assert admin.get("/v1/dashboard/pending").status_code == 200
        denied = [e for e in admin.get("/v1/audit").json() if e["action"] == "denied"]
        assert {"intern", "mallory"} <= {e["agent"] for e in denied}
