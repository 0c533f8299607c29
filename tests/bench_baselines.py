"""The baselines ``make bench`` measures Baton against, on the same stack and machine.

- ``http_app``: a minimal Litestar app whose handler does one Redis ``GET`` (B-http; and
  ``POST /put``, one ``SET`` of the decoded body, for a writer beside its reads), served
  exactly like ``baton serve`` (``python -m tests.bench_baselines http PORT``: the same
  ``baton.server.runtime.serving.serve``, so the same event loop and HTTP parser);
- ``noop_job``: an RQ job that only records when it started (B-rq);
- ``mcp_noop``: an MCP server with one no-op tool on the same SDK and stdio transport (B-mcp).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import msgspec
import redis
from litestar import Litestar, get, post
from redis.asyncio import Redis


def _redis_url() -> str:
    return os.environ["BATON_REDIS_URL"]


_client: Redis | None = None


@get("/get")
async def one_get() -> dict[str, object]:
    global _client
    if _client is None:
        _client = Redis.from_url(_redis_url())
    value = await _client.get("bench:baseline")
    return {"value": None if value is None else value.decode()}


@post("/put", status_code=201)
async def one_put(data: dict[str, Any]) -> dict[str, object]:
    """B-http's write: the body decoded and stored as it came, one Redis ``SET``."""
    global _client
    if _client is None:
        _client = Redis.from_url(_redis_url())
    await _client.set("bench:baseline:put", msgspec.json.encode(data))
    return {"ref": data.get("ref")}


http_app = Litestar(route_handlers=[one_get, one_put], logging_config=None)


def noop_job(key: str) -> None:
    """B-rq's job: note when it started, nothing else."""
    redis.Redis.from_url(_redis_url()).rpush(key, repr(time.time()))


def mcp_noop_server() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("baseline")

    @server.tool()
    async def noop(ref: str, value: object) -> dict[str, object]:
        """Does nothing: the cost of the SDK and the transport alone."""
        return {"ref": ref}

    return server


def mcp_http_app() -> Any:
    """B-mcp over streamable HTTP: the no-op server's app, for ``uvicorn --factory``."""
    return mcp_noop_server().streamable_http_app(streamable_http_path="/mcp")


if __name__ == "__main__" and sys.argv[1:] == ["mcp"]:
    mcp_noop_server().run()
elif __name__ == "__main__" and sys.argv[1:2] == ["http"]:
    from baton.server.runtime.serving import serve

    serve(http_app, host="127.0.0.1", port=int(sys.argv[2]))


def register_bench_agent() -> None:
    """The push scenario's handler: note when it started, then return (packet done)."""
    from baton.agents import agent

    @agent("bench")
    def started(resumed: object, baton: object) -> None:
        redis.Redis.from_url(_redis_url()).rpush("bench:push-starts", repr(time.time()))


if os.environ.get("BATON_BENCH_AGENT"):
    register_bench_agent()
