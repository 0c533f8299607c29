"""Agent tokens against a real server with its own Redis database (so the shared tests stay
in open mode): who may do what, on every surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from baton.server.stores.tokens import TokenStore, digest
from tests.conftest import REPO, running_server
from tests.test_identity_matrix import MCP_INITIALIZE


def baton(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "BATON_REDIS_URL": url},
    )


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
def secured(
    auth_redis: str, tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
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
    """Writes are attributed to the token's agent; naming another agent in X-Baton-Agent is a
    403 (not silently rewritten); resuming or settling another agent's packets is 403;
    admins may act as any agent and requeue, agents may not."""
    impostor = client(secured, tokens["scout"], **{"X-Baton-Agent": "mallory"})
    refused = impostor.post("/v1/records", json={"ref": "auth/fact", "value": 1})
    assert refused.status_code == 403 and refused.json()["field"] == "x-baton-agent"
    scout = client(secured, tokens["scout"])
    assert scout.post("/v1/records", json={"ref": "auth/fact", "value": 1}).status_code == 201
    assert scout.get("/v1/records/auth/fact").json()["author"] == "scout"
    packet = scout.post("/v1/handoffs", json={"to": "executor", "summary": "go"}).json()
    assert packet["from"] == "scout"
    assert scout.post("/v1/agents/executor/resume").status_code == 403

    both = httpx.get(
        f"{secured}/v1/whoami",
        headers=[("Authorization", f"Bearer {tokens[name]}") for name in ("scout", "executor")],
    )
    assert (both.status_code, both.json()["field"]) == (400, "authorization")
    executor = client(secured, tokens["executor"])
    assert executor.post("/v1/agents/executor/resume").json()["packet"]["id"] == packet["id"]
    assert scout.post(f"/v1/handoffs/{packet['id']}/complete").status_code == 403
    assert (
        executor.post(f"/v1/handoffs/{packet['id']}/fail", json={"error": "x"}).status_code == 200
    )
    assert executor.post(f"/v1/handoffs/{packet['id']}/requeue").status_code == 403
    admin = client(secured, tokens["admin"], **{"X-Baton-Agent": "operator"})
    requeued = admin.post(f"/v1/handoffs/{packet['id']}/requeue")
    assert requeued.status_code == 200 and requeued.json()["state"] == "queued"
    assert requeued.json()["log"][-1]["agent"] == "operator"


@pytest.mark.anyio
async def test_mcp_over_http_needs_a_token_and_uses_its_agent(
    secured: str, tokens: dict[str, str]
) -> None:
    """The /mcp mount is behind the same gate: no token is 401, naming another agent is 403,
    and the token's agent writes."""
    assert httpx.post(f"{secured}/mcp", json={}).status_code == 401
    impostor = httpx.post(
        f"{secured}/mcp",
        json={},
        headers={"Authorization": f"Bearer {tokens['executor']}", "X-Baton-Agent": "mallory"},
    )
    assert impostor.status_code == 403
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {tokens['executor']}"})
    async with Client(streamable_http_client(f"{secured}/mcp", http_client=http)) as mcp:
        result = await mcp.call_tool("remember", {"ref": "auth/mcp", "value": 2})
        assert not result.is_error
        recalled = await mcp.call_tool("recall", {"ref": "auth/mcp"})
    assert recalled.structured_content["author"] == "executor"  # type: ignore[index]


def test_an_mcp_session_answers_only_the_agent_that_opened_it(
    secured: str, tokens: dict[str, str]
) -> None:
    """An MCP session id is visible to the namespace (records carry mcp-<id>): another
    agent's token cannot send over it or close it (403, before the SDK sees the request);
    its owner can. An id no one holds open is 404 for everyone."""
    accept = {"Accept": "application/json, text/event-stream"}
    scout = client(secured, tokens["scout"], **accept)
    opened = scout.post("/mcp/", json=MCP_INITIALIZE)
    assert opened.status_code == 200
    session = {"mcp-session-id": opened.headers["mcp-session-id"]}
    executor = client(secured, tokens["executor"], **accept)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    assert executor.post("/mcp/", json=listing, headers=session).status_code == 403
    assert executor.delete("/mcp/", headers=session).status_code == 403
    assert scout.delete("/mcp/", headers=session).status_code == 200
    # Once closed, or never opened (an id of the SDK's own shape, from before Baton kept
    # sessions in Redis): 404 for anyone, so a client initializes again.
    for unknown in (session, {"mcp-session-id": "9dcd06a651206719dd171f105908f0c9"}):
        for caller in (scout, executor):
            assert caller.post("/mcp/", json=listing, headers=unknown).status_code == 404


def test_dashboard_login_trades_the_token_for_an_opaque_cookie(
    secured: str, tokens: dict[str, str]
) -> None:
    """The dashboard's login form posts the token once; the browser keeps only an opaque,
    HttpOnly, SameSite=Strict cookie (never the token, never in a URL); logging out ends it.
    A write carried by the cookie from another origin (another localhost port), and a login
    posted from another site, are refused.
    agentmemory routes accept a Baton token."""
    assert httpx.get(f"{secured}/").status_code == 401
    with httpx.Client(base_url=secured) as browser:
        assert 'method="post"' in browser.get("/login").text
        assert browser.get("/login", params={"token": tokens["admin"]}).cookies == {}
        assert browser.post("/login", data={"token": "bt_wrong"}).status_code == 401
        forged = browser.post(  # another site's form signing the browser in: login CSRF
            "/login", data={"token": tokens["admin"]}, headers={"Origin": "http://evil.example"}
        )
        assert forged.status_code == 403 and "set-cookie" not in forged.headers
        login = browser.post("/login", data={"token": tokens["admin"]}, headers={"Origin": secured})
        assert (login.status_code, login.headers["location"]) == (303, "/")
        cookie = login.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        assert tokens["admin"] not in cookie and "token" not in login.headers["location"]
        assert "Pending handoffs" in browser.get("/").text
        assert browser.get("/v1/whoami").json()["agent"] == "admin"
        other_port = {"Origin": "http://127.0.0.1:9"}  # same site, another origin
        assert browser.post("/logout", headers=other_port).status_code == 403
        own = {"Origin": secured}
        assert browser.post("/logout", headers=own).status_code == 303
        stale = cookie.split(";")[0].split("=", 1)[1]
    with httpx.Client(base_url=secured, cookies={"baton_login": stale}) as replayed:
        assert replayed.get("/").status_code == 401
    assert httpx.get(f"{secured}/agentmemory/sessions").status_code == 401
    assert client(secured, tokens["scout"]).get("/agentmemory/sessions").status_code == 200


def test_an_open_event_stream_ends_when_its_token_is_revoked(auth_redis: str, secured: str) -> None:
    """The dashboard's event stream asks the gate again while it runs: revoking its token
    ends it within seconds (it used to deliver events for as long as it stayed open)."""
    made = baton(auth_redis, "token", "add", "--agent", "watcher")
    secret, token_id = made.stdout.strip(), made.stderr.split()[1]
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.stream("GET", f"{secured}/v1/dashboard/events", headers=headers, timeout=30) as live:
        assert live.status_code == 200
        lines = live.iter_lines()
        assert next(lines) == ": connected"
        assert baton(auth_redis, "token", "revoke", token_id).returncode == 0
        revoked = time.monotonic()
        list(lines)  # returns once the server ends the stream (else: a read timeout)
    assert time.monotonic() - revoked < 15


def test_metrics_which_span_every_namespace_need_an_unscoped_token(
    auth_redis: str, secured: str, tokens: dict[str, str]
) -> None:
    """/metrics shows every namespace's agents and packet counts: a token scoped to one
    namespace is refused; an agent token without scopes scrapes it."""
    scoped = baton(
        auth_redis, "token", "add", "--agent", "scraper", "--scope", "team-b"
    ).stdout.strip()
    assert client(secured, scoped).get("/metrics").status_code == 403
    scrape = client(secured, tokens["scout"]).get("/metrics")
    assert scrape.status_code == 200 and "baton_requests_total" in scrape.text


def test_scoped_tokens_stay_in_their_namespaces(auth_redis: str, secured: str) -> None:
    """A token scoped to a namespace works there without any header; naming another
    namespace is 403, and naming one twice (or header and query apart) is 400 for anybody."""
    scoped = baton(
        auth_redis, "token", "add", "--agent", "teamster", "--scope", "team-a"
    ).stdout.strip()
    teamster = client(secured, scoped)
    assert teamster.get("/v1/whoami").json()["namespace"] == "team-a"
    assert teamster.post("/v1/records", json={"ref": "ns/fact", "value": 1}).status_code == 201
    raw = redis.Redis.from_url(auth_redis)
    assert raw.exists("baton:team-a:rec:{ns/fact}:head") and not raw.exists(
        "baton:default:rec:{ns/fact}:head"
    )
    assert (
        client(secured, scoped, **{"X-Baton-Namespace": "default"}).get("/v1/stats").status_code
        == 403
    )
    twice = httpx.get(
        f"{secured}/v1/stats",
        headers=[
            ("Authorization", f"Bearer {scoped}"),
            ("X-Baton-Namespace", "team-a"),
            ("X-Baton-Namespace", "team-a"),
        ],
    )
    assert (twice.status_code, twice.json()["field"]) == (400, "x-baton-namespace")
    apart = client(secured, scoped, **{"X-Baton-Namespace": "team-a"}).get(
        "/v1/stats", params={"namespace": "team-b"}
    )
    assert apart.status_code == 400


def test_sessions_belong_to_the_agent_that_started_them(
    secured: str, tokens: dict[str, str]
) -> None:
    """Another agent cannot write into a session, pin through it, end it or forget it; the
    owner and admins can. An unknown session id is the caller's own new session."""
    scout = client(secured, tokens["scout"], **{"X-Baton-Session": "s-scout"})
    assert scout.post("/v1/records", json={"ref": "own/fact", "value": 1}).status_code == 201
    intruder = client(secured, tokens["executor"], **{"X-Baton-Session": "s-scout"})
    assert intruder.post("/v1/records", json={"ref": "own/other", "value": 1}).status_code == 403
    assert intruder.post("/v1/handoffs", json={"to": "scout", "summary": "pin"}).status_code == 403
    executor = client(secured, tokens["executor"])
    assert executor.post("/v1/sessions/s-scout/end", json={}).status_code == 403
    assert executor.post("/v1/forget", json={"session_id": "s-scout"}).status_code == 403
    assert executor.post("/v1/sessions", json={"id": "s-scout"}).status_code == 403
    assert client(secured, tokens["scout"]).get("/v1/sessions/s-scout").json()["touched"] == {
        "own/fact": 1
    }
    assert (
        client(secured, tokens["executor"], **{"X-Baton-Session": "s-new"})
        .get("/v1/whoami")
        .json()["session"]
        == "s-new"
    )
    admin = client(secured, tokens["admin"])
    assert admin.post("/v1/sessions/s-scout/end", json={}).json()["ended"] is True


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
    too_long = baton(auth_redis, "token", "add", "--agent", "x", "--expires", "99999999d")
    assert too_long.returncode == 2 and "ten years" in too_long.stderr


@pytest.mark.anyio
async def test_a_token_revoked_while_in_use_leaves_nothing_behind(own_db: str) -> None:
    """A request checks a token, the token is revoked, then the request notes the token's
    use: the note finds the token gone and writes nothing (no hash holding only
    last_used_at is left behind)."""
    store = redis.asyncio.Redis.from_url(own_db)
    try:
        tokens = TokenStore(store)
        issued = await tokens.add("temp")
        assert await tokens.note_use(digest(issued.secret))
        await tokens.revoke(issued.token.id)
        assert not await tokens.note_use(digest(issued.secret))
        assert await store.keys("*") == []
    finally:
        await store.aclose()


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
        [sys.executable, "-m", "baton.server.cli", "serve"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "BATON_REDIS_URL": auth_redis, "BATON_RATE_LIMIT": "lots"},
    )
    assert result.returncode != 0
    assert "BATON_RATE_LIMIT must be like 600/second" in result.stderr


@pytest.fixture
def own_db(redis_url: str) -> Iterator[str]:
    """An empty Redis database of its own (db 4), for servers whose tokens come and go."""
    url = f"{redis_url}?db=4"
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


def test_revoking_the_last_token_leaves_the_server_closed(own_db: str, tmp_path: Path) -> None:
    """Fail closed: a server started with tokens keeps refusing unauthenticated requests
    after the last token is revoked (open mode is chosen only at start-up)."""
    made = baton(own_db, "token", "add", "--agent", "only")
    secret, token_id = made.stdout.strip(), made.stderr.split()[1]
    with running_server(own_db, tmp_path / "serve.log", BATON_RATE_LIMIT="off") as url:
        assert client(url, secret).get("/v1/stats").status_code == 200
        assert baton(own_db, "token", "revoke", token_id).returncode == 0
        time.sleep(2.5)  # longer than the gate's token re-check
        assert httpx.get(f"{url}/v1/stats").status_code == 401
        assert httpx.post(f"{url}/v1/records", json={"ref": "a/b", "value": 1}).status_code == 401
    assert not redis.Redis.from_url(own_db).exists("baton:default:rec:{a/b}:head")


def test_failed_logins_are_limited_per_client_address(own_db: str, tmp_path: Path) -> None:
    """Wrong tokens count against BATON_AUTH_FAILURES per address: past it a wrong token is
    429 with Retry-After, on the API and the dashboard login alike, but a valid token still
    passes, so a guesser on the same address (loopback, a proxy) locks nobody out. A client
    cannot claim another address with X-Forwarded-For (no proxy is trusted by default)."""
    secret = baton(own_db, "token", "add", "--agent", "only").stdout.strip()
    log = tmp_path / "serve.log"
    with running_server(own_db, log, BATON_AUTH_FAILURES="3/minute") as url:
        assert httpx.get(f"{url}/v1/stats").status_code == 401  # no token: not a failed login
        codes = [
            client(url, f"bt_guess{i}")
            .get("/v1/stats", headers={"X-Forwarded-For": f"10.1.{i}.1"})
            .status_code
            for i in range(3)
        ]
        assert codes == [401, 401, 401]
        locked = client(url, "bt_guess9").get("/v1/stats")
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) > 0
        assert httpx.post(f"{url}/login", data={"token": "bt_guess9"}).status_code == 429
        assert client(url, secret).get("/v1/stats").status_code == 200
        login = httpx.post(f"{url}/login", data={"token": secret}, follow_redirects=False)
        assert login.status_code == 303


@pytest.mark.parametrize("mode", ["open", "secured"])
def test_guessing_the_agentmemory_secret_is_limited_too(
    own_db: str, tmp_path: Path, mode: str
) -> None:
    """Wrong AGENTMEMORY_SECRET guesses count as failed logins, open mode or secured: past
    the limit even the right secret waits, so guessing cannot go on at full speed."""
    if mode == "secured":
        baton(own_db, "token", "add", "--agent", "someone")
    log = tmp_path / "serve.log"
    options = {"AGENTMEMORY_SECRET": "s3cret", "BATON_AUTH_FAILURES": "3/minute"}
    with running_server(own_db, log, **options) as url:
        guesses = [client(url, f"guess{i}").get("/agentmemory/sessions") for i in range(3)]
        assert [guess.status_code for guess in guesses] == [401, 401, 401]
        assert client(url, "s3cret").get("/agentmemory/sessions").status_code == 429


def test_agentmemory_secret_acts_as_one_configured_agent(own_db: str, tmp_path: Path) -> None:
    """AGENTMEMORY_SECRET authenticates the agentmemory routes as AGENTMEMORY_AGENT, not as
    anyone: a body agentId naming another agent is 403, and the secret opens no /v1 route."""
    baton(own_db, "token", "add", "--agent", "someone")
    log = tmp_path / "serve.log"
    with running_server(own_db, log, AGENTMEMORY_SECRET="s3cret", AGENTMEMORY_AGENT="hooks") as url:
        hooks = client(url, "s3cret")
        saved = hooks.post("/agentmemory/remember", json={"content": "the build needs make"})
        assert saved.status_code == 201 and saved.json()["memory"]["agentId"] == "hooks"
        other = hooks.post("/agentmemory/remember", json={"content": "x", "agentId": "bob"})
        assert other.status_code == 403 and "may not act as bob" in other.json()["error"]
        assert hooks.get("/v1/stats").status_code == 401


def test_hook_and_push_worker_carry_their_token(
    auth_redis: str, secured: str, tokens: dict[str, str]
) -> None:
    """With tokens on, `baton hook` and a push worker (`baton agent run`) send BATON_TOKEN and
    act as its agent; a rejected token costs the hook one line on stderr, never exit 2."""
    env = {"BATON_URL": secured, "BATON_REDIS_URL": auth_redis}
    payload = json.dumps(
        {
            "session_id": "s-hook",
            "cwd": "/work/app",
            "tool_name": "Read",
            "tool_input": {"file_path": "/work/app/main.py"},
        }
    )

    def hook(token: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "hook", *args],
            input=payload,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **env, "BATON_TOKEN": token},
        )

    recorded = hook(tokens["scout"], "PostToolUse")
    assert (recorded.returncode, recorded.stderr) == (0, "")
    session = client(secured, tokens["scout"]).get("/v1/sessions/s-hook").json()
    assert (session["agent"], session["observation_count"]) == ("scout", 1)
    refused = hook("bt_wrong", "PostToolUse")
    assert refused.returncode == 0
    assert len(refused.stderr.splitlines()) == 1 and "BATON_TOKEN" in refused.stderr
    assert hook(tokens["scout"], "--check").returncode == 0
    assert "scout" in hook(tokens["scout"], "--check").stdout
    assert hook("bt_wrong", "--check").returncode == 1

    tester = baton(auth_redis, "token", "add", "--agent", "tester").stdout.strip()
    packet = (
        client(secured, tokens["admin"])
        .post("/v1/handoffs", json={"to": "tester", "summary": "push"})
        .json()
    )
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "baton.server.cli",
            "agent",
            "run",
            "tester",
            "-m",
            "tests.handlers",
            "--burst",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env, "BATON_TOKEN": tester, "BATON_RETRY_INTERVALS": "0"},
    )
    assert worker.returncode == 0, worker.stderr
    handled = client(secured, tester).get(f"/v1/records/handled/{packet['id']}").json()
    assert (handled["value"], handled["author"]) == ("push", "tester")
    assert client(secured, tester).get(f"/v1/handoffs/{packet['id']}").json()["state"] == "done"


def test_token_bootstrap_makes_one_admin_token_once_and_never_revives_a_revoked_one(
    own_db: str, tmp_path: Path
) -> None:
    """`baton token bootstrap --file F` writes a new admin token to F (0600) once; run again
    it keeps it; BATON_TOKEN, when set, is the token it registers; a revoked token in F is
    refused, not registered again; a fresh store takes F's token back."""
    path = tmp_path / "run" / "admin-token"
    first = baton(own_db, "token", "bootstrap", "--file", str(path))
    assert first.returncode == 0, first.stderr
    secret = path.read_text().strip()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again = baton(own_db, "token", "bootstrap", "--file", str(path))
    assert again.returncode == 0 and "is live" in again.stderr
    assert path.read_text().strip() == secret
    listed = baton(own_db, "token", "list").stdout.splitlines()
    assert len(listed) == 1 and " admin " in listed[0]

    given = tmp_path / "given"
    chosen = "bt_" + "x" * 40
    result = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "token", "bootstrap", "--file", str(given)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "BATON_REDIS_URL": own_db, "BATON_TOKEN": chosen},
    )
    assert result.returncode == 0, result.stderr
    assert given.read_text().strip() == chosen

    token_id = listed[0].split()[0]
    assert baton(own_db, "token", "revoke", token_id).returncode == 0
    refused = baton(own_db, "token", "bootstrap", "--file", str(path))
    assert refused.returncode == 1 and "not live here" in refused.stderr
    redis.Redis.from_url(own_db).flushdb()
    revived = baton(own_db, "token", "bootstrap", "--file", str(path))
    assert revived.returncode == 0, revived.stderr
    assert len(baton(own_db, "token", "list").stdout.splitlines()) == 1


def test_a_bootstrap_that_cannot_write_its_file_makes_no_token(own_db: str, tmp_path: Path) -> None:
    """`baton token bootstrap` into a folder it cannot write (here: a file stands where
    the folder should be) says so in one line, exit 1, and registers no token: retried,
    it still makes none; once the path is right it makes exactly one."""
    (tmp_path / "run").write_text("not a folder")
    path = tmp_path / "run" / "admin-token"
    for _ in range(2):
        failed = baton(own_db, "token", "bootstrap", "--file", str(path))
        assert failed.returncode == 1 and len(failed.stderr.splitlines()) == 1, failed.stderr
        assert "cannot write" in failed.stderr and "no token was made" in failed.stderr
        assert baton(own_db, "token", "list").stdout.strip() == ""
    (tmp_path / "run").unlink()
    assert baton(own_db, "token", "bootstrap", "--file", str(path)).returncode == 0
    assert len(baton(own_db, "token", "list").stdout.splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["admin-token"]


def test_clients_read_their_token_from_baton_token_file(
    own_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With BATON_TOKEN unset, the Python client and `baton hook --check` send the token in
    the file BATON_TOKEN_FILE names; a missing file is one line naming it."""
    from baton.agents import BatonClient

    path = tmp_path / "token"
    assert baton(own_db, "token", "bootstrap", "--file", str(path)).returncode == 0
    monkeypatch.delenv("BATON_TOKEN", raising=False)
    monkeypatch.setenv("BATON_TOKEN_FILE", str(path))
    with running_server(own_db, tmp_path / "serve.log") as url:
        with BatonClient(url, agent="scout") as scout:
            assert scout.remember("notes/a", 1).version == 1

        def hook_check(**env: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "baton.server.cli", "hook", "--check"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "BATON_URL": url, **env},
            )

        hook = hook_check()
        assert hook.returncode == 0, hook.stdout + hook.stderr
        missing = hook_check(BATON_TOKEN_FILE=str(tmp_path / "none"))
        assert missing.returncode == 1
        assert missing.stderr.strip().startswith("baton hook: BATON_TOKEN_FILE")
