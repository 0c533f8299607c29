"""The agent runtime: an agent is a named handler that an RQ worker runs for every packet
handed to it.

    from baton.agents import agent

    @agent("executor")
    def execute(resumed: Resumed, baton: BatonClient) -> None:
        ...  # resumed.packet, resumed.pins, resumed.stale; baton.remember(...), ...

Returning completes the packet. Raising makes RQ retry the delivery (with backoff); once the
tries are used up the packet is ``failed`` with the error and the job stays in RQ's failed
registry. ``baton agent run executor --module your.module`` starts the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from baton.agents.client import BatonClient
from baton.server.model.models import Resumed
from baton.server.model.validation import check_agent

Handler: TypeAlias = Callable[[Resumed, BatonClient], object]

_handlers: dict[str, Handler] = {}


def agent(name: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of agent ``name``."""
    check_agent(name)

    def register(handler: Handler) -> Handler:
        if name in _handlers and _handlers[name] is not handler:
            raise ValueError(f"agent {name!r} already has a handler: {_handlers[name]!r}")
        _handlers[name] = handler
        return handler

    return register


def handler_for(name: str) -> Handler | None:
    return _handlers.get(name)


def registered() -> list[str]:
    return sorted(_handlers)
