"""The scout agent: crawls the fixture board, writes assessments, hands over to the executor,
then corrects one assessment after the handoff. Run by the demo as its own process.

    baton demo scout crawl   --url URL --namespace NS
    baton demo scout receive --url URL --namespace NS

Facts are written through the Python client (REST); the correction goes through the MCP
tools over streamable HTTP, so the demo shows both surfaces on one memory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Sequence

import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from baton.agents import BatonClient
from baton.demo import board
from baton.demo.transcript import bullet, section
from baton.server.model.endpoint import token_of

AGENT = "scout"
RECEIVER = "executor"
SUMMARY = "Two listings worth an application, one source caveat"


def _money(listing: dict[str, object]) -> str:
    return f"${listing['budget_usd']}"


def crawl(url: str, namespace: str) -> None:
    section("scout: crawl the board, hand over")
    listings = board.listings()
    rate_limit = board.board()["source"]["rate_limit"]
    bullet(f"crawled {board.board()['url']}: {len(listings)} listings, 1 source note")
    with BatonClient(url, agent=AGENT, namespace=namespace) as baton:
        baton.start_session()
        for listing_id, listing in listings.items():
            value, confidence = board.assess(listing)
            written = baton.remember(
                board.assessment_ref(listing_id), value, confidence=confidence, tags=["listing"]
            )
            bullet(
                f"{written.ref} v{written.version}: {value['verdict']} "
                f"({listing['title']}, {_money(listing)}, {confidence:.0%} sure)"
            )
        written = baton.remember(
            board.SOURCE_REF,
            {
                "backoff_seconds": rate_limit["documented_backoff_seconds"],
                "note": rate_limit["note"],
            },
            confidence=0.60,
            tags=["source"],
        )
        bullet(
            f"{written.ref} v{written.version}: back off "
            f"{rate_limit['documented_backoff_seconds']}s after a 429 (60% sure)"
        )

        worth = [
            (i, listing)
            for i, listing in listings.items()
            if board.assess(listing)[0]["verdict"] == "apply"
        ]
        # Held until this session ends: the executor (always on, in compose) cannot act on
        # the packet while the scout is still correcting what it pinned.
        packet = baton.handoff(
            RECEIVER,
            SUMMARY,
            next=[
                f"Draft an application for listing/{i} ({item['title'].lower()}, {_money(item)})"
                for i, item in worth
            ],
            open=["Is the 60s backoff enough, or does the board keep a longer penalty window?"],
            deliver="session_end",
        )
        bullet(
            f"packet {packet.id} -> {RECEIVER}: {packet.summary} "
            f"({len(packet.pins)} pinned record versions, over REST, held until this "
            "session ends)"
        )
        asyncio.run(correct_after_handoff(url, namespace))
        baton.end_session("crawled the board, handed over, corrected listing/553")
        bullet(f"session ended: packet {packet.id} is claimable now")


async def correct_after_handoff(url: str, namespace: str) -> None:
    """The board changed after the handoff: re-assess 553 through the MCP tools over HTTP."""
    edited = board.listings(after_edits=True)[553]
    value, confidence = board.assess(edited)
    token = token_of(os.environ)
    headers = {"X-Baton-Agent": AGENT, "X-Baton-Namespace": namespace}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(headers=headers) as http:
        # mcp annotates http_client as httpx2.AsyncClient (the httpx fork it is built on); an
        # httpx.AsyncClient works too: the transport only calls what both clients share.
        transport = streamable_http_client(f"{url}/mcp", http_client=http)  # type: ignore[arg-type]
        async with Client(transport) as mcp:
            result = await mcp.call_tool(
                "remember",
                {
                    "ref": board.assessment_ref(553),
                    "value": value,
                    "confidence": confidence,
                    "tags": ["listing"],
                },
            )
    if result.is_error or result.structured_content is None:
        raise SystemExit(f"scout: the correction failed: {result.content}")
    version = result.structured_content["version"]
    bullet(
        f"after the handoff, listing/553 changed: budget {_money(edited)}, "
        f"{edited['applicants']} applicants",
        tone="warn",
    )
    bullet(f"{board.assessment_ref(553)} v{version}: {value['verdict']} (over MCP)")


def receive(url: str, namespace: str) -> None:
    section("scout: what came back")
    with BatonClient(url, agent=AGENT, namespace=namespace) as baton:
        resumed = baton.resume()
        if resumed.packet is None:
            bullet("nothing came back", tone="bad")
            raise SystemExit(1)
        bullet(
            f"packet {resumed.packet.id} from {resumed.packet.from_agent}: {resumed.packet.summary}"
        )
        for step in resumed.packet.next:
            bullet(f"next: {step}")
        baton.complete(resumed.packet.id)
        bullet(f"packet {resumed.packet.id} done")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="baton demo scout")
    parser.add_argument("phase", choices=["crawl", "receive"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", default="default")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    (crawl if args.phase == "crawl" else receive)(args.url, args.namespace)
    return 0
