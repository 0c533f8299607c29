"""Two builds of Baton side by side: ``make bench-ab BASE=<git revision>``.

This machine's speed moves a lot from one minute to the next, and not evenly (heavier paths
lose more in a slow phase; docs/benchmarks.md), so two ``make bench`` runs cannot say what a
change did. This serves the build at BASE and this checkout on one Valkey (each in a
namespace of its own), next to the one-GET baseline, and drives all three with wrk in
interleaved rounds, so every figure meets the same moments of the machine: the REST
scenarios of ``make bench``, throughput at 32 connections, a memory save that supersedes at 8
and ``resume``'s p50 at one.

    .venv/bin/python -m tests.bench_ab REVISION [--seconds 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil
import redis

from baton.server.runtime.embedded import EmbeddedServer
from tests.bench import BATON_SERVE, RESUME_CEILING, top_up_inbox
from tests.bench_http import BASELINE, RESUME, SAVE, THROUGHPUT, Scenario, Target, rounds
from tests.benchkit import server_env, start, wait_for_baseline
from tests.conftest import REPO, free_port, wait_for_http

FOLDERS = ("server", "queue", "agents", "demo")


def checkout(revision: str, work: Path) -> tuple[Path, Path]:
    """A worktree of ``revision``, and a folder on whose path ``baton`` imports from it (its
    folders under ``baton/``, as setuptools' package-dir maps them on install)."""
    tree, importable = work / "base", work / "base-import"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), revision],
        check=True,
    )
    (importable / "baton").mkdir(parents=True)
    for folder in FOLDERS:
        (importable / "baton" / folder).symlink_to(tree / folder)
    return tree, importable


def compare(
    builds: dict[str, Target],
    baseline: Target,
    scenarios: list[Scenario],
    *,
    connections: int,
    seconds: float,
    count: int,
) -> None:
    """Each scenario on both builds, and the baseline, in interleaved rounds; prints the
    medians: req/s with many connections, p50 (ms) with one."""
    targets = [(baseline.url, BASELINE, baseline.pids)]
    for scenario in scenarios:
        for label, build in builds.items():
            named = dataclasses.replace(scenario, name=f"{scenario.name} {label}")
            targets.append((build.url, named, build.pids))
    measured = rounds(targets, connections=connections, seconds=seconds, count=count)

    def figure(name: str) -> float:
        runs = measured[name].runs
        return statistics.median(
            r.requests_per_second if connections > 1 else r.p50_ms for r in runs
        )

    unit = f"req/s, {connections} connections" if connections > 1 else "p50 ms, 1 connection"
    for scenario in scenarios:
        base, this = figure(f"{scenario.name} base"), figure(f"{scenario.name} this")
        print(
            f"| {scenario.name} ({unit}) | {figure(BASELINE.name):,.2f} | {base:,.2f} "
            f"| {this:,.2f} | {this / base:.2f} |",
            flush=True,
        )


def write_pins(url: str, *, moved: bool) -> None:
    """The records the scenarios pin and recall; ``moved`` moves pin/0 on (one stale pin)."""
    with httpx.Client(base_url=url, headers={"X-Baton-Agent": "bench"}) as http:
        for n in range(1 if moved else 4):
            http.post("/v1/records", json={"ref": f"pin/{n}", "value": "moved on" if moved else n})


def serve_baseline(env: dict[str, str], log: Path) -> Target:
    """B-http, served as ``make bench`` serves it, once it answers."""
    port = free_port()
    process = start([sys.executable, "-m", "tests.bench_baselines", "http", str(port)], log, env)
    wait_for_baseline(f"http://127.0.0.1:{port}", process, log)
    return Target(f"http://127.0.0.1:{port}", [process.pid])


def main(revision: str, seconds: float, count: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="baton-ab-"))
    tree, importable = checkout(revision, work)
    embedded = EmbeddedServer(work / "data")
    url = embedded.ensure_running()
    env = server_env(embedded)
    raw = redis.Redis.from_url(url)
    raw.set("bench:baseline", "x")
    builds: dict[str, Target] = {}
    try:
        # Each build in a namespace of its own: writing the other's records would make every
        # head it remembers stale, and each write would take the retry path.
        for label, extra in (("base", {"PYTHONPATH": str(importable)}), ("this", {})):
            port, log = free_port(), work / f"{label}.log"
            extra = {**extra, "BATON_NAMESPACE": label}
            process = start([*BATON_SERVE, "--port", str(port)], log, {**env, **extra})
            builds[label] = Target(f"http://127.0.0.1:{port}", [process.pid])
            wait_for_http(builds[label].url, process, log)
        baseline = serve_baseline(env, work / "baseline.log")
        for build in builds.values():
            write_pins(build.url, moved=False)
        print(f"{revision} (base) against this checkout: medians of {count} rounds of {seconds} s")
        print("| scenario | B-http | base | this | this ÷ base |\n|---|---|---|---|---|")
        compare(builds, baseline, THROUGHPUT, connections=32, seconds=seconds, count=count)
        compare(builds, baseline, [SAVE], connections=8, seconds=seconds, count=count)
        for label, build in builds.items():
            write_pins(build.url, moved=True)
            wanted = (1 + count * seconds) * RESUME_CEILING  # neither finds its inbox empty
            top_up_inbox(raw, build, "puller", wanted, namespace=label)
        compare(builds, baseline, [RESUME], connections=1, seconds=seconds, count=count)
    finally:
        for process in psutil.Process().children():
            process.terminate()
        psutil.wait_procs(psutil.Process().children(), timeout=10)
        embedded.stop()
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the git revision to compare this checkout with")
    parser.add_argument("--seconds", type=float, default=3.0, help="each wrk run (default 3)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    arguments = parser.parse_args()
    main(arguments.revision, arguments.seconds, arguments.rounds)
