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
    from baton.agents.client import AsyncBatonClient, BatonAPIError, BatonClient

__all__ = ["AsyncBatonClient", "BatonAPIError", "BatonClient", "agent"]
_HOMES = {
    "AsyncBatonClient": "client",
    "BatonAPIError": "client",
    "BatonClient": "client",
    "agent": "agent_runtime",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'baton.agents' has no attribute {name!r}")
    return getattr(import_module(f"baton.agents.{_HOMES[name]}"), name)
