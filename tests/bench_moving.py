"""Facts that move: generated multi-agent work answered through the API (``make bench``).

Several agents update a few hundred facts many times and hand work to each other, pinning
facts at the versions they saw; some receivers take their packet over midway. Then three
kinds of question are asked through the Python client, and the same questions of a
textbook baseline, a last-write-wins key-value store (Redis ``SET``/``GET``, written with
every write of the run):

- *now*: what is X now;
- *then*: what was X when agent Y took its packet over (``recall(as_of=…)``; the baseline
  can only answer with what X is now);
- *since*: what changed in X since Y's pin, answered right when it says how many versions
  came since and what X is now (``resume``'s stale report: the versions since and the JSON
  Patch from the pinned value; the baseline has the current value and no versions, so it is
  right only about a fact that did not move).

An answer is right when it is the value the run's own log says; a *stale value served* is
an answer that is an older value of X than the one asked for. Then the time from a write's
answer to its notice on the receiver's event stream, next to Redis pub/sub's delivery of one
message (the textbook way to tell a waiting client).

    .venv/bin/python -m tests.bench_moving [--quick]   # the table alone, on its own API
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import redis

from baton.agents import BatonClient
from baton.server.runtime.embedded import EmbeddedServer
from tests.benchkit import server_env, start
from tests.conftest import free_port, wait_for_http

AGENTS = ("scout", "pricer", "reviewer", "analyst", "executor")


@dataclass
class Fact:
    """One fact's versions as the run wrote them: (created_at, value), version n at n - 1."""

    versions: list[tuple[str, Any]] = field(default_factory=list)

    def at(self, moment: str) -> Any:
        """The value current at ``moment``."""
        return self.versions[bisect_right([t for t, _ in self.versions], moment) - 1][1]


@dataclass
class Handed:
    packet: str
    to: str
    pins: dict[str, int]  # ref -> version pinned
    claimed_at: str | None = None


@dataclass
class Tally:
    right: int = 0
    asked: int = 0
    stale: int = 0

    def note(self, answer: Any, wanted: Any, older: list[Any]) -> None:
        self.asked += 1
        if answer == wanted:
            self.right += 1
        elif answer in older:
            self.stale += 1

    def cell(self) -> str:
        return f"{self.right / max(self.asked, 1):.0%} ({self.right}/{self.asked}), {self.stale}"


def value_of(ref: str, step: int) -> dict[str, Any]:
    return {"ref": ref, "step": step, "verdict": random.choice(["apply", "skip", "maybe"])}


def generate(
    api_url: str, kv: redis.Redis, facts: int, writes: int, handoffs: int
) -> tuple[dict[str, Fact], list[Handed]]:
    """The run: every fact written once, then ``writes`` writes by random agents with a
    handoff every so often pinning 1-3 facts at their current version, and a third of the
    receivers taking theirs over midway. Each write also goes to the baseline store."""
    random.seed(53)
    refs = [f"moving/f{n:03d}" for n in range(facts)]
    model = {ref: Fact() for ref in refs}
    clients = {agent: BatonClient(api_url, agent=agent) for agent in AGENTS}
    handed: list[Handed] = []

    def write(ref: str, step: int) -> None:
        value = value_of(ref, step)
        written = clients[random.choice(AGENTS)].remember(ref, value)
        model[ref].versions.append((written.created_at, value))
        kv.set(ref, json.dumps(value))

    try:
        for step, ref in enumerate(refs):
            write(ref, step)
        every = max(writes // handoffs, 1)
        for step in range(writes):
            write(random.choice(refs), facts + step)
            if step % every == 0:
                sender, receiver = random.sample(AGENTS, 2)
                pins = {ref: len(model[ref].versions) for ref in random.sample(refs, 3)}
                packet = clients[sender].handoff(
                    receiver,
                    f"work {step}",
                    pins=[{"ref": ref, "version": v} for ref, v in pins.items()],
                )
                handed.append(Handed(packet.id, receiver, pins))
            if step % (every * 3) == every and handed:
                taken = next((h for h in handed if h.claimed_at is None), None)
                if taken is not None:
                    resumed = clients[taken.to].resume()
                    if resumed.packet is not None:  # its oldest: that one, or an older one
                        mine = next(h for h in handed if h.packet == resumed.packet.id)
                        mine.claimed_at = resumed.packet.updated_at
    finally:
        for client in clients.values():
            client.close()
    return model, handed


def questions(
    api_url: str, kv: redis.Redis, model: dict[str, Fact], handed: list[Handed]
) -> dict[str, tuple[Tally, Tally]]:
    """Each question asked of Baton and of the baseline: (Baton's tally, the baseline's)."""
    now, then, since = (Tally(), Tally()), (Tally(), Tally()), (Tally(), Tally())
    with BatonClient(api_url, agent="asker") as asker:
        for ref, fact in model.items():
            older = [value for _, value in fact.versions[:-1]]
            latest = fact.versions[-1][1]
            now[0].note(asker.recall(ref).value, latest, older)
            now[1].note(json.loads(kv.get(ref) or "null"), latest, older)
        for taken in (h for h in handed if h.claimed_at):
            assert taken.claimed_at is not None
            for ref in taken.pins:
                fact = model[ref]
                wanted = fact.at(taken.claimed_at)
                older = [value for _, value in fact.versions if value != wanted]
                answer = asker.recall(ref, as_of=taken.claimed_at).value
                then[0].note(answer, wanted, older)
                then[1].note(json.loads(kv.get(ref) or "null"), wanted, older)
    receivers = {agent: BatonClient(api_url, agent=agent) for agent in AGENTS}
    try:
        for client in receivers.values():
            while (resumed := client.resume()).packet is not None:
                mine = next(h for h in handed if h.packet == resumed.packet.id)
                explained = {s.ref: s for s in resumed.stale}
                for ref, pinned in mine.pins.items():
                    # the right answer: how many versions came since, and what X is now
                    fact = model[ref]
                    pinned_value, latest = fact.versions[pinned - 1][1], fact.versions[-1][1]
                    wanted = (len(fact.versions) - pinned, latest)
                    older = [(0, value) for _, value in fact.versions[:-1]]
                    stale = explained.get(ref)
                    if stale is None:  # Baton says it did not move
                        answer = (0, pinned_value)
                    elif stale.patch is None:  # too large to compare: both values given
                        answer = (stale.moves, stale.current_value)
                    else:
                        answer = (stale.moves, jsonpatch.apply_patch(pinned_value, stale.patch))
                    since[0].note(answer, wanted, older)
                    # the store knows no versions: it can only say what X is now
                    since[1].note((0, json.loads(kv.get(ref) or "null")), wanted, older)
                client.complete(resumed.packet.id)
    finally:
        for client in receivers.values():
            client.close()
    return {"now": now, "then": then, "since": since}


def notice_latency(api_url: str, kv: redis.Redis, count: int) -> tuple[list[float], list[float]]:
    """Milliseconds from a write's answer to its notice on the receiver's event stream, and
    from a Redis PUBLISH to its subscriber, ``count`` times each."""
    with BatonClient(api_url, agent="scout") as scout:
        scout.remember("moving/probe", 0)
        scout.handoff("watcher", "watch", pins=[{"ref": "moving/probe"}])
        mine: list[float] = []
        url = f"{api_url}/v1/agents/watcher/notices/stream"
        headers = {"X-Baton-Agent": "watcher"}
        with httpx.stream("GET", url, headers=headers, timeout=30) as stream:
            lines = stream.iter_lines()
            next(lines)
            for n in range(count):
                scout.remember("moving/probe", n + 1)
                written = time.perf_counter()
                next(line for line in lines if line.startswith("id:"))
                mine.append((time.perf_counter() - written) * 1000)
    subscriber = kv.pubsub()
    subscriber.subscribe("moving-probe")
    subscriber.get_message(timeout=1)  # the subscription's confirmation
    base: list[float] = []
    for n in range(count):
        sent = time.perf_counter()
        kv.publish("moving-probe", str(n))
        while subscriber.get_message(timeout=5) is None:
            pass
        base.append((time.perf_counter() - sent) * 1000)
    subscriber.close()
    return mine, base


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def moving_table(api_url: str, redis_url: str, quick: bool) -> list[str]:
    """The table's markdown lines, printed as they are measured."""
    facts, writes, handoffs = (60, 400, 30) if quick else (300, 3000, 150)
    kv = redis.Redis.from_url(redis_url, db=11)
    kv.flushdb()
    model, handed = generate(api_url, kv, facts, writes, handoffs)
    answers = questions(api_url, kv, model, handed)
    mine, base = notice_latency(api_url, kv, 20 if quick else 100)
    kv.flushdb()
    labels = {
        "now": "what is X now",
        "then": "what was X when Y took over",
        "since": "what changed in X since Y's pin",
    }
    lines = [
        "### Facts that move",
        "",
        f"{len(AGENTS)} agents wrote {facts} facts, then {writes:,} more writes and "
        f"{len(handed)} handoffs pinning 3 facts each at the version they were at; "
        f"{sum(h.claimed_at is not None for h in handed)} receivers took theirs over midway "
        "(`tests/bench_moving.py`). Each cell: the share answered right, then the stale "
        "values served (an older value of X than the one asked for). The baseline is a "
        "last-write-wins store (Redis SET/GET, written with every write of the run).",
        "",
        "| question | Baton (right, stale served) | last-write-wins store |",
        "|---|---|---|",
        *(
            f"| {labels[kind]} | {baton.cell()} | {store.cell()} |"
            for kind, (baton, store) in answers.items()
        ),
        "",
        f"From a write's answer to its notice on the receiver's event stream ({len(mine)} "
        f"writes): p50 {percentile(mine, 0.5):.1f} ms, p95 {percentile(mine, 0.95):.1f} ms; "
        f"Redis pub/sub, one message to a waiting subscriber: p50 {percentile(base, 0.5):.2f} "
        f"ms, p95 {percentile(base, 0.95):.2f} ms. On one Redis the notifier's read waits "
        "for the next write's event, then the notice's event wakes the stream.",
    ]
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    """The table alone, on an embedded Valkey and a ``baton serve`` of its own."""
    work = Path(tempfile.mkdtemp(prefix="baton-moving-"))
    embedded = EmbeddedServer(work / "data")
    url = embedded.ensure_running()
    port = free_port()
    command = [sys.executable, "-m", "baton.server.cli", "serve", "--port", str(port)]
    api = start(command, work / "api.log", server_env(embedded))
    try:
        api_url = f"http://127.0.0.1:{port}"
        wait_for_http(api_url, api, work / "api.log")
        moving_table(api_url, url, quick="--quick" in sys.argv)
    finally:
        api.terminate()
        try:
            api.wait(10)
        except subprocess.TimeoutExpired:
            api.kill()
        embedded.stop()


if __name__ == "__main__":
    main()
