"""Agent tokens against a real server with its own Redis database (so the shared tests stay
in open mode): who may do what, on every surface."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO, running_server


def baton(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args], cwd=REPO, capture_output=True,
        text=True, timeout=60, check=False, env={**os.environ, "BATON_REDIS_URL": url},
    )  # fmt: skip


@pytest.fixture(scope="module")
def auth_redis(redis_url: str) -> Iterator[str]:
    url = f"{redis_url}?db=1"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def tokens(auth_redis: str) -> dict[str, str]:
    """An admin token and two agent tokens, created with the CLI."""
    made = {}
    for name, extra in (("admin", ["--admin"]), ("scout", []), ("executor", [])):
        result = baton(auth_redis, "token", "add", "--agent", name, *extra)
        assert result.returncode == 0, result.stderr
        made[name] = result.stdout.strip()
    return made


@pytest.fixture(scope="module")
def secured(auth_redis: str, tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("auth") / "serve.log"
    with running_server(auth_redis, log) as url:
        yield url


def client(url: str, token: str | None = None, **headers: str) -> httpx.Client:
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=url, headers=headers)


def test_requests_need_a_valid_token(secured: str, tokens: dict[str, str]) -> None:
    """No token or a wrong one is a 401 problem; health stays open."""
    assert httpx.get(f"{secured}/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer bt_wrong"}):
        response = httpx.get(f"{secured}/v1/stats", headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"].startswith("application/problem+json")
    assert client(secured, tokens["scout"]).get("/v1/stats").status_code == 200


def test_an_agent_token_acts_only_as_its_agent(secured: str, tokens: dict[str, str]) -> None:
    """Writes are attributed to the token's agent whatever X-Baton-Agent says; resuming or
    settling another agent's packets is 403; admins may requeue, agents may not."""
    scout = client(secured, tokens["scout"], **{"X-Baton-Agent": "mallory"})
    written = scout.post("/v1/records", json={"ref": "auth/fact", "value": 1})
    assert written.status_code == 201
    assert scout.get("/v1/records/auth/fact").json()["author"] == "scout"
    packet = scout.post("/v1/handoffs", json={"to": "executor", "summary": "go"}).json()
    assert packet["from"] == "scout"
    assert scout.post("/v1/agents/executor/resume").status_code == 403

    executor = client(secured, tokens["executor"])
    assert executor.post("/v1/agents/executor/resume").json()["packet"]["id"] == packet["id"]
    assert scout.post(f"/v1/handoffs/{packet['id']}/complete").status_code == 403
    assert executor.post(f"/v1/handoffs/{packet['id']}/fail", json={"error": "x"}).status_code == 200
    assert executor.post(f"/v1/handoffs/{packet['id']}/requeue").status_code == 403
    admin = client(secured, tokens["admin"], **{"X-Baton-Agent": "operator"})
    requeued = admin.post(f"/v1/handoffs/{packet['id']}/requeue")
    assert requeued.status_code == 200 and requeued.json()["state"] == "queued"
    assert requeued.json()["log"][-1]["agent"] == "operator"


@pytest.mark.anyio
async def test_mcp_over_http_needs_a_token_and_uses_its_agent(
    secured: str, tokens: dict[str, str]
) -> None:
    """The /mcp mount is behind the same check: the token's agent writes."""
    assert httpx.post(f"{secured}/mcp", json={}).status_code == 401
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {tokens['executor']}",
                                      "X-Baton-Agent": "mallory"})  # fmt: skip
    async with Client(streamable_http_client(f"{secured}/mcp", http_client=http)) as mcp:
        result = await mcp.call_tool("remember", {"ref": "auth/mcp", "value": 2})
        assert not result.is_error
        recalled = await mcp.call_tool("recall", {"ref": "auth/mcp"})
    assert recalled.structured_content["author"] == "executor"  # type: ignore[index]


def test_dashboard_login_cookie_and_agentmemory_routes(secured: str, tokens: dict[str, str]) -> None:
    """The dashboard takes the token once through /login (then a cookie); agentmemory routes
    accept a Baton token."""
    assert httpx.get(f"{secured}/").status_code == 401
    with httpx.Client(base_url=secured, follow_redirects=True) as browser:
        assert browser.get("/login", params={"token": "bt_wrong"}).status_code == 401
        assert browser.get("/login", params={"token": tokens["admin"]}).status_code == 200
        assert "Pending handoffs" in browser.get("/").text
    assert httpx.get(f"{secured}/agentmemory/sessions").status_code == 401
    assert client(secured, tokens["scout"]).get("/agentmemory/sessions").status_code == 200


def test_revoked_and_expired_tokens_stop_working(auth_redis: str, secured: str) -> None:
    """Revoking takes effect on the next request; an expired token is refused; only hashes
    are stored."""
    made = baton(auth_redis, "token", "add", "--agent", "temp")
    secret = made.stdout.strip()
    token_id = made.stderr.split()[1]
    assert client(secured, secret).get("/v1/stats").status_code == 200
    listing = baton(auth_redis, "token", "list").stdout
    assert token_id in listing and secret not in listing
    raw = redis.Redis.from_url(auth_redis)
    assert all(secret.encode() not in (raw.dump(key) or b"") for key in raw.keys("*"))
    assert baton(auth_redis, "token", "revoke", token_id).returncode == 0
    assert client(secured, secret).get("/v1/stats").status_code == 401

    short = baton(auth_redis, "token", "add", "--agent", "temp", "--expires", "1s").stdout.strip()
    time.sleep(1.2)
    assert client(secured, short).get("/v1/stats").status_code == 401
    assert baton(auth_redis, "token", "add", "--agent", "x", "--expires", "soon").returncode == 2


def test_serving_a_public_address_without_tokens_is_refused(redis_url: str) -> None:
    """`baton serve --host 0.0.0.0` with no token refuses to start and says what to do."""
    empty = f"{redis_url}?db=2"
    redis.Redis.from_url(empty).flushdb()
    result = baton(empty, "serve", "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without tokens" in result.stderr
    assert "--insecure-open" in result.stderr


def test_requests_per_token_are_rate_limited(
    auth_redis: str, tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """BATON_RATE_LIMIT counts per token in Redis: over the limit is a 429 problem, and
    another token still gets through."""
    log = tmp_path_factory.mktemp("limited") / "serve.log"
    with running_server(auth_redis, log, BATON_RATE_LIMIT="3/minute") as url:
        scout = client(url, tokens["scout"])
        codes = [scout.get("/v1/stats").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = scout.get("/v1/stats")
        assert limited.headers["content-type"].startswith("application/problem+json")
        assert client(url, tokens["executor"]).get("/v1/stats").status_code == 200


def test_limits_are_configurable(auth_redis: str) -> None:
    """A malformed limit setting stops the server with a message naming the variable."""
    result = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "serve"], cwd=REPO, capture_output=True,
        text=True, timeout=60, check=False,
        env={**os.environ, "BATON_REDIS_URL": auth_redis, "BATON_RATE_LIMIT": "lots"},
    )  # fmt: skip
    assert result.returncode != 0
    assert "BATON_RATE_LIMIT must be like 600/second" in result.stderr
