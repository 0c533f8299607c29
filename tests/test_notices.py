"""Notices: an agent whose packet pins a record is told when the record moves on, from the
write's event (a consumer group every API process joins), over REST, SSE and webhooks.
Against the real embedded server and a cluster, real ``baton serve`` processes, a real
webhook receiver and a real RQ worker."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import redis

from baton.agents import BatonClient
from baton.queue import notifier
from baton.queue.notifier import Notifier
from baton.server.model.memory_models import SessionStartInput
from baton.server.runtime.settings import Settings
from baton.server.stores.backend import Backend, open_backend
from baton.server.stores.notices import SIGNATURE_HEADER, signature
from tests.conftest import as_agent, baton_process, handoff_input, running_server

pytestmark = pytest.mark.anyio

REF = "listing/553/assessment"


@pytest.fixture
async def own_backend(data_url: str, redis_url: str) -> AsyncIterator[Backend]:
    """A backend on a store no ``baton serve`` of the run makes notices on (db 5 of the
    embedded server, or the cluster), flushed first."""
    url = f"{redis_url}?db=5" if data_url == redis_url else data_url
    if url.endswith("?db=5"):
        redis.Redis.from_url(url).flushdb()
    settings = Settings(redis_url=url, queue_url=f"{redis_url}?db=5")
    async with open_backend(settings) as opened:
        yield opened


async def pinned_then_moved(backend: Backend, *, mover: str = "scout") -> str:
    """The scout writes v1 and hands the executor a packet pinning it; then ``mover``
    writes v2. The packet's id."""
    ns = backend.namespace("default")
    await ns.records.remember(REF, {"verdict": "apply"}, agent="scout")
    packet = await ns.handoffs.handoff(
        handoff_input(to="executor", summary="apply?", pins=[{"ref": REF}]), from_agent="scout"
    )
    await ns.records.remember(REF, {"verdict": "skip"}, agent=mover)
    return packet.id


async def test_a_moved_pin_makes_a_notice_for_the_receiver(own_backend: Backend) -> None:
    """After the notifier's rounds, the executor has one notice naming the packet, the ref,
    both versions and who moved it; the scout (who moved it) has none."""
    notifier = Notifier(own_backend)
    packet = await pinned_then_moved(own_backend)
    assert await notifier.round() >= 1
    await notifier.round()  # each event once: nothing more

    ns = own_backend.namespace("default")
    [notice] = (await ns.notices.since("executor")).notices
    assert (notice.packet, notice.ref, notice.pinned_version, notice.version) == (packet, REF, 1, 2)
    assert notice.author == "scout"
    assert (await ns.notices.since("scout")).notices == []
    assert "notice" in [event.kind for event in await ns.activity.recent()]


async def test_no_notice_for_a_receivers_own_write_or_a_settled_packet(
    own_backend: Backend,
) -> None:
    """The executor moving a record its own packet pins is not told about it; a packet that
    is done pins nothing any more."""
    notifier = Notifier(own_backend)
    packet = await pinned_then_moved(own_backend, mover="executor")
    ns = own_backend.namespace("default")
    await ns.handoffs.resume("executor")
    await ns.handoffs.complete(packet, "executor")
    await ns.records.remember(REF, {"verdict": "later"}, agent="scout")
    await notifier.round()
    assert (await ns.notices.since("executor")).notices == []


async def test_packets_pinning_a_sessions_reads_are_told_and_settled_ones_forgotten(
    own_backend: Backend,
) -> None:
    """A packet pinning what the sender's session read (no pins given) is told when one of
    them moves; once done it is no longer in the pins' index; a failed packet put back in
    its queue is told again."""
    ns = own_backend.namespace("default")
    notifier = Notifier(own_backend)
    await ns.records.remember(REF, 1, agent="scout")
    session = (await ns.sessions.start(SessionStartInput(), caller=as_agent("scout"))).id
    await ns.records.recall(REF, agent="scout", session=session)
    packet = await ns.handoffs.handoff(
        handoff_input(to="executor", summary="go"), from_agent="scout", session=session
    )
    assert [(pin.ref, pin.version) for pin in packet.pins] == [(REF, 1)]
    await ns.records.remember(REF, 2, agent="scout")
    await notifier.round()
    assert len((await ns.notices.since("executor")).notices) == 1

    await ns.handoffs.resume("executor")
    await ns.handoffs.fail(packet.id, "executor", "no luck")
    assert await own_backend.redis.zcard(ns.keys.pinned) == 0
    await ns.records.remember(REF, 3, agent="scout")
    await notifier.round()
    assert len((await ns.notices.since("executor")).notices) == 1  # a failed packet is not told
    await ns.handoffs.requeue(packet.id, "operator")
    await ns.records.remember(REF, 4, agent="scout")
    await notifier.round()
    assert [n.version for n in (await ns.notices.since("executor")).notices] == [2, 4]


async def test_events_a_dead_process_took_are_taken_over(
    own_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that read the write's event and died before making its notice leaves the
    event pending in the group: another process takes it over and makes the notice."""
    monkeypatch.setattr(notifier, "RECLAIM_MS", 50)
    await Notifier(own_backend).round()  # the group exists (no namespace yet: it is made)
    await pinned_then_moved(own_backend)
    ns = own_backend.namespace("default")
    await Notifier(own_backend)._create_group(ns.keys.events)
    taken = await own_backend.redis.xreadgroup(
        notifier.GROUP, "died", {ns.keys.events: ">"}, count=100
    )
    assert taken  # the dead process holds them now, unacknowledged
    time.sleep(0.1)
    await Notifier(own_backend).round()
    assert len((await ns.notices.since("executor")).notices) == 1


@pytest.fixture(scope="module")
def notifying(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``baton serve --workers 2`` making notices on db 8 (webhooks retried after 1 s);
    its URL."""
    url = f"{redis_url}?db=8"
    redis.Redis.from_url(url).flushdb()
    log = tmp_path_factory.mktemp("notices") / "serve.log"
    with running_server(
        url, log, "--workers", "2", BATON_NOTICES="on", BATON_RETRY_INTERVALS="1"
    ) as base:
        yield base


def wait_for(condition, seconds: float = 5.0):  # type: ignore[no-untyped-def]
    """``condition()`` once it is true, polling; fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError("not within the time allowed")


def test_notices_over_rest_and_only_to_their_agent(notifying: str) -> None:
    """The executor reads its notice with the Python client and over REST (after the last
    id it saw: none twice); another agent may not read them (403)."""
    with (
        BatonClient(notifying, agent="scout") as scout,
        BatonClient(notifying, agent="executor") as executor,
    ):
        scout.remember("rest/553", 1)
        scout.handoff("executor", "go", pins=[{"ref": "rest/553"}])
        scout.remember("rest/553", 2)
        page = wait_for(lambda: executor.notices().notices)
        assert [(n.ref, n.pinned_version, n.version) for n in page] == [("rest/553", 1, 2)]
        again = executor.notices(after=page[-1].id)
        assert again.notices == []
    refused = httpx.get(f"{notifying}/v1/agents/executor/notices", headers={"X-Baton-Agent": "x"})
    assert refused.status_code == 403


def test_a_notice_arrives_on_the_agents_event_stream(notifying: str) -> None:
    """An SSE stream opened by the executor gets the notice, with its id, as it is made;
    reconnecting with that Last-Event-ID replays nothing."""
    with BatonClient(notifying, agent="scout") as scout:
        scout.remember("sse/553", 1)
        scout.handoff("executor", "go", pins=[{"ref": "sse/553"}])
    headers = {"X-Baton-Agent": "executor"}
    received: list[dict[str, str]] = []
    url = f"{notifying}/v1/agents/executor/notices/stream"
    with httpx.stream("GET", url, headers=headers, timeout=10) as stream:
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        with BatonClient(notifying, agent="scout") as scout:
            scout.remember("sse/553", 2)
        event: dict[str, str] = {}
        for line in lines:
            if not line:  # the end of an event; a comment's has no id
                if "id" in event:
                    received.append(event)
                    break
                event = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                event[name] = value
    assert received[0].get("event") == "pin_moved", received
    assert json.loads(received[0]["data"])["ref"] == "sse/553"
    replay = {**headers, "Last-Event-ID": received[0]["id"]}
    with httpx.stream("GET", url, headers=replay, timeout=3) as stream:
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        with pytest.raises(httpx.ReadTimeout):
            next(line for line in lines if line.startswith("id"))


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver: refuses the first ``refuse`` deliveries with a 500, then keeps
    each body whose signature verifies."""

    secret = ""
    refuse = 0
    bodies: list[dict] = []  # noqa: RUF012
    refused = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        ok = self.headers[SIGNATURE_HEADER] == signature(type(self).secret, body)
        if type(self).refused < type(self).refuse:
            type(self).refused += 1
            self.send_response(500)
        elif ok:
            type(self).bodies.append(json.loads(body))
            self.send_response(204)
        else:
            self.send_response(401)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_webhook_gets_each_notice_signed_and_rq_retries_a_refusal(
    notifying: str, redis_url: str, tmp_path: Path
) -> None:
    """The executor's webhook refuses twice: RQ (a real ``baton worker``) tries again and
    the third delivery lands, its HMAC verified by the receiver; the delivery log shows the
    three attempts, to the agent and on the dashboard (never the secret)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Receiver.refuse, Receiver.refused, Receiver.bodies = 2, 0, []
    with BatonClient(notifying, agent="executor") as executor:
        hook = executor.set_webhook(f"http://127.0.0.1:{server.server_port}/baton")
    Receiver.secret = hook.secret
    worker = baton_process(
        "worker", redis_url=f"{redis_url}?db=8", BATON_HANDLER_TRIES="3", BATON_NOTICES="off"
    )
    try:
        with BatonClient(notifying, agent="scout") as scout:
            scout.remember("hook/553", 1)
            scout.handoff("executor", "go", pins=[{"ref": "hook/553"}])
            scout.remember("hook/553", 2)
        [body] = wait_for(lambda: Receiver.bodies, seconds=20)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(10)
        server.shutdown()
    assert (body["agent"], body["notice"]["ref"], body["notice"]["version"]) == (
        "executor",
        "hook/553",
        2,
    )
    with BatonClient(notifying, agent="executor") as executor:
        log = executor.webhook().deliveries
    assert [(d.attempt, d.status, d.delivered) for d in log] == [
        (3, 204, True),
        (2, 500, False),
        (1, 500, False),
    ]
    assert hook.secret.startswith("whsec_")
    shown = httpx.get(f"{notifying}/v1/dashboard/webhooks").json()["webhooks"]
    [mine] = [each for each in shown if each["agent"] == "executor"]
    assert mine["secret"] is None and len(mine["deliveries"]) == 3
    page = httpx.get(f"{notifying}/webhooks").text
    assert "answered 500" in page and ">delivered<" in page and hook.secret not in page


@pytest.mark.slow
def test_a_notice_survives_the_process_that_took_the_write(redis_url: str, tmp_path: Path) -> None:
    """The API process that acknowledged the write is killed (SIGKILL) at once; another
    process, started after, makes the notice: it comes from the write, not from memory."""
    url = f"{redis_url}?db=9"
    redis.Redis.from_url(url).flushdb()
    with running_server(url, tmp_path / "a.log", BATON_NOTICES="on") as first:
        with BatonClient(first, agent="scout") as scout:
            scout.remember("kill/553", 1)
            scout.handoff("executor", "go", pins=[{"ref": "kill/553"}])
        time.sleep(0.5)  # its notifier joined the group
        pid = subprocess.run(
            ["pgrep", "-f", f"serve --port {first.rsplit(':', 1)[1]}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        with BatonClient(first, agent="scout") as scout:
            assert scout.remember("kill/553", 2).version == 2
        for each in pid:
            subprocess.run(["kill", "-9", each])
    with running_server(url, tmp_path / "b.log", BATON_NOTICES="on") as second:
        with BatonClient(second, agent="executor") as executor:
            page = wait_for(lambda: executor.notices().notices, 15)
    assert [(n.ref, n.version) for n in page] == [("kill/553", 2)]


def test_mistakes_with_notices_and_webhooks_are_clear_errors(notifying: str) -> None:
    """A page past the server's largest, a notice id that is none (as a query or as
    Last-Event-ID), and webhook URLs that are no http(s) URL, carry credentials, spaces or a
    port out of range: each a 422 naming the field, nothing set."""
    headers = {"X-Baton-Agent": "careful"}
    with httpx.Client(base_url=notifying, headers=headers) as http:
        cases = [
            (http.get("/v1/agents/careful/notices", params={"limit": 501}), "limit"),
            (http.get("/v1/agents/careful/notices", params={"after": "soon"}), "after"),
        ]
        for url in (
            "ftp://example.com/x",
            "http://[::1/x",
            "http://user:secret@example.com/x",
            "http://a b.com/x",
            "http://example.com:99999/x",
            "http://example.com/x\r\nX-Evil: 1",
        ):
            cases.append((http.post("/v1/agents/careful/webhook", json={"url": url}), "url"))
        for answer, field in cases:
            assert (answer.status_code, answer.json()["field"]) == (422, field), answer.text
        assert http.get("/v1/agents/careful/webhook").json()["url"] is None
        stream = "/v1/agents/careful/notices/stream"
        resumed = http.get(stream, headers={"Last-Event-ID": "garbage"})
        assert (resumed.status_code, resumed.json()["field"]) == (422, "last-event-id")


def test_a_reconnecting_stream_gets_its_whole_backlog_at_once(notifying: str) -> None:
    """An SSE stream resumed from the start replays every notice since, more than one page
    of them, without waiting for a new one."""
    with BatonClient(notifying, agent="scout") as scout:
        for n in range(3):
            scout.remember(f"backlog/{n}", 0)
        for _ in range(45):  # 45 packets x 3 pins: 135 notices per round of writes
            scout.handoff("backlogged", "go", pins=[{"ref": f"backlog/{n}"} for n in range(3)])
        for n in range(3):
            scout.remember(f"backlog/{n}", 1)
    with BatonClient(notifying, agent="backlogged") as me:
        wait_for(lambda: len(me.notices(limit=500).notices) == 135, seconds=20)
    url = f"{notifying}/v1/agents/backlogged/notices/stream"
    headers = {"X-Baton-Agent": "backlogged", "Last-Event-ID": "0-0"}
    with httpx.stream("GET", url, headers=headers, timeout=3) as stream:
        ids = []
        for line in stream.iter_lines():
            if line.startswith("id: "):
                ids.append(line)
                if len(ids) == 135:
                    break
    assert len(set(ids)) == 135
