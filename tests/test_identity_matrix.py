"""Every surface × every identity trick, generated from the app's own route table and MCP
tool list: a route or tool added later is covered without anyone listing it here (its
example request is required by ``test_every_route_and_tool_has_an_example``).

The server runs with tokens on. The victim is agent ``bob`` (a session, a record, a memory
and packets in each state); the attacker is ``mallory``. Each trick must be refused with
400/401/403/422 and leave every data key in Redis byte-for-byte as it was. A control call
(bob's own token, or an admin acting as bob for admin routes) then shows the same request
passes identity, so the refusals are about identity and not a broken example.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from litestar.routes import ASGIRoute, HTTPRoute

from baton.server.api.app import create_app
from baton.server.mcp.mcp_server import initialize_request, tool_list
from baton.server.operations import MEMORY_UPDATE, OBSERVE, OPERATIONS
from baton.server.runtime.embedded import valkey_binary
from baton.server.runtime.settings import Settings
from tests.conftest import (
    free_port,
    issue,
    run_baton,
    running_server,
    wait_for_redis,
    written_keys,
)

ALWAYS_OPEN = ("/healthz", "/readyz", "/agentmemory/livez", "/login", "/static", "/schema")
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
REFUSED = {400, 401, 403, 422}
# Keys that legitimately change on a refused request: token last-use times, rate counters.
VOLATILE = (b"baton:{tokens}:", b"baton:ratelimit", b"baton:auth-failures:", b"baton:sweep-lock")
MCP_INITIALIZE = initialize_request("2025-06-18")

# The table's examples name a memory; each world puts its own in its place.
MEMORY = MEMORY_UPDATE.example_in("baton")["memory_id"]


def table_examples() -> dict[tuple[str, str], Any]:
    """The operation table's example of each unsafe route it builds: the fields the path
    does not carry, in the route's names (None: nothing left to send)."""
    found = {}
    for operation in OPERATIONS:
        for spec, naming in ((operation.rest, "baton"), (operation.agentmemory, "agentmemory")):
            if spec is None or spec.method not in UNSAFE:
                continue
            body = {
                name: value
                for name, value in operation.example_in(naming).items()
                if name not in spec.path_fields
            }
            found[(spec.method, spec.path)] = body or None
    return found


# (method, route path) -> an example body bob could send (None: no body): the table's, and
# those of the routes written by hand. Path parameters are filled from the victim's
# fixtures by name.
EXAMPLES: dict[tuple[str, str], Any] = table_examples() | {
    ("DELETE", "/agentmemory/governance/memories"): {"memoryIds": [MEMORY]},
    ("POST", "/agentmemory/forget"): {"memoryId": MEMORY},
    ("POST", "/agentmemory/mcp/call"): {"name": "recall", "arguments": {"ref": "m/x"}},
    ("POST", "/agentmemory/observe"): {
        "hookType": "post_tool_use",
        "sessionId": "s-bob",
        "project": "p",
        "cwd": "/r",
        "timestamp": "t",
        "data": {"tool_name": "Read"},
    },
    ("POST", "/agentmemory/session/end"): {"sessionId": "s-bob"},
    ("POST", "/agentmemory/session/start"): {"sessionId": "s-bob", "project": "p", "cwd": "/r"},
    ("POST", "/agentmemory/context"): {"sessionId": "s-bob", "project": "p"},
    ("POST", "/agentmemory/enrich"): {"sessionId": "s-bob", "files": ["/r/a.py"]},
    ("POST", "/agentmemory/summarize"): {"sessionId": "s-bob"},
    ("POST", "/agentmemory/claude-bridge/sync"): {},
    ("POST", "/v1/checkpoints"): None,
    ("POST", "/v1/checkpoints/verify"): {},
    ("POST", "/logout"): None,
    ("POST", "/handoffs/{packet_id:str}/requeue"): None,
    ("POST", "/mcp"): MCP_INITIALIZE,
}
STREAMS = {"/v1/dashboard/events", "/v1/agents/{agent:str}/notices/stream"}  # never end
QUERIES: dict[tuple[str, str], dict[str, str]] = {("GET", "/v1/sessions/resume"): {"cwd": "/r"}}
TOOL_EXAMPLES: dict[str, dict[str, Any]] = {
    operation.name: operation.example_in(operation.naming)
    for operation in OPERATIONS
    if operation.tool
}
ADMIN_ONLY = {
    "/v1/handoffs/{packet_id:str}/requeue",
    "/handoffs/{packet_id:str}/requeue",
    "/v1/checkpoints",
    "/v1/grants",
}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # the route's template
    reads_body: bool = False  # the handler takes a JSON body (where an agentId could hide)

    @property
    def unsafe(self) -> bool:
        return self.method in UNSAFE

    @property
    def agentmemory(self) -> bool:
        return self.path.startswith("/agentmemory/")


def app_endpoints(*, include_open: bool = False) -> list[Endpoint]:
    """Every (method, path) of the real app (but the always-open ones)."""
    app = create_app(Settings(redis_url="redis://127.0.0.1:1"))
    found = []
    for route in app.routes:
        if route.path.startswith(ALWAYS_OPEN) and not include_open:
            continue
        if isinstance(route, ASGIRoute):
            found.append(Endpoint("POST", route.path))  # the MCP mount speaks JSON-RPC POSTs
        elif isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                found += [
                    Endpoint(method, route.path, "data" in handler.parsed_fn_signature.parameters)
                    for method in sorted(handler.http_methods)
                    if method not in ("OPTIONS", "HEAD")
                ]
    # By path and method: Litestar's order of one path's handlers differs between processes,
    # and pytest-xdist's workers must collect the same tests in the same order.
    return sorted(found, key=lambda endpoint: (endpoint.path, endpoint.method))


def tool_names() -> list[str]:
    return sorted(tool.name for tool in tool_list())


def tools_taking_agent_id() -> list[str]:
    return sorted(t.name for t in tool_list() if "agentId" in t.input_schema.get("properties", {}))


ENDPOINTS = app_endpoints()
EVERY_ENDPOINT = app_endpoints(include_open=True)
TOOLS = tool_names()


def test_every_route_and_tool_has_an_example() -> None:
    """A new unsafe route or tool fails here until it has an example: the matrix covers it."""
    missing = [
        f"{e.method} {e.path}" for e in ENDPOINTS if e.unsafe and (e.method, e.path) not in EXAMPLES
    ]
    assert not missing, f"add an example body to EXAMPLES for: {missing}"
    assert set(TOOLS) == set(TOOL_EXAMPLES), "add the tool to TOOL_EXAMPLES"
    assert len(ENDPOINTS) > 40 and "/mcp" in {e.path for e in ENDPOINTS}


# -- the secured server and its victims --------------------------------------------------------


@dataclass
class World:
    url: str
    redis_url: str
    tokens: dict[str, str]
    memory: str
    packets: dict[str, str]

    def client(self, token: str | None, *headers: tuple[str, str]) -> httpx.Client:
        base = [("Authorization", f"Bearer {token}")] if token else []
        return httpx.Client(base_url=self.url, headers=httpx.Headers([*base, *headers]), timeout=10)

    def path(self, endpoint: Endpoint) -> str:
        packet = self.packets["claimed"]
        if endpoint.path.endswith("/requeue"):
            packet = self.packets["failed"]
        elif "{packet_id" in endpoint.path and not endpoint.unsafe:
            packet = self.packets["queued"]
        values = {
            "ref": "m/x",
            "packet_id": packet,
            "agent": "bob",
            "session_id": "s-bob",
            "seq": "1",
        }
        return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], endpoint.path)

    def body(self, endpoint: Endpoint) -> Any:
        example = EXAMPLES.get((endpoint.method, endpoint.path))
        if example is None:
            return None
        text = httpx.Request("POST", "/", json=example).content.decode()
        return httpx.Request("POST", "/", content=text.replace(MEMORY, self.memory)).content

    def snapshot(self) -> dict[bytes, bytes | None]:
        client = redis.Redis.from_url(self.redis_url)
        keys = sorted(k for k in client.scan_iter(count=1000) if not k.startswith(VOLATILE))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
        dumped = dict(zip(keys, pipe.execute(), strict=True))
        client.close()
        return dumped


@pytest.fixture(scope="module")
def world(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    url = f"{redis_url}?db=3"
    redis.Redis.from_url(url).flushdb()
    tokens = {
        "admin": issue(url, "ops", admin=True),
        "bob": issue(url, "bob"),
        "mallory": issue(url, "mallory"),
        "mallory-other": issue(url, "mallory", scopes=["other"]),
    }
    log = tmp_path_factory.mktemp("matrix") / "serve.log"
    with running_server(url, log, BATON_RATE_LIMIT="off") as base:
        world = World(base, url, tokens, memory="", packets={})
        with world.client(tokens["bob"], ("X-Baton-Session", "s-bob")) as bob:
            assert bob.post(
                "/v1/sessions", json={"id": "s-bob", "project": "p", "cwd": "/r"}
            ).is_success
            assert bob.post("/v1/records", json={"ref": "m/x", "value": 1}).is_success
            assert bob.post("/v1/observations", json=OBSERVE.example).is_success
            world.memory = bob.post(
                "/v1/memories", json={"content": "bob likes memory tests"}
            ).json()["memory"]["id"]
        world.packets = packets_for_bob(world, "p")
        yield world
    redis.Redis.from_url(url).flushdb()


def packets_for_bob(world: World, summary: str, *headers: tuple[str, str]) -> dict[str, str]:
    """Three packets carol (the admin token) leaves bob, one claimed, one failed, one
    queued: their ids by state."""
    with world.client(world.tokens["admin"], ("X-Baton-Agent", "carol"), *headers) as carol:
        ids = [
            carol.post("/v1/handoffs", json={"to": "bob", "summary": f"{summary}{i}"}).json()["id"]
            for i in range(3)
        ]
    with world.client(world.tokens["bob"]) as bob:
        for _ in range(2):
            assert bob.post("/v1/agents/bob/resume").json()["packet"] is not None
        assert bob.post(f"/v1/handoffs/{ids[1]}/fail", json={"error": "x"}).is_success
    return {"claimed": ids[0], "failed": ids[1], "queued": ids[2]}


def tricks(world: World) -> dict[str, tuple[str | None, list[tuple[str, str]]]]:
    """Each identity trick: the token it uses and the headers it adds."""
    return {
        "no token": (None, []),
        "another agent's token naming the victim": (
            world.tokens["mallory"],
            [("X-Baton-Agent", "bob")],
        ),
        "token scoped to another namespace": (
            world.tokens["mallory-other"],
            [("X-Baton-Namespace", "default")],
        ),
        "the namespace header twice": (
            world.tokens["bob"],
            [("X-Baton-Namespace", "default"), ("X-Baton-Namespace", "default")],
        ),
        "header and query namespaces differ": (
            world.tokens["bob"],
            [("X-Baton-Namespace", "default"), ("x-query", "other")],
        ),
        "another agent's session": (world.tokens["mallory"], [("X-Baton-Session", "s-bob")]),
        "a second Authorization header with the victim's token": (
            world.tokens["mallory"],
            [("Authorization", f"Bearer {world.tokens['bob']}")],
        ),
    }


def send(
    world: World,
    endpoint: Endpoint,
    token: str | None,
    headers: list[tuple[str, str]],
    body: Any = None,
    agent_id: str | None = None,
) -> httpx.Response:
    params = dict(QUERIES.get((endpoint.method, endpoint.path), {}))
    kept = []
    for name, value in headers:
        if name == "x-query":
            params["namespace"] = value
        else:
            kept.append((name, value))
    if agent_id and endpoint.method == "GET":
        params["agentId"] = agent_id
    with world.client(token, *kept) as client:
        content = body
        if agent_id and endpoint.method != "GET":
            decoded = httpx.Response(200, content=body or b"{}").json()
            content = httpx.Request("POST", "/", json={**decoded, "agentId": agent_id}).content
        extra = {"Content-Type": "application/json"} if content else {}
        if endpoint.path in STREAMS:
            with client.stream(
                endpoint.method, world.path(endpoint), params=params, headers=extra
            ) as response:
                return response
        return client.request(
            endpoint.method, world.path(endpoint), params=params, content=content, headers=extra
        )


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_no_identity_trick_passes_any_route(world: World, endpoint: Endpoint) -> None:
    """No token, another agent's token, a foreign namespace, an ambiguous namespace, another
    agent's session and a body/query agentId: refused, and nothing in Redis changed."""
    body = world.body(endpoint)
    before = world.snapshot()
    for name, (token, headers) in tricks(world).items():
        response = send(world, endpoint, token, headers, body)
        assert response.status_code in REFUSED, (name, response.status_code, response.text)
    if endpoint.reads_body or endpoint.agentmemory:
        response = send(world, endpoint, world.tokens["mallory"], [], body, agent_id="bob")
        assert response.status_code in REFUSED, ("agentId", response.status_code, response.text)
    assert world.snapshot() == before, "a refused request changed data"

    admin = endpoint.path in ADMIN_ONLY
    token, headers = (
        (world.tokens["admin"], [("X-Baton-Agent", "bob")]) if admin else (world.tokens["bob"], [])
    )
    control = send(world, endpoint, token, headers, body)
    assert control.status_code < 400 or control.status_code in (404, 409), control.text


@pytest.mark.parametrize("tool", TOOLS)
def test_no_identity_trick_passes_any_tool(world: World, tool: str) -> None:
    """The same tricks against each MCP tool, over /mcp (refused before the tool runs) and
    through agentmemory's /mcp/call shim (where arguments.agentId is a claim too)."""
    arguments = TOOL_EXAMPLES[tool]
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    shim = Endpoint("POST", "/agentmemory/mcp/call")
    before = world.snapshot()
    for name, (token, headers) in tricks(world).items():
        over_mcp = send(
            world,
            Endpoint("POST", "/mcp"),
            token,
            headers,
            httpx.Request("POST", "/", json=call).content,
        )
        assert over_mcp.status_code in REFUSED, (name, over_mcp.text)
        assert over_mcp.headers["content-type"].startswith("application/problem+json")
        shimmed = send(
            world,
            shim,
            token,
            headers,
            httpx.Request("POST", "/", json={"name": tool, "arguments": arguments}).content,
        )
        assert shimmed.status_code in REFUSED, (name, shimmed.text)
    claimed = send(
        world,
        shim,
        world.tokens["mallory"],
        [],
        httpx.Request(
            "POST", "/", json={"name": tool, "arguments": {**arguments, "agentId": "bob"}}
        ).content,
    )
    assert claimed.status_code == 403, claimed.text
    assert world.snapshot() == before, "a refused tool call changed data"


@pytest.mark.anyio
@pytest.mark.parametrize("tool", tools_taking_agent_id())
async def test_tool_arguments_cannot_name_another_agent(world: World, tool: str) -> None:
    """Over a real MCP session with mallory's token, a tool's agentId naming bob is an
    isError result and writes nothing."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    before = world.snapshot()
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {world.tokens['mallory']}"})
    async with Client(streamable_http_client(f"{world.url}/mcp", http_client=http)) as mcp:
        result = await mcp.call_tool(tool, {**TOOL_EXAMPLES[tool], "agentId": "bob"})
    assert result.is_error
    assert "may not act as bob" in result.content[0].text  # type: ignore[union-attr]
    assert world.snapshot() == before


# -- open mode: no tokens, loopback ------------------------------------------------------------


def open_path(endpoint: Endpoint) -> str:
    values = {
        "ref": "m/x",
        "packet_id": "h_00000000",
        "agent": "bob",
        "session_id": "s-bob",
        "seq": "1",
        "file_path": "dashboard.css",
        "path": "openapi.json",
    }
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], endpoint.path)


@pytest.mark.parametrize("endpoint", EVERY_ENDPOINT, ids=lambda e: f"{e.method} {e.path}")
def test_open_mode_answers_only_loopback_hosts(api_url: str, endpoint: Endpoint) -> None:
    """DNS rebinding: a request whose Host is not a loopback name is 421 on every surface."""
    response = httpx.request(
        endpoint.method,
        f"{api_url}{open_path(endpoint)}",
        headers={"Host": "evil.example"},
        timeout=10,
    )
    assert response.status_code == 421, response.text


UNSAFE_ENDPOINTS = [e for e in EVERY_ENDPOINT if e.unsafe]


@pytest.mark.parametrize("endpoint", UNSAFE_ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_open_mode_refuses_what_a_web_page_could_send(
    api_url: str, sync_redis: redis.Redis, endpoint: Endpoint
) -> None:
    """A browser's "simple" request (text/plain, no preflight) is 415, and a cross-origin
    write is 403, on every route that changes something; neither writes anything."""
    example = EXAMPLES.get((endpoint.method, endpoint.path)) or {"token": "x"}
    url = f"{api_url}{open_path(endpoint)}"
    planted = httpx.request(
        endpoint.method,
        url,
        content=httpx.Request("POST", "/", json=example).content,
        headers={"Content-Type": "text/plain"},
        timeout=10,
    )
    assert planted.status_code == 415, planted.text
    forged = httpx.request(
        endpoint.method, url, json=example, timeout=10, headers={"Origin": "https://evil.example"}
    )
    assert forged.status_code == 403, forged.text
    assert written_keys(sync_redis) == []


# -- availability: one agent cannot take the server from the others ---------------------------

MCP_ACCEPT = ("Accept", "application/json, text/event-stream")


@contextmanager
def limited_world(redis_url: str, db: int, log: Path, **limits: str) -> Iterator[World]:
    """A secured server (tokens for bob and mallory) on its own database, with ``limits``."""
    url = f"{redis_url}?db={db}"
    redis.Redis.from_url(url).flushdb()
    tokens = {name: issue(url, name) for name in ("bob", "mallory")}
    with running_server(url, log, BATON_RATE_LIMIT="off", **limits) as base:
        yield World(base, url, tokens, memory="", packets={})
    redis.Redis.from_url(url).flushdb()


@pytest.fixture(scope="module")
def tight(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A secured server with small per-agent limits, so each can be reached in a test."""
    with limited_world(
        redis_url,
        4,
        tmp_path_factory.mktemp("tight") / "serve.log",
        BATON_MCP_SESSIONS="2",
        BATON_MCP_IDLE_SECONDS="1",
        BATON_MAX_VERSIONS="3",
        BATON_MAX_INDEX_TERMS="40",
        BATON_MAX_NAMESPACES="4",
        BATON_MAX_NAMESPACE_BYTES="100kb",
    ) as world:
        yield world


def open_mcp(client: httpx.Client) -> httpx.Response:
    return client.post("/mcp/", json=MCP_INITIALIZE)


def test_one_agent_cannot_hold_every_mcp_session(tight: World) -> None:
    """A token at its MCP session cap is refused another (429 naming the cap and how to
    free one), in whichever namespace it asks for one, while another token still opens its
    own; closing a session frees its place; sessions left idle past the idle timeout are
    closed and free theirs too, and their ids then answer 404."""
    mallory = tight.client(tight.tokens["mallory"], MCP_ACCEPT)
    bob = tight.client(tight.tokens["bob"], MCP_ACCEPT)
    held = [open_mcp(mallory).headers["mcp-session-id"] for _ in range(2)]
    refused = open_mcp(mallory)
    assert refused.status_code == 429, refused.text
    assert refused.json()["limit"] == 2 and "BATON_MCP_SESSIONS" in refused.json()["detail"]
    elsewhere = tight.client(tight.tokens["mallory"], MCP_ACCEPT, ("X-Baton-Namespace", "n2"))
    assert open_mcp(elsewhere).status_code == 429
    assert open_mcp(bob).status_code == 200

    assert mallory.delete("/mcp/", headers={"mcp-session-id": held[0]}).status_code == 200
    held[0] = open_mcp(mallory).headers["mcp-session-id"]
    assert open_mcp(mallory).status_code == 429
    time.sleep(1.5)  # both of mallory's sessions sit idle past BATON_MCP_IDLE_SECONDS
    assert [open_mcp(mallory).status_code for _ in range(2)] == [200, 200]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    stale = mallory.post("/mcp/", json=listing, headers={"mcp-session-id": held[1]})
    assert stale.status_code == 404 and "timed out" in stale.json()["detail"]


def refused_by_quota(response: httpx.Response, setting: str) -> bool:
    body = response.json()
    return response.status_code == 413 and body["setting"] == setting and setting in body["detail"]


def test_quotas_stop_one_agent_from_filling_the_store(tight: World) -> None:
    """A record at its version quota, a namespace whose search index holds its quota of
    distinct terms, a namespace holding its quota of value bytes, and a server at its
    namespace quota each refuse the write that would go past (413 naming the setting) and
    write nothing; the other namespaces and records still take writes."""
    bob = tight.client(tight.tokens["bob"])
    mallory = tight.client(tight.tokens["mallory"], ("X-Baton-Namespace", "flood"))
    for n in range(3):
        assert bob.post("/v1/records", json={"ref": "q/v", "value": n}).status_code == 201
    past = bob.post("/v1/records", json={"ref": "q/v", "value": 3})
    assert refused_by_quota(past, "BATON_MAX_VERSIONS"), past.text
    assert bob.get("/v1/records/q/v").json()["version"] == 3

    words = " ".join(f"word{n}" for n in range(60))
    assert mallory.post("/v1/records", json={"ref": "f/1", "value": words}).status_code == 201
    heavy = tight.client(tight.tokens["mallory"], ("X-Baton-Namespace", "heavy"))
    for n in range(2):
        big = {"ref": f"h/{n}", "value": "z" * 60_000}
        assert heavy.post("/v1/records", json=big).status_code == 201
    full = mallory.post("/v1/records", json={"ref": "f/2", "value": "more words"})
    assert refused_by_quota(full, "BATON_MAX_INDEX_TERMS"), full.text
    assert mallory.get("/v1/records/f/2").status_code == 404
    too_much = heavy.post("/v1/records", json={"ref": "h/2", "value": "z"})
    assert refused_by_quota(too_much, "BATON_MAX_NAMESPACE_BYTES"), too_much.text
    assert bob.post("/v1/records", json={"ref": "q/w", "value": "fine"}).status_code == 201

    held = redis.Redis.from_url(tight.redis_url).scard("baton:namespaces")
    for n in range(4 - held):
        other = tight.client(tight.tokens["bob"], ("X-Baton-Namespace", f"extra{n}"))
        assert other.post("/v1/records", json={"ref": "a/b", "value": n}).status_code == 201
    one_more = tight.client(tight.tokens["bob"], ("X-Baton-Namespace", "one-more"))
    refused = one_more.post("/v1/records", json={"ref": "a/b", "value": 1})
    assert refused_by_quota(refused, "BATON_MAX_NAMESPACES"), refused.text
    assert bob.post("/v1/records", json={"ref": "q/x", "value": "still"}).status_code == 201


@pytest.fixture(scope="module")
def crowded(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A secured server where one agent token may create two namespaces."""
    log = tmp_path_factory.mktemp("crowded") / "serve.log"
    with limited_world(redis_url, 5, log, BATON_MAX_NAMESPACES_PER_TOKEN="2") as world:
        yield world


def test_one_token_cannot_take_every_namespace(crowded: World) -> None:
    """An agent token that created as many namespaces as it may is refused another (413
    naming BATON_MAX_NAMESPACES_PER_TOKEN, nothing written), over REST and MCP alike, and
    still writes where namespaces exist, its own or others'; another token creates its
    own."""

    def in_namespace(token: str, namespace: str) -> httpx.Client:
        return crowded.client(crowded.tokens[token], ("X-Baton-Namespace", namespace))

    for namespace in ("m1", "m2"):
        created = in_namespace("mallory", namespace).post(
            "/v1/records", json={"ref": "a/b", "value": 1}
        )
        assert created.status_code == 201, created.text
    refused = in_namespace("mallory", "m3").post("/v1/records", json={"ref": "a/b", "value": 1})
    assert refused_by_quota(refused, "BATON_MAX_NAMESPACES_PER_TOKEN"), refused.text
    assert in_namespace("bob", "m3").get("/v1/records/a/b").status_code == 404
    session = crowded.client(crowded.tokens["mallory"], ("X-Baton-Namespace", "m4"), MCP_ACCEPT)
    opened = open_mcp(session)
    session.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    call = session.post(
        "/mcp/",
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "remember", "arguments": {"ref": "a/b", "value": 1}},
        },
    )
    assert call.status_code == 200
    assert "BATON_MAX_NAMESPACES_PER_TOKEN" in call.text
    assert "isError" in call.text
    for token, namespace in (("mallory", "m1"), ("bob", "m3"), ("mallory", "m3")):
        written = in_namespace(token, namespace).post(
            "/v1/records", json={"ref": "a/c", "value": token}
        )
        assert written.status_code == 201, written.text


def test_one_token_cannot_fill_redis_for_everyone(tmp_path: Path) -> None:
    """On a Redis holding at most 24 MB and no BATON_MAX_TOKEN_BYTES set, an agent token
    writing 300 KB values is refused (413 naming BATON_MAX_TOKEN_BYTES) once its values
    hold a tenth of that, never by a full Redis (503); another agent's token then writes as
    much in its own namespace."""
    port = free_port()
    store = subprocess.Popen(
        [valkey_binary(), "--port", str(port), "--save", "", "--maxmemory", "24mb"],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}"
        wait_for_redis(redis.Redis.from_url(url))
        tokens = {name: issue(url, name) for name in ("mallory", "bob")}
        with running_server(url, tmp_path / "serve.log", BATON_RATE_LIMIT="off") as base:

            def fill(agent: str, namespace: str, most: int) -> list[httpx.Response]:
                headers = {
                    "Authorization": f"Bearer {tokens[agent]}",
                    "X-Baton-Namespace": namespace,
                }
                answers = []
                with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
                    for n in range(most):  # 200 x 300 KB: more than Redis holds
                        body = {"ref": f"big/{n}", "value": "x" * 300_000}
                        answers.append(client.post("/v1/records", json=body))
                        if answers[-1].status_code != 201:
                            break
                return answers

            mallory = fill("mallory", "shared", 200)
            assert refused_by_quota(mallory[-1], "BATON_MAX_TOKEN_BYTES"), mallory[-1].text
            written = len(mallory) - 1
            assert all(answer.status_code == 201 for answer in mallory[:-1])
            assert 24 * 2**20 // 10 <= written * 300_000 < 24 * 2**20 // 10 + 300_000
            bob = fill("bob", "bobs", written)
            assert [answer.status_code for answer in bob] == [201] * written
    finally:
        store.kill()
        store.wait(10)


def test_a_forgotten_namespace_gives_its_slots_back(crowded: World) -> None:
    """``baton forget-namespace`` deletes a namespace's records and gives back what it
    counted: its creator token may create another, and the bytes its versions held no
    longer count against that token. Without ``--yes`` and no terminal to ask on, it
    deletes nothing; a name Baton keeps for its own keys, or one no namespace has, is
    refused."""
    carol = issue(crowded.redis_url, "carol")

    def write(namespace: str, value: object = 1) -> httpx.Response:
        client = crowded.client(carol, ("X-Baton-Namespace", namespace))
        return client.post("/v1/records", json={"ref": "a/b", "value": value})

    data = redis.Redis.from_url(crowded.redis_url)
    assert write("f1", "x" * 900).status_code == 201
    assert write("f2").status_code == 201
    assert refused_by_quota(write("f3"), "BATON_MAX_NAMESPACES_PER_TOKEN")
    held = data.hstrlen("baton:f1:rec:{a/b}:v:1", "value")
    stored = sum(int(value) for value in data.hvals("baton:token-bytes"))

    env = {"BATON_REDIS_URL": crowded.redis_url}
    unasked = run_baton("forget-namespace", "f1", env=env)
    assert unasked.returncode != 0 and "--yes" in unasked.stderr
    assert data.exists("baton:f1:rec:{a/b}:head")
    reserved = run_baton("forget-namespace", "ratelimit", "--yes", env=env)
    assert reserved.returncode == 2 and "keeps for its own keys" in reserved.stderr
    typo = run_baton("forget-namespace", "f-one", "--yes", env=env)
    assert typo.returncode == 2 and "no namespace f-one" in typo.stderr

    forgotten = run_baton("forget-namespace", "f1", "--yes", env=env)
    assert forgotten.returncode == 0, forgotten.stderr
    assert "forgot namespace f1" in forgotten.stdout
    assert list(data.scan_iter("baton:f1:*")) == []
    assert b"f1" not in data.smembers("baton:namespaces")
    assert sum(int(value) for value in data.hvals("baton:token-bytes")) == stored - held > 0
    assert write("f3").status_code == 201
