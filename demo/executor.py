"""The executor agent: an RQ agent worker that knows nothing but what the packet says.

    baton agent run executor --module baton.demo.executor

For each packet it prints the reference transcript's five sections: picks the packet up
(and is told which pins went stale), looks at the board itself, re-reads what the stale
warning touched, acts on what still holds, and reports outcomes, closing the packet. Then
it hands a packet back to the scout.
"""

from __future__ import annotations

import json
from typing import Any

from baton.agents import BatonClient, agent
from baton.demo import board
from baton.demo.transcript import bullet, section
from baton.server.model.models import Resumed, StalePin

NAME = "executor"


def described(operation: dict[str, Any]) -> str:
    """One JSON Patch operation in words: ``budget_usd -> 2500``, ``notes removed``."""
    where = operation["path"].lstrip("/").replace("/", ".") or "the value"
    if operation["op"] == "remove":
        return f"{where} removed"
    return f"{where} -> {json.dumps(operation.get('value'))}"


def moved_by(stale: StalePin) -> str:
    """Who moved a pin and when: ``v2 by scout at 10:15:02``, ``v2-v5 by a, b at …``."""
    notes = stale.versions
    if not notes:
        return "forgotten since"
    versions = f"v{notes[0].version}" + (f"-v{notes[-1].version}" if len(notes) > 1 else "")
    authors = ", ".join(sorted({note.author for note in notes}))
    return f"{versions} by {authors} at {notes[-1].created_at[11:19]}"


@agent(NAME)
def execute(resumed: Resumed, baton: BatonClient) -> None:
    packet = resumed.packet
    assert packet is not None
    section("1. pick up whatever is waiting")
    bullet(f"packet {packet.id} from {packet.from_agent}: {packet.summary}")
    for step in packet.next:
        bullet(f"next: {step}")
    for question in packet.open:
        bullet(f"open: {question}")
    bullet(f"{len(resumed.pins)} pinned record versions arrived with the packet")
    for stale in resumed.stale:
        bullet(
            f"stale: {stale.ref} was pinned at v{stale.pinned_version}, "
            f"now at v{stale.current_version}",
            tone="warn",
        )
        changes = "; ".join(map(described, stale.patch or []))
        bullet(f"{moved_by(stale)}: {changes or 'too large to compare'}", tone="warn")

    section("2. look at the board before acting")
    observed = board.board()["source"]["observed_when_executor_returns"]
    bullet(
        f"fetched the board 60s after the scout's last request: HTTP {observed['status']}, "
        f"Retry-After {observed['retry_after_seconds']}s"
    )
    bullet("so the 60s backoff the scout noted is not enough", tone="warn")

    section("3. re-read anything the warning touched")
    stale_refs = {stale.ref for stale in resumed.stale}
    dropped: set[str] = set()
    for ref in sorted(stale_refs):
        current = baton.recall(ref)
        pinned = next(pin for pin in resumed.pins if pin.ref == ref)
        listing = ref.rsplit("/", 1)[0]
        change = []
        if current.value["budget_usd"] != pinned.value["budget_usd"]:
            change.append(f"budget edited down to ${current.value['budget_usd']}")
        added = current.value["applicants"] - pinned.value["applicants"]
        if added:
            change.append(f"{added} more applicants arrived")
        bullet(
            f'{listing} v{current.version} now says "{current.value["verdict"]}" '
            f"({' and '.join(change)})"
        )
        if current.value["verdict"] != "apply":
            dropped.add(ref)
            bullet(
                f"dropping {listing} - acting on the pinned v{pinned.version} would be wrong",
                tone="warn",
            )

    section("4. act on what still holds")
    acted: list[str] = []
    for pin in resumed.pins:
        if not pin.ref.startswith("listing/") or pin.ref in dropped:
            continue
        if pin.value["verdict"] != "apply":
            continue
        listing = pin.ref.rsplit("/", 1)[0]
        draft = baton.remember(
            f"{listing}/application",
            {
                "status": "drafted",
                "title": pin.value["title"],
                "budget_usd": pin.value["budget_usd"],
                "based_on": f"{pin.ref}@v{pin.version}",
            },
        )
        acted.append(pin.ref)
        bullet(
            f"drafted the application for {listing} ({pin.value['title'].lower()}, "
            f"${pin.value['budget_usd']}) -> {draft.ref} v{draft.version}"
        )

    section("5. report what actually happened")
    run = f"RUN-{packet.id}"
    for ref in acted:
        move = baton.record_outcome("success", run, refs=[ref], note="application drafted").moves[0]
        bullet(f"success on {ref}: confidence {move.before:.0%} -> {move.after:.0%}", tone="good")
    report = baton.record_outcome(
        "failure",
        run,
        refs=[board.SOURCE_REF],
        handoff_id=packet.id,
        note=f"still 429 after 60s; Retry-After {observed['retry_after_seconds']}s",
    )
    move = report.moves[0]
    bullet(f"failure on {move.ref}: confidence {move.before:.0%} -> {move.after:.0%}", tone="bad")
    assert report.handoff is not None
    bullet(f"packet {packet.id} is {report.handoff.state}")

    back = baton.handoff(
        packet.from_agent,
        f"Applied to {len(acted)} listing(s); dropped {len(dropped)}; the board's penalty "
        f"window is {observed['retry_after_seconds']}s",
        next=[f"Re-crawl boards-example with a {observed['retry_after_seconds']}s backoff"],
        pins=[{"ref": ref} for ref in [*acted, board.SOURCE_REF]],
    )
    bullet(f"handed back to {packet.from_agent}: packet {back.id}")
