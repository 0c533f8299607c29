"""Crashes and outages with real processes: nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from baton.server.runtime.connection import async_redis
from baton.server.runtime.embedded import EmbeddedServer, valkey_binary
from baton.server.runtime.settings import Limits
from baton.server.stores.backend import Backend
from tests.conftest import REPO, free_port, issue, wait_for_http
from tests.test_identity_matrix import MCP_INITIALIZE


def start_api(log: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "baton.server.cli", "serve", "--port", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(url, process, log)
    return process, url


@pytest.mark.slow
def test_api_killed_during_a_burst_loses_no_acknowledged_write(
    redis_url: str, tmp_path: Path
) -> None:
    """8 threads write one ref through the API; the server is SIGKILLed mid-burst. Every
    acknowledged write is present, versions run 1..N without gaps or duplicates, and the
    chain verifies."""
    process, url = start_api(tmp_path / "api.log", BATON_REDIS_URL=redis_url)
    acknowledged: list[tuple[int, int]] = []
    lock = threading.Lock()

    def writer(number: int) -> None:
        with httpx.Client(base_url=url, timeout=5) as http:
            for i in range(10_000):
                try:
                    response = http.post(
                        "/v1/records", json={"ref": "burst/ref", "value": [number, i]}
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 201:
                    with lock:
                        acknowledged.append((number, i))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    for thread in threads:
        thread.join(30)

    async def check() -> None:
        client = async_redis(redis_url)
        store = Backend(client, Limits()).namespace("default").records
        history = await store.history("burst/ref")
        stats = await store.ns.verifier.stats(verify=True)
        await client.aclose()
        versions = [entry.version for entry in history.versions]
        assert versions == list(range(1, len(versions) + 1))
        stored = [tuple(entry.value) for entry in history.versions]
        assert len(set(stored)) == len(stored)
        assert set(acknowledged) <= set(stored)
        assert stats.broken == []

    assert len(acknowledged) > 50
    asyncio.run(check())


@pytest.mark.slow
def test_redis_killed_under_a_running_api_is_restarted_by_it(tmp_path: Path) -> None:
    """SIGKILL the embedded Redis under a running API: a request in the gap fails fast with
    503; the API restarts the server by itself and /readyz comes back without anyone's help;
    every acknowledged write and packet is there, and the in-flight lease still works."""
    data = tmp_path / "data"
    server = EmbeddedServer(data)
    server.ensure_running()
    process, url = start_api(tmp_path / "api.log", BATON_DATA_DIR=str(data))
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            for n in range(100):
                assert (
                    http.post("/v1/records", json={"ref": f"k/{n}", "value": n}).status_code == 201
                )
            packet = http.post("/v1/handoffs", json={"to": "executor", "summary": "s"}).json()
            claimed = http.post(
                "/v1/agents/executor/resume",
                headers={"X-Baton-Agent": "executor"},
                json={"lease_seconds": 600},
            ).json()
            assert claimed["packet"]["id"] == packet["id"]

            pid = server.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            psutil.Process(pid).wait(10) if psutil.pid_exists(pid) else None
            started = time.monotonic()
            gap = http.get("/v1/records/k/1")
            assert time.monotonic() - started < 5
            if gap.status_code != 200:  # unless the API was quicker to restart it
                assert gap.status_code == 503
                assert gap.headers["content-type"].startswith("application/problem+json")
            assert http.get("/healthz").status_code == 200

            deadline = time.monotonic() + 15
            while http.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert http.get("/readyz").status_code == 200
            assert server.pid() not in (None, pid)  # restarted, by the API alone
            assert [http.get(f"/v1/records/k/{n}").json()["value"] for n in range(100)] == list(
                range(100)
            )
            held = http.get(f"/v1/handoffs/{packet['id']}").json()
            assert (held["state"], held["claimed_by"]) == ("claimed", "executor")
            done = http.post(
                f"/v1/handoffs/{packet['id']}/complete", headers={"X-Baton-Agent": "executor"}
            )
            assert done.json()["state"] == "done"
    finally:
        process.terminate()
        process.wait(10)
        server.stop()


@pytest.mark.slow
def test_a_push_worker_rides_out_a_redis_restart(tmp_path: Path) -> None:
    """Valkey is killed (SIGKILL) and restarted by the API while a push worker is in the
    middle of its packets: the worker waits for it and goes on (it never exits), and every
    packet ends handled; one cut short in the restart is redelivered after its lease."""
    data = tmp_path / "data"
    server = EmbeddedServer(data)
    url = server.ensure_running()
    settings = {
        "BATON_DATA_DIR": str(data),
        "BATON_LEASE_SECONDS": "3",
        "BATON_SWEEP_SECONDS": "1",
        "BATON_CHECKPOINT_INTERVAL": "off",
    }
    process, api = start_api(tmp_path / "api.log", **settings)
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen(
        [sys.executable, "-m", "baton.server.cli", *"agent run tester -m tests.handlers".split()],
        env={**os.environ, **settings, "BATON_REDIS_URL": url, "BATON_URL": api},
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    packets = 60
    try:
        with httpx.Client(base_url=api, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            ids = [
                http.post(
                    "/v1/handoffs",
                    json={"to": "tester", "summary": f"task {n}", "note": "sleep-0.1"},
                ).json()["id"]
                for n in range(packets)
            ]

            def done() -> int:
                listed = http.get("/v1/handoffs", params={"status": "done", "limit": 500}).json()
                return len(listed["packets"])

            deadline = time.monotonic() + 60
            while done() < packets // 4 and time.monotonic() < deadline:
                time.sleep(0.1)
            pid = server.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # mid-job: the worker is never idle here
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    if done() == packets:
                        break
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                time.sleep(0.5)
            assert server.pid() not in (None, pid)  # restarted (by the API)
            states = [http.get(f"/v1/handoffs/{id_}").json()["state"] for id_ in ids]
            assert states == ["done"] * packets, (tmp_path / "worker.log").read_text()[-3000:]
            assert worker.poll() is None  # still working, waiting for the next packet
    finally:
        worker.terminate()
        worker.wait(15)
        log.close()
        process.terminate()
        process.wait(10)
        server.stop()


@pytest.mark.slow
def test_a_worker_facing_a_redis_that_refuses_writes_pauses_and_stops_on_a_signal(
    tmp_path: Path,
) -> None:
    """While Redis refuses writes (here: it wants a replica it does not have, as it refuses
    them on a full disk), a worker's loop keeps ending: it starts again only after a pause
    that grows, never in a spin; once writes are taken it works again. SIGTERM while a
    worker pauses stops it at once, cleanly."""
    server = EmbeddedServer(tmp_path / "data")
    url = server.ensure_running()
    admin = redis.Redis.from_url(url)
    admin.config_set("min-replicas-to-write", 1)  # every write refused: NOREPLICAS
    env = {**os.environ, "BATON_REDIS_URL": url, "BATON_SWEEP_SECONDS": "1"}
    logs = [tmp_path / "patient.log", tmp_path / "stopped.log"]
    workers = []
    for log in logs:
        with open(log, "wb") as out:
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "baton.server.cli", "worker"],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            )
    patient, stopped = workers
    try:
        time.sleep(6)
        for log in logs:  # pauses of 0.5 + 1 + 2 s and more
            assert 1 <= log.read_text().count("worker loop ended") <= 5, log.read_text()[-2000:]
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(10) == 0
        assert "Traceback" not in logs[1].read_text()
        admin.config_set("min-replicas-to-write", 0)
        deadline = time.monotonic() + 30
        while not admin.keys("rq:worker:*") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert admin.keys("rq:worker:*"), logs[0].read_text()[-2000:]  # working again
        assert patient.poll() is None
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
                worker.wait(10)
        server.stop()


def test_serve_alone_keeps_the_ttl_lease_and_idle_promises(redis_url: str, tmp_path: Path) -> None:
    """With only `baton serve` running (no `baton worker`): an expired memory is never
    recalled and is then forgotten with an audit entry, a lease that ran out puts the packet
    back in its queue, and an idle session becomes abandoned."""
    url_db = f"{redis_url}?db=7"
    import redis as redis_client

    redis_client.Redis.from_url(url_db).flushdb()
    process, url = start_api(
        tmp_path / "api.log",
        BATON_REDIS_URL=url_db,
        BATON_SWEEP_SECONDS="1",
        BATON_SESSION_IDLE_HOURS="0.0003",
        BATON_DATA_DIR=str(tmp_path),
    )
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            saved = http.post(
                "/v1/memories",
                json={"content": "the canary token expires soon", "ttl_days": 0.00002},
            ).json()
            http.post("/v1/sessions", json={"id": "s-idle", "cwd": "/r"})
            packet = http.post("/v1/handoffs", json={"to": "executor", "summary": "s"}).json()
            http.post(
                "/v1/agents/executor/resume",
                headers={"X-Baton-Agent": "executor"},
                json={"lease_seconds": 1},
            )
            time.sleep(2)
            recalled = http.post("/v1/memories/recall", json={"query": "canary token"}).json()
            assert recalled["results"] == []  # expired: never returned, swept or not
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                audit = http.get("/v1/audit").json()
                state = http.get(f"/v1/handoffs/{packet['id']}").json()["state"]
                status = http.get("/v1/sessions/s-idle").json()["status"]
                if audit and state == "queued" and status == "abandoned":
                    break
                time.sleep(0.3)
            assert [entry["target"] for entry in audit] == [f"memory/{saved['memory']['id']}"]
            assert (state, status) == ("queued", "abandoned")
    finally:
        process.terminate()
        process.wait(10)
        redis_client.Redis.from_url(url_db).flushdb()


class DiskWriters:
    """``count`` threads writing ``disk/<n>`` through the API as fast as answers come
    (``pause`` seconds between writes), keeping what was acknowledged (201) and every status
    seen; a write whose answer never came is not acknowledged."""

    def __init__(self, url: str, count: int, pause: float = 0.0) -> None:
        self.url, self.count, self.pause = url, count, pause
        self.acknowledged: list[tuple[int, int]] = []
        self.statuses: set[int] = set()
        self.details: set[str] = set()  # of the 507 answers
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.write, args=(n,)) for n in range(count)]

    def write(self, number: int) -> None:
        headers = {"X-Baton-Agent": "scout"}
        with httpx.Client(base_url=self.url, timeout=10, headers=headers) as http:
            for i in range(100_000):
                if self.stop.is_set():
                    return
                try:
                    answer = http.post(
                        "/v1/records", json={"ref": f"disk/{number}", "value": [i, "x" * 1500]}
                    )
                except httpx.TransportError:
                    continue
                with self.lock:
                    self.statuses.add(answer.status_code)
                    if answer.status_code == 201:
                        self.acknowledged.append((number, i))
                    elif answer.status_code == 507:
                        self.details.add(answer.json()["detail"])
                time.sleep(self.pause)

    def fill_under_load(self, disk: Path) -> Path:
        """Start writing, then fill ``disk`` (a tmpfs) to the last byte with a file, and
        return the file once writes are answered 507."""
        for thread in self.threads:
            thread.start()
        time.sleep(0.5)
        filler = disk / "filler"
        with open(filler, "wb") as out, contextlib.suppress(OSError):
            out.write(b"\0" * 8 * 2**20)  # more than the disk has left
        deadline = time.monotonic() + 15
        while 507 not in self.statuses and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 507 in self.statuses
        return filler

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def lost(self, http: httpx.Client) -> list[tuple[int, int]]:
        """The acknowledged writes the store does not hold; each ref's versions run 1..N."""
        stored: set[tuple[int, int]] = set()
        for number in range(self.count):
            history = http.get(f"/v1/history/disk/{number}").json()
            versions = [entry["version"] for entry in history["versions"]]
            assert versions == list(range(1, len(versions) + 1))
            stored |= {(number, entry["value"][0]) for entry in history["versions"]}
        return sorted(set(self.acknowledged) - stored)


def test_a_full_disk_under_write_load_loses_no_acknowledged_write(small_disk: Path) -> None:
    """Four writers keep writing while the data disk fills up. Writes answer 201 or 507
    problem+json saying "disk full" (never 500), /readyz says so too, reads still work, the
    embedded server is never restarted under the full disk; once space is freed, writes
    and /readyz recover by themselves, every acknowledged write is there and the chains
    verify."""
    server = EmbeddedServer(small_disk)
    process, url = start_api(small_disk.parent / "api.log", BATON_DATA_DIR=str(small_disk))
    writers = DiskWriters(url, 4, pause=0.01)
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            assert http.post("/v1/records", json={"ref": "disk/a", "value": 1}).status_code == 201
            pid = server.pid()
            filler = writers.fill_under_load(small_disk)
            assert all(detail.startswith("disk full") for detail in writers.details)
            time.sleep(3)  # the supervisor looks every second: a full disk is not a crash
            ready = http.get("/readyz")
            assert ready.status_code == 507
            assert ready.json()["detail"].startswith("disk full")
            assert http.get("/v1/records/disk/a").json()["value"] == 1
            assert server.pids() == [pid]

            filler.unlink()
            deadline = time.monotonic() + 20
            while http.get("/readyz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.3)
            assert http.get("/readyz").status_code == 200
            time.sleep(0.5)
            writers.finish()
            assert writers.statuses <= {201, 507}, writers.statuses
            assert writers.lost(http) == []
            assert http.get("/v1/stats", params={"verify": "true"}).json()["broken"] == []
            assert server.pids() == [pid]
    finally:
        writers.finish()
        process.terminate()
        process.wait(10)


@pytest.mark.slow
def test_redis_killed_on_a_full_disk_loses_no_acknowledged_write(small_disk: Path) -> None:
    """Eight writers keep writing while the data disk fills up; the embedded server is
    SIGKILLed while the disk is still full, then space is freed and the API starts it again:
    every write that was acknowledged (201) is there and the chains verify. (Redis answers
    a write before writing its append-only file; on a full disk the writes answered in
    that turn were in its memory only, and the kill lost them.)"""
    server = EmbeddedServer(small_disk)
    process, url = start_api(small_disk.parent / "api.log", BATON_DATA_DIR=str(small_disk))
    writers = DiskWriters(url, 8)
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            filler = writers.fill_under_load(small_disk)
            pid = server.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)
            filler.unlink()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/readyz").status_code == 200:
                        break
                time.sleep(0.3)
            assert server.pids() and server.pids() != [pid]
            writers.finish()
            assert writers.statuses <= {201, 503, 507}, writers.statuses
            lost = writers.lost(http)
            assert lost == [], f"{len(lost)} of {len(writers.acknowledged)} acknowledged lost"
            assert http.get("/v1/stats", params={"verify": "true"}).json()["broken"] == []
    finally:
        writers.finish()
        process.terminate()
        process.wait(10)


def request_lines(log: Path) -> list[dict[str, object]]:
    """The access-log lines of an API's log (JSON lines)."""
    lines = []
    for text in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(text)
            if isinstance(entry, dict) and entry.get("event") == "request":
                lines.append(entry)
    return lines


def test_a_full_disk_leaves_reads_working_with_tokens(small_disk: Path) -> None:
    """With tokens on and the data disk full, authenticated reads still answer 200 (the
    token's last-use stamp is bookkeeping and is skipped): records, whoami, the dashboard's
    data and MCP's initialize (answered without a session, which cannot be stored, and the
    client reads on without one). Writes answer 507, and the access log records 507."""
    server = EmbeddedServer(small_disk)
    token = issue(server.ensure_running(), "scout")
    log = small_disk.parent / "api.log"
    process, url = start_api(log, BATON_DATA_DIR=str(small_disk))
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=url, timeout=10, headers=headers) as http:
            assert http.post("/v1/records", json={"ref": "disk/a", "value": 1}).status_code == 201
            with open(small_disk / "filler", "wb") as out, contextlib.suppress(OSError):
                out.write(b"\0" * 8 * 2**20)
            deadline = time.monotonic() + 15
            write = http.post("/v1/records", json={"ref": "disk/b", "value": "x" * 4000})
            while write.status_code == 201 and time.monotonic() < deadline:
                write = http.post("/v1/records", json={"ref": "disk/b", "value": "x" * 4000})
            assert write.status_code == 507
            read = http.get("/v1/records/disk/a")
            assert read.status_code == 200, read.text
            assert read.json()["value"] == 1
            assert http.get("/v1/whoami").json()["agent"] == "scout"
            assert http.get("/v1/dashboard/pending").status_code == 200
            initialized = http.post(
                "/mcp",
                json=MCP_INITIALIZE,
                headers={"Accept": "application/json, text/event-stream"},
            )
            assert initialized.status_code == 200
            assert "mcp-session-id" not in initialized.headers
            recall = {"name": "recall", "arguments": {"ref": "disk/a"}}
            called = http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": recall},
                headers={"Accept": "application/json, text/event-stream"},
            )
            assert called.json()["result"]["structuredContent"]["value"] == 1
    finally:
        process.terminate()
        process.wait(10)
    statuses = {entry["path"]: entry["status"] for entry in request_lines(log)}
    assert statuses["/v1/records"] == 507


def test_a_store_lost_under_the_gate_is_a_logged_503(tmp_path: Path) -> None:
    """With tokens on, a request whose token cannot be checked because Redis is gone is
    answered 503 problem+json, and the access log records 503 (not 500)."""
    port = free_port()
    store = subprocess.Popen(
        [valkey_binary(), "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    redis_url = f"redis://127.0.0.1:{port}"
    log = tmp_path / "api.log"
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            time.sleep(0.05)
        token = issue(redis_url, "scout")
        process, url = start_api(log, BATON_REDIS_URL=redis_url)
        try:
            store.kill()
            store.wait(10)
            answer = httpx.get(
                f"{url}/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=10
            )
            assert answer.status_code == 503
            assert answer.headers["content-type"].startswith("application/problem+json")
        finally:
            process.terminate()
            process.wait(10)
    finally:
        store.kill()
        store.wait(10)
    assert [entry["status"] for entry in request_lines(log)] == [503]


def test_readyz_is_not_ready_while_redis_has_no_room_for_a_write(tmp_path: Path) -> None:
    """A writer fills the embedded server to its BATON_MAXMEMORY with large values until
    writes are refused (503): /readyz then says 503 "memory full" too, though a small
    probe key would still fit, so a load balancer takes the replica out."""
    process, url = start_api(
        tmp_path / "api.log", BATON_DATA_DIR=str(tmp_path / "data"), BATON_MAXMEMORY="12mb"
    )
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"X-Baton-Agent": "scout"}) as http:
            assert http.get("/readyz").status_code == 200
            statuses = []
            for n in range(200):
                answer = http.post("/v1/records", json={"ref": f"big/{n}", "value": "x" * 400_000})
                statuses.append(answer.status_code)
                if answer.status_code == 503:
                    break
            assert statuses[0] == 201 and statuses[-1] == 503, statuses
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert "memory full" in ready.json()["detail"]
    finally:
        process.terminate()
        process.wait(10)
        EmbeddedServer(tmp_path / "data").stop()  # it outlives the API that started it
