"""Agents: the runtime that runs an agent's handler on its own queue, and the Python client.

The names are loaded on first use, so that ``baton hook`` (``baton.agents.hook``, run on
every tool use of a coding agent) does not pay for importing the HTTP client stack.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # not typing's: importing typing costs every `baton hook` call ~3 ms
if TYPE_CHECKING:  # what __getattr__ loads, for type checkers
    from typing import Any

    from baton.agents.agent_runtime import agent
    from baton.agents.client import (
        AsyncBatonClient,
        BatonAPIError,
        BatonClient,
        ConflictError,
        ForbiddenError,
        InvalidInputError,
        NotFoundError,
        TooLargeError,
        UnauthorizedError,
        UnavailableError,
        UnreachableError,
    )
    from baton.server.model.models import Resumed

__all__ = [
    "AsyncBatonClient",
    "BatonAPIError",
    "BatonClient",
    "ConflictError",
    "ForbiddenError",
    "InvalidInputError",
    "NotFoundError",
    "Resumed",
    "TooLargeError",
    "UnauthorizedError",
    "UnavailableError",
    "UnreachableError",
    "agent",
]
# Where each name lives: the handler registry, the client (with its errors), or the wire
# types (what a handler is given).
_HOMES = dict.fromkeys(__all__, "baton.agents.client") | {
    "agent": "baton.agents.agent_runtime",
    "Resumed": "baton.server.model.models",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'baton.agents' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
