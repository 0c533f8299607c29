"""What Baton adds to the stack under it: ``make bench-floor``.

``remember``, ``recall`` and ``resume`` next to their floor, the same request and answer on
the same stack with none of Baton's work (``floor_app``: Litestar's decoding into Baton's
request type, one script call over Baton's own path to Redis, Baton's answer type, served
like ``baton serve``), and next to B-http, in interleaved wrk rounds: throughput at 32
connections for remember and recall, p50 latency at one connection for resume (as ``make
bench`` measures them). A ratio target against B-http that the floor itself misses is out
of reach of any change to Baton; one the floor meets easily leaves the gap to Baton's own
work.

    .venv/bin/python -m tests.bench_floor [--seconds 3] [--rounds 4]
    .venv/bin/python -m tests.bench_floor --serve PORT   (the floor alone)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import psutil
import redis
from litestar import Litestar, get, post
from litestar.params import JSONBody
from redis.commands.core import AsyncScript

from baton.server.model.models import (
    Packet,
    Pin,
    RecordVersion,
    Remembered,
    ResolvedPin,
    Resumed,
    StalePin,
)
from baton.server.operations import RememberInput, ResumeInput
from baton.server.runtime.connection import async_redis
from baton.server.runtime.embedded import EmbeddedServer
from tests.bench import BATON_SERVE, RESUME_CEILING, top_up_inbox
from tests.bench_ab import serve_baseline, write_pins
from tests.bench_baselines import one_get
from tests.bench_http import BASELINE, RESUME, THROUGHPUT, Target, rounds
from tests.benchkit import server_env, start, wait_for_baseline
from tests.conftest import free_port, wait_for_http

SCENARIOS = [scenario for scenario in THROUGHPUT if scenario.name in ("remember", "recall")]
FLOOR_HASH, FLOOR_TIME = "0" * 64, "2026-01-01T00:00:00.000000Z"
_scripts: dict[str, AsyncScript] = {}


def floor_script(name: str) -> AsyncScript:
    """One script over Baton's own path to Redis (the shared connection, EVALSHA)."""
    if not _scripts:
        client = async_redis(os.environ["BATON_REDIS_URL"])
        _scripts["write"] = client.register_script("return redis.call('INCR', KEYS[1])")
        _scripts["read"] = client.register_script("return redis.call('GET', KEYS[1])")
    return _scripts[name]


@post("/v1/records")
async def floor_remember(data: JSONBody[RememberInput]) -> Remembered:
    """remember's body decoded as Baton decodes it, one script call, Baton's answer type."""
    version = await floor_script("write")(keys=[f"bench:floor:{data.ref}"])
    return Remembered(
        ref=data.ref,
        version=version,
        hash=FLOOR_HASH,
        prev_hash=FLOOR_HASH,
        superseded=version - 1 or None,
        created_at=FLOOR_TIME,
    )


@get("/v1/records/{ref:path}")
async def floor_recall(ref: str) -> RecordVersion:
    """recall's route and answer type, one script call."""
    value = await floor_script("read")(keys=[f"bench:floor:{ref}"])
    return RecordVersion(
        ref=ref.lstrip("/"),
        version=1,
        value={"n": None if value is None else value.decode()},
        author="bench",
        session=None,
        created_at=FLOOR_TIME,
        tags=[],
        confidence=0.5,
        hash=FLOOR_HASH,
        prev_hash=FLOOR_HASH,
        current_version=1,
    )


@post("/v1/agents/{agent:str}/resume", status_code=200)
async def floor_resume(agent: str, data: JSONBody[ResumeInput | None] = None) -> Resumed:
    """resume's route, body and answer type (the bench's packet: four pins, one stale), one
    script call."""
    claimed = await floor_script("write")(keys=[f"bench:floor:{agent}"])
    pins = [Pin(ref=f"pin/{n}", version=1) for n in range(4)]
    packet = Packet(
        id=f"p-{claimed}",
        from_agent="bench",
        to_agent=agent,
        summary=f"s {claimed}",
        next=["do it"],
        open=[],
        pins=pins,
        note=None,
        session=None,
        state="claimed",
        created_at=FLOOR_TIME,
        updated_at=FLOOR_TIME,
        expires_at=None,
        lease_until=FLOOR_TIME,
        claimed_by=agent,
        deliveries=1,
        redeliveries=0,
        error=None,
    )
    resolved = [
        ResolvedPin(
            ref=pin.ref,
            version=1,
            current_version=2 if n == 0 else 1,
            stale=n == 0,
            value=n,
            author="bench",
            confidence=0.5,
            created_at=FLOOR_TIME,
        )
        for n, pin in enumerate(pins)
    ]
    return Resumed(
        agent=agent,
        packet=packet,
        pins=resolved,
        stale=[
            StalePin(
                ref="pin/0",
                pinned_version=1,
                current_version=2,
                moves=1,
                pinned_value=0,
                current_value=1,
                patch=[{"op": "replace", "path": "", "value": 1}],
                versions=[],
                outcomes=[],
                pinned_confidence=0.5,
                current_confidence=0.5,
            )
        ],
        lease_until=FLOOR_TIME,
        message=f"packet {packet.id} from {packet.from_agent}: {packet.summary}",
    )


floor_app = Litestar(
    route_handlers=[one_get, floor_remember, floor_recall, floor_resume], logging_config=None
)


def main(seconds: float, count: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="baton-floor-"))
    embedded = EmbeddedServer(work / "data")
    try:
        embedded.ensure_running()
        env = server_env(embedded)
        raw = redis.Redis.from_url(env["BATON_REDIS_URL"])
        raw.set("bench:baseline", "x")
        port = free_port()
        process = start([*BATON_SERVE, "--port", str(port)], work / "baton.log", env)
        baton = Target(f"http://127.0.0.1:{port}", [process.pid])
        wait_for_http(baton.url, process, work / "baton.log")
        write_pins(baton.url, moved=False)
        port = free_port()
        command = [sys.executable, "-m", "tests.bench_floor", "--serve", str(port)]
        process = start(command, work / "floor.log", env)
        floor = Target(f"http://127.0.0.1:{port}", [process.pid])
        wait_for_baseline(floor.url, process, work / "floor.log")
        baseline = serve_baseline(env, work / "baseline.log")

        targets = [(baseline.url, BASELINE, baseline.pids)]
        for scenario in SCENARIOS:
            floored = dataclasses.replace(scenario, name=f"{scenario.name} floor")
            targets += [(floor.url, floored, floor.pids), (baton.url, scenario, baton.pids)]
        measured = rounds(targets, connections=32, seconds=seconds, count=count)

        write_pins(baton.url, moved=True)  # pin/0 moves on: one stale pin, as make bench has
        top_up_inbox(raw, baton, RESUME.agent, (1 + count * seconds) * RESUME_CEILING)
        resume_floor = dataclasses.replace(RESUME, name="resume floor")
        targets = [
            (baseline.url, BASELINE, baseline.pids),
            (floor.url, resume_floor, floor.pids),
            (baton.url, RESUME, baton.pids),
        ]
        latency = rounds(targets, connections=1, seconds=seconds, count=count)

        b_http = measured[BASELINE.name].requests_per_second
        print(f"req/s at 32 connections, medians of {count} interleaved rounds of {seconds} s")
        print(f"B-http: {measured[BASELINE.name].describe()}")
        print("| scenario | floor | Baton | floor ÷ B-http | Baton ÷ B-http | Baton ÷ floor |")
        print("|---|---|---|---|---|---|")
        for scenario in SCENARIOS:
            low = measured[f"{scenario.name} floor"].requests_per_second
            own = measured[scenario.name].requests_per_second
            print(
                f"| {scenario.name} | {low:,.0f} | {own:,.0f} | {low / b_http:.2f} "
                f"| {own / b_http:.2f} | {own / low:.2f} |"
            )
        b_one = latency[BASELINE.name].p50_ms
        low, own = latency["resume floor"].p50_ms, latency[RESUME.name].p50_ms
        print(f"\np50 at one connection: B-http {latency[BASELINE.name].describe(False)}")
        print("| scenario | floor | Baton | floor ÷ B-http | Baton ÷ B-http | Baton ÷ floor |")
        print("|---|---|---|---|---|---|")
        print(
            f"| resume | {low:.2f} ms | {own:.2f} ms | {low / b_one:.2f}× | {own / b_one:.2f}× "
            f"| {own / low:.2f}× |"
        )
    finally:
        for child in psutil.Process().children():
            child.terminate()
        psutil.wait_procs(psutil.Process().children(), timeout=10)
        embedded.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each wrk run (default 3)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve the floor app alone")
    arguments = parser.parse_args()
    if arguments.serve:
        from baton.server.runtime.serving import serve

        serve(floor_app, host="127.0.0.1", port=arguments.serve)
    else:
        main(arguments.seconds, arguments.rounds)
