"""MCP's JSON-RPC messages read without the SDK (standard library only, so ``baton mcp``
can answer before the SDK has loaded): a request's id, the version a handshake agrees."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def request_id(message: Any) -> int | str | None:
    """The id of a JSON-RPC 2.0 request, or None when ``message`` is not one."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    id = message.get("id")
    return None if isinstance(id, bool) or not isinstance(id, (int, str)) else id


def handshake_version(message: Any, versions: Sequence[str]) -> str | None:
    """The protocol version the SDK's server agrees to when ``message`` is a well-formed
    ``initialize`` (the one asked for when it knows it, else its newest of ``versions``),
    or None when it is not one."""
    params = message.get("params") if isinstance(message, dict) else None
    if not (
        request_id(message) is not None
        and message.get("method") == "initialize"
        and isinstance(params, dict)
        and isinstance(params.get("protocolVersion"), str)
        and isinstance(params.get("capabilities"), dict)
        and isinstance(params.get("clientInfo"), dict)
        and isinstance(params["clientInfo"].get("name"), str)
        and isinstance(params["clientInfo"].get("version"), str)
    ):
        return None
    asked: str = params["protocolVersion"]
    return asked if asked in versions else versions[-1]
