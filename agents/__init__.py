"""Agents: the runtime that runs an agent's handler on its own queue, and the Python client."""

from baton.agents.client import AsyncBatonClient, BatonAPIError, BatonClient
from baton.agents.runtime import agent

__all__ = ["AsyncBatonClient", "BatonAPIError", "BatonClient", "agent"]
