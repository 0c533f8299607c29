"""What ``make bench`` measures with: timings, percentiles, load generators and the report."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import httpx
import psutil

from baton.server.runtime.embedded import EmbeddedServer
from tests.conftest import REPO


@dataclass
class Measure:
    name: str
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


@dataclass
class Row:
    scenario: str
    baton: str
    baseline: str
    ratio: str
    target: str
    met: bool | None
    generator: str = "Python client"


def fmt(measure: Measure) -> str:
    """Percentiles, and throughput where the scenario measured one (not for one-at-a-time
    latency probes)."""
    text = (
        f"p50 {measure.pct(0.5):.2f} ms, p95 {measure.pct(0.95):.2f}, p99 {measure.pct(0.99):.2f}"
    )
    return text + (f", {measure.throughput:,.0f}/s" if measure.seconds else "")


async def sequential(call: Callable[[int], Awaitable[object]], count: int, name: str) -> Measure:
    """``call`` ``count`` times one after the other, after a tenth as many warm-up calls."""
    measure = Measure(name)
    for i in range(count // 10):
        await call(i)
    started = time.perf_counter()
    for i in range(count):
        before = time.perf_counter()
        await call(count + i)
        measure.latencies.append(time.perf_counter() - before)
    measure.seconds = time.perf_counter() - started
    return measure


async def interleaved(
    calls: dict[str, Callable[[int], Awaitable[object]]], count: int
) -> dict[str, Measure]:
    """Each call in turn, ``count`` rounds (after a tenth as many warm-up rounds): a
    scenario and its baseline meet the same moments of a noisy machine, so their ratio is
    not skewed by whatever ran during one of them. Latencies only (no throughput)."""
    measures = {name: Measure(name) for name in calls}
    for i in range(count // 10 + count):
        for name, call in calls.items():
            before = time.perf_counter()
            await call(i)
            if i >= count // 10:
                measures[name].latencies.append(time.perf_counter() - before)
    return measures


def start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def server_env(embedded: EmbeddedServer) -> dict[str, str]:
    """The environment the benchmarks serve Baton and its baselines in: on the running
    ``embedded`` server, as its own data dir's (so writes wait for its append-only file, as
    they do for a user's), no rate limit, and no scheduled checkpoint (the growth table
    measures checkpoints explicitly; one taken by a sweep in the middle of a probe would
    measure both at once)."""
    return {
        **os.environ,
        "BATON_REDIS_URL": embedded.url,
        "BATON_DATA_DIR": str(embedded.data_dir),
        "BATON_RATE_LIMIT": "off",
        "BATON_CHECKPOINT_INTERVAL": "off",
        "PYTHONPATH": str(REPO),
    }


def wait_for_baseline(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until B-http's app answers (it has no health route), 20 s at most."""
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{url}/get")
            return
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the baseline did not come up:\n{log.read_text()}") from None
            time.sleep(0.1)


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until a server started by :func:`start` accepts connections on ``port``, 20 s at most
    (a fixed sleep was too short when the machine was slow)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the server did not come up:\n{log.read_text()}") from None
            time.sleep(0.1)


def wrk_version() -> str:
    found = shutil.which("wrk")
    if found is None:
        return "wrk (missing)"
    output = subprocess.run([found, "--version"], capture_output=True, text=True).stdout
    return output.split(" [")[0].strip() or "wrk"


def write_report(output: Path, rows: list[Row], growth: list[str], quick: bool) -> None:
    """The table, the growth table, then the notes kept from the previous report (every
    ``## `` section after the tables)."""
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench{' ARGS=--quick' if quick else ''}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {os.cpu_count()} cores ({cpu}), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}, "
        f"Valkey (embedded), litestar {version('litestar')}, uvicorn {version('uvicorn')} "
        f"(uvloop, httptools), redis-py {version('redis')}, rq {version('rq')}, "
        f"mcp {version('mcp')}, {wrk_version()}. Load generator, servers and Redis share the "
        "same 2 cores, for the baselines and for Baton alike, so compare the ratios, not the "
        "absolute numbers. Every REST row is driven by `wrk` (C, one thread): throughput at "
        "32 connections, latency at one, the scenario and its baseline in interleaved rounds "
        "(medians of 3), the baseline served by the same `baton.server.runtime.serving.serve` as "
        "`baton serve`. Each wrk row says how much of a core the server and wrk used: a server "
        "near 100 % with wrk far below means the figure is the server's. Rows measured with a "
        "Python client are those where the client is the thing measured (MCP, RQ push).",
        "",
        "| scenario | Baton | baseline | ratio | target | met | measured with |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r.met else "**no**" if r.met is False else "-"
        lines.append(
            f"| {r.scenario} | {r.baton} | {r.baseline} | {r.ratio} | {r.target} | {met} "
            f"| {r.generator} |"
        )
    if growth:
        lines += ["", *growth]
    existing = output.read_text() if output.exists() else ""
    notes = existing.split("\n## ", 1)[1] if "\n## " in existing else ""
    output.write_text("\n".join(lines) + "\n" + (f"\n## {notes}" if notes else ""))
    print(f"\nreport written to {output}")
