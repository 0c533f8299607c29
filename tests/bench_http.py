"""HTTP load for ``make bench``, from a native load generator: wrk (C, epoll, one thread).

A Python client saturates before the server on this machine (its one-GET baseline read
552 req/s where wrk reads ~3,900), so every REST figure comes from wrk. Each run also records
how much of a core the server and wrk used: a server near 100 % and wrk well below it means
the figure is the server's, not the generator's.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# The requests each connection sends: the scenario's paths (and bodies) in turn, over and
# over. ``{n}`` in them becomes a per-run counter, so writes go to fresh refs; ``done``
# prints the figures as one JSON line.
LUA = """
wrk.method = "{method}"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Baton-Agent"] = "{agent}"
local counter = 0
local paths = {{ {paths} }}
local bodies = {{ {bodies} }}
request = function()
  counter = counter + 1
  local n = tostring(counter)
  local path = paths[(counter - 1) % #paths + 1]:gsub("{{n}}", n)
  local body = nil
  if #bodies > 0 then body = bodies[(counter - 1) % #bodies + 1]:gsub("{{n}}", n) end
  return wrk.format(nil, path, nil, body)
end
{response}
done = function(summary, latency, requests)
  io.write(string.format(
    '\\n{{"requests": %d, "duration_us": %d, "non2xx": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p95_us": %d, "p99_us": %d, "empty": %d}}\\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), empty or 0))
end
"""
# Counts answers that claimed nothing (a resume with an empty inbox measures a cheaper path).
COUNT_EMPTY = """
empty = 0
response = function(status, headers, body)
  if string.find(body, '"packet":null', 1, true) then empty = empty + 1 end
end
"""


@dataclass(frozen=True)
class Scenario:
    """What wrk sends: ``paths`` (and ``bodies``) in turn, as ``agent``."""

    name: str
    paths: Sequence[str]
    method: str = "GET"
    bodies: Sequence[str] = ()
    agent: str = "bench"
    count_empty: bool = False


def lua_strings(items: Sequence[str]) -> str:
    return ", ".join(f"[=[{item}]=]" for item in items)


@dataclass
class WrkRun:
    scenario: str
    requests_per_second: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    server_cpu: float  # percent of one core, all server processes together
    wrk_cpu: float
    empty: int
    steal: float | None  # percent of the machine's CPU time its hypervisor took (Linux)


@dataclass
class Runs:
    """Every round of one scenario; the figures are medians over the rounds."""

    runs: list[WrkRun] = field(default_factory=list)

    @property
    def requests_per_second(self) -> float:
        return statistics.median(run.requests_per_second for run in self.runs)

    @property
    def p50_ms(self) -> float:
        return statistics.median(run.p50_ms for run in self.runs)

    @property
    def p95_ms(self) -> float:
        return statistics.median(run.p95_ms for run in self.runs)

    @property
    def empty(self) -> int:
        return sum(run.empty for run in self.runs)

    @property
    def steal(self) -> float | None:
        shares = [run.steal for run in self.runs if run.steal is not None]
        return statistics.median(shares) if shares else None

    def describe(self, throughput: bool = True) -> str:
        cpu = (
            f"server {statistics.median(r.server_cpu for r in self.runs):.0f} % of a core, "
            f"wrk {statistics.median(r.wrk_cpu for r in self.runs):.0f} %"
        )
        if self.steal is not None:
            cpu += f", steal {self.steal:.0f} %"
        p90 = statistics.median(r.p90_ms for r in self.runs)
        p99 = statistics.median(r.p99_ms for r in self.runs)
        latency = f"p50 {self.p50_ms:.2f} ms, p90 {p90:.2f}, p99 {p99:.2f}"
        rate = f"{self.requests_per_second:,.0f} req/s, " if throughput else ""
        return f"{rate}{latency} ({cpu}; median of {len(self.runs)} wrk runs)"


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's CPU time so far, stolen by its hypervisor and in all, in ticks (Linux's
    /proc/stat); None elsewhere. A virtual machine whose host is busy loses time to steal:
    a server at 60 % of a core under full load is waiting for a CPU, not for work."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal (guest time is within user)
    ticks = [int(value) for value in first[1:9]]
    return ticks[7], sum(ticks)


def stolen_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] == before[1]:
        return None
    return 100 * (after[0] - before[0]) / (after[1] - before[1])


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("make bench needs wrk (the Makefile installs it: apt-get install wrk)")
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time used so far by ``pids`` and their children (uvicorn workers)."""
    total = 0.0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            for member in [process, *process.children(recursive=True)]:
                times = member.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def wrk(
    base_url: str,
    scenario: Scenario,
    *,
    connections: int,
    seconds: float,
    server_pids: Sequence[int],
) -> WrkRun:
    """One wrk run of ``scenario``; refuses figures that include errors."""
    script = LUA.format(
        method=scenario.method,
        agent=scenario.agent,
        paths=lua_strings(scenario.paths),
        bodies=lua_strings(scenario.bodies),
        response=COUNT_EMPTY if scenario.count_empty else "",
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(script)
    command = [
        wrk_binary(),
        "-t1",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "-s",
        handle.name,
        base_url,
    ]
    ticks_before = cpu_ticks()
    server_before, started = cpu_seconds(server_pids), time.perf_counter()
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)  # wrk's own CPU time, from its rusage
        process.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        server_used = cpu_seconds(server_pids) - server_before
        steal = stolen_share(ticks_before, cpu_ticks())
        output.seek(0)
        text = output.read().decode()
    Path(handle.name).unlink()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed on {scenario.name}: {text}")
    figures = json.loads(lines[-1])
    if figures["non2xx"] or figures["socket_errors"]:
        raise RuntimeError(f"{scenario.name}: errors during the run: {figures}")
    wrk_used = usage.ru_utime + usage.ru_stime
    return WrkRun(
        scenario=scenario.name,
        requests_per_second=figures["requests"] / (figures["duration_us"] / 1e6),
        p50_ms=figures["p50_us"] / 1000,
        p90_ms=figures["p90_us"] / 1000,
        p95_ms=figures["p95_us"] / 1000,
        p99_ms=figures["p99_us"] / 1000,
        server_cpu=100 * server_used / elapsed,
        wrk_cpu=100 * wrk_used / elapsed,
        empty=figures["empty"],
        steal=steal,
    )


def rounds(
    targets: Sequence[tuple[str, Scenario, Sequence[int]]],
    *,
    connections: int,
    seconds: float,
    count: int = 3,
    warmup: float = 1.0,
) -> dict[str, Runs]:
    """Every (base URL, scenario, server pids) in turn, ``count`` rounds, after a warm-up run
    of each: a scenario and its baseline meet the same moments of a noisy machine."""
    for url, scenario, pids in targets:
        wrk(url, scenario, connections=connections, seconds=warmup, server_pids=pids)
    measured = {scenario.name: Runs() for _, scenario, _ in targets}
    for _ in range(count):
        for url, scenario, pids in targets:
            run = wrk(url, scenario, connections=connections, seconds=seconds, server_pids=pids)
            measured[scenario.name].runs.append(run)
    return measured


# -- the REST scenarios of make bench ---------------------------------------------------------

PINS = [{"ref": f"pin/{n}"} for n in range(4)]
RECORD = '{"ref": "bench/{n}", "value": {"i": {n}, "note": "a fact worth keeping"}}'
HANDOFF = json.dumps({"to": "puller", "summary": "s {n}", "next": ["do it"], "pins": PINS})
OBSERVATION = json.dumps(
    {
        "hook_type": "post_tool_use",
        "session_id": "bench-s",
        "project": "bench",
        "cwd": "/bench",
        "timestamp": "t",
        "data": {"tool_name": "Bash", "tool_input": {"command": "make {n}"}},
    }
)
BASELINE = Scenario("B-http", ["/get"])
THROUGHPUT = [
    Scenario("remember", ["/v1/records"], "POST", [RECORD]),
    Scenario("recall", ["/v1/records/pin/1"]),
    Scenario("handoff", ["/v1/handoffs"], "POST", [HANDOFF]),
]
RESUME = Scenario(
    "resume", ["/v1/agents/puller/resume"], "POST", ["{}"], agent="puller", count_empty=True
)
OBSERVE = Scenario("observe", ["/v1/observations"], "POST", [OBSERVATION])
# each a near-duplicate of the one before (Jaccard 0.75): a save that supersedes
MEMORY = '{"content": "deploy note {n}: the payment service restarts after migration {n}"}'
SAVE = Scenario("memory save, superseding", ["/v1/memories"], "POST", [MEMORY])


@dataclass
class Target:
    """A server under load: its URL and the processes whose CPU is its."""

    url: str
    pids: Sequence[int]


def throughput_rounds(
    baton: Target, baseline: Target, *, seconds: float, count: int
) -> dict[str, Runs]:
    """32 connections: the one-GET baseline, then each REST scenario, ``count`` rounds."""
    targets = [(baseline.url, BASELINE, baseline.pids)]
    targets += [(baton.url, scenario, baton.pids) for scenario in THROUGHPUT]
    return rounds(targets, connections=32, seconds=seconds, count=count)


def latency_rounds(
    baton: Target, baseline: Target, *, seconds: float, count: int
) -> dict[str, Runs]:
    """One connection: the baseline, ``resume`` (4 pins, one stale) and ``observe``."""
    targets = [
        (baseline.url, BASELINE, baseline.pids),
        (baton.url, RESUME, baton.pids),
        (baton.url, OBSERVE, baton.pids),
    ]
    return rounds(targets, connections=1, seconds=seconds, count=count)
