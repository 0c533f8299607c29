"""How outcomes move confidence. The multipliers live in this one table.

success: ``c' = c + 0.2·(1 − c)`` closes a fifth of the gap to 1 (0.80 → 0.84);
failure: ``c' = 0.65·c`` shrinks it proportionally (0.60 → 0.39).
Results stay strictly inside (0, 1): repeated evidence approaches a bound but never pins there.
"""

from __future__ import annotations

from typing import Final, Literal

Outcome = Literal["success", "failure"]

SUCCESS_GAP_CLOSED: Final = 0.2
FAILURE_KEPT: Final = 0.65
FLOOR: Final = 1e-6
CEILING: Final = 1.0 - 1e-6


def moved(confidence: float, outcome: Outcome) -> float:
    """The confidence after one outcome; never lowered by a success nor raised by a failure."""
    if outcome == "success":
        return max(confidence, min(confidence + SUCCESS_GAP_CLOSED * (1.0 - confidence), CEILING))
    return min(confidence, max(confidence * FAILURE_KEPT, FLOOR))
