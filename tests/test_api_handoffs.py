"""Handoffs over REST, driven by the Python client (sync and async) against `baton serve`."""

from __future__ import annotations

import secrets

import httpx
import pytest

from baton.agents import AsyncBatonClient, BatonClient
from baton.agents.client import (
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
    UnreachableError,
)
from tests.test_api import assert_problem


def test_scout_to_executor_round_trip(scout: BatonClient, executor: BatonClient) -> None:
    """The reference story over REST: the scout's session pins what it wrote, a later
    correction is reported stale, and an outcome with handoff_id closes the packet."""
    scout.start_session()
    scout.remember("listing/482/assessment", {"verdict": "apply"}, confidence=0.8)
    scout.remember("listing/553/assessment", {"verdict": "apply"}, confidence=0.7)
    packet = scout.handoff(
        "executor",
        "Two listings worth an application",
        next=["Draft 482", "Draft 553"],
        open=["Backoff long enough?"],
    )
    assert [(pin.ref, pin.version) for pin in packet.pins] == [
        ("listing/482/assessment", 1),
        ("listing/553/assessment", 1),
    ]
    scout.remember("listing/553/assessment", {"verdict": "maybe"})

    resumed = executor.resume()
    assert resumed.packet is not None and resumed.packet.id == packet.id
    assert [(s.ref, s.pinned_version, s.current_version) for s in resumed.stale] == [
        ("listing/553/assessment", 1, 2)
    ]
    report = executor.record_outcome(
        "success", "RUN-42", refs=["listing/482/assessment"], handoff_id=packet.id
    )
    assert report.handoff is not None and report.handoff.state == "done"
    assert report.moves[0].after == pytest.approx(0.84)
    log = executor.get_handoff(packet.id).log
    assert log is not None
    assert [(t.from_state, t.to_state) for t in log] == [
        ("new", "queued"),
        ("queued", "claimed"),
        ("claimed", "done"),
    ]
    assert executor.resume().packet is None


def test_resume_for_another_agent_is_forbidden(http: httpx.Client) -> None:
    """An agent can only resume its own queue (403 problem)."""
    body = assert_problem(http.post("/v1/agents/executor/resume"), 403)
    assert "tester cannot resume executor" in body["detail"]


def test_settling_checks_claimant_and_state(
    scout: BatonClient, executor: BatonClient, http: httpx.Client
) -> None:
    """complete/release/fail: 404 unknown, 409 wrong state, 403 not the claimant."""
    packet = scout.handoff("executor", "work")
    with pytest.raises(ConflictError, match="is queued"):
        executor.complete(packet.id)
    executor.resume()
    with pytest.raises(ForbiddenError, match="claimed by executor"):
        scout.complete(packet.id)
    with pytest.raises(NotFoundError):
        executor.complete("h_deadbeef")
    assert_problem(
        http.post(f"/v1/handoffs/{packet.id}/fail", json={}, headers={"X-Baton-Agent": "executor"}),
        422,
        "error",
    )
    released = executor.release(packet.id, reason="later")
    assert released.state == "queued"
    executor.resume()
    failed = executor.fail(packet.id, "gave up")
    assert (failed.state, failed.error) == ("failed", "gave up")


def test_handoff_errors_are_problems(http: httpx.Client) -> None:
    """Invalid packets are 422 naming the field; unknown packets 404."""
    http.post("/v1/records", json={"ref": "a/b", "value": 1})
    assert_problem(http.post("/v1/handoffs", json={"to": "x"}), 422, "summary")
    assert_problem(http.post("/v1/handoffs", json={"to": "bad name", "summary": "s"}), 422, "to")
    assert_problem(
        http.post(
            "/v1/handoffs", json={"to": "x", "summary": "s", "pins": [{"ref": "a/b", "version": 9}]}
        ),
        422,
        "pins[0].version",
    )
    assert_problem(
        http.post("/v1/handoffs", json={"to": "x", "summary": "s", "expires_in": 0}),
        422,
        "expires_in",
    )
    assert_problem(http.get("/v1/handoffs/h_12345678"), 404)
    assert_problem(http.get("/v1/handoffs", params={"status": "lost"}), 422, "status")


def test_agents_and_listing(scout: BatonClient, executor: BatonClient) -> None:
    """GET /v1/agents counts each inbox; GET /v1/handoffs filters by receiver and state."""
    for _ in range(3):
        scout.handoff("executor", "work")
    scout.handoff("reviewer", "look")
    executor.resume()

    agents = {summary.agent: summary for summary in scout.agents()}
    assert (agents["executor"].queued, agents["executor"].claimed) == (2, 1)
    assert agents["executor"].oldest_queued_age_seconds is not None
    assert agents["reviewer"].queued == 1
    assert len(scout.list_handoffs(to="executor").packets) == 3
    assert len(scout.list_handoffs(status="claimed").packets) == 1
    assert len(scout.list_handoffs(from_agent="scout", limit=2).packets) == 2


@pytest.mark.anyio
async def test_async_client_speaks_the_same_api(api_url: str, redis_url: str) -> None:
    """The asyncio client writes, hands off and resumes like the blocking one."""
    async with AsyncBatonClient(api_url, agent="scout") as scout:
        await scout.remember("a/b", {"x": 1})
        packet = await scout.handoff("executor", "async work", pins=[{"ref": "a/b"}])
    async with AsyncBatonClient(api_url, agent="executor") as executor:
        resumed = await executor.resume()
        assert resumed.packet is not None and resumed.packet.id == packet.id
        assert resumed.pins[0].value == {"x": 1}
        with pytest.raises(NotFoundError):
            await executor.recall("no/such")
        assert (await executor.complete(packet.id)).state == "done"


def test_client_values_never_reach_another_route(scout: BatonClient) -> None:
    """Ids and refs are escaped into the URL path: one shaped like a path to another route
    is refused as the unknown id or bad ref it is."""
    with pytest.raises(NotFoundError):
        scout.get_handoff("../../v1/stats")
    with pytest.raises(InvalidInputError):
        scout.recall("../../v1/stats")


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_is_a_client_error() -> None:
    """A refused connection is the client's own UnreachableError, in both clients, not a
    raw httpx exception."""
    with BatonClient("http://127.0.0.1:1", agent="scout") as baton:
        with pytest.raises(UnreachableError) as caught:
            baton.stats()
    assert caught.value.status == 0 and "ConnectError" in caught.value.detail
    async with AsyncBatonClient("http://127.0.0.1:1", agent="scout") as baton_async:
        with pytest.raises(UnreachableError):
            await baton_async.stats()


def test_the_client_reaches_the_memory_operations(api_url: str) -> None:
    """The Python client saves, updates (a new version, same id), recalls, asks file history
    and patterns and previews a consolidation, each through the operation's own input."""
    word = f"zq{secrets.token_hex(4)}"
    with BatonClient(api_url, agent="scout") as baton:
        saved = baton.save_memory(f"{word} retries back off", files=["net/retry.py"])
        assert saved.memory is not None
        updated = baton.update_memory(saved.memory.id, content=f"{word} retries back off x2")
        assert updated.memory is not None and updated.memory.version == 2
        found = baton.recall_memories(word)
        assert [hit.id for hit in found.results] == [saved.memory.id]
        assert baton.file_history(["net/retry.py"]).context == ""  # no session touched it
        assert isinstance(baton.patterns(project=f"{word}-none").patterns, list)
        assert baton.consolidate(project=f"{word}-none").dry_run is True
        with pytest.raises(TypeError):
            baton.update_memory(saved.memory.id, contents="a typo in a parameter name")


def test_a_packet_held_for_the_senders_session_end_is_sent_when_it_ends(
    http: httpx.Client,
) -> None:
    """Over REST: a handoff with deliver=session_end is held while the sender corrects a
    pinned fact; ending the session makes it claimable, and the receiver is told the pin
    moved. Without a session the same request is a 422 naming deliver."""
    session = http.post("/v1/sessions", json={}, headers={"X-Baton-Agent": "scout"}).json()["id"]
    scout = {"X-Baton-Agent": "scout", "X-Baton-Session": session}
    http.post("/v1/records", json={"ref": "listing/553/assessment", "value": 1}, headers=scout)
    held = http.post(
        "/v1/handoffs",
        json={"to": "executor", "summary": "work", "deliver": "session_end"},
        headers=scout,
    )
    assert held.status_code == 201 and held.json()["state"] == "held"
    http.post("/v1/records", json={"ref": "listing/553/assessment", "value": 2}, headers=scout)
    executor = {"X-Baton-Agent": "executor"}
    assert (
        http.post("/v1/agents/executor/resume", json={}, headers=executor).json()["packet"] is None
    )

    ended = http.post(f"/v1/sessions/{session}/end", json={}, headers=scout)
    assert ended.status_code == 200, ended.text
    resumed = http.post("/v1/agents/executor/resume", json={}, headers=executor).json()
    assert resumed["packet"]["id"] == held.json()["id"]
    assert [(s["ref"], s["pinned_version"], s["current_version"]) for s in resumed["stale"]] == [
        ("listing/553/assessment", 1, 2)
    ]
    refused = http.post(
        "/v1/handoffs",
        json={"to": "executor", "summary": "work", "deliver": "session_end"},
        headers={"X-Baton-Agent": "scout"},
    )
    assert refused.status_code == 422 and refused.json()["field"] == "deliver"


def test_the_readme_client_example_shows_the_stale_pin(
    api_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's Python example, run as written against a server: the executor is told the
    pin it was handed moved from v1 to v2."""
    from tests.conftest import REPO

    readme = (REPO / "README.md").read_text()
    code = readme.split("From Python (a running `baton serve`", 1)[1]
    code = code.split("```python\n", 1)[1].split("```", 1)[0]
    exec(code.replace("http://127.0.0.1:8765", api_url), {})
    assert capsys.readouterr().out == "listing/553/assessment 1 2\n"
