"""``make bench``'s MCP rows: a start no host drops, calls over stdio and streamable HTTP, each
next to a baseline measured in the same run.

- start: ``baton mcp`` as a host starts it (spawn, ``initialize``, ``tools/list``, the first
  call) next to the MCP reference memory server (``@modelcontextprotocol/server-memory``,
  pinned in tests/mcp-reference) started the same way, in turns;
- stdio at an empty store: a write and a read through Baton's tools next to the reference
  server's (``create_entities``, ``open_nodes``), each in a fresh store, in turns;
- stdio and HTTP, the SDK's own cost: ``remember`` next to the SDK's minimal server's no-op
  tool (tests/bench_baselines.py), over stdio, and over streamable HTTP both on the
  initialize handshake (what hosts speak) and on the stateless 2026 protocol.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from baton.server.mcp.mcp_server import initialize_request
from tests.benchkit import Measure, Row, fmt, interleaved, start, wait_for_port
from tests.conftest import REPO, free_port

REFERENCE = (
    REPO / "tests/mcp-reference/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
)
BATON_MCP = [str(Path(sys.executable).with_name("baton")), "mcp"]  # as a host starts it
START_TARGET_MS = 300.0  # initialize answered within this, median
HTTP_TARGET = 2.0  # a call over HTTP within this many times the SDK's minimal server's p50
INITIALIZE = initialize_request("2025-06-18")
LISTING = (
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'
)


def reference_command() -> list[str]:
    if not REFERENCE.exists():
        raise SystemExit(f"make bench: {REFERENCE} is missing: run `make npm-clients`")
    return ["node", str(REFERENCE)]


def started(command: list[str], env: dict[str, str], first_call: dict[str, Any]) -> list[float]:
    """Seconds from spawning ``command`` to its answers: ``initialize``, ``tools/list``, and
    ``first_call`` (a ``tools/call``'s params)."""
    begun = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None
    times = []
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": first_call}
    for request in (json.dumps(INITIALIZE).encode() + b"\n", LISTING, json.dumps(call).encode()):
        process.stdin.write(request + (b"" if request.endswith(b"\n") else b"\n"))
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        assert "result" in answer and not answer["result"].get("isError"), answer
        times.append(time.perf_counter() - begun)
    process.stdin.close()
    process.wait(30)
    return times


def start_rows(env: dict[str, str], runs: int, work: Path) -> list[Row]:
    """``baton mcp`` and the reference server started ``runs`` times each, in turns."""
    baton_env = {**env, "AGENT_ID": "bench", "BATON_NAMESPACE": "bench-start"}
    reference_env = {**env, "MEMORY_FILE_PATH": str(work / "reference-start.jsonl")}
    measures = {
        (who, what): Measure(f"{who} {what}")
        for who in ("baton", "reference")
        for what in ("initialize", "tools/list", "first call")
    }
    for _ in range(runs):
        for who, command, run_env, call in (
            ("baton", BATON_MCP, baton_env, {"name": "memory_stats", "arguments": {}}),
            ("reference", reference_command(), reference_env, {"name": "read_graph"}),
        ):
            for what, seconds in zip(
                ("initialize", "tools/list", "first call"),
                started(command, run_env, call),
                strict=True,
            ):
                measures[(who, what)].latencies.append(seconds)
    rows = []
    for what in ("initialize", "tools/list", "first call"):
        mine, base = measures[("baton", what)], measures[("reference", what)]
        ratio = mine.pct(0.5) / base.pct(0.5)
        target, met = "(reported)", None
        if what == "initialize":
            target, met = f"p50 ≤ {START_TARGET_MS:.0f} ms", mine.pct(0.5) <= START_TARGET_MS
        print(f"start, {what}: baton {fmt(mine)}; reference {fmt(base)}")
        rows.append(
            Row(
                f"`baton mcp` from spawn to its {what} answer ({runs} starts)",
                fmt(mine),
                f"reference memory server: {fmt(base)}",
                f"{ratio:.2f}",
                target,
                met,
                "process wall time",
            )
        )
    return rows


def tool_call(client: Client, tool: str, arguments: Callable[[int], dict[str, Any]]) -> Any:
    async def call(i: int) -> None:
        result = await client.call_tool(tool, arguments(i))
        assert not result.is_error, result.content

    return call


async def empty_store_rows(env: dict[str, str], calls: int, work: Path) -> list[Row]:
    """A write and a read over stdio in a fresh store: Baton's ``remember``/``recall`` next
    to the reference server's ``create_entities``/``open_nodes``, in turns; and the SDK's
    minimal server's no-op in the same turns, the floor of any server on the Python SDK."""
    baton = StdioServerParameters(
        command=BATON_MCP[0],
        args=BATON_MCP[1:],
        env={**env, "AGENT_ID": "bench", "BATON_NAMESPACE": "bench-empty"},
    )
    reference = StdioServerParameters(
        command="node",
        args=reference_command()[1:],
        env={**env, "MEMORY_FILE_PATH": str(work / "reference-empty.jsonl")},
    )
    floor = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.bench_baselines", "mcp"], env=env, cwd=str(REPO)
    )
    entity = {"entityType": "fact", "observations": ["an observation"]}
    async with (
        Client(baton, mode="legacy") as mine,
        Client(reference, mode="legacy") as base,
        Client(floor, mode="legacy") as noop,
    ):
        measured = await interleaved(
            {
                "baton write": tool_call(
                    mine, "remember", lambda i: {"ref": f"fact/{i}", "value": "an observation"}
                ),
                "reference write": tool_call(
                    base, "create_entities", lambda i: {"entities": [{"name": f"f{i}", **entity}]}
                ),
                "baton read": tool_call(mine, "recall", lambda i: {"ref": f"fact/{i}"}),
                "reference read": tool_call(base, "open_nodes", lambda i: {"names": [f"f{i}"]}),
                "SDK no-op": tool_call(noop, "noop", lambda i: {"ref": "x", "value": i}),
            },
            calls,
        )
    rows = []
    for what, tools in (
        ("write", "`remember` vs `create_entities`"),
        ("read", "`recall` vs `open_nodes`"),
    ):
        mine_measure, base_measure = measured[f"baton {what}"], measured[f"reference {what}"]
        ratio = mine_measure.pct(0.5) / base_measure.pct(0.5)
        print(f"stdio {what} at an empty store: ratio {ratio:.2f}")
        rows.append(
            Row(
                f"MCP {what} over stdio from an empty store (p50; {tools})",
                fmt(mine_measure),
                f"reference memory server: {fmt(base_measure)}; the SDK's minimal server's "
                f"no-op in the same turns: p50 {measured['SDK no-op'].pct(0.5):.2f} ms",
                f"{ratio:.2f}",
                "≤ 1.0 × p50",
                ratio <= 1.0,
            )
        )
    return rows


async def sdk_cost_rows(
    env: dict[str, str], api_url: str, headers: dict[str, str], calls: int, work: Path
) -> tuple[list[Row], list[subprocess.Popen[bytes]]]:
    """``remember`` next to the SDK's minimal server's no-op tool: over stdio, and over
    streamable HTTP on both protocols. Also returns the processes it left running."""
    remember = {"ref": "m/0", "value": 0}

    def calling(client: Client, tool: str) -> Callable[[int], Awaitable[object]]:
        return tool_call(client, tool, lambda i: {**remember, "ref": f"m/{i % 50}", "value": i})

    rows = []
    baton_stdio = StdioServerParameters(
        command=sys.executable,
        args=["-m", "baton.server.cli", "mcp"],
        env={**env, "AGENT_ID": "bench"},
        cwd=str(REPO),
    )
    noop_stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.bench_baselines", "mcp"], env=env, cwd=str(REPO)
    )
    async with Client(noop_stdio) as noop, Client(baton_stdio) as baton:
        measured = await interleaved(
            {"B-mcp (stdio)": calling(noop, "noop"), "MCP remember": calling(baton, "remember")},
            calls,
        )
    rows.append(ratio_row("MCP remember over stdio (p50)", measured, "MCP remember", "stdio"))

    port = free_port()
    log = work / "mcp-http.log"
    noop_server = start(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "tests.bench_baselines:mcp_http_app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        log,
        env,
    )
    wait_for_port(port, noop_server, log)
    for mode, label in (("legacy", "initialize handshake"), ("auto", "stateless 2026 protocol")):
        async with (
            httpx.AsyncClient(headers=headers) as noop_http,
            httpx.AsyncClient(headers=headers) as baton_http,
            Client(
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=noop_http),
                mode=mode,
            ) as noop,
            Client(
                streamable_http_client(f"{api_url}/mcp", http_client=baton_http), mode=mode
            ) as baton,
        ):
            measured = await interleaved(
                {"B-mcp (HTTP)": calling(noop, "noop"), "MCP remember": calling(baton, "remember")},
                calls,
            )
        rows.append(
            ratio_row(
                f"MCP remember over streamable HTTP, {label} (p50)",
                measured,
                "MCP remember",
                "HTTP",
            )
        )
    return rows, [noop_server]


def ratio_row(scenario: str, measured: dict[str, Measure], mine: str, transport: str) -> Row:
    base = measured[f"B-mcp ({transport})"]
    ratio = measured[mine].pct(0.5) / base.pct(0.5)
    print(f"{scenario}: ratio {ratio:.2f}")
    return Row(
        scenario,
        fmt(measured[mine]),
        f"SDK's minimal server: {fmt(base)}",
        f"{ratio:.2f}",
        f"≤ {HTTP_TARGET} × p50",
        ratio <= HTTP_TARGET,
    )
