"""The fixture job board the demo agents crawl (``demo/fixtures/board.json``)."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

SOURCE_REF = "source/boards-example/rate-limit"


@cache
def board() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (files("baton.demo") / "fixtures" / "board.json").read_text()
    )
    return loaded


def listings(*, after_edits: bool = False) -> dict[int, dict[str, Any]]:
    """The listings by id; with ``after_edits``, as the board shows them later on."""
    found = {listing["id"]: dict(listing) for listing in board()["listings"]}
    if after_edits:
        for listing_id, edit in board()["edits_after_first_crawl"].items():
            listing = found[int(listing_id)]
            listing["budget_usd"] = edit["budget_usd"]
            listing["applicants"] += edit["applicants_added"]
    return found


def assess(listing: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The scout's rule of thumb: a verdict on one listing and how sure it is."""
    budget, applicants = listing["budget_usd"], listing["applicants"]
    if budget >= 800 and applicants < 10:
        verdict, confidence = "apply", 0.80
    elif budget >= 500 and applicants < 10:
        verdict, confidence = "apply", 0.70
    elif budget >= 300:
        verdict, confidence = "maybe", 0.50
    else:
        verdict, confidence = "skip", 0.90
    value = {
        "verdict": verdict,
        "title": listing["title"],
        "budget_usd": budget,
        "applicants": applicants,
    }
    return value, confidence


def assessment_ref(listing_id: int) -> str:
    return f"listing/{listing_id}/assessment"
