"""``baton demo --amfs``: the scout/executor story told through AMFS's API on Baton.

Both agents keep their facts with AMFS's ``AgentMemory`` on :class:`BatonAdapter`; the
handoff, which AMFS has no word for, goes through Baton's client. So does the stale pin: AMFS
reads the newest version of an entry and nothing in its API says "you were told about v1,
it is at v2 now". Baton's ``resume`` says it, and the executor then reads both versions
through AMFS (``read_at_version``) to decide. Runs Baton in this process, on a namespace of
its own, and checks the end state like ``baton demo``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amfs import AgentMemory
from amfs_core.models import OutcomeType

from baton.agents import BatonClient
from baton.agents.amfs import BatonAdapter
from baton.demo import board
from baton.demo.executor import described, moved_by
from baton.demo.in_process import run_story
from baton.demo.transcript import bullet, section

SCOUT, EXECUTOR = "scout", "executor"
STALE_LINE = "stale: listing/553/assessment was pinned at v1, now at v2"


def _entity(ref: str) -> tuple[str, str]:
    entity_path, _, key = ref.rpartition("/")
    return entity_path, key


def scout_crawls(url: str, namespace: str) -> None:
    section("scout: crawl the board with AMFS, hand over with Baton")
    adapter = BatonAdapter(url, agent=SCOUT, namespace=namespace)
    written: list[str] = []
    with AgentMemory(SCOUT, adapter=adapter) as memory:
        for listing_id, listing in board.listings().items():
            value, confidence = board.assess(listing)
            entry = memory.write(
                *_entity(board.assessment_ref(listing_id)), value, confidence=confidence
            )
            written.append(board.assessment_ref(listing_id))
            bullet(
                f"memory.write({entry.entity_path!r}, {entry.key!r}) -> v{entry.version}: "
                f"{value['verdict']} ({confidence:.0%} sure)"
            )
        rate_limit = board.board()["source"]["rate_limit"]
        memory.write(
            *_entity(board.SOURCE_REF),
            {"backoff_seconds": rate_limit["documented_backoff_seconds"]},
            confidence=0.60,
        )
        written.append(board.SOURCE_REF)
        bullet(f"memory.write for {board.SOURCE_REF}: back off 60s after a 429 (60% sure)")
    with BatonClient(url, agent=SCOUT, namespace=namespace) as baton:
        worth = [
            f"Draft an application for listing/{i}"
            for i, listing in board.listings().items()
            if board.assess(listing)[0]["verdict"] == "apply"
        ]
        packet = baton.handoff(
            EXECUTOR,
            "Two listings worth an application, one source caveat",
            next=worth,
            pins=[{"ref": ref} for ref in written],
        )
        bullet(f"baton.handoff -> {EXECUTOR}: packet {packet.id}, {len(packet.pins)} pins")
    with AgentMemory(SCOUT, adapter=adapter) as memory:
        value, confidence = board.assess(board.listings(after_edits=True)[553])
        entry = memory.write(*_entity(board.assessment_ref(553)), value, confidence=confidence)
        bullet(
            f"after the handoff the board changed: memory.write -> listing/553 "
            f"v{entry.version}: {value['verdict']}",
            tone="warn",
        )
    adapter.close()


def executor_acts(url: str, namespace: str) -> list[str]:
    """The executor's turn; returns the stale lines it was shown."""
    adapter = BatonAdapter(url, agent=EXECUTOR, namespace=namespace)
    with (
        BatonClient(url, agent=EXECUTOR, namespace=namespace) as baton,
        AgentMemory(EXECUTOR, adapter=adapter) as memory,
    ):
        section("executor: 1. pick up the packet (Baton)")
        resumed = baton.resume()
        packet = resumed.packet
        assert packet is not None, "the packet did not arrive"
        bullet(f"baton.resume: packet {packet.id} from {packet.from_agent}: {packet.summary}")
        warned = [
            f"stale: {stale.ref} was pinned at v{stale.pinned_version}, "
            f"now at v{stale.current_version}"
            for stale in resumed.stale
        ]
        for line, stale in zip(warned, resumed.stale, strict=True):
            bullet(line, tone="warn")
            changes = "; ".join(map(described, stale.patch or []))
            bullet(f"{moved_by(stale)}: {changes or 'too large to compare'}", tone="warn")
        bullet("memory.read would have served v2 without a word: AMFS has no pins")

        section("executor: 2. re-read what moved, both versions through AMFS")
        dropped: set[str] = set()
        for stale in resumed.stale:
            pinned = adapter.read_at_version(*_entity(stale.ref), stale.pinned_version)
            current = memory.read(*_entity(stale.ref))
            assert pinned is not None and current is not None
            bullet(
                f"adapter.read_at_version v{pinned.version}: {pinned.value['verdict']}; "
                f"memory.read v{current.version}: {current.value['verdict']}"
            )
            if current.value["verdict"] != "apply":
                dropped.add(stale.ref)
                bullet(f"dropping {stale.ref.rsplit('/', 1)[0]}", tone="warn")

        section("executor: 3. act on what still holds, report with AMFS")
        acted = []
        for pin in resumed.pins:
            if not pin.ref.startswith("listing/") or pin.ref in dropped:
                continue
            entry = memory.read(*_entity(pin.ref))
            if entry is None or entry.value["verdict"] != "apply":
                continue
            listing = pin.ref.rsplit("/", 1)[0]
            memory.write(listing, "application", {"status": "drafted", "based_on": pin.ref})
            acted.append(pin.ref)
            bullet(f"memory.write({listing!r}, 'application'): drafted")
        run = f"RUN-{packet.id}"
        outcomes = [(ref, OutcomeType.SUCCESS) for ref in acted]
        for ref, outcome in [*outcomes, (board.SOURCE_REF, OutcomeType.FAILURE)]:
            memory.commit_outcome(run, outcome, [ref])
            now = memory.read(*_entity(ref))
            assert now is not None
            tone = "good" if outcome == OutcomeType.SUCCESS else "bad"
            bullet(f"commit_outcome {outcome.value} on {ref}: {now.confidence:.0%}", tone)
        done = baton.complete(packet.id)
        bullet(f"baton.complete: packet {packet.id} is {done.state}")
    adapter.close()
    return warned


def check(url: str, namespace: str, warned: list[str]) -> list[tuple[bool, str]]:
    """What must hold once the story has run, read back through AMFS."""
    results: list[tuple[bool, str]] = []
    adapter = BatonAdapter(url, agent="demo-check", namespace=namespace)
    read: Callable[[str], Any] = lambda ref: adapter.read(*_entity(ref))  # noqa: E731
    corrected = read(board.assessment_ref(553))
    results.append(
        (
            corrected.version == 2 and corrected.value["verdict"] == "maybe",
            f'listing/553/assessment is at v{corrected.version}, "{corrected.value["verdict"]}"',
        )
    )
    results.append((STALE_LINE in warned, "the executor was warned: " + STALE_LINE))
    for ref, expected in ((board.assessment_ref(482), 0.84), (board.SOURCE_REF, 0.39)):
        confidence = read(ref).confidence
        results.append((round(confidence, 2) == expected, f"{ref} confidence is {confidence:.2f}"))
    results.append(
        (read("listing/553/application") is None, "no application for the dropped listing/553")
    )
    results.append((read("listing/482/application") is not None, "listing/482 application"))
    report = adapter.verify_integrity()
    broken = len(report["corrupted"]) + len(report["chain_breaks"])
    results.append((broken == 0, f"adapter.verify_integrity: {broken} broken"))
    adapter.close()
    return results


def run() -> int:
    """Run the story in this process; 0 when every check passes."""

    def story(url: str, namespace: str) -> list[tuple[bool, str]]:
        scout_crawls(url, namespace)
        return check(url, namespace, executor_acts(url, namespace))

    return run_story(
        "demo-amfs", "Baton demo through AMFS: two AgentMemory agents, one Baton", story
    )
