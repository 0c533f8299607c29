"""``baton demo --langgraph``: the scout/executor story as two LangGraph graphs in two
processes, sharing one Baton.

Both graphs keep their thread state in Baton (:class:`BatonSaver`) and their facts in Baton
records (:class:`BatonStore`). The scout's graph assesses the board, hands the work over in a
Baton packet that pins its assessments, then sees the board change and updates one. The
executor's graph, in another process, resumes the packet: Baton flags the pin that moved
(LangGraph's store alone would serve the newest value without a word), the graph re-reads
the current fact and acts on it. No LLM: every node is deterministic.

    python -m baton.demo.langgraph_story scout|executor URL NAMESPACE
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from baton.agents.langgraph import BatonSaver, BatonStore, item_ref
from baton.demo import board
from baton.demo.in_process import run_story
from baton.demo.transcript import bullet, section

SCOUT, EXECUTOR = "scout", "executor"
STALE_LINE = "stale: langgraph/listing/553/assessment was pinned at v1, now at v2"


def _listing(listing_id: int | str) -> tuple[str, str]:
    return ("listing", str(listing_id))


class ScoutState(TypedDict, total=False):
    pinned: list[str]
    packet: str


class ExecutorState(TypedDict, total=False):
    packet: str
    pinned: list[str]
    stale: list[str]
    dropped: list[str]
    drafted: list[str]


def scout_graph(saver: BatonSaver, store: BatonStore) -> Any:
    """assess → hand_off → recheck: the scout's afternoon."""

    def assess(state: ScoutState) -> ScoutState:
        section("scout graph: assess (BatonStore)")
        pinned = []
        for listing_id, listing in board.listings().items():
            value, confidence = board.assess(listing)
            store.put(_listing(listing_id), "assessment", {**value, "confidence": confidence})
            pinned.append(item_ref(_listing(listing_id), "assessment"))
            bullet(f"store.put(('listing', '{listing_id}'), 'assessment'): {value['verdict']}")
        return {"pinned": pinned}

    def hand_off(state: ScoutState) -> ScoutState:
        section("scout graph: hand off (a Baton packet pinning the assessments)")
        worth = [
            f"Draft an application for listing/{i}"
            for i, listing in board.listings().items()
            if board.assess(listing)[0]["verdict"] == "apply"
        ]
        packet = store.client.handoff(
            EXECUTOR,
            "Listings worth an application",
            next=worth,
            pins=[{"ref": ref} for ref in state["pinned"]],
        )
        bullet(f"handoff -> {EXECUTOR}: packet {packet.id}, {len(packet.pins)} pins")
        return {"packet": packet.id}

    def recheck(state: ScoutState) -> ScoutState:
        section("scout graph: the board changed after the handoff")
        value, confidence = board.assess(board.listings(after_edits=True)[553])
        store.put(_listing(553), "assessment", {**value, "confidence": confidence})
        bullet(f"store.put(('listing', '553'), 'assessment'): {value['verdict']}", tone="warn")
        return {}

    builder = StateGraph(ScoutState)
    builder.add_node("assess", assess)
    builder.add_node("hand_off", hand_off)
    builder.add_node("recheck", recheck)
    builder.add_edge(START, "assess")
    builder.add_edge("assess", "hand_off")
    builder.add_edge("hand_off", "recheck")
    builder.add_edge("recheck", END)
    return builder.compile(checkpointer=saver, store=store)


def executor_graph(saver: BatonSaver, store: BatonStore) -> Any:
    """resume → reread → act: the executor's turn."""

    def resume(state: ExecutorState) -> ExecutorState:
        section("executor graph: resume the packet (Baton flags what moved)")
        resumed = store.client.resume()
        assert resumed.packet is not None, "the packet did not arrive"
        bullet(f"resume: packet {resumed.packet.id}: {resumed.packet.summary}")
        stale = [
            f"stale: {s.ref} was pinned at v{s.pinned_version}, now at v{s.current_version}"
            for s in resumed.stale
        ]
        for line in stale:
            bullet(line, tone="warn")
        bullet("store.get alone would have served v2 without a word")
        return {
            "packet": resumed.packet.id,
            "pinned": [pin.ref for pin in resumed.pins],
            "stale": stale,
        }

    def reread(state: ExecutorState) -> ExecutorState:
        section("executor graph: re-read what moved, act on the current fact")
        dropped = []
        for line in state["stale"]:
            listing_id = line.split("/")[2]
            current = store.get(_listing(listing_id), "assessment")
            assert current is not None
            bullet(
                f"store.get(('listing', '{listing_id}'), 'assessment'): {current.value['verdict']}"
            )
            if current.value["verdict"] != "apply":
                dropped.append(listing_id)
                bullet(f"dropping listing/{listing_id}", tone="warn")
        return {"dropped": dropped}

    def act(state: ExecutorState) -> ExecutorState:
        section("executor graph: draft the applications, complete the packet")
        drafted = []
        for ref in state["pinned"]:
            listing_id = ref.split("/")[2]
            if listing_id in state["dropped"]:
                continue
            current = store.get(_listing(listing_id), "assessment")
            if current is None or current.value["verdict"] != "apply":
                continue
            store.put(_listing(listing_id), "application", {"status": "drafted", "based_on": ref})
            drafted.append(listing_id)
            bullet(f"store.put(('listing', '{listing_id}'), 'application'): drafted", "good")
        done = store.client.complete(state["packet"])
        bullet(f"complete: packet {done.id} is {done.state}")
        return {"drafted": drafted}

    builder = StateGraph(ExecutorState)
    builder.add_node("resume", resume)
    builder.add_node("reread", reread)
    builder.add_node("act", act)
    builder.add_edge(START, "resume")
    builder.add_edge("resume", "reread")
    builder.add_edge("reread", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver, store=store)


GRAPHS = {SCOUT: scout_graph, EXECUTOR: executor_graph}


def run_agent(role: str, url: str, namespace: str) -> None:
    """One graph, in this process, on thread ``role``."""
    saver = BatonSaver(url, agent=role, namespace=namespace)
    store = BatonStore(url, agent=role, namespace=namespace)
    GRAPHS[role](saver, store).invoke({}, {"configurable": {"thread_id": role}})
    saver.close()
    store.close()


def check(url: str, namespace: str) -> list[tuple[bool, str]]:
    """What must hold once both graphs ran, read back from Baton."""
    saver = BatonSaver(url, agent="demo-check", namespace=namespace)
    store = BatonStore(url, agent="demo-check", namespace=namespace)
    results: list[tuple[bool, str]] = []
    executor = saver.get_tuple({"configurable": {"thread_id": EXECUTOR, "checkpoint_ns": ""}})
    state = executor.checkpoint["channel_values"] if executor else {}
    results.append(
        (STALE_LINE in state.get("stale", []), "the executor graph was warned: " + STALE_LINE)
    )
    corrected = store.get(_listing(553), "assessment")
    verdict = corrected.value["verdict"] if corrected else None
    results.append((verdict == "maybe", f'listing 553 is "{verdict}" now'))
    results.append(
        (
            store.get(_listing(553), "application") is None,
            "no application for the dropped listing 553",
        )
    )
    results.append(
        (store.get(_listing(482), "application") is not None, "listing 482 has its application")
    )
    for role in (SCOUT, EXECUTOR):
        report = saver.verify(role)
        results.append(
            (
                report.ok and report.checkpoints > 0,
                f"thread {role}: {report.checkpoints} checkpoints verify",
            )
        )
    saver.close()
    store.close()
    return results


def run() -> int:
    """Run the story with Baton in this process and each graph in a process of its own;
    0 when every check passes."""

    def story(url: str, namespace: str) -> list[tuple[bool, str]]:
        for role in (SCOUT, EXECUTOR):
            subprocess.run(
                [sys.executable, "-m", "baton.demo.langgraph_story", role, url, namespace],
                check=True,
            )
        return check(url, namespace)

    return run_story(
        "demo-langgraph", "Baton demo through LangGraph: two graphs, two processes", story
    )


if __name__ == "__main__":
    run_agent(*sys.argv[1:4])
