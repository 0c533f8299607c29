"""What a caller is told when an operation fails, on every surface.

One translation of Baton's own errors and Redis's failures into a :class:`Failure` (status,
title, detail and the fields at fault), and its three renderings: problem+json on REST
(``baton.server.api.problems`` builds the response), the text of an MCP ``isError`` result,
and agentmemory's ``{"error": …}`` with the statuses its clients expect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis.exceptions

from baton.server.model.errors import BatonError, InvalidInput
from baton.server.runtime.connection import write_refused

UNEXPECTED = "an unexpected error occurred; it has been logged"
UNREACHABLE = "Baton cannot reach its Redis server right now; retry shortly"
# Redis out of reach for now: down, timing out, or a cluster moving slots or failing over.
UNREACHABLE_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    redis.exceptions.SlotNotCoveredError,
)
# agentmemory answers a caller's mistakes with 400, except these (its clients tell them apart).
AGENTMEMORY_KEEPS = frozenset({403, 404})


@dataclass(frozen=True)
class Failure:
    """A failed operation as its caller sees it. ``kind`` says where it came from: the
    caller (``caller``), Redis out of reach (``unreachable``), Redis refusing writes
    (``refused``), Baton unable to serve it for now (``unavailable``), or a bug
    (``unexpected``: logged, details withheld)."""

    status: int
    title: str
    detail: str
    kind: str
    extra: dict[str, Any] = field(default_factory=dict)


def failure_of(error: Exception) -> Failure:
    """The translation of ``error``."""
    if isinstance(error, BatonError):
        return Failure(error.status_code, error.title, error.detail, error.kind, error.extra)
    if isinstance(error, UNREACHABLE_ERRORS):
        return Failure(503, "Store unavailable", UNREACHABLE, "unreachable")
    if (
        isinstance(error, redis.exceptions.ResponseError)
        and (refused := write_refused(error)) is not None
    ):
        status, detail = refused
        title = "Insufficient storage" if status == 507 else "Store unavailable"
        return Failure(status, title, detail, "refused")
    return Failure(500, "Internal error", UNEXPECTED, "unexpected")


def tool_error_text(failure: Failure) -> str:
    """The text of an MCP ``isError`` result."""
    return f"{failure.title}: {failure.detail}"


def agentmemory_error(error: Exception, failure: Failure) -> tuple[int, str]:
    """agentmemory's status and ``error`` text: a caller's mistake is 400 (403 and 404
    kept), with the message its own server words (``limit must be …``, not
    ``limit: limit must be …``); Redis's failures and bugs keep their status."""
    if failure.kind != "caller":
        return failure.status, failure.detail
    detail = failure.detail
    if isinstance(error, InvalidInput) and detail.startswith(f"{error.field}: {error.field} "):
        detail = detail.removeprefix(f"{error.field}: ")
    return (failure.status if failure.status in AGENTMEMORY_KEEPS else 400), detail
