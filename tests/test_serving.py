"""How ``baton serve`` runs: several worker processes on one port, one consistent memory;
request metrics and access logs."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import REPO, running_server

WRITES = 60


@pytest.mark.slow
def test_two_workers_serve_one_consistent_memory(redis_url: str, tmp_path: Path) -> None:
    """``baton serve --workers 2`` runs two API processes on one port; concurrent writes to
    one ref through both land as versions 1..N with an unbroken chain, and every write is
    readable at once from whichever worker answers."""
    log = tmp_path / "serve.log"
    with running_server(redis_url, log, "--workers", "2") as url:
        parent = next(
            process
            for process in psutil.process_iter(["cmdline"])
            if url.rsplit(":", 1)[1] in " ".join(process.info["cmdline"] or [])
            and "--workers" in (process.info["cmdline"] or [])
        )
        workers = [
            child for child in parent.children() if "spawn_main" in " ".join(child.cmdline())
        ]
        assert len(workers) == 2

        def write(i: int) -> int:
            with httpx.Client(base_url=url, headers={"X-Baton-Agent": f"w{i % 4}"}) as http:
                answer = http.post("/v1/records", json={"ref": "shared/counter", "value": i})
                assert answer.status_code == 201, answer.text
                version = int(answer.json()["version"])
                read = http.get("/v1/records/shared/counter", params={"version": version})
                assert read.status_code == 200 and read.json()["value"] == i
                return version

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            versions = sorted(pool.map(write, range(WRITES)))
        assert versions == list(range(1, WRITES + 1))
        with httpx.Client(base_url=url, headers={"X-Baton-Agent": "checker"}) as http:
            history = http.get("/v1/history/shared/counter").json()
            stats = http.get("/v1/stats", params={"verify": "true"}).json()
        assert [entry["chain_ok"] for entry in history["versions"]] == [True] * WRITES
        assert stats["broken"] == []


def test_a_bad_workers_count_is_refused(redis_url: str, tmp_path: Path) -> None:
    """``--workers 0`` is a usage error, not a server that never starts."""

    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "serve", "--workers", "0"],
        capture_output=True,
        text=True,
        env={"BATON_REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and "--workers must be 1 or more" in done.stderr


def access_lines(log: Path) -> list[dict[str, object]]:
    lines = []
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("logger") == "baton.access" or entry.get("event") == "request":
            lines.append(entry)
    return lines


@pytest.mark.parametrize(
    ("policy", "logged"),
    [
        ("errors", ["/v1/records/no/such", "/v1/whoami"]),
        ("all", ["/v1/records", "/v1/records/no/such", "/v1/whoami"]),
    ],
)
def test_access_log_policy(redis_url: str, tmp_path: Path, policy: str, logged: list[str]) -> None:
    """By default only failed (and slow) requests get an access-log line;
    ``BATON_ACCESS_LOG=all`` logs every request, with its status and agent. A request the
    gate refuses before any route runs is logged with the status its client got."""
    log = tmp_path / "serve.log"
    with (
        running_server(redis_url, log, BATON_ACCESS_LOG=policy) as url,
        httpx.Client(base_url=url, headers={"X-Baton-Agent": "logger"}) as http,
    ):
        assert http.post("/v1/records", json={"ref": "log/x", "value": 1}).status_code == 201
        assert http.get("/v1/records/no/such").status_code == 404
        refused = http.get("/v1/whoami", headers={"Host": "elsewhere.example"})
        assert refused.status_code == 421
    entries = [entry for entry in access_lines(log) if str(entry["path"]).startswith("/v1/")]
    assert [entry["path"] for entry in entries] == logged
    assert entries[-2]["status"] == 404 and entries[-2]["agent"] == "logger"
    assert entries[-1]["status"] == 421


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric ``name`` in Prometheus text: its labels and value."""
    found = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1 :].rsplit("} ", 1)
            found.append((dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(value)))
    return found


def test_metrics_count_requests_per_route_with_a_latency_histogram(http: httpx.Client) -> None:
    """/metrics counts requests by route template and status, and keeps a latency histogram
    whose +Inf bucket equals the count; the scrape itself is not counted."""
    for n in range(3):
        http.post("/v1/records", json={"ref": f"metric/{n}", "value": n})
    http.get("/v1/records/metric/0")
    text = http.get("/metrics").text
    route = {"method": "GET", "path": "/v1/records/{ref}", "status_code": "200"}
    counts = [
        value
        for labels, value in samples(text, "baton_requests_total")
        if route.items() <= labels.items()
    ]
    infinite = [
        value
        for labels, value in samples(text, "baton_request_duration_seconds_bucket")
        if route.items() <= labels.items() and labels["le"] == "+Inf"
    ]
    assert len(counts) == 1 and counts[0] >= 1 and infinite == counts
    assert all(labels["path"] != "/metrics" for labels, _ in samples(text, "baton_requests_total"))


def test_a_settled_heap_still_collects_the_cycles_made_after_it() -> None:
    """``settle_heap`` freezes what start-up made and starts young collections less often,
    but never stops collecting: a reference cycle dropped afterwards is reclaimed once enough
    objects are allocated, with no explicit ``gc.collect``."""

    program = """
import gc, weakref
from baton.server.runtime.serving import YOUNG_GENERATION_THRESHOLD, settle_heap
settle_heap()
class Node: pass
node = Node(); node.self = node
dropped = weakref.ref(node)
del node
assert dropped() is not None  # only the cyclic collector can reclaim it
held = [{} for _ in range(2 * YOUNG_GENERATION_THRESHOLD)]
print(gc.isenabled(), gc.get_freeze_count() > 0, dropped() is None)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_a_worker_app_settles_its_heap_once_started(redis_url: str) -> None:
    """The app each ``baton serve --workers N`` process builds (``create_worker_app``)
    freezes what its start-up made and raises the young generation's threshold once its
    start-up is over, as ``baton serve`` does with one process."""

    program = """
import gc
from litestar.testing import TestClient
from baton.server.api.app import create_worker_app
app = create_worker_app()
before = gc.get_threshold()[0]
with TestClient(app):
    print(before, gc.get_threshold()[0], gc.get_freeze_count() > 0)
"""
    environment = {**os.environ, "BATON_REDIS_URL": redis_url, "BATON_CHECKPOINT_INTERVAL": "off"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["700", "10000", "True"]


def test_a_served_api_does_not_collect_garbage_every_few_requests(http: httpx.Client) -> None:
    """``baton serve`` settles its heap once started: 1,000 writes from 32 threads do not
    start a collection of the young generation every few dozen requests, as CPython's
    default threshold did (each walked what the requests in flight held, and a full one
    took about 100 ms)."""

    def young_collections() -> float:
        text = http.get("/metrics").text
        return next(
            value
            for labels, value in samples(text, "python_gc_collections_total")
            if labels["generation"] == "0"
        )

    own = threading.local()  # a client per thread: one shared by 32 threads lost a socket
    clients: list[httpx.Client] = []

    def write(i: int) -> None:
        if not hasattr(own, "client"):
            own.client = httpx.Client(base_url=str(http.base_url), headers=http.headers)
            clients.append(own.client)
        answer = own.client.post("/v1/records", json={"ref": f"gc/{i}", "value": {"i": i}})
        assert answer.status_code == 201, answer.text

    before = young_collections()
    try:
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            list(pool.map(write, range(1000)))
    finally:
        for client in clients:
            client.close()
    assert young_collections() - before <= 1


def test_a_busy_port_is_one_line_naming_its_holder(redis_url: str) -> None:
    """`baton serve` on a port another process listens on exits 3 before announcing
    anything, with one line that names the port and the process holding it."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "baton.server.cli", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            env={**os.environ, "BATON_REDIS_URL": redis_url},
            cwd=REPO,
            timeout=60,
        )
    assert done.returncode == 3
    [line] = done.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}" in line
    assert f"pid {os.getpid()}" in line
    assert "serving" not in done.stderr
