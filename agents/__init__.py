"""Agents: the runtime that runs an agent handler on its own queue, and the Python client."""
