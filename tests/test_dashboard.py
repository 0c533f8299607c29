"""The dashboard: its JSON views after a scripted scenario, its pages, and a real browser
watching the pending page update live."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
import redis

from baton.agents import BatonClient
from baton.server.api.event_streams import EventHub
from baton.server.model.clock import utc_now
from baton.server.model.keys import Keys
from baton.server.runtime.connection import async_redis
from baton.server.stores.activity import event_args

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def scenario(scout: BatonClient, executor: BatonClient, api_url: str) -> dict[str, str]:
    """Two packets for the executor (one goes stale, one gets claimed), one that fails."""
    scout.remember("listing/553/assessment", {"verdict": "apply"}, confidence=0.7)
    scout.remember("listing/482/assessment", {"verdict": "apply"}, confidence=0.8)
    claimed = scout.handoff("executor", "claimed one", pins=[{"ref": "listing/482/assessment"}])
    stale = scout.handoff(
        "executor",
        "stale one",
        pins=[{"ref": "listing/553/assessment"}, {"ref": "listing/482/assessment"}],
    )
    doomed = scout.handoff("reviewer", "will fail")
    scout.remember("listing/553/assessment", {"verdict": "maybe"})
    assert executor.resume().packet.id == claimed.id  # type: ignore[union-attr]
    with BatonClient(api_url, agent="reviewer") as reviewer:
        reviewer.resume()
        reviewer.fail(doomed.id, "no reviewer today")
    return {"claimed": claimed.id, "stale": stale.id, "doomed": doomed.id}


def test_pending_view_counts_and_stale_flags(
    scout: BatonClient, executor: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """/v1/dashboard/pending: totals, per-agent packets, stale pins computed live."""
    ids = scenario(scout, executor, api_url)
    view = http.get("/v1/dashboard/pending").json()
    assert (view["queued"], view["claimed"], view["failed"]) == (1, 1, 1)
    [queue] = [q for q in view["agents"] if q["summary"]["agent"] == "executor"]
    packets = {item["packet"]["id"]: item for item in queue["packets"]}
    assert set(packets) == {ids["claimed"], ids["stale"]}
    [stale] = packets[ids["stale"]]["stale"]
    changed_at = stale.pop("changed_at")
    assert stale == {
        "ref": "listing/553/assessment",
        "pinned_version": 1,
        "current_version": 2,
        "changed_by": "scout",
    }
    assert changed_at == scout.recall("listing/553/assessment").created_at
    assert packets[ids["claimed"]]["stale"] == []
    assert packets[ids["claimed"]]["lease_seconds_left"] > 800
    assert "reviewer" not in [q["summary"]["agent"] for q in view["agents"]]

    scout.remember("listing/482/assessment", {"verdict": "apply", "checked": True})
    again = http.get("/v1/dashboard/pending").json()
    [queue] = [q for q in again["agents"] if q["summary"]["agent"] == "executor"]
    assert all(len(item["stale"]) >= 1 for item in queue["packets"])


def test_packet_record_failed_and_activity_views(
    scout: BatonClient, executor: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """The other JSON views: pins pinned vs current, record chain and confidence series,
    dead letters with their reason, and the activity feed."""
    ids = scenario(scout, executor, api_url)
    packet = http.get(f"/v1/dashboard/handoffs/{ids['stale']}").json()
    assert [
        (p["ref"], p["pinned_version"], p["current_version"], p["stale"]) for p in packet["pins"]
    ] == [("listing/553/assessment", 1, 2, True), ("listing/482/assessment", 1, 1, False)]
    assert [t["to"] for t in packet["packet"]["log"]] == ["queued"]

    executor.record_outcome("success", "RUN-1", refs=["listing/482/assessment"])
    record = http.get("/v1/dashboard/records/listing/482/assessment").json()
    assert [v["chain_ok"] for v in record["history"]["versions"]] == [True]
    assert [round(p["confidence"], 2) for p in record["confidence"]] == [0.8, 0.84]

    failed = http.get("/v1/dashboard/failed").json()
    assert [(d["packet"]["id"], d["reason"]) for d in failed["packets"]] == [
        (ids["doomed"], "no reviewer today")
    ]
    kinds = [event["kind"] for event in http.get("/v1/dashboard/activity").json()["events"]]
    assert kinds[0] == "outcome"
    assert {"remember", "handoff", "claim", "failed"} <= set(kinds)


def test_packet_and_record_pages_mark_a_contested_record(
    scout: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """A record two writers wrote from the same version: the packet pinning it and the
    record's page show a contested badge naming both versions, in the JSON and the HTML;
    an outcome settles it and the badge goes."""
    ref = "listing/553/assessment"
    scout.remember(ref, {"verdict": "apply"})
    packet = scout.handoff("executor", "apply?", pins=[{"ref": ref}])
    with BatonClient(api_url, agent="pricer") as pricer, BatonClient(api_url, agent="rev") as rev:
        pricer.remember(ref, {"verdict": "apply", "price": 410}, based_on=[1])
        rev.remember(ref, {"verdict": "skip"}, based_on=[1])
    contest = {"base": 1, "versions": [2, 3]}
    [pin] = http.get(f"/v1/dashboard/handoffs/{packet.id}").json()["pins"]
    assert pin["contested"] == contest
    assert http.get(f"/v1/dashboard/records/{ref}").json()["history"]["contested"] == contest
    badge = re.compile(r'title="v2 and v3 were written without seeing each other[^"]*">contested<')
    for page in (f"/handoffs/{packet.id}", f"/records/{ref}"):
        assert badge.search(http.get(page).text), page

    scout.record_outcome("success", "RUN-3", refs=[ref])
    assert ">contested<" not in http.get(f"/records/{ref}").text


def test_requeue_brings_a_failed_packet_back(
    scout: BatonClient, executor: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """The failed page's requeue puts the packet back in its queue; other states are 409."""
    ids = scenario(scout, executor, api_url)
    response = http.post(f"/handoffs/{ids['doomed']}/requeue", follow_redirects=False)
    assert response.status_code in (301, 302, 303, 307)
    assert response.headers["location"].startswith("/failed")
    packet = scout.get_handoff(ids["doomed"])
    assert (packet.state, packet.deliveries, packet.error) == ("queued", 0, None)
    assert http.post(f"/v1/handoffs/{ids['stale']}/requeue").status_code == 409


def test_pages_render_and_explain_the_empty_state(
    scout: BatonClient, executor: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """Every page answers HTML; an empty namespace says what to do; a packet's page explains
    each stale pin (the change, who made it)."""
    empty = http.get("/", params={"namespace": "nothing-here"})
    assert empty.status_code == 200
    assert "No pending handoffs" in empty.text and "make demo" in empty.text
    ids = scenario(scout, executor, api_url)
    pages = {
        "/": ["stale one", "1 stale"],
        f"/handoffs/{ids['stale']}": [
            "listing/553/assessment",
            "stale",
            "v1 → v2 (1 version since the pin",  # the stale pin explained, as resume does
            "<code>/verdict</code>",
            '"maybe"',
            "v2 by scout",
        ],
        "/records/listing/553/assessment": ["<svg", "v2 written"],
        "/failed": ["no reviewer today", "Requeue"],
        "/activity": ["handed", "claimed"],
    }
    for path, needles in pages.items():
        page = http.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        for needle in needles:
            assert needle in page.text, (path, needle)
    assert http.get("/static/dashboard.js").status_code == 200


@pytest.mark.slow
def test_browser_sees_the_pending_page_update_without_reloading(
    scout: BatonClient, executor: BatonClient, api_url: str, tmp_path: Path
) -> None:
    """Headless Chromium loads the pending page, sees the packet with its stale badge, then
    the packet is completed through the API and disappears without a reload."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM) or Path(CHROMIUM).exists(), "install Debian's chromium"
    ids = scenario(scout, executor, api_url)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on(
            "console",
            lambda message: errors.append(message.text) if message.type == "error" else None,
        )
        page.goto(f"{api_url}/")
        stale_row = page.locator(f"tr[data-packet='{ids['stale']}']")
        assert "1 stale" in stale_row.inner_text()
        claimed_row = page.locator(f"tr[data-packet='{ids['claimed']}']")
        assert claimed_row.count() == 1
        page.wait_for_selector("#live-status.on", timeout=10_000)
        page.evaluate("window.__notReloaded = true")

        executor.complete(ids["claimed"])
        deadline = time.monotonic() + 10
        while claimed_row.count() and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert claimed_row.count() == 0
        assert page.evaluate("window.__notReloaded") is True
        page.screenshot(path=str(tmp_path / "pending.png"), full_page=True)
        browser.close()
    assert (tmp_path / "pending.png").stat().st_size > 0
    assert errors == []


@pytest.mark.slow
def test_another_site_cannot_show_the_dashboard_in_a_frame(
    scout: BatonClient, api_url: str
) -> None:
    """A page of another origin that puts the dashboard in an iframe (to lay its own
    buttons over Baton's) gets nothing in the frame in Chromium: the pages forbid framing
    (CSP frame-ancestors, X-Frame-Options)."""
    from playwright.sync_api import sync_playwright

    scout.remember("listing/553/assessment", {"verdict": "apply"})
    assert httpx.get(f"{api_url}/").headers["content-security-policy"] == "frame-ancestors 'none'"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content(f'<iframe id="baton" src="{api_url}/records/listing/553/assessment">')
        page.wait_for_timeout(2000)
        framed = next(frame for frame in page.frames if frame != page.main_frame)
        assert "listing/553" not in framed.content()
        browser.close()


@pytest.mark.anyio
async def test_a_thousand_open_streams_do_not_starve_requests(
    redis_url: str, tmp_path: Path
) -> None:
    """1,000 live event streams (one per agent) hold no connection of the request pool:
    /v1/stats still answers in under a second, every stream gets the next event, and one
    caller may hold at most BATON_MAX_STREAMS streams (429 beyond); all of them closing at
    once, with requests in flight, answers every request and logs no error."""
    import asyncio
    import time

    import httpx

    from tests.conftest import running_server

    with running_server(redis_url, tmp_path / "serve.log", BATON_MAX_STREAMS="4") as url:
        limits = httpx.Limits(max_connections=1100, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            opened: list[tuple[object, object]] = []
            try:
                for number in range(1000):
                    context = client.stream(
                        "GET",
                        "/v1/dashboard/events",
                        headers={"X-Baton-Agent": f"watcher-{number}"},
                    )
                    response = await context.__aenter__()
                    assert response.status_code == 200
                    opened.append((context, response.aiter_lines()))
                started = time.perf_counter()
                stats = await client.get("/v1/stats")
                assert stats.status_code == 200 and time.perf_counter() - started < 1.0
                written = await client.post("/v1/records", json={"ref": "live/x", "value": 1})
                assert written.status_code == 201

                async def next_event(lines: object) -> str:
                    async for line in lines:  # type: ignore[attr-defined]
                        if line.startswith("event:"):
                            return str(line)
                    return ""

                seen = await asyncio.wait_for(
                    asyncio.gather(*(next_event(lines) for _, lines in opened)), 30
                )
                assert set(seen) == {"event: remember"}
                capped = [
                    client.stream(
                        "GET", "/v1/dashboard/events", headers={"X-Baton-Agent": "greedy"}
                    )
                    for _ in range(5)
                ]
                statuses = []
                for context in capped:
                    response = await context.__aenter__()
                    statuses.append(response.status_code)
                    opened.append((context, None))
                assert statuses == [200, 200, 200, 200, 429]
                # All of them closing at once, with requests in flight: every answer is a 200.
                closing = asyncio.gather(
                    *(context.__aexit__(None, None, None) for context, _ in opened),  # type: ignore[attr-defined]
                    return_exceptions=True,
                )
                answers = await asyncio.gather(*(client.get("/v1/stats") for _ in range(20)))
                opened = []
                await closing
                assert {answer.status_code for answer in answers} == {200}
            finally:
                for context, _ in opened:
                    await context.__aexit__(None, None, None)  # type: ignore[attr-defined]
    logged = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in logged and '"level": "error"' not in logged


@pytest.mark.anyio
async def test_a_stream_gets_an_event_written_the_moment_it_opened(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    """An event written right after a dashboard stream opened, before the namespace's reader
    first ran, reaches the stream: it starts where it opened (the browser was told "live"
    and then missed the completion it was waiting for)."""
    client = async_redis(redis_url)
    hub = EventHub(client, per_caller=4)
    try:
        async with hub.subscribe("default", "watcher") as queue:
            written = event_args("done", "executor", "completed at once")
            sync_redis.execute_command("XADD", Keys("default").events, *written)
            event = await asyncio.wait_for(queue.get(), 10)
        assert (event.kind, event.text) == ("done", "completed at once")
    finally:
        await hub.close()
        await client.aclose()


@pytest.mark.anyio
async def test_a_namespace_whose_streams_closed_holds_no_connection(redis_url: str) -> None:
    """Once the last stream of a namespace closes, its reader stops and gives back its
    blocked connection (each namespace that ever had a dashboard used to keep one in XREAD
    BLOCK for ever); a stream opened later gets a reader again and its events."""
    client = async_redis(redis_url)
    hub = EventHub(client, per_caller=4)
    try:
        readers = []
        for namespace in ("one", "two", "three"):
            async with hub.subscribe(namespace, "watcher"):
                readers.append(hub.readers[namespace].task)
        await asyncio.sleep(0)
        assert hub.readers == {}
        assert all(task.cancelled() or task.done() for task in readers)
        async with hub.subscribe("one", "watcher") as queue:
            await hub.redis.execute_command(
                "XADD", Keys("one").events, *event_args("done", "executor", "again")
            )
            assert (await asyncio.wait_for(queue.get(), 10)).text == "again"
    finally:
        await hub.close()
        await client.aclose()


def working_session(http: httpx.Client) -> str:
    """A coding agent's session: two hook observations, and a memory drawn from one."""
    session = "sess-dash"
    http.post("/v1/sessions", json={"id": session, "project": "shop", "cwd": "/srv/shop"})
    observed = []
    for command in ("pytest tests/test_refunds.py", "git diff payments/refund.py"):
        reply = http.post(
            "/v1/observations",
            json={
                "hook_type": "post_tool_use",
                "session_id": session,
                "project": "shop",
                "cwd": "/srv/shop",
                "timestamp": "t",
                "data": {"tool_name": "Bash", "tool_input": {"command": command}},
            },
        ).json()
        observed.append(reply["observation"]["id"])
    http.post(
        "/v1/memories",
        json={
            "content": "Refunds over 500 EUR need a second approver (payments/refund.py)",
            "project": "shop",
            "source_observation_ids": [observed[0]],
        },
    )
    return session


@pytest.mark.slow
def test_a_browser_sees_stale_pins_sessions_memories_and_switches_namespace(
    scout: BatonClient, executor: BatonClient, http: httpx.Client, api_url: str, tmp_path: Path
) -> None:
    """In headless Chromium: the pending card names the stale pin (ref, pinned and current
    version, who changed it, a human time with the exact one on hover); the sessions page
    lists the session and finds the memory by a word; the session page shows its
    observations and the memory drawn from them; the namespace picker switches. Each page
    is photographed (BATON_SCREENSHOTS=DIR keeps them, for docs/dashboard.md)."""
    from playwright.sync_api import sync_playwright

    ids = scenario(scout, executor, api_url)
    session = working_session(http)
    with BatonClient(api_url, agent="scout", namespace="staging") as other:
        other.handoff("executor", "work in another namespace")
    shots = Path(os.environ.get("BATON_SCREENSHOTS") or tmp_path)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{api_url}/")
        detail = page.locator(f"tr[data-stale-of='{ids['stale']}']")
        text = detail.inner_text()
        assert "listing/553/assessment" in text and "v1" in text and "v2" in text
        assert re.search(r"changed by scout (just now|\d+s ago)", text), text
        exact = detail.locator("time").get_attribute("title") or ""
        assert exact.endswith(" UTC") and exact[:4].isdigit()
        page.screenshot(path=str(shots / "dashboard-pending.png"), full_page=True)

        page.goto(f"{api_url}/sessions?q=approver")
        assert page.locator(f"a[href^='/sessions/{session}']").count() >= 1
        hits = page.locator("li.hit").all_inner_texts()
        assert any("second approver" in hit for hit in hits)
        page.screenshot(path=str(shots / "dashboard-sessions.png"), full_page=True)

        page.goto(f"{api_url}/sessions/{session}")
        body = page.locator("main").inner_text()
        assert "pytest tests/test_refunds.py" in body and "second approver" in body
        page.screenshot(path=str(shots / "dashboard-session.png"), full_page=True)

        page.goto(f"{api_url}/memories?q=refunds")
        assert any("second approver" in hit for hit in page.locator("li.hit").all_inner_texts())

        page.select_option("#namespace-picker", "staging")
        page.wait_for_url("**namespace=staging**")
        assert page.locator("#namespace-picker").input_value() == "staging"
        assert "No memories" in page.locator("main").inner_text()
        page.goto(f"{api_url}/?namespace=staging")
        assert "work in another namespace" in page.locator("main").inner_text()
        browser.close()
    assert (shots / "dashboard-session.png").stat().st_size > 0


@pytest.mark.slow
def test_the_time_control_shows_a_record_and_a_packet_as_they_were(
    scout: BatonClient, http: httpx.Client, api_url: str
) -> None:
    """In headless Chromium, on a record's page and a packet's: a time picked between
    two versions shows the version current then (its value, its row marked) and the pin
    current, not stale, as it stood then; the JSON views answer the same."""
    from playwright.sync_api import sync_playwright

    ref = "listing/553/assessment"
    scout.remember(ref, {"verdict": "apply"})
    packet = scout.handoff("executor", "apply?", pins=[{"ref": ref}])
    time.sleep(0.01)
    picked = utc_now()[:23]  # what a datetime-local input holds: milliseconds
    time.sleep(0.01)
    scout.remember(ref, {"verdict": "skip"})

    record = http.get(f"/v1/dashboard/records/{ref}", params={"as_of": picked}).json()
    assert (record["then"]["version"], record["then"]["value"]) == (1, {"verdict": "apply"})
    pins = http.get(f"/v1/dashboard/handoffs/{packet.id}", params={"as_of": picked}).json()
    assert [(p["current_version"], p["stale"]) for p in pins["pins"]] == [(1, False)]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{api_url}/records/{ref}")
        page.fill("form.as-of input[name=as_of]", picked)
        page.click("form.as-of button")
        page.wait_for_url("**as_of=**")
        then = page.locator("section.then").inner_text()
        assert "v1 by scout" in then and '"verdict": "apply"' in then, then
        assert page.locator("tr.then td").first.inner_text() == "v1"
        page.goto(f"{api_url}/handoffs/{packet.id}")
        assert "stale" in page.locator("table").first.inner_text()
        page.fill("form.as-of input[name=as_of]", picked)
        page.click("form.as-of button")
        page.wait_for_url("**as_of=**")
        row = page.locator("table").first.inner_text()
        assert "CURRENT THEN" in row.upper() and "current" in row and "stale" not in row, row
        browser.close()


def test_session_and_memory_views_as_json(http: httpx.Client) -> None:
    """/v1/dashboard/sessions, /sessions/{id} and /memories: what the pages render, a
    search by a word the memory holds, and a 404 problem for an unknown session."""
    session = working_session(http)
    listed = http.get("/v1/dashboard/sessions").json()
    assert [s["id"] for s in listed["sessions"]] == [session] and listed["hits"] == []
    found = http.get("/v1/dashboard/sessions", params={"q": "approver"}).json()
    assert [hit["kind"] for hit in found["hits"]] == ["memory"]
    one = http.get(f"/v1/dashboard/sessions/{session}").json()
    assert [o["title"] for o in one["observations"]] == ["Bash", "Bash"]
    assert [m["title"][:7] for m in one["memories"]] == ["Refunds"]
    memories = http.get("/v1/dashboard/memories", params={"q": "refunds"}).json()
    assert len(memories["memories"]) == 1 and len(memories["hits"]) == 1
    missing = http.get("/v1/dashboard/sessions/sess-none")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


@pytest.mark.slow
def test_the_api_page_works_offline_from_its_own_copy_of_the_viewer(api_url: str) -> None:
    """The dashboard's API link (/schema) draws Baton's operations in Chromium with every
    request answered by Baton itself: a browser that may reach nothing else (offline, or a
    network that blocks CDNs) sees the same page, and no viewer version can change under
    it."""
    from playwright.sync_api import Route, sync_playwright

    elsewhere: list[str] = []

    def only_baton(route: Route) -> None:
        if route.request.url.startswith(api_url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.route("**/*", only_baton)
        page.goto(f"{api_url}/")
        page.click("text=API")
        page.get_by_text("/v1/records/{ref}", exact=True).first.wait_for(timeout=15_000)
        assert page.url == f"{api_url}/schema"
        browser.close()
    assert elsewhere == []
