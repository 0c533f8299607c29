"""How outcomes move confidence. The multipliers live in this one table.

success: ``c' = c + 0.2·(1 − c)`` closes a fifth of the gap to 1 (0.80 → 0.84);
failure: ``c' = 0.65·c`` shrinks it proportionally (0.60 → 0.39).
Results stay strictly inside (0, 1), between :data:`FLOOR` and :data:`CEILING`, whatever the
confidence started at: repeated evidence approaches a bound but never sits on it (a fact
written with confidence 1.0 comes to :data:`CEILING` after a success; 0.0 to :data:`FLOOR`
after a failure).
"""

from __future__ import annotations

from typing import Final, Literal

Outcome = Literal["success", "failure"]

SUCCESS_GAP_CLOSED: Final = 0.2
FAILURE_KEPT: Final = 0.65
FLOOR: Final = 1e-6
CEILING: Final = 1.0 - 1e-6


def moved(confidence: float, outcome: Outcome) -> float:
    """The confidence after one outcome, inside [FLOOR, CEILING]; within those bounds a
    success never lowers it and a failure never raises it."""
    if outcome == "success":
        return min(max(confidence, confidence + SUCCESS_GAP_CLOSED * (1.0 - confidence)), CEILING)
    return max(min(confidence, confidence * FAILURE_KEPT), FLOOR)
