"""One log format: every line a Baton process logs, its own and uvicorn's, RQ's and the MCP
SDK's, comes out in the format BATON_LOG_FORMAT (or --log-format) names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import REPO, free_port, wait_for_http


def served_lines(redis_url: str, log: Path, *options: str) -> list[str]:
    """What `baton [options] serve` wrote on stderr from start to stop, a request between."""
    port = free_port()
    environment = {**os.environ, "BATON_REDIS_URL": redis_url, "BATON_CHECKPOINT_INTERVAL": "off"}
    environment.pop("BATON_LOG_FORMAT", None)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "baton.server.cli", *options, "serve", "--port", str(port)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=out,
            cwd=REPO,
        )
    try:
        wait_for_http(f"http://127.0.0.1:{port}", process, log)  # type: ignore[arg-type]
        httpx.get(f"http://127.0.0.1:{port}/v1/records/no/such", headers={"X-Baton-Agent": "a"})
    finally:
        process.terminate()
        process.wait(10)
    return [line for line in log.read_text().splitlines() if line.strip()]


def test_a_server_off_a_terminal_logs_json_lines_only(redis_url: str, tmp_path: Path) -> None:
    """Not on a terminal, `baton serve` writes nothing but JSON lines on stderr: its own
    events (serving, the 404's request line), uvicorn's and the MCP SDK's, each naming its
    logger."""
    lines = served_lines(redis_url, tmp_path / "serve.log")
    events = [json.loads(line) for line in lines]  # a line that is not JSON fails here
    loggers = {event.get("logger") for event in events}
    assert {"uvicorn.error", "mcp.server.streamable_http_manager"} <= loggers
    assert any(event["event"] == "serving" for event in events)
    assert any(event.get("status") == 404 for event in events)
    assert all({"event", "level", "timestamp"} <= set(event) for event in events)


def test_log_format_console_gives_readable_lines_for_every_logger(
    redis_url: str, tmp_path: Path
) -> None:
    """--log-format console: the same events as console lines, uvicorn's included."""
    lines = served_lines(redis_url, tmp_path / "serve.log", "--log-format", "console")
    assert not any(line.startswith("{") for line in lines)
    assert any("Started server process" in line and "uvicorn.error" in line for line in lines)
    assert any("serving" in line and "url=" in line for line in lines)


def test_an_agent_worker_logs_rqs_lines_as_json_and_keeps_stdout_for_the_agent(
    redis_url: str,
) -> None:
    """An RQ agent worker (one burst on an empty queue) logs RQ's own lines as JSON on
    stderr, and writes nothing on stdout, which belongs to the agent."""
    environment = {**os.environ, "BATON_REDIS_URL": redis_url}
    environment.pop("BATON_LOG_FORMAT", None)
    command = ["agent", "run", "executor", "--module", "baton.demo.executor", "--burst"]
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", *command],
        env=environment,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert any(event.get("logger", "").startswith("rq.") for event in events)


def test_an_unknown_log_format_is_one_line(redis_url: str) -> None:
    """BATON_LOG_FORMAT=xml stops any command with a usage error naming the variable."""
    done = subprocess.run(
        [sys.executable, "-m", "baton.server.cli", "status"],
        env={**os.environ, "BATON_REDIS_URL": redis_url, "BATON_LOG_FORMAT": "xml"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "baton: error: BATON_LOG_FORMAT must be one of auto, json, console, not 'xml'"
    )
