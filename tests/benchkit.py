"""What ``make bench`` measures with: timings, percentiles, load generators and the report."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import httpx
import psutil

from tests.conftest import REPO

CONCURRENCY = 32


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


def fmt(measure: Measure) -> str:
    """Percentiles, and throughput where the scenario measured one (not for one-at-a-time
    latency probes)."""
    text = (
        f"p50 {measure.pct(0.5):.2f} ms, p95 {measure.pct(0.95):.2f}, p99 {measure.pct(0.99):.2f}"
    )
    return text + (f", {measure.throughput:,.0f}/s" if measure.seconds else "")


async def http_load(
    url: str,
    request: Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]],
    seconds: float,
    concurrency: int = CONCURRENCY,
    warmup: float = 1.0,
    name: str = "",
) -> Measure:
    """``concurrency`` clients calling ``request`` back to back for ``seconds`` (after a
    warm-up that is not counted)."""
    measure = Measure(name)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        start = time.perf_counter()
        counting_from = start + warmup
        stop = counting_from + seconds

        async def worker(number: int) -> None:
            i = 0
            while (now := time.perf_counter()) < stop:
                response = await request(client, number * 1_000_000 + i)
                assert response.status_code < 300, response.text
                if now >= counting_from:
                    measure.latencies.append(time.perf_counter() - now)
                i += 1

        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        measure.seconds = seconds
    return measure


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


def write_report(output: Path, rows: list[Row], growth: list[str], quick: bool) -> None:
    """The table, the growth table, then the notes kept from the previous report (every
    ``## `` section after the tables)."""
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `make bench{' ARGS=--quick' if quick else ''}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: "
        f"{os.cpu_count()} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}, Valkey (embedded), litestar {version('litestar')}, "
        f"redis-py {version('redis')}, rq {version('rq')}, mcp {version('mcp')}. Load generator, "
        "servers and Redis share the same 2 cores, for the baselines and for Baton alike, so compare "
        "the ratios, not the absolute numbers. Latency ratios come from interleaved calls (one "
        "scenario call, one baseline call, in turn). **Caveat:** the two REST throughput rows "
        "are driven by a Python client that saturates before the servers do (its one-GET "
        "baseline reads about 550 req/s where `wrk` reaches about 3,900 on this machine), so "
        "their ratios describe the client, not Baton; a native load generator replaces it in "
        "the next round of speed work (the open issue on honest speed).",
        "",
        "| scenario | Baton | baseline | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r.met else "**no**" if r.met is False else "-"
        lines.append(
            f"| {r.scenario} | {r.baton} | {r.baseline} | {r.ratio} | {r.target} | {met} |"
        )
    if growth:
        lines += ["", *growth]
    existing = output.read_text() if output.exists() else ""
    notes = existing.split("\n## ", 1)[1] if "\n## " in existing else ""
    output.write_text("\n".join(lines) + "\n" + (f"\n## {notes}" if notes else ""))
    print(f"\nreport written to {output}")
